"""The commit barrier: one per node, and the only way anything commits or any reply
leaves (docs/design.md, "Commit barrier"; docs/durability.md).

Every command read in an event-loop iteration runs at once and encodes its reply into
its session's output buffer; the session (a `ReplySink`) is registered here
(`wants_send`). The first registration schedules the node's end of the iteration
(narad/node.py's `Node.end_of_iteration`, handed in as `end_of_iteration`), which
applies held-back adds and serves queue consumers and blocked sessions, then calls
`commit`: everything written becomes one commit of the node's journal, and each
registered sink's replies are *sealed* with the journal position that commit ends
at: they leave once that position is *released*, and never before.

Without replicas to wait for, a position is released as soon as its commit returns
(durable under `fsync always`, appended under `everysec` and `no`), so replies leave
at the end of their iteration. With `min-replicas-to-ack`, a position is released
once that many replicas hold it too (narad/replication/leader.py calls `release`
as their acks come), while commands go on running and their replies wait, each for
its own position; replies sealed too long answer NOREPL instead (`refuse_sealed`).

A failed commit lets no reply through: the connections waiting on it are closed, and
`commit` raises CommitFailed, on which the node stops (the journal refuses every
commit from then on). But a commit that meets a transient error (no room, no
descriptor) is left unfinished in the journal's write error state
(narad/log/journal.py): its replies, and those of every later command that reads the
keyspace (it may have seen what the commit carries), stay sealed with the position it
will end at, released once the journal finishes it. `write_error_changed` is called
whenever the journal enters, leaves or changes that state (the node then refuses
writes: narad/replication/role.py).

Owned by the event loop thread.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

import hiredis

from narad.log import LogFailed
from narad.log.log import WriteError

if TYPE_CHECKING:
    from narad.keyspace import Keyspace


class ReplySink(Protocol):
    """A session as the barrier seals and releases its replies (narad/node.py)."""

    out: bytearray  # replies of this iteration, not yet sealed
    # Whether a command since the last end of iteration read or wrote the keyspace
    # (its replies then wait for their commit's release), and how many of its reply
    # batches are sealed here, waiting for their position's release.
    reads_data: bool
    sealed: int

    def send(self) -> None:
        """Hand the output buffer to the socket now."""

    def take_out(self) -> bytearray:
        """The output buffer, emptied."""

    def write(self, data: bytes | bytearray) -> None:
        """Write `data` to the socket now."""

    def close(self) -> None: ...


class CommitFailed(Exception):
    """The journal refused a commit; `closed` connections waited on it and are closed."""

    def __init__(self, why: str, closed: int) -> None:
        super().__init__(why)
        self.why = why
        self.closed = closed


class CommitBarrier:
    def __init__(self, keyspace: Keyspace, end_of_iteration: Callable[[], None]) -> None:
        self.keyspace = keyspace
        self.end_of_iteration = end_of_iteration  # run once per iteration with replies
        self.released = 0  # replies sealed at this position or below may leave
        # Whether a position is released as soon as its commit returns: so without
        # replicas to wait for; with them, once a quorum acked it (and `release`
        # comes from their acks otherwise).
        self.released_at_commit: Callable[[int], bool] = lambda position: True
        self._writers: dict[ReplySink, None] = {}  # sinks with replies of this iteration
        # (position, sink, replies, when sealed), in position order
        self._sealed: deque[tuple[int, ReplySink, bytearray, float]] = deque()
        self.scheduled = False  # an end of the iteration is due
        self._stopped = False  # the keyspace is closing: nothing commits any more
        # Called when the journal's write error state changes (see the module doc).
        self.write_error_changed: Callable[[], None] = lambda: None
        self._write_error: str | None = None  # the state as last seen

    # -- registering replies ----------------------------------------------------------

    def wants_send(self, sink: ReplySink) -> None:
        """`sink` has replies for the end of this iteration."""
        self._writers[sink] = None
        if not self.scheduled:
            self.schedule()

    def forget(self, sink: ReplySink) -> None:
        """`sink` is gone: nothing of it is sent."""
        self._writers.pop(sink, None)

    def stop(self) -> None:
        """The server is stopping and its keyspace closing: no end of iteration runs
        from now on (a client closed during the stop must not start one)."""
        self._stopped = True

    def schedule(self) -> None:
        """Have the loop run `end_of_iteration` once it has run what is ready now (the
        loop calls it: the barrier never calls up into the node itself)."""
        if not self.scheduled and not self._stopped:
            self.scheduled = True
            asyncio.get_running_loop().call_soon(self.end_of_iteration)

    # -- committing -------------------------------------------------------------------

    def commit(self) -> bool:
        """Commit everything written so far as one journal commit, and seal every
        registered sink's replies with its position (or send those that wait on
        nothing); whether there was anything to commit. Raises CommitFailed."""
        # Every entry taken before this point is added and its sink registered:
        # this commit carries it, and its reply is sealed with its position.
        writers, self._writers = self._writers, {}
        journal = self.keyspace.journal
        try:
            # Under `fsync always` the fsync runs right here, on the loop, as Redis
            # does before it sleeps: requests that arrive meanwhile wait in the
            # sockets and make the next batch larger. (An fsync thread let the loop
            # go on, but its hand-offs and wake-ups cost more CPU per message than
            # they saved: bench/README.md.)
            committed = journal.commit()
        except WriteError:  # left unfinished: its replies wait for it (module doc)
            committed = False
        except LogFailed as exc:
            raise CommitFailed(str(exc), self._fail(list(writers))) from None
        if journal.write_error != self._write_error:
            self._write_error = journal.write_error
            self.write_error_changed()
        if committed:
            self.keyspace.last_commit_s = int(time.time())
        position = journal.end
        if position <= self.released:  # a read-only iteration: nothing to wait for
            for sink in writers:
                sink.send()
                sink.reads_data = False
        else:
            now = time.monotonic()
            for sink in writers:
                if sink.reads_data or sink.sealed:
                    sink.sealed += 1
                    self._sealed.append((position, sink, sink.take_out(), now))
                else:  # replies that tell nothing of the keyspace, and none before them
                    sink.send()
                sink.reads_data = False
            if self.released_at_commit(position) and not journal.unfinished:
                self.release(position)
        return committed

    def release(self, position: int) -> None:
        """Replies sealed at `position` or below may leave now."""
        if position > self.released:
            self.released = position
        sealed = self._sealed
        while sealed and sealed[0][0] <= self.released:
            _, sink, data, _ = sealed.popleft()
            sink.sealed -= 1
            sink.write(data)

    def refuse_sealed(self, sealed_before: float, error: bytes) -> int:
        """Replies sealed before monotonic time `sealed_before` and not released yet
        are each answered `error` (a whole RESP error line) instead; how many."""
        sealed = self._sealed
        refused = 0
        while sealed and sealed[0][3] < sealed_before:
            _, sink, data, _ = sealed.popleft()
            sink.sealed -= 1
            count = count_replies(data)
            sink.write(error * count)
            refused += count
        return refused

    def drop_sealed(self) -> int:
        """This node stops leading: replies not released yet are never sent, and
        their connections close (not acknowledged); how many connections."""
        sinks = [sink for _, sink, _, _ in self._sealed]
        self._sealed.clear()
        for sink in sinks:
            sink.out.clear()
            sink.close()
        return len(sinks)

    def commit_now(self) -> None:
        """Commit what was written so far and make every commit durable, inline (SAVE,
        SHUTDOWN): the replies still leave at the end of the iteration. Raises
        LogFailed when the journal refuses; the end of the iteration then fails the
        commit for the replies waiting on it."""
        self.keyspace.commit()

    def _fail(self, sinks: list[ReplySink]) -> int:
        """A commit failed: the replies waiting on it, and those sealed for a position
        not yet released, must not claim success, so their connections are closed
        without them; how many."""
        sealed = [sink for _, sink, _, _ in self._sealed]
        self._sealed.clear()
        for sink in [*sinks, *sealed]:
            sink.out.clear()
            sink.close()
        return len(sinks) + len(sealed)


def count_replies(data: bytes | bytearray) -> int:
    """How many whole replies (push frames included) encoded `data` holds."""
    reader = hiredis.Reader(encoding=None)
    reader.feed(bytes(data))
    count = 0
    while reader.gets() is not False:
        count += 1
    return count
