"""COMMAND DOCS and COMMAND INFO against redis-server 7.0, and `narad dump` of a data dir.

redis-cli sends COMMAND DOCS once when it starts (its hints and HELP come from it);
this measures what that reply costs each server, and how fast `narad dump` reads
a data dir of many entries (stdout to /dev/null, as a pipe would take it).

    python bench/command_docs.py [--calls 200] [--entries 100000]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import redis

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.servers import ROOT, NaradProcess, RedisProcess


def per_call_ms(port: int, args: list[str], calls: int) -> tuple[float, int]:
    """The median milliseconds of `args` over `calls` calls, and the reply's size."""
    conn = redis.Connection(port=port)
    conn.connect()
    times = []
    size = 0
    for _ in range(calls):
        began = time.perf_counter()
        conn.send_command(*args)
        reply = conn.read_response()
        times.append((time.perf_counter() - began) * 1000)
        size = len(repr(reply))
    conn.disconnect()
    return statistics.median(times), size


def dump_seconds(folder: Path, entries: int) -> tuple[float, int]:
    server = NaradProcess(folder).start()
    try:
        client = server.client()
        pipe = client.pipeline(transaction=False)
        for i in range(entries):
            pipe.xadd("s", {"n": str(i), "f": "value"})
            if i % 1000 == 999:
                pipe.execute()
        pipe.execute()
    finally:
        server.stop()
    began = time.perf_counter()
    with open("/dev/null", "w") as sink:
        subprocess.run(
            [sys.executable, "-m", "narad", "dump", str(folder / "data")],
            stdout=sink, check=True, env={"PYTHONPATH": str(ROOT)},
        )
    return time.perf_counter() - began, entries


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--entries", type=int, default=100_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        narad = NaradProcess(Path(tmp) / "narad").start()
        real = RedisProcess(Path(tmp) / "redis").start()
        try:
            conn = redis.Connection(port=narad.port)
            conn.connect()
            conn.send_command("COMMAND", "LIST")
            names = [n.decode() for n in conn.read_response()]
            conn.disconnect()
            shared = [n for n in names if "|" not in n and not n.startswith("q.")]
            cases = {
                "COMMAND DOCS (all)": ["COMMAND", "DOCS"],
                "COMMAND DOCS xadd": ["COMMAND", "DOCS", "xadd"],
                "COMMAND INFO (shared)": ["COMMAND", "INFO", *shared],
            }
            for label, command in cases.items():
                mine, mine_size = per_call_ms(narad.port, command, args.calls)
                theirs, theirs_size = per_call_ms(real.port, command, args.calls)
                print(f"{label:24} narad {mine:7.3f} ms ({mine_size} B)  redis {theirs:7.3f} ms"
                      f" ({theirs_size} B)  ratio {mine / theirs:5.1f}")
        finally:
            narad.stop()
            real.stop()
        seconds, entries = dump_seconds(Path(tmp) / "dump", args.entries)
        rate = entries / seconds
        print(f"narad dump of {entries} entries: {seconds:.2f} s, {rate:,.0f} entries/s")


if __name__ == "__main__":
    main()
