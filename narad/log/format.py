"""Record framing: bytes in, records out, and the reverse. No file I/O.

The byte layout is specified in docs/log-format.md; every constant here is named
there. This module is the reference implementation: narad/_speedups/_format.pyx is
its compiled twin and must give identical bytes and identical scans, and is picked at
import time unless NARAD_PURE=1.
"""

from __future__ import annotations

import operator
import struct
from collections.abc import Collection, Sequence
from typing import NamedTuple

from narad._speedups import load

FORMAT_VERSION = 1

# Byte sizes of the record frame (docs/log-format.md, "A record").
LENGTH_BYTES = 4
CRC_BYTES = 4
HEADER_BYTES = 46
# `length` counts every byte after the length field; a record with an empty
# payload has length 42.
LENGTH_MIN = HEADER_BYTES - LENGTH_BYTES
# A record larger than this is treated as corrupt on read and refused on write.
RECORD_BYTES_MAX = 1 << 30

# Flag bits. The log stores them and never interprets them.
FLAG_ENTRY = 0x01  # the payload is a stream entry's field/value list

# Outcome of `scan`.
SCAN_OK = 0  # stopped at the end of the buffer or after `count_max` records
SCAN_SHORT = 1  # the next record does not fit in the buffer; detail = its full size
SCAN_BAD = 2  # the next record fails its length, version or CRC check; detail = why

_HEAD = struct.Struct("<II")  # length, crc
_TAIL = struct.Struct("<BBIQQQQ")  # version, flags, epoch, offset, timestamp, id_ms, id_seq
# A record keeps its leader epoch in 32 bits: no epoch above this is ever promised,
# taken from a leader or begun (narad/replication/role.py, narad/log/journal.py).
EPOCH_MAX = (1 << 32) - 1
_U32 = struct.Struct("<I")


class Record(NamedTuple):
    """One record as read back from a segment."""

    offset: int
    timestamp_ms: int
    epoch: int
    flags: int
    id_ms: int
    id_seq: int
    payload: bytes
    position: int  # byte position of the record's frame in its segment file

    @property
    def size(self) -> int:
        """Bytes the record occupies on disk, frame included."""
        return HEADER_BYTES + len(self.payload)


def too_large(length: int) -> str:
    """The refusal of a record of `length` over RECORD_BYTES_MAX, as encoding says it."""
    return f"record of {length} bytes exceeds the maximum of {RECORD_BYTES_MAX}"


def entry_too_large(fields: Sequence[bytes]) -> str | None:
    """The refusal encoding would give the record of the entry `fields` (the payload
    `encode_fields(fields)`, not built here), or None when it fits."""
    length = LENGTH_MIN + 4 + 4 * len(fields) + sum(map(len, fields))
    return too_large(length) if length > RECORD_BYTES_MAX else None


def encode_into(
    buf: bytearray,
    offset: int,
    timestamp_ms: int,
    epoch: int,
    flags: int,
    id_ms: int,
    id_seq: int,
    payload: bytes,
) -> None:
    """Append one framed record to `buf`."""
    length = LENGTH_MIN + len(payload)
    if length > RECORD_BYTES_MAX:
        raise ValueError(too_large(length))
    tail = _TAIL.pack(FORMAT_VERSION, flags, epoch, offset, timestamp_ms, id_ms, id_seq)
    buf += _HEAD.pack(length, crc32c(payload, crc32c(tail)))
    buf += tail
    buf += payload


def scan(
    buf: bytes | bytearray | memoryview,
    start: int,
    base_position: int,
    count_max: int,
) -> tuple[list[Record], int, int, int | str]:
    """Parse and verify consecutive records in `buf` from index `start`.

    Returns (records, end, status, detail): `end` is the index just past the last
    good record. With SCAN_SHORT, `detail` is the full size of the record that did not
    fit (or HEADER_BYTES when not even its length is there); with SCAN_BAD it says
    what failed. A record's `position` is `base_position` plus its index in `buf`.
    """
    view = memoryview(buf)
    size = len(view)
    records: list[Record] = []
    pos = start
    while len(records) < count_max:
        if size - pos < HEADER_BYTES:
            if pos == size:
                break
            return records, pos, SCAN_SHORT, HEADER_BYTES
        length, crc = _HEAD.unpack_from(view, pos)
        if length < LENGTH_MIN or length > RECORD_BYTES_MAX:
            return records, pos, SCAN_BAD, f"bad length {length}"
        end = pos + LENGTH_BYTES + length
        if end > size:
            return records, pos, SCAN_SHORT, LENGTH_BYTES + length
        if crc32c(view[pos + 8 : end]) != crc:
            return records, pos, SCAN_BAD, "CRC mismatch"
        version, flags, epoch, offset, timestamp_ms, id_ms, id_seq = _TAIL.unpack_from(
            view, pos + 8
        )
        if version != FORMAT_VERSION:
            return records, pos, SCAN_BAD, f"unknown format version {version}"
        payload = bytes(view[pos + HEADER_BYTES : end])
        records.append(
            Record(offset, timestamp_ms, epoch, flags, id_ms, id_seq, payload, base_position + pos)
        )
        pos = end
    return records, pos, SCAN_OK, 0


