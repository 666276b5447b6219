"""Reading a log: records by offset, forwards and backwards, and offsets by stream ID.

`narad.log.log.Log` answers each read by calling these functions on itself; they read
its segments (and, for `read_with_buffer`, its write buffer) and change nothing in it
but the read hint and a stale index.

Contracts (the words are those of docs/design.md, "The words are contracts"):

- Every offset below the log's `next_offset` is readable: `read`, `read_entries`,
  `read_reverse` and `offset_of_id` write the log's buffer first; `read_with_buffer`
  decodes the buffer's records in place instead, and so do the others when that
  write meets a transient error (the log's write error state: narad/log/log.py).
- Reads never return a record below the logical start (`start_offset`).
- Reads run on the writer's thread (a read may write the buffer).
- A read leaves the read hint (`Log._read_hint`) at the record after the last one it
  returned, so that a read going on from there scans no records before it.
- An index entry that does not name its record (StaleIndex) has that segment's index
  rebuilt from the segment, and the read goes on; every record read is CRC-checked by
  `format.scan`.
"""

from __future__ import annotations

import bisect
import itertools
import logging
from collections.abc import Collection, Iterator
from typing import TYPE_CHECKING

from narad.log import format
from narad.log.format import Record
from narad.log.index import INTERVAL_BYTES
from narad.log.segment import CHUNK_BYTES, Segment, StaleIndex

if TYPE_CHECKING:
    from narad.log.log import Log

logger = logging.getLogger("narad.log")

# read_with_buffer decodes at most this many buffered records ahead of the first one
# it returns; a read further into the write buffer writes it and reads the file.
BUFFER_SKIP_MAX = 64


def _take(records: Iterator[Record], count_max: int, bytes_max: int) -> list[Record]:
    """The first records of `records`: at most `count_max`, and no more than
    `bytes_max` bytes of them unless the very first alone is larger."""
    out: list[Record] = []
    size = 0
    if count_max <= 0:
        return out
    for rec in records:
        if out and size + rec.size > bytes_max:
            break
        out.append(rec)
        size += rec.size
        if len(out) >= count_max:
            break
    return out


def _exact_chunk(seg: Segment, count: int) -> int:
    """Bytes to read from a record's own position in `seg` for about `count` records
    (their size averaged over the segment), one more header included."""
    return min(CHUNK_BYTES, count * seg.average_record_bytes() + format.HEADER_BYTES)


def read(
    log: Log,
    offset: int,
    count_max: int = 1 << 30,
    bytes_max: int = 1 << 62,
    end: int | None = None,
) -> list[Record]:
    """Records from `offset` on (at least the first one, if any), oldest first,
    stopping before offset `end` (default: the log's end, buffered records
    written to the file first), after `count_max` records, or once `bytes_max`
    record bytes are reached."""
    if end is None and log._pending and not log.try_write():
        return _take(iter(read_with_buffer(log, offset, count_max)), count_max, bytes_max)
    end = log.written_end if end is None else min(end, log.written_end)
    offset = max(offset, log.start_offset)
    if bytes_max < 1 << 62 or count_max <= 0:
        records = itertools.chain.from_iterable(_batches_from(log, offset, end, count_max))
        return _take(records, count_max, bytes_max)
    out: list[Record] = []
    for batch in _batches_from(log, offset, end, count_max):
        out += batch
        if len(out) >= count_max:
            del out[count_max:]
            break
    if out:
        last = out[-1]
        seg = _segment_of(log, last.offset)
        log._read_hint = (last.offset + 1, seg, last.position + last.size)
    return out


def read_frames(log: Log, offset: int, bytes_max: int, end: int | None = None) -> tuple[int, bytes]:
    """(how many, their frames): whole records from `offset` on and before `end`
    (default: the log's end), as framed in their segment (CRC-checked), from one
    segment, about `bytes_max` bytes (the first record whatever its size); (0, b"")
    when there are none. Unlike `read`, this reads below the logical start too, from
    the first segment on: a full copy sends a log as it was at a past position
    (narad/replication/fullcopy.py), while checkpoints keep its segments."""
    end = log.next_offset if end is None else end
    if log.written_end < end:
        log.try_write()  # else only what the file holds
    offset = max(offset, log.segments[0].base_offset)
    batches = _batches_from(log, offset, min(end, log.written_end), 1 << 30)
    records = _take(itertools.chain.from_iterable(batches), 1 << 30, bytes_max)
    if not records:
        return 0, b""
    seg = _segment_of(log, records[0].offset)
    last = records[0]
    for rec in records[1:]:
        if rec.position <= last.position:  # the next segment's
            break
        last = rec
    first = records[0]
    size = last.position + last.size - first.position
    return last.offset - first.offset + 1, seg.pread(first.position, size)


