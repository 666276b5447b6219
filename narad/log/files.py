"""Open segment files, a bounded number at a time, within the process's descriptor budget.

Every segment of every log is a file, and a node with many streams, or streams of
many segments, has more of them than a process may hold open. A segment takes its
file descriptor from here each time it needs one; past `limit` open files the least
recently used one is closed (the file stays, and is opened again when next needed).
Closing loses nothing: the page cache belongs to the file, not to a descriptor, so an
fsync through any descriptor makes durable what any other wrote.

The budget: the process's open-files limit, less RESERVED descriptors that are never
lent (listeners, the data dir's lock, the files a checkpoint or an fsync thread opens
by path, index files being written, the replication link, the event loop's own), is
shared by client connections and cached segment files. Clients come first, up to
`maxclients`, which the server lowers at start to leave SEGMENTS_MIN to the segments
(`clients_max`); the segments use what the clients connected now leave (`share`), so
a connection never finds the descriptors taken, and no opening of a file by a
checkpoint finds them taken either.

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

# Descriptors never lent to clients or cached segments (see the module docstring).
RESERVED = 64
# Cached segment files the clients always leave: a node serving its most clients
# still reads and writes without reopening a file for each record.
SEGMENTS_MIN = 64


def process_limit() -> int:
    """The process's soft limit on open files (a large number when unlimited)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return 1 << 20 if soft == resource.RLIM_INFINITY else soft


class Segment(Protocol):
    """A segment (narad/log/segment.py), as far as its file goes."""

    @property
    def path(self) -> Path: ...


class OpenFiles:
    """See the module docstring."""

    def __init__(self) -> None:
        # Descriptors for clients and segments together, and the most open segments.
        self.budget = process_limit() - RESERVED
        self.limit = self.budget
        self._open: OrderedDict[Segment, int] = OrderedDict()
        self.opens = 0  # files opened again after being closed for the limit

    def fit(self, open_files_limit: int) -> None:
        """Budget from the process's limit `open_files_limit` (as the server set it)."""
        self.budget = open_files_limit - RESERVED
        self.share(0)

    @property
    def clients_max(self) -> int:
        """The most clients the budget holds with SEGMENTS_MIN left (< 1: none)."""
        return self.budget - SEGMENTS_MIN

    def share(self, clients: int) -> None:
        """`clients` connections hold descriptors now: the segments may keep the rest
        of the budget open (at least SEGMENTS_MIN), closing the least recently used
        files past it at once."""
        self.limit = max(SEGMENTS_MIN, self.budget - clients)
        if len(self._open) > self.limit:
            self.refit()

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
