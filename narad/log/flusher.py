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
from collections.abc import Callable
from dataclasses import dataclass

from narad.log.log import FsyncPolicy, Log, LogFailed

logger = logging.getLogger("narad.log")

EVERYSEC_INTERVAL_S = 1.0


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
        if policy is FsyncPolicy.EVERYSEC:
            self._thread = threading.Thread(target=self._everysec, name="narad-fsync", daemon=True)
            self._thread.start()

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
        them durable (`commit` does so inline, SyncPipeline on its thread)."""
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
        """The second half of an inline commit under `always`: fsync `logs`; the
        first failure, if any (the other logs are still fsynced)."""
        if self.policy is not FsyncPolicy.ALWAYS:
            return None
        failed: LogFailed | None = None
        for log in logs:
            try:
                if log.sync():
                    self.stats.fsyncs += 1
            except LogFailed as exc:
                failed = failed or exc
        return failed

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
        """Stop the background thread after a last fsync of what it still owed."""
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None
            self.sync_written()


class SyncPipeline:
    """Fsyncs written logs on a thread while the event loop goes on (`fsync always`).

    The loop thread writes a batch (GroupCommit.write_noted), then `submit`s the logs
    and gets a ticket; tickets are increasing. The thread fsyncs, coalescing every
    batch queued meanwhile into one fsync per log, then calls `on_done(ticket,
    failure)` on the loop thread: every log of that ticket and of every earlier one
    is durable, or `failure` says why not. So the loop keeps parsing and running
    commands during an fsync, and each fsync carries more records.

    Owned by the loop thread, except `_run`, which is the thread.
    """

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        on_done: Callable[[int, str | None], None],
        sync_logs: Callable[[list[Log]], LogFailed | None],
    ) -> None:
        self._loop = loop
        self._on_done = on_done
        self._sync_logs = sync_logs  # GroupCommit.sync_logs: fsyncs and counts them
        self._queue: queue.SimpleQueue[tuple[int, list[Log]] | None] = queue.SimpleQueue()
        self.issued = 0  # the last ticket handed out
        self.completed = 0  # the last ticket reported done (loop thread's view)
        self._thread = threading.Thread(target=self._run, name="narad-fsync", daemon=True)
        self._thread.start()

    @property
    def in_flight(self) -> bool:
        return self.completed < self.issued

    def submit(self, logs: list[Log]) -> int:
        self.issued += 1
        self._queue.put((self.issued, logs))
        return self.issued

    def done(self, ticket: int) -> None:
        """Called by the owner's on_done: the loop thread's record of progress."""
        self.completed = max(self.completed, ticket)

    def _run(self) -> None:
        stopping = False
        while not stopping:
            item = self._queue.get()
            if item is None:
                return
            ticket, logs = item
            batch = dict.fromkeys(logs)
            while True:  # coalesce what queued up during the last fsync
                try:
                    more = self._queue.get_nowait()
                except queue.Empty:
                    break
                if more is None:
                    stopping = True
                    break
                ticket = more[0]
                batch.update(dict.fromkeys(more[1]))
            failed = self._sync_logs(list(batch))
            failure = None if failed is None else str(failed)
            self._loop.call_soon_threadsafe(self._on_done, ticket, failure)

    def close(self) -> None:
        """Finish what was submitted and stop the thread (its last reports may not
        be delivered if the loop is no longer running)."""
        self._queue.put(None)
        self._thread.join()
