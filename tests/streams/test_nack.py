"""XNACK's state (narad/streams/groups.py's gnack op, the nack zone of
narad/streams/pel.py's Group) on real logs: replayed, snapshotted and restored
exactly, and left by claims and acks."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from narad.streams import groups
from narad.streams.groups import INT64_MAX, ClaimOptions
from narad.streams.pel import Group
from tests.streams.test_groups import Harness, I, fill, pel_of


@pytest.fixture
def h(tmp_path: Path) -> Iterator[Harness]:
    harness = Harness(tmp_path / "s")
    yield harness
    harness.stream.close()


def zone(group: Group) -> list[int]:
    return list(group.nacked)


def test_nacks_replay_and_leave_the_zone_when_claimed_or_acked(h: Harness) -> None:
    fill(h.stream, 1, 2, 3, 4)
    groups.create_group(h.stream, b"g", 0, 0)
    groups.read_new(h.stream, h.group(), b"c", 0, False, 1000)
    assert groups.nack(h.stream, h.group(), [I(3), I(1), I(9)], "silent", None, False) == 2
    assert groups.nack(h.stream, h.group(), [I(2)], "fatal", None, False) == 1
    assert groups.nack(h.stream, h.group(), [I(3)], "fail", 5, False) == 1  # to the end
    group = h.crash().groups[b"g"]
    assert zone(group) == [I(1), I(2), I(3)]
    assert pel_of(group) == [
        (I(1), b"", 0, 0),
        (I(2), b"", 0, INT64_MAX),
        (I(3), b"", 0, 5),
        (I(4), b"c", 1000, 1),
    ]
    assert groups.claimable(group, 10**15, 2000) == [I(1), I(2), I(3)]
    groups.claim(h.stream, group, b"d", [I(2)], ClaimOptions(delivery_ms=2000), 2000)
    assert pel_of(h.group())[1] == (I(2), b"d", 2000, INT64_MAX)  # capped, not past it
    groups.ack(h.stream, h.group(), [I(1)])
    group = h.reopen().groups[b"g"]
    assert zone(group) == [I(3)] and group.unowned.pending == {I(3)}


def test_snapshots_keep_the_zone_and_old_ones_restore_without(h: Harness) -> None:
    fill(h.stream, 1, 2, 3)
    groups.create_group(h.stream, b"g", 0, 0)
    groups.read_new(h.stream, h.group(), b"c", 0, False, 1000)
    groups.nack(h.stream, h.group(), [I(2), I(1)], "fail", None, False)
    groups.nack(h.stream, h.group(), [I(3)], "fail", None, True)
    snap = h.group().snapshot()
    copy = Group.from_snapshot(snap)
    assert zone(copy) == [I(2), I(1), I(3)] and pel_of(copy) == pel_of(h.group())
    groups.ack(h.stream, h.group(), [I(1), I(2), I(3)])
    old = Group.from_snapshot(h.group().snapshot()[:8])  # as written before XNACK
    assert zone(old) == [] and not old.pel
