"""The journal of a data dir against its logs: the journal's part of `narad check`.

Owns: reading `<dir>/journal/checkpoint` and every commit from its position on, from
the segment files (read-only, never through Log.open, whose recovery would change
them), and holding each live log (the metadata log, and the data and state logs of
every stream the metadata names) against what the journal says it holds. The journal
folder's segments themselves are checked like every log folder by narad/log/check.py.

What is reported (kinds of narad/log/check.py):
- offsets: the newest journal segment recorded at its roll (journal/newest) is gone,
  deleted by hand: the commits it held are lost. Not repairable.
- checkpoint: the checkpoint file is missing while the journal holds records, damaged,
  malformed, or at a position outside the journal's retained records. Not repairable:
  no one can tell which commits the logs hold durably.
- commit: a journal record that passed its CRC but does not decode as a commit
  (journal.decode_commit) or carries an unknown change. Not repairable; what follows
  it is not read, and no log is then judged ahead of the journal (nor after a bad
  record that the log check reports, followed by valid ones).
- torn-tail: the journal ends inside a commit split over several records (its last
  part, without FLAG_CONTINUES, is missing): what a crash leaves. Recovery drops it.
- log-behind: a log ends before its end in the checkpoint, or before the journal's
  first records for it: records are lost that the journal no longer holds. Not
  repairable.
- corrupt: a log record whose bytes differ from the journal's for the same offset.
  Not repairable.
- log-ahead: a log holds records past its end in the journal (written before their
  commit, which never finished): what a crash leaves. Recovery cuts them back.

Cost: the journal from its checkpoint on, plus each live log's tail from the first
offset the journal holds for it (found through its index, verified). Only where the
journal's bytes of each change lie is kept in memory, not the bytes themselves.
"""

from __future__ import annotations

from collections.abc import Generator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from narad.log import checkpoint, format
from narad.log.check import (
    Kind,
    Problem,
    ProgressSink,
    SegmentFile,
    folder_records,
    list_segments,
    seek_position,
)
from narad.log.checkpointer import CHECKPOINT_FILE, Checkpoint
from narad.log.checkpointer import read as read_checkpoint
from narad.log.format import HEADER_BYTES, Record
from narad.log.journal import (
    FLAG_CONTINUES,
    JOURNAL_FOLDER,
    KIND_DATA,
    KIND_META,
    KIND_STATE,
    BadCommit,
    decode_commit,
    describe_key,
    log_key,
    read_newest,
)
from narad.log.opening import START_CHECKPOINT
from narad.log.segment import segment_name, zero_tail

# Records of one log whose bytes differ from the journal's, listed; more are counted
# in the last one's text.
MISMATCHES_PER_LOG_MAX = 5


@dataclass(frozen=True)
class Run:
    """One "rec" change of a whole commit: records first .. first+count-1 of a log,
    whose framed bytes lie at byte `position` of journal segment `path`."""

    first: int
    count: int
    path: Path
    position: int
    size: int

    @property
    def end(self) -> int:
        return self.first + self.count


@dataclass
class JournalWalk:
    """What the journal holds from its checkpoint on (see `walk_journal`)."""

    folder: Path
    at: Checkpoint | None = None  # None: no usable checkpoint (see `problems`)
    start: int = 0  # first retained position
    end: int = 0  # the journal's position: records it holds
    runs: dict[int, list[Run]] = field(default_factory=dict)  # log key -> its runs, in order
    commits: int = 0  # whole commits read from the checkpoint on
    complete: bool = True  # every record from the checkpoint on was a readable commit
    problems: list[Problem] = field(default_factory=list)

    def journal_end(self, key: int) -> int | None:
        """Where log `key` ends as the journal says (None: it says nothing)."""
        runs = self.runs.get(key)
        if runs:
            return runs[-1].end
        return None if self.at is None else self.at.ends.get(key)


# -- reading a log folder ---------------------------------------------------------------


def logical_start(folder: Path) -> int:
    """The log's start.checkpoint offset (0 when absent or unreadable; the log check
    reports a bad one)."""
    lines = checkpoint.read(folder / START_CHECKPOINT) or []
    words = lines[0].split() if len(lines) == 1 else []
    return int(words[1]) if len(words) == 2 and words[1].isdigit() else 0


