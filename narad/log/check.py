"""Offline verification and repair of log folders: the engine of `narad check`.

Owns: reading every byte of a log folder (segments, indexes, checkpoints) without
trusting any of it, checking it against docs/log-format.md, and sorting what is wrong
into problem kinds:

- torn-tail: the last segment ends in a bad or cut-off record with nothing valid after
  it. This is what a crash leaves and what recovery truncates. Repairable.
- corrupt: a bad record followed by valid records, or any bad record in a sealed
  segment. Reported with the bytes that cannot be read. Never repaired here: every
  repair would drop records that may exist nowhere else.
- offsets, empty-segment, order: offsets that are not dense, a zero-length segment
  that is not the last one, stream IDs or timestamps that go back. Not repairable.
- index: an index file that differs from the one a rebuild gives. Repairable.
- checkpoint: a damaged or malformed checkpoint file. Not repairable.
- io-error: a file that cannot be read (or, when repairing, written).
- meta-op: a data dir's metadata op that replay cannot apply (found by
  narad/metalog.py's check_metadata, repaired by narad/repair.py's repair_metadata,
  not here). Repairable.
- state-op: a stream's state op that replay cannot apply (found and repaired by
  narad/repair.py's check_states and repair_states, not here). Repairable.
- commit, log-behind, log-ahead: a data dir's journal against its logs (found by
  narad/check_journal.py, which also reports a commit whose last part is missing
  as a torn-tail, and log bytes that differ from the journal's as corrupt).
- key: a stream's log that makes its key unavailable at a server's start (found and
  repaired by narad/repair.py's check_keys and repair_keys, not here: the log is cut
  where `salvage` says, the journal's records it cannot take are dropped). Its log's
  corrupt, offsets, empty-segment and log-behind problems are then repairable too.

With `repair`, a torn tail is truncated (ftruncate, then fsync) and each bad index is
rewritten. Nothing else is ever written, renamed or deleted here.

`salvage` reads a log folder as an open reads it and says where the log must be cut
for an open to take it (the damage above that an open refuses: a segment missing, a
record that fails its checks in a sealed segment past its index's last entry, an
offset out of place, an empty segment that is not the last): the records before the
first such place are kept, every record from it on is dropped. narad/repair.py
applies it to a stream's logs.

Never: open a log through Log.open (its recovery truncates and rewrites files), hold a
whole segment in memory (reads are chunked; only one record larger than a chunk is
read whole), or trust an index to find records. Never repair a log that a server has
open: a concurrent append looks like a torn tail, and a repair could cut it (`narad
check --repair` holds the data dir's lock while it runs: narad/log/lock.py).
"""

from __future__ import annotations

import enum
import os
import re
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Protocol

from narad.log import checkpoint, format
from narad.log.format import (
    HEADER_BYTES,
    LENGTH_MIN,
    RECORD_BYTES_MAX,
    SCAN_OK,
    SCAN_SHORT,
    Record,
)
from narad.log.index import ENTRY, ENTRY_BYTES, IndexEntry, SparseIndex
from narad.log.opening import EPOCHS_CHECKPOINT, START_CHECKPOINT
from narad.log.segment import INDEX_SUFFIX, parse_segment_name, zero_tail

# Bytes read per pread; a single larger record is read whole.
CHUNK_BYTES = 1 << 20
# Progress is reported after at least this many bytes (and at the end of a segment).
PROGRESS_STEP_BYTES = 1 << 20
# Record-level problems (corrupt, offsets, order) listed per segment; more are counted.
PROBLEMS_PER_SEGMENT_MAX = 20
# A checkpoint file larger than this is reported without being read.
CHECKPOINT_BYTES_MAX = 16 << 20

# The header fields a resynchronising scan looks at before paying for a CRC.
_PROBE = struct.Struct("<IIBBIQ")  # length, crc, version, flags, epoch, offset
_VERSION_BYTE = bytes([format.FORMAT_VERSION])
_VERSION_AT = 8  # byte position of the version field in a record


class ProgressSink(Protocol):
    """Told how many more segment bytes were checked; the total is `scan_bytes`."""

    def advance(self, n: int) -> None: ...


# -- problems and the report ---------------------------------------------------------