def scan_entries(
    buf: bytes | bytearray | memoryview,
    start: int,
    count_max: int,
    high: int,
    deleted: Collection[int],
) -> tuple[list[tuple[int, bytes]], int, int, int | str, int, int, bool]:
    """`scan` for reads that want entries only (Stream.range_raw): the stream ID
    (`id_ms << 64 | id_seq`) and payload of each record from index `start`, skipping
    records whose offset is in `deleted`, at most `count_max` of them, stopping before
    the first record whose ID is above `high`. No Record is made.

    Returns (entries, end, status, detail, last_id, next_offset, above): `end`,
    `status` and `detail` as `scan` gives them for the records taken; `last_id` and
    `next_offset` are the ID of the last record taken (a skipped one included) and
    the offset after it, (-1, -1) when none was; `above` says a record above `high`
    stopped the scan."""
    entries: list[tuple[int, bytes]] = []
    pos = start
    last_id = next_offset = -1
    while len(entries) < count_max:
        records, end, status, detail = pure_scan(buf, pos, 0, 1)
        if not records:
            return entries, pos, status, detail, last_id, next_offset, False
        rec = records[0]
        sid = rec.id_ms << 64 | rec.id_seq
        if sid > high:
            return entries, pos, SCAN_OK, 0, last_id, next_offset, True
        pos = end
        last_id, next_offset = sid, rec.offset + 1
        if rec.offset not in deleted:
            entries.append((sid, rec.payload))
    return entries, pos, SCAN_OK, 0, last_id, next_offset, False


def encode_fields(fields: Sequence[bytes]) -> bytes:
    """The entry payload for a flat field, value, field, value ... list."""
    parts = [_U32.pack(len(fields))]
    for item in fields:
        parts.append(_U32.pack(len(item)))
        parts.append(item)
    return b"".join(parts)


def decode_fields(payload: bytes) -> list[bytes]:
    """The flat field/value list of an entry payload; ValueError if malformed."""
    total = len(payload)
    if total < 4:
        raise ValueError("entry payload is truncated")
    (count,) = _U32.unpack_from(payload, 0)
    fields: list[bytes] = []
    pos = 4
    for _ in range(count):
        if pos + 4 > total:
            raise ValueError("entry payload is truncated")
        (size,) = _U32.unpack_from(payload, pos)
        pos += 4
        if pos + size > total:
            raise ValueError("entry payload is truncated")
        fields.append(payload[pos : pos + size])
        pos += size
    if pos != total:
        raise ValueError("entry payload has trailing bytes")
    return fields


U64_MAX = (1 << 64) - 1


def encode_entries(
    buf: bytearray,
    argvs: Sequence[Sequence[bytes]],
    first: int,
    offset: int,
    timestamp_ms: int,
    epoch: int,
    flags: int,
    id_ms: int,
    id_seq: int,
    position: int,
    index_position: int,
    interval: int,
) -> list[tuple[int, int, int, int]]:
    """Append one framed record per argv of `argvs` to `buf`: the same bytes as
    `encode_into` with the payload `encode_fields(argv[first:])`, offsets counting
    up from `offset`, stream IDs counting up from (id_ms, id_seq) (a sequence past
    2^64-1 carries into the milliseconds), every record with `timestamp_ms`.

    `position` is where the first record starts in its segment file. Returns the
    sparse index entries (offset, position, id_ms, id_seq) due, given that the
    last entry's record starts at `index_position` (-1: no entry): a record gets
    one when it starts `interval` bytes or more after the last entry's.

    Raises ValueError, appending nothing, if any record would exceed
    RECORD_BYTES_MAX."""
    payloads = [pure_encode_fields(argv[first:]) for argv in argvs]
    for payload in payloads:
        length = LENGTH_MIN + len(payload)
        if length > RECORD_BYTES_MAX:
            raise ValueError(too_large(length))
    due: list[tuple[int, int, int, int]] = []
    for payload in payloads:
        if index_position < 0 or position - index_position >= interval:
            due.append((offset, position, id_ms, id_seq))
            index_position = position
        pure_encode_into(buf, offset, timestamp_ms, epoch, flags, id_ms, id_seq, payload)
        position += HEADER_BYTES + len(payload)
        offset += 1
        if id_seq == U64_MAX:
            id_ms, id_seq = id_ms + 1, 0
        else:
            id_seq += 1
    return due


def index_ordered(data: bytes) -> bool:
    """Whether the sparse index entries in `data` (32 bytes each: offset, position,
    id_ms, id_seq as little-endian u64; a whole number of entries) are strictly
    increasing in offset and position and non-decreasing in (id_ms, id_seq)."""
    fields = struct.unpack(f"<{len(data) // 8}Q", data)
    offsets, positions = fields[0::4], fields[1::4]
    ids = list(zip(fields[2::4], fields[3::4], strict=True))
    return (
        all(map(operator.lt, offsets, offsets[1:]))
        and all(map(operator.lt, positions, positions[1:]))
        and all(map(operator.le, ids, ids[1:]))
    )


# The pure-Python functions above stay importable under these names for tests that
# compare both paths.
pure_encode_into = encode_into
pure_scan = scan
pure_scan_entries = scan_entries
pure_encode_fields = encode_fields
pure_decode_fields = decode_fields
pure_encode_entries = encode_entries
pure_index_ordered = index_ordered

_twin = load("_format")
if _twin is None:
    # The twin computes CRC32C itself: the package (a few ms to import) serves
    # the pure path only.
    from crc32c import crc32c as crc32c
else:
    crc32c = _twin.crc32c
    encode_into = _twin.encode_into
    scan = _twin.scan
    scan_entries = _twin.scan_entries
    encode_fields = _twin.encode_fields
    decode_fields = _twin.decode_fields
    encode_entries = _twin.encode_entries
    index_ordered = _twin.index_ordered
SPEEDUPS = _twin is not None
