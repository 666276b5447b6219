"""kill -9 the server under traffic spread over many streams and queues, with
checkpoints taken while it runs, restart, and check every promise a reply made: each
commit carries many logs in one journal record, so this is where a commit that is
only half in the logs would show.

- every acked XADD is in its stream, with its fields; acked deliveries stay acked;
  delivered, unacked entries stay pending for the same consumer;
- every acked Q.PUSH is in its queue; a message whose Q.ACK was answered is never
  delivered again; each subscriber holds each source message exactly once, in order;
- after a clean stop, `narad check` finds the data dir clean.
"""

from __future__ import annotations

import random
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import pytest
import redis

from tests.servers import NaradProcess, kill_under_load, wait_until

ROUNDS = 3
STREAMS = [b"s%d" % i for i in range(60)]
QUEUES = [b"q%d" % i for i in range(8)]
GROUP = "g"


def fan(queue: bytes) -> bytes:
    return b"fan-" + queue


@dataclass
class Observed:
    added: dict[bytes, dict[bytes, bytes]] = field(default_factory=dict)  # stream -> ID -> n
    delivered: dict[tuple[bytes, bytes], str] = field(default_factory=dict)  # -> consumer
    acked: set[tuple[bytes, bytes]] = field(default_factory=set)
    ack_sent: set[tuple[bytes, bytes]] = field(default_factory=set)
    pushed: dict[bytes, dict[bytes, bytes]] = field(default_factory=dict)  # queue -> ID -> payload
    q_acked: set[tuple[bytes, bytes]] = field(default_factory=set)
    q_ack_sent: set[tuple[bytes, bytes]] = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock)


def producer(port: int, seen: Observed, first: int, stop: threading.Event) -> None:
    client = redis.Redis(port=port, socket_timeout=5)
    rng = random.Random(first)
    n = first
    try:
        while not stop.is_set():
            pipe = client.pipeline(transaction=False)
            batch = [(rng.choice(STREAMS), b"%d" % (n + i)) for i in range(8)]
            for key, value in batch:
                pipe.xadd(key, {"n": value})
            for (key, value), sid in zip(batch, pipe.execute(), strict=True):
                with seen.lock:
                    seen.added.setdefault(key, {})[sid] = value
            n += len(batch)
    except (redis.ConnectionError, redis.TimeoutError):
        return


def consumer(port: int, name: str, seen: Observed, stop: threading.Event) -> None:
    client = redis.Redis(port=port, socket_timeout=5)
    rng = random.Random(name)
    try:
        while not stop.is_set():
            keys = rng.sample(STREAMS, 10)
            reply = client.xreadgroup(GROUP, name, {k: ">" for k in keys}, count=5, block=50)
            for key, got in reply or []:
                ids = [sid for sid, _ in got]
                with seen.lock:
                    for sid in ids:
                        seen.delivered[key, sid] = name
                to_ack = [sid for sid in ids if rng.random() < 0.6]
                if to_ack:
                    with seen.lock:
                        seen.ack_sent.update((key, sid) for sid in to_ack)
                    client.xack(key, GROUP, *to_ack)
                    with seen.lock:
                        seen.acked.update((key, sid) for sid in to_ack)
    except (redis.ConnectionError, redis.TimeoutError):
        return


def queue_worker(port: int, seen: Observed, first: int, stop: threading.Event) -> None:
    """Pushes to random queues and pops and acks from others."""
    client = redis.Redis(port=port, socket_timeout=5, protocol=3)
    rng = random.Random(first)
    n = first
    try:
        while not stop.is_set():
            queue = rng.choice(QUEUES)
            payload = b"%d" % n
            n += 1
            sid = client.execute_command("Q.PUSH", queue, payload)
            with seen.lock:
                seen.pushed.setdefault(queue, {})[sid] = payload
            queue = rng.choice(QUEUES)
            messages = client.execute_command("Q.POP", queue, "COUNT", 5)
            to_ack = [m for m in messages or [] if rng.random() < 0.7]
            if to_ack:
                with seen.lock:
                    seen.q_ack_sent.update((queue, m[b"id"]) for m in to_ack)
                client.execute_command("Q.ACK", queue, *[m[b"receipt"] for m in to_ack])
                with seen.lock:
                    seen.q_acked.update((queue, m[b"id"]) for m in to_ack)
    except (redis.ConnectionError, redis.TimeoutError):
        return


