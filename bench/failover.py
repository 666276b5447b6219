"""Failover, side by side: Narad's sentinel against Redis Sentinel 7, in one run.

    python bench/failover.py [--runs N] [--only kill stop switchover]

Each setup: 3 data nodes (a leader, 2 replicas) and 3 sentinels, quorum 2,
`down-after-milliseconds 1000`, `failover-timeout 10000`, on loopback. Narad's data
nodes run with `min-replicas-to-ack 1` (every acknowledged write on a majority);
Redis's with its defaults (asynchronous replication, as Redis Sentinel is deployed).

The load: 4 producers through redis-py's `Sentinel(...).master_for(...)`, unchanged,
each XADD-ing `k <n>` to one stream and, after any error, asking again (redis-py
finds the leader again through the sentinels). An XADD is acknowledged when its reply
came. After each fault, once the sentinels agree on a new leader and every node
follows it, the acknowledged IDs missing from the new leader's stream are lost.

Faults:
- `kill`: kill -9 of the leader after 2 s of load. The client-visible failover
  time is from the kill to the first acknowledged XADD after it.
- `stop`: SIGSTOP of the leader for 4 s after 2 s of load, then SIGCONT (the
  clients' socket timeout is 10 s, so a paused leader's clients wait for it).
- `switchover`: SENTINEL FAILOVER after 2 s of load; the longest time without an
  acknowledged XADD around it.

Prints a Markdown table for bench/README.md. Needs redis-server on the PATH.
"""

from __future__ import annotations

import argparse
import itertools
import os
import signal
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry
from redis.sentinel import Sentinel

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.replication.cluster import follow, wait_synced  # noqa: E402
from tests.sentinel.cluster import SentinelProcess, settings  # noqa: E402
from tests.servers import NaradProcess, RedisProcess, ServerProcess, wait_until  # noqa: E402

NAME = "mymaster"
PRODUCERS = 4
LOAD_BEFORE_S = 2.0
STOP_S = 4.0


class RedisSentinelProcess(SentinelProcess):
    def command(self) -> list[str]:
        return ["redis-server", str(self.conf), "--sentinel", "--port", str(self.port)]


class Writes:
    """Producers XADD-ing through redis-py's Sentinel client; what was acknowledged."""

    def __init__(self, sentinels: list[ServerProcess], socket_timeout: float) -> None:
        self.sentinel = Sentinel([(s.host, s.port) for s in sentinels], socket_timeout=1.0)
        self.socket_timeout = socket_timeout
        self.stop = threading.Event()
        self.lock = threading.Lock()
        # (monotonic time the XADD was sent, time its reply came, ID)
        self.acked: list[tuple[float, float, bytes]] = []
        self.threads = [threading.Thread(target=self._work, args=(i,), daemon=True)
                        for i in range(PRODUCERS)]

    def __enter__(self) -> Writes:
        self.started = time.monotonic()
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=30)

    def _work(self, i: int) -> None:
        client = self.sentinel.master_for(
            NAME, socket_timeout=self.socket_timeout, socket_connect_timeout=1.0,
            retry=Retry(NoBackoff(), 0),
        )
        n = 0
        while not self.stop.is_set():
            sent = time.monotonic()
            try:
                mid = client.xadd("s", {"k": f"{i}-{n}"})
            except (redis.ConnectionError, redis.TimeoutError, redis.ResponseError):
                time.sleep(0.01)
                continue
            with self.lock:
                self.acked.append((sent, time.monotonic(), mid))
            n += 1

    def first_after(self, moment: float) -> float | None:
        """When the first XADD sent after `moment` was acknowledged."""
        with self.lock:
            later = [acked for sent, acked, _ in self.acked if sent > moment]
        return min(later) if later else None

    def longest_gap(self, start: float, end: float) -> float:
        with self.lock:
            times = sorted(acked for _, acked, _ in self.acked if start <= acked <= end)
        return max((b - a for a, b in itertools.pairwise(times)), default=0.0)


@contextmanager
def setup(kind: str, root: Path) -> Iterator[tuple[list[ServerProcess], list[ServerProcess]]]:
    with ExitStack() as stack:
        if kind == "narad":
            extra = ["--min-replicas-to-ack", "1", "--min-replicas-timeout", "2000"]
            nodes: list[ServerProcess] = [NaradProcess(root / f"n{i}", extra) for i in range(3)]
        else:
            # The initial sync at once (Redis waits 5 s by default for more replicas).
            extra = ["--repl-diskless-sync-delay", "0"]
            nodes = [RedisProcess(root / f"n{i}", extra) for i in range(3)]
        for node in nodes:
            node.start()
            stack.callback(node.kill)
        for node in nodes[1:]:
            follow(node, nodes[0])  # type: ignore[arg-type]
        wait_until(lambda: all(_follows(n, nodes[0]) for n in nodes[1:]), timeout=30)
        wait_synced(nodes[0], nodes[1:])  # type: ignore[arg-type]
        cls = SentinelProcess if kind == "narad" else RedisSentinelProcess
        sentinels: list[ServerProcess] = [
            cls(root / f"s{i}", nodes[0], settings(1000, 10_000))  # type: ignore[arg-type]
            for i in range(3)
        ]
        for sentinel in sentinels:
            sentinel.start()
            stack.callback(sentinel.kill)
        wait_until(lambda: all(_knows_all(s) for s in sentinels), timeout=30)
        yield nodes, sentinels


