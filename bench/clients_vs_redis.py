"""Celery, Dramatiq and narad.client's Consumer on Narad, side by side with Redis.

    python bench/clients_vs_redis.py [--quick] [--only celery dramatiq consumer failover]

- `celery`: Celery tasks per second end to end: one `celery worker` process, prefork
  pool, concurrency 8, a no-op task, Celery's defaults otherwise (early acks,
  prefetch multiplier 4). Narad `fsync always` with the `narad://` transport
  (narad/celery.py) against redis-server 7 `appendfsync always` with kombu's stock
  Redis transport, in the same run. The worker is started and warmed up first; then
  one process sends N tasks (`delay`) and the clock runs from the first send until
  the broker holds nothing undelivered or unacked.
- `dramatiq`: the same with one `dramatiq` process (`-p 1 -t 8`): NaradBroker
  against dramatiq's stock RedisBroker; until the queue is empty and nothing is
  unacked (acks come after the actor ran).
- `consumer`: messages per second of narad.client's Consumer (no-op handler, Q.POP
  COUNT 10, one Q.ACK per message, concurrency 1 and 8) against a hand-written loop
  of Q.POP COUNT 10 and one Q.ACK per batch (the fastest way to drain), and one with
  a Q.ACK per message, on one Narad server (fsync always). No Redis here: the
  figure is the helper's cost over the raw commands.
- `failover`: a Producer through `narad+sentinel://` (3 nodes, 3 sentinels,
  down-after 1000 ms) under kill -9 of the leader: the time from the kill and from
  the first sentinel's `+switch-master` to the first push answered after it.

Prints a Markdown table for bench/README.md. Needs redis-server on the PATH.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.server_vs_redis import DurableRedis  # noqa: E402
from narad.client import Consumer, Job, connect  # noqa: E402
from tests.servers import NaradProcess, ServerProcess, wait_until  # noqa: E402

APP_SOURCE = '''
import os
BROKER = os.environ["BENCH_BROKER"]
if BROKER.startswith("narad"):
    import narad.celery  # noqa: F401
from celery import Celery
app = Celery("bench", broker=BROKER)
app.conf.update(worker_hijack_root_logger=False, broker_connection_retry_on_startup=True)

@app.task(name="noop")
def noop():
    pass
'''

DRAMATIQ_SOURCE = '''
import os
import dramatiq
BROKER = os.environ["BENCH_BROKER"]
if BROKER.startswith("narad"):
    from narad.dramatiq import NaradBroker
    broker = NaradBroker(url=BROKER)
else:
    from dramatiq.brokers.redis import RedisBroker
    broker = RedisBroker(url=BROKER)
dramatiq.set_broker(broker)

@dramatiq.actor
def noop():
    pass
'''


def pair(folder: Path) -> list[ServerProcess]:
    return [NaradProcess(folder / "narad", ["--fsync", "always"]),
            DurableRedis(folder / "redis", ["--appendfsync", "always"])]


def broker_url(server: ServerProcess) -> str:
    scheme = "narad" if isinstance(server, NaradProcess) else "redis"
    return f"{scheme}://127.0.0.1:{server.port}/0"


def start_worker(argv: list[str], folder: Path, url: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": f"{ROOT}:{folder}", "BENCH_BROKER": url}
    log = open(folder / "worker.log", "ab")  # noqa: SIM115 - handed to the child
    proc = subprocess.Popen(argv, cwd=folder, env=env, stdout=log, stderr=log,
                            start_new_session=True)
    log.close()
    return proc


def stop_worker(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def drained(server: ServerProcess, queue: str, redis_keys: Callable[[redis.Redis], int]) -> bool:
    """Nothing left to deliver or to ack in `queue`."""
    client = server.client()
    if isinstance(server, NaradProcess):
        with connect(f"narad://127.0.0.1:{server.port}") as narad:
            stats = narad.queue(queue).stats()
        return stats.visible + stats.in_flight + stats.delayed == 0
    return redis_keys(client) == 0


def timed_run(server: ServerProcess, folder: Path, worker: list[str], send: Callable[[int], None],
              queue: str, redis_keys: Callable[[redis.Redis], int], tasks: int) -> float:
    proc = start_worker(worker, folder, broker_url(server))
    try:
        send(20)  # warm-up: the worker is up and consuming
        wait_until(lambda: drained(server, queue, redis_keys), timeout=120, interval=0.05)
        started = time.perf_counter()
        send(tasks)
        wait_until(lambda: drained(server, queue, redis_keys), timeout=600, interval=0.01)
        return tasks / (time.perf_counter() - started)
    finally:
        stop_worker(proc)


def celery_rate(server: ServerProcess, folder: Path, tasks: int) -> float:
    (folder / "bench_celery_app.py").write_text(APP_SOURCE)
    os.environ["BENCH_BROKER"] = broker_url(server)
    sys.path.insert(0, str(folder))
    import importlib

    import bench_celery_app  # type: ignore[import-not-found]

    module = importlib.reload(bench_celery_app)

    def send(n: int) -> None:
        with module.app.producer_or_acquire() as producer:
            for _ in range(n):
                module.noop.apply_async(producer=producer)

    def redis_left(client: redis.Redis) -> int:
        return int(client.llen("celery")) + int(client.hlen("unacked"))

    worker = [sys.executable, "-m", "celery", "-A", "bench_celery_app", "worker", "-c", "8",
              "-l", "warning", "--without-mingle", "--without-gossip"]
    try:
        return timed_run(server, folder, worker, send, "celery", redis_left, tasks)
    finally:
        module.app.close()
        sys.path.remove(str(folder))


def dramatiq_rate(server: ServerProcess, folder: Path, tasks: int) -> float:
    url = broker_url(server)
    if isinstance(server, NaradProcess):
        from narad.dramatiq import NaradBroker

        broker: Any = NaradBroker(url=url)
    else:
        from dramatiq.brokers.redis import RedisBroker

        broker = RedisBroker(url=url)
    from dramatiq.message import Message

    def send(n: int) -> None:
        broker.declare_queue("default")
        for _ in range(n):
            broker.enqueue(Message(queue_name="default", actor_name="noop", args=(),
                                   kwargs={}, options={}))

    def redis_left(client: redis.Redis) -> int:
        left = int(client.llen("dramatiq:default"))
        for key in client.scan_iter("dramatiq:__acks__.*"):
            left += int(client.scard(key))
        return left

    (folder / "bench_dramatiq_app.py").write_text(DRAMATIQ_SOURCE)
    worker = [sys.executable, "-m", "dramatiq", "bench_dramatiq_app", "-p", "1", "-t", "8"]
    try:
        return timed_run(server, folder, worker, send, "default", redis_left, tasks)
    finally:
        broker.close()


def side_by_side(measure: Callable[[ServerProcess, Path, int], float], tasks: int,
                 rounds: int) -> tuple[float, float]:
    narad_rates, redis_rates = [], []
    for _ in range(rounds):
        with tempfile.TemporaryDirectory() as tmp:
            for server, rates in zip(pair(Path(tmp)), (narad_rates, redis_rates), strict=True):
                server.start()
                try:
                    folder = Path(tmp) / f"work-{server.port}"
                    folder.mkdir()
                    rates.append(measure(server, folder, tasks))
                finally:
                    server.stop()
    return statistics.median(narad_rates), statistics.median(redis_rates)


# -- the consumer helper --------------------------------------------------------------


def consumer_rates(count: int) -> dict[str, float]:
    rates: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        server = NaradProcess(Path(tmp) / "narad", ["--fsync", "always"]).start()
        try:
            client = connect(f"narad://127.0.0.1:{server.port}")
            for label, run in (
                ("hand-written Q.POP COUNT 10 + one Q.ACK per batch", _raw_batch_ack),
                ("hand-written Q.POP COUNT 10 + Q.ACK per message", _raw_each_ack),
                ("Consumer, concurrency 1", lambda c, q, n: _helper(c, q, n, 1)),
                ("Consumer, concurrency 8", lambda c, q, n: _helper(c, q, n, 8)),
            ):
                name = f"bench-{len(rates)}"
                client.queue(name).create()
                for start in range(0, count, 500):
                    client.queue(name).push_many([b"p" * 100] * min(500, count - start))
                began = time.perf_counter()
                run(client, name, count)
                rates[label] = count / (time.perf_counter() - began)
            client.close()
        finally:
            server.stop()
    return rates


def _raw_batch_ack(client: Any, name: str, count: int) -> None:
    r = client.redis
    done = 0
    while done < count:
        got = r.execute_command("Q.POP", name, "COUNT", 10)
        receipts = [m[b"receipt"] for m in got]
        r.execute_command("Q.ACK", name, *receipts)
        done += len(receipts)


def _raw_each_ack(client: Any, name: str, count: int) -> None:
    r = client.redis
    done = 0
    while done < count:
        for message in r.execute_command("Q.POP", name, "COUNT", 10):
            r.execute_command("Q.ACK", name, message[b"receipt"])
            done += 1


def _helper(client: Any, name: str, count: int, concurrency: int) -> None:
    def handle(job: Job) -> None:
        pass

    consumer = Consumer(client.queue(name), handle, concurrency=concurrency, batch=10).start()
    wait_until(lambda: consumer.snapshot()["acked"] >= count, timeout=600, interval=0.005)
    consumer.stop()
    consumer.wait(30)


# -- failover ----------------------------------------------------------------------------


def failover_times() -> tuple[float, float]:
    from tests.sentinel.cluster import NAME, deployment

    with tempfile.TemporaryDirectory() as tmp, deployment(Path(tmp)) as found:
        urls = ",".join(f"{s.host}:{s.port}" for s in found.sentinels)
        client = connect(f"narad+sentinel://{urls}/{NAME}", retry_s=60)
        client.queue("orders").create()
        producer = client.producer("orders")
        answered: list[float] = []
        switched: list[float] = []
        stop = threading.Event()

        def watch(sentinel: ServerProcess) -> None:
            pubsub = sentinel.client(protocol=2).pubsub()
            pubsub.subscribe("+switch-master")
            while not stop.is_set():
                message = pubsub.get_message(timeout=0.01)
                if message and message["type"] == "message":
                    switched.append(time.monotonic())
                    return

        def produce() -> None:
            i = 0
            while not stop.is_set():
                producer.push(f"m{i}")
                answered.append(time.monotonic())
                i += 1

        threads = [threading.Thread(target=watch, args=(s,)) for s in found.sentinels]
        threads.append(threading.Thread(target=produce))
        for t in threads:
            t.start()
        time.sleep(2)
        killed_at = time.monotonic()
        found.node_at(found.leader_address()).kill()
        wait_until(lambda: switched and any(t > min(switched) + 0.5 for t in answered),
                   timeout=60)
        stop.set()
        for t in threads:
            t.join(5)
        # The push under way at the kill may be answered just after it; the producer
        # resumes with the answer that ends the longest silence after the kill.
        after = [killed_at, *(t for t in answered if t > killed_at)]
        gaps = [(b - a, b) for a, b in zip(after, after[1:], strict=False)]
        resumed = max(gaps)[1]
        client.close()
        return resumed - killed_at, resumed - min(switched)


def row(figure: str, mine: float, theirs: float | None = None, unit: str = "") -> None:
    if theirs is None:
        print(f"| {figure} | {mine:,.2f}{unit} | | |", flush=True)
    else:
        print(f"| {figure} | {mine:,.0f}{unit} | {theirs:,.0f}{unit} | {mine / theirs:.2f} |",
              flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--only", nargs="*", default=None)
    args = parser.parse_args()
    wanted = set(args.only or ["celery", "dramatiq", "consumer", "failover"])
    tasks = 1_000 if args.quick else 5_000
    print("| figure | Narad | Redis | Narad / Redis |")
    print("|---|---|---|---|")
    if "celery" in wanted:
        mine, theirs = side_by_side(celery_rate, tasks, args.rounds)
        row(f"Celery, 1 worker -c 8 prefork, no-op, {tasks:,} tasks (tasks/s)", mine, theirs)
    if "dramatiq" in wanted:
        mine, theirs = side_by_side(dramatiq_rate, tasks, args.rounds)
        row(f"Dramatiq, -p 1 -t 8, no-op, {tasks:,} tasks (tasks/s)", mine, theirs)
    if "consumer" in wanted:
        rates = consumer_rates(tasks * 2)
        raw = rates["hand-written Q.POP COUNT 10 + one Q.ACK per batch"]
        for label, rate in rates.items():
            print(f"| {label} (msg/s) | {rate:,.0f} | | {rate / raw:.2f} of the batch-ack loop |",
                  flush=True)
    if "failover" in wanted:
        from_kill, from_switch = failover_times()
        row("failover: kill -9 of the leader to the first push answered (s)", from_kill)
        row("failover: first +switch-master to the first push answered (s)", from_switch)


if __name__ == "__main__":
    main()