def watcher(port: int, taken: list[int], stop: threading.Event) -> None:
    """Notes how many checkpoints the server has taken since it started."""
    client = redis.Redis(port=port, socket_timeout=5)
    try:
        while not stop.wait(0.2):
            taken.append(int(client.info("narad")["checkpoints"]))
    except (redis.ConnectionError, redis.TimeoutError):
        return


def check(server: NaradProcess, seen: Observed) -> None:
    r = server.client()
    for key, added in seen.added.items():
        stored = dict(r.xrange(key))
        for sid, n in added.items():
            assert stored.get(sid, {}).get(b"n") == n, f"acked XADD {key!r} {sid!r} lost"
    pending: dict[tuple[bytes, bytes], dict] = {}  # type: ignore[type-arg]
    for key in STREAMS:
        for p in r.xpending_range(key, GROUP, "-", "+", count=10**6):
            pending[key, p["message_id"]] = p
    for at in seen.acked:
        assert at not in pending, f"acked delivery {at!r} is pending again"
    for at, name in seen.delivered.items():
        if at not in seen.ack_sent:
            assert at in pending, f"delivered entry {at!r} is no longer pending"
            assert pending[at]["consumer"] == name.encode()
    r3 = server.client(protocol=3)
    for queue in QUEUES:
        entries = dict(r3.xrange(queue))
        for sid, payload in seen.pushed.get(queue, {}).items():
            assert entries.get(sid) == {b"payload": payload}, f"acked push {queue!r} {sid!r} lost"
        visible: set[bytes] = set()
        while batch := r3.execute_command(
            "Q.POP", queue, "COUNT", 10_000, "VISIBILITY", 1_000
        ):
            visible.update(m[b"id"] for m in batch)
        assert not {(queue, sid) for sid in visible} & seen.q_acked, "an acked message came back"
        wait_until(lambda q=queue: r3.xlen(fan(q)) == r3.xlen(q), timeout=20)
        copies = [fields[b"source_id"] for _, fields in r3.xrange(fan(queue))]
        assert copies == list(entries), f"subscriber of {queue!r} differs from its source"


@pytest.mark.slow
def test_kill_9_with_many_streams_keeps_every_promise(tmp_path: Path) -> None:
    rng = random.Random(1201)
    settings = ["--checkpoint-seconds", "1", "--checkpoint-bytes", "1mb"]
    server = NaradProcess(tmp_path, settings).start()
    try:
        r = server.client(protocol=3)
        for key in STREAMS:
            r.xgroup_create(key, GROUP, id="0", mkstream=True)
        for queue in QUEUES:
            r.execute_command("Q.CREATE", queue, "VISIBILITY", 600_000)
            r.execute_command("Q.CREATE", fan(queue))
            r.execute_command("Q.SUBSCRIBE", fan(queue), queue, "FROM", "EARLIEST")
        seen = Observed()
        taken: list[int] = [0]
        for round_ in range(ROUNDS):
            base = round_ * 10**7
            workers = [
                *(partial(producer, server.port, seen, base + i * 10**6) for i in range(2)),
                *(partial(consumer, server.port, f"c{i}", seen) for i in range(2)),
                partial(queue_worker, server.port, seen, base + 5 * 10**6),
                partial(watcher, server.port, taken),
            ]
            kill_under_load(server, workers, rng.uniform(1.0, 2.0))
            server.start()
            check(server, seen)
        assert max(taken) >= 2  # one at start, and at least one under load
        assert sum(len(a) for a in seen.added.values()) > 200 and seen.acked and seen.q_acked
    finally:
        server.stop()
    done = subprocess.run(
        [sys.executable, "-m", "narad", "check", str(server.folder / "data")],
        capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
