"""`Caller`: what a Queue needs of a client (narad/client/connect.py's Client is one).

The queue, producer, consumer and push modules reach the network only through this
interface, so they do not import the module that builds clients."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, TypeVar

import redis

T = TypeVar("T")


class Caller(Protocol):
    def execute(self, *args: Any, retry: bool = True) -> Any:
        """Run one command, retried across failover when `retry` (connect.py)."""

    def call(self, run: Callable[[redis.Redis], T], *, retry: bool = True) -> T:
        """Run `run(redis_client)` with the same retry."""

    def new_connection(self) -> redis.Connection:
        """A connection of its own to the leader (push mode)."""
