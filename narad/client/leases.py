"""`Leases`: keep deliveries in flight while something holds them.

The Celery and Dramatiq brokers hold deliveries that a framework has not yet acked
(waiting in a worker, or running) and must not let their visibility deadlines pass;
this renewer touches them in time. The Consumer of narad/client/consumer.py does the
same for its jobs, with a lost-claim signal to the handler.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import redis

from narad.client.calls import Caller
from narad.client.errors import StaleReceipt

# A delivery is touched once less than this share of its visibility is left.
RENEW_WHEN_LEFT = 1 / 3
TICK_S = 0.1


class Leases:
    """Unacked deliveries, each touched (Q.TOUCH, deadline = now + its visibility)
    once less than a third of its visibility is left, by one thread started with the
    first. A touch answering STALE drops the delivery (counted in `lost`): its
    deadline had passed and the message may be someone else's. Thread-safe."""

    def __init__(self, client: Caller) -> None:
        self.client = client
        self._lock = threading.Lock()
        # receipt -> [queue, deadline (monotonic s), visibility ms]
        self._held: dict[str, list[Any]] = {}
        self._thread: threading.Thread | None = None
        self._closed = threading.Event()
        self.touched = 0
        self.lost = 0

    def hold(self, queue: str, receipt: str, visibility_ms: int) -> None:
        with self._lock:
            self._held[receipt] = [queue, time.monotonic() + visibility_ms / 1000,
                                   visibility_ms]
            if self._thread is None:
                self._thread = threading.Thread(target=self._renew, daemon=True,
                                                name="narad-kombu-leases")
                self._thread.start()

    def release(self, receipt: str) -> tuple[str, int] | None:
        """Stop renewing; the delivery's (queue, visibility) if it was held."""
        with self._lock:
            held = self._held.pop(receipt, None)
        return None if held is None else (held[0], held[2])

    def queue_of(self, receipt: str) -> str | None:
        with self._lock:
            held = self._held.get(receipt)
        return None if held is None else str(held[0])

    def close(self) -> None:
        self._closed.set()

    def _renew(self) -> None:
        while not self._closed.wait(TICK_S):
            now = time.monotonic()
            with self._lock:
                due = [(r, h[0], h[2]) for r, h in self._held.items()
                       if h[1] - now <= h[2] / 1000 * RENEW_WHEN_LEFT]
            for receipt, queue, visibility_ms in due:
                try:
                    self.client.execute("Q.TOUCH", queue, receipt, visibility_ms)
                except StaleReceipt:
                    self.release(receipt)
                    self.lost += 1
                    continue
                except (redis.RedisError, OSError):
                    continue
                self.touched += 1
                with self._lock:
                    if receipt in self._held:
                        self._held[receipt][1] = time.monotonic() + visibility_ms / 1000