class Kind(enum.Enum):
    TORN_TAIL = "torn-tail"
    CORRUPT = "corrupt"
    OFFSETS = "offsets"
    EMPTY_SEGMENT = "empty-segment"
    ORDER = "order"
    INDEX = "index"
    CHECKPOINT = "checkpoint"
    IO_ERROR = "io-error"
    META_OP = "meta-op"  # a metadata op replay cannot apply (narad/metalog.py)
    STATE_OP = "state-op"  # a stream's state op replay cannot apply (narad/streams/stream.py)
    COMMIT = "commit"  # a journal record that is not a commit (narad/check_journal.py)
    LOG_BEHIND = "log-behind"  # a log lacks records the journal no longer holds
    LOG_AHEAD = "log-ahead"  # a log holds records past its end in the journal
    KEY = "key"  # a stream's log that makes its key unavailable (narad/repair.py)


@dataclass
class Problem:
    kind: Kind
    path: Path  # the file concerned: a segment, an index or a checkpoint
    position: int | None  # byte position in that file, when one applies
    what: str  # one line, no trailing period
    size_bytes: int = 0  # bytes affected (unreadable or to be cut); 0 when not applicable
    repairable: bool = False
    repaired: bool = False


@dataclass
class CheckReport:
    """What one or more checks found; counts cover everything that was read."""

    logs: int = 0
    segments: int = 0
    records: int = 0  # valid records read
    scanned_bytes: int = 0  # segment bytes read (sizes before any repair)
    problems: list[Problem] = field(default_factory=list)
    unlisted: int = 0  # record-level problems beyond PROBLEMS_PER_SEGMENT_MAX, not listed

    @property
    def remaining(self) -> list[Problem]:
        """Problems still on disk: not repaired."""
        return [p for p in self.problems if not p.repaired]

    @property
    def clean(self) -> bool:
        """Whether nothing is wrong any more (everything found was repaired)."""
        return not self.remaining and not self.unlisted


# -- reading segment files -----------------------------------------------------------


@dataclass(frozen=True)
class BadRecord:
    position: int  # byte position of the first record that failed its checks
    reason: str


class SegmentFile:
    """One segment file opened read-only, for offline tools. Owned by one thread."""

    def __init__(self, path: Path) -> None:
        base = parse_segment_name(path.name)
        if base is None:
            raise ValueError(f"{path} is not named like a segment file")
        self.path = path
        self.base_offset = base
        self.fd = os.open(path, os.O_RDONLY)
        # Bytes in the file when it was opened; tools assume nobody writes meanwhile.
        self.size = os.fstat(self.fd).st_size
        # Why the last `records` iteration stopped before the end, or None.
        self.bad: BadRecord | None = None

    def __enter__(self) -> SegmentFile:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def pread(self, position: int, size: int) -> bytes:
        return os.pread(self.fd, size, position)

    def records(self, position: int = 0) -> Iterator[Record]:
        """Valid records from byte `position` to the end of the file, read in chunks.

        Stops at the first record that fails its checks or runs past the end of the
        file, and says why in `bad` (None when the end was reached).
        """
        self.bad = None
        chunk = CHUNK_BYTES
        while position < self.size:
            want = min(chunk, self.size - position)
            buf = self.pread(position, want)
            if len(buf) < want:  # the file shrank under us: its end is here now
                self.size = position + len(buf)
            records, used, status, detail = format.scan(buf, 0, position, 1 << 30)
            yield from records
            position += used
            chunk = CHUNK_BYTES
            if status == SCAN_OK:
                continue
            if status == SCAN_SHORT and position + int(detail) <= self.size:
                chunk = int(detail)
                continue
            self.bad = BadRecord(position, self._why(status, detail, position))
            return

    def _why(self, status: int, detail: int | str, position: int) -> str:
        if status != SCAN_SHORT:
            return str(detail)
        left = self.size - position
        if left < HEADER_BYTES:
            return f"record header cut off by the end of the file: {left} of {HEADER_BYTES} bytes"
        return f"record cut off by the end of the file: {left} of {detail} bytes"

    def record_at(self, position: int) -> Record | None:
        """The valid record starting at byte `position`, or None."""
        head = self.pread(position, HEADER_BYTES)
        if len(head) < HEADER_BYTES:
            return None
        length = int.from_bytes(head[:4], "little")
        if not LENGTH_MIN <= length <= RECORD_BYTES_MAX or position + 4 + length > self.size:
            return None
        records = format.scan(self.pread(position, 4 + length), 0, position, 1)[0]
        return records[0] if records else None

    def resync(self, bad: int, expected_offset: int) -> Record | None:
        """The first valid record after the bad one at byte `bad` that can carry on
        the log, whose next offset is `expected_offset`; None when there is none.

        Tried first where the bad record's own length field points, then at every later
        byte where the version and the offset's high bytes fit, cheapest checks first.
        """
        head = self.pread(bad, 4)
        if len(head) == 4:
            at = bad + 4 + int.from_bytes(head, "little")
            if self._plausible(self.pread(at, _PROBE.size), 0, at, bad, expected_offset):
                found = self.record_at(at)
                if found is not None:
                    return found
        lost_max = (self.size - bad) // HEADER_BYTES
        pattern = _probe_pattern(expected_offset, expected_offset + lost_max)
        start = bad + 1
        while start + HEADER_BYTES <= self.size:
            window = self.pread(start, min(CHUNK_BYTES, self.size - start))
            found = self._first_in_window(pattern, window, start, bad, expected_offset)
            if found is not None:
                return found
            # Windows overlap by one probe, so that a probe cut by the end of this
            # window is whole in the next.
            start += max(len(window) - _PROBE.size, 1)
        return None

    def _first_in_window(
        self, pattern: re.Pattern[bytes], window: bytes, start: int, bad: int, expected: int
    ) -> Record | None:
        """The first record `resync` accepts whose probe lies in `window`, which holds
        the file's bytes from byte `start`."""
        match = pattern.search(window, _VERSION_AT)
        while match is not None:
            i = match.start() - _VERSION_AT
            if self._plausible(window, i, start + i, bad, expected):
                found = self.record_at(start + i)
                if found is not None:
                    return found
            match = pattern.search(window, match.start() + 1)
        return None

    def _plausible(self, probe: bytes, i: int, position: int, bad: int, expected: int) -> bool:
        """Whether the header in `probe` from index `i` could start a record at byte
        `position` that carries on the log after the bad bytes from `bad`: its offset
        is possible, since each record lost in those bytes took at least HEADER_BYTES."""
        if len(probe) - i < _PROBE.size or position + HEADER_BYTES > self.size:
            return False
        length, _, version, _, _, offset = _PROBE.unpack_from(probe, i)
        lost_max = (position - bad) // HEADER_BYTES
        return bool(
            version == format.FORMAT_VERSION
            and LENGTH_MIN <= length <= RECORD_BYTES_MAX
            and expected <= offset <= expected + lost_max
        )


