"""Consumer groups (narad/streams/groups.py) on real logs.

The durability contract, tested after every op by closing and reopening the stream
from its folder: every acked entry stays acked, every delivered-but-unacked entry is
pending for the same consumer with the same delivery count and time, and cursors,
read counters and consumers are exactly as they were. Lag and read-counter cases are
those of Redis's tests/unit/type/stream-cgroups.tcl (7.0).
"""

from __future__ import annotations

import gc
import random
import socket
import threading
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

import narad.node
from narad.commands import groups as group_commands
from narad.commands.table import COMMANDS
from narad.config import Config
from narad.connection import Client
from narad.dispatch import Dispatcher
from narad.errors import CommandError
from narad.keywatch import KeyWatch
from narad.node import Session
from narad.resp import NullArray, encode
from narad.streams import groups, ids
from narad.streams import stream as stream_module
from narad.streams.groups import ClaimOptions, Counters
from narad.streams.pel import Group
from narad.streams.stream import Stream
from tests import standalone
from tests.server.compare import mask_clock
from tests.servers import NaradProcess, RedisProcess, wait_until


def open_stream(folder: Path) -> Stream:
    return standalone.open_stream(1, folder)


def I(ms: int, seq: int = 0) -> int:  # noqa: E743 - reads like Redis's "ms-seq"
    return ids.make(ms, seq)


def fill(stream: Stream, *ms_values: int) -> None:
    for ms in ms_values:
        stream.add(I(ms), [b"f", b"%d" % ms])


def state(stream: Stream) -> dict[bytes, Any]:
    """Everything a group holds, in plain values (and its invariants checked)."""
    out: dict[bytes, Any] = {}
    for name, group in stream.groups.items():
        check_invariants(group)
        out[name] = (
            group.last_id,
            group.entries_read,
            [
                (sid, e.consumer.name, e.delivery_ms, e.delivery_count)
                for sid, e in group.pel.items()
            ],
            {c.name: (c.seen_ms, sorted(c.pending)) for c in group.consumers.values()},
            list(group.nacked),
        )
    return out


def check_invariants(group: Group) -> None:
    owned = 0
    for consumer in [*group.consumers.values(), group.unowned]:
        for sid in consumer.pending:
            assert group.pel[sid].consumer is consumer
        owned += len(consumer.pending)
    assert owned == len(group.pel)
    assert set(group.nacked) == group.unowned.pending  # the nack zone: XNACKed entries
    for entry in group.pel.values():
        if entry.consumer is not group.unowned:
            assert group.consumers[entry.consumer.name] is entry.consumer


