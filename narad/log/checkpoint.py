"""Small crash-safe files: written whole and atomically, read back verified.

Format (docs/log-format.md, "Checkpoints"): text lines, the last one `crc <n>` with
the CRC32C of everything before it. A checkpoint is replaced by writing a temporary
file, fsyncing it, renaming it over the old one and fsyncing the folder, so after a
crash either the old or the new content is there, never a mix. A damaged or missing
checkpoint reads as None.
"""

from __future__ import annotations

import os
from pathlib import Path

from narad.log.format import crc32c

TEMP_SUFFIX = ".tmp"


def fsync_dir(path: Path) -> None:
    """Make the creation, rename or deletion of entries in folder `path` durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write(path: Path, lines: list[str]) -> None:
    body = "".join(line + "\n" for line in lines).encode()
    data = body + f"crc {crc32c(body)}\n".encode()
    temp = path.with_name(path.name + TEMP_SUFFIX)
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        done = 0
        while done < len(data):  # a short write (a disk filling up) goes on, or raises
            done += os.write(fd, data[done:])
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(temp, path)
    fsync_dir(path.parent)


def read(path: Path) -> list[str] | None:
    """The lines of a valid checkpoint at `path`, without the crc line, or None."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    body, sep, tail = data.rpartition(b"crc ")
    if not sep or not tail.endswith(b"\n") or (body and not body.endswith(b"\n")):
        return None
    try:
        expected = int(tail[:-1])
    except ValueError:
        return None
    if crc32c(body) != expected:
        return None
    try:
        return body.decode().splitlines()
    except UnicodeDecodeError:
        return None
