"""The commit barrier: one per node, and the only way anything commits or any reply
leaves (docs/design.md, "Commit barrier"; docs/durability.md).

Every command read in an event-loop iteration runs at once and encodes its reply into
its client's output buffer; the client is registered here (`wants_send`). At the end
of the iteration (`end_of_iteration`, scheduled by the first registration) the hooks
that come before a commit run (held-back adds are applied, queue consumers and
blocked clients served), then everything written becomes one commit of the node's
journal, and each registered client's replies are sealed with the journal position
that commit ends at: they leave once that position is *released*, and never before.

Without replicas to wait for, a position is released as soon as its commit returns
(durable under `fsync always`, appended under `everysec` and `no`), so replies leave
at the end of their iteration. With `min-replicas-to-ack`, a position is released
once that many replicas hold it too (narad/replication/leader.py calls `release`
as their acks come), while commands go on running and their replies wait, each for
its own position; replies held too long answer NOREPL instead (`refuse_held`).

Held-back adds (narad/commands/deferred.py) live here too: `settle` applies them
before anything runs that could see or change their streams.

A failed commit lets no reply through: the clients waiting on it are closed, and the
`commit_failed` hook stops the server (the journal refuses every commit from then on).

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

if TYPE_CHECKING:
    from narad.client import Client
    from narad.commands.deferred import DeferredAdds
    from narad.keyspace import Keyspace


class Hooks(Protocol):
    """What the barrier asks of the server around a commit."""

    def before_commit(self) -> None:
        """Serve what may write before the commit (consumers, blocked clients)."""

    def after_commit(self, committed: bool) -> None:
        """Upkeep once the commit is done (fan-out copies due, and the like)."""

    def commit_failed(self, why: str, clients_closed: int) -> None:
        """The journal refused a commit (the clients waiting on it are closed): the
        node must stop."""


class CommitBarrier:
    def __init__(self, keyspace: Keyspace, hooks: Hooks) -> None:
        self.keyspace = keyspace
        self.hooks = hooks
        self.deferred: DeferredAdds | None = None  # adds held back until `settle`
        self.released = 0  # replies sealed at this position or below may leave
        # Whether a position is released as soon as its commit returns: so without
        # replicas to wait for; with them, once a quorum acked it (and `release`
        # comes from their acks otherwise).
        self.released_at_commit: Callable[[int], bool] = lambda position: True
        self._writers: dict[Client, None] = {}  # clients with replies of this iteration
        # (position, client, replies, when sealed), in position order
        self._held: deque[tuple[int, Client, bytearray, float]] = deque()
        self._scheduled = False
        self._stopped = False  # the keyspace is closing: nothing commits any more

    # -- registering replies ----------------------------------------------------------

    def wants_send(self, client: Client) -> None:
        """`client` has replies for the end of this iteration."""
        self._writers[client] = None
        if not self._scheduled:
            self.schedule()

    def forget(self, client: Client) -> None:
        """`client` is gone: nothing of it is sent."""
        self._writers.pop(client, None)

    def stop(self) -> None:
        """The server is stopping and its keyspace closing: no end of iteration runs
        from now on (a client closed during the stop must not start one)."""
        self._stopped = True

    def schedule(self) -> None:
        """Run `end_of_iteration` once the loop has run what is ready now."""
        if not self._scheduled and not self._stopped:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self.end_of_iteration)

    def settle(self) -> None:
        """Add the entries held back in `deferred` (narad/commands/deferred.py)."""
        deferred, self.deferred = self.deferred, None
        if deferred is not None:
            deferred.apply()

    # -- committing -------------------------------------------------------------------

    def end_of_iteration(self) -> None:
        """Serve, commit, and seal every reply of the iteration with its position."""
        self._scheduled = False
        if self.deferred is not None:
            self.settle()
        self.hooks.before_commit()
        if self.deferred is not None:  # taken by the clients just served
            self.settle()
        # Every entry taken before this point is added and its client registered:
        # this commit carries it, and its reply is sealed with its position.
        writers, self._writers = self._writers, {}
        try:
            # Under `fsync always` the fsync runs right here, on the loop, as Redis
            # does before it sleeps: requests that arrive meanwhile wait in the
            # sockets and make the next batch larger. (An fsync thread let the loop
            # go on, but its hand-offs and wake-ups cost more CPU per message than
            # they saved: bench/README.md.)
            committed = self.keyspace.journal.commit()
        except LogFailed as exc:
            self._fail(list(writers), str(exc))
            return
        if committed:
            self.keyspace.last_commit_s = int(time.time())
        position = self.keyspace.journal.position
        if position <= self.released:  # a read-only iteration: nothing to wait for
            for client in writers:
                client.send()
                client.reads_data = False
        else:
            now = time.monotonic()
            for client in writers:
                if client.reads_data or client.held:
                    client.held += 1
                    self._held.append((position, client, client.take_out(), now))
                else:  # replies that tell nothing of the keyspace, and none before them
                    client.send()
                client.reads_data = False
            if self.released_at_commit(position):
                self.release(position)
        self.hooks.after_commit(committed)

    def release(self, position: int) -> None:
        """Replies sealed at `position` or below may leave now."""
        if position > self.released:
            self.released = position
        held = self._held
        while held and held[0][0] <= self.released:
            _, client, data, _ = held.popleft()
            client.held -= 1
            client.write(data)

    def refuse_held(self, sealed_before: float, error: bytes) -> int:
        """Replies sealed before monotonic time `sealed_before` and not released yet
        are each answered `error` (a whole RESP error line) instead; how many."""
        held = self._held
        refused = 0
        while held and held[0][3] < sealed_before:
            _, client, data, _ = held.popleft()
            client.held -= 1
            count = count_replies(data)
            client.write(error * count)
            refused += count
        return refused

    def drop_held(self) -> int:
        """This node stops leading: replies not released yet are never sent, and
        their connections close (not acknowledged); how many connections."""
        held = [client for _, client, _, _ in self._held]
        self._held.clear()
        for client in held:
            client.out.clear()
            client.close()
        return len(held)

    def commit_now(self) -> None:
        """Commit what was written so far and make every commit durable, inline (SAVE,
        SHUTDOWN): the replies still leave at the end of the iteration. Raises
        LogFailed when the journal refuses; the end of the iteration then fails the
        commit for the replies waiting on it."""
        self.keyspace.commit()

    def _fail(self, clients: list[Client], why: str) -> None:
        """A commit failed: the replies waiting on it, and those held for a position
        not yet released, must not claim success, so their connections are closed
        without them."""
        held = [client for _, client, _, _ in self._held]
        self._held.clear()
        for client in [*clients, *held]:
            client.out.clear()
            client.close()
        self.hooks.commit_failed(why, len(clients) + len(held))


def count_replies(data: bytes | bytearray) -> int:
    """How many whole replies (push frames included) encoded `data` holds."""
    reader = hiredis.Reader(encoding=None)
    reader.feed(bytes(data))
    count = 0
    while reader.gets() is not False:
        count += 1
    return count
