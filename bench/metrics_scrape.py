"""What a /metrics scrape costs a node with many queues: its time, its size, and the
worst PING a bystander client waits meanwhile; beside it, redis-server's
`INFO everything` with as many streams (the nearest thing Redis has: one line per
key in INFO keyspace is per database, so its cost does not grow with keys) and
Narad's own `INFO queues` (one line per queue).

    python bench/metrics_scrape.py [--queues N] [--scrapes N]

Each queue gets 3 messages, one of them delivered, so that every family has figures.
Scrapes run back to back (`--scrapes`, default 10) after one that fills the caches;
the figures are the median and worst of them, per-queue series first, then
`metrics-per-queue no` (totals only), then the same scrapes after every queue
changed (nothing can come from the cache). Prints a Markdown table for
bench/README.md.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import redis  # noqa: E402

from tests.bystander import Bystander  # noqa: E402
from tests.servers import NaradProcess, RedisProcess, free_port  # noqa: E402


def fill_queues(client: redis.Redis, queues: int) -> None:
    pipe = client.pipeline(transaction=False)
    for i in range(queues):
        name = f"queue-{i:05d}"
        pipe.execute_command("Q.CREATE", name)
        pipe.execute_command("Q.PUSH", name, "a", "b", "c")
        pipe.execute_command("Q.POP", name)
        if len(pipe) >= 3000:
            pipe.execute()
    pipe.execute()


def touch_queues(client: redis.Redis, queues: int) -> None:
    pipe = client.pipeline(transaction=False)
    for i in range(queues):
        pipe.execute_command("Q.PUSH", f"queue-{i:05d}", "d")
        if len(pipe) >= 3000:
            pipe.execute()
    pipe.execute()


def scrape(url: str) -> tuple[float, int]:
    began = time.perf_counter()
    with urllib.request.urlopen(url, timeout=120) as response:
        body = response.read()
    return (time.perf_counter() - began) * 1000, len(body)


def timed(name: str, server: object, run: object, scrapes: int) -> dict[str, object]:
    run()  # type: ignore[operator]  # fills the caches
    times: list[float] = []
    with Bystander(server) as bystander:  # type: ignore[arg-type]
        time.sleep(0.05)
        for _ in range(scrapes):
            ms, size = run()  # type: ignore[operator]
            times.append(ms)
        time.sleep(0.05)
    return {
        "name": name, "median_ms": statistics.median(times), "worst_ms": max(times),
        "bytes": size, "ping_worst_ms": bystander.worst_ms,
    }


def info(client: redis.Redis, section: str) -> tuple[float, int]:
    began = time.perf_counter()
    text = client.execute_command("INFO", section)
    size = len(text) if isinstance(text, bytes) else len(str(text))
    return (time.perf_counter() - began) * 1000, size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queues", type=int, default=10_000)
    parser.add_argument("--scrapes", type=int, default=10)
    args = parser.parse_args()
    rows: list[dict[str, object]] = []
    with tempfile.TemporaryDirectory() as tmp:
        metrics_port = free_port()
        node = NaradProcess(Path(tmp) / "narad", ["--metrics-port", str(metrics_port)])
        node.start()
        try:
            client = node.client()
            fill_queues(client, args.queues)
            url = f"http://127.0.0.1:{metrics_port}/metrics"
            rows.append(timed("/metrics, per queue", node, lambda: scrape(url), args.scrapes))
            client.config_set("metrics-per-queue", "no")
            rows.append(timed("/metrics, totals only", node, lambda: scrape(url), args.scrapes))
            client.config_set("metrics-per-queue", "yes")

            def changed() -> tuple[float, int]:
                touch_queues(client, args.queues)
                return scrape(url)

            rows.append(timed("/metrics, every queue changed", node, changed, args.scrapes))
            raw = node.client(decode_responses=False)
            rows.append(timed("Narad INFO queues", node, lambda: info(raw, "queues"), args.scrapes))
            rows.append(
                timed("Narad INFO everything", node, lambda: info(raw, "everything"), args.scrapes)
            )
        finally:
            node.stop()
        redis_server = RedisProcess(Path(tmp) / "redis")
        redis_server.start()
        try:
            client = redis_server.client(decode_responses=False)
            pipe = client.pipeline(transaction=False)
            for i in range(args.queues):
                pipe.xadd(f"queue-{i:05d}", {"payload": "a"})
            pipe.execute()
            rows.append(timed(
                "redis-server INFO everything", redis_server,
                lambda: info(client, "everything"), args.scrapes,
            ))
        finally:
            redis_server.stop()
    print(f"{args.queues} queues, {args.scrapes} scrapes each (the second run of "
          "'every queue changed' pushes one message to every queue before each scrape)\n")
    print("| what | median ms | worst ms | bytes | bystander PING worst ms |")
    print("|---|---:|---:|---:|---:|")
    for row in rows:
        print(f"| {row['name']} | {row['median_ms']:.1f} | {row['worst_ms']:.1f} | "
              f"{row['bytes']:,} | {row['ping_worst_ms']:.1f} |")


if __name__ == "__main__":
    main()