def _probe_pattern(lo: int, hi: int) -> re.Pattern[bytes]:
    """Matches a record's bytes from its version field to the end of its offset
    field when the version is right and the offset's high bytes are those that every
    offset in lo .. hi shares: a filter that runs in C, before any Python-level check."""
    hi = min(hi, (1 << 64) - 1)
    lo_bytes, hi_bytes = lo.to_bytes(8, "little"), hi.to_bytes(8, "little")
    shared = 0
    while shared < 8 and lo_bytes[7 - shared] == hi_bytes[7 - shared]:
        shared += 1
    gap = _PROBE.size - _VERSION_AT - 1 - shared  # flags, epoch, the offset's low bytes
    top = re.escape(lo_bytes[8 - shared :])
    return re.compile(re.escape(_VERSION_BYTE) + b".{%d}" % gap + top, re.DOTALL)


# -- finding logs --------------------------------------------------------------------


def list_segments(folder: Path) -> list[tuple[int, Path]]:
    """(base offset, path) of every segment file in `folder`, oldest first."""
    found = []
    for path in folder.iterdir():
        base = parse_segment_name(path.name)
        if base is not None and path.is_file():
            found.append((base, path))
    return sorted(found)


def folder_records(folder: Path) -> Iterator[tuple[int, bytes]]:
    """(offset, payload) of the log in `folder` from its logical start, read from its
    segment files (read-only, for replaying a log's ops in a check); a damaged record
    ends it (the log check reports it)."""
    lines = checkpoint.read(folder / START_CHECKPOINT) or []
    words = lines[0].split() if lines else []
    start = int(words[1]) if len(words) == 2 and words[0] == "start" and words[1].isdigit() else 0
    for _, path in list_segments(folder):
        with SegmentFile(path) as segment:
            for rec in segment.records():
                if rec.offset >= start:
                    yield rec.offset, rec.payload
            if segment.bad is not None:
                return


