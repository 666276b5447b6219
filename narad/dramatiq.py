"""`NaradBroker`: a Dramatiq broker on Narad's queues (docs/clients.md, "Dramatiq").

    import dramatiq
    from narad.dramatiq import NaradBroker

    dramatiq.set_broker(NaradBroker(url="narad://127.0.0.1:6379"))

How Dramatiq's operations map onto Q.*:

- declare_queue(q), at the queue's first enqueue or consume: Q.CREATE `q.XQ` (its
  dead letters) and `q` with DLQ `q.XQ` and the broker's visibility (default 30 s).
  A queue that exists with other settings is used as it is.
- enqueue(message, delay): Q.PUSH with DELAY (the server holds a delayed message,
  so there are no `.DQ` delay queues and no worker holds one in memory) and a DEDUP
  key made per enqueue, retried across failover by the client: stored once.
- consume: Q.POP COUNT (prefetch room) VISIBILITY v, blocking up to the worker's
  idle timeout; a lease renewer (narad/client/leases.py) touches every unacked
  delivery before its deadline, so long actors are not redelivered while running.
- ack: Q.ACK, batched: the consumer thread hands the receipt over and goes on, and
  one thread sends every receipt waiting in one Q.ACK (narad/client/acks.py).
- nack (a message that failed for good: Dramatiq's Retries middleware has already
  re-enqueued those it retries, with their backoff as DELAY): the message is pushed
  to `q.XQ`, its options naming the queue it came from (`dead_from`), keyed by its
  receipt so that a retried nack stores it once, then acked in `q`.
- requeue (worker shutdown: prefetched messages not run): Q.TOUCH 0, visible again.
- A worker killed with -9 releases nothing: its deliveries come back when their
  deadlines pass, and the DEDUP of each enqueue keeps retried enqueues single.
"""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from collections.abc import Iterable
from typing import Any

import redis
from dramatiq.broker import Broker, Consumer, MessageProxy
from dramatiq.errors import ConnectionClosed, QueueJoinTimeout
from dramatiq.message import Message

from narad.client import Client, NaradError, StaleReceipt, connect
from narad.client.acks import AckBatcher
from narad.client.leases import Leases

DEAD_SUFFIX = ".XQ"
RECEIPT = "narad_receipt"
POP_SLICE_MS = 1000


class NaradBroker(Broker):
    """A Dramatiq broker on a Narad server or sentinel group (module docstring).

    `url` is a narad.client URL (narad://, narad+tls://, narad+sentinel://);
    `visibility_ms` the lease each delivery gets, renewed while it is held."""

    def __init__(self, *, url: str = "narad://127.0.0.1:6379", middleware: Any = None,
                 visibility_ms: int = 30_000, client: Client | None = None) -> None:
        super().__init__(middleware=middleware)
        self.client = client or connect(url)
        self.visibility_ms = visibility_ms
        self.queues: set[str] = set()
        self._created: set[str] = set()  # queues this broker made sure exist
        self.leases = Leases(self.client)
        self.acks = AckBatcher(self.client)

    @property
    def consumer_class(self) -> type[NaradConsumer]:
        return NaradConsumer

    def consume(self, queue_name: str, prefetch: int = 1, timeout: int = 30000) -> Consumer:
        try:
            self.ensure_queue(queue_name)
        except redis.ConnectionError as exc:
            raise ConnectionClosed(exc) from None
        return NaradConsumer(self, queue_name, prefetch, timeout)

    def declare_queue(self, queue_name: str) -> None:
        """Note the queue; it is created on the server at its first enqueue or
        consume (declaring happens when an actor is defined, at import, when no
        server need be up)."""
        if queue_name in self.queues:
            return
        self.emit_before("declare_queue", queue_name)
        self.queues.add(queue_name)
        self.emit_after("declare_queue", queue_name)

    def ensure_queue(self, queue_name: str) -> None:
        """Q.CREATE `q.XQ` and `q` (DLQ `q.XQ`) once; a queue that exists with other
        settings is used as it is."""
        if queue_name in self._created:
            return
        self.declare_queue(queue_name)
        # NX: a queue that exists (maybe tuned by its operator) is used as it is.
        self.client.execute("Q.CREATE", queue_name + DEAD_SUFFIX, "NX")
        self.client.execute("Q.CREATE", queue_name, "VISIBILITY", self.visibility_ms,
                            "DLQ", queue_name + DEAD_SUFFIX, "NX")
        self._created.add(queue_name)

    def enqueue(self, message: Message[Any], *, delay: int | None = None) -> Message[Any]:
        queue_name = message.queue_name
        self.emit_before("enqueue", message, delay)
        args: list[Any] = ["Q.PUSH", queue_name]
        if delay:
            args += ["DELAY", int(delay)]
        args += ["DEDUP", f"dramatiq:{uuid.uuid4().hex}", message.encode()]
        try:
            self.ensure_queue(queue_name)
            self.client.execute(*args)
        except redis.ConnectionError as exc:
            raise ConnectionClosed(exc) from None
        self.emit_after("enqueue", message, delay)
        return message

    def get_declared_queues(self) -> set[str]:
        return self.queues.copy()

    def get_declared_delay_queues(self) -> set[str]:
        """None: delays are held by the server."""
        return set()

    def flush(self, queue_name: str) -> None:
        """Drop what is visible or delayed... as far as Q.SEEK allows: the cursor
        moves past the last message, and messages visible again are acked."""
        queue = self.client.queue(queue_name)
        with contextlib.suppress(NaradError):
            queue.seek("LATEST")
            while got := queue.pop(1000):
                queue.ack(*got)

    def flush_all(self) -> None:
        for name in self.queues:
            self.flush(name)

    def join(self, queue_name: str, *, interval: int = 100, timeout: int | None = None) -> None:
        """Wait until nothing in the queue is visible, delayed or in flight."""
        deadline = None if timeout is None else time.monotonic() + timeout / 1000
        queue = self.client.queue(queue_name)
        while True:
            stats = queue.stats()
            if stats.visible + stats.delayed + stats.in_flight == 0:
                return
            if deadline is not None and time.monotonic() >= deadline:
                raise QueueJoinTimeout(queue_name)
            time.sleep(interval / 1000)

    def close(self) -> None:
        self.acks.close()
        self.leases.close()
        self.client.close()


