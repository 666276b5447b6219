"""A replica's apply: its leader's commits into this node's logs and state.

A replica is a node forever recovering from its leader's journal (docs/design.md):
each commit the leader sends is appended to this node's journal byte for byte (so a
position names the same commits on every node of one history) and held as this
node's fsync policy holds a commit (durable under `always`; narad/replication/
follower.py does that, and acknowledges it). Then each change is applied as
recovery applies it (narad/log/recovery.py's `take_records`) and, since this node
is running, to its in-memory state through the same handlers replay uses: metadata
ops by `Keyspace.follow_meta`, state ops by `Stream.follow`; entries need only the
stream's counters. Start moves are made in memory and become durable at this node's
next checkpoint, as the leader's own do.

Nothing here runs a write of this node's own: every change is the leader's.

Owned by the event loop thread.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from narad.log import Log, LogCorrupted
from narad.log.format import Record
from narad.log.journal import KIND_DATA, KIND_META, KIND_STATE, describe_key, whole_commits
from narad.log.recovery import take_records

if TYPE_CHECKING:
    from narad.keyspace import Keyspace

logger = logging.getLogger("narad.replication")


class Diverged(Exception):
    """A commit of the leader this node cannot apply: its history is not the
    leader's (the link stops; docs/replication.md)."""


def apply_appended(keyspace: Keyspace, parts: list[tuple[memoryview, list[Record]]]) -> None:
    """Apply the leader's journal records of `parts` (each: frames, and the records
    scanned from them; together whole commits), which this node's journal has just
    taken (`Journal.append_followed`). Raises Diverged when a commit cannot be
    applied."""
    for _, changes, body in whole_commits(rec for _, records in parts for rec in records):
        _apply(keyspace, changes, body)


def _apply(keyspace: Keyspace, changes: list[list[Any]], body: memoryview) -> None:
    journal = keyspace.journal
    carried: list[Log] = []
    starts: list[Log] = []
    records = nbytes = at = 0
    for change in changes:
        kind = change[0]
        if kind == "rec":
            _, key, first, count, size = change
            run = body[at : at + size]
            at += size
            log = journal.logs.get(key)
            if log is None:
                raise Diverged(
                    f"a commit carries records for {describe_key(key)}, which this node lacks"
                )
            try:
                taken = take_records(log, first, count, run)
            except LogCorrupted as exc:
                raise Diverged(str(exc)) from None
            carried.append(log)
            records += len(taken)
            nbytes += size
            _follow(keyspace, key, taken)
        elif kind == "start":
            log = journal.logs.get(change[1])
            if log is not None:
                log.move_start(change[2])
                starts.append(log)
        # "epoch": the records carry it, and the journal took it with them
    journal.followed(carried, starts, records, nbytes)


def _follow(keyspace: Keyspace, key: int, taken: list[Record]) -> None:
    """What the records `taken` by log `key` change in memory."""
    if not taken:
        return
    kind = key & 3
    if kind == KIND_META:
        for rec in taken:
            try:
                keyspace.follow_meta(rec.offset, rec.payload)
            except (ValueError, KeyError, TypeError) as exc:
                raise Diverged(f"metadata op at offset {rec.offset}: {exc}") from None
        return
    stream = keyspace.streams[key >> 2]
    if kind == KIND_DATA:
        stream.followed_entries()
    elif kind == KIND_STATE:
        stream.follow(_payloads(taken))
        if stream.fault is not None and keyspace.dbs[stream.db].get(stream.key) is stream:
            del keyspace.dbs[stream.db][stream.key]
            keyspace.unavailable[stream.db, stream.key] = stream
            logger.error(
                "event=state_op_fault stream_uid=%d key=%r reason=%s; the key is "
                "unavailable", stream.uid, stream.key, stream.fault.what,
            )
    keyspace.written(stream.db, stream.key)


def _payloads(records: list[Record]) -> Iterator[tuple[int, bytes]]:
    return ((rec.offset, rec.payload) for rec in records)
