"""`Consumer` and `worker`: run a handler over a queue's messages, at least once.

What a consumer does with each message (docs/clients.md, "Workers"):

- It receives messages in batches: Q.POP COUNT n (pull, the default), asking only
  for as many as it has idle handler threads, so no message waits in memory while
  its visibility runs out; or, with `prefetch`, Q.CONSUME (push), which keeps up to
  `prefetch` messages on their way.
- While the handler runs, a lease renewer Q.TOUCHes the delivery once less than a
  third of its visibility is left, setting the deadline to now + visibility again.
  If a touch answers STALE the claim is lost (the deadline passed and the message
  was, or may be, handed to someone else): `job.lost` is set so that a handler that
  looks can stop, and the result is neither acked nor nacked (counted in `lost`).
- The handler returning acks the message (Q.ACK, handed to a sender thread that
  puts every ack waiting into one command: narad/client/acks.py); raising nacks it (Q.NACK) with a
  delay of `backoff_base_ms * 2**(receives-1)`, capped at `backoff_max_ms`, times a
  random factor in [0.5, 1) (jitter). The server dead-letters a message nacked for
  the MAXRECEIVES-th time (docs/queues.md): the consumer does not count receives.
- `stop()` (and SIGTERM / SIGINT under `worker`) drains: no more fetching; messages
  received but not started are released (Q.TOUCH 0: visible again at once); running
  handlers finish and are settled, up to `drain_timeout_s`; then the threads end.

Threads: one fetcher, `concurrency` handler threads, one lease renewer. Every settle
goes through the client's bounded retry, so a failover in the middle costs a pause,
not a message (a reply lost in the failover at worst lets a message come back once
its deadline passes: at least once, never lost).
"""

from __future__ import annotations

import logging
import queue as stdlib_queue
import random
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from types import FrameType
from typing import Any

import redis

from narad.client.acks import AckBatcher
from narad.client.errors import StaleReceipt
from narad.client.messages import Message
from narad.client.push import PushStream
from narad.client.queue import Queue

logger = logging.getLogger("narad.client")

Handler = Callable[["Job"], Any]

# A delivery is touched once less than this share of its visibility is left.
RENEW_WHEN_LEFT = 1 / 3
FETCH_BLOCK_MS = 500


def retry_delay_ms(receives: int, base_ms: float, max_ms: float) -> float:
    """How long a failed job waits before it is visible again: exponential in its
    receives, capped, with jitter (module docstring)."""
    return float(min(max_ms, base_ms * 2 ** (receives - 1))) * random.uniform(0.5, 1.0)


@dataclass
class ConsumerCounters:
    """What the consumer did since it started; `snapshot()` copies them."""

    received: int = 0  # messages handed to this consumer
    acked: int = 0  # handler returned, Q.ACK answered
    nacked: int = 0  # handler raised, Q.NACK answered
    dead_lettered: int = 0  # nacks at the queue's MAXRECEIVES: the server dead-lettered them
    lost: int = 0  # leases lost (STALE): neither acked nor nacked
    touched: int = 0  # lease renewals (Q.TOUCH) answered OK
    released: int = 0  # received but not started at stop, made visible again
    errors: int = 0  # settle calls that failed for another reason (logged)
    running: int = 0  # handlers running now


class Job:
    """One message being handled. Attribute access falls through to the Message
    (`job.payload`, `job.id`, `job.receives`, `job.json()` ...). `lost` is set when
    the lease renewer learns the claim is gone (STALE)."""

    def __init__(self, message: Message) -> None:
        self.message = message
        self.lost = threading.Event()
        self.deadline = 0.0  # monotonic s at which the current lease ends
        self.visibility_ms = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.message, name)

    def __repr__(self) -> str:
        return f"Job({self.message.queue!r}, {self.message.id!r})"


