"""Narad against redis-server 7.0, side by side in the same run, as ratios.

    python bench/server_vs_redis.py [--quick] [--pin] [--rounds N] [--only NAME ...]

Each figure starts both servers fresh (in temp folders, on free loopback ports) and
drives them with the same load generator: redis-benchmark for XADD, a Python
multi-process consumer for XREADGROUP + XACK. Results print as a Markdown table for
bench/README.md. Needs redis-server, redis-benchmark and redis-cli on the PATH.

With --rounds N the throughput and latency figures are each measured N times, fresh
servers every time, Narad and Redis in turn, and the medians are reported: on this
machine one round's figures move by 10-20 %.

`--only spread` (not in the default set) measures XADD spread over 1 to 10,000
streams (redis-benchmark -r), P16 and P1 under `always`, P16 under `everysec`.

With --tls both servers listen on a TLS port alone (certificates made with openssl in
a temp folder: a CA, a server certificate, a client certificate), clients must
present a certificate (tls-auth-clients yes, both servers' default), and
redis-benchmark runs with --tls; only the XADD figures (xadd, spread, latency) are
measured that way.

`--only cpu` (not in the default set) measures each server's CPU per request: 50
clients send PING at pipeline 1, `fsync no`; user and system time of the server
process (/proc/<pid>/stat) divided by the requests. It is the round trip's own cost
(reading, parsing, dispatching, replying) without a command's work.

`--only acl` (not in the default set) is Narad alone: the cost of the ACL check per
command, as XADD and Q.PUSH throughput (50 clients P16 and P1, fsync everysec) of
the default user against a user restricted to keys `bench:*` (`~bench:* +@all`), on
the same server, the two runs alternating; the ratio's loss is what the check costs.

With --pin each server runs on the first CPU and the load generator on the others:
client and server on different cores, as Redis's benchmark guide recommends for
stable figures. Without it they share the cores, and a figure also measures how much
CPU the clients leave to the server.
"""

from __future__ import annotations

import argparse
import compileall
import csv
import io
import multiprocessing
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import redis

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.servers import NaradProcess, RedisProcess, ServerProcess  # noqa: E402
from tests.tls import (  # noqa: E402
    Certificates,
    TLSClients,
    TLSNaradProcess,
    make_certificates,
)

VALUE = "v" * 100


def pin() -> None:
    """Servers on the first CPU, this process and all it starts on the others."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        sys.exit("--pin needs at least two CPUs")
    ServerProcess.cpus = {cpus[0]}
    os.sched_setaffinity(0, cpus[1:])


# The certificates of a --tls run (None: plain TCP).
TLS: Certificates | None = None


def narad(folder: Path, fsync: str) -> NaradProcess:
    if TLS is not None:
        return TLSNaradProcess(folder / "narad", TLS, ["--fsync", fsync])
    return NaradProcess(folder / "narad", ["--fsync", fsync])


class DurableRedis(RedisProcess):
    """redis-server with its append-only file on (appendfsync comes from `extra`)."""

    def command(self) -> list[str]:
        cmd = super().command()
        cmd[cmd.index("--appendonly") + 1] = "yes"
        return cmd


class TLSRedis(TLSClients, DurableRedis):
    """DurableRedis on a TLS port alone, with the same certificates as Narad's."""

    def __init__(self, folder: Path, extra: list[str], certs: Certificates) -> None:
        super().__init__(folder, extra)
        self.certs = certs

    def command(self) -> list[str]:
        cmd = super().command()
        at = cmd.index("--port")
        cmd[at: at + 2] = [
            "--port", "0", "--tls-port", str(self.port),
            "--tls-cert-file", self.certs.cert("server"),
            "--tls-key-file", self.certs.key("server"), "--tls-ca-cert-file", self.certs.ca,
        ]
        return cmd


def durable_redis(folder: Path, fsync: str) -> DurableRedis:
    if TLS is not None:
        return TLSRedis(folder / "redis", ["--appendfsync", fsync], TLS)
    return DurableRedis(folder / "redis", ["--appendfsync", fsync])


