"""Celery on Narad with real `celery worker` processes (narad/celery.py).

500 tasks: most instant, some running 2.5 s against a 1 s visibility (kept by the
lease renewer), some with a countdown (held by the server, not the worker). One
worker is killed with -9 while it runs long tasks; the other finishes everything.
Every task ends, and no task ends twice outside the killed worker."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from narad.client import connect
from tests.client.runs import Runs
from tests.servers import ROOT, NaradProcess, wait_until

pytest.importorskip("celery")

LONG = range(0, 10)
DELAYED = range(10, 30)
TASKS = 500
COUNTDOWN_S = 2.0


@contextmanager
def celery_worker(narad: NaradProcess, name: str, log: Path) -> Iterator[subprocess.Popen[bytes]]:
    env = {**os.environ, "PYTHONPATH": str(ROOT),
           "NARAD_BROKER": f"narad://127.0.0.1:{narad.port}",
           "NARAD_RECORD": f"redis://127.0.0.1:{narad.port}"}
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "tests.client.celery_app", "worker",
             "-P", "threads", "-c", "8", "-n", f"{name}@%h", "--without-mingle",
             "--without-gossip", "-l", "warning"],
            cwd=ROOT, env=env, stdout=out, stderr=out, start_new_session=True,
        )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def test_celery_workers_survive_a_kill(
    narad: NaradProcess, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("NARAD_BROKER", f"narad://127.0.0.1:{narad.port}")
    from tests.client.celery_app import app, job

    app.conf.broker_url = f"narad://127.0.0.1:{narad.port}"
    record = narad.client()
    with celery_worker(narad, "first", tmp_path / "first.log") as first:
        for n in LONG:
            job.delay(n, 2.5)
        sent_at = time.time()
        for n in DELAYED:
            job.apply_async((n,), countdown=COUNTDOWN_S)
        # The server holds the countdown tasks: the worker has not received them.
        with connect(f"narad://127.0.0.1:{narad.port}") as client:
            assert client.queue("celery").stats().delayed >= len(DELAYED) - 2
        wait_until(lambda: len(Runs.read(record).starts) >= 5, timeout=30)
        with celery_worker(narad, "second", tmp_path / "second.log") as second:
            for n in range(30, TASKS):
                job.delay(n)
            running = Runs.read(record)
            assert any(first.pid in g and not running.ends[n]
                       for n, g in running.starts.items())
            os.killpg(first.pid, signal.SIGKILL)
            first.wait()
            wait_until(lambda: len(Runs.read(record).ends) == TASKS, timeout=60)
            time.sleep(1.5)  # anything run twice would show in this time
            assert second.poll() is None
    runs = Runs.read(record)
    runs.check(TASKS, killed=first.pid)
    for n in DELAYED:
        assert runs.ended_at[n] >= sent_at + COUNTDOWN_S - 0.05
    for n in LONG:  # the long tasks outlived the visibility and were not handed out again
        assert len([g for g in runs.starts[n] if g != first.pid]) <= 1
    with connect(f"narad://127.0.0.1:{narad.port}") as client:
        stats = client.queue("celery").stats()
    assert (stats.visible, stats.in_flight, stats.delayed) == (0, 0, 0)
