"""`AckBatcher`: Q.ACKs handed over by any thread, sent by one thread in batches.

A framework that acks one message at a time from one thread (Dramatiq's consumer
thread, Celery's main loop) would otherwise wait for each ack's commit before it
takes the next message. Here `ack()` returns at once; the sender thread sends every
receipt waiting for a queue in one Q.ACK (up to MAX_BATCH), so acks that arrive while
one commit is under way share the next one. Nothing waits for a timer: an ack alone
is sent at once.

Contract: an ack handed over is sent, through the client's retry, unless the process
dies first (then its message comes back at its deadline: at least once). `done` is
called with None once the ack is answered, or with the exception (StaleReceipt: the
delivery had ended and the message is someone else's). A batch refused with STALE
is sent again one receipt at a time, so that one stale receipt does not hold back
the others. `flush()` waits until everything handed over so far was answered.
"""

from __future__ import annotations

import logging
import queue as stdlib_queue
import threading
from collections import defaultdict
from collections.abc import Callable

import redis

from narad.client.calls import Caller
from narad.client.errors import StaleReceipt

logger = logging.getLogger("narad.client")

MAX_BATCH = 1000
Done = Callable[[Exception | None], object]


class AckBatcher:
    def __init__(self, client: Caller) -> None:
        self.client = client
        self._waiting: stdlib_queue.Queue[tuple[str, str, Done | None] | None] = (
            stdlib_queue.Queue())
        self._pending = 0
        self._idle = threading.Condition()
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()

    def ack(self, queue: str, receipt: str, done: Done | None = None) -> None:
        with self._start_lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._send_batches, daemon=True,
                                                name="narad-acks")
                self._thread.start()
        with self._idle:
            self._pending += 1
        self._waiting.put((queue, receipt, done))

    def flush(self, timeout_s: float | None = None) -> bool:
        """Wait until every ack handed over so far is answered; True if all were."""
        with self._idle:
            return self._idle.wait_for(lambda: self._pending == 0, timeout_s)

    def close(self, timeout_s: float = 10) -> None:
        self.flush(timeout_s)
        if self._thread is not None:
            self._waiting.put(None)

    def _send_batches(self) -> None:
        while (first := self._waiting.get()) is not None:
            batch = [first]
            while len(batch) < MAX_BATCH:
                try:
                    item = self._waiting.get_nowait()
                except stdlib_queue.Empty:
                    break
                if item is None:
                    self._waiting.put(None)
                    break
                batch.append(item)
            by_queue: dict[str, list[tuple[str, Done | None]]] = defaultdict(list)
            for queue, receipt, done in batch:
                by_queue[queue].append((receipt, done))
            for queue, items in by_queue.items():
                self._send(queue, items)
            with self._idle:
                self._pending -= len(batch)
                self._idle.notify_all()

    def _send(self, queue: str, items: list[tuple[str, Done | None]]) -> None:
        try:
            self.client.execute("Q.ACK", queue, *(receipt for receipt, _ in items))
        except StaleReceipt:
            if len(items) > 1:
                for item in items:
                    self._send(queue, [item])
                return
            _tell(items, StaleReceipt(f"STALE receipt {items[0][0]}"))
            return
        except (redis.RedisError, OSError) as exc:
            logger.warning("Q.ACK of %d receipts on %s failed: %s", len(items), queue, exc)
            _tell(items, exc)
            return
        _tell(items, None)


def _tell(items: list[tuple[str, Done | None]], error: Exception | None) -> None:
    for _, done in items:
        if done is not None:
            try:
                done(error)
            except Exception:
                logger.exception("an ack's done callback failed")