def _knows_all(sentinel: ServerProcess) -> bool:
    try:
        state = sentinel.client(protocol=2).sentinel_master(NAME)
    except redis.RedisError:
        return False
    return bool(state["num-slaves"] == 2 and state["num-other-sentinels"] == 2)


def _leader(sentinels: list[ServerProcess], nodes: list[ServerProcess],
            not_this: ServerProcess | None) -> ServerProcess:
    def agreed() -> ServerProcess | None:
        seen = set()
        for s in sentinels:
            try:
                _host, port = s.client(protocol=2).sentinel_get_master_addr_by_name(NAME)
            except (redis.RedisError, TypeError):
                return None
            seen.add(int(port))
        if len(seen) != 1:
            return None
        port = seen.pop()
        node = next(n for n in nodes if n.port == port)
        return None if node is not_this else node

    found: ServerProcess = wait_until(agreed, timeout=60, interval=0.05)
    return found


def _lost(writes: Writes, leader: ServerProcess, nodes: list[ServerProcess]) -> int:
    others = [n for n in nodes if n is not leader and n.proc and n.proc.poll() is None]
    wait_until(lambda: all(_follows(n, leader) for n in others), timeout=60, interval=0.1)
    held = {mid for mid, _ in leader.client(protocol=2).xrange("s")}
    with writes.lock:
        lost = [(sent - writes.started, mid) for sent, _, mid in writes.acked if mid not in held]
    if lost:
        print(f"lost: {len(lost)}, sent from {lost[0][0]:.3f} s to {lost[-1][0]:.3f} s after "
              "the load began", file=sys.stderr)
    return len(lost)


def _follows(node: ServerProcess, leader: ServerProcess) -> bool:
    try:
        info = node.client(protocol=2).info("replication")
    except redis.RedisError:
        return False
    return bool(info.get("master_port") == leader.port and info["master_link_status"] == "up")


def run_fault(kind: str, fault: str) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix=f"narad-failover-{kind}-") as tmp, \
            setup(kind, Path(tmp)) as (nodes, sentinels):
        old = nodes[0]
        timeout = 10.0 if fault == "stop" else 2.0
        with Writes(sentinels, timeout) as writes:
            time.sleep(LOAD_BEFORE_S)
            at = time.monotonic()
            assert old.proc is not None
            if fault == "kill":
                old.kill()
            elif fault == "stop":
                os.kill(old.proc.pid, signal.SIGSTOP)
            else:
                sentinels[0].client(protocol=2).execute_command("SENTINEL", "FAILOVER", NAME)
            new = _leader(sentinels, nodes, old)
            if fault == "stop":
                time.sleep(max(0.0, at + STOP_S - time.monotonic()))
                os.kill(old.proc.pid, signal.SIGCONT)
            wait_until(lambda: writes.first_after(time.monotonic() - 0.001) is not None
                       and writes.first_after(at) is not None, timeout=60)
            time.sleep(2.0)
        first = writes.first_after(at)
        result = {
            "acked": len(writes.acked),
            "lost": _lost(writes, new, nodes),
            "failover_s": (first - at) if first else float("nan"),
            "gap_s": writes.longest_gap(at - 1.0, at + 30.0),
        }
        return result


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--only", nargs="+", default=["kill", "stop", "switchover"])
    args = parser.parse_args()
    rows = []
    for fault in args.only:
        for kind in ("narad", "redis"):
            results = [run_fault(kind, fault) for _ in range(args.runs)]
            rows.append((fault, kind, results))
            print(f"{fault} {kind}: {results}", file=sys.stderr)
    print("| fault | setup | runs | acked writes (per run) | lost acked writes (per run) "
          "| first ack after the fault, s (median; min-max) | longest gap, s (median) |")
    print("|---|---|---|---|---|---|---|")
    for fault, kind, results in rows:
        acked = ", ".join(f"{r['acked']:,}" for r in results)
        lost = ", ".join(f"{r['lost']:,}" for r in results)
        times = [r["failover_s"] for r in results]
        gaps = [r["gap_s"] for r in results]
        print(f"| {fault} | {kind} | {len(results)} | {acked} | {lost} | "
              f"{statistics.median(times):.2f}; {min(times):.2f}-{max(times):.2f} | "
              f"{statistics.median(gaps):.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
