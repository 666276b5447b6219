"""The queue service without a server (narad/queues/service.py): a real keyspace on a
data dir, and for what the server owns (narad/events.py) small real objects that
record what they are told, with a real event loop, never run, for the timer."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from narad.keyspace import Keyspace
from narad.log import decode_fields
from narad.queues.queue import Settings, new_secret
from narad.queues.service import QueueService
from narad.streams.stream import Stream
from tests.journaled import open_store


class Calls(list[tuple[int, bytes]]):
    """The (db, key) of every call, in order."""

    def __call__(self, db: int, key: bytes) -> None:
        self.append((db, key))


class KeyEvents:
    def __init__(self) -> None:
        self.written = Calls()
        self.signaled = Calls()
        self.wake = self.signaled

    def spoil(self, db: int, key: bytes) -> None:
        pass


class Commits:
    def __init__(self) -> None:
        self.scheduled = 0
        self.settled = 0

    def schedule(self) -> None:
        self.scheduled += 1

    def apply_held_back(self) -> None:
        self.settled += 1


class Timers:
    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.delays: list[float] = []

    def call_later(self, delay: float, callback: Callable[[], object]) -> asyncio.TimerHandle:
        self.delays.append(delay)
        return self.loop.call_later(delay, callback)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Keyspace]:
    store = open_store(tmp_path)
    yield store
    store.close()


@pytest.fixture
def timers() -> Iterator[Timers]:
    loop = asyncio.new_event_loop()
    yield Timers(loop)
    loop.close()


def create_queue(store: Keyspace, key: bytes, settings: Settings) -> Stream:
    stream = store.create_stream(0, key)
    stream.log_op(["q.create", settings.to_list(), new_secret()])
    return stream


def test_a_message_delivered_acked_and_one_dead_lettered_at_its_deadline(
    store: Keyspace, timers: Timers
) -> None:
    events, commits = KeyEvents(), Commits()
    service = QueueService(store, events, commits, timers)
    create_queue(store, b"dead", Settings())
    jobs = create_queue(store, b"jobs", Settings(visibility=1000, maxreceives=1, dlq=b"dead"))
    service.opened()
    queue = service.get(0, b"jobs")
    assert queue is not None and queue.stream is jobs

    service.append(jobs, [[b"payload", b"first"], [b"payload", b"second"]])
    assert events.written == [(0, b"jobs")]
    (first,) = service.deliver_raw(queue, 1, 1000)
    assert decode_fields(first[0].payload) == [b"payload", b"first"]
    assert timers.delays == [pytest.approx(1.0, abs=0.1)]
    assert service.ack(queue, [first[1]]) == 1

    assert len(service.deliver_raw(queue, 1, 1000)) == 1  # its only receive
    service.clock.advance(1001)
    settled = commits.settled
    service.tick()
    assert commits.settled == settled + 1
    assert events.written == [(0, b"jobs"), (0, b"dead")]  # the dead letter
    dead = store.get(0, b"dead")
    assert dead is not None
    (letter,) = dead.data.read(0)
    fields = decode_fields(letter.payload)
    assert fields[:4] == [b"payload", b"second", b"origin", b"jobs"]
    assert queue.tracked == {}
