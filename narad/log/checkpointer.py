"""Journal checkpoints: the position up to which every log is durable by itself.

A checkpoint at position P (docs/log-format.md, "The journal checkpoint") promises:
every log holds, durably in its own files, every record of every commit before P, and
`ends` says where each log ended at P. Recovery replays the journal from P
(narad/log/recovery.py); journal segments wholly before P are deleted.

Taking one: on the loop thread, right after a commit (so no log holds records the
journal has not taken), every log's journaled records are written to its file and P
and the ends are read; then a thread fsyncs every log the commits since the last
checkpoint touched, and the journal up to P, writes the start checkpoints of the start
moves those commits carried, and writes the checkpoint file (atomically: old or new
after a crash, never a mix). Back on the loop, the segments below the moved starts and
the journal segments before the one holding P are deleted, but for the newest
`backlog_bytes` of the journal (repl-backlog-size), kept for replicas. Meanwhile the
loop goes on committing: the thread only fsyncs, which Log allows from another
thread. A failure leaves the previous checkpoint in force and the logs it did not
cover are tried again next time; a log that cannot write its records (the write error
state, narad/log/journal.py) puts the checkpoint off for RETRY_S, and none is taken
while a commit is unfinished (its records would count as held at a position before
it).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from narad.log import checkpoint
from narad.log.journal import RETRY_S, Journal
from narad.log.log import Log, LogFailed, WriteError
from narad.log.opening import START_CHECKPOINT
from narad.metrics import SummedHistogram

logger = logging.getLogger("narad.log")

CHECKPOINT_FILE = "checkpoint"

# What replicas still read (narad/replication/leader.py), which no checkpoint may
# delete: the journal from this position on (None: no more than the backlog), and
# whether a full copy is reading the logs as of a past position (then every log
# segment stays, and the folders of deleted streams: Keyspace.remove_doomed).
KeptForReplicas = Callable[[], tuple[int | None, bool]]


@dataclass
class Checkpoint:
    position: int  # commits before it are in every log durably
    ends: dict[int, int] = field(default_factory=dict)  # log key -> its end at `position`
    # No checkpoint was ever taken (a new data dir, or one from before the journal):
    # the logs as they are on disk count as durable, whatever ends they have.
    trust_logs: bool = False


def read(journal_path: Path) -> Checkpoint | None:
    """The journal's checkpoint, or None when missing; raises ValueError when its
    lines are not a checkpoint's (a damaged file reads as None: checkpoint.read)."""
    lines = checkpoint.read(journal_path / CHECKPOINT_FILE)
    if lines is None:
        return None
    if not lines or not lines[0].startswith("position "):
        raise ValueError("the first line is not 'position <n>'")
    found = Checkpoint(int(lines[0].split()[1]))
    for line in lines[1:]:
        kind, key, end = line.split()
        if kind != "log":
            raise ValueError(f"unknown line {line!r}")
        found.ends[int(key)] = int(end)
    return found


def write(journal_path: Path, found: Checkpoint) -> None:
    lines = [f"position {found.position}"]
    lines += [f"log {key} {end}" for key, end in sorted(found.ends.items())]
    checkpoint.write(journal_path / CHECKPOINT_FILE, lines)


def rebase(journal_path: Path, ends: dict[int, int]) -> None:
    """Record new ends for logs that a repair edited, in the checkpoint in force; only
    sound when the journal holds no commit after it (narad/repair.py's checkpoint_at_end)."""
    found = read(journal_path)
    if found is None:
        raise ValueError(f"{journal_path}: no journal checkpoint to rebase")
    found.ends.update(ends)
    write(journal_path, found)


@dataclass
class _Work:
    """One checkpoint in the making: what the thread fsyncs and records."""

    taken: Checkpoint
    logs: list[Log]  # logs to fsync
    starts: list[tuple[Log, int]]  # start moves to make durable
    failure: str | None = None
    finished: bool = False  # the loop's half ran


@dataclass
class CheckpointStats:
    checkpoints: int = 0
    log_fsyncs: int = 0  # fsyncs of logs (not of the journal) the checkpoints issued
    last_s: float = 0.0  # seconds the last one took, fsyncs included
    # Every checkpoint's duration in ns, failed ones too (narad/collectors.py's
    # narad_checkpoint_duration_seconds); recorded on the checkpoint's thread.
    durations: SummedHistogram = field(default_factory=SummedHistogram)


