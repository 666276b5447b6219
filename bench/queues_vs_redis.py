"""Narad's queues against the same work done with Redis streams, side by side.

    python bench/queues_vs_redis.py [--quick] [--pin] [--cpu] [--only NAME ...]

- end-to-end (`e2e`): 8 producer and 8 consumer processes; with `--queues N` the
  messages are spread over N queues (N streams and groups for Redis), each consumer
  serving its share of them in turn. Narad: Q.PUSH, then
  Q.POP COUNT 10 and one Q.ACK per batch. Redis 7.0: XADD, then XREADGROUP COUNT 10
  and one XACK per batch. Messages per second from the first push until the last
  ack, under `fsync always` vs `appendfsync always` and `everysec` vs `everysec`.
- latency (`latency`): one producer at a fixed rate, one blocked consumer (Q.POP
  BLOCK / XREADGROUP BLOCK); push-to-pop p50 and p99.
- produce (`produce`): `redis-benchmark -c 50 -P 1`, Narad `Q.PUSH bench <100 bytes>`
  against Redis `XADD bench * payload <100 bytes>`, fsync always on both.
- memory (`inflight`): RssAnon growth of the Narad process per in-flight message
  with 1M messages popped and not acked; Redis's used_memory growth per pending
  entry for the same (XREADGROUP without XACK), for scale.

--cpu adds, for end to end, the CPU time per message of the server process and of the
16 client processes, user and system apart (/proc/<pid>/stat and getrusage around the
run): on 2 shared cores the ratio follows the sum of these.

--pin puts each server on the first CPU and the client processes on the others (see
bench/server_vs_redis.py). Figures print as a Markdown table for bench/README.md.
Needs redis-server on the PATH.
"""

from __future__ import annotations

import argparse
import multiprocessing
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import redis

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.server_vs_redis import (  # noqa: E402
    VALUE,
    DurableRedis,
    benchmark,
    cpu_s,
    pin,
    rss_anon_kb,
)
from tests.servers import NaradProcess, ServerProcess  # noqa: E402

PAYLOAD = b"p" * 100
QUEUE, GROUP = "bench", "g"
# End to end over this many queues (--queues): message i goes to queue i % QUEUES,
# and consumer j serves queues j, j + 8, ... in turn.
QUEUES = 1


def _queue_names() -> list[str]:
    return [QUEUE] if QUEUES == 1 else [f"{QUEUE}:{i}" for i in range(QUEUES)]


# -- end to end ------------------------------------------------------------------------


def _produce(port: int, is_narad: bool, count: int) -> None:
    client = redis.Redis(port=port)
    names = _queue_names()
    for i in range(count):
        queue = names[i % len(names)]
        if is_narad:
            client.execute_command("Q.PUSH", queue, PAYLOAD)
        else:
            client.execute_command("XADD", queue, "*", "payload", PAYLOAD)


def _consume(port: int, is_narad: bool, name: str, total: int, done: multiprocessing.Value) -> None:  # type: ignore[type-arg]
    client = redis.Redis(port=port, protocol=3 if is_narad else 2)
    mine = _queue_names()[int(name[1:]) :: 8] or _queue_names()[:1]
    block = 100 if len(mine) == 1 else None  # one queue: wait on it; several: go round
    idle = 0
    while done.value < total:
        queue = mine[idle % len(mine)] if len(mine) > 1 else mine[0]
        if is_narad:
            more = ("BLOCK", block) if block else ()
            messages = client.execute_command("Q.POP", queue, "COUNT", 10, *more)
            if messages:
                client.execute_command("Q.ACK", queue, *[m[b"receipt"] for m in messages])
                n = len(messages)
            else:
                n = 0
        else:
            more = ("BLOCK", block) if block else ()
            reply = client.execute_command(
                "XREADGROUP", "GROUP", GROUP, name, "COUNT", 10, *more, "STREAMS", queue, ">",
            )  # fmt: skip
            entries = reply[0][1] if reply else []
            if entries:
                client.execute_command("XACK", queue, GROUP, *[e[0] for e in entries])
            n = len(entries)
        if n:
            with done.get_lock():
                done.value += n
        else:
            idle += 1
            if len(mine) > 1 and idle % len(mine) == 0:
                time.sleep(0.001)  # a round over every queue found nothing


