"""Reading the `runs` stream the Celery and Dramatiq test tasks write: who ran what."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

import redis


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