def tls_flags() -> list[str]:
    """redis-benchmark's flags for a --tls run."""
    if TLS is None:
        return []
    return ["--tls", "--cacert", TLS.ca, "--cert", TLS.cert("client"), "--key",
            TLS.key("client")]


def benchmark(
    port: int, clients: int, pipeline: int, requests: int, *command: str,
    login: tuple[str, str] | None = None,
) -> dict[str, float]:
    out = subprocess.run(
        [
            "redis-benchmark",
            *(["--user", login[0], "-a", login[1]] if login else []),
            "-p",
            str(port),
            "-c",
            str(clients),
            "-n",
            str(requests),
            "-P",
            str(pipeline),
            "--csv",
            *tls_flags(),
            *command,
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    rows = list(csv.DictReader(io.StringIO(out)))
    row = rows[-1]
    return {k: float(v) for k, v in row.items() if k != "test"}


def xadd_figure(
    fsync: str, clients: int, pipeline: int, requests: int
) -> tuple[float, float, dict, dict]:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        results = []
        for server in (narad(folder, fsync), durable_redis(folder, fsync)):
            server.start()
            try:
                results.append(
                    benchmark(
                        server.port, clients, pipeline, requests, "XADD", "bench", "*", "f", VALUE
                    )
                )
            finally:
                server.stop()
        mine, theirs = results
        return mine["rps"], theirs["rps"], mine, theirs


def spread_figure(fsync: str, pipeline: int, keys: int, requests: int) -> tuple[float, float]:
    """XADD from 50 clients spread over `keys` streams (redis-benchmark -r), ops/s,
    Narad's and Redis's. A first pass creates the streams, so that the figure is the
    steady state of writing to streams that exist (creating one costs Narad a folder,
    two logs and their fsyncs, once)."""
    rates = []
    command = ["-r", str(keys), "XADD", "s:__rand_int__", "*", "f", VALUE]
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for server in (narad(folder, fsync), durable_redis(folder, fsync)):
            server.start()
            try:
                if keys > 1:
                    benchmark(server.port, 50, 16, 4 * keys, *command)
                rates.append(benchmark(server.port, 50, pipeline, requests, *command)["rps"])
                if isinstance(server, NaradProcess):
                    info = server.client().info("narad")
                    print(
                        f"<!-- narad {keys} streams P{pipeline} {fsync}: fsyncs_per_commit "
                        f"{info['fsyncs_per_commit']}, records_per_fsync "
                        f"{info['records_per_fsync']} -->", flush=True,
                    )
            finally:
                server.stop()
    return rates[0], rates[1]


def acl_figure(command: list[str], pipeline: int, requests: int) -> tuple[float, float]:
    """ops/s of `command` as the default user and as a user restricted to `bench:*`,
    50 clients at pipeline `pipeline`, fsync everysec, on one Narad."""
    with tempfile.TemporaryDirectory() as tmp:
        server = narad(Path(tmp), "everysec")
        server.start()
        try:
            admin = server.client()
            admin.execute_command("ACL", "SETUSER", "bench", "on", ">b", "~bench:*", "+@all")
            admin.execute_command("Q.CREATE", "bench:q")
            benchmark(server.port, 50, pipeline, requests // 4, *command)  # warm up
            defaults, restricted = [], []
            for turn in range(4):  # alternating, each first in turn: drift cancels
                runs = [(defaults, None), (restricted, ("bench", "b"))]
                for into, login in runs if turn % 2 else runs[::-1]:
                    into.append(
                        benchmark(
                            server.port, 50, pipeline, requests, *command, login=login
                        )["rps"]
                    )
        finally:
            server.stop()
    return statistics.median(defaults), statistics.median(restricted)


def medians(rounds: int, figure: Callable[[], tuple[float, float]]) -> tuple[float, float]:
    """Narad's and Redis's medians over `rounds` runs of `figure`."""
    runs = [figure() for _ in range(rounds)]
    return statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs)


def _consumer(
    port: int, key: str, group: str, name: str, stop_at: float, out: multiprocessing.Queue
) -> None:  # type: ignore[type-arg]
    client = redis.Redis(port=port)
    done = 0
    while time.monotonic() < stop_at:
        reply = client.xreadgroup(group, name, {key: ">"}, count=100)
        if not reply:
            break
        entries = reply[0][1]
        client.xack(key, group, *[e[0] for e in entries])
        done += len(entries)
    out.put(done)


def consume_figure(fsync: str, entries: int, consumers: int) -> tuple[float, float]:
    rates = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for server in (
            narad(folder, fsync),
            DurableRedis(folder / "redis", ["--appendfsync", fsync]),
        ):
            server.start()
            try:
                benchmark(server.port, 50, 64, entries, "XADD", "c", "*", "f", VALUE)
                client = server.client()
                client.xgroup_create("c", "g", "0")
                queue: multiprocessing.Queue[int] = multiprocessing.Queue()
                start = time.monotonic()
                procs = [
                    multiprocessing.Process(
                        target=_consumer, args=(server.port, "c", "g", f"c{i}", start + 60, queue)
                    )
                    for i in range(consumers)
                ]
                for p in procs:
                    p.start()
                total = sum(queue.get() for _ in procs)
                elapsed = time.monotonic() - start
                for p in procs:
                    p.join()
                rates.append(total / elapsed)
            finally:
                server.stop()
    return rates[0], rates[1]


def cpu_s(pid: int) -> tuple[float, float]:
    """User and system CPU seconds used so far by process `pid`."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def request_cpu(requests: int) -> list[tuple[float, float]]:
    """Narad's, then Redis's, server CPU per PING (user, system; microseconds)."""
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        for server in (narad(Path(tmp), "no"), RedisProcess(Path(tmp) / "redis", [])):
            server.start()
            assert server.proc is not None
            try:
                before = cpu_s(server.proc.pid)
                benchmark(server.port, 50, 1, requests, "PING")
                after = cpu_s(server.proc.pid)
            finally:
                server.stop()
            user, system = ((a - b) * 1e6 / requests for a, b in zip(after, before, strict=True))
            out.append((user, system))
    return out


def rss_anon_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1])
    return 0


def memory_and_restart(entries: int) -> dict[str, float]:
    # Narad's bytecode is compiled first, as an install does: a source changed since
    # its last compile would otherwise be compiled at every start (and not cached
    # under PYTHONDONTWRITEBYTECODE), which is not what a restart costs.
    compileall.compile_dir(str(ROOT / "narad"), quiet=1)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        figures: dict[str, float] = {}
        for label, server in (
            ("narad", narad(folder, "always")),
            ("redis", DurableRedis(folder / "redis", ["--appendfsync", "everysec"])),
        ):
            server.start()
            assert server.proc is not None
            client = server.client()
            if label == "narad":
                before = rss_anon_kb(server.proc.pid) * 1024
            else:
                before = int(client.info("memory")["used_memory"])
            benchmark(server.port, 50, 64, entries, "XADD", "m", "*", "f", VALUE)
            assert client.xlen("m") == entries
            if label == "narad":
                after = rss_anon_kb(server.proc.pid) * 1024
            else:
                after = int(client.info("memory")["used_memory"])
            figures[f"{label}_bytes_per_entry"] = (after - before) / entries
            server.stop()
            start = time.monotonic()
            server.start(poll_s=0.001)
            figures[f"{label}_restart_s"] = time.monotonic() - start
            assert server.client().xlen("m") == entries
            server.stop()
        # For scale: the same start with no data at all (the process's own start-up).
        for label, server in (
            ("narad", narad(folder / "empty", "always")),
            ("redis", DurableRedis(folder / "empty" / "redis", ["--appendfsync", "everysec"])),
        ):
            start = time.monotonic()
            server.start(poll_s=0.001)
            figures[f"{label}_empty_start_s"] = time.monotonic() - start
            server.stop()
        return figures


def row(figure: str, mine: float, theirs: float, target: str) -> None:
    print(
        f"| {figure} | {mine:,.3f} | {theirs:,.3f} | {mine / theirs:.2f} | {target} |", flush=True
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--pin", action="store_true", help="servers and load on separate CPUs")
    parser.add_argument("--rounds", type=int, default=1, help="medians of this many runs")
    parser.add_argument("--only", nargs="*", default=None)
    parser.add_argument("--tls", action="store_true", help="both servers on TLS ports")
    args = parser.parse_args()
    if args.pin:
        pin()
    tmp = tempfile.TemporaryDirectory()
    if args.tls:
        global TLS
        TLS = make_certificates(Path(tmp.name) / "certs")
        if not set(args.only or ["xadd", "latency"]) <= {"xadd", "spread", "latency"}:
            sys.exit("--tls measures the XADD figures only: --only xadd spread latency")
        args.only = args.only or ["xadd", "latency"]
    for tool in ("redis-server", "redis-benchmark"):
        if shutil.which(tool) is None:
            sys.exit(f"{tool} is not installed (apt-get install redis-server redis-tools)")
    n = 50_000 if args.quick else 200_000
    wanted = set(args.only or ["xadd", "latency", "consume", "memory"])
    print("| figure | Narad | Redis | Narad / Redis | target |")
    print("|---|---|---|---|---|")
    if "xadd" in wanted:
        for fsync, pipeline, target in (
            ("always", 16, 1.0),
            ("always", 1, 0.8),
            ("everysec", 16, 0.8),
        ):
            mine, theirs = medians(
                args.rounds, lambda f=fsync, p=pipeline: xadd_figure(f, 50, p, n)[:2]
            )
            row(f"XADD 50 clients P{pipeline}, fsync {fsync} (ops/s)", mine, theirs, f">= {target}")
    if "spread" in wanted:
        for keys in (1, 10, 100, 1_000, 10_000):
            for fsync, pipeline in (("always", 16), ("always", 1), ("everysec", 16)):
                requests = n if pipeline == 16 else n // 4
                mine, theirs = medians(
                    args.rounds,
                    lambda f=fsync, p=pipeline, k=keys, r=requests: spread_figure(f, p, k, r),
                )
                row(
                    f"XADD over {keys:,} streams, 50 clients P{pipeline}, fsync {fsync} (ops/s)",
                    mine, theirs, "",
                )
    if "latency" in wanted:
        def p50s() -> tuple[float, float]:
            _, _, mine, theirs = xadd_figure("always", 1, 1, n // 10)
            return mine["p50_latency_ms"], theirs["p50_latency_ms"]

        row("XADD 1 client P1 p50 latency (ms)", *medians(args.rounds, p50s), "<= 1.3")
    if "consume" in wanted:
        mine, theirs = medians(args.rounds, lambda: consume_figure("always", n, 4))
        row("XREADGROUP COUNT 100 + XACK, fsync always (msg/s)", mine, theirs, ">= 1.0")
    if "memory" in wanted:
        entries = 200_000 if args.quick else 1_000_000
        f = memory_and_restart(entries)
        row(
            f"memory per entry after {entries:,} XADD (bytes)",
            f["narad_bytes_per_entry"],
            f["redis_bytes_per_entry"],
            "<= 0.25",
        )
        row(
            f"restart until PING with {entries:,} entries (s)",
            f["narad_restart_s"],
            f["redis_restart_s"],
            "<= 0.5",
        )
        row("start until PING with no data (s)", f["narad_empty_start_s"],
            f["redis_empty_start_s"], "")  # fmt: skip
    if "acl" in wanted:
        print("\n| figure | default user | `~bench:* +@all` | restricted / default |")
        print("|---|---|---|---|")
        for pipeline in (16, 1):
            for command in (
                ["XADD", "bench:s", "*", "f", VALUE],
                ["Q.PUSH", "bench:q", VALUE],
            ):
                requests = n if pipeline > 1 else n // 4
                mine, theirs = medians(
                    args.rounds, lambda c=command, p=pipeline, r=requests: acl_figure(c, p, r)
                )
                print(
                    f"| {command[0]} 50 clients P{pipeline}, fsync everysec (ops/s) | "
                    f"{mine:,.0f} | {theirs:,.0f} | {theirs / mine:.2f} |", flush=True,
                )
    if "cpu" in wanted:
        mine, theirs = request_cpu(n)
        row("server user CPU per PING, 50 clients P1 (us)", mine[0], theirs[0], "")
        row("server system CPU per PING, 50 clients P1 (us)", mine[1], theirs[1], "")


if __name__ == "__main__":
    main()
