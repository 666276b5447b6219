"""Dramatiq on Narad with real `dramatiq` worker processes (narad/dramatiq.py): the
checks of tests/client/test_celery.py, and a failing actor dead-lettered to the
queue's `.XQ` after its retries."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from contextlib import AbstractContextManager
from pathlib import Path

import pytest

from narad.client import connect
from narad.dramatiq import NaradBroker
from tests.client.runs import Runs, worker_process
from tests.servers import ROOT, NaradProcess, wait_until

pytest.importorskip("dramatiq")

LONG = range(0, 10)
DELAYED = range(10, 30)
QUICK_FIRST = range(30, 60)
TASKS = 500
DELAY_MS = 2000
FAILING = 10_000  # a task number outside the checked range


def dramatiq_worker(
    narad: NaradProcess, log: Path,
) -> AbstractContextManager[subprocess.Popen[bytes]]:
    """A `dramatiq` worker process of tests/client/dramatiq_app.py on `narad`."""
    return worker_process(
        [sys.executable, "-m", "dramatiq", "tests.client.dramatiq_app", "-p", "1", "-t", "8"],
        narad, log, 30,
    )


def test_dramatiq_workers_survive_a_kill(
    narad: NaradProcess, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("NARAD_BROKER", f"narad://127.0.0.1:{narad.port}")
    from tests.client.dramatiq_app import job

    # Messages go through a broker of this test's server (the app's module-level
    # broker may have been made for another).
    broker = NaradBroker(url=f"narad://127.0.0.1:{narad.port}")
    record = narad.client()
    with dramatiq_worker(narad, tmp_path / "first.log") as first:
        for n in QUICK_FIRST:  # acked by the first worker before it dies
            broker.enqueue(job.message(n))
        wait_until(lambda: len(Runs.read(record).ends) == len(QUICK_FIRST), timeout=30)
        for n in LONG:
            broker.enqueue(job.message(n, 2.5))
        sent_at = time.time()
        for n in DELAYED:
            broker.enqueue(job.message(n), delay=DELAY_MS)
        broker.enqueue(job.message(FAILING, fail=True))
        with connect(f"narad://127.0.0.1:{narad.port}") as client:
            assert client.queue("default").stats().delayed >= len(DELAYED) - 2
            # the failing task's try and retry, then its dead letter
            wait_until(lambda: client.queue("default.XQ").stats().visible == 1, timeout=30)
        wait_until(lambda: sum(bool(Runs.read(record).starts[n]) for n in LONG) >= 3,
                   timeout=30)
        with dramatiq_worker(narad, tmp_path / "second.log") as second:
            running = Runs.read(record)
            assert any(not running.ends[n] for n in LONG if running.starts[n])
            os.killpg(first.pid, signal.SIGKILL)  # mid-task, the second one starting
            first.wait()
            for n in range(QUICK_FIRST.stop, TASKS):
                broker.enqueue(job.message(n))
            wait_until(lambda: len(Runs.read(record).ends) == TASKS, timeout=60)
            time.sleep(1.5)  # anything run twice would show in this time
            assert second.poll() is None
    runs = Runs.read(record)
    runs.check(TASKS, killed=first.pid)
    for n in DELAYED:
        assert runs.ended_at[n] >= sent_at + DELAY_MS / 1000 - 0.05
    assert len(runs.starts[FAILING]) == 2  # the first try and one retry
    with connect(f"narad://127.0.0.1:{narad.port}") as client:
        stats = client.queue("default").stats()
        [dead] = client.queue("default.XQ").pop()
    assert (stats.visible, stats.in_flight, stats.delayed) == (0, 0, 0)
    broker.close()
    assert f'"args":[{FAILING}]'.encode() in dead.payload.replace(b" ", b"")


def test_dramatiq_through_a_failover(tmp_path: Path) -> None:
    """A NaradBroker on `narad+sentinel://`: a worker and a sender ride through
    kill -9 of the leader; every message sent is stored once and runs."""
    from tests.client.dramatiq_app import job
    from tests.sentinel.cluster import NAME, deployment

    with deployment(tmp_path) as found:
        urls = ",".join(f"{s.host}:{s.port}" for s in found.sentinels)
        url = f"narad+sentinel://{urls}/{NAME}"
        broker = NaradBroker(url=url)
        leader = found.node_at(found.leader_address())
        env = {**os.environ, "PYTHONPATH": str(ROOT), "NARAD_BROKER": url}
        env.pop("NARAD_RECORD", None)
        with open(tmp_path / "worker.log", "ab") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "dramatiq", "tests.client.dramatiq_app", "-p", "1",
                 "-t", "4"],
                cwd=ROOT, env=env, stdout=out, stderr=out, start_new_session=True,
            )
        try:
            queue = broker.client.queue("default")
            for n in range(50):
                broker.enqueue(job.message(n))
            wait_until(lambda: queue.stats().acked >= 50, timeout=30)
            leader.kill()
            for n in range(50, 100):
                broker.enqueue(job.message(n))
            wait_until(lambda: queue.stats().acked >= 100, timeout=60)
            stats = queue.stats()
            assert (stats.pushed, stats.visible, stats.in_flight) == (100, 0, 0)
            assert proc.poll() is None
        finally:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            broker.close()