class Harness:
    """A stream in a folder, reopened (as after a crash) at will."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.stream = open_stream(folder)

    def reopen(self) -> Stream:
        before = state(self.stream)
        self.stream.close()
        self.stream = open_stream(self.folder)
        assert state(self.stream) == before
        return self.stream

    def crash(self) -> Stream:
        """Reopen without closing: everything was synced when committed."""
        before = state(self.stream)
        self.stream = open_stream(self.folder)
        assert state(self.stream) == before
        return self.stream

    def group(self, name: bytes = b"g") -> Group:
        return self.stream.groups[name]


@pytest.fixture
def h(tmp_path: Path) -> Iterator[Harness]:
    harness = Harness(tmp_path / "s")
    yield harness
    harness.stream.close()


def pel_of(group: Group) -> list[tuple[int, bytes, int, int]]:
    return [(sid, e.consumer.name, e.delivery_ms, e.delivery_count) for sid, e in group.pel.items()]


# -- group and consumer lifecycle ---------------------------------------------------------


def test_create_setid_destroy_survive_reopen(h: Harness) -> None:
    fill(h.stream, 1, 2, 3)
    assert groups.create_group(h.stream, b"g", I(2), 2)
    assert not groups.create_group(h.stream, b"g", 0, None)
    assert groups.create_group(h.stream, b"other", 0, None)
    h.reopen()
    assert h.group().last_id == I(2) and h.group().entries_read == 2
    groups.set_group_id(h.stream, h.group(), I(1), None)
    h.reopen()
    assert h.group().last_id == I(1) and h.group().entries_read is None
    assert groups.destroy_group(h.stream, b"other")
    assert not groups.destroy_group(h.stream, b"other")
    h.reopen()
    assert list(h.stream.groups) == [b"g"]


def test_create_and_delete_consumer(h: Harness) -> None:
    fill(h.stream, 1, 2, 3)
    groups.create_group(h.stream, b"g", 0, None)
    assert groups.create_consumer(h.stream, h.group(), b"alice", 1000)
    assert not groups.create_consumer(h.stream, h.group(), b"alice", 2000)
    assert h.group().consumers[b"alice"].seen_ms == 1000
    groups.read_new(h.stream, h.group(), b"bob", 2, False, 3000)
    h.reopen()
    assert groups.delete_consumer(h.stream, h.group(), b"bob") == 2
    assert groups.delete_consumer(h.stream, h.group(), b"nobody") == 0
    h.reopen()
    assert list(h.group().consumers) == [b"alice"]
    assert not h.group().pel
    assert h.group().last_id == I(2)  # deleting a consumer does not move the cursor


# -- delivery, history, ack -------------------------------------------------------------------


def test_delivery_batch_is_pending_and_durable(h: Harness) -> None:
    fill(h.stream, 1, 2, 3, 4, 5)
    groups.create_group(h.stream, b"g", 0, None)
    records = h.stream.state.next_offset
    got = groups.read_new(h.stream, h.group(), b"alice", 3, False, 5000)
    assert [sid for sid, _ in got] == [I(1), I(2), I(3)]
    assert got[0][1] == [b"f", b"1"]
    assert h.stream.state.next_offset == records + 1  # one op for the whole batch
    group = h.crash().groups[b"g"]
    assert pel_of(group) == [(I(n), b"alice", 5000, 1) for n in (1, 2, 3)]
    assert group.last_id == I(3) and group.entries_read == 3
    assert group.consumers[b"alice"].seen_ms == 5000
    got = groups.read_new(h.stream, h.group(), b"bob", 0, False, 6000)
    assert [sid for sid, _ in got] == [I(4), I(5)]
    assert groups.read_new(h.stream, h.group(), b"bob", 0, False, 7000) == []
    h.reopen()
    assert h.group().consumers[b"bob"].seen_ms == 7000


def test_noack_moves_cursor_only(h: Harness) -> None:
    fill(h.stream, 1, 2)
    groups.create_group(h.stream, b"g", 0, None)
    got = groups.read_new(h.stream, h.group(), b"alice", 0, True, 100)
    assert len(got) == 2
    h.reopen()
    assert not h.group().pel
    assert h.group().last_id == I(2) and h.group().entries_read == 2
    assert b"alice" in h.group().consumers


def test_ack_leaves_nothing_behind(h: Harness) -> None:
    fill(h.stream, 1, 2, 3)
    groups.create_group(h.stream, b"g", 0, None)
    groups.read_new(h.stream, h.group(), b"alice", 0, False, 100)
    assert groups.ack(h.stream, h.group(), [I(1), I(1), I(9)]) == 1
    assert groups.ack(h.stream, h.group(), [I(1)]) == 0
    h.crash()
    assert list(h.group().pel) == [I(2), I(3)]
    assert groups.ack(h.stream, h.group(), [I(2), I(3)]) == 2
    h.reopen()
    group = h.group()
    assert not group.pel and not group.consumers[b"alice"].pending


def test_ack_without_change_writes_nothing(h: Harness) -> None:
    fill(h.stream, 1)
    groups.create_group(h.stream, b"g", 0, None)
    records = h.stream.state.next_offset
    assert groups.ack(h.stream, h.group(), [I(1)]) == 0
    assert h.stream.state.next_offset == records


def test_history_read_counts_a_delivery_except_for_deleted_entries(h: Harness) -> None:
    fill(h.stream, 1, 2, 3)
    groups.create_group(h.stream, b"g", 0, None)
    groups.read_new(h.stream, h.group(), b"alice", 0, False, 100)
    h.stream.delete([I(2)])
    got = groups.read_history(h.stream, h.group(), b"alice", 0, 0, 200)
    assert got == [(I(1), [b"f", b"1"]), (I(2), None), (I(3), [b"f", b"3"])]
    h.reopen()
    assert pel_of(h.group()) == [
        (I(1), b"alice", 200, 2),
        (I(2), b"alice", 100, 1),
        (I(3), b"alice", 200, 2),
    ]
    assert groups.read_history(h.stream, h.group(), b"alice", I(1), 1, 300) == [(I(2), None)]
    assert groups.read_history(h.stream, h.group(), b"bob", 0, 0, 400) == []
    h.reopen()
    assert h.group().consumers[b"bob"].seen_ms == 400  # a history read creates the consumer
    assert h.group().consumers[b"alice"].seen_ms == 300


def test_history_of_a_consumer_sharing_a_large_pel(h: Harness) -> None:
    fill(h.stream, *range(1, 41))
    groups.create_group(h.stream, b"g", 0, None)
    for n in range(40):
        groups.read_new(h.stream, h.group(), b"abc"[n % 3 : n % 3 + 1], 1, False, 10)
    group = h.group()
    for name in (b"a", b"b", b"c"):
        mine = sorted(group.consumers[name].pending)
        assert [s for s, _ in groups.read_history(h.stream, group, name, 0, 0, 20)] == mine
        assert [s for s, _ in groups.read_history(h.stream, group, name, mine[2], 4, 20)] == mine[
            3:7
        ]
        assert list(group.owned_ids(group.consumers[name], mine[1], mine[5])) == mine[1:6]
    h.reopen()


def test_setid_backwards_reassigns_pending_entries(h: Harness) -> None:
    # Redis's "PEL NACK reassignment after XGROUP SETID event".
    fill(h.stream, 1, 2, 3, 4)
    groups.create_group(h.stream, b"g", h.stream.last_id, None)
    fill(h.stream, 5)
    assert len(groups.read_new(h.stream, h.group(), b"c1", 0, False, 100)) == 1
    groups.set_group_id(h.stream, h.group(), 0, None)
    assert len(groups.read_new(h.stream, h.group(), b"c2", 0, False, 200)) == 5
    h.reopen()
    assert pel_of(h.group()) == [(I(n), b"c2", 200, 1) for n in range(1, 6)]
    assert not h.group().consumers[b"c1"].pending


# -- claims ----------------------------------------------------------------------------------


def claim(h: Harness, consumer: bytes, sids: list[int], now: int, **kw: Any) -> list[int]:
    opts = ClaimOptions(**kw)
    if "delivery_ms" not in kw:
        opts.delivery_ms = now
    claimed, _ = groups.claim(h.stream, h.group(), consumer, sids, opts, now)
    return claimed


def test_claim_moves_ownership_and_counts(h: Harness) -> None:
    fill(h.stream, 1, 2, 3)
    groups.create_group(h.stream, b"g", 0, None)
    groups.read_new(h.stream, h.group(), b"alice", 0, False, 1000)
    assert claim(h, b"bob", [I(1)], 1300, min_idle_ms=500) == []  # not idle long enough
    assert claim(h, b"bob", [I(1)], 1600, min_idle_ms=500) == [I(1)]
    h.reopen()
    assert pel_of(h.group())[0] == (I(1), b"bob", 1600, 2)
    assert h.group().consumers[b"bob"].seen_ms == 1600
    assert claim(h, b"carol", [I(1)], 1700, justid=True) == [I(1)]  # JUSTID: no count
    assert claim(h, b"carol", [I(2)], 1800, retry_count=7, delivery_ms=1234) == [I(2)]
    h.reopen()
    assert pel_of(h.group()) == [
        (I(1), b"carol", 1700, 2),
        (I(2), b"carol", 1234, 7),
        (I(3), b"alice", 1000, 1),
    ]


def test_claim_same_consumer_and_repeats(h: Harness) -> None:
    fill(h.stream, 1, 2)
    groups.create_group(h.stream, b"g", 0, None)
    groups.read_new(h.stream, h.group(), b"alice", 0, False, 1000)
    assert claim(h, b"alice", [I(1), I(1)], 2000) == [I(1), I(1)]
    # A repeat is judged after the first claim: idle 0 now, so MIN-IDLE skips it.
    assert claim(h, b"bob", [I(2), I(2)], 3000, min_idle_ms=10) == [I(2)]
    h.reopen()
    assert pel_of(h.group()) == [(I(1), b"alice", 2000, 3), (I(2), b"bob", 3000, 2)]


def test_claim_force_creates_pending_entries(h: Harness) -> None:
    fill(h.stream, 1, 2, 3)
    groups.create_group(h.stream, b"g", 0, None)
    assert claim(h, b"bob", [I(2)], 100) == []  # not pending, no FORCE
    assert claim(h, b"bob", [I(2)], 100, force=True, justid=True, min_idle_ms=50) == [I(2)]
    assert claim(h, b"bob", [I(3)], 100, force=True) == [I(3)]
    assert claim(h, b"bob", [I(9)], 100, force=True) == []  # not in the stream
    h.reopen()
    assert pel_of(h.group()) == [(I(2), b"bob", 100, 1), (I(3), b"bob", 100, 2)]
    assert h.group().last_id == 0  # FORCE does not move the cursor


def test_claim_drops_deleted_entries_and_lastid(h: Harness) -> None:
    # Redis's "XCLAIM with XDEL".
    fill(h.stream, 1, 2, 3)
    groups.create_group(h.stream, b"g", 0, None)
    groups.read_new(h.stream, h.group(), b"alice", 0, False, 100)
    h.stream.delete([I(2)])
    assert claim(h, b"bob", [I(1), I(2), I(3)], 200, last_id=I(7)) == [I(1), I(3)]
    h.reopen()
    assert pel_of(h.group()) == [(I(1), b"bob", 200, 2), (I(3), b"bob", 200, 2)]
    assert not h.group().consumers[b"alice"].pending
    assert h.group().last_id == I(7)
    records = h.stream.state.next_offset
    assert claim(h, b"bob", [I(2)], 300, last_id=I(5)) == []  # nothing changes: no op
    assert h.stream.state.next_offset == records


def test_claim_of_trimmed_entries(h: Harness) -> None:
    fill(h.stream, 1, 2, 3)
    groups.create_group(h.stream, b"g", 0, None)
    groups.read_new(h.stream, h.group(), b"alice", 0, False, 100)
    h.stream.trim(1, None, False, 0)
    assert claim(h, b"bob", [I(1), I(2), I(3)], 200) == [I(3)]
    h.reopen()
    assert list(h.group().pel) == [I(3)]


def autoclaim(
    h: Harness,
    start: int,
    count: int = 100,
    min_idle: int = 0,
    now: int = 1000,
    justid: bool = False,
) -> tuple[int, list[int], list[int]]:
    return groups.autoclaim(h.stream, h.group(), b"bob", min_idle, start, count, justid, now)


def test_autoclaim_as_an_iterator(h: Harness) -> None:
    fill(h.stream, 1, 2, 3, 4, 5)
    groups.create_group(h.stream, b"g", 0, None)
    groups.read_new(h.stream, h.group(), b"alice", 0, False, 100)
    assert autoclaim(h, 0, 2, 10) == (I(3), [I(1), I(2)], [])
    assert autoclaim(h, I(3), 2, 10) == (I(5), [I(3), I(4)], [])
    assert autoclaim(h, I(5), 1, 10) == (0, [I(5)], [])
    h.reopen()
    assert all(e.consumer.name == b"bob" and e.delivery_count == 2 for e in h.group().pel.values())


def test_autoclaim_with_deleted_entries_and_count(h: Harness) -> None:
    # Redis's "XAUTOCLAIM with XDEL and count".
    fill(h.stream, 1, 2, 3)
    groups.create_group(h.stream, b"g", 0, None)
    groups.read_new(h.stream, h.group(), b"alice", 0, False, 100)
    h.stream.delete([I(1)])
    h.stream.delete([I(2)])
    assert autoclaim(h, 0, 1) == (I(2), [], [I(1)])
    assert autoclaim(h, I(2), 1) == (I(3), [], [I(2)])
    assert autoclaim(h, I(3), 1) == (0, [I(3)], [])
    h.reopen()
    assert pel_of(h.group()) == [(I(3), b"bob", 1000, 2)]


def test_autoclaim_idle_and_attempts(h: Harness) -> None:
    fill(h.stream, *range(1, 31))
    groups.create_group(h.stream, b"g", 0, None)
    groups.read_new(h.stream, h.group(), b"alice", 25, False, 100)
    groups.read_new(h.stream, h.group(), b"alice", 0, False, 900)
    # Only the first 25 are idle enough; COUNT 2 looks at 20 entries at most.
    assert autoclaim(h, 0, 2, min_idle=500) == (I(3), [I(1), I(2)], [])
    assert autoclaim(h, I(25), 1, min_idle=500) == (I(26), [I(25)], [])
    assert autoclaim(h, I(26), 1, min_idle=500) == (0, [], [])  # 5 looked at, none idle
    records = h.stream.state.next_offset
    assert autoclaim(h, I(26), 1, min_idle=500) == (0, [], [])
    assert h.stream.state.next_offset == records
    assert autoclaim(h, 0, 100, justid=True)[1] == list(range(I(1), I(31), I(1)))
    h.reopen()
    counts = {sid: e.delivery_count for sid, e in h.group().pel.items()}
    assert counts[I(1)] == 2 and counts[I(4)] == 1 and counts[I(30)] == 1


# -- read counter and lag (stream-cgroups.tcl) --------------------------------------------------


def lag_of(stream: Stream, name: bytes = b"g1") -> tuple[int | None, int | None]:
    group = stream.groups[name]
    return group.entries_read, Counters.of(stream).lag(group)


def test_read_counter_and_lag_in_empty_streams(h: Harness) -> None:
    groups.create_group(h.stream, b"g1", 0, None)
    assert lag_of(h.stream) == (None, 0)
    fill(h.stream, 1)
    h.stream.delete([I(1)])
    assert h.stream.max_deleted_id == I(1) and h.stream.entries_added == 1
    assert lag_of(h.stream) == (None, 0)


def test_read_counter_and_lag_sanity(h: Harness) -> None:
    fill(h.stream, 1, 2, 3, 4, 5)
    groups.create_group(h.stream, b"g1", 0, None)
    g1 = h.stream.groups[b"g1"]
    assert lag_of(h.stream) == (None, 5)
    groups.read_new(h.stream, g1, b"c11", 1, False, 1)
    assert lag_of(h.stream) == (1, 4)
    groups.read_new(h.stream, g1, b"c12", 10, False, 1)
    assert lag_of(h.stream) == (5, 0)
    fill(h.stream, 6)
    assert lag_of(h.reopen()) == (5, 1)


def test_lag_with_xdels(h: Harness) -> None:
    fill(h.stream, 1, 2, 3, 4, 5)
    h.stream.delete([I(3)])
    groups.create_group(h.stream, b"g1", 0, None)
    groups.create_group(h.stream, b"g2", 0, None)
    assert lag_of(h.stream) == (None, None)
    for _ in range(3):
        groups.read_new(h.stream, h.stream.groups[b"g1"], b"c11", 1, False, 1)
        assert lag_of(h.stream) == (None, None)
    groups.read_new(h.stream, h.stream.groups[b"g1"], b"c11", 1, False, 1)
    assert lag_of(h.stream) == (5, 0)
    fill(h.stream, 6)
    assert lag_of(h.stream) == (5, 1)
    h.stream.trim(None, I(3), False, 0)
    assert lag_of(h.stream) == (5, 1)
    assert lag_of(h.stream, b"g2") == (None, 3)
    h.stream.trim(None, I(5), False, 0)
    assert lag_of(h.reopen()) == (5, 1)
    assert lag_of(h.stream, b"g2") == (None, 2)


def test_estimates_of_the_read_counter() -> None:
    c = Counters(length=3, entries_added=5, last_id=I(5), max_deleted_id=0, first_id=I(3))
    assert c.estimate_read(I(5)) == 5
    assert c.estimate_read(I(6)) is None
    assert c.estimate_read(I(1)) == 2
    assert c.estimate_read(I(3)) == 3
    assert c.estimate_read(I(4)) is None
    empty = Counters(length=0, entries_added=5, last_id=I(5), max_deleted_id=I(5), first_id=0)
    assert empty.estimate_read(I(2)) == 5 and empty.estimate_read(I(6)) is None
    assert Counters(0, 0, 0, 0, 0).estimate_read(I(6)) == 0
    fragmented = Counters(3, 5, I(5), I(4), I(1))
    assert fragmented.has_tombstones(I(2)) and not fragmented.has_tombstones(I(5))
    assert fragmented.estimate_read(I(1)) is None


def test_reading_past_a_tombstone_keeps_redis_count(h: Harness) -> None:
    # Redis only remembers the newest tombstone: a deletion behind the delivered entry
    # is not seen, so the counter undercounts (and so does Narad, to answer the same).
    fill(h.stream, 1, 2, 3)
    groups.create_group(h.stream, b"g1", I(1), 1)
    h.stream.delete([I(2)])
    groups.read_new(h.stream, h.stream.groups[b"g1"], b"c", 0, False, 1)
    assert lag_of(h.stream) == (2, 1)


# -- snapshots and compaction -----------------------------------------------------------------


def build_busy_stream(stream: Stream) -> None:
    fill(stream, *range(1, 61))
    groups.create_group(stream, b"g", 0, None)
    groups.create_group(stream, b"idle", I(30), None)
    groups.create_consumer(stream, stream.groups[b"g"], b"nobody", 5)
    g = stream.groups[b"g"]
    for n, name in enumerate([b"a", b"b", b"c", b"a"]):
        groups.read_new(stream, g, name, 10, False, 100 + n)
    groups.ack(stream, g, [I(n) for n in range(1, 41, 3)])
    groups.claim(stream, g, b"d", [I(5), I(6)], ClaimOptions(delivery_ms=50, retry_count=9), 300)
    groups.read_history(stream, g, b"a", 0, 3, 400)


def test_snapshot_roundtrip_is_exact(h: Harness) -> None:
    build_busy_stream(h.stream)
    before = state(h.stream)
    for name, group in list(h.stream.groups.items()):
        copy = Group.from_snapshot(group.snapshot())
        assert copy.name == name
        h.stream.groups[name] = copy
    assert state(h.stream) == before


def test_compaction_then_reopen(h: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    build_busy_stream(h.stream)
    before = state(h.stream)
    monkeypatch.setattr(stream_module, "STATE_COMPACT_BYTES", 1)
    assert h.stream.compact_if_due()
    assert h.stream.state.start_offset > 0  # the ops before the snapshot are gone
    h.reopen()
    # Ops after a snapshot replay on top of it.
    groups.ack(h.stream, h.group(), [I(2)])
    groups.read_new(h.stream, h.group(), b"e", 5, False, 500)
    assert h.stream.compact_if_due()
    groups.claim(h.stream, h.group(), b"a", [I(3)], ClaimOptions(delivery_ms=600), 600)
    h.reopen()
    assert state(h.stream) != before
    assert h.group().pel[I(3)].consumer.name == b"a"


# -- randomized: any sequence of ops survives a reopen ---------------------------------------


def random_step(rng: random.Random, stream: Stream, now: int) -> None:
    names = [b"g1", b"g2"]
    name = rng.choice(names)
    group = stream.groups.get(name)
    consumer = rng.choice([b"a", b"b", b"c"])
    kind = rng.randrange(10)
    if group is None:
        groups.create_group(stream, name, 0, rng.choice([None, 0]))
    elif kind == 0:
        stream.add(I((stream.last_id >> 64) + 1), [b"f", b"v"])
    elif kind == 1:
        groups.read_new(stream, group, consumer, rng.randrange(4), rng.random() < 0.2, now)
    elif kind == 2 and group.pel:
        groups.ack(stream, group, rng.sample(list(group.pel), min(2, len(group.pel))))
    elif kind == 3 and group.pel:
        opts = ClaimOptions(delivery_ms=now, justid=rng.random() < 0.5)
        groups.claim(stream, group, consumer, rng.sample(list(group.pel), 1), opts, now)
    elif kind == 4:
        groups.autoclaim(stream, group, consumer, 0, 0, rng.randrange(1, 4), False, now)
    elif kind == 5:
        groups.read_history(stream, group, consumer, 0, rng.randrange(3), now)
    elif kind == 6 and stream.length:
        first = stream.first_entry()
        assert first is not None
        stream.delete([first[0] + rng.randrange(3) * (1 << 64)])
    elif kind == 7 and rng.random() < 0.2:
        groups.delete_consumer(stream, group, consumer)
    elif kind == 8 and rng.random() < 0.1:
        groups.set_group_id(stream, group, rng.choice([0, stream.last_id]), None)
    elif kind == 9 and rng.random() < 0.05:
        groups.destroy_group(stream, name)


@pytest.mark.parametrize("seed", range(5))
def test_random_ops_survive_reopen(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    h = Harness(tmp_path / "s")
    fill(h.stream, 1, 2, 3)
    for step in range(300):
        random_step(rng, h.stream, 1000 + step)
        if step % 37 == 0:
            h.reopen()
    h.crash()
    h.stream.close()


# -- memory -------------------------------------------------------------------------------------


def test_pending_entry_costs_about_200_bytes(h: Harness) -> None:
    count = 100_000
    group = Group(b"g", 0, None)
    h.stream.groups[b"g"] = group
    sids = [I(1_700_000_000_000 + n, n % 7) for n in range(count)]
    blob = ids.pack_all(sids)
    del sids
    gc.collect()
    tracemalloc.start()
    start, _ = tracemalloc.get_traced_memory()
    for i in range(0, count, 1000):  # batches of 1000, as deliveries come
        op = [
            "gdeliver",
            b"g",
            b"consumer-%d" % (i % 10),
            1_700_000_000_123,
            stream_module.pack_id(0),
            None,
            blob[i * 16 : (i + 1000) * 16],
        ]
        h.stream.apply(op)
    end, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert len(group.pel) == count
    per_entry = (end - start) / count
    assert per_entry < 230, per_entry


# -- commands, compared byte for byte with redis-server 7.0 -----------------------------------
#
# Each command is sent, as request bytes, to a connection's Client and runs through the
# real dispatcher (narad/dispatch.py) on a real Keyspace in tmp_path; the reply bytes
# it leaves in the client's output buffer are parsed with the same small RESP2 reader
# as redis-server's answer to the same command. Values that depend on the clock (idle
# times, delivery and seen times) are masked.


NULL_ARRAY = "<null array>"


class Incomplete(Exception):
    """The buffer ends inside a reply."""


def parse_resp2(data: bytes) -> tuple[Any, bytes]:
    """One reply: bulk -> bytes, +x -> ("+", x), -x -> ("-", x), :n -> int, $-1 ->
    None, *-1 -> NULL_ARRAY, array -> list; of RESP3, `_` -> "<null>" and a map ->
    ("map", flat list). Returns it and the rest of `data`."""
    line, crlf, rest = data.partition(b"\r\n")
    if not crlf:
        raise Incomplete
    kind, body = line[:1], line[1:]
    if kind == b"+":
        return ("+", body.decode()), rest
    if kind == b"-":
        return ("-", body.decode()), rest
    if kind == b":":
        return int(body), rest
    if kind == b"$":
        size = int(body)
        if size < 0:
            return None, rest
        if len(rest) < size + 2:
            raise Incomplete
        return rest[:size], rest[size + 2 :]
    if kind == b"_":
        return "<null>", rest
    assert kind in (b"*", b"%", b"~"), f"bad RESP: {data[:50]!r}"
    size = int(body)
    if size < 0:
        return NULL_ARRAY, rest
    items = []
    for _ in range(size * 2 if kind == b"%" else size):
        item, rest = parse_resp2(rest)
        items.append(item)
    return (("map", items) if kind == b"%" else items), rest


def request(args: list[bytes]) -> bytes:
    return b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args)


class RedisPeer:
    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.buf = b""

    def call(self, args: list[bytes]) -> Any:
        self.sock.sendall(request(args))
        while True:
            try:
                reply, self.buf = parse_resp2(self.buf)
                return reply
            except Incomplete:
                chunk = self.sock.recv(65536)
                assert chunk, "redis-server closed the connection"
                self.buf += chunk


@pytest.fixture(scope="module")
def redis_port(redis_server: RedisProcess) -> int:
    """redis-server 7.0 (tests/conftest.py; skipped when it is not installed)."""
    return redis_server.port


class Replies:
    """The commit barrier as far as the node's sessions ask (narad/barrier.py), with
    no commit behind it: replies stay in their session's output buffer for the test
    to read."""

    def schedule(self) -> None:
        pass

    def wants_send(self, session: Session) -> None:
        pass

    def forget(self, session: Session) -> None:
        pass


class RecordingKeys(KeyWatch):
    """Key events (narad/keywatch.py) recorded, not acted on: no reader ever blocks
    in these tests."""

    def __init__(self) -> None:
        super().__init__(Replies())
        self.signaled: list[bytes] = []  # blocked readers woken there
        self.touched: list[bytes] = []  # WATCHers told there

    def written(self, db: int, key: bytes) -> None:
        self.touched.append(key)  # no reader ever blocks here: nobody to wake

    def spoil(self, db: int, key: bytes) -> None:
        self.touched.append(key)

    def wake(self, db: int, key: bytes) -> None:
        self.signaled.append(key)


class Alarm:
    """One timer of `Alarms`: the handle a Timers' `call_later` answers."""

    def __init__(self, callback: Callable[[], object]) -> None:
        self.callback = callback
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class Alarms:
    """Timers (narad/events.py) on a clock that moves only when the test says: `ring`
    sets off every alarm not cancelled."""

    def __init__(self) -> None:
        self.set: list[Alarm] = []

    def call_later(self, delay: float, callback: Callable[[], object]) -> Alarm:
        alarm = Alarm(callback)
        self.set.append(alarm)
        return alarm

    def ring(self) -> None:
        due, self.set = self.set, []
        for alarm in due:
            if not alarm.cancelled:
                alarm.callback()


