"""The Celery and Dramatiq tests' worker processes, and reading the `runs` stream
their tasks write: who ran what."""

from __future__ import annotations

import os
import signal
import subprocess
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import redis

from tests.servers import ROOT, NaradProcess


@contextmanager
def worker_process(
    argv: list[str], narad: NaradProcess, log: Path, stop_s: float,
) -> Iterator[subprocess.Popen[bytes]]:
    """A worker process of `argv` whose broker and record are `narad`, in a process
    group of its own; SIGTERM to the group after, then SIGKILL past `stop_s`."""
    env = {**os.environ, "PYTHONPATH": str(ROOT),
           "NARAD_BROKER": f"narad://127.0.0.1:{narad.port}",
           "NARAD_RECORD": f"redis://127.0.0.1:{narad.port}"}
    with open(log, "ab") as out:
        proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=out, stderr=out,
                                start_new_session=True)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(stop_s)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


@dataclass
class Runs:
    # task number -> process groups that started / ended it, in order
    starts: dict[int, list[int]] = field(default_factory=lambda: defaultdict(list))
    ends: dict[int, list[int]] = field(default_factory=lambda: defaultdict(list))
    ended_at: dict[int, float] = field(default_factory=dict)
    started_at: dict[int, list[float]] = field(default_factory=lambda: defaultdict(list))

    @classmethod
    def read(cls, client: redis.Redis) -> Runs:
        runs = cls()
        for _, f in client.xrange("runs"):
            n, group = int(f[b"n"]), int(f[b"group"])
            if f[b"what"] == b"start":
                runs.starts[n].append(group)
                runs.started_at[n].append(float(f[b"at"]))
            else:
                runs.ends[n].append(group)
                runs.ended_at.setdefault(n, float(f[b"at"]))
        return runs

    def check(self, tasks: int, killed: int) -> None:
        """Every task ended; no task ran twice in a worker that was not killed (an
        acked task is never run again, and a running one is not handed out again
        while its lease is renewed); only the killed worker's tasks ran again."""
        missing = [n for n in range(tasks) if not self.ends.get(n)]
        assert not missing, f"{len(missing)} tasks never ended: {missing[:10]}"
        for n in range(tasks):
            survivors = [g for g in self.starts[n] if g != killed]
            assert len(survivors) <= 1, f"task {n} started twice: {self.starts[n]}"
            if len(self.starts[n]) > 1:
                assert killed in self.starts[n][:-1], f"task {n} rerun: {self.starts[n]}"
