"""Opening a log: how a folder becomes a Log, and what the opening trusts of it.

A log's folder holds its segments, each with its sparse index (narad/log/segment.py),
`start.checkpoint` (the logical start) and `epochs.checkpoint` (each leader epoch and
its first offset): docs/log-format.md, "A log folder" and "Recovery". `Log.open` makes
an empty Log and has `open_folder` fill it from them.

What the opening trusts, and what it does not:

- An index is a cache. A sealed segment's index is trusted once it is structurally
  valid and its last entry names a valid record with that offset and ID; only the
  records from that entry on are scanned. Any other index is rebuilt from its segment.
- The active (last) segment is scanned from its last index entry that names a valid
  record: the first record that fails its checks ends the log, and the bytes from it
  on are truncated (quietly when they are all zero: space reserved ahead of writes).
- A valid record with an offset other than the next one, a bad record or no record in
  a sealed segment, segments that do not follow each other, and a segment's name on
  something that is not a file are damage no crash causes: the open fails with
  LogCorrupted, and nothing is truncated for it.
- After the open everything in the log is durable (recovery ends with an fsync).
- A start past the log's end (moved past records a crash then lost) is brought back to
  the end, durably, so that appends do not fall below it at the next open; epochs
  that begin past the end are dropped. A malformed checkpoint is ignored, with a
  warning; temporary checkpoint files a crash left behind are deleted.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING

from narad.log import checkpoint, format
from narad.log.checkpoint import fsync_dir
from narad.log.format import SCAN_BAD, SCAN_OK
from narad.log.index import SparseIndex
from narad.log.segment import CorruptSegment, Segment, parse_segment_name

if TYPE_CHECKING:
    from narad.log.log import Log

logger = logging.getLogger("narad.log")

START_CHECKPOINT = "start.checkpoint"
EPOCHS_CHECKPOINT = "epochs.checkpoint"
# A recovery scan logs its progress every this many bytes.
PROGRESS_BYTES = 256 * 1024 * 1024


class LogCorrupted(Exception):
    """The log cannot be opened as it is on disk: `narad check` says more."""


def _last_entry_valid(seg: Segment, index: SparseIndex) -> bool:
    """Whether the index's last entry names a valid record with that offset and ID."""
    offset, position, id_ms, id_seq = index.entry(len(index) - 1)
    rec = seg.record_at(position)
    return rec is not None and (rec.offset, rec.id_ms, rec.id_seq) == (offset, id_ms, id_seq)


def _make_folder(path: Path) -> None:
    """Create folder `path` and any missing parents, each made durable in its parent."""
    missing = []
    at = path
    while not at.exists():
        missing.append(at)
        at = at.parent
    for folder in reversed(missing):
        folder.mkdir(exist_ok=True)
        fsync_dir(folder.parent)


def open_folder(log: Log) -> None:
    """Fill `log`, just made, with what its folder holds (the folder is created if
    needed): its segments, their indexes trusted or rebuilt and the active one's tail
    recovered, its start and its epochs."""
    _make_folder(log.path)
    for stray in log.path.glob("*" + checkpoint.TEMP_SUFFIX):
        stray.unlink()
    named = [
        (base, p) for p in log.path.iterdir() if (base := parse_segment_name(p.name)) is not None
    ]
    for _, path in named:
        if not path.is_file():
            raise LogCorrupted(f"{path} is named as a segment but is not a file")
    bases = sorted(base for base, _ in named)
    start = _read_start_checkpoint(log.path)
    try:
        for base in bases:
            log._add_segment(Segment(log.path, base))
        for seg in log.segments[:-1]:
            _open_sealed(seg)
        if log.segments:
            _recover_active(log.segments[-1])
    except CorruptSegment as exc:
        log.close()
        raise LogCorrupted(str(exc)) from exc
    if not log.segments:
        log._add_segment(Segment(log.path, start, create=True))
        fsync_dir(log.path)
    _check_contiguous(log)
    active = log.active
    tail = active if not active.empty or len(log.segments) == 1 else log.segments[-2]
    log.last_id = tail.last_id
    log.last_timestamp_ms = tail.last_timestamp_ms
    log.written_end = log.durable_end = log._pending_offset = active.next_offset
    log.start_offset = max(start, log.segments[0].base_offset)
    if log.start_offset > log.next_offset:
        # The start was moved past records a crash then lost: appends from here
        # on must not fall below it at the next open.
        log.start_offset = log.next_offset
        checkpoint.write(log.path / START_CHECKPOINT, [f"start {log.start_offset}"])
    log.durable_start = log.start_offset
    log.journaled_end = log.committed_end = log.next_offset
    _load_epochs(log)


