"""Storage benchmarks for the segment log (issue: the floor).

    python bench/storage.py [--quick] [--dir DIR]

Prints one table: the disk's own fsync rate, append throughput per fsync policy and
concurrency (as a ratio to that fsync rate and to `fsync no`), records per fsync,
sequential read throughput, open time of a 1 GiB log in 16 segments, and the memory
a log holds per million records. Figures go to bench/README.md.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import shutil
import tempfile
import time
from pathlib import Path

from narad.log import FsyncPolicy, Log, LogConfig
from narad.log.format import SPEEDUPS
from narad.log.journal import KIND_DATA, Journal, log_key


def rss_anon_bytes() -> int:
    """Private anonymous memory of this process (RssAnon in /proc/self/status)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no RssAnon in /proc/self/status")


def fsyncs_per_second(folder: Path, seconds: float) -> float:
    """The disk's own limit: a 4 KiB write + fsync loop on this filesystem."""
    path = folder / "fsync-probe"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    block = b"\0" * 4096
    n = 0
    start = time.perf_counter()
    try:
        while time.perf_counter() - start < seconds:
            os.write(fd, block)
            os.fsync(fd)
            n += 1
    finally:
        os.close(fd)
        path.unlink()
    return n / (time.perf_counter() - start)


def append_rate(folder: Path, policy: FsyncPolicy, appenders: int, size: int, seconds: float):
    """Records/s and records per fsync with `appenders` asyncio tasks, each appending
    one record and waiting for its group commit (a journal commit), over and over."""
    shutil.rmtree(folder, ignore_errors=True)
    log = Log.open(folder / "data", LogConfig(fsync=policy))
    committer = Journal(folder, policy)
    committer.register(log_key(1, KIND_DATA), log)
    payload = b"x" * size
    done = 0

    async def appender(deadline: float) -> None:
        nonlocal done
        while time.perf_counter() < deadline:
            log.append(payload, 1, 0)
            await committer.flush(log)
            done += 1

    async def main() -> float:
        start = time.perf_counter()
        await asyncio.gather(*(appender(start + seconds) for _ in range(appenders)))
        return time.perf_counter() - start

    elapsed = asyncio.run(main())
    committer.close()
    fsyncs = committer.stats.fsyncs
    log.close()
    return done / elapsed, (done / fsyncs if fsyncs else float("nan"))


def build_log(folder: Path, total_bytes: int, segments: int, payload_size: int) -> int:
    shutil.rmtree(folder, ignore_errors=True)
    config = LogConfig(segment_bytes=total_bytes // segments, fsync=FsyncPolicy.NO)
    log = Log.open(folder, config)
    payload = b"y" * payload_size
    count = 0
    while log.size_bytes < total_bytes:
        for _ in range(1000):
            log.append(payload, count + 1, 0)
            count += 1
        log.write()
    log.close()
    return count


def read_rate(folder: Path) -> tuple[float, float]:
    log = Log.open(folder, LogConfig(fsync=FsyncPolicy.NO))
    start = time.perf_counter()
    offset = count = size = 0
    while True:
        batch = log.read(offset, count_max=10_000)
        if not batch:
            break
        count += len(batch)
        size += sum(r.size for r in batch)
        offset = batch[-1].offset + 1
    elapsed = time.perf_counter() - start
    log.close()
    return count / elapsed, size / elapsed


def open_time(folder: Path) -> float:
    os.system("sync")
    start = time.perf_counter()
    log = Log.open(folder, LogConfig(fsync=FsyncPolicy.NO))
    elapsed = time.perf_counter() - start
    log.close()
    return elapsed


def memory_per_million(folder: Path, records: int) -> float:
    shutil.rmtree(folder, ignore_errors=True)
    gc.collect()
    before = rss_anon_bytes()
    log = Log.open(folder, LogConfig(fsync=FsyncPolicy.NO))
    payload = b"z" * 100
    for i in range(records):
        log.append(payload, i + 1, 0)
        if i % 1000 == 999:
            log.write()
    log.write()
    gc.collect()
    grown = rss_anon_bytes() - before
    log.close()
    return grown * 1_000_000 / records


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", default=None, help="scratch folder (default: a temp dir)")
    parser.add_argument("--quick", action="store_true", help="short runs, smaller data")
    args = parser.parse_args()
    root = Path(args.dir or tempfile.mkdtemp(prefix="narad-bench-"))
    root.mkdir(parents=True, exist_ok=True)
    seconds = 0.5 if args.quick else 2.0
    print(f"speedups: {'cython' if SPEEDUPS else 'pure python'}; scratch: {root}")
    # First, while the process's heap is fresh, so that reused free memory hides nothing.
    records = 200_000 if args.quick else 1_000_000
    per_million = memory_per_million(root / "mem", records)
    print(f"memory held per million 100 B records: {per_million / 1e6:.2f} MB")
    disk = fsyncs_per_second(root, seconds)
    print(f"disk: {disk:,.0f} fsyncs/s (4 KiB write + fsync)")
    print()
    print("| payload | appenders | policy | records/s | x disk fsyncs/s | x fsync no | per fsync |")
    print("|---|---|---|---|---|---|---|")
    for size in (100, 1024):
        for appenders in (1, 64):
            rates = {}
            for policy in (FsyncPolicy.NO, FsyncPolicy.EVERYSEC, FsyncPolicy.ALWAYS):
                rate, per_fsync = append_rate(root / "append", policy, appenders, size, seconds)
                rates[policy] = rate
                print(
                    f"| {size} B | {appenders} | {policy.value} | {rate:,.0f} | {rate / disk:.2f} "
                    f"| {rate / rates[FsyncPolicy.NO]:.2f} | {per_fsync:.1f} |"
                )
    print()
    gib = (1 << 28) if args.quick else (1 << 30)
    count = build_log(root / "big", gib, 16, 1024)
    records_s, bytes_s = read_rate(root / "big")
    print(f"sequential read: {records_s:,.0f} records/s, {bytes_s / 1e6:,.0f} MB/s")
    print(f"  ({count:,} records of 1 KiB)")
    print(f"open {gib >> 20} MiB in 16 segments: {open_time(root / 'big') * 1000:.0f} ms")
    if not args.dir:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
