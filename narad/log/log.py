"""A log: a folder of segments, appended to by one writer, read by anyone.

This module holds the Log and its writing: append, the write buffer and what of it the
journal has taken, write, sync, roll, epochs, truncation, moves of the start, and
retention. How a folder becomes a Log, and what the opening trusts of it, is
narad/log/opening.py; a Log's reads are narad/log/reading.py.

Contracts (the words are those of docs/design.md, "The words are contracts"):

- `append` only encodes a record into the writer's buffer; `write` puts the buffer in
  the active segment file (page cache), `sync` fsyncs it: offsets below `durable_end`
  survive a crash of the machine by this log alone. A log under the node's journal
  (narad/log/journal.py) needs neither for its records to be appended or durable:
  their commit record in the journal is; the log is written and fsynced behind it.
- Every offset below `next_offset` is readable: a read writes the buffer first
  (narad/log/reading.py).
- Offsets are dense and monotonic; stream IDs and timestamps are non-decreasing.
- After `open` everything in the log is durable (narad/log/opening.py).
- An I/O error while writing or fsyncing fails the log for good: later writes raise
  LogFailed with the first error; nothing is retried, since a failed fsync may have
  dropped dirty pages that a retry would report as clean.
- But a write, a roll or an epoch change that finds no room (ENOSPC, EDQUOT) or no
  descriptor (EMFILE, ENFILE: TRANSIENT_ERRNOS) fails nothing for good: it raises
  WriteError, and the log is in its write error state (`write_error`) until a write
  succeeds. What did not reach the file stays in the buffer, where reads find it
  (`try_write`); the bytes a failed write did put in the file are cut off again, so
  the file ends at its last whole record. Nothing acknowledged depends on bytes that
  were never written, so a later write, whole, is as good as the first. An fsync
  that cannot get its descriptor (EMFILE, ENFILE) raises WriteError too, failing
  nothing; an fsync that fails is still the end of the log.
- Creating or deleting a segment fsyncs the folder; checkpoints are atomic.

Concurrency: one writer thread calls append / write / roll / truncate / retention;
`sync` may run on another thread (the journal's everysec thread, the checkpoint
thread); `_lock` guards what they share. Reads run on the writer's thread.
"""

from __future__ import annotations

import enum
import errno
import logging
import os
import threading
import time
from collections.abc import Callable, Collection, Sequence
from pathlib import Path
from typing import NamedTuple

from narad.log import checkpoint, format, reading
from narad.log.checkpoint import fsync_dir
from narad.log.format import Record
from narad.log.index import ENTRY_BYTES, INTERVAL_BYTES
from narad.log.opening import EPOCHS_CHECKPOINT, START_CHECKPOINT, open_folder
from narad.log.segment import NO_SPACE_ERRNOS, Segment

logger = logging.getLogger("narad.log")

# The active segment's index file is appended to once this many entries (of one per
# INTERVAL_BYTES of records) are durable and not in it yet, not at every fsync: the
# index is a cache, and an open scans the records past its last entry anyway.
INDEX_WRITE_ENTRIES = 16
# What a segment's objects (Segment, its index, its path) take in memory, about.
SEGMENT_OVERHEAD_BYTES = 600
# Errors of a write, a file's creation or a descriptor's opening that pass once room
# or descriptors are freed: they put a log in its write error state (see above).
TRANSIENT_ERRNOS = NO_SPACE_ERRNOS | {errno.EMFILE, errno.ENFILE}


class FsyncPolicy(enum.Enum):
    ALWAYS = "always"  # an append is durable before it is acknowledged
    EVERYSEC = "everysec"  # fsync about once a second in the background
    NO = "no"  # never fsync on the write path; the OS decides


class LogConfig(NamedTuple):
    segment_bytes: int = 64 * 1024 * 1024  # roll before a segment passes this size
    segment_ms: int = 7 * 24 * 3600 * 1000  # roll when the first record is older (0: never)
    retention_ms: int = 0  # delete sealed segments whose newest record is older (0: keep)
    retention_bytes: int = 0  # delete oldest sealed segments beyond this total (0: keep)
    fsync: FsyncPolicy = FsyncPolicy.ALWAYS