class Node(narad.node.Node):
    """A real node and dispatcher on a data dir, without a server: key events are
    recorded (`RecordingKeys`), replies held by `Replies`, and block timeouts set on
    `Alarms`."""

    def __init__(self, folder: Path) -> None:
        super().__init__(Config.load(None, [("dir", str(folder)), ("fsync", "no")]))
        self.keyspace.open()
        self.barrier = Replies()  # type: ignore[assignment]
        self.keys = self.recorded = RecordingKeys()
        self.timers = self.loop = Alarms()  # type: ignore[assignment]
        self.dispatch = Dispatcher(self)

    @property
    def signaled(self) -> list[bytes]:
        return self.recorded.signaled

    @property
    def touched(self) -> list[bytes]:
        return self.recorded.touched

    def client(self) -> Session:
        return Client(self, self.dispatch).session

    def close(self) -> None:
        self.keyspace.close()


def run_narad(client: Session, args: list[bytes]) -> Any:
    """`args` sent on `client`'s connection and run as the server runs it; the reply
    as the wire has it (a blocked command's once its timeout passes)."""
    node: Node = client.node  # type: ignore[assignment]
    client.connection.data_received(request(args))  # type: ignore[attr-defined]
    if client.blocked is not None:
        node.loop.ring()
    return parse_resp2(bytes(client.take_out()))[0]