def records_from(
    folder: Path, offset: int, cut: list[bool] | None = None
) -> Generator[tuple[SegmentFile, Record], None, None]:
    """(open segment, record) of every valid record of the log in `folder` from
    `offset` on, each segment's scan started through its index (verified); a bad
    record ends it (the log check reports it). When it ends at a bad record that
    valid records of the log follow (not a torn tail), True is appended to `cut`."""
    segments = list_segments(folder)
    bases = [base for base, _ in segments]
    first = max(sum(1 for base in bases if base <= offset) - 1, 0)
    for i, (_, path) in enumerate(segments[first:], first):
        with SegmentFile(path) as f:
            expected = offset
            for rec in f.records(seek_position(f, offset)):
                expected = rec.offset + 1
                if rec.offset >= offset:
                    yield f, rec
            bad = f.bad
            if bad is None:
                continue
            if cut is not None and (
                i + 1 < len(segments)
                or (not zero_tail(f.fd, bad.position) and f.resync(bad.position, expected))
            ):
                cut.append(True)
            return


def log_end(folder: Path) -> int:
    """The offset after the last valid record of the log in `folder`: its last
    segment scanned from its last index entry (when it names a valid record)."""
    segments = list_segments(folder)
    if not segments:
        return 0
    base, path = segments[-1]
    end = base
    with SegmentFile(path) as f:
        for rec in f.records(seek_position(f, 1 << 63)):
            end = rec.offset + 1
    return end


def _held_bytes(f: SegmentFile, rec: Record) -> bytes:
    return f.pread(rec.position, rec.size)


# -- the journal ------------------------------------------------------------------------


def walk_journal(root: Path, progress: ProgressSink | None = None) -> JournalWalk:
    """Read the checkpoint of data dir `root`'s journal and every commit from it on;
    `progress` advances by the journal bytes read (see `journal_scan_bytes`)."""
    folder = root / JOURNAL_FOLDER
    walk = JournalWalk(folder)
    segments = list_segments(folder)
    first_base = segments[0][0] if segments else 0
    walk.start = max(first_base, logical_start(folder))
    walk.end = log_end(folder)
    recorded = read_newest(folder)
    if segments and recorded is not None and recorded > segments[-1][0]:
        what = (f"missing: the journal's newest segment, from position {recorded} on "
                f"(the newest present starts at {segments[-1][0]}); its commits are lost")
        gone = folder / segment_name(recorded)
        walk.problems.append(Problem(Kind.OFFSETS, gone, None, what))
    path = folder / CHECKPOINT_FILE
    try:
        at = read_checkpoint(folder)
    except ValueError as exc:
        walk.problems.append(Problem(Kind.CHECKPOINT, path, None, f"malformed: {exc}"))
        return walk
    if at is None:
        if path.exists():
            what = ("damaged (crc line missing or wrong): recovery cannot tell which "
                    "commits the logs hold")
            walk.problems.append(Problem(Kind.CHECKPOINT, path, None, what))
        elif walk.end > walk.start:
            what = (f"missing while the journal holds positions {walk.start}..{walk.end}: "
                    "recovery cannot tell which commits the logs hold")
            walk.problems.append(Problem(Kind.CHECKPOINT, path, None, what))
        else:  # a new data dir, or one from before the journal: its logs count as they are
            walk.at = Checkpoint(walk.end, trust_logs=True)
        return walk
    if not walk.start <= at.position <= walk.end:
        what = (f"position {at.position} lies outside the journal's retained positions "
                f"{walk.start}..{walk.end}: a journal segment is missing or cut")
        walk.problems.append(Problem(Kind.CHECKPOINT, path, None, what))
        return walk
    walk.at = at
    _read_commits(walk, at.position, progress)
    return walk


def journal_scan_bytes(root: Path) -> int:
    """Journal segment bytes `walk_journal` may read: every segment from the one that
    holds the checkpoint's position on (all of them when that cannot be told)."""
    folder = root / JOURNAL_FOLDER
    try:
        at = read_checkpoint(folder)
    except ValueError:
        at = None
    position = 0 if at is None else at.position
    try:
        segments = list_segments(folder)
        bases = [base for base, _ in segments]
        first = max(sum(1 for base in bases if base <= position) - 1, 0)
        return sum(path.stat().st_size for _, path in segments[first:])
    except OSError:
        return 0