class Checkpointer:
    def __init__(
        self, journal: Journal, last: Checkpoint, kept: KeptForReplicas = lambda: (None, False)
    ) -> None:
        self.journal = journal
        self.last = last  # the checkpoint in force
        self.kept = kept
        # Logs whose durable start moved while a full copy read them: their segments
        # below it go once no copy does.
        self._deletions_kept: dict[Log, None] = {}
        self.stats = CheckpointStats()
        self._bytes_at = journal.stats.bytes  # journal bytes written at the last one
        self._time_at = time.monotonic()
        self._thread: threading.Thread | None = None
        self._work: _Work | None = None  # the checkpoint the thread is making
        self._put_off_until = 0.0  # a log could not write its records: not before
        # Journal bytes kept behind the end beyond what recovery needs: the backlog
        # replicas catch up from (repl-backlog-size).
        self.backlog_bytes = 0

    @property
    def running(self) -> bool:
        return self._thread is not None

    def due(self, bytes_max: int, seconds_max: float) -> bool:
        """Whether commits since the last checkpoint make one due: enough journal or
        time since it, or a start move waiting to delete segments."""
        if self._thread is not None or self.journal.position == self.last.position:
            return False
        if self.journal.unfinished or time.monotonic() < self._put_off_until:
            return False
        if self.journal.starts_waiting:
            return True
        written = self.journal.stats.bytes - self._bytes_at
        return written >= bytes_max or time.monotonic() - self._time_at >= seconds_max

    def _take(self) -> _Work:
        journal = self.journal
        assert not journal.pending, "a checkpoint is taken between commits"
        journal.write_behind()
        logs = list(journal.touched)
        for log in logs:  # recovery's records too: only what is in the file is fsynced
            if log.unwritten_bytes and not journal.write_log(log):
                raise WriteError(log.write_error or f"{log.path} cannot be written")
        ends = {key: log.journaled_end for key, log in journal.logs.items()}
        taken = Checkpoint(journal.position, ends)
        journal.touched = {}
        journal.starts_waiting = False
        starts = [(log, log.start_offset) for log in logs if log.start_offset > log.durable_start]
        self._bytes_at = journal.stats.bytes
        self._time_at = time.monotonic()
        return _Work(taken, logs, starts)

    def _make_durable(self, work: _Work) -> None:
        """The thread's half (see the module doc); sets `work.failure` on failure."""
        began = time.monotonic()
        try:
            for log in work.logs:  # on a thread (but at open and close): own descriptors
                try:
                    if log.sync(own_fd=True):
                        self.stats.log_fsyncs += 1
                except (LogFailed, OSError):
                    if not log.closed:  # a deleted stream's log: nothing to keep
                        raise
            self.journal.log.sync(own_fd=True)
            for log, start in work.starts:
                try:
                    checkpoint.write(log.path / START_CHECKPOINT, [f"start {start}"])
                except OSError:
                    if not log.closed:
                        raise
            write(self.journal.path, work.taken)
        except (LogFailed, OSError) as exc:
            work.failure = str(exc)
        self.stats.last_s = took = time.monotonic() - began
        self.stats.durations.record(int(took * 1e9))

    def _finish(self, work: _Work) -> None:
        """The loop's half: the deletions the new checkpoint allows. Runs once."""
        if work.finished:
            return
        work.finished = True
        self._thread = self._work = None
        if work.failure is not None:
            logger.error(
                "checkpoint at journal position %d failed: %s; the one at %d stays in force",
                work.taken.position, work.failure, self.last.position,
            )
            for log in work.logs:
                if not log.closed:
                    self.journal.touched[log] = None
            return
        self.last = work.taken
        self.stats.checkpoints += 1
        journal_kept, copying = self.kept()
        for log, start in work.starts:
            if not log.closed and start > log.durable_start:
                log.durable_start = start
                self._deletions_kept[log] = None
        if not copying:
            for log in self._deletions_kept:
                if not log.closed:
                    log.apply_retention(start_only=True)
            self._deletions_kept.clear()
        # The journal keeps the segment that holds the checkpoint's position whole:
        # the commits before it stay readable (a truncation may need them) until a
        # later checkpoint lies in a later segment; and what replicas still read.
        journal = self.journal.log
        position = work.taken.position
        keep = max(s.base_offset for s in journal.segments if s.base_offset <= position)
        keep = min(keep, self._backlog_start())
        if journal_kept is not None:
            keep = min(keep, journal_kept)
        try:
            journal.set_start(keep)
        except OSError as exc:  # the segments stay until a later checkpoint
            logger.warning("journal start not moved to %d: %s", keep, exc)
        journal.apply_retention(start_only=True)
        logger.debug(
            "checkpoint at journal position %d: %d logs fsynced in %.3f s",
            work.taken.position, len(work.logs), self.stats.last_s,
        )

    def _backlog_start(self) -> int:
        """The first segment to keep so that at least `backlog_bytes` of the journal's
        newest commits stay for replicas (narad/replication/leader.py sends them)."""
        segments = self.journal.log.segments
        kept = 0
        for seg in reversed(segments):
            kept += seg.size
            if kept >= self.backlog_bytes:
                return seg.base_offset
        return segments[0].base_offset

    def begin(self, loop: asyncio.AbstractEventLoop) -> None:
        """Start a checkpoint; its fsyncs run on a thread (see the module doc)."""
        if self._thread is not None:
            return
        try:
            work = self._work = self._take()
        except WriteError as exc:
            logger.info("checkpoint put off: %s", exc)
            self._put_off_until = time.monotonic() + RETRY_S
            return

        def run() -> None:
            self._make_durable(work)
            loop.call_soon_threadsafe(self._finish, work)

        self._thread = threading.Thread(target=run, name="narad-checkpoint", daemon=True)
        self._thread.start()

    def wait(self) -> None:
        """Let a running checkpoint finish (its last half runs here, not on the loop)."""
        thread, work = self._thread, self._work
        if thread is not None and work is not None:
            thread.join()
            self._finish(work)  # the call handed to the loop then does nothing

    def run_now(self) -> None:
        """Take a checkpoint inline (at open and at close); raises LogFailed when it
        cannot be made."""
        self.wait()
        work = self._take()
        self._make_durable(work)
        self._finish(work)
        if work.failure is not None:
            raise LogFailed(f"checkpoint failed: {work.failure}")
