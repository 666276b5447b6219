"""The queue state machine on its own (narad/queues/queue.py): whatever sequence of
ops built the state live, replaying the state log, with or without a snapshot in
the middle, rebuilds the same state."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from narad.queues.queue import IN_FLIGHT, Queue, Settings, unpack
from narad.streams import stream as stream_module
from narad.streams.ids import pack_id
from tests import standalone


def open_queue(folder: Path) -> Queue:
    stream = standalone.open_stream(1, folder)
    if stream.queue is None:
        stream.log_op(["q.create", Settings(maxreceives=3).to_list()])
    assert stream.queue is not None
    return stream.queue


class Driver:
    """Plays commands the way narad/queues/service.py does, on a simulated clock."""

    def __init__(self, queue: Queue) -> None:
        self.queue = queue
        self.now = 1_000_000
        self.ms = 1

    def push(self, delay: int, dedup: bytes | None) -> None:
        stream = self.queue.stream
        self.ms += 1
        offset = stream.add(self.ms << 64, [b"payload", b"x"])
        if delay:
            stream.log_op(["q.delay", self.now + delay, [offset]])
        if dedup is not None:
            stream.log_op(["q.dedup", dedup, pack_id(self.ms << 64), self.now + 500])

    def pop(self, count: int) -> None:
        self.expire()
        offsets, cursor = self.queue.choose(count)
        if offsets:
            delivery = self.queue.deliveries + 1
            self.queue.stream.log_op(
                ["q.deliver", delivery, self.now + 300, self.now, cursor, offsets]
            )
        elif cursor != self.queue.cursor:
            self.queue.stream.log_op(["q.seek", cursor])

    def in_flight(self) -> list[int]:
        return sorted(o for o, v in self.queue.tracked.items() if unpack(v).state == IN_FLIGHT)

    def settle(self, pick: int, how: str) -> None:
        offsets = self.in_flight()
        if not offsets:
            return
        offset = offsets[pick % len(offsets)]
        stream = self.queue.stream
        if how == "ack":
            stream.log_op(["q.ack", [offset]])
        elif how == "nack":
            stream.log_op(["q.nack", 0, [offset]])
        elif how == "nack-later":
            stream.log_op(["q.nack", self.now + 200, [offset]])
        else:
            stream.log_op(["q.touch", offset, self.now + 400])

    def advance(self, ms: int) -> None:
        self.now += ms
        self.expire()

    def expire(self) -> None:
        _, dead = self.queue.expire(self.now)
        if dead:
            self.queue.stream.log_op(["q.dead", 1, dead])

    def seek(self, to_start: bool) -> None:
        stream = self.queue.stream
        stream.log_op(["q.seek", stream.start if to_start else stream.data.next_offset])


def durable_view(queue: Queue, now: int) -> tuple[object, ...]:
    queue.expire(now)  # memory-only steps: replay takes them again
    return (
        dict(queue.tracked),
        queue.cursor,
        queue.deliveries,
        (queue.acked, queue.dead_lettered, queue.dropped),
        dict(queue.dedup),
        queue.settings,
    )


steps = st.lists(
    st.one_of(
        st.tuples(
            st.just("push"), st.sampled_from([0, 0, 250]), st.sampled_from([None, b"k1", b"k2"])
        ),
        st.tuples(st.just("pop"), st.integers(1, 4)),
        st.tuples(
            st.just("settle"),
            st.integers(0, 50),
            st.sampled_from(["ack", "nack", "nack-later", "touch"]),
        ),
        st.tuples(st.just("advance"), st.sampled_from([100, 300, 700])),
        st.tuples(st.just("seek"), st.booleans()),
        st.tuples(st.just("compact")),
    ),
    max_size=60,
)


@settings(max_examples=60, deadline=None)
@given(steps=steps)
def test_replay_rebuilds_the_live_state(steps: list[tuple[object, ...]]) -> None:
    with tempfile.TemporaryDirectory() as tmp, pytest.MonkeyPatch.context() as patch:
        folder = Path(tmp)
        driver = Driver(open_queue(folder))
        for step in steps:
            name, args = step[0], step[1:]
            if name == "compact":
                patch.setattr(stream_module, "STATE_COMPACT_BYTES", 1)
                assert driver.queue.stream.compact_if_due()
                patch.setattr(stream_module, "STATE_COMPACT_BYTES", 16 << 20)
            else:
                getattr(driver, str(name))(*args)
        live = durable_view(driver.queue, driver.now)
        driver.queue.stream.close()
        reopened = open_queue(folder)
        try:
            assert durable_view(reopened, driver.now) == live
        finally:
            reopened.stream.close()
