"""Group commit: many concurrent appenders share writes and fsyncs."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import pytest

from narad.log import FsyncPolicy, GroupCommit, Log, LogConfig, LogFailed


async def appender(gc: GroupCommit, log: Log, n: int, seen: list[int]) -> None:
    for _ in range(n):
        offset = log.append(b"x" * 100, 1, 0)
        await gc.flush(log)
        # The contract under `always`: when flush returns, the record is durable.
        assert log.durable_end > offset
        seen.append(offset)


def test_always_commits_many_appenders_per_fsync(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "l")
    gc = GroupCommit(FsyncPolicy.ALWAYS)
    seen: list[int] = []

    async def main() -> None:
        await asyncio.gather(*(appender(gc, log, 20, seen) for _ in range(64)))

    asyncio.run(main())
    assert sorted(seen) == list(range(64 * 20))
    assert gc.stats.records == 64 * 20
    # 64 appenders each waiting for their record: one fsync carries all of them.
    assert gc.stats.fsyncs == gc.stats.commits == 20
    log.close()


def test_commit_carries_every_noted_log(tmp_path: Path) -> None:
    logs = [Log.open(tmp_path / str(i)) for i in range(3)]
    gc = GroupCommit(FsyncPolicy.ALWAYS)
    for log in logs:
        log.append(b"a", 1, 0)
        gc.note(log)
    assert gc.commit() == logs
    assert [log.durable_end for log in logs] == [1, 1, 1]
    assert gc.stats.fsyncs == 3 and gc.stats.commits == 1
    for log in logs:
        log.close()


def test_no_policy_writes_without_fsync(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "l", LogConfig(fsync=FsyncPolicy.NO))
    gc = GroupCommit(FsyncPolicy.NO)
    log.append(b"a", 1, 0)
    gc.note(log)
    gc.commit()
    assert log.written_end == 1 and log.durable_end == 0 and gc.stats.fsyncs == 0
    log.close()


def test_everysec_fsyncs_in_the_background(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "l", LogConfig(fsync=FsyncPolicy.EVERYSEC))
    gc = GroupCommit(FsyncPolicy.EVERYSEC)
    try:
        log.append(b"a", 1, 0)
        gc.note(log)
        gc.commit()
        assert log.written_end == 1
        deadline = time.monotonic() + 5
        while log.durable_end < 1 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert log.durable_end == 1 and gc.stats.fsyncs >= 1
    finally:
        gc.close()
        log.close()


def test_failed_log_wakes_its_waiters_with_the_error(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "l")
    gc = GroupCommit(FsyncPolicy.ALWAYS)

    async def main() -> None:
        log.append(b"a", 1, 0)
        os.close(log.active.fd)
        results = await asyncio.gather(gc.flush(log), gc.flush(log), return_exceptions=True)
        assert all(isinstance(r, LogFailed) for r in results)

    asyncio.run(main())
    with pytest.raises(LogFailed):
        log.append(b"b", 2, 0)
    log.active.fd = -1
    log.close()


@pytest.mark.parametrize("count", [2, 3, 6])
def test_always_fsyncs_every_log_of_a_commit(tmp_path: Path, count: int) -> None:
    """The logs of one commit are fsynced concurrently (the caller and helper
    threads, more logs than helpers included): all durable when commit returns."""
    logs = [Log.open(tmp_path / f"l{i}") for i in range(count)]
    gc = GroupCommit(FsyncPolicy.ALWAYS)
    try:
        for round_ in range(1, 4):
            for log in logs:
                log.append(b"x" * 50, round_, 0)
                gc.note(log)
            assert gc.commit() == logs
            assert [log.durable_end for log in logs] == [round_] * count
        assert gc.stats.fsyncs == 3 * count
    finally:
        gc.close()
        for log in logs:
            log.close()


def test_always_fsyncs_the_other_logs_when_one_fails(tmp_path: Path) -> None:
    logs = [Log.open(tmp_path / f"l{i}") for i in range(3)]
    gc = GroupCommit(FsyncPolicy.ALWAYS)
    try:
        for log in logs:
            log.append(b"x", 1, 0)
            gc.note(log)
        written, failed = gc.write_noted()
        assert failed is None and written == logs
        os.close(logs[1].active.fd)
        assert isinstance(gc.sync_logs(written), LogFailed)
        assert logs[0].durable_end == logs[2].durable_end == 1
        assert logs[1].durable_end == 0
        assert gc.sync_logs([]) is None
    finally:
        gc.close()
        logs[1].active.fd = -1
        for log in logs:
            log.close()
