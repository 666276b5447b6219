"""Who is told when a key is written: transactions that WATCH it, and sessions
blocked on it (XREAD BLOCK, XREADGROUP BLOCK, Q.POP ... BLOCK, WAIT).

The words, each with one meaning in Narad's code:
- *written*: a command changed `key` (`KeyWatch.written`): its WATCHers' transactions
  will abort, and the sessions blocked there are woken. (The node also tells the
  queue service's push consumers: narad/node.py's `Node.written`.)
- *spoiled*: a WATCHed key changed without waking anyone (`spoil`): a key whose
  schema changed, say; its WATCHers' transactions will abort.
- *woken*: blocked sessions at a key get another look at the end of the iteration
  (`wake`, then `serve_woken` from the commit barrier's hook), as Redis 7.0 serves
  them: key by key in the order the keys were woken, on each key in the order its
  sessions blocked, each session retrying for that key.

Owned by the event loop thread.
"""

from __future__ import annotations

import contextlib
from collections import deque
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any, Protocol

from narad.events import Schedules
from narad.resp import NULL_ARRAY

Key = tuple[int, bytes]  # (db, key)


@dataclass
class Block:
    """A handler's answer "not yet": wait on `keys` (db, key) until `retry(key)`, called
    with a key of `keys` that was woken, returns a reply (not None), or until
    `timeout_ms` passes (0: forever), then reply `timeout_reply` (called for the reply
    when it is callable). `retry` may raise CommandError when what it waits on is
    gone."""

    keys: list[Key]
    timeout_ms: int
    retry: Callable[[bytes], Any]
    timeout_reply: Any = NULL_ARRAY
    # Blocks with the same token wait for the same thing (Q.POP on one queue): once
    # one's retry finds nothing, the others' would too, and are not tried in that pass.
    alike: Hashable | None = None


class Watcher(Protocol):
    """A session as far as WATCH and blocking go (narad/node.py's Session)."""

    watched: set[Key]
    watch_dirty: bool  # a watched key was written since WATCH
    blocked: Block | None

    def retry_blocked(self, key: bytes) -> bool:
        """Try the blocked command again for its woken `key`; whether it replied."""


class KeyWatch:
    """WATCHers and blocked sessions by key. One per node."""

    def __init__(self, commits: Schedules) -> None:
        self.commits = commits
        self.watchers: dict[Key, set[Watcher]] = {}
        self.waiters: dict[Key, deque[Watcher]] = {}
        self.woken: dict[Key, None] = {}  # in the order woken

    # -- what happened to a key (narad/events.py's KeyEvents) --------------------------

    def written(self, db: int, key: bytes) -> None:
        """A command wrote `key`: WATCHers abort, blocked sessions get another look."""
        if self.watchers:
            self.spoil(db, key)
        if self.waiters:
            self.wake(db, key)

    def spoil(self, db: int, key: bytes) -> None:
        """`key` changed: transactions watching it will abort (nobody is woken)."""
        for session in self.watchers.get((db, key), ()):
            session.watch_dirty = True

    def wake(self, db: int, key: bytes) -> None:
        """Something changed at `key`: sessions blocked there get another look."""
        if (db, key) in self.waiters:
            self.woken[(db, key)] = None
            self.commits.schedule()

    # -- WATCH --------------------------------------------------------------------------

    def watch(self, session: Watcher, db: int, key: bytes) -> None:
        entry = (db, key)
        if entry not in session.watched:
            session.watched.add(entry)
            self.watchers.setdefault(entry, set()).add(session)

    def unwatch_all(self, session: Watcher) -> None:
        watchers = self.watchers
        for entry in session.watched:
            sessions = watchers.get(entry)
            if sessions is not None:
                sessions.discard(session)
                if not sessions:
                    del watchers[entry]
        session.watched.clear()
        session.watch_dirty = False

    # -- blocking -------------------------------------------------------------------------

    def add_waiter(self, session: Watcher, key: Key) -> None:
        self.waiters.setdefault(key, deque()).append(session)

    def remove_waiter(self, session: Watcher, key: Key) -> None:
        queue = self.waiters.get(key)
        if queue is not None:
            with contextlib.suppress(ValueError):
                queue.remove(session)
            if not queue:
                del self.waiters[key]

    def serve_woken(self) -> None:
        """Blocked sessions get another look, in Redis 7.0's order (module doc)."""
        while self.woken:
            woken, self.woken = self.woken, {}
            found_nothing: set[Hashable] = set()
            for key in woken:
                for session in list(self.waiters.get(key, ())):
                    block = session.blocked
                    # (A session served for an earlier key may be blocked again on others.)
                    if block is None or block.alike in found_nothing or key not in block.keys:
                        continue
                    if not session.retry_blocked(key[1]) and block.alike is not None:
                        found_nothing.add(block.alike)
