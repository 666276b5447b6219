"""Recovery after kill -9: how long a start takes with a given amount of journal
since the last checkpoint, and how much memory the logs hold for records not yet in
their files.

    python bench/recovery.py [--journal-mb N] [--streams K]

Fills a Narad server (fsync everysec, so the fill is quick; recovery does not depend
on the policy) with XADDs spread over K streams (redis-benchmark -r) until about N MiB
of journal lie past the last checkpoint (checkpoints held off by a large
checkpoint-bytes), kill -9s it, and times the restart until PING answers and until
the last entry is readable. Then the same load with the default checkpoint interval. Prints
a Markdown table for bench/README.md. Needs redis-benchmark on the PATH.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.servers import NaradProcess  # noqa: E402

VALUE = "v" * 100


def fill(
    server: NaradProcess, journal_mb: int, streams: int, rounds: int = 0
) -> tuple[int, dict[str, str]]:
    """XADD until the journal past the checkpoint holds `journal_mb` MiB, or for
    `rounds` rounds of 200,000 when given; the rounds taken and INFO narad."""
    client = server.client()
    done = 0
    while True:
        subprocess.run(
            ["redis-benchmark", "-p", str(server.port), "-c", "50", "-P", "16", "-n", "200000",
             "-r", str(streams), "-q", "XADD", "s:__rand_int__", "*", "f", VALUE],
            check=True, capture_output=True,
        )
        done += 1
        info = client.info("narad")
        if (done >= rounds) if rounds else int(info["journal_bytes"]) >= journal_mb * 2**20:
            return done, {k: str(v) for k, v in info.items()}


def restart_s(server: NaradProcess) -> tuple[float, int]:
    server.kill()
    start = time.monotonic()
    server.start(poll_s=0.005)
    took = time.monotonic() - start
    info = server.client().info("narad")
    return took, int(info["journal_position"])


def figure(
    journal_mb: int, streams: int, settings: list[str], rounds: int = 0
) -> tuple[float, int, dict[str, str]]:
    with tempfile.TemporaryDirectory() as tmp:
        server = NaradProcess(Path(tmp), ["--fsync", "everysec", *settings]).start()
        try:
            rounds, info = fill(server, journal_mb, streams, rounds)
            took, _ = restart_s(server)
            return took, rounds, info
        finally:
            server.stop(timeout=600)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--journal-mb", type=int, default=1024)
    parser.add_argument("--streams", type=int, default=100)
    args = parser.parse_args()
    print("| case | journal since checkpoint (MiB) | restart (s) | behind the logs (MiB) |")
    print("|---|---|---|---|")
    held = ["--checkpoint-bytes", "4000gb", "--checkpoint-seconds", "86400"]
    rounds = 0  # the second case writes as much as the first
    for label, settings in (
        ("checkpoints held off", held),
        ("default checkpoint interval, as much written", []),
    ):
        took, rounds, info = figure(args.journal_mb, args.streams, settings, rounds)
        since = (int(info["journal_bytes"])) / 2**20
        behind = int(info["journal_behind_bytes"]) / 2**20
        print(f"| {label}, {args.streams} streams | {since:,.0f} | {took:.2f} | {behind:.1f} |",
              flush=True)


if __name__ == "__main__":
    main()
