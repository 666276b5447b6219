"""A small tmpfs, mounted for one test, so that its disk really fills up (ENOSPC from
the kernel), and a file that takes whatever room is left on it.

Mounting needs root: without it (or where mount is refused) the test is skipped.
"""

from __future__ import annotations

import errno
import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

FILLER_CHUNK = 64 * 1024


@contextmanager
def small_disk(folder: Path, size: str = "8m") -> Iterator[Path]:
    """`folder`, a tmpfs of `size` bytes for the length of the block."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    folder.mkdir(parents=True, exist_ok=True)
    run = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)],
        capture_output=True, text=True,
    )
    if run.returncode != 0:
        pytest.skip(f"mount failed: {run.stderr.strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


def fill(path: Path) -> int:
    """Write zeros to `path` until its filesystem has no room left; bytes written."""
    written = 0
    with open(path, "wb", buffering=0) as f:
        try:
            while True:
                written += f.write(b"\0" * FILLER_CHUNK)
        except OSError as exc:
            if exc.errno != errno.ENOSPC:  # full, as wanted
                raise
    with open(path, "ab", buffering=0) as f:  # the last blocks a chunk did not fit
        try:
            while True:
                written += f.write(b"\0" * 512)
        except OSError:
            pass
    return written
