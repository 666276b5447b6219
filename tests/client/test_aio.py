"""narad.client.aio against a real server: the same replies, errors, keyed pushes,
push delivery and Consumer as the sync client, on asyncio, under RESP2 and RESP3."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from narad.client import Message, NoQueue, SchemaRejected, StaleReceipt, aio
from tests.servers import NaradProcess


def run(coroutine):  # type: ignore[no-untyped-def]
    return asyncio.run(asyncio.wait_for(coroutine, 60))


@pytest.fixture(params=[2, 3], ids=["resp2", "resp3"])
def url(request: pytest.FixtureRequest, shared_narad: NaradProcess) -> str:
    return f"narad://127.0.0.1:{shared_narad.port}?protocol={request.param}"


def name() -> str:
    return f"a-{uuid.uuid4().hex[:8]}"


def test_queue_methods(url: str) -> None:
    async def scenario() -> None:
        async with aio.connect(url) as client:
            queue = client.queue(name())
            await queue.create(visibility_ms=60_000, maxreceives=4)
            assert (await queue.settings()).maxreceives == 4
            ids = await queue.push_many([b"a", "b"])
            got = await queue.pop(5)
            assert [m.id for m in got] == ids and isinstance(got[0], Message)
            await queue.touch(got[0], 1000)
            await queue.nack(got[1])
            [again] = await queue.pop()
            with pytest.raises(StaleReceipt):
                await queue.ack(got[1])
            assert await queue.ack(got[0], again) == 2
            assert (await queue.stats()).acked == 2
            assert queue.name in await client.list_queues()
            with pytest.raises(NoQueue):
                await client.queue("no-such-queue-here").pop()
            await queue.schema_set('{"type": "object"}')
            with pytest.raises(SchemaRejected) as caught:
                await client.producer(queue.name).push_many(['{}', '[]'])
            assert caught.value.index == 1 and caught.value.payload == b"[]"
            assert await queue.drop()

    run(scenario())


def test_producer_keys_and_push_stream(url: str) -> None:
    async def scenario() -> None:
        async with aio.connect(url) as client:
            queue = client.queue(name())
            await queue.create()
            producer = client.producer(queue.name)
            first = await producer.push("x", key="k")
            assert await producer.push("x", key="k") == first
            await producer.push("y")
            stream = await queue.consume(prefetch=5)
            got = [await stream.get(5), await stream.get(5)]
            assert sorted(m.payload for m in got if m) == [b"x", b"y"]
            assert await stream.ack(*[m for m in got if m]) == 2
            await stream.close()

    run(scenario())


@pytest.mark.parametrize("prefetch", [None, 4], ids=["pull", "push"])
def test_consumer(shared_narad: NaradProcess, prefetch: int | None) -> None:
    async def scenario() -> None:
        async with aio.connect(f"narad://127.0.0.1:{shared_narad.port}") as client:
            dead = name()
            await client.queue(dead).create()
            queue = client.queue(name())
            await queue.create(visibility_ms=400, maxreceives=2, dlq=dead)
            await client.producer(queue.name).push_many([f"{i}" for i in range(20)] + ["bad"])
            await client.producer(queue.name).push("slow")
            seen: list[bytes] = []

            async def handle(job: aio.Job) -> None:
                if job.payload == b"bad":
                    raise RuntimeError("bad")
                if job.payload == b"slow":
                    await asyncio.sleep(1.2)  # three times the visibility
                seen.append(job.payload)

            consumer = aio.Consumer(queue, handle, concurrency=4, prefetch=prefetch,
                                    backoff_base_ms=10, backoff_max_ms=20)
            task = asyncio.create_task(consumer.run())
            # Polled: the dead letter is the server's doing, with no event to wait on.
            while (await client.queue(dead).stats()).visible < 1 or len(seen) < 21:  # noqa: ASYNC110
                await asyncio.sleep(0.05)
            consumer.stop()
            await task
            counters = consumer.snapshot()
            assert sorted(seen) == sorted([f"{i}".encode() for i in range(20)] + [b"slow"])
            assert counters["acked"] == 21 and counters["dead_lettered"] == 1
            assert counters["touched"] >= 1 and counters["lost"] == 0
            stats = await queue.stats()
            assert (stats.visible, stats.in_flight) == (0, 0)

    run(scenario())


def test_create_if_missing_and_peek(url: str) -> None:
    async def scenario() -> None:
        async with aio.connect(url) as client:
            queue = client.queue(name())
            assert await queue.create(exist_ok=True) is True
            assert await queue.create(visibility_ms=5, exist_ok=True) is False
            await queue.push("x")
            [seen] = await queue.peek()
            assert seen.receipt == "" and seen.receives == 0
            assert await queue.drop(force=True)

    run(scenario())
