"""Open segment files, a bounded number at a time.

Every segment of every log is a file, and a node with many streams, or streams of
many segments, has more of them than a process may hold open. A segment takes its
file descriptor from here each time it needs one; past `limit` open files the least
recently used one is closed (the file stays, and is opened again when next needed).
Closing loses nothing: the page cache belongs to the file, not to a descriptor, so an
fsync through any descriptor makes durable what any other wrote.

Only the event loop thread takes descriptors here. A thread that fsyncs (the journal's
everysec thread, the checkpoint thread) opens the file by its path for that fsync
(`Log.sync(own_fd=True)`), so that no descriptor it uses can be closed under it.
"""

from __future__ import annotations

import os
import resource
from collections import OrderedDict
from pathlib import Path
from typing import Protocol


class Segment(Protocol):
    """A segment (narad/log/segment.py), as far as its file goes."""

    @property
    def path(self) -> Path: ...

# Descriptors kept for everything else (client connections, listeners, the lock,
# index and checkpoint files being written), out of the process's limit.
RESERVED = 1024
LIMIT_MIN = 64


def default_limit() -> int:
    """Half of what the process may open, or its limit less RESERVED if that is more."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        soft = 1 << 20
    return max(LIMIT_MIN, soft // 2, soft - RESERVED)


class OpenFiles:
    """See the module docstring."""

    def __init__(self, limit: int | None = None) -> None:
        self.limit = default_limit() if limit is None else limit
        self._open: OrderedDict[Segment, int] = OrderedDict()
        self.opens = 0  # files opened again after being closed for the limit

    def fd(self, seg: Segment) -> int:
        """`seg`'s descriptor, opening its file if it is not open now."""
        opened = self._open
        fd = opened.get(seg)
        if fd is not None:
            opened.move_to_end(seg)
            return fd
        fd = os.open(seg.path, os.O_RDWR)
        self.opens += 1
        opened[seg] = fd
        if len(opened) > self.limit:
            self.refit()
        return fd

    def add(self, seg: Segment, fd: int) -> None:
        """`seg` opened its file itself (creating it)."""
        self._open[seg] = fd
        if len(self._open) > self.limit:
            self.refit()

    def refit(self) -> None:
        """Close the least recently used files past the limit (after the limit moved)."""
        opened = self._open
        while len(opened) > max(self.limit, 1):
            _, fd = opened.popitem(last=False)
            os.close(fd)

    def forget(self, seg: Segment) -> int | None:
        """`seg` is closing: its descriptor, if open, for it to close."""
        return self._open.pop(seg, None)

    def __len__(self) -> int:
        return len(self._open)


OPEN_FILES = OpenFiles()