def seek_position(f: SegmentFile, offset: int) -> int:
    """A byte position at or before record `offset` in `f`: the index entry's, when
    that entry names a valid record with its offset (the index is only a hint), else 0."""
    index = SparseIndex.load(f.path.with_suffix(INDEX_SUFFIX))
    if offset <= f.base_offset or index is None or not len(index):
        return 0
    i = index.floor_offset(offset)
    if i < 0:
        return 0
    entry_offset, position, _, _ = index.entry(i)
    rec = f.record_at(position)
    return position if rec is not None and rec.offset == entry_offset <= offset else 0


def find_logs(root: Path) -> list[Path]:
    """Every folder at or under `root` that holds at least one segment file, sorted."""
    logs = []
    for folder, dirs, files in os.walk(root):
        dirs.sort()
        if any(parse_segment_name(name) is not None for name in files):
            logs.append(Path(folder))
    return sorted(logs)


def scan_bytes(folders: list[Path]) -> int:
    """Segment bytes a check of `folders` reads: the exact total for progress (files
    that cannot be listed or read count 0, as they do in the check)."""
    total = 0
    for folder in folders:
        try:
            total += sum(path.stat().st_size for _, path in list_segments(folder))
        except OSError:
            continue
    return total


# -- salvage ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Salvage:
    """Where a damaged log is cut so that it opens (see the module doc): records from
    `end` on are dropped, `why` the log cannot go on there."""

    end: int  # the first offset dropped
    records_end: int  # the offset after the last valid record the files hold
    why: str  # one line
    drop: list[Path]  # segment files wholly dropped, oldest first
    cut: tuple[Path, int] | None  # the segment that keeps records before `end`, cut at that byte


def salvage(folder: Path, whole: bool = False) -> Salvage | None:
    """How to cut the log in `folder` so that it opens, or None when it opens as it is
    (read-only). Each segment is read as the open reads it (narad/log/opening.py): a
    sealed one from its index's last entry when the index is usable, else whole; the
    last one whole, where a bad record is a tail recovery truncates, not damage. So
    damage an open does not see (before a trusted index entry) is left to reads,
    which refuse it. With `whole`, every sealed segment is read whole: a log that is
    read to its end at start (a state log) is cut at damage anywhere."""
    segments = list_segments(folder)
    expected: int | None = None
    records_end = segments[-1][0] if segments else 0
    found: tuple[int, str, int, int | None] | None = None  # (end, why, segment index, byte)
    for i, (base, path) in enumerate(segments):
        last = i == len(segments) - 1
        if found is None and expected is not None and base != expected:
            found = (expected, f"{path.name} starts at offset {base}, not {expected}", i, None)
        with SegmentFile(path) as f:
            if found is None and f.size == 0 and not last:
                found = (base, f"{path.name} is empty and not the last segment", i, None)
            position, expected = (0, base) if last or whole else _trusted_entry(f)
            for rec in f.records(position):
                if found is None and rec.offset != expected:
                    found = (expected, f"{path.name} holds offset {rec.offset} at byte "
                             f"{rec.position} where {expected} was expected", i, rec.position)
                expected = rec.offset + 1
                records_end = max(records_end, expected)
            bad = f.bad
            if found is None and bad is not None and not last:
                found = (expected, f"{path.name}: {bad.reason} at byte {bad.position} of a "
                         "sealed segment", i, bad.position)
    if found is None:
        return None
    end, why, at, byte = found
    if not byte:
        drop, cut = [path for _, path in segments[at:]], None
    else:
        drop, cut = [path for _, path in segments[at + 1 :]], (segments[at][1], byte)
    return Salvage(end, records_end, why, drop, cut)


def _trusted_entry(f: SegmentFile) -> tuple[int, int]:
    """(byte position, offset) an open of sealed segment `f` scans from: its index's
    last entry when the index is structurally valid and that entry names a valid
    record with its offset and ID, else the segment's start."""
    index = SparseIndex.load(f.path.with_suffix(INDEX_SUFFIX))
    if index is not None and index.structurally_valid(f.base_offset, f.size):
        offset, position, id_ms, id_seq = index.entry(len(index) - 1)
        rec = f.record_at(position)
        if rec is not None and (rec.offset, rec.id_ms, rec.id_seq) == (offset, id_ms, id_seq):
            return position, offset
    return 0, f.base_offset


# -- checking ------------------------------------------------------------------------