def read_entries(
    log: Log, offset: int, count: int, high: int, deleted: Collection[int]
) -> tuple[list[tuple[int, bytes]], tuple[int, int] | None, bool] | None:
    """A stream's read of entries that goes on right where the last read ended
    (the read hint names `offset`): the (ID, payload) of the records from `offset`
    on in the hint's segment, without making Records (`format.scan_entries`;
    `deleted`, `high` and `count` as it takes them). Returns (entries, after,
    above): `after` is the ID of the last record taken and the offset after it
    (None: none taken); `above` says a record above `high` ended the read. The
    read stops at the segment's end; the caller goes on with `read` if it wants
    more. None, and nothing read, when the hint does not name `offset` or the buffer
    cannot be written (then `read` takes it from the buffer)."""
    if log._pending and not log.try_write():
        return None
    if offset < log.start_offset:
        return None
    seg = _segment_of(log, offset)
    position = _hinted(log, seg, offset)
    if position is None:
        return None
    entries, after, above, end = seg.scan_entries(
        position, count, high, deleted, _exact_chunk(seg, count)
    )
    if after is not None:
        log._read_hint = (after[1], seg, end)
    return entries, after, above


def read_with_buffer(log: Log, offset: int, count_max: int) -> list[Record]:
    """`read`, and past `written_end` the records still buffered by `append`
    (not yet appended to the file: see `write`), decoded from the write buffer
    with the positions they will have in the active segment. A read of what was
    just buffered (a pop right after a push) then costs no write and no file read;
    its reply still waits for the commit that appends it (docs/durability.md)."""
    pending = log._pending_records
    first = max(offset, log.start_offset)
    if pending and first >= log.journaled_end > log._pending_offset:
        # The buffer's older records are committed ones waiting to be written
        # (narad/log/journal.py): what is wanted lies past them, where the
        # records no commit has taken yet begin.
        journaled = log.journaled_end
        return _decode_buffer(log, first, count_max, journaled, log._pending_journaled)
    if pending and first - log._pending_offset > BUFFER_SKIP_MAX:
        log.try_write()
    written = log.written_end
    out = read(log, offset, count_max, end=written) if offset < written else []
    wanted = count_max - len(out)
    if wanted <= 0 or not log._pending_records:
        return out
    first = out[-1].offset + 1 if out else first
    return out + _decode_buffer(log, first, wanted, log._pending_offset, 0)


def _buffered_from(log: Log, first: int) -> list[Record]:
    """Every record of the write buffer from offset `first` on."""
    return _decode_buffer(log, first, log.next_offset - first, log._pending_offset, 0)


def _decode_buffer(log: Log, first: int, count: int, base: int, at: int) -> list[Record]:
    """At most `count` records from offset `first` on, decoded from the write
    buffer, whose record `base` starts at byte `at` (first >= base)."""
    skip = first - base
    if first >= log.next_offset:
        return []
    records = format.scan(log._pending, at, log.active.size, skip + count)[0][skip:]
    if records:
        last = records[-1]
        log._read_hint = (last.offset + 1, log.active, last.position + last.size)
    return records


def _batches_from(log: Log, offset: int, end: int, count_hint: int) -> Iterator[list[Record]]:
    """The records from `offset` up to `end`, a list at a time, read in chunks sized
    for about `count_hint` records; rebuilds a stale index and goes on."""
    while True:
        try:
            for batch in _batches_from_once(log, offset, end, count_hint):
                yield batch
                offset = batch[-1].offset + 1
            return
        except StaleIndex as exc:
            _rebuild_stale(log, exc)


def _batches_from_once(log: Log, offset: int, end: int, count_hint: int) -> Iterator[list[Record]]:
    if offset >= end:
        return
    i = max(bisect.bisect_right(log._bases, offset) - 1, 0)
    for seg in log.segments[i:]:
        if seg.base_offset >= end:
            return
        position = _hinted(log, seg, offset)
        if position is not None:
            # Right at the first record wanted: read about `count_hint` records,
            # and make (and CRC-check) no more of them than that per batch.
            batch_max = count_hint
            chunk = _exact_chunk(seg, count_hint)
        else:
            position = seg.checked_entry(max(seg.index.floor_offset(offset), 0))[1]
            batch_max = 1 << 30
            wanted = INTERVAL_BYTES + count_hint * seg.average_record_bytes()
            chunk = min(CHUNK_BYTES, max(wanted, 2 * INTERVAL_BYTES))
        for batch in seg.scan_batches(position, seg.size, chunk, batch_max):
            if batch[0].offset >= offset and batch[-1].offset < end:
                yield batch
                continue
            kept = [rec for rec in batch if offset <= rec.offset < end]
            if kept:
                yield kept
            if batch[-1].offset >= end:
                return


def _hinted(log: Log, seg: Segment, offset: int) -> int | None:
    """The position of record `offset` in `seg` when the last read ended right
    before it (the read hint), else None."""
    hint = log._read_hint
    if hint is not None and hint[0] == offset and hint[1] is seg:
        return hint[2]
    return None


def _segment_of(log: Log, offset: int) -> Segment:
    """The segment holding `offset` (an offset from `start_offset` on)."""
    return log.segments[bisect.bisect_right(log._bases, offset) - 1]