class Peers:
    """The same script against Narad's handlers and redis-server."""

    def __init__(self, folder: Path, port: int) -> None:
        self.node = Node(folder)
        self.client = self.node.client()
        self.redis = RedisPeer(port)
        self.redis.call([b"FLUSHALL"])

    def both(self, line: str | list[bytes]) -> Any:
        args = line if isinstance(line, list) else argv(line)
        ours = run_narad(self.client, args)
        theirs = self.redis.call(args)
        assert mask_clock(args, ours) == mask_clock(args, theirs), line
        return ours

    def script(self, text_lines: str) -> None:
        for line in text_lines.strip().splitlines():
            line = line.strip()
            if line and not line.startswith("#"):
                self.both(line)


@pytest.fixture
def peers(tmp_path: Path, redis_port: int) -> Iterator[Peers]:
    p = Peers(tmp_path / "narad", redis_port)
    yield p
    p.node.close()


SCRIPTS = {
    "xgroup": """
        XGROUP CREATE s g $
        XGROUP CREATE s g $ MKSTREAM
        XGROUP CREATE s g $ MKSTREAM
        XGROUP CREATE s g2 0 ENTRIESREAD 0
        XGROUP CREATE s g3 - MKSTREAM
        XGROUP CREATE s g3 + MKSTREAM
        XGROUP CREATE s g3 1-x
        XGROUP CREATE s g3 0 ENTRIESREAD -2
        XGROUP CREATE s g3 0 ENTRIESREAD x
        XGROUP CREATE s g3 0 ENTRIESREAD
        XGROUP CREATE s g3 0 FOO
        XGROUP CREATE s g3 0 MKSTREAM ENTRIESREAD 1 MKSTREAM
        XGROUP create s
        XGROUP FOO s g
        XGROUP
        XGROUP HELP
        XGROUP HELP me
        XADD s 1-1 a 1
        XADD s 2-1 b 2
        XGROUP CREATE s g4 $ ENTRIESREAD -1
        XINFO GROUPS s
        XGROUP SETID s g 1
        XGROUP SETID s g - ENTRIESREAD 5
        XGROUP SETID s nope 0
        XGROUP SETID s g 0 MKSTREAM
        XGROUP SETID s g 0 ENTRIESREAD 1 x
        XGROUP SETID t g 0
        XINFO GROUPS s
        XGROUP SETID s g $
        XGROUP CREATECONSUMER s g alice
        XGROUP CREATECONSUMER s g alice
        XGROUP CREATECONSUMER s nope alice
        XGROUP CREATECONSUMER t g alice
        XGROUP DELCONSUMER s g bob
        XGROUP DELCONSUMER s g alice
        XGROUP DELCONSUMER s nope alice
        XGROUP DESTROY s g
        XGROUP DESTROY s g
        XGROUP DESTROY t g
        XGROUP DESTROY s g x
        XINFO GROUPS s
    """,
    "xreadgroup": """
        XREADGROUP GROUP g c STREAMS s >
        XGROUP CREATE s g $ MKSTREAM
        XREADGROUP GROUP g c STREAMS s >
        XREADGROUP GROUP g c STREAMS s 0
        XREADGROUP GROUP g c STREAMS s $
        XREADGROUP GROUP g c STREAMS s x
        XREADGROUP GROUP g c STREAMS s +
        XREADGROUP GROUP g c STREAMS s s >
        XREADGROUP GROUP g c COUNT x STREAMS s >
        XREADGROUP GROUP g c BLOCK x STREAMS s >
        XREADGROUP GROUP g c BLOCK -1 STREAMS s >
        XREADGROUP GROUP g c FOO STREAMS s >
        XREADGROUP COUNT 1 STREAMS s > x y
        XREADGROUP GROUP g c COUNT 1 NOACK
        XADD s 1-0 a 1
        XADD s 2-0 b 2
        XADD s 3-0 c 3
        XREADGROUP GROUP g c COUNT 2 STREAMS s >
        XREADGROUP GROUP g c COUNT -5 STREAMS s s > >
        XREADGROUP GROUP g c STREAMS s >
        XREADGROUP GROUP g c STREAMS s 0
        XREADGROUP GROUP g c COUNT 1 STREAMS s 1
        XREADGROUP GROUP g c STREAMS s 18446744073709551615-18446744073709551615
        XREADGROUP GROUP g other STREAMS s 0
        XADD s 4-0 d 4
        XREADGROUP GROUP g d NOACK STREAMS s >
        XDEL s 2-0
        XREADGROUP GROUP g c STREAMS s 0-1
        XPENDING s g - + 10
        XINFO CONSUMERS s g
        XINFO GROUPS s
        XGROUP SETID s g 0
        XREADGROUP GROUP g e STREAMS s >
        XPENDING s g - + 10
        XPENDING s g
        XREADGROUP GROUP g e BLOCK 10 STREAMS s >
        XADD t 1-0 x 1
        XREADGROUP GROUP g e STREAMS s t > >
    """,
    "xack_and_xpending": """
        XACK s g 1-0
        XPENDING s g
        XPENDING s g - + 10
        XGROUP CREATE s g 0 MKSTREAM
        XPENDING s g
        XPENDING s g - + 10
        XPENDING s g - +
        XPENDING s g - + 10 c extra more
        XPENDING s g - + 10 c extra more x
        XPENDING s g IDLE 10 - +
        XPENDING s g IDLE x - + 10
        XPENDING s g - + x
        XPENDING s g x + 10
        XPENDING s g (18446744073709551615-18446744073709551615 + 10
        XPENDING s g - (0-0 10
        XPENDING s g ( + 10
        XPENDING s nope - + 10
        XADD s 1-0 a 1
        XADD s 2-0 b 2
        XADD s 3-0 c 3
        XADD s 4-0 d 4
        XREADGROUP GROUP g alice COUNT 2 STREAMS s >
        XREADGROUP GROUP g bob STREAMS s >
        XPENDING s g
        XPENDING s g - + 10
        XPENDING s g - + 10 alice
        XPENDING s g - + 10 nobody
        XPENDING s g (1-0 (4-0 10
        XPENDING s g 2 3 10
        XPENDING s g - + 0
        XPENDING s g - + -1
        XPENDING s g - + 1 bob
        XPENDING s g IDLE 99999999 - + 10
        XPENDING s g IDLE 0 - + 10 bob
        XACK s g 1-0 x
        XACK s g +
        XACK s g 1-0 1-0 9-0
        XACK s g 1-0
        XACK s nope 1-0
        XACK t g 1-0
        XACK s g 2-0 3-0 4-0
        XPENDING s g
        XINFO CONSUMERS s g
    """,
    "xclaim": """
        XCLAIM s g c 0 1-0
        XADD s 1-0 a 1
        XADD s 2-0 b 2
        XADD s 3-0 c 3
        XADD s 4-0 d 4
        XCLAIM s g c 0 1-0
        XGROUP CREATE s g 0
        XCLAIM s g c x 1-0
        XCLAIM s g c 0 1-0 BAD
        XCLAIM s g c 0 1-0 IDLE x
        XCLAIM s g c 0 1-0 TIME x
        XCLAIM s g c 0 1-0 RETRYCOUNT x
        XCLAIM s g c 0 1-0 LASTID x
        XCLAIM s g c 0 1-0 IDLE
        XCLAIM s g c 0 - +
        XCLAIM s g c 0 FORCE
        XREADGROUP GROUP g alice STREAMS s >
        XCLAIM s g bob 0 1-0
        XCLAIM s g bob 0 1-0 JUSTID
        XCLAIM s g bob 0 2-0 2-0 JUSTID
        XCLAIM s g bob 0 3-0 RETRYCOUNT 7
        XCLAIM s g bob 0 3-0 RETRYCOUNT -3
        XCLAIM s g carol 3600000 4-0
        XPENDING s g - + 10
        XDEL s 2-0
        XCLAIM s g carol 0 1-0 2-0 3-0
        XPENDING s g - + 10
        XPENDING s g
        XADD s 5-0 e 5
        XCLAIM s g dave 0 5-0
        XCLAIM s g dave 0 5-0 FORCE JUSTID
        XCLAIM s g dave 0 4-0 FORCE LASTID 9-0
        XINFO GROUPS s
        XCLAIM s g dave 0 4-0 LASTID 1-0 JUSTID IDLE 5000
        XCLAIM s g erin 0 4-0 TIME 0
        XCLAIM s g erin 0 4-0 TIME 99999999999999
        XPENDING s g - + 10
        XINFO CONSUMERS s g
    """,
    "xautoclaim": """
        XAUTOCLAIM s g c 0 0
        XAUTOCLAIM s g c x 0
        XAUTOCLAIM s g c 0 x
        XAUTOCLAIM s g c 0 (18446744073709551615-18446744073709551615
        XAUTOCLAIM s g c 0 0 COUNT 0
        XAUTOCLAIM s g c 0 0 COUNT x
        XAUTOCLAIM s g c 0 0 COUNT 8070450532247928833
        XAUTOCLAIM s g c 0 0 FOO
        XAUTOCLAIM s g c 0 0 COUNT
        XADD s 1-0 a 1
        XADD s 2-0 b 2
        XADD s 3-0 c 3
        XADD s 4-0 d 4
        XADD s 5-0 e 5
        XGROUP CREATE s g 0
        XREADGROUP GROUP g alice STREAMS s >
        XAUTOCLAIM s g bob 0 - COUNT 2
        XAUTOCLAIM s g bob 0 3-0 COUNT 2 JUSTID
        XAUTOCLAIM s g bob 0 (4-0 COUNT 2
        XAUTOCLAIM s g bob 3600000 -
        XDEL s 1-0 2-0
        XAUTOCLAIM s g carol 0 0-0 COUNT 1
        XAUTOCLAIM s g carol 0 2-0 COUNT 1
        XAUTOCLAIM s g carol 0 3-0
        XTRIM s MAXLEN 1
        XAUTOCLAIM s g dave 0 0 JUSTID
        XPENDING s g - + 10
        XINFO CONSUMERS s g
    """,
    "xinfo": """
        XINFO STREAM s
        XINFO HELP
        XINFO HELP x
        XINFO FOO s
        XINFO GROUPS s
        XINFO CONSUMERS s g
        XGROUP CREATE s g1 0 MKSTREAM
        XINFO STREAM s
        XINFO STREAM s FULL
        XINFO STREAM s FULL COUNT
        XINFO STREAM s FOO
        XINFO STREAM s FULL FOO 1
        XINFO STREAM s FULL COUNT x
        XINFO CONSUMERS s g2
        XADD s 100 a 1
        XADD s 101 b 1
        XADD s 102 c 1
        XADD s 103 e 1
        XADD s 104 f 1
        XGROUP CREATE s g2 0
        XREADGROUP GROUP g1 Alice COUNT 1 STREAMS s >
        XREADGROUP GROUP g1 Bob COUNT 1 STREAMS s >
        XREADGROUP GROUP g1 Bob NOACK COUNT 1 STREAMS s >
        XREADGROUP GROUP g2 Charlie COUNT 4 STREAMS s >
        XDEL s 103
        XINFO STREAM s
        XINFO STREAM s FULL
        XINFO STREAM s FULL COUNT 1
        XINFO STREAM s FULL COUNT 0
        XINFO STREAM s FULL COUNT -1
        XINFO GROUPS s
        XINFO CONSUMERS s g1
        XTRIM s MAXLEN 0
        XINFO STREAM s
        XINFO GROUPS s
    """,
    "lag_cases": """
        XGROUP CREATE x g1 0 MKSTREAM
        XINFO GROUPS x
        XADD x 1-0 data a
        XDEL x 1-0
        XINFO GROUPS x
        DEL x
        XADD x 1-0 data a
        XADD x 2-0 data b
        XADD x 3-0 data c
        XADD x 4-0 data d
        XADD x 5-0 data e
        XDEL x 3-0
        XGROUP CREATE x g1 0
        XGROUP CREATE x g2 0
        XGROUP CREATE x g3 $
        XGROUP CREATE x g4 1-0 ENTRIESREAD 1
        XINFO GROUPS x
        XREADGROUP GROUP g1 c11 COUNT 1 STREAMS x >
        XINFO GROUPS x
        XREADGROUP GROUP g1 c11 COUNT 2 STREAMS x >
        XREADGROUP GROUP g4 c11 COUNT 2 STREAMS x >
        XINFO GROUPS x
        XREADGROUP GROUP g1 c11 COUNT 1 STREAMS x >
        XINFO GROUPS x
        XADD x 6-0 data f
        XINFO GROUPS x
        XTRIM x MAXLEN 3
        XINFO GROUPS x
        XTRIM x MAXLEN 1
        XINFO GROUPS x
    """,
}


