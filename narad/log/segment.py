"""One segment file of a log and its sparse index.

A segment owns one file descriptor, opened read-write for its whole life. Reads use
pread on bounded chunks, so a segment is never loaded whole. Writes are positional
(`pwrite` at `size`); only the log's writer calls them. Every record read is
CRC-checked by `format.scan`.
"""

from __future__ import annotations

import errno
import logging
import os
from collections.abc import Collection, Iterator
from pathlib import Path

from narad.log import format
from narad.log.files import OPEN_FILES
from narad.log.format import SCAN_BAD, SCAN_OK, Record
from narad.log.index import INTERVAL_BYTES, SparseIndex

NAME_DIGITS = 20
LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
# Bytes read per pread when scanning; a larger record is read whole.
CHUNK_BYTES = 64 * 1024
# The active segment's file is grown ahead of its writes by this much at a time: as
# much as it already holds, within these bounds (so a small log reserves little).
RESERVE_MIN = 16 * 1024
RESERVE_MAX = 1024 * 1024
BLOCK_BYTES = 4096
# What a write or a reservation meets when the filesystem, or the user's quota, has no
# room: transient (narad/log/log.py, "the write error state").
NO_SPACE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})

logger = logging.getLogger("narad.log")


class StaleIndex(Exception):
    """An index entry did not name the record it claims. Readers catch it, have the
    segment's index rebuilt, and look the position up again."""

    def __init__(self, segment: Segment, entry: int) -> None:
        super().__init__(f"{segment.index_path}: entry {entry} does not match its segment")
        self.segment = segment


class CorruptSegment(Exception):
    """A record in a segment failed its checks where no torn tail can be."""

    def __init__(self, path: Path, position: int, reason: str) -> None:
        super().__init__(f"{path}: corrupt record at byte {position}: {reason}")
        self.path = path
        self.position = position
        self.reason = reason


def zero_tail(fd: int, position: int) -> bool:
    """Whether every byte of the file from `position` on is zero: in the last segment
    of a log, space reserved ahead of writes that were never made (Segment.reserve),
    not a damaged record."""
    end = os.fstat(fd).st_size
    while position < end:
        chunk = os.pread(fd, min(CHUNK_BYTES, end - position), position)
        if not chunk:
            return True
        if chunk.count(0) != len(chunk):
            return False
        position += len(chunk)
    return True


def segment_name(base_offset: int) -> str:
    return f"{base_offset:0{NAME_DIGITS}d}{LOG_SUFFIX}"


def parse_segment_name(name: str) -> int | None:
    """The base offset named by a segment file name, or None for other files."""
    stem, suffix = name[: -len(LOG_SUFFIX)], name[-len(LOG_SUFFIX) :]
    if suffix != LOG_SUFFIX or len(stem) != NAME_DIGITS or not stem.isdigit():
        return None
    return int(stem)