def _rebuild_stale(log: Log, exc: StaleIndex) -> None:
    """An index entry was wrong: rebuild that segment's index from the segment."""
    logger.warning("%s; rebuilding it", exc)
    log.write()  # the writer's buffered records must be in the file to be indexed
    seg = exc.segment
    seg.rebuild_index()
    seg.index.write_all(seg.index_path)


def read_reverse(
    log: Log,
    offset: int,
    count_max: int = 1 << 30,
    bytes_max: int = 1 << 62,
    end: int | None = None,
) -> list[Record]:
    """Records at `offset` and below, newest first, never below the logical start
    and never at or above `end` (default: the log's end, as `read`)."""
    if end is None and log._pending and not log.try_write():
        buffered = _buffered_from(log, max(log._pending_offset, log.start_offset))
        newest = [rec for rec in reversed(buffered) if rec.offset <= offset]
        older = _iter_reverse(log, min(offset, log.written_end - 1))
        return _take(itertools.chain(newest, older), count_max, bytes_max)
    end = log.written_end if end is None else min(end, log.written_end)
    offset = min(offset, end - 1)
    return _take(_iter_reverse(log, offset), count_max, bytes_max)


def _iter_reverse(log: Log, offset: int) -> Iterator[Record]:
    while True:
        try:
            for rec in _iter_reverse_once(log, offset):
                yield rec
                offset = rec.offset - 1
            return
        except StaleIndex as exc:
            _rebuild_stale(log, exc)


def _iter_reverse_once(log: Log, offset: int) -> Iterator[Record]:
    if offset < log.start_offset:
        return
    i = bisect.bisect_right(log._bases, offset) - 1
    while i >= 0:
        seg = log.segments[i]
        entry_i = seg.index.floor_offset(offset)
        while entry_i >= 0:
            start = seg.checked_entry(entry_i)[1]
            stop = seg.size
            if entry_i + 1 < len(seg.index):
                stop = min(stop, seg.checked_entry(entry_i + 1)[1])
            window = [r for r in seg.scan_from(start, stop) if r.offset <= offset]
            for rec in reversed(window):
                if rec.offset < log.start_offset:
                    return
                yield rec
            entry_i -= 1
        i -= 1


def offset_of_id(log: Log, id_ms: int, id_seq: int, after: bool = False) -> int:
    """The first offset whose record's stream ID is >= the given ID (> with
    `after`), or `written_end` when there is none. The result may lie below the
    logical start; callers clamp. With records the log could not write (its write
    error state), past the file's end it looks among them, up to `next_offset`."""
    written = not log._pending or log.try_write()
    while True:
        try:
            found = _offset_of_id(log, id_ms, id_seq, after)
            break
        except StaleIndex as exc:
            _rebuild_stale(log, exc)
    if written or found < log.written_end:
        return found
    key = (id_ms, id_seq)
    for rec in _buffered_from(log, log._pending_offset):
        if ((rec.id_ms, rec.id_seq) > key) if after else ((rec.id_ms, rec.id_seq) >= key):
            return rec.offset
    return log.next_offset


def _offset_of_id(log: Log, id_ms: int, id_seq: int, after: bool) -> int:
    key = (id_ms, id_seq)
    if log.written_end == log.segments[0].base_offset:
        return log.written_end
    # The answer lies in the last segment whose first ID is below the key (or
    # the first segment), or right after it.
    i = 0
    lo, hi = 0, len(log.segments)
    while lo < hi:
        mid = (lo + hi) // 2
        seg = log.segments[mid]
        first = seg.index.entry(0) if len(seg.index) else None
        if first is not None and (
            (first[2], first[3]) <= key if after else (first[2], first[3]) < key
        ):
            i = mid
            lo = mid + 1
        else:
            hi = mid
    for seg in log.segments[i:]:
        e = seg.index.floor_id_below(id_ms, id_seq, inclusive=after)
        position = seg.checked_entry(max(e, 0))[1] if len(seg.index) else 0
        # The record sought is at most an index interval on, if in this segment.
        for rec in seg.scan_from(position, seg.size, 2 * INTERVAL_BYTES):
            if rec.offset >= log.written_end:
                return log.written_end
            rid = (rec.id_ms, rec.id_seq)
            if (rid > key) if after else (rid >= key):
                return rec.offset
    return log.written_end


def id_ms_floor(log: Log, offset: int) -> int | None:
    """The time part of the ID of the record at `offset` (start_offset <= offset <
    next_offset), or of an earlier record's, from memory alone: exact when the
    record is still in the write buffer or an index entry names it, else the ID of
    the sparse index entry before it (at most INTERVAL_BYTES of records earlier).
    None when memory holds nothing at or before it. /metrics uses it for ages that
    must not read a file (narad/collectors.py)."""
    if log._pending_records and offset >= log._pending_offset:
        skip = offset - log._pending_offset
        records = format.scan(log._pending, 0, log.active.size, skip + 1)[0]
        if len(records) > skip:
            return records[skip].id_ms
    at = bisect.bisect_right(log._bases, offset) - 1
    while at >= 0:
        index = log.segments[at].index
        i = index.floor_offset(offset)
        if i >= 0:
            return index.entry(i)[2]
        at -= 1
    return None
