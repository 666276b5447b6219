"""The narrow interfaces through which the layers above the keyspace (queues, command
handlers) reach what the server owns: key events, the commit barrier, timers.

They exist so that a queue service or a handler can be driven by a test through a
real keyspace and the real dispatcher, without a whole server, and so that each
layer states what it needs of the one that runs it. The server gives its key events,
the commit barrier (narad/barrier.py) takes commit requests, and timers are the
running event loop's (narad/queues/service.py's RunningLoop).

Owned by the event loop thread.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Protocol


class KeyEvents(Protocol):
    """What happened to a key, told to whoever waits on it."""

    def key_written(self, db: int, key: bytes) -> None:
        """A command wrote `key`: transactions watching it abort, blocked readers and
        push consumers there get another look."""

    def key_touched(self, db: int, key: bytes) -> None:
        """`key` changed: transactions watching it abort (nobody is woken)."""

    def signal_key(self, db: int, key: bytes) -> None:
        """Something changed at `key`: blocked readers there get another look."""


class Commits(Protocol):
    """What may be asked of the commit barrier (narad/barrier.py)."""

    def schedule(self) -> None:
        """Commit, and serve what waits, at the end of this event-loop iteration."""

    def settle(self) -> None:
        """Apply the adds held back for a later commit, before anything reads them."""


class Timers(Protocol):
    """The event loop's clock, as far as a layer may set alarms on it."""

    def call_later(self, delay: float, callback: Callable[[], object]) -> asyncio.TimerHandle:
        """Run `callback` in `delay` seconds, unless the handle is cancelled first."""
