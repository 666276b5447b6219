"""The folder lock: one writer at a time in a data dir.

A server holds it on its data dir for as long as it runs (narad/keyspace.py), and so
does `narad check --repair` while it repairs, so that neither writes into files the
other has open. It is an flock(2) on `narad.lock` in the folder: the kernel drops it
when the holder exits, however it exits, so a crash never leaves a stale lock. The
holder writes its process ID into the file, for error messages only: the lock, not
the file's text, says whether the folder is in use.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path

LOCK_NAME = "narad.lock"


class FolderBusy(Exception):
    """Another process holds the folder's lock. `holder` is its process ID, if known."""

    def __init__(self, folder: Path, holder: int | None) -> None:
        who = f"process {holder}" if holder is not None else "another process"
        super().__init__(f"{folder} is in use by {who} (it holds {folder / LOCK_NAME})")
        self.folder = folder
        self.holder = holder


def lock_folder(folder: Path) -> int:
    """Take `folder`'s lock and return its file descriptor (close it to release).
    Raises FolderBusy if another process holds it."""
    fd = os.open(folder / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = _holder(fd)
        os.close(fd)
        raise FolderBusy(folder, holder) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, b"%d\n" % os.getpid(), 0)
    return fd


def holder(folder: Path) -> int | None:
    """The process ID of whoever holds `folder`'s lock right now, None when nobody
    does. (Asks with a shared lock taken and dropped at once, so a server starting at
    that very instant could find the folder busy.) A holder that wrote no ID is -1."""
    try:
        fd = os.open(folder / LOCK_NAME, os.O_RDONLY)
    except OSError:  # gone, or not ours to read: nothing to say about it
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            pid = _holder(fd)
            return -1 if pid is None else pid
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def _holder(fd: int) -> int | None:
    with contextlib.suppress(OSError, ValueError, IndexError):
        return int(os.pread(fd, 32, 0).split()[0])
    return None


def lock_folders(logs: list[Path]) -> list[Path]:
    """The folders whose locks guard `logs`: for each log folder, the nearest folder
    at or above it with a lock file (the data dir it belongs to), sorted, each once.
    A log with no lock file above it belongs to no server and has no lock."""
    found: set[Path] = set()
    for log in logs:
        for folder in (log, *log.resolve().parents):
            if (folder / LOCK_NAME).is_file():
                found.add(folder.resolve())
                break
    return sorted(found)
