"""`Producer`: pushes that are stored once however many times they were sent.

Each logical message gets a DEDUP key (a random UUID unless the caller names one),
and every send of it, first or retried, carries that key. A retry after a lost
connection, a failover (READONLY, a new leader named by the sentinels) or a NOREPL
answer therefore either appends the message or answers the ID of the copy already
stored (docs/queues.md, "Deduplication"). This holds as long as the retries end
within the queue's DEDUPWINDOW (default 5 minutes), which the client's retry budget
(default 30 s) keeps.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import redis

from narad.client.errors import SchemaRejected, translate
from narad.client.messages import text
from narad.client.queue import Payload, Queue, name_refused, push_args


@dataclass
class ProducerCounters:
    pushed: int = 0  # messages whose push was answered with an ID
    retried_calls: int = 0  # calls that needed more than one send


class Producer:
    """Thread-safe: it holds no state but its counters (updated without a lock: they
    are statistics, not contracts)."""

    def __init__(self, queue: Queue) -> None:
        self.queue = queue
        self.counters = ProducerCounters()

    def push(self, payload: Payload, *, key: str | None = None,
             delay_ms: float | None = None) -> str:
        """Push one message; `key` names it for deduplication (default: a new one).
        Returns its ID: the same ID for every send of the same key."""
        dedup = key or uuid.uuid4().hex
        sends = 0

        args = [*push_args(self.queue.name, delay_ms, dedup), payload]

        def send(r: redis.Redis) -> str:
            nonlocal sends
            sends += 1
            return text(r.execute_command(*args))

        try:
            message_id = self.queue.client.call(send)
        except SchemaRejected as exc:
            name_refused(exc, [payload])
            raise
        self.counters.pushed += 1
        self.counters.retried_calls += sends > 1
        return message_id

    def push_many(self, payloads: Sequence[Payload], *, keys: Sequence[str] | None = None,
                  delay_ms: float | None = None) -> list[str]:
        """Push a batch: one Q.PUSH DEDUP per message, pipelined in one round trip,
        the whole pipeline sent again on failure (what was stored answers its first
        ID). Not atomic: after an error some of the batch may be stored; sending the
        same batch with the same `keys` again stores the rest once."""
        if keys is not None and len(keys) != len(payloads):
            raise ValueError("keys and payloads differ in length")
        dedups = list(keys) if keys is not None else [uuid.uuid4().hex for _ in payloads]
        sends = 0

        def send(r: redis.Redis) -> list[str]:
            nonlocal sends
            sends += 1
            pipe = r.pipeline(transaction=False)
            for payload, dedup in zip(payloads, dedups, strict=True):
                pipe.execute_command(*push_args(self.queue.name, delay_ms, dedup), payload)
            replies: list[Any] = pipe.execute(raise_on_error=False)
            for index, reply in enumerate(replies):
                if isinstance(reply, Exception):
                    error = translate(reply) if isinstance(reply, redis.ResponseError) else reply
                    if isinstance(error, SchemaRejected):
                        error.index = index
                        name_refused(error, payloads)
                    raise error
            return [text(reply) for reply in replies]

        ids = self.queue.client.call(send)
        self.counters.pushed += len(ids)
        self.counters.retried_calls += sends > 1
        return ids
