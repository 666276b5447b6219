"""Power cuts at random instants under real traffic, through the fault model of
tests/faultfs.py.

A real Server runs in this process, its event loop on the test's own thread (where
Server.serve may install its signal handlers), listening on a loopback port, over a
data dir that a FaultFS stands in front of. Threads drive it with redis-py across 30
streams (XADD, XREADGROUP, XACK, XTRIM) and 5 queues (Q.PUSH, Q.POP, Q.ACK), each queue copied
by a fan-out subscriber (Q.SUBSCRIBE), and note each reply in one ordered list of
events. At call numbers drawn in advance the FaultFS hook takes a cut: a tree the
machine could hold had it lost power right after that call, and with it the number of
events noted so far. The hook runs under the FaultFS's lock, so no file changes
between the two: every event before that number had its reply before the cut.
Several cuts are taken per run of the server, at any intercepted call and, some, right
after an fsync or a rename; the server runs several times on the same data dir, each
start opening under the model what the previous clean stop left (a cut may come
during that open), and a cut keeps the promises of every run before its own.

What a reply promises depends on the fsync policy, and the test runs under both that
promise something: under `always` every answered command is durable; under
`everysec` only those answered before a later fsync of the journal by its background
thread began (see Cutter).

Then, for each cut:

- `python -m narad check` runs on the cut's data dir before any server opens it, so
  that it judges what the crash left rather than what recovery made of it (a server's
  open cuts torn tails and rewrites indexes, which would hide whether anything worse
  was there): only the kinds a crash leaves may show, a torn tail, an index that a
  rebuild would change (indexes are never fsynced), and a log holding records past
  its end in the journal (written behind it, their commit never made durable);
- a real server process opens it, and, through redis-py: every XADD and Q.PUSH that
  was answered is there with its fields; every answered XACK and Q.ACK holds (the
  entry is not pending, the message never visible again); an entry delivered by
  XREADGROUP and not acked is pending for its consumer, and a message delivered by
  Q.POP and not acked is still in flight under its receipt (a Q.ACK with it counts
  it); an answered XTRIM MINID holds, and no pending entry lacks its entry unless an
  XTRIM sent before the cut may have removed it; Q.STATS agrees with XRANGE; each
  subscriber holds each source message exactly once, in the source's order;
- once that server has stopped cleanly, `narad check` finds the data dir clean.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import re
import subprocess
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from narad.config import Config
from narad.log.check import Kind
from narad.server import Server
from tests.faultfs import FaultFS
from tests.server.traffic import (
    Events,
    Layout,
    Promises,
    check_queues,
    check_streams,
    consumer,
    narad_check,
    producer,
    queue_worker,
    set_up,
    trimmer,
)
from tests.servers import NaradProcess, free_port

SEED = 20261202
RUN_S = 30.0  # a run stops after this long even if some of its cuts were not taken


@dataclass(frozen=True)
class Plan:
    """One policy's share of the cuts."""

    runs: int
    cuts_per_run: int
    calls: int  # a run's cut points are drawn among its first calls (a few seconds)


PLANS = {"always": Plan(3, 6, 3000), "everysec": Plan(2, 5, 12000)}
STREAMS = [b"s%d" % i for i in range(30)]
LAYOUT = Layout(STREAMS, [b"q%d" % i for i in range(5)], STREAMS[:10])
SETTINGS = [("checkpoint-seconds", "1"), ("checkpoint-bytes", "1mb")]
# The name of the journal's everysec fsync thread (narad/log/journal.py).
JOURNAL_FSYNC_THREAD = "narad-fsync"
# A cut point is a call number, and sometimes the kind of call to wait for from there:
# right after an fsync (what it covered must survive) or after a rename (a checkpoint
# file or a start checkpoint going into place).
NAMED_CALLS = ["fsync", "fdatasync", "replace"]
NAMED_PER_RUN = 2
# What `narad check` may find in what a crash leaves, before recovery.
CRASH_KINDS = {Kind.TORN_TAIL.value, Kind.INDEX.value, Kind.LOG_AHEAD.value}
_PROBLEM_KIND = re.compile(": ({}): ".format("|".join(re.escape(k.value) for k in Kind)))


# -- the cuts --------------------------------------------------------------------------------


@dataclass
class Cut:
    folder: Path  # the cut's data dir is folder / "data" (as NaradProcess runs it)
    answered: int  # events noted before the cut
    durable: int  # of those, the first ones that the fsync policy made durable
    call: str  # the intercepted call it came right after
    number: int  # that call's number in its run
    run: int

    @property
    def data(self) -> Path:
        return self.folder / "data"

    def __str__(self) -> str:
        return f"cut {self.folder.name} (run {self.run}, after call {self.number}: {self.call})"


