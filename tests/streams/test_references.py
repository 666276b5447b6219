"""Deleting and trimming with regard to consumer groups' references
(narad/streams/references.py) on real logs: each call is one prune op, and a reopened
stream (as after a crash) holds exactly the same entries and groups."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from narad.streams import groups, ids, references
from narad.streams.references import ACKED, DELREF, KEEPREF
from narad.streams.stream import Stream
from tests.streams.test_groups import Harness, I, fill, state


@pytest.fixture
def h(tmp_path: Path) -> Iterator[Harness]:
    harness = Harness(tmp_path / "s")
    yield harness
    harness.stream.close()


def live(stream: Stream) -> list[int]:
    return [sid for sid, _ in stream.range(0, ids.ID_MAX)]


def reopened(h: Harness) -> Stream:
    """The stream reopened from its folder; its entries and counters unchanged."""
    before = (live(h.stream), h.stream.length, h.stream.max_deleted_id, h.stream.start)
    stream = h.reopen()
    assert (live(stream), stream.length, stream.max_deleted_id, stream.start) == before
    return stream


def two_groups(h: Harness, n: int) -> None:
    fill(h.stream, *range(1, n + 1))
    for name, consumer in ((b"g1", b"c1"), (b"g2", b"c2")):
        groups.create_group(h.stream, name, 0, 0)
        groups.read_new(h.stream, h.stream.groups[name], consumer, 0, False, 1000)


def test_one_op_per_call_and_none_when_nothing_changes(h: Harness) -> None:
    two_groups(h, 3)
    records = h.stream.state.next_offset
    assert references.delete_entries(h.stream, [I(1), I(2), I(1), I(9)], DELREF) == [1, 1, -1, -1]
    assert h.stream.state.next_offset == records + 1
    assert references.delete_entries(h.stream, [I(9)], KEEPREF) == [-1]
    assert references.delete_entries(h.stream, [I(3)], ACKED) == [2]
    assert h.stream.state.next_offset == records + 1
    stream = reopened(h)
    assert list(stream.groups[b"g1"].pel) == [I(3)] and live(stream) == [I(3)]
    assert stream.max_deleted_id == I(2)


def test_ackdel_acks_once_and_keeps_what_another_group_holds(h: Harness) -> None:
    two_groups(h, 3)
    g1 = h.stream.groups[b"g1"]
    got = references.ack_and_delete(h.stream, g1, [I(1), I(1), I(2)], ACKED)
    assert got == [2, -1, 2]
    got = references.ack_and_delete(h.stream, h.stream.groups[b"g2"], [I(1), I(3)], ACKED)
    assert got == [1, 2]  # 3 is still pending in g1
    stream = reopened(h)
    assert live(stream) == [I(2), I(3)]
    assert list(stream.groups[b"g1"].pel) == [I(3)]
    assert list(stream.groups[b"g2"].pel) == [I(2)]


@pytest.mark.parametrize("approx", [False, True])
def test_acked_trim_keeps_referenced_entries_across_nodes(h: Harness, approx: bool) -> None:
    h.stream.node_entries = 4
    two_groups(h, 16)
    g1, g2 = h.stream.groups[b"g1"], h.stream.groups[b"g2"]
    groups.ack(h.stream, g1, [I(n) for n in range(1, 17)])
    groups.ack(h.stream, g2, [I(n) for n in range(1, 17) if n not in (6, 11)])
    removed = references.trim(h.stream, 3, None, approx, 0, ACKED)
    if approx:
        # Nodes [1-4] [5-8] [9-12] [13-16]: the first three may go whole (16 - 4k
        # >= 3), losing all but 6 and 11; the last cannot.
        assert removed == 10 and live(h.stream) == [I(6), I(11), I(13), I(14), I(15), I(16)]
    else:
        # Then entries of the last node one by one, until three are left.
        assert removed == 13 and live(h.stream) == [I(6), I(11), I(16)]
    stream = reopened(h)
    assert stream.start == 5  # offset of 6-0: the start cannot pass a kept entry
    assert state(stream)[b"g2"][2][0][0] == I(6)


def test_delref_trim_drops_only_trimmed_references(h: Harness) -> None:
    two_groups(h, 6)
    references.delete_entries(h.stream, [I(2)], KEEPREF)  # a dangling reference stays
    assert references.trim(h.stream, None, I(5), False, 0, DELREF) == 3
    stream = reopened(h)
    assert list(stream.groups[b"g1"].pel) == [I(2), I(5), I(6)]
    assert live(stream) == [I(5), I(6)]
    assert references.trim(stream, 0, None, False, 0, KEEPREF) == 2
    assert list(reopened(h).groups[b"g2"].pel) == [I(2), I(5), I(6)]