def check_log(
    folder: Path, repair: bool = False, progress: ProgressSink | None = None
) -> CheckReport:
    """Check one log folder; with `repair`, fix what can be fixed without loss."""
    return check_logs([folder], repair, progress)


def check_logs(
    folders: list[Path], repair: bool = False, progress: ProgressSink | None = None
) -> CheckReport:
    report = CheckReport()
    for folder in folders:
        _LogCheck(folder, repair, progress, report).run()
    return report


def check_data_dir(
    path: Path, repair: bool = False, progress: ProgressSink | None = None
) -> CheckReport:
    """Check every log folder at or under `path` (see `find_logs`)."""
    return check_logs(find_logs(path), repair, progress)


class _LogCheck:
    """Checks one log folder: segments oldest first, then checkpoints. Carries what
    the next record must respect across segment boundaries."""

    def __init__(
        self, folder: Path, repair: bool, progress: ProgressSink | None, report: CheckReport
    ) -> None:
        self.folder = folder
        self.repair = repair
        self.progress = progress
        self.report = report
        self.next_offset: int | None = None  # offset the next record must carry
        self.last_id = (0, 0)  # stream ID of the previous valid record
        self.last_timestamp_ms = 0  # timestamp of the previous valid record

    def run(self) -> None:
        self.report.logs += 1
        try:
            segments = list_segments(self.folder)
            strays = [path for path in self.folder.iterdir()
                      if parse_segment_name(path.name) is not None and not path.is_file()]
        except OSError as exc:
            self.add(Problem(Kind.IO_ERROR, self.folder, None, f"cannot list: {exc}"))
            return
        for path in strays:  # the log does not open with it there
            self.add(Problem(Kind.IO_ERROR, path, None, "named as a segment but not a file"))
        for i, (_, path) in enumerate(segments):
            self._segment(path, is_last=i == len(segments) - 1)
        self._checkpoints()

    def add(self, problem: Problem) -> None:
        self.report.problems.append(problem)

    def _segment(self, path: Path, is_last: bool) -> None:
        """Check one segment; progress advances by its size whatever happens."""
        planned, check = 0, None
        try:
            planned = path.stat().st_size
            with SegmentFile(path) as f:
                check = _SegmentCheck(self, f, is_last)
                check.run()
        except OSError as exc:
            self.add(Problem(Kind.IO_ERROR, path, None, f"I/O error: {exc}"))
        done = check.progressed if check is not None else 0
        if self.progress is not None and planned > done:
            self.progress.advance(planned - done)

    # -- checkpoints ------------------------------------------------------------------

    def _checkpoints(self) -> None:
        start = self._checkpoint_lines(
            self.folder / START_CHECKPOINT,
            "the log would start at its first segment instead",
        )
        if start is not None and not _valid_start(start):
            self._bad_checkpoint(
                START_CHECKPOINT, f"expected one line 'start <offset>', got {start!r}"
            )
        epochs = self._checkpoint_lines(
            self.folder / EPOCHS_CHECKPOINT, "the log would forget its leader epochs"
        )
        if epochs is not None:
            fault = _epochs_fault(epochs)
            if fault is not None:
                self._bad_checkpoint(EPOCHS_CHECKPOINT, fault)

    def _checkpoint_lines(self, path: Path, when_ignored: str) -> list[str] | None:
        """The lines of the checkpoint at `path`; None when absent or reported bad."""
        try:
            if path.stat().st_size > CHECKPOINT_BYTES_MAX:
                self._bad_checkpoint(path.name, f"larger than {CHECKPOINT_BYTES_MAX} bytes")
                return None
            lines = checkpoint.read(path)
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            self.add(Problem(Kind.CHECKPOINT, path, None, f"cannot read: {exc}"))
            return None
        if lines is None:
            self._bad_checkpoint(path.name, f"damaged (crc line missing or wrong): {when_ignored}")
        return lines

    def _bad_checkpoint(self, name: str, what: str) -> None:
        self.add(Problem(Kind.CHECKPOINT, self.folder / name, None, what))


def _valid_start(lines: list[str]) -> bool:
    words = lines[0].split(" ") if len(lines) == 1 else []
    return len(words) == 2 and words[0] == "start" and words[1].isdigit()