@pytest.mark.parametrize("name", list(SCRIPTS))
def test_script_against_redis(peers: Peers, name: str) -> None:
    peers.script(SCRIPTS[name])


def test_only_destroy_signals_blocked_readers(peers: Peers) -> None:
    peers.script(SCRIPTS["xgroup"])
    assert peers.client.node.signaled == [b"s"]


def test_resp3_replies_against_redis(tmp_path: Path, redis_port: int) -> None:
    peers = Peers(tmp_path / "narad", redis_port)
    peers.client.protocol = 3
    assert peers.redis.call([b"HELLO", b"3"])
    try:
        peers.script("""
            XGROUP CREATE s g 0 MKSTREAM
            XREADGROUP GROUP g c STREAMS s >
            XPENDING s g
            XINFO STREAM s
            XADD s 1-0 a 1
            XADD s 2-0 b 2
            XADD t 1-0 c 3
            XGROUP CREATE t g 0
            XREADGROUP GROUP g c COUNT 1 STREAMS s t > >
            XDEL s 1-0
            XREADGROUP GROUP g c STREAMS s 0
            XINFO GROUPS s
            XINFO STREAM s
            XPENDING s g
        """)
    finally:
        peers.node.close()


# -- commands on a fixed clock, and blocking ---------------------------------------------------