def end_to_end(server: ServerProcess, is_narad: bool, per_producer: int) -> tuple[float, ...]:
    """Messages per second, then the CPU microseconds per message of the server (user,
    system) and of the client processes (user, system)."""
    assert server.proc is not None
    client = server.client()
    for queue in _queue_names():
        if is_narad:
            client.execute_command("Q.CREATE", queue)
        else:
            client.xgroup_create(queue, GROUP, "$", mkstream=True)
    total = 8 * per_producer
    done = multiprocessing.Value("q", 0)
    consumers = [
        multiprocessing.Process(target=_consume, args=(server.port, is_narad, f"c{i}", total, done))
        for i in range(8)
    ]
    producers = [
        multiprocessing.Process(target=_produce, args=(server.port, is_narad, per_producer))
        for _ in range(8)
    ]
    for p in consumers:
        p.start()
    time.sleep(0.5)  # consumers connected and waiting
    server_before = cpu_s(server.proc.pid)
    clients_before = resource.getrusage(resource.RUSAGE_CHILDREN)  # joined children only
    start = time.monotonic()
    for p in producers:
        p.start()
    for p in producers + consumers:
        p.join()
    rate = total / (time.monotonic() - start)
    server_after = cpu_s(server.proc.pid)
    clients_after = resource.getrusage(resource.RUSAGE_CHILDREN)
    us = 1e6 / total
    return (
        rate,
        (server_after[0] - server_before[0]) * us,
        (server_after[1] - server_before[1]) * us,
        (clients_after.ru_utime - clients_before.ru_utime) * us,
        (clients_after.ru_stime - clients_before.ru_stime) * us,
    )


# -- latency ---------------------------------------------------------------------------


def _paced_producer(port: int, is_narad: bool, rate: int, count: int) -> None:
    client = redis.Redis(port=port)
    interval = 1 / rate
    next_at = time.monotonic()
    for _ in range(count):
        stamp = b"%d" % time.monotonic_ns()
        if is_narad:
            client.execute_command("Q.PUSH", QUEUE, stamp)
        else:
            client.execute_command("XADD", QUEUE, "*", "payload", stamp)
        next_at += interval
        time.sleep(max(0.0, next_at - time.monotonic()))


def latency(server: ServerProcess, is_narad: bool, rate: int, count: int) -> tuple[float, float]:
    client = server.client(protocol=3 if is_narad else 2)
    if is_narad:
        client.execute_command("Q.CREATE", QUEUE)
    else:
        client.xgroup_create(QUEUE, GROUP, "$", mkstream=True)
    producer = multiprocessing.Process(
        target=_paced_producer, args=(server.port, is_narad, rate, count)
    )
    producer.start()
    samples: list[float] = []
    while len(samples) < count:
        if is_narad:
            messages = client.execute_command("Q.POP", QUEUE, "COUNT", 100, "BLOCK", 1000)
            now = time.monotonic_ns()
            stamps = [m[b"payload"] for m in messages or []]
            if messages:
                client.execute_command("Q.ACK", QUEUE, *[m[b"receipt"] for m in messages])
        else:
            reply = client.execute_command(
                "XREADGROUP", "GROUP", GROUP, "c", "COUNT", 100, "BLOCK", 1000,
                "STREAMS", QUEUE, ">",
            )  # fmt: skip
            now = time.monotonic_ns()
            entries = reply[0][1] if reply else []
            stamps = [e[1][b"payload"] for e in entries]
            if entries:
                client.execute_command("XACK", QUEUE, GROUP, *[e[0] for e in entries])
        samples.extend((now - int(s)) / 1e6 for s in stamps)
    producer.join()
    samples.sort()
    return statistics.median(samples), samples[int(len(samples) * 0.99)]


# -- produce --------------------------------------------------------------------------


def produce(server: ServerProcess, is_narad: bool, requests: int) -> float:
    if is_narad:
        server.client().execute_command("Q.CREATE", QUEUE)
        command = ("Q.PUSH", QUEUE, VALUE)
    else:
        command = ("XADD", QUEUE, "*", "payload", VALUE)
    return benchmark(server.port, 50, 1, requests, *command)["rps"]


# -- memory per in-flight message --------------------------------------------------------