class Segment:
    """Records base_offset .. next_offset - 1, stored in bytes 0 .. size - 1."""

    def __init__(self, folder: Path, base_offset: int, create: bool = False) -> None:
        self.base_offset = base_offset
        self.path = folder / segment_name(base_offset)
        self.index_path = self.path.with_suffix(INDEX_SUFFIX)
        flags = os.O_RDWR | (os.O_CREAT | os.O_EXCL if create else 0)
        fd = os.open(self.path, flags, 0o644)
        self.closed = False
        OPEN_FILES.add(self, fd)
        # Bytes of records in the file (appended, maybe not yet durable). Until recovery
        # says otherwise, the file's length.
        self.size = os.fstat(fd).st_size
        # The file's length: `size` plus space reserved ahead of writes (zero bytes,
        # blocks allocated), so that an fdatasync after an append need not also write
        # a new file length. Only the active segment has any.
        self.allocated = self.size
        self._can_reserve = True
        self.index = SparseIndex()
        self.checked: set[int] = set()  # index entries already verified against the file
        # Facts about the last record; valid once the segment is opened or appended to.
        self.next_offset = base_offset
        self.last_id = (0, 0)
        self.last_timestamp_ms = 0
        self.first_timestamp_ms = 0

    @property
    def empty(self) -> bool:
        return self.next_offset == self.base_offset

    @property
    def fd(self) -> int:
        """The file's descriptor, opened if the open-files limit closed it
        (narad/log/files.py); -1 once the segment is closed. Take it for each call:
        taking another segment's may close this one's."""
        if self.closed:
            return -1
        return OPEN_FILES.fd(self)

    @fd.setter
    def fd(self, value: int) -> None:
        """Only -1: the descriptor was closed behind the segment's back (tests)."""
        assert value == -1
        OPEN_FILES.forget(self)
        self.closed = True

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            fd = OPEN_FILES.forget(self)
            if fd is not None:
                os.close(fd)

    # -- reserved space -----------------------------------------------------------------

    def reserve(self, end: int) -> None:
        """Grow the file (zero bytes, blocks allocated) so that bytes up to `end` lie
        inside it, and some more ahead. Where the filesystem cannot, writes extend the
        file; where it has no room (NO_SPACE_ERRNOS), OSError, nothing reserved."""
        if end <= self.allocated or not self._can_reserve:
            return
        fd = self.fd
        grow = min(max(self.size, RESERVE_MIN), RESERVE_MAX)
        target = -(-(end + grow) // BLOCK_BYTES) * BLOCK_BYTES
        try:
            os.posix_fallocate(fd, self.allocated, target - self.allocated)
        except OSError as exc:
            if exc.errno in NO_SPACE_ERRNOS:
                raise
            self._can_reserve = False
            logger.info("%s: no space reserved ahead of writes: %s", self.path, exc)
            return
        self.allocated = target

    @property
    def can_reserve(self) -> bool:
        """Whether the filesystem reserves space ahead of writes (`reserve`)."""
        return self._can_reserve

    def release_reserved(self) -> None:
        """Cut the file to its records (sealing, closing, recovering)."""
        if os.fstat(self.fd).st_size != self.size:
            os.ftruncate(self.fd, self.size)
        self.allocated = self.size

    def zeros_from(self, position: int) -> bool:
        return zero_tail(self.fd, position)

    def delete(self) -> None:
        self.close()
        self.path.unlink(missing_ok=True)
        self.index_path.unlink(missing_ok=True)

    # -- reading --------------------------------------------------------------------

    def average_record_bytes(self) -> int:
        """The mean size of this segment's records, rounded up (1 when empty): what
        sizes reads meant to take a given number of records."""
        return self.size // max(self.next_offset - self.base_offset, 1) + 1

    def pread(self, position: int, size: int) -> bytes:
        return os.pread(self.fd, size, position)

    def scan_from(
        self, position: int, end: int | None = None, chunk_bytes: int = CHUNK_BYTES
    ) -> Iterator[Record]:
        """Records from byte `position` up to byte `end` (default: the file's size).

        Raises CorruptSegment when a record fails its checks or is cut off before `end`.
        """
        for records in self.scan_batches(position, end, chunk_bytes):
            yield from records

    def scan_batches(
        self,
        position: int,
        end: int | None = None,
        chunk_bytes: int = CHUNK_BYTES,
        batch_max: int = 1 << 30,
    ) -> Iterator[list[Record]]:
        """`scan_from`'s records, a list per read of at most `batch_max` records."""
        end = self.size if end is None else end
        while position < end:
            buf = self.pread(position, min(chunk_bytes, end - position))
            records, used, status, detail = format.scan(buf, 0, position, batch_max)
            if records:
                yield records
            position += used
            if status == SCAN_OK and used == 0:
                break
            chunk_bytes = self._next_chunk(position, end, status, detail, chunk_bytes)

    def scan_entries(
        self, position: int, count: int, high: int, deleted: Collection[int], chunk_bytes: int
    ) -> tuple[list[tuple[int, bytes]], tuple[int, int] | None, bool, int]:
        """`format.scan_entries` over the file from `position` (a record's start) to
        the segment's end, until `count` entries are taken or a record above `high`
        stops it. Returns (entries, after, above, end): `after` is the ID of the last
        record taken and the offset after it (None: none taken), `end` the position
        after that record."""
        end = self.size
        entries: list[tuple[int, bytes]] = []
        after: tuple[int, int] | None = None
        while len(entries) < count and position < end:
            buf = self.pread(position, min(chunk_bytes, end - position))
            taken, used, status, detail, last_id, next_offset, above = format.scan_entries(
                buf, 0, count - len(entries), high, deleted
            )
            entries += taken
            position += used
            if next_offset >= 0:
                after = (last_id, next_offset)
            if above:
                return entries, after, True, position
            if status == SCAN_OK and used == 0:
                break
            chunk_bytes = self._next_chunk(position, end, status, detail, chunk_bytes)
        return entries, after, False, position

    def _next_chunk(
        self, position: int, end: int, status: int, detail: int | str, chunk_bytes: int
    ) -> int:
        """After a scan of a chunk stopped at `position` with `status`: CorruptSegment
        for a damaged record or one cut off before `end`, else the chunk size for the
        next read (large enough for a record that did not fit)."""
        if status == SCAN_BAD:
            raise CorruptSegment(self.path, position, str(detail))
        if status == SCAN_OK:
            return chunk_bytes
        need = int(detail)
        if position + need > end:
            raise CorruptSegment(self.path, position, "record cut off at end of data")
        return max(chunk_bytes, need)

    def record_at(self, position: int) -> Record | None:
        """The valid record starting at `position`, or None."""
        head = self.pread(position, format.HEADER_BYTES)
        if len(head) < format.HEADER_BYTES:
            return None
        length = int.from_bytes(head[:4], "little")
        if not format.LENGTH_MIN <= length <= format.RECORD_BYTES_MAX:
            return None
        if position + 4 + length > self.size:
            return None
        buf = head if length + 4 == len(head) else self.pread(position, length + 4)
        records, _, _, _ = format.scan(buf, 0, position, 1)
        return records[0] if records else None

    def checked_entry(self, i: int) -> tuple[int, int, int, int]:
        """Index entry `i`, verified once against the record it names.

        The index is a cache: the first time an entry is used, the record at its
        position is read; if it is not the record the entry names, the index is
        rebuilt from the segment and StaleIndex raised. Entries of records not yet in
        the file (the writer's buffer) are the writer's own and not checked.
        """
        entry = self.index.entry(i)
        if i in self.checked or entry[1] >= self.size:
            return entry
        rec = self.record_at(entry[1])
        if rec is None or (rec.offset, rec.id_ms, rec.id_seq) != (entry[0], entry[2], entry[3]):
            raise StaleIndex(self, i)
        self.checked.add(i)
        return entry

    # -- bookkeeping ----------------------------------------------------------------

    def note_record(self, offset: int, position: int, id_ms: int, id_seq: int, ts: int) -> None:
        """Account for a record at `position` (appended or found by a scan)."""
        index = self.index
        if index.last_position < 0 or position - index.last_position >= INTERVAL_BYTES:
            index.add(offset, position, id_ms, id_seq)
        if self.next_offset == self.base_offset:
            self.first_timestamp_ms = ts
        self.next_offset = offset + 1
        self.last_id = (id_ms, id_seq)
        self.last_timestamp_ms = ts

    def rebuild_index(self) -> None:
        """Scan the whole segment, rebuilding its index and last-record facts."""
        self.index = SparseIndex()
        self.checked = set()
        self.next_offset = self.base_offset
        expected = self.base_offset
        for rec in self.scan_from(0):
            if rec.offset != expected:
                raise CorruptSegment(
                    self.path, rec.position, f"offset {rec.offset}, expected {expected}"
                )
            self.note_record(rec.offset, rec.position, rec.id_ms, rec.id_seq, rec.timestamp_ms)
            expected += 1
        self.index.persisted = 0