def _open_sealed(seg: Segment) -> None:
    """Trust a sealed segment's index after cheap checks, else rebuild it."""
    if seg.size == 0:
        raise CorruptSegment(seg.path, 0, "empty segment that is not the last one")
    index = SparseIndex.load(seg.index_path)
    if index is None or not _index_usable(seg, index):
        logger.info("rebuilding index of %s", seg.path)
        seg.rebuild_index()
        seg.index.write_all(seg.index_path)
        return
    entries = len(index)
    end = _resume_from_index(seg, index)
    if end < seg.size:
        raise CorruptSegment(seg.path, end, "bad record in a sealed segment")
    if len(seg.index) != entries:  # the index file was short
        seg.index.write_all(seg.index_path)


def _index_usable(seg: Segment, index: SparseIndex) -> bool:
    return index.structurally_valid(seg.base_offset, seg.size) and _last_entry_valid(seg, index)


def _recover_active(seg: Segment) -> None:
    """Scan the active segment's tail; truncate at the first bad record."""
    index = SparseIndex.load(seg.index_path) or SparseIndex()
    index.truncate_from(seg.size)
    while len(index) and not _index_usable_prefix(seg, index):
        index.truncate_from(index.entry(len(index) - 1)[1])
    end = _resume_from_index(seg, index)
    if end < seg.size:
        if seg.zeros_from(end):  # space reserved ahead of writes, never written
            logger.debug("%s: released %d reserved bytes", seg.path, seg.size - end)
        else:
            logger.warning(
                "truncated the tail of %s: dropped %d bytes from byte %d",
                seg.path,
                seg.size - end,
                end,
            )
        os.ftruncate(seg.fd, end)
        seg.size = seg.allocated = end
    os.fsync(seg.fd)
    seg.index.write_all(seg.index_path)


def _resume_from_index(seg: Segment, index: SparseIndex) -> int:
    """Adopt `index` (every entry trusted), then account for the records from its
    last entry on; return the byte position where valid records end."""
    seg.index = index
    last = index.last()
    position = 0
    if last is not None:
        position = last[1]
        seg.next_offset = last[0]
        seg.first_timestamp_ms = _first_timestamp(seg)
        index.truncate_from(position)  # re-added by the scan
    return _scan_tail(seg, position)


def _index_usable_prefix(seg: Segment, index: SparseIndex) -> bool:
    """Whether the last entry names a valid record (of the right base for entry 0)."""
    first = index.entry(0)
    if first[0] != seg.base_offset or first[1] != 0:
        index.truncate_from(0)
        return True
    return _last_entry_valid(seg, index)


def _first_timestamp(seg: Segment) -> int:
    rec = seg.record_at(0)
    return rec.timestamp_ms if rec is not None else 0


def _scan_tail(seg: Segment, position: int) -> int:
    """Account for valid records from `position`; return where the valid data ends.

    A record that fails its checks ends the data; a valid record with an offset
    other than the next one means the segment is misnamed or damaged in a way no
    crash causes, and raises CorruptSegment (nothing is truncated for it).
    """
    expected = seg.next_offset
    reported = position
    chunk = 4 * 1024 * 1024
    while position < seg.size:
        buf = seg.pread(position, min(chunk, seg.size - position))
        records, used, status, detail = format.scan(buf, 0, position, 1 << 30)
        for rec in records:
            if rec.offset != expected:
                raise CorruptSegment(
                    seg.path, rec.position, f"offset {rec.offset} where {expected} was expected"
                )
            seg.note_record(rec.offset, rec.position, rec.id_ms, rec.id_seq, rec.timestamp_ms)
            expected += 1
        position += used
        if status == SCAN_BAD:
            # A zero length field starts reserved space, or a tail that never made
            # it to disk: the caller judges the bytes from here as a whole.
            if buf[used : used + 4] != bytes(4):
                logger.warning("%s: bad record at byte %d: %s", seg.path, position, detail)
            return position
        if status != SCAN_OK:
            if position + int(detail) > seg.size:
                return position  # a record cut off by the end of the file
            chunk = max(chunk, int(detail))
        if position - reported >= PROGRESS_BYTES:
            reported = position
            logger.info("recovering %s: %d of %d bytes", seg.path, position, seg.size)
    return position


def _check_contiguous(log: Log) -> None:
    for prev, cur in zip(log.segments, log.segments[1:], strict=False):
        if prev.next_offset != cur.base_offset:
            log.close()
            raise LogCorrupted(
                f"{prev.path} ends at offset {prev.next_offset} "
                f"but the next segment starts at {cur.base_offset}"
            )


def _read_start_checkpoint(path: Path) -> int:
    lines = checkpoint.read(path / START_CHECKPOINT)
    try:
        if lines and lines[0].startswith("start "):
            return int(lines[0].split()[1])
    except ValueError:
        logger.warning("%s: malformed start checkpoint ignored", path)
    return 0


def _load_epochs(log: Log) -> None:
    lines = checkpoint.read(log.path / EPOCHS_CHECKPOINT) or []
    try:
        epochs = [(int(a), int(b)) for a, b in (line.split() for line in lines)]
    except ValueError:
        logger.warning("%s: malformed epochs checkpoint ignored", log.path)
        epochs = []
    log.epochs = [(e, first) for e, first in epochs if first <= log.next_offset]
    if len(log.epochs) != len(epochs):
        log._write_epochs()
