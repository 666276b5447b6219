"""A Producer and a Consumer through `narad+sentinel://` under kill -9 of the leader:
nothing lost, nothing stored twice, and the producer resumes once the sentinels
have promoted a replica (bounded generously here; bench/README.md has the time)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from narad.client import connect
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

        thread = threading.Thread(target=produce)
        thread.start()
        wait_until(lambda: len(answered) >= 50)
        old = found.node_at(found.leader_address())
        killed_at = time.monotonic()
        old.kill()
        thread.join(timeout=90)
        assert not thread.is_alive() and not failures, failures

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
        assert producer.counters.retried_calls >= 1
        client.close()