class NaradConsumer(Consumer):
    """One worker consumer thread's view of a queue. Messages carry their receipt
    in `options["narad_receipt"]`."""

    def __init__(self, broker: NaradBroker, queue_name: str, prefetch: int,
                 timeout: int) -> None:
        self.broker = broker
        self.queue = broker.client.queue(queue_name)
        self.queue_name = queue_name
        self.prefetch = prefetch
        self.timeout = timeout
        self.cache: list[Message[Any]] = []
        self.outstanding: set[str] = set()
        self.room = threading.Event()  # set when a message leaves `outstanding`

    def __next__(self) -> MessageProxy | None:
        if not self.cache:
            room = self.prefetch - len(self.outstanding)
            if room <= 0:
                # Woken by the next ack or nack; None lets the worker's loop go round.
                self.room.wait(0.1)
                self.room.clear()
                return None
            try:
                got = self.queue.pop(room, visibility_ms=self.broker.visibility_ms,
                                     block_ms=max(1, min(self.timeout, POP_SLICE_MS)))
            except redis.ConnectionError as exc:
                raise ConnectionClosed(exc) from None
            for delivery in got:
                self.broker.leases.hold(self.queue_name, delivery.receipt,
                                        self.broker.visibility_ms)
                decoded = Message.decode(delivery.payload)
                self.cache.append(decoded.copy(options={RECEIPT: delivery.receipt}))
            if not self.cache:
                return None
        message = self.cache.pop(0)
        self.outstanding.add(message.options[RECEIPT])
        return MessageProxy(message)

    def _settled(self, message: MessageProxy) -> str | None:
        receipt: str | None = message.options.get(RECEIPT)
        if receipt is None:
            return None
        self.outstanding.discard(receipt)
        self.room.set()
        self.broker.leases.release(receipt)
        return receipt

    def ack(self, message: MessageProxy) -> None:
        """Handed to the broker's AckBatcher (narad/client/acks.py): the consumer
        thread goes on at once; the lease is renewed until the ack is answered."""
        receipt: str | None = message.options.get(RECEIPT)
        if receipt is None:
            return
        self.outstanding.discard(receipt)
        self.room.set()
        leases = self.broker.leases
        self.broker.acks.ack(self.queue_name, receipt,
                             done=lambda error: leases.release(receipt))

    def nack(self, message: MessageProxy) -> None:
        """Dead-letter: push to `<queue>.XQ` (keyed by the receipt), then ack."""
        receipt = self._settled(message)
        if receipt is None:
            return
        dead = message._message.copy(options={"dead_from": self.queue_name})
        try:
            self.broker.client.execute("Q.PUSH", self.queue_name + DEAD_SUFFIX, "DEDUP",
                                       f"dead:{receipt}", dead.encode())
            self.queue.ack(receipt)
        except StaleReceipt:
            pass
        except redis.ConnectionError as exc:
            raise ConnectionClosed(exc) from None

    def requeue(self, messages: Iterable[MessageProxy]) -> None:
        for message in [*messages, *map(MessageProxy, self.cache)]:
            receipt = self._settled(message)
            if receipt is not None:
                with contextlib.suppress(NaradError, redis.ConnectionError):
                    self.queue.touch(receipt, 0)
        self.cache.clear()

    def close(self) -> None:
        self.requeue([])
        self.broker.acks.flush(10)
