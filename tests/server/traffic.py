"""The traffic the crash tests run against a server, what its replies promised, and
the checks of those promises on what a crash left.

Threads drive a server with redis-py across the streams and queues of a Traffic:
producers pipeline XADDs, group consumers XREADGROUP and XACK about half of what they
are given, queue workers Q.PUSH, Q.POP and Q.ACK most of what they pop (each queue
copied by a fan-out subscriber, Q.SUBSCRIBE), and a trimmer XTRIMs MINID now and then.
Each notes every reply in one ordered list of events (Events); clients never retry, so
each reply noted is that command's, and a command whose effect may land without its
reply (XACK, Q.ACK, XTRIM) is noted before it is sent as well.

Promises reads what a prefix of the events promised. The checks, through a server
opened on what the crash left: every answered XADD and Q.PUSH is there with its
fields; every answered XACK and Q.ACK holds (the entry is not pending, the message
never visible again); an entry delivered by XREADGROUP and not acked is pending for
its consumer, and a message delivered by Q.POP and not acked is still in flight under
its receipt (a Q.ACK with it counts it); an answered XTRIM MINID holds, and no pending
entry lacks its entry unless an XTRIM sent before may have removed it; Q.STATS agrees
with XRANGE; each subscriber holds each source message exactly once, in the source's
order; `narad check` reports on a data dir.
"""

from __future__ import annotations

import random
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from tests.servers import wait_until

GROUP = "g"
VISIBILITY_MS = 600_000  # no delivery expires while a test runs


@dataclass(frozen=True)
class Layout:
    """The streams and queues the traffic goes over."""

    streams: list[bytes]
    queues: list[bytes]
    trimmed: list[bytes]  # the streams XTRIM MINID cuts from the front now and then


def fan(queue: bytes) -> bytes:
    return b"fan-" + queue


def _client(port: int, **kwargs: Any) -> redis.Redis:
    # No retries: a command is sent once, so each reply noted is that command's.
    return redis.Redis(port=port, socket_timeout=10, retry=Retry(NoBackoff(), 0), **kwargs)


def _command(client: redis.Redis, *args: Any) -> Any:
    return client.execute_command(*args)  # type: ignore[no-untyped-call]


def _entries(client: redis.Redis, key: bytes) -> dict[bytes, dict[bytes, bytes]]:
    """XRANGE of `key`: ID -> fields, in ID order."""
    found: Any = client.xrange(key)
    return dict(found)


def _id(sid: bytes) -> tuple[int, int]:
    ms, seq = sid.split(b"-")
    return int(ms), int(seq)


# -- what the replies said ------------------------------------------------------------


