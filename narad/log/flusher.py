"""Group commit: one write and (under `fsync always`) one fsync per log for
everything appended since the last commit, shared by every waiting appender.

Owned by the event loop thread. Appenders buffer records with `Log.append`, then
either the caller runs `commit()` at a point of its choosing (the server does so once
per event-loop iteration, before any reply of that iteration leaves), or awaits
`flush(log)`, which schedules one commit for the end of the current loop iteration
and wakes every awaiting task when it is done.

What a finished commit promises, by policy (../DESIGN.md, "committed"):
- always: every buffered record of every noted log is durable.
- everysec / no: every buffered record is appended (in the file, maybe only in the
  page cache). Under everysec a background thread fsyncs written logs about once a
  second; under no, the OS decides.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
from dataclasses import dataclass

from narad.log.log import FsyncPolicy, Log, LogFailed

logger = logging.getLogger("narad.log")

EVERYSEC_INTERVAL_S = 1.0
SYNC_HELPERS_MAX = 3  # threads fsyncing the other logs of one commit (`always`)


def _sync_one(log: Log) -> bool | LogFailed:
    """Fsync `log`: whether an fsync was issued, or the failure."""
    try:
        return log.sync()
    except LogFailed as exc:
        return exc


@dataclass
class CommitStats:
    commits: int = 0  # commits that wrote something
    records: int = 0  # records those commits carried
    fsyncs: int = 0  # fsync calls issued for them (the everysec thread's included)


class GroupCommit:
    def __init__(self, policy: FsyncPolicy) -> None:
        self.policy = policy
        self.stats = CommitStats()
        self._dirty: dict[Log, None] = {}  # logs with buffered records, in first-touch order
        self._waiters: asyncio.Future[None] | None = None
        self._unsynced: set[Log] = set()  # everysec: logs written since the last fsync
        self._unsynced_lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        # `always`: helper threads that fsync the other logs of a commit (sync_logs).
        self._jobs: queue.SimpleQueue[Log | None] = queue.SimpleQueue()
        self._helped: queue.SimpleQueue[bool | LogFailed] = queue.SimpleQueue()
        self._helpers: list[threading.Thread] = []
        if policy is FsyncPolicy.EVERYSEC:
            self._start_everysec()

    def set_policy(self, policy: FsyncPolicy) -> None:
        """Commits from now on follow `policy` (CONFIG SET fsync). Leaving everysec,
        the background thread stops after fsyncing what it still owed; entering it,
        one starts. What earlier commits wrote is the caller's to fsync if the new
        policy promises more (Store.apply_settings)."""
        if policy is self.policy:
            return
        self._stop_everysec()
        self.policy = policy
        if policy is FsyncPolicy.EVERYSEC:
            self._start_everysec()

    def _start_everysec(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._everysec, name="narad-fsync", daemon=True)
        self._thread.start()

    def _stop_everysec(self) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None
            self.sync_written()

    def note(self, log: Log) -> None:
        """`log` has buffered records that the next commit must carry."""
        self._dirty[log] = None

    @property
    def pending(self) -> bool:
        return bool(self._dirty)

    def commit(self) -> list[Log]:
        """Write (and under `always` fsync) every noted log; return them.

        A log that fails raises LogFailed to the caller after the others are done,
        so one broken log does not hold back the rest.
        """
        logs = list(self._dirty)
        written, failed = self.write_noted()
        failed = self.sync_logs(written) or failed
        if failed is not None:
            raise failed
        return logs

    def write_noted(self) -> tuple[list[Log], LogFailed | None]:
        """The first half of a commit: one write per noted log. Returns the logs
        written and the first failure. Under `always` the caller must still make
        them durable (`commit` and the server's commit do so with `sync_logs`)."""
        logs = list(self._dirty)
        self._dirty.clear()
        failed: LogFailed | None = None
        written: list[Log] = []
        for log in logs:
            records = log.next_offset - log.written_end
            try:
                log.write()
            except LogFailed as exc:
                failed = failed or exc
                continue
            self.stats.records += records
            written.append(log)
        if written:
            self.stats.commits += 1
        if self.policy is FsyncPolicy.EVERYSEC:
            with self._unsynced_lock:
                self._unsynced.update(written)
        return written, failed

    def sync_logs(self, logs: list[Log]) -> LogFailed | None:
        """The second half of a commit under `always`: fsync `logs`; the first
        failure, if any (the other logs are still fsynced).

        The logs are fsynced concurrently: the caller takes the first, helper threads
        the others (a queue's commit touches its data log and its state log), so the
        filesystem can carry them in one journal commit instead of one after the
        other. The caller also takes any log no helper has picked up yet."""
        if self.policy is not FsyncPolicy.ALWAYS or not logs:
            return None
        if len(logs) == 1:
            try:
                if logs[0].sync():
                    self.stats.fsyncs += 1
            except LogFailed as exc:
                return exc
            return None
        jobs = self._jobs
        while len(self._helpers) < min(len(logs) - 1, SYNC_HELPERS_MAX):
            helper = threading.Thread(target=self._help, name="narad-fsync", daemon=True)
            helper.start()
            self._helpers.append(helper)
        for log in logs[1:]:
            jobs.put(log)
        outcomes: list[bool | LogFailed] = [_sync_one(logs[0])]
        helped = len(logs) - 1
        while True:  # what the helpers have not started, the caller does
            try:
                left = jobs.get_nowait()
            except queue.Empty:
                break
            if left is None:  # a helper's stop signal (close): leave it for them
                jobs.put(None)
                break
            outcomes.append(_sync_one(left))
            helped -= 1
        outcomes.extend(self._helped.get() for _ in range(helped))
        failed: LogFailed | None = None
        for outcome in outcomes:
            if outcome is True:
                self.stats.fsyncs += 1
            elif isinstance(outcome, LogFailed):
                failed = failed or outcome
        return failed

    def _help(self) -> None:
        """A helper thread: fsync the logs put in `_jobs` until told to stop."""
        while True:
            log = self._jobs.get()
            if log is None:
                return
            self._helped.put(_sync_one(log))

    async def flush(self, log: Log) -> None:
        """Wait until `log`'s buffered records are committed (see the module doc)."""
        self.note(log)
        if self._waiters is None:
            loop = asyncio.get_running_loop()
            self._waiters = loop.create_future()
            loop.call_soon(self._commit_and_wake)
        await asyncio.shield(self._waiters)

    def _commit_and_wake(self) -> None:
        waiters, self._waiters = self._waiters, None
        assert waiters is not None
        try:
            self.commit()
        except LogFailed as exc:
            waiters.set_exception(exc)
            return
        waiters.set_result(None)

    def _everysec(self) -> None:
        while not self._stop.wait(EVERYSEC_INTERVAL_S):
            self.sync_written()

    def sync_written(self) -> None:
        """Fsync every log written since the last call (the everysec duty)."""
        with self._unsynced_lock:
            logs, self._unsynced = self._unsynced, set()
        for log in logs:
            try:
                if log.sync():
                    self.stats.fsyncs += 1
            except LogFailed as exc:
                logger.error("background fsync failed: %s", exc)

    def close(self) -> None:
        """Stop the background threads (after a last fsync of what the everysec
        thread still owed)."""
        for _ in self._helpers:
            self._jobs.put(None)
        for helper in self._helpers:
            helper.join()
        self._helpers.clear()
        self._stop_everysec()
