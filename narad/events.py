"""The narrow interfaces through which the services above the keyspace (queues, held
back adds) reach what the node owns: key events, the commit barrier, timers.

They exist so that a service can be driven by a test through a real keyspace,
without a whole node, and so that each layer states what it needs of the one that
runs it. Key events are narad/keywatch.py's KeyWatch, the commit barrier
(narad/barrier.py) takes commit requests, and timers are the running event loop's
(narad/queues/service.py's RunningLoop).

Owned by the event loop thread.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Protocol


class KeyEvents(Protocol):
    """What happened to a key, told to whoever waits on it."""

    def written(self, db: int, key: bytes) -> None:
        """`key` was written: transactions watching it abort, sessions blocked there
        get another look."""

    def spoil(self, db: int, key: bytes) -> None:
        """`key` changed: transactions watching it abort (nobody is woken)."""

    def wake(self, db: int, key: bytes) -> None:
        """Something changed at `key`: sessions blocked there get another look."""


class Schedules(Protocol):
    """The commit barrier (narad/barrier.py), as far as asking for a commit goes."""

    def schedule(self) -> None:
        """Commit, and serve what waits, at the end of this event-loop iteration."""


class Commits(Schedules, Protocol):
    """What a service may ask of the node's commits (narad/node.py)."""

    def apply_held_back(self) -> None:
        """Apply the adds held back for a later commit, before anything reads them."""


class Timers(Protocol):
    """The event loop's clock, as far as a layer may set alarms on it."""

    def call_later(self, delay: float, callback: Callable[[], object]) -> asyncio.TimerHandle:
        """Run `callback` in `delay` seconds, unless the handle is cancelled first."""