class Clock:
    def __init__(self, now: int) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


@pytest.fixture
def narad_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Session, Clock]]:
    clock = Clock(1_000_000)
    monkeypatch.setattr(groups, "now_ms", clock)
    node = Node(tmp_path)
    yield node.client(), clock
    node.close()


def argv(line: str) -> list[bytes]:
    return [a.encode() for a in line.split()]


def call(client: Session, line: str) -> Any:
    args = argv(line)
    if client.in_exec:  # as EXEC runs a queued command: the reply is EXEC's, not sent
        cmd = COMMANDS[args[0].lower()]
        return wire(client.node.runner.call(client, cmd, args))
    return run_narad(client, args)


def wire(reply: Any) -> Any:
    """A handler's reply as a RESP2 client reads it (stream entries come framed)."""
    return parse_resp2(encode(reply, 2))[0]


def start_read(client: Session, line: str) -> Any:
    """An XREADGROUP expected to block: its Block."""
    block = group_commands.xreadgroup(client, argv(line))
    assert type(block).__name__ == "Block"
    return block


def test_idle_times_follow_the_clock(narad_only: tuple[Session, Clock]) -> None:
    client, clock = narad_only
    for line in ("XADD s 1-0 a 1", "XADD s 2-0 b 2", "XGROUP CREATE s g 0"):
        call(client, line)
    call(client, "XREADGROUP GROUP g alice COUNT 1 STREAMS s >")
    clock.now += 500
    call(client, "XREADGROUP GROUP g bob STREAMS s >")
    clock.now += 300
    assert call(client, "XPENDING s g - + 10") == [
        [b"1-0", b"alice", 800, 1],
        [b"2-0", b"bob", 300, 1],
    ]
    assert call(client, "XPENDING s g IDLE 400 - + 10") == [[b"1-0", b"alice", 800, 1]]
    assert call(client, "XINFO CONSUMERS s g") == [
        [b"name", b"alice", b"pending", 1, b"idle", 800],
        [b"name", b"bob", b"pending", 1, b"idle", 300],
    ]
    assert call(client, "XCLAIM s g carol 500 1-0 2-0 JUSTID") == [b"1-0"]
    assert call(client, "XCLAIM s g carol 0 2-0 IDLE 250 JUSTID") == [b"2-0"]
    assert call(client, "XPENDING s g - + 10") == [
        [b"1-0", b"carol", 0, 1],
        [b"2-0", b"carol", 250, 1],
    ]
    assert call(client, "XCLAIM s g dave 0 2-0 TIME 999000 JUSTID") == [b"2-0"]
    assert call(client, "XPENDING s g - + 1")[0][2] == 0  # the same ms; 2-0 is second
    assert call(client, "XPENDING s g 2 2 1") == [[b"2-0", b"dave", 1800, 1]]
    clock.now += 1000
    assert call(client, "XAUTOCLAIM s g erin 1500 0 JUSTID") == [b"0-0", [b"2-0"], []]
    full = call(client, "XINFO STREAM s FULL")
    group = dict(
        zip(
            full[full.index(b"groups") + 1][0][::2],
            full[full.index(b"groups") + 1][0][1::2],
            strict=True,
        )
    )
    assert group[b"pending"] == [
        [b"1-0", b"carol", 1_000_800, 1],
        [b"2-0", b"erin", 1_001_800, 1],
    ]  # JUSTID: no count


