"""Load through redis-py's Sentinel client, unchanged, as an application runs it:
producers push with DEDUP keys through `master_for` and push the same key again
after any error until one push is acknowledged; a consumer pops and acks through
`master_for`; a reader reads through `slave_for`. Each thread records what was
acknowledged to it, and when, so that the checks after a fault can tell what a
failover kept and how long writes were unavailable.

Used by the sentinel tests and by bench/failover.py; bounded in operations and
time.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from typing import Any

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry
from redis.sentinel import Sentinel

NAME = "mymaster"
QUEUE = "q"
VISIBILITY_MS = 2000
MAX_OPS = 100_000
SKIP_ACK = 7  # every SKIP_ACK-th delivery is left unacked
RETRY_PAUSE_S = 0.01
CLIENT_TIMEOUT_S = 2.0


class SentinelLoad:
    def __init__(self, sentinel: Sentinel, producers: int = 2, consumer: bool = True) -> None:
        self.sentinel = sentinel
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.pushed: dict[str, bytes] = {}  # DEDUP key -> the ID its push was answered
        self.ack_times: list[float] = []  # monotonic time of every acknowledged push
        self.consumer_acked: set[bytes] = set()
        self.errors: list[str] = []  # error replies other than a failover's
        workers: list[Callable[[], None]] = [self._producer(i) for i in range(producers)]
        if consumer:
            workers += [self._consumer, self._reader]
        self.threads = [threading.Thread(target=work, daemon=True) for work in workers]

    def __enter__(self) -> SentinelLoad:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.finish()

    def finish(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=30)
        assert not any(thread.is_alive() for thread in self.threads)

    def acked(self) -> int:
        with self.lock:
            return len(self.pushed)

    def first_ack_after(self, moment: float) -> float | None:
        with self.lock:
            later = [t for t in self.ack_times if t > moment]
        return min(later) if later else None

    def _client(self, replica: bool = False) -> redis.Redis:
        kwargs: dict[str, Any] = {
            "socket_timeout": CLIENT_TIMEOUT_S,
            "socket_connect_timeout": CLIENT_TIMEOUT_S,
            "retry": Retry(NoBackoff(), 0),
        }
        if replica:
            return self.sentinel.slave_for(NAME, **kwargs)
        return self.sentinel.master_for(NAME, **kwargs)

    def _producer(self, i: int) -> Callable[[], None]:
        def work() -> None:
            client = self._client()
            for n in range(MAX_OPS):
                key = f"{i}-{n}"
                while not self.stop.is_set():
                    try:
                        mid = client.execute_command("Q.PUSH", QUEUE, "DEDUP", key, key)
                    except (redis.ConnectionError, redis.TimeoutError, redis.ReadOnlyError):
                        time.sleep(RETRY_PAUSE_S)  # the failover: push the key again
                        continue
                    except redis.ResponseError as exc:
                        if not str(exc).startswith(("NOREPL", "NOREPLICAS")):
                            with self.lock:
                                self.errors.append(str(exc))
                        time.sleep(RETRY_PAUSE_S)
                        continue
                    with self.lock:
                        self.pushed[key] = mid
                        self.ack_times.append(time.monotonic())
                    break
                if self.stop.is_set():
                    return
        return work

    def _consumer(self) -> None:
        client = self._client()
        seen = 0
        for _ in range(MAX_OPS):
            if self.stop.is_set():
                return
            try:
                got = client.execute_command(
                    "Q.POP", QUEUE, "COUNT", 10, "VISIBILITY", VISIBILITY_MS
                )
                for message in map(_fields, got):
                    seen += 1
                    if seen % SKIP_ACK == 0:
                        continue
                    if client.execute_command("Q.ACK", QUEUE, message[b"receipt"]) >= 1:
                        with self.lock:
                            self.consumer_acked.add(message[b"id"])
            except (redis.ConnectionError, redis.TimeoutError, redis.ReadOnlyError):
                time.sleep(RETRY_PAUSE_S)
            except redis.ResponseError as exc:
                if not str(exc).startswith(("NOREPL", "NOREPLICAS", "STALE")):
                    with self.lock:
                        self.errors.append(str(exc))
                time.sleep(RETRY_PAUSE_S)

    def _reader(self) -> None:
        client = self._client(replica=True)
        for _ in range(MAX_OPS):
            if self.stop.is_set():
                return
            with contextlib.suppress(redis.ConnectionError, redis.TimeoutError):
                client.xlen(QUEUE)
            time.sleep(0.01)


def _fields(message: Any) -> dict[bytes, Any]:
    """A Q.POP message: a map under RESP3, a flat list of pairs under RESP2."""
    if isinstance(message, dict):
        return message
    return dict(zip(message[::2], message[1::2], strict=True))
