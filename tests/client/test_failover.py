"""Producers through `narad+sentinel://` under kill -9 of the leader, the sync one
and the asyncio one side by side: nothing lost, nothing stored twice, and both
resume once the sentinels have promoted a replica (bounded generously here;
bench/README.md has the time)."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

from narad.client import aio, connect
from tests.sentinel.cluster import NAME, deployment
from tests.servers import wait_until

MESSAGES = 300


def test_producer_survives_leader_kill(tmp_path: Path) -> None:
    with deployment(tmp_path) as found:
        urls = ",".join(f"{s.host}:{s.port}" for s in found.sentinels)
        client = connect(f"narad+sentinel://{urls}/{NAME}", retry_s=60)
        client.queue("orders").create()
        producer = client.producer("orders")
        answered: list[tuple[float, str]] = []  # (monotonic time, ID) per push
        failures: list[BaseException] = []

        def produce() -> None:
            try:
                for i in range(MESSAGES):
                    answered.append((time.monotonic(), producer.push(f"m{i}", key=f"k{i}")))
            except BaseException as exc:  # reported by the test below
                failures.append(exc)

        async def produce_async() -> None:
            async with aio.connect(f"narad+sentinel://{urls}/{NAME}", retry_s=60) as other:
                await other.queue("orders-aio").create()
                producer = other.producer("orders-aio")
                for i in range(MESSAGES):
                    message_id = await producer.push(f"m{i}", key=f"k{i}")
                    answered_aio.append(message_id)
                    answered_aio_at.append(time.monotonic())

        answered_aio: list[str] = []
        answered_aio_at: list[float] = []

        def produce_aio() -> None:
            try:
                asyncio.run(produce_async())
            except BaseException as exc:  # reported by the test below
                failures.append(exc)

        threads = [threading.Thread(target=produce), threading.Thread(target=produce_aio)]
        for thread in threads:
            thread.start()
        wait_until(lambda: len(answered) >= 50 and len(answered_aio) >= 50)
        old = found.node_at(found.leader_address())
        killed_at = time.monotonic()
        old.kill()
        for thread in threads:
            thread.join(timeout=90)
        assert not any(t.is_alive() for t in threads) and not failures, failures

        after = [t for t, _ in answered if t > killed_at]
        assert after, "no push was answered after the kill"
        assert after[0] - killed_at < 30  # the sentinels' down-after is 1 s
        new = found.node_at(found.leader_address())
        assert new is not old

        ids = [message_id for _, message_id in answered]
        assert len(set(ids)) == MESSAGES
        entries = new.client().xrange("orders")
        payloads = [fields[b"payload"] for _, fields in entries]
        assert payloads == [f"m{i}".encode() for i in range(MESSAGES)]  # once each, in order
        assert len(set(answered_aio)) == MESSAGES
        assert any(t > killed_at for t in answered_aio_at)
        entries = new.client().xrange("orders-aio")
        assert [fields[b"payload"] for _, fields in entries] == payloads
        assert producer.counters.retried_calls >= 1
        client.close()