def test_blocking_xreadgroup(narad_only: tuple[Session, Clock]) -> None:
    client, _ = narad_only
    call(client, "XGROUP CREATE s g $ MKSTREAM")
    call(client, "XADD s 666 f v")
    call(client, "XDEL s 666")
    # The stream's last ID passed the cursor but no entry is there: block, not [].
    block = start_read(client, "XREADGROUP GROUP g alice BLOCK 0 STREAMS s >")
    assert type(block).__name__ == "Block"
    assert block.keys == [(0, b"s")] and block.timeout_ms == 0
    call(client, "XADD s 667 f2 v2")
    reply = wire(block.retry(b"s"))
    assert reply == [[b"s", [[b"667-0", [b"f2", b"v2"]]]]]
    assert call(client, "XPENDING s g - + 10")[0][:2] == [b"667-0", b"alice"]
    assert block.retry(b"s") is None  # nothing new for the group
    # History IDs never block; in MULTI nothing blocks.
    assert call(client, "XREADGROUP GROUP g bob BLOCK 0 STREAMS s 0") == [[b"s", []]]
    client.in_exec = True
    assert call(client, "XREADGROUP GROUP g bob BLOCK 0 STREAMS s >") == NULL_ARRAY
    client.in_exec = False


def test_blocked_xreadgroup_fails_when_group_or_key_goes(
    narad_only: tuple[Session, Clock],
) -> None:
    client, _ = narad_only
    call(client, "XGROUP CREATE s g $ MKSTREAM")
    line = "XREADGROUP GROUP g a COUNT 5 BLOCK 100 STREAMS s >"
    block = start_read(client, line)
    assert block.timeout_ms == 100 and isinstance(block.timeout_reply, NullArray)
    call(client, "XGROUP DESTROY s g")
    with pytest.raises(CommandError) as err:
        block.retry(b"s")
    assert str(err.value) == (
        "NOGROUP the consumer group this client was blocked on no longer exists"
    )
    call(client, "XGROUP CREATE s g $")
    block = start_read(client, line)
    call(client, "DEL s")
    with pytest.raises(CommandError) as err:
        block.retry(b"s")
    assert str(err.value) == "UNBLOCKED the stream key no longer exists"


def test_blocked_read_count_defaults_to_1000(narad_only: tuple[Session, Clock]) -> None:
    client, _ = narad_only
    call(client, "XGROUP CREATE s g $ MKSTREAM")
    block = start_read(client, "XREADGROUP GROUP g a BLOCK 0 STREAMS s >")
    stream = client.node.keyspace.get(0, b"s")
    assert stream is not None
    fill(stream, *range(1, 1201))
    reply = wire(block.retry(b"s"))
    assert len(reply[0][1]) == 1000


def test_group_writes_touch_the_key(narad_only: tuple[Session, Clock]) -> None:
    client, _ = narad_only
    server: Node = client.node  # type: ignore[assignment]
    call(client, "XGROUP CREATE s g $ MKSTREAM")
    call(client, "XADD s 1 f v")
    server.touched.clear()
    call(client, "XPENDING s g")
    call(client, "XACK s g 1")  # nothing acked
    assert server.touched == []
    call(client, "XREADGROUP GROUP g a STREAMS s >")
    call(client, "XACK s g 1")
    assert server.touched == [b"s", b"s"]
    assert server.signaled == []  # no blocked reader is woken by group writes


# -- through a real server: redis-py against `python -m narad server` --------------------------


def raw(server: NaradProcess | RedisProcess, **kwargs: Any) -> redis.Redis:
    """A redis-py client that returns replies as the wire has them (no callbacks),
    speaking RESP2 unless `protocol` says otherwise."""
    client = server.client(**{"protocol": 2, **kwargs})
    client.response_callbacks.clear()
    return client


def outcome(client: redis.Redis, args: list[bytes]) -> Any:
    try:
        return client.execute_command(*args)
    except redis.ResponseError as exc:
        return ("error", str(exc))


@pytest.mark.parametrize("protocol", [2, 3])
@pytest.mark.parametrize("name", list(SCRIPTS))
def test_script_through_server(
    narad: NaradProcess, redis_server: RedisProcess, name: str, protocol: int
) -> None:
    ours, theirs = raw(narad, protocol=protocol), raw(redis_server, protocol=protocol)
    theirs.flushall()
    for line in SCRIPTS[name].strip().splitlines():
        args = argv(line.strip())
        if args:
            assert mask_clock(args, outcome(ours, args)) == mask_clock(
                args, outcome(theirs, args)
            ), line


