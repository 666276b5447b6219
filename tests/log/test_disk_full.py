"""A log's write error state (narad/log/log.py): a write that finds the disk full, or an
fsync that finds no descriptor to spare, fails nothing for good. The records stay in
the buffer, where reads find them, the file keeps no torn bytes, and the next write
after room is freed puts them in the file (issue 28, classes 7 and 3).

The errors are the kernel's: a small tmpfs really fills up (tests/small_disk.py), and
the process's open-files limit is really exhausted."""

from __future__ import annotations

import os
import resource
from pathlib import Path

import pytest

from narad.log import format
from narad.log.log import Log, LogFailed
from tests.small_disk import fill, small_disk

RECORD_BYTES = 1000


def append(log: Log, count: int) -> None:
    for _ in range(count):
        n = log.next_offset
        log.append(b"%08d" % n + b"r" * (RECORD_BYTES - 8), n + 1, 0, format.FLAG_ENTRY)


def test_a_write_that_finds_the_disk_full_keeps_its_records_until_room_is_back(
    tmp_path: Path,
) -> None:
    with small_disk(tmp_path / "disk", "4m") as disk:
        log = Log.open(disk / "log")
        append(log, 100)
        log.write()
        log.sync()
        written = log.active.size
        fill(disk / "filler")
        append(log, 2000)  # more than any room the segment reserved ahead
        with pytest.raises(LogFailed, match="No space left on device"):  # a WriteError
            log.write()
        assert log.failure is None and log.write_error is not None  # not failed for good
        assert os.path.getsize(log.active.path) == written  # no torn bytes stay

        # Reads find every record, those the file lacks from the buffer.
        assert [r.offset for r in log.read(0)] == list(range(2100))
        assert [r.offset for r in log.read(2095, count_max=10)] == list(range(2095, 2100))
        newest = log.read_reverse(2099, count_max=3)
        assert [r.offset for r in newest] == [2099, 2098, 2097]
        assert [r.offset for r in log.read_reverse(101, count_max=3)] == [101, 100, 99]
        assert log.offset_of_id(1501, 0) == 1500
        assert log.offset_of_id(50, 0) == 49
        assert log.offset_of_id(99999, 0) == 2100
        append(log, 1)  # it still takes appends: they wait in the buffer too

        (disk / "filler").unlink()
        assert log.write() > 0
        assert log.write_error is None
        assert os.path.getsize(log.active.path) >= log.active.size
        log.sync()
        log.close()
        log = Log.open(disk / "log")
        records = log.read(0)
        assert [r.offset for r in records] == list(range(2101))
        assert all(r.payload.startswith(b"%08d" % r.offset) for r in records)
        log.close()


def test_an_fsync_with_no_descriptor_to_spare_fails_nothing(tmp_path: Path) -> None:
    """A checkpoint's fsync opens the file by its path (narad/log/checkpointer.py):
    EMFILE there is for later, not the end of the log."""
    log = Log.open(tmp_path / "log")
    append(log, 10)
    log.write()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    held: list[int] = []
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(soft, 256), hard))
        while True:
            try:
                held.append(os.open(os.devnull, os.O_RDONLY))
            except OSError:
                break
        with pytest.raises(LogFailed, match="Too many open files"):  # a WriteError
            log.sync(own_fd=True)
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert log.failure is None
    assert log.sync(own_fd=True)
    assert log.durable_end == 10
    append(log, 1)
    assert log.write() > 0
    log.close()
