"""kill -9 the server while producers push and consumers pop and ack, restart, and
check every promise a reply made (docs/queues.md):

- every acked Q.PUSH is in the queue, and its DEDUP key still answers its ID;
- a message whose Q.ACK was answered is never delivered again;
- a delivered, unacked message stays in flight until its deadline and keeps its
  receipt (Q.TOUCH with it is accepted);
- the subscriber holds each source message exactly once, in order;
- at the end, with every deadline passed, every acked push not consumer-acked is
  delivered again.
"""

from __future__ import annotations

import random
import threading
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import pytest
import redis

from tests.servers import NaradProcess, kill_under_load, wait_until

ROUNDS = 3
QUEUE, FAN = "jobs", "fanout"


@dataclass
class Observed:
    pushed: dict[bytes, bytes] = field(default_factory=dict)  # ID -> payload (push acked)
    receipts: dict[bytes, bytes] = field(default_factory=dict)  # ID -> latest known receipt
    acked: set[bytes] = field(default_factory=set)  # Q.ACK answered
    ack_sent: set[bytes] = field(default_factory=set)  # Q.ACK sent, maybe not applied
    lock: threading.Lock = field(default_factory=threading.Lock)


def producer(port: int, seen: Observed, stop: threading.Event, first: int) -> None:
    client = redis.Redis(port=port, socket_timeout=5)
    n = first
    try:
        while not stop.is_set():
            payload = b"%d" % n
            sid = client.execute_command("Q.PUSH", QUEUE, "DEDUP", payload, payload)
            with seen.lock:
                seen.pushed[sid] = payload
            n += 1
    except (redis.ConnectionError, redis.TimeoutError):
        return


def consumer(port: int, seen: Observed, stop: threading.Event) -> None:
    client = redis.Redis(port=port, socket_timeout=5, protocol=3)
    try:
        while not stop.is_set():
            messages = client.execute_command("Q.POP", QUEUE, "COUNT", 10, "BLOCK", 100)
            if not messages:
                continue
            with seen.lock:
                for m in messages:
                    seen.receipts[m[b"id"]] = m[b"receipt"]
            to_ack = [m for m in messages if random.random() < 0.7]
            if to_ack:
                with seen.lock:
                    seen.ack_sent.update(m[b"id"] for m in to_ack)
                client.execute_command("Q.ACK", QUEUE, *[m[b"receipt"] for m in to_ack])
                with seen.lock:
                    seen.acked.update(m[b"id"] for m in to_ack)
    except (redis.ConnectionError, redis.TimeoutError):
        return


def run_round(server: NaradProcess, seen: Observed, first: int, rng: random.Random) -> None:
    producers = [
        partial(producer, server.port, seen, first=first + i * 10**6) for i in range(2)
    ]
    consumers = [partial(consumer, server.port, seen) for _ in range(2)]
    kill_under_load(server, [*producers, *consumers], rng.uniform(0.5, 1.5))


def check(r: redis.Redis, seen: Observed) -> None:
    entries = dict(r.xrange(QUEUE))
    for sid, payload in seen.pushed.items():
        assert entries.get(sid) == {b"payload": payload}, f"acked push {sid!r} lost"
    sample = random.sample(sorted(seen.pushed), min(200, len(seen.pushed)))
    for sid in sample:  # DEDUP keys are durable state too
        payload = seen.pushed[sid]
        assert r.execute_command("Q.PUSH", QUEUE, "DEDUP", payload, payload) == sid
    # Delivered and not acked: still in flight, so not visible before its deadline,
    # and under the same receipt. Acked: never delivered again.
    in_flight = {sid for sid in seen.receipts if sid not in seen.ack_sent}
    visible = []
    while batch := r.execute_command("Q.POP", QUEUE, "COUNT", 10_000, "VISIBILITY", 600_000):
        visible += batch
    redelivered = {m[b"id"] for m in visible}
    assert not redelivered & in_flight
    assert not redelivered & seen.acked
    seen.receipts.update((m[b"id"], m[b"receipt"]) for m in visible)
    for sid in in_flight:
        assert r.execute_command("Q.TOUCH", QUEUE, seen.receipts[sid], 600_000) == b"OK"
    # The subscriber holds each source message once, in order.
    wait_until(lambda: r.xlen(FAN) == r.xlen(QUEUE), timeout=20)
    copies = [fields[b"source_id"] for _, fields in r.xrange(FAN)]
    assert copies == list(entries)


@pytest.mark.slow
def test_queue_kill9_rounds(tmp_path: Path) -> None:
    rng = random.Random(7)
    server = NaradProcess(tmp_path, ["--enable-debug-command", "yes"]).start()
    try:
        r = server.client(protocol=3)
        r.execute_command("Q.CREATE", QUEUE, "VISIBILITY", 600_000)
        r.execute_command("Q.CREATE", FAN)
        r.execute_command("Q.SUBSCRIBE", FAN, QUEUE, "FROM", "EARLIEST")
        seen = Observed()
        for i in range(ROUNDS):
            run_round(server, seen, i * 10**7, rng)
            server.start()
            check(server.client(protocol=3), seen)
        assert seen.pushed and seen.acked
        # Every deadline passes: what was pushed and not acked comes back, and no
        # message whose ack was answered is delivered again.
        r = server.client(protocol=3)
        r.execute_command("DEBUG", "CLOCK", "ADVANCE", 700_000)
        delivered: set[bytes] = set()
        while batch := r.execute_command("Q.POP", QUEUE, "COUNT", 1000):
            delivered.update(m[b"id"] for m in batch)
        assert not delivered & seen.acked
        assert set(seen.pushed) - seen.ack_sent <= delivered
    finally:
        server.stop()
