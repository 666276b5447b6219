"""The sparse index of one segment: offset and stream ID to byte position.

The index is a cache (docs/log-format.md, "The sparse index"): it has no checksum,
and whoever loads it must `validate` it against its segment and rebuild it from the
segment when it fails. This module never reads segment files.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable
from pathlib import Path

from narad.log import format

ENTRY = struct.Struct("<QQQQ")  # offset, position, id_ms, id_seq
ENTRY_BYTES = ENTRY.size
# An entry is added for the first record of a segment and then for the first record
# that starts at least this many bytes after the previous entry's record.
INTERVAL_BYTES = 4096

IndexEntry = tuple[int, int, int, int]  # offset, position, id_ms, id_seq


class SparseIndex:
    """Entries strictly increasing in offset and position, IDs non-decreasing.

    Owned by the log's writer; entries are kept in one bytearray (32 bytes each), so
    memory is 32 bytes per ~4 KiB of segment.
    """

    __slots__ = ("_data", "last_position", "persisted")

    def __init__(self, data: bytes = b"") -> None:
        self._data = bytearray(data)
        # How many leading entries are already in the index file.
        self.persisted = len(self._data) // ENTRY_BYTES
        self._note_last()

    def _note_last(self) -> None:
        # Byte position of the last entry's record (-1: no entry), for `due`.
        n = len(self._data)
        self.last_position = (
            struct.unpack_from("<Q", self._data, n - ENTRY_BYTES + 8)[0] if n >= ENTRY_BYTES else -1
        )

    def __len__(self) -> int:
        return len(self._data) // ENTRY_BYTES

    def entry(self, i: int) -> IndexEntry:
        return ENTRY.unpack_from(self._data, i * ENTRY_BYTES)

    def last(self) -> IndexEntry | None:
        n = len(self)
        return self.entry(n - 1) if n else None

    def due(self, position: int) -> bool:
        """Whether a record starting at `position` gets an entry."""
        return self.last_position < 0 or position - self.last_position >= INTERVAL_BYTES

    def add(self, offset: int, position: int, id_ms: int, id_seq: int) -> None:
        self._data += ENTRY.pack(offset, position, id_ms, id_seq)
        self.last_position = position

    def floor_offset(self, offset: int) -> int:
        """Index of the last entry with entry.offset <= offset, or -1."""
        return self._floor(lambda e: e[0] <= offset)

    def floor_id_below(self, id_ms: int, id_seq: int, inclusive: bool) -> int:
        """Index of the last entry whose ID is < (or <= when inclusive) the given ID, or -1."""
        key = (id_ms, id_seq)
        if inclusive:
            return self._floor(lambda e: (e[2], e[3]) <= key)
        return self._floor(lambda e: (e[2], e[3]) < key)

    def _floor(self, holds: Callable[[IndexEntry], bool]) -> int:
        # Entries satisfying `holds` form a prefix; binary search for its end.
        lo, hi = 0, len(self)
        while lo < hi:
            mid = (lo + hi) // 2
            if holds(self.entry(mid)):
                lo = mid + 1
            else:
                hi = mid
        return lo - 1

    def truncate_from(self, position: int) -> None:
        """Drop every entry at or after byte `position`."""
        keep = len(self)
        while keep and self.entry(keep - 1)[1] >= position:
            keep -= 1
        del self._data[keep * ENTRY_BYTES :]
        self.persisted = min(self.persisted, keep)
        self._note_last()

    def structurally_valid(self, base_offset: int, segment_bytes: int) -> bool:
        """Cheap checks that need no segment read: see docs/log-format.md."""
        data = self._data
        if len(data) % ENTRY_BYTES or not data:
            return False
        first, last = self.entry(0), self.entry(len(self) - 1)
        if first[0] != base_offset or first[1] != 0 or last[1] >= segment_bytes:
            return False
        return format.index_ordered(bytes(data))

    # -- the index file -------------------------------------------------------------

    @classmethod
    def load(cls, path: Path) -> SparseIndex | None:
        """The index stored at `path`, or None when it is missing or unreadable."""
        try:
            data = path.read_bytes()
        except OSError:
            return None
        if len(data) % ENTRY_BYTES:
            data = data[: len(data) - len(data) % ENTRY_BYTES]
        return cls(data)

    def write_all(self, path: Path) -> None:
        """Replace the file with every entry. Not fsynced: the index is a cache."""
        path.write_bytes(self._data)
        self.persisted = len(self)

    def write_new(self, path: Path, position_end: int) -> None:
        """Append to the file the entries not yet in it whose record starts before
        `position_end` (the caller's durable end)."""
        first = self.persisted
        last = first
        while last < len(self) and self.entry(last)[1] < position_end:
            last += 1
        if last == first:
            return
        fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            os.pwrite(fd, self._data[first * ENTRY_BYTES : last * ENTRY_BYTES], first * ENTRY_BYTES)
        finally:
            os.close(fd)
        self.persisted = last
