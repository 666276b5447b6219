"""The client's exceptions: one class per error code the Q.* commands answer.

Every class derives from redis-py's `ResponseError`, so code that already catches
redis-py's errors keeps working; `translate` turns a redis-py error reply into the
most specific class here by its first word (docs/queues.md, "Errors"). Errors that
mean "ask again, maybe elsewhere" (a lost connection, READONLY after a failover,
NOREPLICAS, NOREPL, LOADING) are what `narad.client.connect`'s retry rides through;
`RetryTimeout` is raised once it gives up.
"""

from __future__ import annotations

import re

import redis


class NaradError(redis.ResponseError):
    """An error reply of a Narad server. `code` is its first word (ERR, NOQUEUE, ...)."""

    code = "ERR"

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text


class NoQueue(NaradError):
    """NOQUEUE: the queue (or the DLQ, TO queue, source) does not exist."""

    code = "NOQUEUE"


class StaleReceipt(NaradError):
    """STALE: the receipt names an older delivery, or (NACK, TOUCH) a delivery no
    longer in flight. The message is someone else's now: do not ack it."""

    code = "STALE"


class InvalidReceipt(NaradError):
    """ERR invalid receipt: not a receipt this queue signed."""


class SettingsConflict(NaradError):
    """ERR queue 'q' exists with other settings: Q.CREATE of an existing queue."""


class QueueInUse(NaradError):
    """ERR queue 'q' is the DLQ of ... / the source of ...: Q.DROP refused while other
    queues depend on it (`Queue.drop(force=True)` drops it anyway)."""


class QueueUnavailable(NaradError):
    """ERR key 'q' is unavailable: its state log needs `narad check --repair`."""


class SchemaRejected(NaradError):
    """SCHEMA: a payload does not match the queue's schema.

    `path` and `reason` come from the reply (`SCHEMA <path>: <reason> (version N)`);
    `payload` is the refused payload and `index` its place in the call's payloads,
    when the client can tell which one it was (a push of one payload, or a reply that
    names the index)."""

    code = "SCHEMA"

    def __init__(self, text: str) -> None:
        super().__init__(text)
        body = text.partition(" ")[2]
        self.path, _, rest = body.partition(": ")
        self.reason = re.sub(r" \(version \d+\)$", "", rest)
        found = re.search(r"\(version (\d+)\)$", text)
        self.version: int | None = int(found.group(1)) if found else None
        found = re.search(r"payload (?:#|index )?(\d+)", text)
        self.index: int | None = int(found.group(1)) if found else None
        self.payload: bytes | None = None


class IncompatibleSchema(NaradError):
    """INCOMPATIBLE: a schema version breaks the queue's compatibility mode."""

    code = "INCOMPATIBLE"


class NotReplicated(NaradError):
    """NOREPL: the write reached too few replicas in time; it may or may not survive.
    A push carrying a DEDUP key can be sent again safely."""

    code = "NOREPL"


class NotEnoughReplicas(NaradError):
    """NOREPLICAS: the leader has too few replicas to take writes."""

    code = "NOREPLICAS"


class RetryTimeout(redis.ConnectionError):
    """The retry gave up: no leader answered within the retry budget."""


_BY_CODE: dict[str, type[NaradError]] = {
    cls.code: cls
    for cls in (NoQueue, StaleReceipt, SchemaRejected, IncompatibleSchema,
                NotReplicated, NotEnoughReplicas)
}

# redis-py strips a leading "ERR " from error texts; these are told apart by text.
_BY_TEXT: list[tuple[str, type[NaradError]]] = [
    ("invalid receipt ", InvalidReceipt),
    ("queue '", SettingsConflict),
    ("queue '", QueueInUse),
    ("key '", QueueUnavailable),
]


# What else the text of these must hold, beyond its prefix.
_TELLS: dict[type[NaradError], str] = {
    SettingsConflict: "exists with other settings",
    QueueInUse: "change those first",
    QueueUnavailable: "is unavailable",
}


def translate(error: redis.ResponseError) -> redis.ResponseError:
    """The most specific exception for an error reply (the error itself if none)."""
    if isinstance(error, NaradError):
        return error
    text = str(error)
    code = text.split(" ", 1)[0]
    if code in _BY_CODE:
        return _BY_CODE[code](text)
    for prefix, cls in _BY_TEXT:
        if text.startswith(prefix) and _TELLS.get(cls, "") in text:
            return cls(text)
    return error


# Error replies after which the same command may be sent again, to the leader the
# next connection finds: the node is not (or no longer) the leader, is loading, or
# could not replicate in time.
RETRYABLE_CODES = ("READONLY", "LOADING", "MASTERDOWN", "TRYAGAIN", "NOREPLICAS", "NOREPL")


def retryable_reply(error: redis.ResponseError) -> bool:
    return str(error).split(" ", 1)[0] in RETRYABLE_CODES
