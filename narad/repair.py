"""Offline checking and repair of a stopped node's data dir: the replay half of
`narad check [--repair]` (narad/cli.py), above the keyspace and the streams.

Owns:

- the metadata log: `repair_metadata` compacts it into a snapshot of what applied
  (its check, `check_metadata`, is narad/metalog.py's);
- the streams' state logs: `check_states` replays each one read-only, through the
  server's own op handlers, and reports its op that cannot be applied;
  `repair_states` truncates each such log at that op;
- the streams' logs: `check_keys` reports each one that makes its key unavailable at
  a server's start (it must be cut to open, narad/log/check.py's `salvage`, or it
  lacks records the journal no longer holds); `repair_keys` cuts each such log there,
  then recovers the data dir keeping what each log holds (the journal's records for
  it that cannot follow are dropped) and checkpoints it;
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
from narad.errors import clip
from narad.keyspace import STATE_SEGMENT_BYTES, Keyspace, LogFault
from narad.log import Log, LogConfig, LogCorrupted, checkpointer
from narad.log.check import Kind, Problem, Salvage, folder_records, salvage, truncate_durably
from narad.log.checkpoint import fsync_dir
from narad.log.journal import JOURNAL_FOLDER, KIND_META, KIND_STATE, log_key
from narad.log.segment import INDEX_SUFFIX
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


def checkpoint_at_end(root: Path, repairing: bool = False) -> None:
    """Recover data dir `root` as a server's start does, and checkpoint it at the
    journal's end, so that every log holds all its records in its own files and the
    journal holds nothing after its checkpoint: a repair may then edit logs, and
    `checkpointer.rebase` records their new ends. With `repairing`, a stream's log
    that lacks records the journal no longer holds keeps what it holds (Keyspace.open).
    Raises LogCorrupted when a key's log is still unavailable (no checkpoint is then
    taken). The caller holds the lock."""
    keyspace = Keyspace(Config.load(None, [("dir", str(root))]))
    keyspace.open(locked=True, repairing=repairing)
    faults = [s.fault for s in keyspace.unavailable.values() if isinstance(s.fault, LogFault)]
    keyspace.close()
    if faults:
        raise LogCorrupted("; ".join(f"{f.log}: {f.what}" for f in faults))


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
    with the state its earlier ops made; then `_after_cut`. Returns how many logs were
    truncated. The caller holds the data dir's lock (narad/log/lock.py)."""
    checkpoint_at_end(root)
    repaired = 0
    for uid, folder in _state_logs(root):
        fault = _replay_fault(uid, folder_records(folder), machines)
        if fault is not None:
            state = Log.open(folder, LogConfig(segment_ms=0))
            try:
                state.truncate(fault.offset)
            finally:
                state.close()
            _after_cut(root, uid, folder, machines)
            repaired += 1
    return repaired


def _after_cut(root: Path, uid: int, folder: Path, machines: Machines) -> None:
    """Stream `uid`'s state log in `folder` was cut (the journal holds nothing after
    its checkpoint): each machine may append an op to it, fsynced (a queue a new
    receipt secret: deliveries numbered after the cut will be numbered again, so
    every receipt handed out before the repair must be refused), and the checkpoint
    records the log's new end."""
    cut = _replayed(uid, folder_records(folder), machines)
    state = Log.open(folder, LogConfig(segment_ms=0))
    try:
        end = state.next_offset
        for op in [m.after_repair(cut) for m in machines.machines if m.after_repair]:
            if op is not None:
                state.append(_pack_op(op))
        if state.next_offset > end:
            state.write()
            state.sync()
    finally:
        state.close()
    checkpointer.rebase(root / JOURNAL_FOLDER, {log_key(uid, KIND_STATE): state.next_offset})


# -- the streams' logs: keys unavailable at start ---------------------------------------

# Problems of a stream's log that its key's repair mends (besides torn tails and indexes).
KEY_DAMAGE = (Kind.CORRUPT, Kind.OFFSETS, Kind.EMPTY_SEGMENT, Kind.LOG_BEHIND)


def _stream_logs(root: Path) -> Iterator[tuple[int, int, bytes, Path]]:
    """(uid, db, key, log folder) of the data and state log of every stream of data
    dir `root` that its metadata log names and whose folder is there."""
    if not (root / "meta").is_dir():
        return
    meta = MetaState(StreamSchemas(), DATABASES_ANY)
    meta.replay(folder_records(root / "meta"))
    for uid, (db, key) in sorted(meta.names.items()):
        for kind in ("data", "state"):
            folder = root / "streams" / str(uid) / kind
            if folder.is_dir():
                yield uid, db, key, folder


def _cut_plans(root: Path) -> Iterator[tuple[int, int, bytes, Path, Salvage | None]]:
    """`_stream_logs`, each with where it must be cut to open (None: nowhere; a log
    that cannot be read is the log check's to report)."""
    for uid, db, key, folder in _stream_logs(root):
        try:
            plan = salvage(folder, whole=folder.name == "state")  # replayed whole at start
        except OSError:
            plan = None
        yield uid, db, key, folder, plan


def check_keys(root: Path, problems: list[Problem]) -> list[Problem]:
    """A `key` problem for each stream log of data dir `root` that makes its key
    unavailable at a server's start: it must be cut to open, or it lacks records the
    journal no longer holds (a log-behind among `problems`, which the journal check
    found). The problems of `problems` in such a log that `repair_keys` mends become
    repairable (read-only)."""
    behind = {p.path for p in problems if p.kind is Kind.LOG_BEHIND}
    found = []
    for _, db, key, folder, plan in _cut_plans(root):
        if plan is None and folder not in behind:
            continue
        what = f"key '{clip(key)}' (db {db}) is unavailable at start: "
        if plan is not None:
            what += (f"{plan.why}; a repair keeps the log's records before offset {plan.end} "
                     "and those the journal holds from there on, and drops the rest (its "
                     f"files reach offset {plan.records_end})")
        else:
            what += ("the log lacks records the journal no longer holds; a repair keeps the "
                     "records it holds and drops the journal's records for it")
        found.append(Problem(Kind.KEY, folder, None, what, repairable=True))
        for problem in problems:
            if problem.kind in KEY_DAMAGE and folder in (problem.path, problem.path.parent):
                problem.repairable = True
    return found


def repair_keys(root: Path, machines: Machines) -> None:
    """`narad check --repair` for the stream logs that make their keys unavailable
    (`check_keys`): each is cut where it must be to open (segment files from there on
    deleted, the segment holding the place truncated, its index rebuilt at the next
    open), then the data dir is recovered keeping what each log holds and
    checkpointed at the journal's end (`checkpoint_at_end`), and each state log cut
    gets `_after_cut`. Raises LogCorrupted when a key's log is still unavailable. The
    caller holds the data dir's lock."""
    states = []
    for uid, _, _, folder, plan in _cut_plans(root):
        if plan is None:
            continue
        _cut(folder, plan)
        if folder.name == "state":
            states.append((uid, folder))
    checkpoint_at_end(root, repairing=True)
    for uid, folder in states:
        _after_cut(root, uid, folder, machines)


def _cut(folder: Path, plan: Salvage) -> None:
    """Cut the log in `folder` as `plan` says, durably, newest segment first (an
    interrupted cut leaves a log that the next repair cuts again)."""
    for path in reversed(plan.drop):
        path.with_suffix(INDEX_SUFFIX).unlink(missing_ok=True)
        path.unlink()
    if plan.cut is not None:
        path, position = plan.cut
        path.with_suffix(INDEX_SUFFIX).unlink(missing_ok=True)
        truncate_durably(path, position)
    fsync_dir(folder)