def _epochs_fault(lines: list[str]) -> str | None:
    """What is wrong with epochs.checkpoint lines, or None: '<epoch> <first offset>'
    per line, epochs increasing, first offsets never decreasing."""
    prev: tuple[int, int] | None = None
    for number, line in enumerate(lines, 1):
        words = line.split(" ")
        if len(words) != 2 or not all(w.isdigit() for w in words):
            return f"line {number} is {line!r}, expected '<epoch> <first offset>'"
        cur = (int(words[0]), int(words[1]))
        if prev is not None and (cur[0] <= prev[0] or cur[1] < prev[1]):
            return f"line {number} ({line!r}) does not follow {prev[0]} {prev[1]}"
        prev = cur
    return None


# -- one segment ---------------------------------------------------------------------


class _SegmentCheck:
    """Reads one segment whole, checking each record against the log so far and
    rebuilding the index a recovery would build, then judges the index file."""

    def __init__(self, log: _LogCheck, f: SegmentFile, is_last: bool) -> None:
        self.log = log
        self.f = f
        self.is_last = is_last
        self.expected = f.base_offset  # offset the next record of this segment must carry
        self.index = SparseIndex()  # rebuilt from the valid records
        self.damaged = False  # bytes unreadable: no index can be judged against a rebuild
        self.listed = 0  # record-level problems listed for this segment
        self.progressed = 0  # bytes reported to progress

    def run(self) -> None:
        report = self.log.report
        report.segments += 1
        report.scanned_bytes += self.f.size
        self._check_start()
        position = 0
        while True:
            for rec in self.f.records(position):
                self._record(rec)
            bad = self.f.bad
            if bad is None:
                break
            if self.is_last and zero_tail(self.f.fd, bad.position):
                break  # space reserved ahead of writes: the records end here
            resumed = self.f.resync(bad.position, self.expected)
            if resumed is None:
                self._bad_to_end(bad)
                break
            self._bad_region(bad, resumed)
            position = resumed.position
        self._advance(self.f.size, final=True)
        self.log.next_offset = self.expected
        if not self.damaged:
            self._check_index()

    def _list(self, problem: Problem) -> None:
        """Add a record-level problem, up to PROBLEMS_PER_SEGMENT_MAX per segment."""
        if self.listed >= PROBLEMS_PER_SEGMENT_MAX:
            self.log.report.unlisted += 1
            return
        self.listed += 1
        self.log.add(problem)

    def _advance(self, position: int, final: bool = False) -> None:
        progress = self.log.progress
        step = position - self.progressed
        if progress is not None and step > 0 and (final or step >= PROGRESS_STEP_BYTES):
            progress.advance(step)
            self.progressed = position

    def _check_start(self) -> None:
        """The segment's place in the log: named after the offset the log has reached."""
        f, prev_end = self.f, self.log.next_offset
        if f.size == 0 and not self.is_last:
            self.damaged = True  # its index says nothing useful either way
            what = "zero-length segment that is not the last one"
            self.log.add(Problem(Kind.EMPTY_SEGMENT, f.path, 0, what))
        if prev_end is None or prev_end == f.base_offset:
            return
        if f.base_offset > prev_end:
            what = f"{_offsets(prev_end, f.base_offset)} missing"
        else:
            what = f"starts at offset {f.base_offset}, inside the previous segment"
        what += f": the previous segment ends before offset {prev_end}"
        self.log.add(Problem(Kind.OFFSETS, f.path, 0, what))

    def _record(self, rec: Record) -> None:
        if rec.offset != self.expected:
            named = " (the offset in the file name)" if self.expected == self.f.base_offset else ""
            what = f"record has offset {rec.offset}, expected {self.expected}{named}"
            self._list(Problem(Kind.OFFSETS, self.f.path, rec.position, what))
        self.expected = rec.offset + 1
        self._check_order(rec)
        if self.index.due(rec.position):
            self.index.add(rec.offset, rec.position, rec.id_ms, rec.id_seq)
        self.log.report.records += 1
        self._advance(rec.position + rec.size)

    def _check_order(self, rec: Record) -> None:
        log = self.log
        rec_id = (rec.id_ms, rec.id_seq)
        if rec_id < log.last_id:
            what = (
                f"stream ID {rec.id_ms}-{rec.id_seq} of offset {rec.offset} is below "
                f"the previous record's {log.last_id[0]}-{log.last_id[1]}"
            )
            self._list(Problem(Kind.ORDER, self.f.path, rec.position, what))
        if rec.timestamp_ms < log.last_timestamp_ms:
            what = (
                f"timestamp {rec.timestamp_ms} of offset {rec.offset} is below "
                f"the previous record's {log.last_timestamp_ms}"
            )
            self._list(Problem(Kind.ORDER, self.f.path, rec.position, what))
        log.last_id = rec_id
        log.last_timestamp_ms = rec.timestamp_ms

    # -- bad bytes --------------------------------------------------------------------

    def _bad_region(self, bad: BadRecord, resumed: Record) -> None:
        """Bad bytes followed by valid records: corruption, wherever it is."""
        self.damaged = True
        size = resumed.position - bad.position
        lost = _offsets(self.expected, resumed.offset) + " lost"
        what = (
            f"{bad.reason}: {size} bytes unreadable, valid records resume at byte "
            f"{resumed.position} with offset {resumed.offset}; {lost}"
        )
        if self.is_last:
            what += "; recovery may cut the segment here, dropping the valid records after it"
        self._list(Problem(Kind.CORRUPT, self.f.path, bad.position, what, size))
        self.expected = resumed.offset

    def _bad_to_end(self, bad: BadRecord) -> None:
        """Bad bytes with nothing valid after them: a torn tail if this is the last
        segment, corruption of a sealed one otherwise."""
        size = self.f.size - bad.position
        if not self.is_last:
            self.damaged = True
            what = (
                f"{bad.reason}: the last {size} bytes of a sealed segment are unreadable, "
                f"offsets from {self.expected} on are lost"
            )
            self._list(Problem(Kind.CORRUPT, self.f.path, bad.position, what, size))
            return
        what = (
            f"{bad.reason}, and nothing valid after it: {size} bytes to cut, "
            f"after which the log ends before offset {self.expected}"
        )
        problem = Problem(Kind.TORN_TAIL, self.f.path, bad.position, what, size, repairable=True)
        self.log.add(problem)
        if self.log.repair:
            truncate_durably(self.f.path, bad.position)
            problem.repaired = True

    # -- the index --------------------------------------------------------------------

    def _check_index(self) -> None:
        path = self.f.path.with_suffix(INDEX_SUFFIX)
        rebuilt = [self.index.entry(i) for i in range(len(self.index))]
        fault = _index_fault(path, rebuilt, prefix_ok=self.is_last)
        if fault is None:
            return
        position, what = fault
        problem = Problem(Kind.INDEX, path, position, what, repairable=True)
        self.log.add(problem)
        if self.log.repair:
            self.index.write_all(path)
            problem.repaired = True