class LogFailed(Exception):
    """The log met an I/O error on its write path and refuses further writes."""


class WriteError(LogFailed):
    """A write found no room or no descriptor (TRANSIENT_ERRNOS): nothing of it is in
    the file, the log keeps its records and takes writes again (see the module doc)."""


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class Log:
    """See the module docstring for the contracts."""

    def __init__(self, path: Path, config: LogConfig, clock: Callable[[], int]) -> None:
        self.path = path
        self.config = config
        self.clock = clock
        self.segments: list[Segment] = []
        self._bases: list[int] = []  # base offsets of `segments`, for bisect
        self._pending = bytearray()  # encoded records not yet written
        self._pending_offset = 0  # offset of the first record in _pending
        self._pending_records = 0  # records in _pending
        self._lock = threading.Lock()
        self.written_end = 0  # offsets below this are in the active file
        self.durable_end = 0  # offsets below this are fsynced
        # Where the record after the last one `read` returned starts: (its offset, its
        # segment, its byte position). A read that goes on from there (a consumer
        # following the log) starts at that position instead of an index entry's,
        # scanning no records before it. Positions only change by truncation, which
        # clears it.
        self._read_hint: tuple[int, Segment, int] | None = None
        self.start_offset = 0  # logical first offset: reads never go below it
        # The start in start.checkpoint: segments wholly below it may be deleted. A
        # journaled log's start moves in memory with its commit and on disk at the
        # next checkpoint (narad/log/journal.py), so this lags `start_offset` then.
        self.durable_start = 0
        # Journaling (narad/log/journal.py). Offsets below `journaled_end` are carried
        # by the node's journal (or were in the log when it opened); those below
        # `committed_end` by a finished commit. The records from `journaled_end` on are
        # in `_unjournaled` (written to the file before a commit took them: a read, a
        # roll) and then in `_pending` from byte `_pending_journaled` on: what the
        # journal's next commit takes (`take_unjournaled`).
        self.journal_key = -1  # the log's key in its journal's records (-1: none)
        self.journaled_end = 0
        self.committed_end = 0
        self._pending_journaled = 0
        self._unjournaled: list[bytes | bytearray | memoryview] = []
        self.closed = False
        self._epochs: list[tuple[int, int]] = []
        self._epoch = 0  # the epoch of the last entry of _epochs: what appends carry
        self.failure: str | None = None
        # Why the last write failed for a transient reason (None once one succeeds).
        self.write_error: str | None = None
        self.last_id = (0, 0)
        self.last_timestamp_ms = 0

    # -- opening and closing ----------------------------------------------------------

    @classmethod
    def open(
        cls,
        path: Path | str,
        config: LogConfig | None = None,
        clock: Callable[[], int] = wall_clock_ms,
    ) -> Log:
        """Open (creating if needed) the log in folder `path`, recovering its tail
        (narad/log/opening.py)."""
        log = cls(Path(path), config or LogConfig(), clock)
        open_folder(log)
        return log

    def _add_segment(self, seg: Segment) -> None:
        self.segments.append(seg)
        self._bases.append(seg.base_offset)

    def close(self) -> None:
        """Write and fsync what is buffered, persist indexes, release files."""
        if self.failure is None and self.segments:
            try:
                self.write()
                self.sync()
                self.active.index.write_all(self.active.index_path)
                self.active.release_reserved()
            except LogFailed:
                pass
            except OSError as exc:  # the reserved space stays; recovery releases it
                logger.warning("%s: reserved space not released: %s", self.path, exc)
        for seg in self.segments:
            seg.close()
        self.closed = True

    # -- state ----------------------------------------------------------------------

    @property
    def active(self) -> Segment:
        return self.segments[-1]

    @property
    def next_offset(self) -> int:
        """The offset the next appended record will get."""
        return self._pending_offset + self._pending_records

    @property
    def epoch(self) -> int:
        return self._epoch

    @property
    def epochs(self) -> list[tuple[int, int]]:
        """(epoch, first offset) pairs, increasing; see epochs.checkpoint."""
        return self._epochs

    @epochs.setter
    def epochs(self, value: list[tuple[int, int]]) -> None:
        self._epochs = value
        self._epoch = value[-1][0] if value else 0

    @property
    def size_bytes(self) -> int:
        return sum(seg.size for seg in self.segments) + len(self._pending)

    def memory_bytes(self) -> int:
        """About what this log holds in memory: its segments' sparse indexes and
        the records buffered for writing (MEMORY USAGE)."""
        indexed = sum(len(seg.index) for seg in self.segments) * ENTRY_BYTES
        unjournaled = sum(len(piece) for piece in self._unjournaled)
        return indexed + len(self._pending) + unjournaled + SEGMENT_OVERHEAD_BYTES * len(
            self.segments
        )

    def bytes_from(self, offset: int) -> int:
        """The bytes the log holds from record `offset` (at least its start offset) to
        its end, unwritten ones included: one index lookup."""
        if offset >= self.next_offset:
            return 0
        if offset >= self.written_end:  # not written yet: at most the whole buffer
            return len(self._pending)
        offset = max(offset, self.start_offset)
        seg = reading._segment_of(self, offset)
        later = sum(s.size for s in self.segments if s.base_offset > seg.base_offset)
        return seg.size - self._position_of(seg, offset) + later + len(self._pending)

    def _fail(self, what: str, exc: OSError) -> LogFailed:
        if self.failure is None:
            self.failure = f"{what} failed on {self.active.path}: {exc}"
            logger.error("log %s refuses writes from now on: %s", self.path, self.failure)
        return LogFailed(self.failure)

    def _refuse(self, what: str, exc: OSError, path: Path | None = None) -> WriteError:
        """The WriteError of `what` meeting transient error `exc` (on `path`, else the
        active segment's file): the log is in its write error state."""
        why = f"{what} failed on {path or self.active.path}: [Errno {exc.errno}] {exc.strerror}"
        if self.write_error is None:
            logger.warning("event=log_write_error log=%s reason=%r", self.path, why)
        self.write_error = why
        return WriteError(why)

    def _check_writable(self) -> None:
        if self.failure is not None:
            raise LogFailed(self.failure)

    # -- writing --------------------------------------------------------------------

    def append(
        self,
        payload: bytes,
        id_ms: int = 0,
        id_seq: int = 0,
        flags: int = 0,
        timestamp_ms: int | None = None,
        epoch: int | None = None,
    ) -> int:
        """Buffer one record and return its offset. It is not yet appended: see `write`.

        The hot path of every produce: keep it free of needless calls.
        """
        if self.failure is not None:
            raise LogFailed(self.failure)
        key = (id_ms, id_seq)
        if key < self.last_id:
            raise ValueError(f"stream ID {id_ms}-{id_seq} is below the log's last {self.last_id}")
        if epoch is not None and epoch != self._epoch:
            self.begin_epoch(epoch)
        ts = self.clock() if timestamp_ms is None else timestamp_ms
        if ts < self.last_timestamp_ms:
            ts = self.last_timestamp_ms
        pending = self._pending
        seg = self.segments[-1]
        position = seg.size + len(pending)
        if seg.next_offset != seg.base_offset and self._roll_due(
            seg, position + format.HEADER_BYTES + len(payload), ts
        ):
            self.roll()
            seg, pending = self.segments[-1], self._pending
            position = 0
        offset = self._pending_offset + self._pending_records
        format.encode_into(pending, offset, ts, self._epoch, flags, id_ms, id_seq, payload)
        self._pending_records += 1
        # Segment bookkeeping (Segment.note_record, inlined; the active segment's last
        # ID and timestamp are the log's, copied to it when it is sealed).
        index = seg.index
        if index.last_position < 0 or position - index.last_position >= INTERVAL_BYTES:
            index.add(offset, position, id_ms, id_seq)
        if seg.next_offset == seg.base_offset:
            seg.first_timestamp_ms = ts
        seg.next_offset = offset + 1
        self.last_id = key
        self.last_timestamp_ms = ts
        return offset

    def append_entries(
        self,
        argvs: Sequence[Sequence[bytes]],
        first: int,
        id_ms: int,
        id_seq: int,
        flags: int,
        timestamp_ms: int | None = None,
    ) -> int:
        """Buffer one record per argv of `argvs`, its payload the entry
        `encode_fields(argv[first:])`, with stream IDs counting up from (id_ms,
        id_seq); return the first one's offset. The records, bytes and bookkeeping
        are exactly those of `append` called once per argv at one clock reading
        (`timestamp_ms`, else the log's clock); the hot path of produces, one call
        for a run of them.
        """
        if self.failure is not None:
            raise LogFailed(self.failure)
        count = len(argvs)
        if not count:
            return self.next_offset
        if (id_ms, id_seq) < self.last_id:
            raise ValueError(f"stream ID {id_ms}-{id_seq} is below the log's last {self.last_id}")
        ts = self.clock() if timestamp_ms is None else timestamp_ms
        if ts < self.last_timestamp_ms:
            ts = self.last_timestamp_ms
        pending = self._pending
        seg = self.segments[-1]
        mark = len(pending)
        position = seg.size + mark
        offset = self._pending_offset + self._pending_records
        index = seg.index
        due = format.encode_entries(
            pending,
            argvs,
            first,
            offset,
            ts,
            self._epoch,
            flags,
            id_ms,
            id_seq,
            position,
            index.last_position,
            INTERVAL_BYTES,
        )
        config = self.config
        if (seg.next_offset != seg.base_offset or count > 1) and (
            seg.size + len(pending) > config.segment_bytes
            or (config.segment_ms and ts - seg.first_timestamp_ms >= config.segment_ms)
        ):
            # The run crosses a roll: undo it and append record by record.
            del pending[mark:]
            sid = id_ms << 64 | id_seq
            for argv in argvs:
                payload = format.encode_fields(argv[first:])
                self.append(payload, sid >> 64, sid & format.U64_MAX, flags, ts)
                sid += 1
            return offset
        self._pending_records += count
        for entry in due:
            index.add(*entry)
        if seg.next_offset == seg.base_offset:
            seg.first_timestamp_ms = ts
        seg.next_offset = offset + count
        if count == 1:
            self.last_id = (id_ms, id_seq)
        else:
            last = (id_ms << 64 | id_seq) + count - 1
            self.last_id = (last >> 64, last & format.U64_MAX)
        self.last_timestamp_ms = ts
        return offset

    def append_framed(self, run: memoryview, records: Sequence[Record]) -> None:
        """Buffer `records`, framed as they are in `run` (a journal's copy of them,
        each at its `position` in `run`), byte for byte: what `append` of each would
        buffer. The first must be the log's next offset. Record by record where the
        run crosses a roll or an epoch change (what `append` decides there)."""
        if self.failure is not None:
            raise LogFailed(self.failure)
        first, last = records[0], records[-1]
        seg = self.segments[-1]
        if (
            first.offset != self.next_offset
            or first.epoch != self._epoch
            or last.epoch != self._epoch
            or (first.id_ms, first.id_seq) < self.last_id
            or (
                (seg.next_offset != seg.base_offset or len(records) > 1)
                and self._roll_due(seg, seg.size + len(self._pending) + len(run), last.timestamp_ms)
            )
        ):
            for rec in records:
                self.append(
                    rec.payload, rec.id_ms, rec.id_seq, rec.flags, rec.timestamp_ms, rec.epoch
                )
            return
        base = seg.size + len(self._pending) - first.position
        self._pending += run[first.position : last.position + last.size]
        self._pending_records += len(records)
        index = seg.index
        for rec in records:
            position = base + rec.position
            if index.last_position < 0 or position - index.last_position >= INTERVAL_BYTES:
                index.add(rec.offset, position, rec.id_ms, rec.id_seq)
        if seg.next_offset == seg.base_offset:
            seg.first_timestamp_ms = first.timestamp_ms
        seg.next_offset = last.offset + 1
        self.last_id = (last.id_ms, last.id_seq)
        self.last_timestamp_ms = max(self.last_timestamp_ms, last.timestamp_ms)

    def _roll_due(self, seg: Segment, size_after: int, ts: int) -> bool:
        """Whether a non-empty active segment must be sealed rather than grow to
        `size_after` bytes with a record of timestamp `ts`."""
        if size_after > self.config.segment_bytes:
            return True
        age_max = self.config.segment_ms
        return bool(age_max) and ts - seg.first_timestamp_ms >= age_max

    def write(self) -> int:
        """Put every buffered record in the active file with one write; return bytes."""
        self._check_writable()
        if not self._pending:
            return 0
        with self._lock:
            data, seg = self._pending, self.active
            done = 0
            try:
                fd = seg.fd
                try:
                    seg.reserve(seg.size + len(data))
                except OSError as exc:
                    if exc.errno not in NO_SPACE_ERRNOS:
                        raise
                    # No room ahead: the write itself says whether the records fit.
                while done < len(data):
                    done += os.pwrite(fd, memoryview(data)[done:], seg.size + done)
            except OSError as exc:
                if exc.errno not in TRANSIENT_ERRNOS:
                    raise self._fail("write", exc) from exc
                if done:  # no torn record stays in the file
                    try:
                        os.ftruncate(fd, seg.size)
                    except OSError as cut:
                        raise self._fail("write", cut) from exc
                    seg.allocated = seg.size
                raise self._refuse("write", exc) from exc
            self.write_error = None
            seg.size += len(data)
            if self.journal_key >= 0 and self.journaled_end < self.next_offset:
                # The journal's next commit still wants them.
                self._unjournaled.append(memoryview(data)[self._pending_journaled :])
            self._pending_journaled = 0
            self._pending_offset += self._pending_records
            self._pending_records = 0
            self._pending = bytearray()
            self.written_end = self._pending_offset
        return len(data)

    def try_write(self) -> bool:
        """`write`, for a caller that can do without it (a read takes buffered records
        from the buffer, recovery and a replica write behind the journal): False, the
        records kept in the buffer, when it meets a transient error (WriteError)."""
        try:
            self.write()
        except WriteError:
            return False
        return True

    def drop_unwritten(self) -> None:
        """Forget the records appended and not yet written: the journal's own, after
        its write failed (it appends them again when it retries). Never for a log under
        the journal, whose buffered records are committed."""
        with self._lock:
            seg = self.active
            seg.index.truncate_from(seg.size)
            seg.next_offset = self._pending_offset
            self._pending = bytearray()
            self._pending_records = 0
            self._pending_journaled = 0

    def take_unjournaled(self) -> tuple[int, int, list[bytes | bytearray | memoryview]] | None:
        """The records from `journaled_end` on, for the journal's next commit: (first
        offset, count, their exact bytes in pieces), or None when there are none.
        From now on they count as journaled."""
        first, end = self.journaled_end, self.next_offset
        if first == end:
            return None
        pieces = self._unjournaled
        if len(self._pending) > self._pending_journaled:
            pieces.append(self._pending[self._pending_journaled :])  # a copy: _pending grows
        self._unjournaled = []
        self._pending_journaled = len(self._pending)
        self.journaled_end = end
        return first, end - first, pieces

    def adopt_journaled(self) -> None:
        """Everything in the log counts as journaled and committed (recovery has put
        the journal's records in it)."""
        self._unjournaled = []
        self._pending_journaled = len(self._pending)
        self.journaled_end = self.committed_end = self.next_offset

    @property
    def unwritten_bytes(self) -> int:
        return len(self._pending)

    def sync(self, own_fd: bool = False) -> bool:
        """Fsync what is written; return whether an fsync was issued. Thread-safe
        with `own_fd`, which a thread other than the writer's passes: the fsync then
        goes through a descriptor of its own, opened by the file's path, since the
        writer's thread may close the segment's (narad/log/files.py)."""
        with self._lock:
            self._check_writable()
            target, seg = self.written_end, self.active
            if target <= self.durable_end:
                return False
            size = seg.size
        try:
            fd = os.open(seg.path, os.O_RDONLY) if own_fd else seg.fd
        except OSError as exc:
            if exc.errno in TRANSIENT_ERRNOS:  # nothing was tried: it can be, later
                why = f"fsync failed on {seg.path}: [Errno {exc.errno}] {exc.strerror}"
                raise WriteError(why) from exc
            with self._lock:
                raise self._fail("fsync", exc) from exc
        try:
            os.fdatasync(fd)
        except OSError as exc:
            with self._lock:
                raise self._fail("fsync", exc) from exc
        finally:
            if own_fd:
                os.close(fd)
        with self._lock:
            if target > self.durable_end:
                self.durable_end = target
                index = seg.index
                if not seg.closed and len(index) - index.persisted >= INDEX_WRITE_ENTRIES:
                    _write_index(seg, size)
        return True

    def roll(self) -> None:
        """Seal the active segment (durably, index written) and start a new one; an
        empty active segment (a crash right after a roll leaves one) stays active."""
        self.write()
        self.sync()
        if self.active.size == 0:
            return
        with self._lock:
            old = self.active
            old.last_id, old.last_timestamp_ms = self.last_id, self.last_timestamp_ms
            _write_index(old)
            try:
                # A sealed segment is exactly its records: its reserved space goes,
                # durably, before a newer segment exists. (Done again, unchanged,
                # when a roll the new segment's creation refused is tried again.)
                old.release_reserved()
                os.fdatasync(old.fd)
            except OSError as exc:
                raise self._fail("segment roll", exc) from exc
            try:
                new = Segment(self.path, self.next_offset, create=True)
            except OSError as exc:
                if exc.errno in TRANSIENT_ERRNOS:
                    raise self._refuse("segment roll", exc, self.path) from exc
                raise self._fail("segment roll", exc) from exc
            self._add_segment(new)
            try:
                fsync_dir(self.path)
            except OSError as exc:
                raise self._fail("segment roll", exc) from exc

    def begin_epoch(self, epoch: int) -> None:
        """Records appended from now on carry `epoch` (durably recorded first)."""
        if epoch < self.epoch:
            raise ValueError(f"epoch {epoch} is older than the log's epoch {self.epoch}")
        if epoch > self.epoch:
            epochs = list(self.epochs)
            if epochs and epochs[-1][1] == self.next_offset:
                epochs.pop()  # that epoch ended before writing anything
            epochs.append((epoch, self.next_offset))
            try:
                self._write_epochs(epochs)
            except OSError as exc:
                if exc.errno in TRANSIENT_ERRNOS:  # the epoch is not begun: ask again
                    raise self._refuse("epoch change", exc, self.path) from exc
                raise
            self.epochs = epochs

    def epoch_end(self, epoch: int) -> tuple[int, int]:
        """(largest known epoch <= `epoch`, the offset where it ended) for truncation
        after a leader change; (-1, start) when the log knows no such epoch."""
        best = -1
        for i, (e, _) in enumerate(self.epochs):
            if e <= epoch:
                best = i
        if best < 0:
            return -1, self.start_offset
        end = self.epochs[best + 1][1] if best + 1 < len(self.epochs) else self.next_offset
        return self.epochs[best][0], end

    def set_start(self, offset: int) -> None:
        """Move the logical start forward (never back); records below are deleted."""
        offset = min(max(offset, self.start_offset), self.next_offset)
        if offset == self.start_offset:
            return
        checkpoint.write(self.path / START_CHECKPOINT, [f"start {offset}"])
        self.start_offset = self.durable_start = offset

    def move_start(self, offset: int) -> int:
        """Move the logical start forward in memory only (a journaled log: its commit
        carries the move, and the next checkpoint makes it durable with `set_start`).
        Returns the new start."""
        self.start_offset = min(max(offset, self.start_offset), self.next_offset)
        return self.start_offset

    def truncate(self, offset: int) -> None:
        """Delete every record at `offset` or above, durably, before returning.

        Crash-safe: segments are removed newest first, so an interrupted truncation
        leaves a contiguous log that still ends at or above `offset`; repeat it.
        """
        self._check_writable()
        if offset >= self.next_offset:
            return
        self.write()
        try:
            self._truncate_files(max(offset, 0))
        except OSError as exc:
            raise self._fail("truncate", exc) from exc
        self.epochs = [(e, first) for e, first in self.epochs if first < offset]
        self._write_epochs()
        self._unjournaled = []
        self._pending_journaled = 0
        self.journaled_end = min(self.journaled_end, offset)
        self.committed_end = min(self.committed_end, offset)
        if self.start_offset > offset:
            self.start_offset = self.durable_start = offset
            checkpoint.write(self.path / START_CHECKPOINT, [f"start {offset}"])

    def _truncate_files(self, offset: int) -> None:
        self._read_hint = None
        with self._lock:
            while len(self.segments) > 1 and self.active.base_offset >= offset:
                self.segments.pop().delete()
                self._bases.pop()
                fsync_dir(self.path)
            seg = self.active
            if seg.base_offset >= offset:
                seg.delete()
                self.segments.clear()
                self._bases.clear()
                self._add_segment(Segment(self.path, offset, create=True))
                fsync_dir(self.path)
                seg = self.active
                self.last_id, self.last_timestamp_ms = (0, 0), 0
            else:
                cut = self._position_of(seg, offset)
                os.ftruncate(seg.fd, cut)
                os.fsync(seg.fd)
                seg.size = seg.allocated = cut
                seg.index.truncate_from(cut)
                seg.index.write_all(seg.index_path)
                prev = self._record_before(seg, offset)
                seg.next_offset = offset
                seg.last_id = (prev.id_ms, prev.id_seq)
                seg.last_timestamp_ms = prev.timestamp_ms
                self.last_id, self.last_timestamp_ms = seg.last_id, seg.last_timestamp_ms
            self._pending_offset = self.written_end = self.durable_end = offset

    def _position_of(self, seg: Segment, offset: int) -> int:
        """Byte position of record `offset` in `seg` (its size if it is the next one)."""
        entry = seg.index.entry(seg.index.floor_offset(offset))
        for rec in seg.scan_from(entry[1]):
            if rec.offset == offset:
                return rec.position
        return seg.size

    def _record_before(self, seg: Segment, offset: int) -> Record:
        found = None
        entry = seg.index.entry(seg.index.floor_offset(offset - 1))
        for rec in seg.scan_from(entry[1]):
            if rec.offset == offset - 1:
                found = rec
                break
        assert found is not None, "truncation point must follow a record of its segment"
        return found

    # -- retention ------------------------------------------------------------------

    def retention_start(self, now_ms: int | None = None, age_floor: int | None = None) -> int:
        """The start that retention by age or total size asks for: past every sealed
        segment, oldest first, that is too old or beyond the size bound (never below
        `start_offset`). With `age_floor`, age deletes only segments wholly below that
        offset (a queue's first message not acked); size ignores it. A journaled log
        moves its start there through a commit."""
        now = self.clock() if now_ms is None else now_ms
        config = self.config
        total = self.size_bytes
        start = self.start_offset
        for seg in self.segments[:-1]:
            too_old = (
                bool(config.retention_ms) and seg.last_timestamp_ms < now - config.retention_ms
                and (age_floor is None or seg.next_offset <= age_floor)
            )
            too_big = bool(config.retention_bytes) and total - seg.size >= config.retention_bytes
            if not (too_old or too_big):
                break
            total -= seg.size
            start = max(start, seg.next_offset)
        return start

    def apply_retention(self, now_ms: int | None = None, start_only: bool = False) -> int:
        """Delete whole sealed segments that retention or the durable start
        (`durable_start`) no longer needs, oldest first; return how many were deleted.
        With `start_only`, only those wholly below the durable start."""
        now = self.clock() if now_ms is None else now_ms
        config = self.config
        total = self.size_bytes
        deleted = 0
        while len(self.segments) > 1:
            seg = self.segments[0]
            below_start = seg.next_offset <= self.durable_start
            too_old = not start_only and (
                bool(config.retention_ms) and seg.last_timestamp_ms < now - config.retention_ms
            )
            too_big = not start_only and (
                bool(config.retention_bytes) and total - seg.size >= config.retention_bytes
            )
            if not (below_start or too_old or too_big):
                break
            with self._lock:  # a concurrent sync must not write this segment's index
                self.segments.pop(0)
                self._bases.pop(0)
                seg.delete()
            total -= seg.size
            deleted += 1
        if deleted:
            fsync_dir(self.path)
            self.start_offset = max(self.start_offset, self.segments[0].base_offset)
        return deleted

    # -- reading (narad/log/reading.py) ---------------------------------------------

    def read(
        self,
        offset: int,
        count_max: int = 1 << 30,
        bytes_max: int = 1 << 62,
        end: int | None = None,
    ) -> list[Record]:
        return reading.read(self, offset, count_max, bytes_max, end)

    def read_frames(
        self, offset: int, bytes_max: int, end: int | None = None
    ) -> tuple[int, bytes]:
        return reading.read_frames(self, offset, bytes_max, end)

    def pending_frames(self) -> tuple[int, bytearray]:
        """(the first offset of, the buffer of) the records not yet written: after
        `write` the buffer is the file's copy of them, never changed again."""
        return self._pending_offset, self._pending

    def read_entries(
        self, offset: int, count: int, high: int, deleted: Collection[int]
    ) -> tuple[list[tuple[int, bytes]], tuple[int, int] | None, bool] | None:
        return reading.read_entries(self, offset, count, high, deleted)

    def read_with_buffer(self, offset: int, count_max: int) -> list[Record]:
        return reading.read_with_buffer(self, offset, count_max)

    def id_ms_floor(self, offset: int) -> int | None:
        return reading.id_ms_floor(self, offset)

    def read_reverse(
        self,
        offset: int,
        count_max: int = 1 << 30,
        bytes_max: int = 1 << 62,
        end: int | None = None,
    ) -> list[Record]:
        return reading.read_reverse(self, offset, count_max, bytes_max, end)

    def offset_of_id(self, id_ms: int, id_seq: int, after: bool = False) -> int:
        return reading.offset_of_id(self, id_ms, id_seq, after)

    # -- checkpoints ----------------------------------------------------------------

    def _write_epochs(self, epochs: list[tuple[int, int]] | None = None) -> None:
        """Write epochs.checkpoint: `epochs`, else the log's."""
        lines = [f"{e} {first}" for e, first in (self.epochs if epochs is None else epochs)]
        checkpoint.write(self.path / EPOCHS_CHECKPOINT, lines)


def _write_index(seg: Segment, end: int | None = None) -> None:
    """Write `seg`'s index file: whole, or with `end` the entries of records before
    byte `end` not yet in it. An error leaves the file short, which loses nothing: the
    index is a cache, and a read scans on from its last entry."""
    try:
        if end is None:
            seg.index.write_all(seg.index_path)
        else:
            seg.index.write_new(seg.index_path, end)
    except OSError as exc:
        logger.debug("%s: index not written: %s", seg.index_path, exc)