@dataclass
class _Part:
    path: Path
    rec: Record
    changes: list[list[Any]]
    body_at: int  # byte position of the part's body in its segment file


def _read_commits(walk: JournalWalk, position: int, progress: ProgressSink | None) -> None:
    parts: list[_Part] = []
    done: dict[Path, int] = {}  # segment -> bytes reported to progress
    cut: list[bool] = []  # the journal's records go on after a bad one
    for f, rec in records_from(walk.folder, position, cut):
        if progress is not None:
            step = rec.position + rec.size - done.get(f.path, 0)
            progress.advance(step)
            done[f.path] = rec.position + rec.size
        try:
            changes, body = _decode(rec.payload)
        except BadCommit as exc:
            what = f"journal record at position {rec.offset} is not a commit: {exc}"
            walk.problems.append(Problem(Kind.COMMIT, f.path, rec.position, what))
            walk.complete = False
            return
        body_at = rec.position + HEADER_BYTES + len(rec.payload) - len(body)
        parts.append(_Part(f.path, rec, changes, body_at))
        if rec.flags & FLAG_CONTINUES:
            continue
        for part in parts:
            _take_runs(walk, part)
        walk.commits += 1
        parts = []
    if cut:
        # A bad record before the journal's last ones (the log check reports it): what
        # follows is not known, so no log is judged ahead of the journal.
        walk.complete = False
        return
    if parts:
        first = parts[0]
        size = sum(p.rec.size for p in parts)
        what = (f"the journal ends inside a commit: {len(parts)} part(s) from position "
                f"{first.rec.offset} on, {size} bytes, without their last part; "
                "recovery drops this commit")
        walk.problems.append(Problem(Kind.TORN_TAIL, first.path, first.rec.position, what,
                                     size, repairable=True))


def _decode(payload: bytes) -> tuple[list[list[Any]], memoryview]:
    """decode_commit, with every change's shape checked; raises BadCommit."""
    try:
        changes, body = decode_commit(payload)
    except (IndexError, TypeError) as exc:  # a "rec" change too short to name its bytes
        raise BadCommit(f"a change is malformed: {exc}") from None
    _check_changes(changes)
    return changes, body


def _check_changes(changes: list[list[Any]]) -> None:
    for change in changes:
        kind = change[0] if change else None
        if kind == "rec" and len(change) == 5 and all(isinstance(v, int) for v in change[1:]):
            continue
        if kind == "start" and len(change) == 3 and all(isinstance(v, int) for v in change[1:]):
            continue
        if kind == "epoch" and len(change) == 2 and isinstance(change[1], int):
            continue
        raise BadCommit(f"unknown journal change {change!r}")


def _take_runs(walk: JournalWalk, part: _Part) -> None:
    at = part.body_at
    for change in part.changes:
        if change[0] != "rec":
            continue
        _, key, first, count, size = change
        walk.runs.setdefault(key, []).append(Run(first, count, part.path, at, size))
        at += size


def run_bytes(run: Run) -> bytes:
    with SegmentFile(run.path) as f:
        return f.pread(run.position, run.size)


def run_records(run: Run) -> list[Record]:
    """The records a run carries, with positions relative to its first byte; raises
    BadCommit when they are not `count` whole records."""
    data = run_bytes(run)
    records, used, _, detail = format.scan(data, 0, 0, run.count)
    if len(records) != run.count or used != len(data):
        raise BadCommit(f"a change holds no {run.count} whole records: {detail}")
    return records


# -- the logs ---------------------------------------------------------------------------


def metadata_records(root: Path, walk: JournalWalk) -> Iterator[tuple[int, bytes]]:
    """(offset, payload) of the metadata log as recovery would make it: its records
    from its logical start, then the journal's metadata records past its end."""
    end = 0
    if (root / "meta").is_dir():
        for offset, payload in folder_records(root / "meta"):
            end = offset + 1
            yield offset, payload
    for run in walk.runs.get(log_key(0, KIND_META), []):
        if run.end <= end:
            continue
        try:
            records = run_records(run)
        except BadCommit:
            return
        for rec in records:
            if rec.offset >= end:
                end = rec.offset + 1
                yield rec.offset, rec.payload


