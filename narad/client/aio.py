"""narad.client on asyncio (redis.asyncio): the surface of the sync client, awaited.

    from narad.client import aio

    client = aio.connect("narad+sentinel://s1:26379,s2:26379/mymaster")
    await client.queue("jobs").push(b"x")
    await aio.worker(client.queue("jobs"), handle, concurrency=32)

The contracts are those of the sync modules, which say them once: the URL and the
bounded failover retry (narad/client/connect.py), the replies as dataclasses and the
errors as exceptions (messages.py, errors.py), the Producer's DEDUP keys
(producer.py), and the Consumer's batches, leases, backoff, dead letters and drain
(consumer.py). Here handlers are coroutines, concurrency is a number of tasks, and
everything runs on the caller's event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import signal
import time
import uuid
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict
from typing import Any, TypeVar

import redis
import redis.asyncio as aredis
from redis.asyncio.retry import Retry
from redis.asyncio.sentinel import Sentinel
from redis.backoff import NoBackoff

from narad.client.connect import (
    BACKOFF_FIRST_S,
    BACKOFF_MAX_S,
    Target,
    node_kwargs,
    parse_url,
    sentinel_kwargs,
)
from narad.client.consumer import RENEW_WHEN_LEFT, ConsumerCounters, retry_delay_ms
from narad.client.errors import (
    RetryTimeout,
    SchemaRejected,
    StaleReceipt,
    retryable_reply,
    translate,
)
from narad.client.messages import (
    Message,
    QueueSettings,
    QueueStats,
    SchemaVersion,
    messages,
    text,
)
from narad.client.producer import ProducerCounters
from narad.client.queue import (
    BLOCK_SLICE_MS,
    Payload,
    create_args,
    name_refused,
    pop_args,
    push_args,
)

logger = logging.getLogger("narad.client")
T = TypeVar("T")

__all__ = ["Client", "Consumer", "Job", "Producer", "PushStream", "Queue", "connect", "worker"]


class Client:
    """A redis.asyncio pool to the leader, with the bounded retry of connect.py."""

    def __init__(self, target: Target) -> None:
        self.target = target
        self.retry_s = target.retry_s
        self.sentinel: Sentinel | None = None
        self.redis = self._make_redis()

    def _make_redis(self) -> aredis.Redis:
        t = self.target
        kwargs = node_kwargs(t, Retry(NoBackoff(), 0))
        if t.sentinel_group is None:
            host, port = t.hosts[0]
            return aredis.Redis(host=host, port=port, **kwargs)
        self.sentinel = Sentinel(
            t.hosts, sentinel_kwargs=sentinel_kwargs(t, Retry(NoBackoff(), 0)), **kwargs
        )
        master: aredis.Redis = self.sentinel.master_for(t.sentinel_group, **kwargs)
        return master

    async def execute(self, *args: Any, retry: bool = True) -> Any:
        return await self.call(lambda r: r.execute_command(*args), retry=retry)

    async def call(self, run: Callable[[aredis.Redis], Awaitable[T]], *,
                   retry: bool = True) -> T:
        deadline = time.monotonic() + self.retry_s
        pause = BACKOFF_FIRST_S
        while True:
            try:
                return await run(self.redis)
            except (redis.ConnectionError, redis.TimeoutError) as exc:
                failure: Exception = exc
            except redis.ResponseError as exc:
                if not (retry and retryable_reply(exc)):
                    raise translate(exc) from None
                failure = exc
            if not retry:
                raise failure
            if time.monotonic() + pause > deadline:
                raise RetryTimeout(
                    f"no leader answered within {self.retry_s:g} s: {failure}") from failure
            await self.redis.connection_pool.disconnect()
            await asyncio.sleep(pause * random.uniform(0.5, 1.0))
            pause = min(pause * 2, BACKOFF_MAX_S)

    async def new_connection(self) -> Any:
        conn = self.redis.connection_pool.make_connection()
        await conn.connect()
        return conn

    def queue(self, name: str) -> Queue:
        return Queue(self, name)

    def producer(self, queue: str) -> Producer:
        return Producer(self.queue(queue))

    async def list_queues(self, match: str | None = None) -> list[str]:
        args = ["Q.LIST", *(("MATCH", match) if match else ())]
        return [text(name) for name in await self.execute(*args)]

    async def close(self) -> None:
        await self.redis.aclose()
        await self.redis.connection_pool.disconnect()

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


def connect(url: str = "narad://127.0.0.1:6379", *, retry_s: float | None = None) -> Client:
    """An asyncio client for `url` (narad/client/connect.py); nothing is dialled yet."""
    target = parse_url(url)
    if retry_s is not None:
        target.retry_s = retry_s
    return Client(target)


def _receipt(item: str | Message) -> str:
    return item.receipt if isinstance(item, Message) else item


class Queue:
    """narad.client.Queue, awaited: one method per Q.* command."""

    def __init__(self, client: Client, name: str) -> None:
        self.client = client
        self.name = name

    async def create(self, *, visibility_ms: int | None = None, maxreceives: int | None = None,
                     dlq: str | None = None, delay_ms: int | None = None,
                     retention_ms: int | None = None, maxbytes: int | None = None,
                     dedupwindow_ms: int | None = None, exist_ok: bool = False) -> bool:
        args = create_args(self.name, {
            "VISIBILITY": visibility_ms, "MAXRECEIVES": maxreceives, "DLQ": dlq,
            "DELAY": delay_ms, "RETENTION": retention_ms, "MAXBYTES": maxbytes,
            "DEDUPWINDOW": dedupwindow_ms}, exist_ok)
        reply = await self.client.execute(*args)
        return not exist_ok or bool(reply)

    async def drop(self, *, force: bool = False) -> bool:
        args = ["Q.DROP", self.name, *(["FORCE"] if force else [])]
        return bool(await self.client.execute(*args))

    async def settings(self) -> QueueSettings:
        return QueueSettings.from_reply(await self.client.execute("Q.CONFIG", self.name, "GET"))

    async def configure(self, **settings: int | str) -> None:
        args: list[Any] = ["Q.CONFIG", self.name, "SET"]
        for name, value in settings.items():
            args += [name, value]
        await self.client.execute(*args)

    async def stats(self) -> QueueStats:
        return QueueStats.from_reply(await self.client.execute("Q.STATS", self.name))

    async def push(self, payload: Payload, *, delay_ms: float | None = None,
                   dedup: str | None = None) -> str:
        try:
            return text(await self.client.execute(*push_args(self.name, delay_ms, dedup), payload,
                                                  retry=dedup is not None))
        except SchemaRejected as exc:
            name_refused(exc, [payload])
            raise

    async def push_many(self, payloads: Sequence[Payload], *,
                        delay_ms: float | None = None) -> list[str]:
        if not payloads:
            return []
        try:
            reply = await self.client.execute(*push_args(self.name, delay_ms, None), *payloads,
                                              retry=False)
        except SchemaRejected as exc:
            name_refused(exc, payloads)
            raise
        return [text(i) for i in reply] if isinstance(reply, list) else [text(reply)]

    async def pop(self, count: int = 1, *, visibility_ms: int | None = None,
                  block_ms: int | None = None) -> list[Message]:
        args = pop_args(self.name, count, visibility_ms)
        if block_ms is None:
            return messages(self.name, await self.client.execute(*args))
        left = block_ms
        while True:
            wait = BLOCK_SLICE_MS if left == 0 else min(left, BLOCK_SLICE_MS)
            got = messages(self.name, await self.client.execute(*args, "BLOCK", max(1, wait)))
            if got or (block_ms and (left := left - wait) <= 0):
                return got

    async def peek(self, count: int = 1) -> list[Message]:
        """Q.PEEK: what Q.POP would deliver next, delivering nothing (a look at a
        DLQ that leaves its letters for Q.REDRIVE); `receipt` is "" and `receives`
        counts the deliveries so far."""
        return messages(self.name, await self.client.execute("Q.PEEK", self.name, "COUNT", count))

    async def ack(self, *receipts: str | Message) -> int:
        if not receipts:
            return 0
        return int(await self.client.execute("Q.ACK", self.name, *map(_receipt, receipts)))

    async def nack(self, receipt: str | Message, *, delay_ms: float | None = None) -> None:
        args: list[Any] = ["Q.NACK", self.name, _receipt(receipt)]
        if delay_ms:
            args += ["DELAY", max(0, int(delay_ms))]
        await self.client.execute(*args)

    async def touch(self, receipt: str | Message, visibility_ms: float) -> None:
        await self.client.execute("Q.TOUCH", self.name, _receipt(receipt), int(visibility_ms))

    async def consume(self, prefetch: int = 10, *,
                      visibility_ms: int | None = None) -> PushStream:
        stream = PushStream(self.client, self.name)
        await stream.start(prefetch, visibility_ms)
        return stream

    async def subscribe(self, source: str, *, start: str | None = None) -> None:
        args: list[Any] = ["Q.SUBSCRIBE", self.name, source]
        if start is not None:
            args += ["FROM", start]
        await self.client.execute(*args)

    async def unsubscribe(self, source: str) -> bool:
        return bool(await self.client.execute("Q.UNSUBSCRIBE", self.name, source))

    async def seek(self, position: str | None = None, *, time_ms: int | None = None) -> None:
        if (position is None) == (time_ms is None):
            raise ValueError("seek takes a position or time_ms, one of them")
        where: list[Any] = ["TIME", time_ms] if time_ms is not None else [position]
        await self.client.execute("Q.SEEK", self.name, *where)

    async def redrive(self, *, to: str | None = None, count: int | None = None) -> int:
        args: list[Any] = ["Q.REDRIVE", self.name]
        if to is not None:
            args += ["TO", to]
        if count is not None:
            args += ["COUNT", count]
        return int(await self.client.execute(*args, retry=False))

    async def schema_set(self, schema: str, *, compat: str | None = None,
                         field: str | None = None) -> int:
        args: list[Any] = ["Q.SCHEMA", "SET", self.name, schema]
        if compat is not None:
            args += ["COMPAT", compat]
        if field is not None:
            args += ["FIELD", field]
        return int(await self.client.execute(*args))

    async def schema_get(self, version: int | None = None) -> SchemaVersion | None:
        args: list[Any] = ["Q.SCHEMA", "GET", self.name]
        if version is not None:
            args.append(version)
        reply = await self.client.execute(*args)
        return None if reply is None else SchemaVersion.from_reply(reply)

    async def schema_versions(self) -> list[int]:
        return [int(v) for v in await self.client.execute("Q.SCHEMA", "VERSIONS", self.name)]

    async def schema_check(self, schema: str, *, compat: str | None = None) -> None:
        args: list[Any] = ["Q.SCHEMA", "CHECK", self.name, schema]
        if compat is not None:
            args += ["COMPAT", compat]
        await self.client.execute(*args)

    async def schema_compat(self, mode: str | None = None) -> str:
        if mode is None:
            return text(await self.client.execute("Q.SCHEMA", "COMPAT", self.name))
        await self.client.execute("Q.SCHEMA", "COMPAT", self.name, mode)
        return mode

    async def schema_drop(self) -> bool:
        return bool(await self.client.execute("Q.SCHEMA", "DROP", self.name))


class PushStream:
    """Q.CONSUME on a connection of its own. One reader task takes every frame and
    reply off the socket: frames go to `get`, replies to the commands in order."""

    def __init__(self, client: Client, queue: str) -> None:
        self.client = client
        self.queue = queue
        self._conn: Any = None
        self._frames: asyncio.Queue[Message | BaseException] = asyncio.Queue()
        self._waiters: deque[asyncio.Future[Any]] = deque()
        self._reader: asyncio.Task[None] | None = None
        self._write_lock = asyncio.Lock()

    async def start(self, prefetch: int, visibility_ms: int | None) -> None:
        self._conn = await self.client.new_connection()
        self._reader = asyncio.create_task(self._read())
        args: list[Any] = ["Q.CONSUME", self.queue, "PREFETCH", prefetch]
        if visibility_ms is not None:
            args += ["VISIBILITY", visibility_ms]
        await self._command(*args)

    async def get(self, timeout_s: float | None = None) -> Message | None:
        try:
            item = await asyncio.wait_for(self._frames.get(), timeout_s)
        except TimeoutError:
            return None
        if isinstance(item, BaseException):
            self._frames.put_nowait(item)  # every later get fails the same way
            raise item
        return item

    def __aiter__(self) -> PushStream:
        return self

    async def __anext__(self) -> Message:
        message = await self.get()
        assert message is not None
        return message

    async def ack(self, *receipts: str | Message) -> int:
        return int(await self._command("Q.ACK", self.queue, *map(_receipt, receipts)))

    async def nack(self, receipt: str | Message, *, delay_ms: float | None = None) -> None:
        args: list[Any] = ["Q.NACK", self.queue, _receipt(receipt)]
        if delay_ms:
            args += ["DELAY", int(delay_ms)]
        await self._command(*args)

    async def touch(self, receipt: str | Message, visibility_ms: float) -> None:
        await self._command("Q.TOUCH", self.queue, _receipt(receipt), int(visibility_ms))

    async def cancel(self) -> None:
        await self._command("Q.CANCEL")

    async def close(self) -> None:
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._reader
        if self._conn is not None:
            await self._conn.disconnect()

    async def _command(self, *args: Any) -> Any:
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        async with self._write_lock:
            self._waiters.append(future)
            await self._conn.send_command(*args)
        return await future

    async def _read(self) -> None:
        try:
            while True:
                try:
                    reply = await self._conn.read_response(push_request=True)
                except redis.ResponseError as exc:
                    self._waiters.popleft().set_exception(translate(exc))
                    continue
                if (isinstance(reply, list) and len(reply) == 3
                        and reply[0] == b"message"):
                    self._frames.put_nowait(Message.from_reply(text(reply[1]), reply[2]))
                elif self._waiters:
                    self._waiters.popleft().set_result(reply)
        except (redis.ConnectionError, OSError) as exc:
            self._frames.put_nowait(exc)
            while self._waiters:
                self._waiters.popleft().set_exception(exc)


class Producer:
    """narad.client.Producer, awaited: every send of a message carries its key."""

    def __init__(self, queue: Queue) -> None:
        self.queue = queue
        self.counters = ProducerCounters()

    async def push(self, payload: Payload, *, key: str | None = None,
                   delay_ms: float | None = None) -> str:
        args = [*push_args(self.queue.name, delay_ms, key or uuid.uuid4().hex), payload]

        async def send(r: aredis.Redis) -> str:
            return text(await r.execute_command(*args))

        try:
            message_id = await self.queue.client.call(send)
        except SchemaRejected as exc:
            name_refused(exc, [payload])
            raise
        self.counters.pushed += 1
        return message_id

    async def push_many(self, payloads: Sequence[Payload], *,
                        keys: Sequence[str] | None = None,
                        delay_ms: float | None = None) -> list[str]:
        if keys is not None and len(keys) != len(payloads):
            raise ValueError("keys and payloads differ in length")
        dedups = list(keys) if keys is not None else [uuid.uuid4().hex for _ in payloads]

        async def send(r: aredis.Redis) -> list[str]:
            pipe = r.pipeline(transaction=False)
            for payload, dedup in zip(payloads, dedups, strict=True):
                pipe.execute_command(*push_args(self.queue.name, delay_ms, dedup), payload)
            replies: list[Any] = await pipe.execute(raise_on_error=False)
            for index, reply in enumerate(replies):
                if isinstance(reply, Exception):
                    error = translate(reply) if isinstance(reply, redis.ResponseError) else reply
                    if isinstance(error, SchemaRejected):
                        error.index = index
                        name_refused(error, payloads)
                    raise error
            return [text(reply) for reply in replies]

        ids = await self.queue.client.call(send)
        self.counters.pushed += len(ids)
        return ids


class Job:
    """One message being handled; reads like its Message. `lost` is set when the
    lease renewer learns the claim is gone (STALE)."""

    def __init__(self, message: Message, visibility_ms: int) -> None:
        self.message = message
        self.lost = asyncio.Event()
        self.visibility_ms = visibility_ms
        self.deadline = time.monotonic() + visibility_ms / 1000

    def __getattr__(self, name: str) -> Any:
        return getattr(self.message, name)


AsyncHandler = Callable[[Job], Awaitable[Any]]


class Consumer:
    """narad.client.Consumer on asyncio: `concurrency` handler tasks, one fetch task
    (Q.POP batches within the idle handlers, or Q.CONSUME with `prefetch`), one lease
    task. `await run()` until `stop()`; then it drains as the sync one does."""

    def __init__(self, queue: Queue, handler: AsyncHandler, *, concurrency: int = 1,
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
        self._stopping = asyncio.Event()
        self._work: asyncio.Queue[Job | None] = asyncio.Queue()
        self._idle = asyncio.Semaphore(concurrency)
        self._leases: dict[str, Job] = {}
        self._stream: PushStream | None = None

    def stop(self) -> None:
        self._stopping.set()

    def snapshot(self) -> dict[str, int]:
        return asdict(self.counters)

    async def run(self) -> None:
        settings = await self.queue.settings()
        self._maxreceives = settings.maxreceives
        if self._visibility_ms is None:
            self._visibility_ms = settings.visibility
        fetch = asyncio.create_task(self._fetch_pushed() if self.prefetch else
                                    self._fetch_pulled())
        renew = asyncio.create_task(self._renew_leases())
        handlers = [asyncio.create_task(self._handle_jobs()) for _ in range(self.concurrency)]
        try:
            await self._stopping.wait()
        finally:
            self._stopping.set()
            await fetch
            await self._release_unstarted()
            for _ in handlers:
                self._work.put_nowait(None)
            await asyncio.wait(handlers, timeout=self.drain_timeout_s)
            renew.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await renew
            if self._stream is not None:
                await self._stream.close()

    async def _release_unstarted(self) -> None:
        while not self._work.empty():
            job = self._work.get_nowait()
            if job is None:
                continue
            self._leases.pop(job.receipt, None)
            try:
                await self.queue.touch(job.receipt, 0)
                self.counters.released += 1
            except redis.RedisError as exc:
                logger.warning("could not release %s: %s", job.id, exc)

    def _take(self, message: Message) -> None:
        job = Job(message, int(self._visibility_ms or 0))
        self._leases[message.receipt] = job
        self.counters.received += 1
        self._work.put_nowait(job)

    async def _fetch_pulled(self) -> None:
        while not self._stopping.is_set():
            try:
                await asyncio.wait_for(self._idle.acquire(), 0.2)
            except TimeoutError:
                continue
            slots = 1
            while slots < self.batch and not self._idle.locked():
                await self._idle.acquire()
                slots += 1
            try:
                got = await self.queue.pop(slots, visibility_ms=self._visibility_ms,
                                           block_ms=500)
            except redis.RedisError as exc:
                logger.warning("Q.POP on %s failed: %s", self.queue.name, exc)
                got = []
                await asyncio.sleep(0.5)
            for message in got:
                self._take(message)
            for _ in range(slots - len(got)):
                self._idle.release()

    async def _fetch_pushed(self) -> None:
        assert self.prefetch is not None
        while not self._stopping.is_set():
            try:
                if self._stream is None:
                    self._stream = await self.queue.consume(self.prefetch,
                                                            visibility_ms=self._visibility_ms)
                message = await self._stream.get(timeout_s=0.2)
            except (redis.RedisError, OSError) as exc:
                logger.warning("Q.CONSUME on %s failed: %s", self.queue.name, exc)
                if self._stream is not None:
                    await self._stream.close()
                self._stream = None
                await asyncio.sleep(0.5)
                continue
            if message is not None:
                self._take(message)
        if self._stream is not None:
            with contextlib.suppress(redis.RedisError, OSError):
                await self._stream.cancel()
                while (message := await self._stream.get(timeout_s=0)) is not None:
                    self._take(message)

    async def _handle_jobs(self) -> None:
        while (job := await self._work.get()) is not None:
            self.counters.running += 1
            try:
                await self._handle(job)
            finally:
                self.counters.running -= 1
                if not self.prefetch:
                    self._idle.release()

    async def _handle(self, job: Job) -> None:
        try:
            await self.handler(job)
        except Exception as exc:
            self._leases.pop(job.receipt, None)
            if not job.lost.is_set():
                await self._nack(job, exc)
            return
        self._leases.pop(job.receipt, None)
        if job.lost.is_set():
            return
        try:
            await self.queue.ack(job.receipt)
            self.counters.acked += 1
        except StaleReceipt:
            self.counters.lost += 1
        except redis.RedisError as exc:
            self.counters.errors += 1
            logger.warning("Q.ACK of %s failed: %s", job.id, exc)

    async def _nack(self, job: Job, exc: Exception) -> None:
        delay = retry_delay_ms(job.receives, self.backoff_base_ms, self.backoff_max_ms)
        logger.info("job %s failed (receive %d): %r; retry in %d ms",
                    job.id, job.receives, exc, delay)
        try:
            await self.queue.nack(job.receipt, delay_ms=delay)
        except StaleReceipt:
            self.counters.lost += 1
            return
        except redis.RedisError as error:
            self.counters.errors += 1
            logger.warning("Q.NACK of %s failed: %s", job.id, error)
            return
        self.counters.nacked += 1
        if self._maxreceives and job.receives >= self._maxreceives:
            self.counters.dead_lettered += 1

    async def _renew_leases(self) -> None:
        tick = max(0.01, min(1.0, (self._visibility_ms or 1000) / 1000 / 10))
        while True:
            await asyncio.sleep(tick)
            now = time.monotonic()
            due = [job for job in self._leases.values()
                   if job.deadline - now <= job.visibility_ms / 1000 * RENEW_WHEN_LEFT]
            for job in due:
                try:
                    await self.queue.touch(job.receipt, job.visibility_ms)
                except StaleReceipt:
                    job.lost.set()
                    self._leases.pop(job.receipt, None)
                    self.counters.lost += 1
                    continue
                except redis.RedisError as exc:
                    logger.warning("Q.TOUCH of %s failed: %s", job.id, exc)
                    continue
                job.deadline = time.monotonic() + job.visibility_ms / 1000
                self.counters.touched += 1


async def worker(queue: Queue, handler: AsyncHandler, *, concurrency: int = 1,
                 **options: Any) -> Consumer:
    """Run a Consumer until SIGTERM or SIGINT (then drain); returns it, stopped."""
    consumer = Consumer(queue, handler, concurrency=concurrency, **options)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, consumer.stop)
    try:
        await consumer.run()
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
    return consumer