class Consumer:
    """Runs `handler(job)` on `concurrency` threads over `queue` (module docstring).

    `visibility_ms`: the lease asked for (default: the queue's setting); `batch`:
    most messages per Q.POP; `prefetch`: use push delivery with that window."""

    def __init__(self, queue: Queue, handler: Handler, *, concurrency: int = 1,
                 batch: int = 10, visibility_ms: int | None = None,
                 prefetch: int | None = None, backoff_base_ms: float = 1000,
                 backoff_max_ms: float = 300_000, drain_timeout_s: float = 30) -> None:
        if concurrency < 1 or batch < 1:
            raise ValueError("concurrency and batch are at least 1")
        self.queue = queue
        self.handler = handler
        self.concurrency = concurrency
        self.batch = batch
        self.prefetch = prefetch
        self.backoff_base_ms = backoff_base_ms
        self.backoff_max_ms = backoff_max_ms
        self.drain_timeout_s = drain_timeout_s
        self.counters = ConsumerCounters()
        self._visibility_ms = visibility_ms
        self._maxreceives = 0
        self._counter_lock = threading.Lock()
        self._work: stdlib_queue.Queue[Job | None] = stdlib_queue.Queue()
        self._idle = threading.Semaphore(concurrency)
        self._leases: dict[str, Job] = {}
        self._leases_lock = threading.Lock()
        self._stopping = threading.Event()
        self._stopped = threading.Event()
        self._threads: list[threading.Thread] = []
        self._stream: PushStream | None = None
        self._acks = AckBatcher(queue.client)

    # ---- life ----------------------------------------------------------------------------

    def start(self) -> Consumer:
        settings = self.queue.settings()
        self._maxreceives = settings.maxreceives
        if self._visibility_ms is None:
            self._visibility_ms = settings.visibility
        fetch = self._fetch_pushed if self.prefetch else self._fetch_pulled
        targets: list[Callable[[], None]] = [fetch, self._renew_leases]
        targets += [self._handle_jobs] * self.concurrency
        for target in targets:
            thread = threading.Thread(target=target, daemon=True,
                                      name=f"narad-consumer-{target.__name__}")
            thread.start()
            self._threads.append(thread)
        threading.Thread(target=self._supervise, daemon=True,
                         name="narad-consumer-drain").start()
        return self

    def _supervise(self) -> None:
        self._stopping.wait()
        self._drain()

    def stop(self) -> None:
        """Ask for a graceful stop (module docstring); returns at once."""
        self._stopping.set()

    def wait(self, timeout_s: float | None = None) -> bool:
        """Wait until the consumer has stopped; True if it has."""
        return self._stopped.wait(timeout_s)

    def run(self) -> None:
        """Start, and return once stopped (by `stop()`, from a handler or a signal)."""
        self.start()
        try:
            while not self._stopped.wait(0.2):
                pass
        except BaseException:
            self.stop()
            self._stopped.wait(self.drain_timeout_s + 15)
            raise

    def snapshot(self) -> dict[str, int]:
        with self._counter_lock:
            return asdict(self.counters)

    def _count(self, name: str, by: int = 1) -> None:
        with self._counter_lock:
            setattr(self.counters, name, getattr(self.counters, name) + by)

    def _drain(self) -> None:
        fetcher = self._threads[0]
        fetcher.join(timeout=10)
        self._release_unstarted()
        for _ in range(self.concurrency):
            self._work.put(None)
        deadline = time.monotonic() + self.drain_timeout_s
        for thread in self._threads[2:]:
            thread.join(timeout=max(0.0, deadline - time.monotonic()))
        self._acks.flush(max(1.0, deadline - time.monotonic()))
        self._acks.close()
        self._stopped.set()
        self._threads[1].join(timeout=5)
        if self._stream is not None:
            self._stream.close()

    def _release_unstarted(self) -> None:
        while True:
            try:
                job = self._work.get_nowait()
            except stdlib_queue.Empty:
                return
            if job is None:
                continue
            self._forget(job)
            try:
                self.queue.touch(job.receipt, 0)
                self._count("released")
            except redis.RedisError as exc:
                logger.warning("could not release %s: %s", job.id, exc)

    # ---- fetching -------------------------------------------------------------------------

    def _fetch_pulled(self) -> None:
        while not self._stopping.is_set():
            if not self._idle.acquire(timeout=0.2):
                continue
            slots = 1
            while slots < self.batch and self._idle.acquire(blocking=False):
                slots += 1
            try:
                got = self.queue.pop(slots, visibility_ms=self._visibility_ms,
                                     block_ms=FETCH_BLOCK_MS)
            except redis.RedisError as exc:
                logger.warning("Q.POP on %s failed: %s", self.queue.name, exc)
                got = []
                self._stopping.wait(0.5)
            for message in got:
                self._take(message)
            for _ in range(slots - len(got)):
                self._idle.release()

    def _fetch_pushed(self) -> None:
        assert self.prefetch is not None
        while not self._stopping.is_set():
            try:
                if self._stream is None:
                    self._stream = self.queue.consume(self.prefetch,
                                                      visibility_ms=self._visibility_ms)
                message = self._stream.get(timeout_s=0.2)
            except redis.RedisError as exc:
                logger.warning("Q.CONSUME on %s failed: %s", self.queue.name, exc)
                if self._stream is not None:
                    self._stream.close()
                self._stream = None
                self._stopping.wait(0.5)
                continue
            if message is not None:
                self._take(message)
        if self._stream is not None:
            try:
                self._stream.cancel()
                while (message := self._stream.get(timeout_s=0)) is not None:
                    self._take(message)
            except redis.RedisError:
                pass

    def _take(self, message: Message) -> None:
        job = Job(message)
        job.visibility_ms = int(self._visibility_ms or 0)
        job.deadline = time.monotonic() + job.visibility_ms / 1000
        with self._leases_lock:
            self._leases[message.receipt] = job
        self._count("received")
        self._work.put(job)

    # ---- handling -------------------------------------------------------------------------

    def _handle_jobs(self) -> None:
        while True:
            job = self._work.get()
            if job is None:
                return
            self._count("running")
            try:
                self._handle(job)
            finally:
                self._count("running", -1)
                if not self.prefetch:
                    self._idle.release()

    def _handle(self, job: Job) -> None:
        try:
            self.handler(job)
        except Exception as exc:
            self._forget(job)
            if not job.lost.is_set():
                self._nack(job, exc)
            return
        if job.lost.is_set():
            self._forget(job)
            return
        # Handed over: the thread takes its next job while the ack is sent (with
        # others waiting, in one Q.ACK); the lease is renewed until it is answered.
        self._acks.ack(self.queue.name, job.receipt,
                       done=lambda error: self._acked(job, error))

    def _acked(self, job: Job, error: Exception | None) -> None:
        self._forget(job)
        if error is None:
            self._count("acked")
        elif isinstance(error, StaleReceipt):
            self._count("lost")
        else:
            self._count("errors")

    def _nack(self, job: Job, exc: Exception) -> None:
        delay = retry_delay_ms(job.receives, self.backoff_base_ms, self.backoff_max_ms)
        logger.info("job %s failed (receive %d): %r; retry in %d ms",
                    job.id, job.receives, exc, delay)
        try:
            self.queue.nack(job.receipt, delay_ms=delay)
        except StaleReceipt:
            self._count("lost")
            return
        except redis.RedisError as error:
            self._count("errors")
            logger.warning("Q.NACK of %s failed: %s", job.id, error)
            return
        self._count("nacked")
        if self._maxreceives and job.receives >= self._maxreceives:
            self._count("dead_lettered")

    def _forget(self, job: Job) -> None:
        with self._leases_lock:
            self._leases.pop(job.receipt, None)

    # ---- leases ---------------------------------------------------------------------------

    def _renew_leases(self) -> None:
        """Touch each delivery with less than RENEW_WHEN_LEFT of its visibility
        left. Runs until the consumer has stopped."""
        while not self._stopped.is_set():
            tick = max(0.01, min(1.0, (self._visibility_ms or 1000) / 1000 / 10))
            self._stopped.wait(tick)
            now = time.monotonic()
            with self._leases_lock:
                due = [job for job in self._leases.values()
                       if job.deadline - now <= job.visibility_ms / 1000 * RENEW_WHEN_LEFT]
            for job in due:
                self._renew(job)

    def _renew(self, job: Job) -> None:
        try:
            self.queue.touch(job.receipt, job.visibility_ms)
        except StaleReceipt:
            job.lost.set()
            self._forget(job)
            self._count("lost")
            logger.warning("lease of %s lost (STALE): it may run elsewhere", job.id)
            return
        except redis.RedisError as exc:
            logger.warning("Q.TOUCH of %s failed: %s", job.id, exc)
            return
        job.deadline = time.monotonic() + job.visibility_ms / 1000
        self._count("touched")


def worker(queue: Queue, handler: Handler, *, concurrency: int = 1,
           **options: Any) -> Consumer:
    """Run a Consumer until SIGTERM or SIGINT (then drain), in the calling thread,
    which must be the main thread for the signal handlers. Returns it, stopped."""
    consumer = Consumer(queue, handler, concurrency=concurrency, **options)

    def on_signal(signum: int, frame: FrameType | None) -> None:
        logger.info("signal %d: draining", signum)
        consumer.stop()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        consumer.run()
    finally:
        for sig, handler_before in previous.items():
            signal.signal(sig, handler_before)
    return consumer
