"""kill -9 a writer at random moments; every offset it reported durable survives."""

from __future__ import annotations

import os
import random
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

from narad.log.log import Log, LogConfig
from tests.log.crash_writer import payload

WRITER = Path(__file__).with_name("crash_writer.py")
ROUNDS = 12


def run_and_kill(folder: Path, seed: int, rng: random.Random) -> int:
    """Start the writer, kill -9 it after a random time; the last offset it reported."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])}
    child = subprocess.Popen(
        [sys.executable, str(WRITER), str(folder), str(seed)], stdout=subprocess.PIPE, env=env
    )
    assert child.stdout is not None
    reported = -1
    deadline = time.monotonic() + 10
    kill_after = None
    buf = b""
    while time.monotonic() < deadline:
        ready, _, _ = select.select([child.stdout], [], [], 0.05)
        if ready:
            chunk = os.read(child.stdout.fileno(), 65536)
            buf += chunk
            *lines, buf = buf.split(b"\n")
            for line in lines:
                reported = max(reported, int(line))
            if kill_after is None and reported >= 0:
                kill_after = time.monotonic() + rng.uniform(0.0, 0.4)
        if kill_after is not None and time.monotonic() >= kill_after:
            break
    child.send_signal(signal.SIGKILL)
    # Offsets reported before the kill landed are durable too.
    rest = child.stdout.read()
    child.wait()
    for line in (buf + rest).split(b"\n"):
        if line.strip():
            reported = max(reported, int(line))
    assert reported >= 0, "the writer never reported a durable offset"
    return reported


def test_kill_9_loses_no_durable_record(tmp_path: Path) -> None:
    folder = tmp_path / "log"
    rng = random.Random(20261130)
    highest = -1
    for round_ in range(ROUNDS):
        reported = run_and_kill(folder, round_, rng)
        assert reported >= highest
        highest = reported
        log = Log.open(folder, LogConfig(segment_bytes=64 * 1024))
        try:
            records = log.read(0)
            # Dense from 0, nothing after the last good record, every reported one there.
            assert [r.offset for r in records] == list(range(len(records)))
            assert len(records) - 1 >= reported
            assert log.next_offset == len(records)
            for r in records:
                assert r.payload == payload(r.offset) and r.id_ms == r.offset + 1
            assert log.active.size == log.active.path.stat().st_size
            last = log.read_reverse(10**12, 1)
            assert not last or last[0].position + last[0].size == log.active.size
        finally:
            log.close()
    assert len(list(folder.glob("*.log"))) > 1, "the rounds should have rolled segments"