def inflight_memory(server: ServerProcess, is_narad: bool, count: int) -> float:
    client = server.client(protocol=3 if is_narad else 2)
    batch = [PAYLOAD] * 1000
    if is_narad:
        client.execute_command("Q.CREATE", QUEUE, "VISIBILITY", 3_600_000)
        for _ in range(count // 1000):
            client.execute_command("Q.PUSH", QUEUE, *batch)
    else:
        client.xgroup_create(QUEUE, GROUP, "$", mkstream=True)
        pipe = client.pipeline(transaction=False)
        for _ in range(count // 1000):
            for payload in batch:
                pipe.xadd(QUEUE, {"payload": payload})
            pipe.execute()

    def measure() -> int:
        if is_narad:
            assert server.proc is not None
            return rss_anon_kb(server.proc.pid) * 1024
        return int(client.info("memory")["used_memory"])

    before = measure()
    popped = 0
    while popped < count:
        if is_narad:
            popped += len(client.execute_command("Q.POP", QUEUE, "COUNT", 10_000))
        else:
            reply = client.execute_command(
                "XREADGROUP", "GROUP", GROUP, "c", "COUNT", 10_000, "STREAMS", QUEUE, ">"
            )
            popped += len(reply[0][1])
    if is_narad:
        stats = client.execute_command("Q.STATS", QUEUE)
        assert stats[b"in_flight"] == count, stats
    return (measure() - before) / count


# -- running ----------------------------------------------------------------------------------


def pair(folder: Path, narad_fsync: str, redis_fsync: str) -> tuple[NaradProcess, DurableRedis]:
    return (
        NaradProcess(folder / "narad", ["--fsync", narad_fsync]),
        DurableRedis(folder / "redis", ["--appendfsync", redis_fsync]),
    )


def run(figure: str, fn, *args: object) -> tuple[Any, ...]:  # type: ignore[no-untyped-def]
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for server in pair(Path(tmp), *figure.split("/")):
            server.start()
            try:
                results.append(fn(server, isinstance(server, NaradProcess), *args))
            finally:
                server.stop()
    return tuple(results)


CPU_PARTS = ("server user CPU", "server system CPU", "clients' user CPU", "clients' system CPU")


def row(figure: str, mine: float, theirs: float, target: str, unit: str = "") -> None:
    print(
        f"| {figure} | {mine:,.2f}{unit} | {theirs:,.2f}{unit} | {mine / theirs:.2f} | {target} |",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--pin", action="store_true", help="servers and clients on separate CPUs")
    parser.add_argument("--cpu", action="store_true", help="end to end: CPU per message too")
    parser.add_argument("--only", nargs="*", default=None)
    parser.add_argument("--queues", type=int, default=1, help="end to end over this many queues")
    args = parser.parse_args()
    global QUEUES
    QUEUES = args.queues
    if args.pin:
        pin()
    wanted = set(args.only or ["e2e", "latency", "produce", "inflight"])
    per_producer = 1_000 if args.quick else 5_000
    print("| figure | Narad | Redis | Narad / Redis | target |")
    print("|---|---|---|---|---|")
    if "e2e" in wanted:
        for fsync in ("always", "everysec"):
            mine, theirs = run(f"{fsync}/{fsync}", end_to_end, per_producer)
            over = f", {QUEUES} queues" if QUEUES > 1 else ""
            row(f"end to end, 8+8 processes{over}, fsync {fsync} (msg/s)", mine[0], theirs[0],
                ">= 1.0")
            if args.cpu:
                for i, part in enumerate(CPU_PARTS, start=1):
                    row(f"- {fsync}: {part} per message (us)", mine[i], theirs[i], "")
    if "latency" in wanted:
        count = 500 if args.quick else 2_000
        (p50, p99), (r50, r99) = run("always/always", latency, 500, count)
        row("push-to-pop p50 at 500 msg/s, fsync always (ms)", p50, r50, "")
        row("push-to-pop p99 at 500 msg/s, fsync always (ms)", p99, r99, "")
    if "produce" in wanted:
        mine, theirs = run("always/always", produce, 50_000 if args.quick else 200_000)
        row("produce, 50 clients P1, Q.PUSH vs XADD, fsync always (msg/s)", mine, theirs, "")
    if "inflight" in wanted:
        count = 100_000 if args.quick else 1_000_000
        mine, theirs = run("no/no", inflight_memory, count)
        row(f"memory per in-flight message, {count:,} in flight (B)", mine, theirs, "<= ~200 B")


if __name__ == "__main__":
    main()
