"""What a /metrics scrape costs a node with many queues: its time, its size, and the
worst PING a bystander client waits meanwhile; beside it, redis-server's
`INFO everything` with as many streams (the nearest thing Redis has: one line per
key in INFO keyspace is per database, so its cost does not grow with keys) and
Narad's own `INFO queues` (one line per queue).

    python bench/metrics_scrape.py [--queues N] [--scrapes N]

Each queue gets 3 messages, one of them delivered, so that every family has figures.
Scrapes run back to back (`--scrapes`, default 10) after one that fills the caches;
the figures are the median and worst wall time of them, and the median of the
server's own CPU time per scrape (/proc/<pid>/stat, once the server is idle: what
the scrape holds the event loop for, whatever else runs on the machine): per-queue
series first, then `metrics-per-queue no` (totals only), then the same scrapes each right after one
message was pushed to every queue (nothing can come from the cache). A bystander
client PINGs every 10 ms throughout; its worst round trip is shown (in the
'every queue changed' row it includes the pushes). Prints a Markdown table for
bench/README.md.
"""

from __future__ import annotations

import argparse
import os
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


def cpu_ms(server: object) -> float:
    """The server process's user + system CPU time so far, in ms."""
    pid = server.proc.pid  # type: ignore[attr-defined]
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * 1000 / os.sysconf("SC_CLK_TCK")


def settle(server: object, timeout_s: float = 120) -> None:
    """Wait until the server is idle (under 5% of a CPU over half a second): after
    creating 10,000 queues its checkpoint and write-behind run a while, and their
    CPU time would count against the scrapes."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        before = cpu_ms(server)
        time.sleep(0.5)
        if cpu_ms(server) - before < 25:
            return


def timed(
    name: str, server: object, run: object, scrapes: int, prepare: object = None
) -> dict[str, object]:
    """`run` `scrapes` times (after one that fills the caches), each after
    `prepare` if given; wall time and the server's CPU time of each run alone."""
    run()  # type: ignore[operator]
    settle(server)
    times: list[float] = []
    cpu: list[float] = []
    with Bystander(server) as bystander:  # type: ignore[arg-type]
        time.sleep(0.05)
        for _ in range(scrapes):
            if prepare is not None:
                prepare()  # type: ignore[operator]
                settle(server)
            before = cpu_ms(server)
            ms, size = run()  # type: ignore[operator]
            cpu.append(cpu_ms(server) - before)
            times.append(ms)
        time.sleep(0.05)
    return {
        "name": name, "median_ms": statistics.median(times), "worst_ms": max(times),
        "cpu_ms": statistics.median(cpu), "bytes": size, "ping_worst_ms": bystander.worst_ms,
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

            rows.append(timed(
                "/metrics, every queue changed", node, lambda: scrape(url), args.scrapes,
                prepare=lambda: touch_queues(client, args.queues),
            ))
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
    print(f"{args.queues} queues, {args.scrapes} scrapes each ('every queue changed' pushes "
          "one message to every queue before each scrape)\n")
    print("| what | median ms | worst ms | server CPU ms (median) | bytes | "
          "bystander PING worst ms |")
    print("|---|---:|---:|---:|---:|---:|")
    for row in rows:
        print(f"| {row['name']} | {row['median_ms']:.1f} | {row['worst_ms']:.1f} | "
              f"{row['cpu_ms']:.0f} | {row['bytes']:,} | {row['ping_worst_ms']:.1f} |")


if __name__ == "__main__":
    main()
