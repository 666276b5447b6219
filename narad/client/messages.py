"""Typed replies of the Q.* commands, the same under RESP2 and RESP3.

A Q.POP reply or a push frame carries one map per message; RESP3 sends a map and
RESP2 a flat array of key, value, ... (docs/queues.md, "Message maps"). `pairs`
reads either, so every dataclass here is built the same way from both.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any


def text(value: Any) -> str:
    """A reply value as str (redis-py gives bytes without decode_responses)."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "surrogateescape")
    return str(value)


def pairs(reply: Any) -> dict[str, Any]:
    """A map reply (RESP3 dict, or RESP2 flat array) as a dict with str keys."""
    if isinstance(reply, dict):
        return {text(k): v for k, v in reply.items()}
    items = list(reply)
    return {text(items[i]): items[i + 1] for i in range(0, len(items) - 1, 2)}


@dataclass(frozen=True)
class Message:
    """One delivery of a queued message.

    `id` is the stream ID, `receipt` this delivery's receipt (needed to ack, nack or
    touch it; "" for a message seen with Q.PEEK, which delivers nothing),
    `receives` the deliveries so far this one included, `pushed_at` the push time
    in ms, `fields` the entry's other fields (a dead letter's `origin`,
    `origin_id`, ...; a fan-out copy's `source`, `source_id`)."""

    queue: str
    id: str
    receipt: str
    payload: bytes
    receives: int
    pushed_at: int
    fields: dict[str, bytes] = field(default_factory=dict)

    @classmethod
    def from_reply(cls, queue: str, reply: Any) -> Message:
        got = pairs(reply)
        known = {"id", "receipt", "payload", "receives", "pushed_at"}
        return cls(
            queue=queue,
            id=text(got["id"]),
            receipt=text(got.get("receipt", b"")),
            payload=_as_bytes(got.get("payload", b"")),
            receives=int(got["receives"]),
            pushed_at=int(got["pushed_at"]),
            fields={k: _as_bytes(v) for k, v in got.items() if k not in known},
        )

    def text(self) -> str:
        return self.payload.decode("utf-8")

    def json(self) -> Any:
        return json.loads(self.payload)


def _as_bytes(value: Any) -> bytes:
    if isinstance(value, bytes):
        return value
    return str(value).encode()


def messages(queue: str, reply: Any) -> list[Message]:
    """A Q.POP reply as messages; None (BLOCK timed out) is no message."""
    if not reply:
        return []
    return [Message.from_reply(queue, item) for item in reply]


@dataclass(frozen=True)
class QueueStats:
    """Q.STATS (docs/queues.md, "Q.STATS"): counts of messages and log sizes."""

    visible: int
    in_flight: int
    delayed: int
    dead_lettered: int
    dropped: int
    schema_rejected: int
    pushed: int
    acked: int
    oldest_visible_age_ms: int
    consumers: int
    subscribers: int
    subscriptions: int
    log_bytes: int
    segments: int
    first_id: str | None
    last_id: str | None
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_reply(cls, reply: Any) -> QueueStats:
        got = pairs(reply)
        ids = {"first_id", "last_id"}
        names = [f for f in cls.__dataclass_fields__ if f != "extra"]
        values: dict[str, Any] = {}
        for name in names:
            value = got.get(name)
            if name in ids:
                values[name] = None if value is None else text(value)
            else:
                values[name] = int(value or 0)
        extra = {k: v for k, v in got.items() if k not in names}
        return cls(**values, extra=extra)


@dataclass(frozen=True)
class QueueSettings:
    """A queue's settings (Q.CONFIG GET): ms for times, 0 for "none" or "server
    default" as docs/queues.md says, "" for no DLQ."""

    visibility: int
    maxreceives: int
    dlq: str
    delay: int
    retention: int
    maxbytes: int
    dedupwindow: int
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_reply(cls, reply: Any) -> QueueSettings:
        got = pairs(reply)
        names = [f for f in cls.__dataclass_fields__ if f != "extra"]
        values: dict[str, Any] = {}
        for name in names:
            value = got.get(name)
            values[name] = text(value or b"") if name == "dlq" else int(value or 0)
        extra = {k: v for k, v in got.items() if k not in names}
        return cls(**values, extra=extra)


@dataclass(frozen=True)
class SchemaVersion:
    """Q.SCHEMA GET: a version, its JSON Schema text, and the FIELD it validates
    (None: the whole payload)."""

    version: int
    schema: str
    field: str | None

    @classmethod
    def from_reply(cls, reply: Any) -> SchemaVersion:
        got = pairs(reply)
        named = got.get("field")
        return cls(int(got["version"]), text(got["schema"]),
                   None if named is None else text(named))