def live_keys(root: Path, walk: JournalWalk) -> list[int]:
    """The log keys recovery opens: the metadata log's, then the data and state logs
    of every stream the metadata names."""
    from narad.metalog import DATABASES_ANY, MetaState
    from narad.schema.keyspace import StreamSchemas

    state = MetaState(StreamSchemas(), DATABASES_ANY)
    state.replay(metadata_records(root, walk))
    keys = [log_key(0, KIND_META)]
    for uid in sorted(state.names):
        keys += [log_key(uid, KIND_DATA), log_key(uid, KIND_STATE)]
    return keys


def check_journal(root: Path, progress: ProgressSink | None = None) -> list[Problem]:
    """Everything this module reports (see the module doc) for data dir `root`; no
    journal folder: nothing (a log folder, or a data dir from before the journal)."""
    if not (root / JOURNAL_FOLDER).is_dir():
        return []
    walk = walk_journal(root, progress)
    problems = walk.problems
    if walk.at is None or walk.at.trust_logs:
        return problems
    for key in live_keys(root, walk):
        folder = root / describe_key(key)
        if folder.is_dir():
            problems += _check_log(walk, key, folder)
    return problems


def _check_log(walk: JournalWalk, key: int, folder: Path) -> list[Problem]:
    assert walk.at is not None
    problems: list[Problem] = []
    have = log_end(folder)
    durable = walk.at.ends.get(key, 0)
    runs = walk.runs.get(key, [])
    name = describe_key(key)
    if have < durable:
        what = (f"the log ends at offset {have} but the journal checkpoint says it held "
                f"{durable} records durably ({name}): offsets {have}..{durable - 1} are lost "
                "and the journal no longer holds them")
        problems.append(Problem(Kind.LOG_BEHIND, folder, None, what))
    elif runs and have < runs[0].first:
        what = (f"the log ends at offset {have} but the journal's records for it start at "
                f"{runs[0].first} ({name}): offsets {have}..{runs[0].first - 1} are lost "
                "and the journal no longer holds them")
        problems.append(Problem(Kind.LOG_BEHIND, folder, None, what))
    problems += _compare(folder, name, runs, have)
    end = walk.journal_end(key)
    if end is None:
        end = 0
    if walk.complete and have > end:
        what = (f"the log holds {have - end} records past its end in the journal "
                f"(offsets {end}..{have - 1}, {name}): their commit never finished; "
                "recovery cuts the log back to offset "
                f"{end} (a server's start, or --repair)")
        problems.append(Problem(Kind.LOG_AHEAD, folder, None, what, repairable=True))
    return problems


def _compare(folder: Path, name: str, runs: list[Run], have: int) -> list[Problem]:
    """Problems for log records whose bytes differ from the journal's, where the
    log (ending before `have`) holds the offsets of `runs`."""
    problems: list[Problem] = []
    held = [run for run in runs if run.first < have]
    if not held:
        return problems
    differing = 0
    logs = records_from(folder, held[0].first)
    current = next(logs, None)
    for run in held:
        data = run_bytes(run)
        records = format.scan(data, 0, 0, run.count)[0]  # unframed: a bad commit
        for i, carried in enumerate(records):
            offset = run.first + i
            while current is not None and current[1].offset < offset:
                current = next(logs, None)
            if current is None:
                break
            f, rec = current
            if rec.offset != offset:
                continue
            if data[carried.position : carried.position + carried.size] == _held_bytes(f, rec):
                continue
            differing += 1
            if differing <= MISMATCHES_PER_LOG_MAX:
                what = (f"record at offset {offset} ({name}) differs from the journal's "
                        "bytes for it")
                problems.append(Problem(Kind.CORRUPT, f.path, rec.position, what, rec.size))
    logs.close()
    if differing > MISMATCHES_PER_LOG_MAX:
        last = problems[-1]
        last.what += f"; {differing - MISMATCHES_PER_LOG_MAX} more records differ"
    return problems