class Cutter:
    """The FaultFS hook: takes a cut at each of `points` (call number, and the kind of
    call to wait for from there, or None), then asks the server to stop.

    It runs under the FaultFS's lock, right after each intercepted call, so no file
    changes while it runs and the calls it sees are in the order they were made.
    Under `always` every answered event is durable. Under `everysec` an event is
    durable once an fsync of the journal by its background thread began after the
    reply came: the hook counts the events at each call, and an fsync of that thread
    covers at least the count of the call before it (every reply counted then came
    after its commit's write, which came before the fsync). A checkpoint's fsync of
    the journal covers as much, but is not told apart from its fsyncs of other logs:
    leaving it out only promises less."""

    def __init__(
        self,
        fs: FaultFS,
        server: Server,
        events: Events,
        points: list[tuple[int, str | None]],
        folders: Iterator[Path],
        seed: int,
        run: int,
        policy: str,
    ) -> None:
        self.fs, self.server, self.events = fs, server, events
        self.points = sorted(points, key=lambda p: p[0])
        self.folders = folders
        self.rng = random.Random(seed)
        self.run = run
        self.cuts: list[Cut] = []
        self.always = policy == "always"
        # What the previous run left is durable: its server stopped cleanly.
        self.counted = self.durable = events.count()

    def __call__(self, name: str, number: int) -> None:
        thread = threading.current_thread().name
        if not self.always and name == "fdatasync" and thread == JOURNAL_FSYNC_THREAD:
            self.durable = self.counted
        self._maybe_cut(name, number)
        self.counted = self.events.count()

    def _maybe_cut(self, name: str, number: int) -> None:
        """At most one cut per call: the first point due (a named one waits for its
        kind of call without holding back the points after it)."""
        for i, (at, wanted) in enumerate(self.points):
            if at > number:
                return
            if wanted is None or wanted == name:
                del self.points[i]
                break
        else:
            return
        # Counted before the cut, so every event counted was answered before it.
        answered = self.events.count()
        folder = next(self.folders)
        self.fs.cut(folder / "data", self.rng)
        durable = answered if self.always else self.durable
        self.cuts.append(Cut(folder, answered, durable, name, number, self.run))
        if not self.points:
            loop = self.server.loop
            assert loop is not None
            loop.call_soon_threadsafe(self.server.node.request_shutdown)


def run_server(
    root: Path,
    policy: str,
    events: Events,
    plan: Callable[[FaultFS, Server], Cutter | None],
    workers: list[Callable[[int, threading.Event], None]],
) -> Cutter | None:
    """Run a Server on `root` under a FaultFS on this thread's loop, with `workers`
    on threads once it listens (each given the port and a stop event), until the
    hook that `plan` makes has taken its cuts, or RUN_S. Returns that hook."""
    port = free_port()
    settings = [("dir", str(root)), ("port", str(port)), ("fsync", policy), *SETTINGS]
    server = Server(Config.load(None, settings))
    stop = threading.Event()
    running = [len(workers)]
    running_lock = threading.Lock()
    failures: list[str] = []

    def work_then_stop(work: Callable[[int, threading.Event], None]) -> None:
        """The server stops once every worker has returned (the traffic's only
        return on a stop or a broken connection; the set-up's when done)."""
        try:
            work(port, stop)
        except Exception as exc:  # a reply the traffic did not expect
            failures.append(f"{type(exc).__name__}: {exc}")
        finally:
            with running_lock:
                running[0] -= 1
                last = running[0] == 0
            if last and not stop.is_set():
                assert server.loop is not None
                with contextlib.suppress(RuntimeError):  # the loop closed: stopped already
                    server.loop.call_soon_threadsafe(server.node.request_shutdown)

    threads = [threading.Thread(target=work_then_stop, args=(work,)) for work in workers]

    def ready(_: int) -> None:
        assert server.loop is not None
        server.loop.call_later(RUN_S, server.node.request_shutdown)
        for thread in threads:
            thread.start()

    with FaultFS(root) as fs:
        cutter = plan(fs, server)
        fs.on_call = cutter
        try:
            asyncio.run(server.serve(ready))
        finally:
            fs.on_call = None
            stop.set()
            for thread in threads:
                if thread.ident is not None:  # started
                    thread.join(timeout=20)
    assert not any(t.is_alive() for t in threads), "a client did not stop"
    assert not failures, failures
    return cutter


# -- checking a cut -----------------------------------------------------------------------------


