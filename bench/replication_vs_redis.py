"""Replication: Narad's leader and replicas against Redis 7's, side by side in one run.

    python bench/replication_vs_redis.py [--seconds S] [--only NAME ...]

Parts (all by default; --only picks some):
- `xadd`: durable XADD from 50 clients, 100-byte values, pipeline 16 and 1, to one
  stream and spread over 1,000 (`s:<n>`, created by a warm-up first), in four setups,
  every one under `fsync always` / `appendfsync always`:
    (a) a Narad leader alone;
    (b) a Narad leader and 2 replicas (separate processes), `min-replicas-to-ack 1`:
        plain XADD pipelines, each reply waits for one replica to hold it durably;
    (r) a Redis leader alone (for scale);
    (c) a Redis leader and 2 replicas (replicaof), each client's XADD pipeline
        followed by `WAIT 1 0`.
  All four are driven by the same load generator (`load`, below: asyncio processes
  on raw sockets with hiredis, every request batch built in advance), since
  redis-benchmark cannot send WAIT after a pipeline; (a) and (b) are also measured
  with redis-benchmark, as a check of that generator. During (b) and (c) a thread
  samples the leader's `master_repl_offset` and each replica's `slave_repl_offset`
  every 10 ms (`lag`): their difference (commits for Narad, bytes for Redis) and the
  time from a leader position being sampled to the replica's first sample at or past it.
- `catchup`: a Narad leader filled with about --catchup-mb MiB of journal (XADD,
  redis-benchmark P16), then two new replicas pointed at it in turn: an empty one,
  which follows the journal from position 0, and one holding a history of its own,
  which gets a full copy of the logs. For each, the time until it holds the
  leader's position, as MiB per second of what the leader read (journal or logs),
  next to one sequential read of the leader's journal files with their pages dropped
  from the cache first (posix_fadvise DONTNEED, so cold-ish: a virtual disk's host may
  still cache them), and again warm; and the CPU the leader and the replica used.

CPU: every process of a setup (servers and load) shares the machine's cores; the
figures say how the setup does on this machine as a whole, not how one server would
do with a core to itself. Prints Markdown tables for bench/README.md. Needs
redis-server and redis-benchmark on the PATH.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import random
import resource
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import hiredis

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.server_vs_redis import (  # noqa: E402
    VALUE,
    DurableRedis,
    benchmark,
    cpu_s,
    narad,
)
from tests.servers import NaradProcess, ServerProcess, wait_until  # noqa: E402

CLIENTS = 50
STREAMS = 1_000
SAMPLE_S = 0.010


# -- the load generator ---------------------------------------------------------------


def _command(*args: str) -> bytes:
    parts = [f"*{len(args)}\r\n".encode()]
    for arg in args:
        data = arg.encode()
        parts.append(b"$%d\r\n%s\r\n" % (len(data), data))
    return b"".join(parts)


def _batches(pipeline: int, streams: int, wait: bool, rng: random.Random) -> list[bytes]:
    """Request batches for one client: `pipeline` XADDs (to `bench`, or each to a random
    one of `streams` streams, named as redis-benchmark's -r names them), then `WAIT 1 0`
    when asked."""
    out = []
    for _ in range(1 if streams == 1 else 64):
        keys = ["bench"] * pipeline if streams == 1 else [
            f"s:{rng.randrange(streams):012d}" for _ in range(pipeline)
        ]
        batch = b"".join(_command("XADD", key, "*", "f", VALUE) for key in keys)
        if wait:
            batch += _command("WAIT", "1", "0")
        out.append(batch)
    return out


async def _client(
    port: int, batches: list[bytes], pipeline: int, wait: bool, start_at: float, stop_at: float
) -> tuple[int, list[float], list[str]]:
    """One connection sending batches back to back; the XADDs acked within
    [start_at, stop_at), each batch's round trip (s), and the error replies seen."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    parse = hiredis.Reader()
    replies = pipeline + (1 if wait else 0)
    done = 0
    trips: list[float] = []
    errors: list[str] = []
    await asyncio.sleep(max(0.0, start_at - time.monotonic()))
    i = 0
    while True:
        sent = time.monotonic()
        if sent >= stop_at:
            break
        writer.write(batches[i % len(batches)])
        i += 1
        got = 0
        while got < replies:
            parse.feed(await reader.read(1 << 16))
            while (reply := parse.gets()) is not False:
                got += 1
                if isinstance(reply, hiredis.ReplyError):
                    errors.append(str(reply))
                elif wait and got == replies and reply < 1:
                    errors.append(f"WAIT answered {reply}")
        now = time.monotonic()
        if sent >= start_at and now <= stop_at:
            done += pipeline
            trips.append(now - sent)
    writer.close()
    return done, trips, errors[:5]


def _worker(
    port: int, clients: int, pipeline: int, streams: int, wait: bool, seed: int,
    start_at: float, stop_at: float, out: multiprocessing.Queue,  # type: ignore[type-arg]
) -> None:
    rng = random.Random(seed)

    async def run() -> list[tuple[int, list[float], list[str]]]:
        return await asyncio.gather(*(
            _client(port, _batches(pipeline, streams, wait, rng), pipeline, wait, start_at,
                    stop_at)
            for _ in range(clients)
        ))

    results = asyncio.run(run())
    out.put((
        sum(r[0] for r in results),
        [t for r in results for t in r[1]],
        [e for r in results for e in r[2]],
    ))


def load(
    port: int, pipeline: int, streams: int, wait: bool, start_at: float, seconds: float,
    procs: int = 2,
) -> tuple[float, float, float, float]:
    """XADDs acked per second from CLIENTS connections spread over `procs` processes,
    counted from `start_at` (every connection should be open by then) for `seconds`;
    the p50 and p99 of a batch's round trip (ms); the CPU seconds the load's processes
    used, all told. Raises on any error reply."""
    queue: multiprocessing.Queue[tuple[int, list[float], list[str]]] = multiprocessing.Queue()
    stop_at = start_at + seconds
    per = [CLIENTS // procs + (1 if i < CLIENTS % procs else 0) for i in range(procs)]
    workers = [
        multiprocessing.Process(
            target=_worker,
            args=(port, n, pipeline, streams, wait, i, start_at, stop_at, queue),
        )
        for i, n in enumerate(per)
    ]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    for w in workers:
        w.start()
    results = [queue.get(timeout=seconds + 120) for _ in workers]
    for w in workers:
        w.join()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    errors = [e for r in results for e in r[2]]
    if errors:
        raise RuntimeError(f"error replies under load: {errors[:5]}")
    trips = sorted(t for r in results for t in r[1]) or [float("nan")]
    return (
        sum(r[0] for r in results) / seconds,
        trips[len(trips) // 2] * 1e3,
        trips[int(len(trips) * 0.99)] * 1e3,
        cpu,
    )


# -- replication lag -------------------------------------------------------------------


class LagSampler:
    """Samples the leader's master_repl_offset and each replica's slave_repl_offset
    every SAMPLE_S, on a thread, while the load runs."""

    def __init__(self, leader: ServerProcess, replicas: list[ServerProcess]) -> None:
        self.leader = leader.client()
        self.replicas = [r.client() for r in replicas]
        # ((time, leader position), [(time, replica position)]) per sample
        self.samples: list[tuple[tuple[float, int], list[tuple[float, int]]]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        # The replicas are read before the leader, so a gap is never negative (it may
        # count commits the leader made during the reads).
        while not self._stop.is_set():
            at = time.monotonic()
            mine = [(time.monotonic(), int(r.info("replication")["slave_repl_offset"]))
                    for r in self.replicas]
            lead = (time.monotonic(), int(self.leader.info("replication")["master_repl_offset"]))
            self.samples.append((lead, mine))
            self._stop.wait(max(0.0, SAMPLE_S - (time.monotonic() - at)))

    @contextmanager
    def during(self, start_at: float, stop_at: float) -> Iterator[None]:
        self._thread.start()
        try:
            yield
        finally:
            self._stop.set()
            self._thread.join()
            self.samples = [s for s in self.samples if start_at <= s[0][0] <= stop_at]

    def figures(self, replica: int) -> dict[str, float]:
        """p50 and p99 of the leader's position minus the replica's, and of the time
        from a sample of the leader's position to the replica's first sample at or
        past it (ms: an upper bound, to within the sampling interval; 0 when the
        replica's read just before already showed it there)."""
        samples = [(lead, mine[replica]) for lead, mine in self.samples]
        gaps = sorted(lead - mine for (_, lead), (_, mine) in samples)
        waits = []
        j = 0
        for i, ((at, lead), _) in enumerate(samples):
            j = max(j, i)  # the replica's positions only grow, and so do the leader's
            while j < len(samples) and samples[j][1][1] < lead:
                j += 1
            if j == len(samples):
                break
            waits.append(max(0.0, samples[j][1][0] - at) * 1e3)
        waits.sort()
        if not gaps or not waits:
            return {}
        return {
            "samples": len(gaps),
            "gap_p50": gaps[len(gaps) // 2],
            "gap_p99": gaps[int(len(gaps) * 0.99)],
            "wait_p50": waits[len(waits) // 2],
            "wait_p99": waits[int(len(waits) * 0.99)],
        }


# -- the setups ------------------------------------------------------------------------


class RedisLeader(DurableRedis):
    """A durable redis-server that serves a replica's first sync at once (no diskless
    sync delay)."""

    def command(self) -> list[str]:
        return [*super().command(), "--repl-diskless-sync-delay", "0"]


def offset(server: ServerProcess, field: str) -> int:
    return int(server.client().info("replication")[field])


def wait_synced(leader: ServerProcess, replicas: list[ServerProcess], timeout: float = 60) -> None:
    def synced() -> bool:
        target = offset(leader, "master_repl_offset")
        return all(
            r.client().info("replication").get("master_link_status") == "up"
            and offset(r, "slave_repl_offset") >= target
            for r in replicas
        )

    wait_until(synced, timeout=timeout)


@contextmanager
def setup(kind: str, folder: Path) -> Iterator[tuple[ServerProcess, list[ServerProcess]]]:
    """The servers of setup `kind` (a, b, r, c), started and, with replicas, synced."""
    narad_kind = kind in ("a", "b")
    replicas = 2 if kind in ("b", "c") else 0
    nodes: list[ServerProcess] = []
    for i in range(replicas + 1):
        if narad_kind:
            nodes.append(narad(folder / f"n{i}", "always"))
        else:
            cls = RedisLeader if i == 0 else DurableRedis
            nodes.append(cls(folder / f"r{i}", ["--appendfsync", "always"]))
    try:
        for node in nodes:
            node.start()
        leader, *followers = nodes
        for node in followers:
            assert node.client().replicaof(leader.host, leader.port)
        if followers:
            wait_synced(leader, followers)
            if narad_kind:
                leader.client().config_set("min-replicas-to-ack", 1)
        yield leader, followers
    finally:
        for node in nodes:
            if node.proc is not None:
                node.stop()


def cpu_shares(servers: list[ServerProcess]) -> list[float]:
    """CPU seconds (user + system) each server process has used so far."""
    out = []
    for server in servers:
        assert server.proc is not None
        out.append(sum(cpu_s(server.proc.pid)))
    return out


def xadd_part(seconds: float, quick: bool) -> None:
    print("\n| setup | streams | P | ops/s (load tool) | batch p50 / p99 (ms) "
          "| ops/s (redis-benchmark) | CPU, leader + replicas (% of a core) | CPU, load tool |")
    print("|---|---|---|---|---|---|---|---|")
    rates: dict[tuple[str, int, int], float] = {}
    lags: list[str] = []
    names = {"a": "(a) Narad alone", "b": "(b) Narad + 2 replicas, min-replicas-to-ack 1",
             "r": "(r) Redis alone", "c": "(c) Redis + 2 replicas, XADD batch + WAIT 1 0"}
    for kind in ("a", "b", "r", "c"):
        for streams in (1, STREAMS):
            with tempfile.TemporaryDirectory() as tmp, setup(kind, Path(tmp)) as (lead, reps):
                command = ["XADD", "bench", "*", "f", VALUE]
                if streams > 1:
                    command = ["-r", str(streams), "XADD", "s:__rand_int__", "*", "f", VALUE]
                    benchmark(lead.port, CLIENTS, 16, 4 * streams, *command)
                    if reps:
                        wait_synced(lead, reps)
                for pipeline in (16, 1):
                    servers = [lead, *reps]
                    before = cpu_shares(servers)
                    sampler = LagSampler(lead, reps) if reps else None
                    start_at = time.monotonic() + 1.0
                    run = (lead.port, pipeline, streams, kind == "c", start_at, seconds)
                    if sampler is not None:
                        with sampler.during(start_at, start_at + seconds):
                            rate, p50, p99, load_cpu = load(*run)
                    else:
                        rate, p50, p99, load_cpu = load(*run)
                    spent = [a - b for a, b in zip(cpu_shares(servers), before, strict=True)]
                    rates[(kind, streams, pipeline)] = rate
                    check = ""
                    if kind in ("a", "b") and not quick:
                        n = 200_000 if pipeline == 16 else 50_000
                        rps = benchmark(lead.port, CLIENTS, pipeline, n, *command)["rps"]
                        check = f"{rps:,.0f}"
                    share = " + ".join(f"{100 * s / (seconds + 1.0):.0f}" for s in spent)
                    print(f"| {names[kind]} | {streams:,} | {pipeline} | {rate:,.0f} "
                          f"| {p50:.2f} / {p99:.2f} | {check} | {share} "
                          f"| {100 * load_cpu / (seconds + 1.0):.0f} |", flush=True)
                    if sampler is not None:
                        unit = "commits" if kind == "b" else "bytes"
                        for i in range(len(reps)):
                            f = sampler.figures(i)
                            if f:
                                lags.append(
                                    f"| {names[kind][:3]} replica {i + 1} | {streams:,} "
                                    f"| {pipeline} | {f['samples']} "
                                    f"| {f['gap_p50']:,.0f} / {f['gap_p99']:,.0f} {unit} "
                                    f"| {f['wait_p50']:.0f} / {f['wait_p99']:.0f} |"
                                )
                    if reps:
                        wait_synced(lead, reps)
    print("\n| streams | P | (b) / (c) | (b) / (a) | (c) / (r) |")
    print("|---|---|---|---|---|")
    for streams in (1, STREAMS):
        for pipeline in (16, 1):
            r = {k: rates[(k, streams, pipeline)] for k in "abrc"}
            print(f"| {streams:,} | {pipeline} | {r['b'] / r['c']:.2f} | {r['b'] / r['a']:.2f} "
                  f"| {r['c'] / r['r']:.2f} |")
    print("\n| leader + replica | streams | P | samples | leader minus replica, p50 / p99 "
          "| time to reach the leader's position, p50 / p99 (ms) |")
    print("|---|---|---|---|---|---|")
    for line in lags:
        print(line)


# -- catch-up --------------------------------------------------------------------------


def journal_files(node: NaradProcess) -> list[Path]:
    return sorted(p for p in (node.folder / "data" / "journal").iterdir() if p.is_file())


def read_rate(files: list[Path], cold: bool) -> float:
    """MiB/s of one sequential read of `files`, 1 MiB at a time; with `cold`, their
    cached pages dropped first."""
    total = 0
    if cold:
        drop_cache(files)
    start = time.monotonic()
    for path in files:
        fd = os.open(path, os.O_RDONLY)
        try:
            while chunk := os.read(fd, 1 << 20):
                total += len(chunk)
        finally:
            os.close(fd)
    return total / 2**20 / (time.monotonic() - start)


def drop_cache(files: list[Path]) -> None:
    """Drop the files' pages from the page cache (written back first: dirty pages
    would stay)."""
    for path in files:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def catchup_part(megabytes: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        # Checkpoints held off (as bench/recovery.py does), so that the leader keeps
        # its whole journal and an empty replica follows it from position 0.
        leader = narad(folder / "leader", "always")
        leader.extra += ["--checkpoint-bytes", "4000gb", "--checkpoint-seconds", "86400"]
        leader.start()
        try:
            client = leader.client()
            fill_start = time.monotonic()
            for _ in range(4 * megabytes):  # a bound, should the journal not grow
                benchmark(leader.port, CLIENTS, 16, 200_000, "XADD", "bench", "*", "f", VALUE)
                size = sum(p.stat().st_size for p in journal_files(leader))
                if size >= megabytes * 2**20:
                    break
            fill_s = time.monotonic() - fill_start
            info = client.info("replication")
            position = int(info["master_repl_offset"])
            entries = client.xlen("bench")
            files = journal_files(leader)
            size = sum(p.stat().st_size for p in files)
            logs = sorted((leader.folder / "data" / "streams").glob("*/*/*.log"))
            logs_size = sum(p.stat().st_size for p in logs)
            rows = [catch_up(leader, folder / "by-journal", position, files, full_copy=False)]
            rows.append(catch_up(leader, folder / "by-copy", position, logs, full_copy=True))
            cold = read_rate(files, cold=True)
            warm = read_rate(files, cold=False)
        finally:
            leader.stop()
    print("\n| figure | value |")
    print("|---|---|")
    print(f"| leader's journal (MiB, {len(files)} files, filled in {fill_s:.1f} s) "
          f"| {size / 2**20:,.0f} |")
    print(f"| leader's stream logs (MiB, {len(logs)} files) | {logs_size / 2**20:,.0f} |")
    print(f"| commits (master_repl_offset) / entries (XLEN bench) | {position:,} / {entries:,} |")
    for how, took, spent, xlen, read in rows:
        what = "journal from position 0" if how == "journal" else "full copy of the logs"
        print(f"| catch-up by {what}: seconds (replica's XLEN after: {xlen:,}) | {took:.2f} |")
        print(f"| catch-up by {what}: MiB/s read on the leader (cache dropped first) "
              f"| {read / 2**20 / took:,.1f} |")
        print(f"| catch-up by {what}: CPU, leader / replica (% of a core) "
              f"| {100 * spent[0] / took:.0f} / {100 * spent[1] / took:.0f} |")
    print(f"| sequential read of the leader's journal files, cache dropped (MiB/s) | {cold:,.0f} |")
    print(f"| sequential read of the leader's journal files, warm (MiB/s) | {warm:,.0f} |")


def catch_up(
    leader: NaradProcess, folder: Path, position: int, files: list[Path], full_copy: bool
) -> tuple[str, float, list[float], int, int]:
    """A new replica pointed at `leader` (at `position`), until it holds that position:
    by the journal from position 0 (an empty replica, the leader keeping its whole
    journal), or by a full copy (a replica holding a history of its own, which the
    leader answers with FULLCOPY). `files`: what the leader reads for it, its pages
    dropped from the cache first."""
    replica = narad(folder, "always")
    replica.start()
    try:
        if full_copy:
            replica.client().xadd("own", {"f": "v"})  # another history: a copy, not the journal
        drop_cache(files)
        before = cpu_shares([leader, replica])
        start = time.monotonic()
        assert replica.client().replicaof(leader.host, leader.port)
        wait_until(lambda: offset(replica, "slave_repl_offset") >= position,
                   timeout=900, interval=0.01)
        took = time.monotonic() - start
        spent = [a - b for a, b in zip(cpu_shares([leader, replica]), before, strict=True)]
        xlen = replica.client().xlen("bench")
        copied = "event=full_copy_received" in replica.log()
        assert copied == full_copy, replica.log()
    finally:
        replica.stop()
        shutil.rmtree(folder, ignore_errors=True)
    read = sum(p.stat().st_size for p in files)
    return ("copy" if full_copy else "journal"), took, spent, xlen, read


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=4.0, help="each load run's length")
    parser.add_argument("--catchup-mb", type=int, default=200)
    parser.add_argument("--quick", action="store_true", help="no redis-benchmark check runs")
    parser.add_argument("--only", nargs="*", default=None, choices=["xadd", "catchup"])
    args = parser.parse_args()
    for tool in ("redis-server", "redis-benchmark"):
        if shutil.which(tool) is None:
            sys.exit(f"{tool} is not installed (apt-get install redis-server redis-tools)")
    wanted = set(args.only or ["xadd", "catchup"])
    print(f"<!-- {time.strftime('%Y-%m-%d %H:%M')}, {os.cpu_count()} CPUs -->")
    if "xadd" in wanted:
        xadd_part(args.seconds, args.quick)
    if "catchup" in wanted:
        catchup_part(args.catchup_mb)


if __name__ == "__main__":
    main()