@dataclass
class Events:
    """Every reply the clients received, in order, across runs. Each event is a
    tuple (kind, key, ID, detail): "add" (detail: the field n), "deliver" (detail:
    the consumer), "ack-sent" and "acked", "trim-sent" and "trimmed" (ID: the MINID)
    for streams; "push" (detail: the payload), "pop" (detail: the receipt),
    "q-ack-sent" and "q-acked" for queues. The "-sent" events are noted before their
    command is sent, the others after its reply came."""

    items: list[tuple[str, bytes, bytes, Any]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def note(self, *events: tuple[str, bytes, bytes, Any]) -> None:
        with self.lock:
            self.items.extend(events)

    def count(self) -> int:
        with self.lock:
            return len(self.items)


@dataclass
class Promises:
    """What a cut must hold: what the events its fsync policy made durable say (the
    adds, deliveries and acks), read against every command sent before it (the
    "-sent" events: an XACK or Q.ACK sent, answered or not, may have reached the
    cut, so its entry may be pending or not)."""

    added: dict[bytes, dict[bytes, bytes]] = field(default_factory=dict)  # stream -> ID -> n
    delivered: dict[tuple[bytes, bytes], bytes] = field(default_factory=dict)  # -> consumer
    ack_sent: set[tuple[bytes, bytes]] = field(default_factory=set)
    # stream -> the highest MINID of an XTRIM sent / answered
    trim_sent: dict[bytes, tuple[int, int]] = field(default_factory=dict)
    trimmed: dict[bytes, tuple[int, int]] = field(default_factory=dict)
    acked: set[tuple[bytes, bytes]] = field(default_factory=set)
    pushed: dict[bytes, dict[bytes, bytes]] = field(default_factory=dict)  # queue -> ID -> payload
    popped: dict[tuple[bytes, bytes], bytes] = field(default_factory=dict)  # -> receipt
    q_ack_sent: set[tuple[bytes, bytes]] = field(default_factory=set)
    q_acked: set[tuple[bytes, bytes]] = field(default_factory=set)

    @classmethod
    def of(cls, events: list[tuple[str, bytes, bytes, Any]], durable: int) -> Promises:
        """What `events` promise, of which the first `durable` were made durable."""
        made = cls()
        for at, (kind, key, sid, detail) in enumerate(events):
            if kind == "ack-sent":
                made.ack_sent.add((key, sid))
            elif kind == "trim-sent":
                made.trim_sent[key] = max(made.trim_sent.get(key, (0, 0)), _id(sid))
            elif kind == "q-ack-sent":
                made.q_ack_sent.add((key, sid))
            elif at >= durable:
                continue
            elif kind == "add":
                made.added.setdefault(key, {})[sid] = detail
            elif kind == "deliver":
                made.delivered[key, sid] = detail
            elif kind == "acked":
                made.acked.add((key, sid))
            elif kind == "trimmed":
                made.trimmed[key] = max(made.trimmed.get(key, (0, 0)), _id(sid))
            elif kind == "push":
                made.pushed.setdefault(key, {})[sid] = detail
            elif kind == "pop":
                made.popped[key, sid] = detail
            else:
                assert kind == "q-acked", kind
                made.q_acked.add((key, sid))
        return made


# -- the traffic ----------------------------------------------------------------------


def producer(layout: Layout, events: Events, first: int, port: int, stop: threading.Event) -> None:
    """Pipelines of XADDs to random streams; each value of n is used once."""
    client = _client(port)
    rng = random.Random(first)
    n = first
    try:
        while not stop.is_set():
            pipe = client.pipeline(transaction=False)
            batch = [(rng.choice(layout.streams), b"%d" % (n + i)) for i in range(8)]
            for key, value in batch:
                pipe.xadd(key, {"n": value})
            ids = pipe.execute()
            events.note(
                *(("add", key, sid, value) for (key, value), sid in zip(batch, ids, strict=True))
            )
            n += len(batch)
    except (redis.ConnectionError, redis.TimeoutError):
        return


def consumer(layout: Layout, events: Events, name: str, port: int, stop: threading.Event) -> None:
    """XREADGROUP from random streams; XACK about half of what it is given."""
    client = _client(port)
    rng = random.Random(name)
    try:
        while not stop.is_set():
            keys = rng.sample(layout.streams, 10)
            reply: Any = client.xreadgroup(GROUP, name, {k: ">" for k in keys}, count=5, block=50)
            for key, got in reply or []:
                ids = [sid for sid, _ in got]
                events.note(*(("deliver", key, sid, name.encode()) for sid in ids))
                to_ack = [sid for sid in ids if rng.random() < 0.5]
                if to_ack:
                    events.note(*(("ack-sent", key, sid, None) for sid in to_ack))
                    client.xack(key, GROUP, *to_ack)
                    events.note(*(("acked", key, sid, None) for sid in to_ack))
    except (redis.ConnectionError, redis.TimeoutError):
        return


def queue_worker(
    layout: Layout, events: Events, first: int, port: int, stop: threading.Event
) -> None:
    """Q.PUSH to a random queue, then Q.POP from another and Q.ACK most of it."""
    client = _client(port, protocol=3)
    rng = random.Random(first)
    n = first
    try:
        while not stop.is_set():
            queue = rng.choice(layout.queues)
            payload = b"%d" % n
            n += 1
            sid = _command(client, "Q.PUSH", queue, payload)
            events.note(("push", queue, sid, payload))
            queue = rng.choice(layout.queues)
            messages = _command(client, "Q.POP", queue, "COUNT", 4) or []
            events.note(*(("pop", queue, m[b"id"], m[b"receipt"]) for m in messages))
            to_ack = [m for m in messages if rng.random() < 0.7]
            if to_ack:
                events.note(*(("q-ack-sent", queue, m[b"id"], None) for m in to_ack))
                _command(client, "Q.ACK", queue, *[m[b"receipt"] for m in to_ack])
                events.note(*(("q-acked", queue, m[b"id"], None) for m in to_ack))
    except (redis.ConnectionError, redis.TimeoutError):
        return


def trimmer(layout: Layout, events: Events, seed: int, port: int, stop: threading.Event) -> None:
    """Now and then XTRIM MINID = a stream's tenth ID or so (exact, not ~)."""
    client = _client(port)
    rng = random.Random(seed)
    try:
        while not stop.wait(0.05):
            key = rng.choice(layout.trimmed)
            head: Any = client.xrange(key, count=rng.randint(2, 20))
            if not head:
                continue
            minid = head[-1][0]
            events.note(("trim-sent", key, minid, None))
            client.xtrim(key, minid=minid, approximate=False)
            events.note(("trimmed", key, minid, None))
    except (redis.ConnectionError, redis.TimeoutError):
        return


def set_up(layout: Layout, port: int) -> None:
    """The groups, the queues and their subscribers, before any cut is armed."""
    client = _client(port, protocol=3)
    for key in layout.streams:
        client.xgroup_create(key, GROUP, id="0", mkstream=True)
    for queue in layout.queues:
        _command(client, "Q.CREATE", queue, "VISIBILITY", VISIBILITY_MS)
        _command(client, "Q.CREATE", fan(queue))
        _command(client, "Q.SUBSCRIBE", fan(queue), queue, "FROM", "EARLIEST")
    client.close()


# -- the checks ----------------------------------------------------------------------


def check_streams(layout: Layout, r: redis.Redis, cut: object, promised: Promises) -> None:
    for key in layout.streams:
        stored = _entries(r, key)
        # Entries below an XTRIM sent before the cut may be gone; below an answered
        # one, they must be.
        may_trim, trimmed = promised.trim_sent.get(key, (0, 0)), promised.trimmed.get(key)
        if trimmed is not None and stored:
            assert _id(next(iter(stored))) >= trimmed, f"{cut}: {key!r} trimmed entries are back"
        for sid, n in promised.added.get(key, {}).items():
            if sid not in stored and _id(sid) < may_trim:
                continue
            assert stored.get(sid, {}).get(b"n") == n, f"{cut}: answered XADD {key!r} {sid!r} lost"
        found: Any = r.xpending_range(key, GROUP, "-", "+", count=10**6)
        pending: dict[bytes, bytes] = {p["message_id"]: p["consumer"] for p in found}
        gone = {sid for sid in set(pending) - set(stored) if _id(sid) >= may_trim}
        assert not gone, f"{cut}: {key!r} has pending entries with no entry: {sorted(gone)}"
        [group] = r.xinfo_groups(key)
        last = _id(group["last-delivered-id"])
        for (at, sid), name in promised.delivered.items():
            if at != key:
                continue
            assert _id(sid) <= last, (
                f"{cut}: {key!r} {sid!r} was delivered but the group's last-delivered-id "
                f"is {group['last-delivered-id']!r}"
            )
            if (key, sid) in promised.acked:
                assert sid not in pending, f"{cut}: answered XACK {key!r} {sid!r} is pending again"
            elif (key, sid) not in promised.ack_sent:
                assert pending.get(sid) == name, (
                    f"{cut}: delivered entry {key!r} {sid!r} is not pending for {name!r}"
                )


def _copied(r3: redis.Redis, queue: bytes, count: int) -> bool:
    """Whether the subscriber of `queue` holds `count` copies (or more)."""
    found: Any = r3.xlen(fan(queue))
    return int(found) >= count


def check_queues(layout: Layout, r3: redis.Redis, cut: object, promised: Promises) -> None:
    for queue in layout.queues:
        entries = _entries(r3, queue)
        for sid, payload in promised.pushed.get(queue, {}).items():
            assert entries.get(sid) == {b"payload": payload}, (
                f"{cut}: answered Q.PUSH {queue!r} {sid!r} lost"
            )
        ids = list(entries)
        stats = _command(r3, "Q.STATS", queue)
        assert stats[b"pushed"] == len(ids), f"{cut}: {queue!r} Q.STATS {stats} vs XLEN {len(ids)}"
        if ids:
            assert (stats[b"first_id"], stats[b"last_id"]) == (ids[0], ids[-1]), (cut, stats)
        acked = {sid for at, sid in promised.q_acked if at == queue}
        in_flight = {
            sid: receipt
            for (at, sid), receipt in promised.popped.items()
            if at == queue and (at, sid) not in promised.q_ack_sent
        }
        tracked = stats[b"visible"] + stats[b"in_flight"] + stats[b"delayed"]
        assert tracked + len(acked) <= len(ids), f"{cut}: {queue!r} {stats}, {len(acked)} acked"
        assert stats[b"in_flight"] >= len(in_flight), f"{cut}: {queue!r} {stats}"
        copies = [fields[b"source_id"] for fields in _entries(r3, fan(queue)).values()]
        assert copies == ids[: len(copies)], f"{cut}: subscriber of {queue!r} is no prefix of it"
        visible: set[bytes] = set()
        for _ in range(len(ids) + 1):  # each round takes at least one, or the loop ends
            batch = _command(r3, "Q.POP", queue, "COUNT", 10_000, "VISIBILITY", 60_000)
            if not batch:
                break
            visible.update(m[b"id"] for m in batch)
        assert not visible & acked, f"{cut}: answered Q.ACK came back in {queue!r}"
        assert not visible & set(in_flight), f"{cut}: a delivered message of {queue!r} is visible"
        if in_flight:  # still in flight under the receipts their deliveries gave
            acked_now = _command(r3, "Q.ACK", queue, *in_flight.values())
            assert acked_now == len(in_flight), f"{cut}: {queue!r} receipts lost: {acked_now}"
        wait_until(partial(_copied, r3, queue, len(ids)), timeout=20)
        copies = [fields[b"source_id"] for fields in _entries(r3, fan(queue)).values()]
        assert copies == ids, f"{cut}: subscriber of {queue!r} differs from its source"


def narad_check(data: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "narad", "check", str(data)],
        capture_output=True,
        text=True,
        timeout=120,
    )
