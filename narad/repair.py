"""Offline checking and repair of a stopped node's data dir: the replay half of
`narad check [--repair]` (narad/cli.py), above the keyspace and the streams.

Owns:

- the metadata log: `repair_metadata` compacts it into a snapshot of what applied
  (its check, `check_metadata`, is narad/metalog.py's);
- the streams' state logs: `check_states` replays each one read-only, through the
  server's own op handlers, and reports its op that cannot be applied;
  `repair_states` truncates each such log at that op;
- `checkpoint_at_end`, which recovers and checkpoints the data dir the way a server's
  start does, so that a repair may edit logs.

Never run while a server holds the data dir: a repair edits logs that a server would
have open. The caller (`narad check --repair`) holds the data dir's lock
(narad/log/lock.py) for as long as any of this runs.

This module sits above narad/keyspace.py and narad/streams/stream.py and may import
them; neither may import it.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import msgpack

from narad.config import Config
from narad.keyspace import STATE_SEGMENT_BYTES, Keyspace
from narad.log import Log, LogConfig, checkpointer
from narad.log.check import Kind, Problem, folder_records
from narad.log.journal import JOURNAL_FOLDER, KIND_META, KIND_STATE, log_key
from narad.metalog import DATABASES_ANY, MetaState
from narad.schema.keyspace import StreamSchemas
from narad.streams.machines import Machines
from narad.streams.stream import StateFault, Stream, _pack_op, log_records

# -- the metadata log -------------------------------------------------------------------


def _compact(meta: Log, snap: list[Any]) -> None:
    """Replace the metadata log's history by one snap op, durably: the snap is synced
    before the logical start moves past the old ops and their segments go."""
    meta.roll()
    first = meta.next_offset
    meta.append(msgpack.packb(snap, use_bin_type=False))
    meta.write()
    meta.sync()
    meta.set_start(first)
    meta.apply_retention()


def checkpoint_at_end(root: Path) -> None:
    """Recover data dir `root` as a server's start does, and checkpoint it at the
    journal's end, so that every log holds all its records in its own files and the
    journal holds nothing after its checkpoint: a repair may then edit logs, and
    `checkpointer.rebase` records their new ends. The caller holds the lock."""
    keyspace = Keyspace(Config.load(None, [("dir", str(root))]))
    keyspace.open(locked=True)
    keyspace.close()


def repair_metadata(root: Path) -> int:
    """`narad check --repair` for the metadata log of data dir `root`: when replay
    meets ops it cannot apply, compact the log into a snapshot of what applied (a
    faulted stream keeps its leading usable schema versions; a later version and its
    later ops are dropped). Returns how many faults that removed. The caller holds the
    data dir's lock (narad/log/lock.py), as `narad check --repair` does."""
    checkpoint_at_end(root)
    meta = Log.open(root / "meta", LogConfig(segment_bytes=STATE_SEGMENT_BYTES, segment_ms=0))
    try:
        state = MetaState(StreamSchemas(), DATABASES_ANY)
        state.replay(log_records(meta))
        if state.faults:
            _compact(meta, state.snapshot_op(repaired=True))
    finally:
        meta.close()
    if state.faults:
        checkpointer.rebase(root / JOURNAL_FOLDER, {log_key(0, KIND_META): meta.next_offset})
    return len(state.faults)


# -- the streams' state logs ------------------------------------------------------------


class _NoData:
    """What op handlers and forgetting a lost tail read of a stream's data log (its ends, its
    last ID), for the throwaway replay of `narad check`: whether an op applies, or
    the lost tail is forgotten, never depends on their values."""

    start_offset = 0
    next_offset = 0
    last_id = (0, 0)


def _replay_fault(
    uid: int, records: Iterable[tuple[int, bytes]], machines: Machines
) -> StateFault | None:
    """The first fault of replaying state records (see `_replayed`)."""
    return _replayed(uid, records, machines).fault


def _replayed(uid: int, records: Iterable[tuple[int, bytes]], machines: Machines) -> Stream:
    """A throwaway stream with the state records replayed into it, by the handlers
    and the forgetting of a lost tail the server runs."""
    stream = Stream.__new__(Stream)
    stream.uid = uid
    stream.machines, stream._handlers = machines, machines.handlers
    stream.data = _NoData()  # type: ignore[assignment]
    stream._init_state()
    stream.replay(records)
    return stream


def _state_logs(root: Path) -> Iterator[tuple[int, Path]]:
    """(uid, state log folder) of every stream of data dir `root` that its metadata
    log names (a folder it does not name is an orphan, which the server removes)."""
    if not (root / "meta").is_dir():
        return
    meta = MetaState(StreamSchemas(), DATABASES_ANY)
    meta.replay(folder_records(root / "meta"))
    for uid in sorted(meta.names):
        folder = root / "streams" / str(uid) / "state"
        if folder.is_dir():
            yield uid, folder


def check_states(root: Path, machines: Machines) -> list[Problem]:
    """Replay every stream's state log of data dir `root` from its segment files
    (read-only), through `machines`, and report each stream's op that cannot be
    applied."""
    problems = []
    for uid, folder in _state_logs(root):
        fault = _replay_fault(uid, folder_records(folder), machines)
        if fault is not None:
            problems.append(Problem(
                Kind.STATE_OP, folder, None,
                f"op at offset {fault.offset} cannot be applied: {fault.what}; the stream "
                "is unavailable (a repair truncates its state log there)", repairable=True))
    return problems


def repair_states(root: Path, machines: Machines) -> int:
    """`narad check --repair` for the state logs of data dir `root`: each stream's
    state log is truncated at its op that cannot be applied, so that the stream opens
    with the state its earlier ops made; then each machine may append an op to the
    cut log, fsynced (a queue a new receipt secret: deliveries numbered after the cut
    will be numbered again, so every receipt handed out before the repair must be
    refused). Returns how many logs were truncated. The caller holds the data dir's
    lock (narad/log/lock.py)."""
    checkpoint_at_end(root)
    repaired = 0
    for uid, folder in _state_logs(root):
        fault = _replay_fault(uid, folder_records(folder), machines)
        if fault is not None:
            state = Log.open(folder, LogConfig(segment_ms=0))  # the cut, and what follows
            try:
                state.truncate(fault.offset)
                cut = _replayed(uid, folder_records(folder), machines)
                ops = [m.after_repair(cut) for m in machines.machines if m.after_repair]
                for op in ops:
                    if op is not None:
                        state.append(_pack_op(op))
                if state.next_offset > fault.offset:
                    state.write()
                    state.sync()
            finally:
                state.close()
            end = {log_key(uid, KIND_STATE): state.next_offset}
            checkpointer.rebase(root / JOURNAL_FOLDER, end)
            repaired += 1
    return repaired