def _offsets(first: int, end: int) -> str:
    """'offset 7', 'offsets 7..9' or 'no offset' for the offsets first .. end - 1."""
    if end - first == 1:
        return f"offset {first}"
    return f"offsets {first}..{end - 1}" if end > first else "no offset"


def _index_fault(
    path: Path, rebuilt: list[IndexEntry], prefix_ok: bool
) -> tuple[int | None, str] | None:
    """(byte position in the index file, what is wrong), or None when the file holds
    exactly `rebuilt` (or, with `prefix_ok`, a prefix of it; a missing file then
    counts as an empty prefix: the active segment persists entries once durable)."""
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return None if prefix_ok else (None, "index file is missing")
    stored = size // ENTRY_BYTES
    if size % ENTRY_BYTES:
        return size - size % ENTRY_BYTES, f"size {size} is not a multiple of {ENTRY_BYTES}"
    if stored > len(rebuilt):
        return len(rebuilt) * ENTRY_BYTES, f"{stored} entries where a rebuild gives {len(rebuilt)}"
    if stored < len(rebuilt) and not prefix_ok:
        return size, f"short: {stored} entries where a rebuild gives {len(rebuilt)}"
    with path.open("rb") as fh:
        data = fh.read(size)
    for i, entry in enumerate(ENTRY.iter_unpack(data)):
        if entry != rebuilt[i]:
            return (
                i * ENTRY_BYTES,
                f"entry {i} is {_entry(entry)}, a rebuild gives {_entry(rebuilt[i])}",
            )
    return None


def _entry(entry: IndexEntry) -> str:
    offset, position, id_ms, id_seq = entry
    return f"(offset {offset}, position {position}, id {id_ms}-{id_seq})"


def truncate_durably(path: Path, size: int) -> None:
    """Cut the file to `size` bytes, durably."""
    fd = os.open(path, os.O_WRONLY)
    try:
        os.ftruncate(fd, size)
        os.fsync(fd)
    finally:
        os.close(fd)
