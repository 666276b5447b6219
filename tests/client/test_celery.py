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
from contextlib import AbstractContextManager
from pathlib import Path

import pytest

from narad.client import connect
from tests.client.runs import Runs, worker_process
from tests.servers import ROOT, NaradProcess, wait_until

pytest.importorskip("celery")

from celery import Celery

import narad.celery  # noqa: F401 - registers narad:// with kombu

LONG = range(0, 10)
DELAYED = range(10, 30)
QUICK_FIRST = range(30, 60)
TASKS = 500
COUNTDOWN_S = 2.0


def celery_worker(
    narad: NaradProcess, name: str, log: Path,
) -> AbstractContextManager[subprocess.Popen[bytes]]:
    """A `celery worker` process of tests/client/celery_app.py on `narad`."""
    return worker_process(
        [sys.executable, "-m", "celery", "-A", "tests.client.celery_app", "worker",
         "-P", "threads", "-c", "8", "-n", f"{name}@%h", "--without-mingle",
         "--without-gossip", "-l", "warning"],
        narad, log, 20,
    )


def sender(narad: NaradProcess) -> Celery:
    """An app of this test's own that sends tasks by name to the workers' app
    (tests/client/celery_app.py), on this test's server."""
    return Celery("sender", broker=f"narad://127.0.0.1:{narad.port}", set_as_current=False)


def test_celery_workers_survive_a_kill(narad: NaradProcess, tmp_path: Path) -> None:
    app = sender(narad)
    record = narad.client()
    with celery_worker(narad, "first", tmp_path / "first.log") as first:
        for n in QUICK_FIRST:  # acked by the first worker before it dies
            app.send_task("job", (n,))
        wait_until(lambda: len(Runs.read(record).ends) == len(QUICK_FIRST), timeout=30)
        for n in LONG:
            app.send_task("job", (n, 2.5))
        sent_at = time.time()
        for n in DELAYED:
            app.send_task("job", (n,), countdown=COUNTDOWN_S)
        # The server holds the countdown tasks: the worker has not received them.
        with connect(f"narad://127.0.0.1:{narad.port}") as client:
            assert client.queue("celery").stats().delayed >= len(DELAYED) - 2
        wait_until(lambda: sum(bool(Runs.read(record).starts[n]) for n in LONG) >= 3,
                   timeout=30)
        with celery_worker(narad, "second", tmp_path / "second.log") as second:
            running = Runs.read(record)
            assert any(not running.ends[n] for n in LONG if running.starts[n])
            os.killpg(first.pid, signal.SIGKILL)  # mid-task, the second one starting
            first.wait()
            for n in range(QUICK_FIRST.stop, TASKS):
                app.send_task("job", (n,))
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


def test_inspect_control_purge_and_retry(narad: NaradProcess, tmp_path: Path) -> None:
    """Broadcast (inspect ping, control) reaches a worker through the fanout stream
    and its replies come back; purge empties a queue; reply bindings are cleaned; a
    task's retry with a countdown runs again after it."""
    app = sender(narad)
    record = narad.client()
    for n in range(5):
        app.send_task("job", (n,), queue="parked")
    with app.connection_for_write() as conn:
        assert conn.default_channel.queue_purge("parked") == 5
    with connect(f"narad://127.0.0.1:{narad.port}") as client:
        assert client.queue("parked").stats().visible == 0
    with celery_worker(narad, "solo", tmp_path / "solo.log"):
        inspect = app.control.inspect(timeout=5, limit=1)
        replies = wait_until(lambda: inspect.ping(), timeout=30)
        assert list(replies) == [next(iter(replies))] and next(iter(replies)).startswith("solo@")
        assert next(iter(replies.values())) == {"ok": "pong"}
        active = app.control.inspect(timeout=5, limit=1).active_queues()
        assert [q["name"] for q in next(iter(active.values()))] == ["celery"]
        assert app.control.ping(timeout=5, limit=1)
        # A task's retry with a countdown is a delayed push.
        app.send_task("flaky", (9000,))
        wait_until(lambda: Runs.read(record).ends[9000], timeout=30)
        runs = Runs.read(record)
        first, again = runs.started_at[9000]
        assert again - first >= 1.0 - 0.05
    assert record.xlen("_kombu.binding.reply.celery.pidbox") == 0


def test_celery_through_a_failover(tmp_path: Path) -> None:
    """`narad+sentinel://` broker URLs: a worker and a sender ride through kill -9 of
    the leader; every task sent is stored once and runs."""
    from tests.sentinel.cluster import NAME, deployment

    with deployment(tmp_path) as found:
        urls = ",".join(f"{s.host}:{s.port}" for s in found.sentinels)
        broker = f"narad+sentinel://{urls}/{NAME}"
        app = Celery("sender", broker=broker, set_as_current=False)
        leader = found.node_at(found.leader_address())
        env = {**os.environ, "PYTHONPATH": str(ROOT), "NARAD_BROKER": broker}
        env.pop("NARAD_RECORD", None)
        with open(tmp_path / "worker.log", "ab") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "celery", "-A", "tests.client.celery_app", "worker",
                 "-P", "threads", "-c", "4", "--without-mingle", "--without-gossip",
                 "-l", "warning"],
                cwd=ROOT, env=env, stdout=out, stderr=out,
                start_new_session=True,
            )
        try:
            with connect(broker) as client:
                for n in range(50):
                    app.send_task("job", (n,))
                wait_until(lambda: client.queue("celery").stats().acked >= 50, timeout=30)
                leader.kill()
                for n in range(50, 100):
                    app.send_task("job", (n,))
                wait_until(lambda: client.queue("celery").stats().acked >= 100, timeout=60)
                stats = client.queue("celery").stats()
            assert (stats.pushed, stats.visible, stats.in_flight) == (100, 0, 0)
            assert proc.poll() is None
        finally:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