def check_as_cut(cut: Cut, done: subprocess.CompletedProcess[str]) -> set[str]:
    """`narad check`'s report `done` on the cut as the crash left it: only a crash's
    kinds. Returns the kinds found."""
    kinds = {m.group(1) for m in map(_PROBLEM_KIND.search, done.stdout.splitlines()) if m}
    assert done.returncode in (0, 1), f"{cut}: {done.stdout}{done.stderr}"
    assert kinds <= CRASH_KINDS, f"{cut}: {done.stdout}"
    assert (done.returncode == 0) == (not kinds), f"{cut}: {done.stdout}"
    return kinds


def check_opened(cut: Cut, events: list[tuple[str, bytes, bytes, Any]]) -> None:
    """The promises, through a server process on the cut, stopped cleanly after."""
    promised = Promises.of(events[: cut.answered], cut.durable)
    server = NaradProcess(cut.folder).start()
    try:
        check_streams(LAYOUT, server.client(), cut, promised)
        check_queues(LAYOUT, server.client(protocol=3), cut, promised)
    finally:
        status = server.stop()
    assert status == 0, f"{cut}: {server.log()}"


def check_cuts(cuts: list[Cut], events: list[tuple[str, bytes, bytes, Any]]) -> set[str]:
    """Check every cut (see the module doc); the kinds `narad check` found before the
    opens. The checks run two at a time beside the servers: each cut's first check is
    done before its server starts, its last one starts after its server stopped."""
    found: set[str] = set()
    with ThreadPoolExecutor(2) as pool:
        as_cut = [pool.submit(narad_check, cut.data) for cut in cuts]
        after: list[Future[subprocess.CompletedProcess[str]]] = []
        for cut, before in zip(cuts, as_cut, strict=True):
            found |= check_as_cut(cut, before.result())
            check_opened(cut, events)
            after.append(pool.submit(narad_check, cut.data))
        for cut, done in zip(cuts, after, strict=True):
            report = done.result()
            assert report.returncode == 0, f"{cut}, after a clean stop: {report.stdout}"
    return found


# -- the test -------------------------------------------------------------------------------------


def _workers(events: Events, run: int) -> list[Callable[[int, threading.Event], None]]:
    base = run * 10**8
    return [
        *(partial(producer, LAYOUT, events, base + i * 10**7) for i in range(2)),
        *(partial(consumer, LAYOUT, events, f"c{i}") for i in range(2)),
        *(partial(queue_worker, LAYOUT, events, base + (5 + i) * 10**7) for i in range(2)),
        partial(trimmer, LAYOUT, events, base),
    ]


def _points(rng: random.Random, plan: Plan, run: int) -> list[tuple[int, str | None]]:
    """A run's cut points: the first NAMED_PER_RUN wait for a kind of call (taking
    NAMED_CALLS in turn across runs), the others are any call."""
    numbers = rng.sample(range(1, plan.calls), plan.cuts_per_run)
    first = run * NAMED_PER_RUN
    named = [NAMED_CALLS[(first + i) % len(NAMED_CALLS)] for i in range(NAMED_PER_RUN)]
    return [(n, named[i] if i < len(named) else None) for i, n in enumerate(numbers)]


@pytest.mark.slow
@pytest.mark.parametrize("policy", list(PLANS))
def test_power_cuts_under_traffic_keep_every_promise(tmp_path: Path, policy: str) -> None:
    plan = PLANS[policy]
    rng = random.Random(f"{SEED} {policy}")
    root = tmp_path / "live"
    events = Events()
    folders = (tmp_path / f"cut{i:02d}" for i in range(plan.runs * plan.cuts_per_run))
    setting_up = [lambda port, stop: set_up(LAYOUT, port)]
    run_server(root, policy, events, lambda fs, server: None, setting_up)
    cuts: list[Cut] = []
    for run in range(plan.runs):

        def hook(fs: FaultFS, server: Server, run: int = run) -> Cutter:
            points = _points(rng, plan, run)
            return Cutter(fs, server, events, points, folders, rng.getrandbits(32), run, policy)

        cutter = run_server(root, policy, events, hook, _workers(events, run))
        assert cutter is not None
        cuts += cutter.cuts
    everything = list(events.items)
    assert len(cuts) >= plan.runs * plan.cuts_per_run * 3 // 4, [str(c) for c in cuts]
    kinds = {kind for kind, *_ in everything}
    assert {"add", "deliver", "acked", "trimmed", "push", "pop", "q-acked"} <= kinds, kinds
    calls = {cut.call for cut in cuts}
    assert set(NAMED_CALLS) <= calls, calls
    # The promises grow with the traffic: most cuts promise more than the first one.
    assert sum(c.durable > cuts[0].durable for c in cuts) >= len(cuts) // 2, cuts
    found = check_cuts(cuts, everything)
    assert Kind.TORN_TAIL.value in found, found  # the crash's damage reaches the check
