"""Deleting and trimming entries with regard to the consumer groups that refer to them
(Redis 8.2's XDELEX, XACKDEL and the KEEPREF / DELREF / ACKED option of XADD and
XTRIM), as a state machine over the stream's state log.

An entry is *referenced* while some consumer group still has business with it: it is
pending in the group's PEL, or it lies after the group's cursor (not yet delivered).
The three strategies:

- KEEPREF: delete or trim the entries; PELs keep their references (XDEL's way).
- DELREF: delete or trim them and drop every group's PEL reference to them; XDELEX
  drops the references of an ID even when its entry is gone already.
- ACKED: only entries no group refers to go; the others stay (XDELEX and XACKDEL
  answer 2 for them), and a trim keeps them and goes on past them.

Every change is one op, written by `Stream.log_op` and applied by the handler below,
live and at replay; the handler reads only its op and the state (what the command
decided from the stream travels in the op). A call that changes nothing writes
nothing. Op (fields after the name; IDs are 16-byte strings, a list of them a blob):

    prune   start|None, offsets, max deleted ID|None, group|None, acked ids, unref ids
            in this order: `acked` leave `group`'s PEL (XACKDEL); `unref` leave every
            group's PEL; the stream's start moves to `start` (a trim); the entries at
            `offsets` are deleted, raising the max deleted ID to the one given (a trim
            that keeps referenced entries deletes those after them, and leaves the
            max deleted ID as it is, as Redis's trimming does).

Owned by the event loop thread, as the Stream is.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from narad.streams import ids
from narad.streams.ids import pack_id, unpack_id
from narad.streams.machines import Machine, op_table
from narad.streams.stream import READ_BATCH, move_start, tombstone

if TYPE_CHECKING:
    from narad.streams.pel import Group
    from narad.streams.stream import Stream

KEEPREF, DELREF, ACKED = "keepref", "delref", "acked"
STRATEGIES = (KEEPREF, DELREF, ACKED)

# XDELEX / XACKDEL answers, one per ID.
DELETED = 1  # deleted (XACKDEL: acked, and deleted unless it was gone already)
NOT_FOUND = -1  # no such entry (XACKDEL: not pending in the group); nothing done
STILL_REFERENCED = 2  # ACKED: kept, as a group still refers to it (XACKDEL: acked)

_OPS, _op = op_table()


@_op("prune")
def _apply_prune(stream: Stream, op: list[Any]) -> None:
    _, start, offsets, max_deleted, group_name, acked, unref = op
    if group_name is not None:
        group = stream.groups.get(group_name)
        assert group is not None, f"op on unknown group {group_name!r}"
        group._drop_all(ids.unpack_all(acked))
    unref_ids = ids.unpack_all(unref)
    if unref_ids:
        for group in stream.groups.values():
            group._drop_all(unref_ids)
    if start is not None:
        move_start(stream, start)
    if offsets:
        top = stream.max_deleted_id if max_deleted is None else unpack_id(max_deleted)
        tombstone(stream, offsets, top)


REFERENCES_MACHINE = Machine("references", _OPS)


class _Plan:
    """What one call decided, built up ID by ID (later IDs see what earlier ones
    did: an ID given twice is deleted once), then written as one prune op."""

    def __init__(self, stream: Stream, group: Group | None = None) -> None:
        self.stream = stream
        self.group = group  # the group XACKDEL acks in
        self.start: int | None = None
        self.offsets: list[int] = []
        self.max_deleted = stream.max_deleted_id
        self.acked: dict[int, None] = {}
        self.unref: dict[int, None] = {}
        self._gone: set[int] = set()  # offsets in `offsets`

    def pending_in(self, group: Group, sid: int) -> bool:
        if sid not in group.pel or sid in self.unref:
            return False
        return group is not self.group or sid not in self.acked

    def referenced(self, sid: int) -> bool:
        """Whether a group still refers to `sid`: pending there, or after its cursor."""
        return any(
            sid > group.last_id or self.pending_in(group, sid)
            for group in self.stream.groups.values()
        )

    def ack(self, sid: int) -> None:
        self.acked[sid] = None

    def drop_references(self, sid: int) -> None:
        if any(self.pending_in(group, sid) for group in self.stream.groups.values()):
            self.unref[sid] = None

    def delete(self, sid: int) -> bool:
        """Delete live entry `sid`; False when there is none."""
        offset = self.stream.offset_of(sid)
        if offset is None or offset in self._gone:
            return False
        self.offsets.append(offset)
        self._gone.add(offset)
        self.max_deleted = max(self.max_deleted, sid)
        return True

    def commit(self) -> None:
        """Write the op, if anything changes."""
        if not (self.offsets or self.acked or self.unref or self.start is not None):
            return
        new_top = self.offsets and self.max_deleted != self.stream.max_deleted_id
        self.stream.log_op(
            [
                "prune",
                self.start,
                self.offsets,
                pack_id(self.max_deleted) if new_top else None,
                self.group.name if self.group is not None and self.acked else None,
                ids.pack_all(list(self.acked)),
                ids.pack_all(list(self.unref)),
            ]
        )


def delete_entries(stream: Stream, sids: list[int], strategy: str) -> list[int]:
    """XDELEX: delete each of `sids` (in order, repeats included) by `strategy`; the
    answer for each (DELETED, NOT_FOUND, STILL_REFERENCED)."""
    plan = _Plan(stream)
    out: list[int] = []
    for sid in sids:
        if strategy == ACKED and plan.referenced(sid):
            out.append(STILL_REFERENCED)
            continue
        if strategy == DELREF:
            plan.drop_references(sid)
        out.append(DELETED if plan.delete(sid) else NOT_FOUND)
    plan.commit()
    return out


def ack_and_delete(stream: Stream, group: Group, sids: list[int], strategy: str) -> list[int]:
    """XACKDEL: ack each of `sids` pending in `group`, then delete its entry by
    `strategy`; the answer for each (NOT_FOUND when it was not pending)."""
    plan = _Plan(stream, group)
    out: list[int] = []
    for sid in sids:
        if not plan.pending_in(group, sid):
            out.append(NOT_FOUND)
            continue
        plan.ack(sid)
        if strategy == ACKED and plan.referenced(sid):
            out.append(STILL_REFERENCED)
            continue
        if strategy == DELREF:
            plan.drop_references(sid)
        plan.delete(sid)
        out.append(DELETED)
    plan.commit()
    return out


def trim(
    stream: Stream,
    maxlen: int | None,
    minid: int | None,
    approx: bool,
    limit: int,
    strategy: str,
) -> int:
    """XTRIM / XADD trimming by `strategy`; the entries removed. KEEPREF is
    `Stream.trim`; DELREF trims as much and drops the trimmed entries' references;
    ACKED keeps every referenced entry (a trim cannot go past it, so the entries
    after it that go are deleted instead)."""
    if strategy == ACKED and stream.groups:
        return _trim_acked(stream, maxlen, minid, approx, limit)
    if strategy == KEEPREF or not stream.groups:
        return stream.trim(maxlen, minid, approx, limit)
    end, removed = stream.trim_end(maxlen, minid, approx, limit)
    if end <= stream.start:
        return 0
    plan = _Plan(stream)
    plan.start = end
    last_trimmed = stream.id_at(end - 1)
    trimmed = {
        sid
        for group in stream.groups.values()
        for sid in group.pel.irange(0, last_trimmed)
        if stream.offset_of(sid) is not None
    }
    plan.unref = dict.fromkeys(sorted(trimmed))
    plan.commit()
    return removed


def _trim_acked(
    stream: Stream, maxlen: int | None, minid: int | None, approx: bool, limit: int
) -> int:
    """The ACKED trim, node by node as `Stream.trim_end` goes: a node that may go
    whole loses its unreferenced entries; in the node where the trim stops (never
    reached with `approx`), unreferenced entries go one by one until the stream is
    short enough (MAXLEN) or an ID reaches MINID. Once a referenced entry was kept,
    the start cannot pass it: the entries after it that go are deleted instead."""
    plan = _Plan(stream)
    length, removed = stream.length, 0
    start = stream.start  # the new start, while no referenced entry was kept
    kept = False
    for node_live, node_end in _nodes(stream):
        if maxlen is not None and length <= maxlen:
            break
        if limit and removed + len(node_live) > limit:
            break
        if maxlen is not None:
            whole = length - len(node_live) >= maxlen
        else:
            assert minid is not None
            whole = stream.id_at(node_end - 1) < minid
        if approx and not whole:
            break
        for offset, sid in node_live:
            if not whole and (
                (maxlen is not None and length <= maxlen) or (minid is not None and sid >= minid)
            ):
                break
            if plan.referenced(sid):
                kept = True
                continue
            if kept:
                plan.offsets.append(offset)
            else:
                start = offset + 1
            length, removed = length - 1, removed + 1
        else:
            if not kept:
                start = node_end
        if not whole:
            break
    if start > stream.start:
        plan.start = start
    plan.commit()
    return removed


def _nodes(stream: Stream) -> Iterator[tuple[list[tuple[int, int]], int]]:
    """The stream's live entries from its start, (offset, ID) oldest first, by node
    (blocks of `node_entries` offsets, as `Stream.trim_end` counts them), each with
    the offset its node ends at."""
    data, deleted = stream.data, stream.deleted
    size = max(stream.node_entries, 1)
    end = data.next_offset
    offset = stream.start
    node: list[tuple[int, int]] = []
    node_end = min((offset // size + 1) * size, end)
    while offset < end:
        batch = data.read(offset, count_max=READ_BATCH)
        if not batch:
            break
        for rec in batch:
            at = rec.offset
            while at >= node_end:
                if node:
                    yield node, node_end
                    node = []
                node_end = min((node_end // size + 1) * size, end)
            if at not in deleted:
                node.append((at, ids.make(rec.id_ms, rec.id_seq)))
        offset = batch[-1].offset + 1
    if node:
        yield node, node_end
