"""narad.client's Consumer and worker against a real server: acks, nacks with
backoff and dead letters, leases renewed while a handler runs and lost on STALE,
push delivery, and a drain on SIGTERM in a real worker process."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator

import pytest

from narad.client import Client, Consumer, Job, connect
from tests.servers import ROOT, NaradProcess, wait_until


@pytest.fixture
def client(shared_narad: NaradProcess) -> Iterator[Client]:
    made = connect(f"narad://127.0.0.1:{shared_narad.port}")
    yield made
    made.close()


def fresh(client: Client, **settings: int | str) -> str:
    name = f"c-{uuid.uuid4().hex[:8]}"
    client.queue(name).create(**settings)  # type: ignore[arg-type]
    return name


@pytest.mark.parametrize("prefetch", [None, 5], ids=["pull", "push"])
def test_every_message_is_handled_and_acked(client: Client, prefetch: int | None) -> None:
    queue = client.queue(fresh(client))
    client.producer(queue.name).push_many([str(i) for i in range(60)])
    seen: list[bytes] = []
    lock = threading.Lock()

    def handle(job: Job) -> None:
        with lock:
            seen.append(job.payload)

    consumer = Consumer(queue, handle, concurrency=4, batch=10, prefetch=prefetch).start()
    try:
        wait_until(lambda: consumer.snapshot()["acked"] == 60)
    finally:
        consumer.stop()
        assert consumer.wait(20)
    assert sorted(seen) == sorted(str(i).encode() for i in range(60))
    stats = queue.stats()
    assert (stats.acked, stats.visible, stats.in_flight) == (60, 0, 0)
    assert consumer.snapshot()["received"] == 60


def test_failures_are_nacked_then_dead_lettered(client: Client) -> None:
    dead = fresh(client)
    queue = client.queue(fresh(client, maxreceives=3, dlq=dead))
    queue.push("poison")
    queue.push("fine")
    receives: list[int] = []

    def handle(job: Job) -> None:
        if job.payload == b"poison":
            receives.append(job.receives)
            raise RuntimeError("cannot")

    consumer = Consumer(queue, handle, concurrency=2, backoff_base_ms=20,
                        backoff_max_ms=100).start()
    try:
        wait_until(lambda: client.queue(dead).stats().visible == 1)
    finally:
        consumer.stop()
        assert consumer.wait(20)
    counters = consumer.snapshot()
    assert receives == [1, 2, 3]
    assert (counters["nacked"], counters["dead_lettered"], counters["acked"]) == (3, 1, 1)
    [letter] = client.queue(dead).pop()
    assert letter.payload == b"poison" and letter.fields["origin"] == queue.name.encode()


def test_a_long_handler_keeps_its_lease(client: Client) -> None:
    queue = client.queue(fresh(client, visibility_ms=400))
    queue.push("long")
    runs: list[int] = []

    def handle(job: Job) -> None:
        runs.append(job.receives)
        time.sleep(1.5)  # almost four times the visibility

    consumer = Consumer(queue, handle, concurrency=1).start()
    try:
        wait_until(lambda: runs)
        # While it runs, nobody else can take it: its deadline keeps moving.
        other: list[object] = []
        while consumer.snapshot()["acked"] == 0:
            other += queue.pop()
            time.sleep(0.05)
    finally:
        consumer.stop()
        assert consumer.wait(20)
    counters = consumer.snapshot()
    assert other == [] and runs == [1]
    assert counters["touched"] >= 2 and counters["lost"] == 0


def test_a_lost_lease_is_neither_acked_nor_nacked(debug_narad: NaradProcess) -> None:
    client = connect(f"narad://127.0.0.1:{debug_narad.port}")
    client.execute("DEBUG", "CLOCK", "FREEZE")
    try:
        queue = client.queue(fresh(client, visibility_ms=1500))
        queue.push("slow")
        started, finish = threading.Event(), threading.Event()
        lost_seen: list[bool] = []

        def handle(job: Job) -> None:
            started.set()
            finish.wait(20)
            lost_seen.append(job.lost.is_set())

        consumer = Consumer(queue, handle).start()
        assert started.wait(10)
        # The deadline passes on the server, and another consumer takes the message.
        client.execute("DEBUG", "CLOCK", "ADVANCE", 5000)
        [taken] = wait_until(lambda: queue.pop())
        wait_until(lambda: consumer.snapshot()["lost"] == 1)
        finish.set()
        consumer.stop()
        assert consumer.wait(20)
        counters = consumer.snapshot()
        assert lost_seen == [True]
        assert (counters["acked"], counters["nacked"]) == (0, 0)
        assert queue.ack(taken) == 1  # the other delivery still settles it
    finally:
        client.execute("DEBUG", "CLOCK", "RESUME")
        client.close()


def test_sigterm_drains_a_worker_process(client: Client, shared_narad: NaradProcess) -> None:
    name = fresh(client, visibility_ms=60_000)
    client.producer(name).push_many([f"job {i}" for i in range(6)])
    url = f"narad://127.0.0.1:{shared_narad.port}"
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.client.worker_proc", url, name],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )
    try:
        log = client.redis
        wait_until(lambda: log.xlen(f"{name}:log") >= 1)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    counters = json.loads(out)
    entries = [fields for _, fields in client.redis.xrange(f"{name}:log")]
    starts = [f[b"start"] for f in entries if b"start" in f]
    ends = [f[b"end"] for f in entries if b"end" in f]
    assert sorted(starts) == sorted(ends)  # every started job finished before exit
    assert counters["acked"] == len(ends) < 6
    stats = client.queue(name).stats()
    assert stats.acked == len(ends)
    # what it had taken and not started is visible again at once, not in 60 s
    assert stats.in_flight == 0 and stats.visible == 6 - len(ends)
    assert counters["released"] == counters["received"] - counters["acked"]


def test_a_consumer_rides_through_a_restart(narad: NaradProcess) -> None:
    client = connect(f"narad://127.0.0.1:{narad.port}", retry_s=30)
    # A Q.POP or Q.ACK whose reply the kill swallowed leaves its messages in flight
    # until their deadline: 2 s here.
    name = fresh(client, visibility_ms=2000)
    client.producer(name).push_many([str(i) for i in range(20)])
    done: set[bytes] = set()

    def handle(job: Job) -> None:
        done.add(job.payload)
        time.sleep(0.01)

    consumer = Consumer(client.queue(name), handle, concurrency=2, batch=2).start()
    try:
        wait_until(lambda: len(done) >= 4)
        narad.kill()
        narad.start()
        wait_until(lambda: len(done) == 20, timeout=30)
        wait_until(lambda: client.queue(name).stats().acked == 20, timeout=30)
    finally:
        consumer.stop()
        assert consumer.wait(30)
        client.close()
    with connect(f"narad://127.0.0.1:{narad.port}") as check:
        stats = check.queue(name).stats()
    assert (stats.visible, stats.in_flight, stats.acked) == (0, 0, 20)