def blocked_clients(client: redis.Redis) -> int:
    info = client.execute_command("INFO", "clients")
    text_info = info.decode() if isinstance(info, bytes) else str(info)
    for line in text_info.splitlines():
        if line.startswith("blocked_clients:"):
            return int(line.split(":")[1])
    return 0


def read_in_thread(server: NaradProcess, line: str) -> tuple[threading.Thread, dict[str, Any]]:
    """Run a blocking command on its own connection; its outcome lands in the dict."""
    result: dict[str, Any] = {}

    def run() -> None:
        result["reply"] = outcome(raw(server, socket_timeout=20), argv(line))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, result


def test_blocked_xreadgroup_is_served_by_xadd(narad: NaradProcess) -> None:
    c = raw(narad)
    c.execute_command(*argv("XGROUP CREATE s g $ MKSTREAM"))
    thread, result = read_in_thread(narad, "XREADGROUP GROUP g alice BLOCK 0 STREAMS s >")
    wait_until(lambda: blocked_clients(c) == 1)
    c.execute_command(*argv("XADD s 5-0 f v"))
    thread.join(10)
    assert result["reply"] == [[b"s", [[b"5-0", [b"f", b"v"]]]]]
    assert c.execute_command(*argv("XPENDING s g - + 10"))[0][:2] == [b"5-0", b"alice"]


def test_blocked_xreadgroup_times_out(narad: NaradProcess) -> None:
    c = raw(narad)
    c.execute_command(*argv("XGROUP CREATE s g $ MKSTREAM"))
    assert c.execute_command(*argv("XREADGROUP GROUP g a BLOCK 50 STREAMS s >")) is None


@pytest.mark.parametrize(
    ("change", "error"),
    [
        (
            "XGROUP DESTROY s g",
            "NOGROUP the consumer group this client was blocked on no longer exists",
        ),
        ("DEL s", "UNBLOCKED the stream key no longer exists"),
    ],
)
def test_blocked_xreadgroup_fails_when_its_group_goes(
    narad: NaradProcess, change: str, error: str
) -> None:
    c = raw(narad)
    c.execute_command(*argv("XGROUP CREATE s g $ MKSTREAM"))
    thread, result = read_in_thread(narad, "XREADGROUP GROUP g alice BLOCK 0 STREAMS s >")
    wait_until(lambda: blocked_clients(c) == 1)
    c.execute_command(*argv(change))
    thread.join(10)
    assert result["reply"] == ("error", error)


def test_xreadgroup_block_inside_multi_does_not_block(narad: NaradProcess) -> None:
    c = raw(narad)
    c.execute_command(*argv("XGROUP CREATE s g $ MKSTREAM"))
    pipe = c.pipeline(transaction=True)
    pipe.execute_command(*argv("XREADGROUP GROUP g a BLOCK 0 STREAMS s >"))
    assert pipe.execute() == [None]


def group_state(c: redis.Redis) -> list[Any]:
    """What must survive a crash: PELs with owners, counts and delivery times,
    consumers with seen times, cursors and read counters."""
    return [
        c.execute_command(*argv("XINFO STREAM s FULL COUNT 0")),
        c.execute_command(*argv("XINFO GROUPS s")),
        c.execute_command(*argv("XPENDING s g")),
    ]


def test_group_state_survives_kill_9(narad: NaradProcess) -> None:
    c = raw(narad)
    c.execute_command(*argv("XGROUP CREATE s g 0 MKSTREAM"))
    for n in range(1, 101):
        c.execute_command(*argv(f"XADD s {n}-0 f {n}"))
    c.execute_command(*argv("XREADGROUP GROUP g c1 COUNT 30 STREAMS s >"))
    c.execute_command(*argv("XREADGROUP GROUP g c1 COUNT 30 STREAMS s >"))
    assert c.execute_command("XACK", "s", "g", *[f"{n}-0" for n in range(1, 26)]) == 25
    c.execute_command(*argv("XCLAIM s g c2 0 30 31 32 JUSTID"))
    c.execute_command(*argv("XREADGROUP GROUP g c1 COUNT 5 STREAMS s 0"))
    c.execute_command(*argv("XREADGROUP GROUP g c3 NOACK COUNT 10 STREAMS s >"))
    c.execute_command(*argv("XGROUP CREATE s g2 $"))
    c.execute_command(*argv("XGROUP CREATECONSUMER s g2 idle"))
    c.execute_command(*argv("XDEL s 40"))
    c.execute_command(*argv("XAUTOCLAIM s g c4 0 0 COUNT 20"))
    before = group_state(c)
    assert before[2][0] == 35 - 1  # 60 delivered, 25 acked, 40 dropped by XAUTOCLAIM
    narad.kill()
    narad.start()
    assert group_state(raw(narad)) == before


def scrub(value: Any) -> Any:
    """redis-py's parsed replies with clock values replaced by "T"."""
    if isinstance(value, dict):
        return {
            k: "T" if k in ("idle", b"idle", "time_since_delivered") else scrub(v)
            for k, v in value.items()
            if k not in ("nacked-count", b"nacked-count")  # Redis 8's (docs/streams.md)
        }
    if isinstance(value, (list, tuple)):
        return type(value)(scrub(v) for v in value)
    if isinstance(value, int) and value >= 1_000_000_000_000:
        return "T"
    return value


def api_calls(r: redis.Redis) -> list[Any]:
    """Every group command through redis-py's own methods and reply parsing."""
    return [
        r.xgroup_create("s", "g", "$", mkstream=True),
        r.xadd("s", {"a": 1}, id="1-0"),
        r.xadd("s", {"b": 2}, id="2-0"),
        r.xadd("s", {"c": 3}, id="3-0"),
        r.xgroup_create("s", "g2", "0", entries_read=1),
        r.xgroup_createconsumer("s", "g", "idle"),
        r.xreadgroup("g", "c", {"s": ">"}, count=2),
        r.xreadgroup("g", "c", {"s": "0"}),
        r.xreadgroup("g", "n", {"s": ">"}, noack=True),
        r.xpending("s", "g"),
        r.xpending_range("s", "g", "-", "+", 10),
        r.xpending_range("s", "g", "-", "+", 10, consumername="c", idle=0),
        r.xclaim("s", "g", "d", 0, ["1-0"]),
        r.xclaim("s", "g", "d", 0, ["2-0"], justid=True, retrycount=5),
        r.xautoclaim("s", "g", "e", 0, "0-0", count=1),
        r.xautoclaim("s", "g", "e", 0, "0-0", justid=True),
        r.xack("s", "g", "1-0", "9-0"),
        r.xinfo_groups("s"),
        r.xinfo_consumers("s", "g"),
        r.xinfo_stream("s"),
        r.xinfo_stream("s", full=True),
        r.xreadgroup("g", "c", {"s": ">"}, block=10),
        r.xgroup_setid("s", "g", "0", entries_read=0),
        r.xgroup_delconsumer("s", "g", "e"),
        r.xgroup_destroy("s", "g2"),
        r.xinfo_groups("s"),
    ]


@pytest.mark.parametrize("protocol", [2, 3])
def test_redis_py_api_against_redis(
    narad: NaradProcess, redis_server: RedisProcess, protocol: int
) -> None:
    theirs = redis_server.client(protocol=protocol)
    theirs.flushall()
    assert scrub(api_calls(narad.client(protocol=protocol))) == scrub(api_calls(theirs))
