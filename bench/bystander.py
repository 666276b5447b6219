"""What one greedy client costs everyone else: a bystander's PING latency while another
client does something large, Narad against redis-server side by side.

    python bench/bystander.py [--only NAME ...] [--entries N] [--xadd-mb N] [--fsync P]

A bystander connection sends PING every 10 ms and records each round trip; the figure
is the worst and the 99th percentile of those, and the server's peak RSS, while a
greedy client runs one of:

- `pipelined-xrange`: 2,000 pipelined `XRANGE s - + COUNT 100` of 1 KB entries
  (about 200 MB of replies), never read;
- `big-xadd`: three connections each send one XADD of a `--xadd-mb` MB value at once;
- `unread-xrange`: three connections each send `XRANGE s - +` over `--entries` 1 KB
  entries and never read the reply.

Redis runs with appendonly yes and the same fsync policy (`--fsync`, default
everysec). Needs redis-server on the PATH. Prints a Markdown table for
bench/README.md.
"""

from __future__ import annotations

import argparse
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from narad.resp.encoder import encode_request  # noqa: E402
from tests.bystander import Bystander, fill, greedy  # noqa: E402
from tests.servers import NaradProcess, RedisProcess, ServerProcess  # noqa: E402

ENTRY = b"x" * 1000


def pipelined_xrange(server: ServerProcess, args: argparse.Namespace) -> list[socket.socket]:
    fill(server, 1000, ENTRY)
    conn = greedy(server)
    conn.sendall(encode_request([b"XRANGE", b"s", b"-", b"+", b"COUNT", b"100"]) * 2000)
    return [conn]


def big_xadd(server: ServerProcess, args: argparse.Namespace) -> list[socket.socket]:
    value = b"v" * (args.xadd_mb << 20)
    conns = [greedy(server) for _ in range(3)]
    threads = [
        threading.Thread(
            target=c.sendall, args=(encode_request([b"XADD", b"k%d" % i, b"*", b"f", value]),)
        )
        for i, c in enumerate(conns)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return conns


def unread_xrange(server: ServerProcess, args: argparse.Namespace) -> list[socket.socket]:
    fill(server, args.entries, ENTRY)
    conns = [greedy(server) for _ in range(3)]
    for c in conns:
        c.sendall(encode_request([b"XRANGE", b"s", b"-", b"+"]))
    return conns


SCENARIOS: dict[str, Callable[[ServerProcess, argparse.Namespace], list[socket.socket]]] = {
    "pipelined-xrange": pipelined_xrange,
    "big-xadd": big_xadd,
    "unread-xrange": unread_xrange,
}


def measure(
    server: ServerProcess, scenario: str, args: argparse.Namespace
) -> tuple[float, float, int]:
    server.start()
    conns: list[socket.socket] = []
    try:
        with Bystander(server) as bystander:
            time.sleep(0.2)
            conns = SCENARIOS[scenario](server, args)
            time.sleep(args.seconds)  # the greedy clients never read
        return bystander.worst_ms, bystander.p99_ms, int(bystander.peak_mb)
    finally:
        for c in conns:
            c.close()
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", default=list(SCENARIOS), choices=list(SCENARIOS))
    parser.add_argument("--entries", type=int, default=150_000)
    parser.add_argument("--xadd-mb", type=int, default=300)
    parser.add_argument("--fsync", default="everysec", choices=("always", "everysec", "no"))
    parser.add_argument("--seconds", type=float, default=5.0, help="watched after the load")
    args = parser.parse_args()
    print(f"fsync {args.fsync}; bystander PING every 10 ms; worst / p99 ms, peak RSS MB\n")
    print("| scenario | Narad worst | Narad p99 | Narad RSS "
          "| Redis worst | Redis p99 | Redis RSS |")
    print("|---|---|---|---|---|---|---|")
    for scenario in args.only:
        with tempfile.TemporaryDirectory() as tmp:
            narad = NaradProcess(Path(tmp) / "narad", ["--fsync", args.fsync])
            redis_ = RedisProcess(
                Path(tmp) / "redis",
                ["--appendonly", "yes", "--appendfsync", args.fsync,
                 "--proto-max-bulk-len", "1gb", "--client-query-buffer-limit", "1gb"],
            )
            n = measure(narad, scenario, args)
            r = measure(redis_, scenario, args)
        print(f"| {scenario} | {n[0]:.0f} | {n[1]:.0f} | {n[2]} "
              f"| {r[0]:.0f} | {r[1]:.0f} | {r[2]} |", flush=True)


if __name__ == "__main__":
    main()
