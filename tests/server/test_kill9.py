"""kill -9 the server under concurrent XADD / XREADGROUP / XACK load, restart, and
check every promise a reply made: acked entries are there with their fields, acked
deliveries stay acked, delivered-but-unacked entries are still pending for the same
consumer with the same delivery count, IDs stay in order."""

from __future__ import annotations

import random
import threading
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import redis

from tests.servers import NaradProcess, kill_under_load

ROUNDS = 3
KEY = "orders"
GROUP = "workers"


@dataclass
class Observed:
    """What the clients were told, only from replies they received."""

    added: dict[bytes, bytes] = field(default_factory=dict)  # entry ID -> its n field
    delivered: dict[bytes, str] = field(default_factory=dict)  # entry ID -> consumer
    acked: set[bytes] = field(default_factory=set)  # XACK replied for these
    ack_sent: set[bytes] = field(default_factory=set)  # XACK sent, reply maybe lost
    lock: threading.Lock = field(default_factory=threading.Lock)


def producer(port: int, seen: Observed, stop: threading.Event, first: int) -> None:
    client = redis.Redis(port=port, socket_timeout=5)
    n = first
    try:
        while not stop.is_set():
            value = b"%d" % n
            sid = client.xadd(KEY, {"n": value, "pad": "x" * random.randint(0, 300)})
            with seen.lock:
                seen.added[sid] = value
            n += 1
    except (redis.ConnectionError, redis.TimeoutError):
        return


def consumer(port: int, name: str, seen: Observed, stop: threading.Event) -> None:
    client = redis.Redis(port=port, socket_timeout=5)
    try:
        while not stop.is_set():
            reply = client.xreadgroup(GROUP, name, {KEY: ">"}, count=10, block=100)
            if not reply:
                continue
            ids = [sid for sid, _ in reply[0][1]]
            with seen.lock:
                for sid in ids:
                    seen.delivered[sid] = name
            to_ack = [
                sid for sid in ids if int(sid.split(b"-")[1]) % 2 == 0 or random.random() < 0.5
            ]
            if to_ack:
                with seen.lock:
                    seen.ack_sent.update(to_ack)
                client.xack(KEY, GROUP, *to_ack)
                with seen.lock:
                    seen.acked.update(to_ack)
    except (redis.ConnectionError, redis.TimeoutError):
        return


def run_round(server: NaradProcess, seen: Observed, first: int, rng: random.Random) -> None:
    producers = [
        partial(producer, server.port, seen, first=first + i * 10**6) for i in range(2)
    ]
    consumers = [partial(consumer, server.port, f"c{i}", seen) for i in range(2)]
    kill_under_load(server, [*producers, *consumers], rng.uniform(0.4, 1.0))


def check(server: NaradProcess, seen: Observed) -> None:
    client = server.client()
    entries = client.xrange(KEY, "-", "+")
    ids = [sid for sid, _ in entries]
    assert ids == sorted(ids, key=lambda s: tuple(int(p) for p in s.split(b"-")))
    assert len(set(ids)) == len(ids)
    stored = dict(entries)
    for sid, n in seen.added.items():
        assert sid in stored, f"acked XADD {sid!r} lost"
        assert stored[sid][b"n"] == n
    pending = {p["message_id"]: p for p in client.xpending_range(KEY, GROUP, "-", "+", count=10**6)}
    for sid in seen.acked:
        assert sid not in pending, f"acked delivery {sid!r} is pending again"
    for sid, consumer_name in seen.delivered.items():
        if sid in seen.ack_sent:
            continue  # its XACK may or may not have landed
        assert sid in pending, f"delivered entry {sid!r} is no longer pending"
        assert pending[sid]["consumer"] == consumer_name.encode()
        assert pending[sid]["times_delivered"] == 1


def test_kill_9_during_load_keeps_every_acked_promise(tmp_path: Path) -> None:
    rng = random.Random(1130)
    server = NaradProcess(tmp_path / "narad")
    server.start()
    server.client().xgroup_create(KEY, GROUP, id="0", mkstream=True)
    seen = Observed()
    try:
        for round_ in range(ROUNDS):
            run_round(server, seen, round_ * 10**7, rng)
            server.start()
            check(server, seen)
        assert len(seen.added) > 100 and seen.acked and seen.delivered
    finally:
        server.stop()
