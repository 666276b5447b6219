"""`Queue`: one typed method per Q.* command (docs/queues.md, "Commands").

Replies come back as the dataclasses of narad/client/messages.py and error replies
as the exceptions of narad/client/errors.py, under RESP2 and RESP3 alike. Every
method goes through the client's bounded retry (narad/client/connect.py) except
those that are not safe to repeat: Q.PUSH without a DEDUP key, and Q.REDRIVE.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from narad.client.errors import SchemaRejected
from narad.client.messages import (
    Message,
    QueueSettings,
    QueueStats,
    SchemaVersion,
    messages,
    text,
)

if TYPE_CHECKING:
    from narad.client.calls import Caller
    from narad.client.push import PushStream

Payload = bytes | str

# Q.POP BLOCK is sent in slices no longer than this, so that a long wait never
# outlasts the socket timeout and a failover is noticed between slices.
BLOCK_SLICE_MS = 5000


def _ms(value: float | int | None) -> int | None:
    return None if value is None else int(value)



# The arguments of Q.* commands and the naming of a refused payload, shared by this
# Queue and narad.client.aio's.


def create_args(name: str, options: dict[str, Any], exist_ok: bool) -> list[Any]:
    """Q.CREATE's arguments: each option given (not None), then NX with `exist_ok`."""
    args: list[Any] = ["Q.CREATE", name]
    for option, value in options.items():
        if value is not None:
            args += [option, value]
    if exist_ok:
        args.append("NX")
    return args


def push_args(name: str, delay_ms: float | None, dedup: str | None) -> list[Any]:
    """Q.PUSH's arguments before its payloads."""
    args: list[Any] = ["Q.PUSH", name]
    if delay_ms:
        args += ["DELAY", max(0, int(delay_ms))]
    if dedup is not None:
        args += ["DEDUP", dedup]
    return args


def pop_args(name: str, count: int, visibility_ms: int | None) -> list[Any]:
    """Q.POP's arguments but BLOCK."""
    args: list[Any] = ["Q.POP", name, "COUNT", count]
    if visibility_ms is not None:
        args += ["VISIBILITY", visibility_ms]
    return args


def name_refused(exc: SchemaRejected, payloads: Sequence[Payload]) -> None:
    """Give a schema refusal of a push of `payloads` the payload it names."""
    if exc.index is None and len(payloads) == 1:
        exc.index = 0
    if exc.index is not None and exc.index < len(payloads):
        exc.payload = _as_bytes(payloads[exc.index])

class Queue:
    """A queue by name, on a client. Creating this object sends nothing."""

    def __init__(self, client: Caller, name: str) -> None:
        self.client = client
        self.name = name

    def __repr__(self) -> str:
        return f"Queue({self.name!r})"

    # ---- life and settings --------------------------------------------------------

    def create(self, *, visibility_ms: int | None = None, maxreceives: int | None = None,
               dlq: str | None = None, delay_ms: int | None = None,
               retention_ms: int | None = None, maxbytes: int | None = None,
               dedupwindow_ms: int | None = None, exist_ok: bool = False) -> bool:
        """Q.CREATE: True if the queue was made. SettingsConflict if it exists with
        other settings, unless `exist_ok` (NX: "make sure it exists", the settings
        of an existing queue are left as they are; False if it existed)."""
        args = create_args(self.name, {
            "VISIBILITY": visibility_ms, "MAXRECEIVES": maxreceives, "DLQ": dlq,
            "DELAY": delay_ms, "RETENTION": retention_ms, "MAXBYTES": maxbytes,
            "DEDUPWINDOW": dedupwindow_ms}, exist_ok)
        reply = self.client.execute(*args)
        return not exist_ok or bool(reply)

    def drop(self, *, force: bool = False) -> bool:
        """Q.DROP [FORCE]: True if the queue existed. Refused (an ERR naming them)
        while another queue uses it as its DLQ or copies from it, unless `force`."""
        args = ["Q.DROP", self.name, *(["FORCE"] if force else [])]
        return bool(self.client.execute(*args))

    def settings(self) -> QueueSettings:
        return QueueSettings.from_reply(self.client.execute("Q.CONFIG", self.name, "GET"))

    def configure(self, **settings: int | str) -> None:
        """Q.CONFIG SET, e.g. `configure(visibility=60000, dlq="jobs-dead")`."""
        args: list[Any] = ["Q.CONFIG", self.name, "SET"]
        for name, value in settings.items():
            args += [name, value]
        self.client.execute(*args)

    def stats(self) -> QueueStats:
        return QueueStats.from_reply(self.client.execute("Q.STATS", self.name))

    # ---- producing ------------------------------------------------------------------

    def push(self, payload: Payload, *, delay_ms: float | None = None,
             dedup: str | None = None) -> str:
        """Q.PUSH of one payload: its message ID. Retried across failover only when
        `dedup` is given (narad.client.Producer always gives one)."""
        args = push_args(self.name, delay_ms, dedup)
        try:
            return text(self.client.execute(*args, payload, retry=dedup is not None))
        except SchemaRejected as exc:
            name_refused(exc, [payload])
            raise

    def push_many(self, payloads: Sequence[Payload], *, delay_ms: float | None = None) -> list[str]:
        """Q.PUSH of several payloads in one command: all appended or none. Not
        retried (no DEDUP key can cover a batch: see Producer.push_many)."""
        if not payloads:
            return []
        args = push_args(self.name, delay_ms, None)
        try:
            reply = self.client.execute(*args, *payloads, retry=False)
        except SchemaRejected as exc:
            name_refused(exc, payloads)
            raise
        return [text(i) for i in reply] if isinstance(reply, list) else [text(reply)]

    # ---- consuming ------------------------------------------------------------------

    def pop(self, count: int = 1, *, visibility_ms: int | None = None,
            block_ms: int | None = None) -> list[Message]:
        """Q.POP: up to `count` messages; [] when none (after `block_ms`, if given;
        0 waits until one comes). A delivery whose reply a lost connection swallowed
        comes back when its visibility deadline passes."""
        args = pop_args(self.name, count, visibility_ms)
        if block_ms is None:
            return messages(self.name, self.client.execute(*args))
        left = block_ms
        while True:
            wait = BLOCK_SLICE_MS if left == 0 else min(left, BLOCK_SLICE_MS)
            got = messages(self.name, self.client.execute(*args, "BLOCK", max(1, wait)))
            if got or (block_ms and (left := left - wait) <= 0):
                return got

    def peek(self, count: int = 1) -> list[Message]:
        """Q.PEEK: what Q.POP would deliver next, delivering nothing (a look at a
        DLQ that leaves its letters for Q.REDRIVE); `receipt` is "" and `receives`
        counts the deliveries so far."""
        return messages(self.name, self.client.execute("Q.PEEK", self.name, "COUNT", count))

    def ack(self, *receipts: str | Message) -> int:
        """Q.ACK: the number acked. StaleReceipt if one names an older delivery
        (nothing in the call is acked then)."""
        if not receipts:
            return 0
        return int(self.client.execute("Q.ACK", self.name, *map(_receipt, receipts)))

    def nack(self, receipt: str | Message, *, delay_ms: float | None = None) -> None:
        """Q.NACK: visible again now or after the delay; a failed receive."""
        args: list[Any] = ["Q.NACK", self.name, _receipt(receipt)]
        if delay_ms:
            args += ["DELAY", max(0, int(delay_ms))]
        self.client.execute(*args)

    def touch(self, receipt: str | Message, visibility_ms: float) -> None:
        """Q.TOUCH: the delivery's deadline becomes now + visibility_ms."""
        self.client.execute("Q.TOUCH", self.name, _receipt(receipt), int(visibility_ms))

    def consume(self, prefetch: int = 10, *, visibility_ms: int | None = None) -> PushStream:
        """Q.CONSUME on a connection of its own: an iterator of pushed messages
        (narad/client/push.py)."""
        from narad.client.push import PushStream

        return PushStream(self.client, self.name, prefetch, visibility_ms)

    # ---- fan-out, replay, dead letters ------------------------------------------------

    def subscribe(self, source: str, *, start: str | None = None) -> None:
        """Q.SUBSCRIBE this queue to `source` FROM start (EARLIEST, LATEST or an ID)."""
        args: list[Any] = ["Q.SUBSCRIBE", self.name, source]
        if start is not None:
            args += ["FROM", start]
        self.client.execute(*args)

    def unsubscribe(self, source: str) -> bool:
        return bool(self.client.execute("Q.UNSUBSCRIBE", self.name, source))

    def seek(self, position: str | None = None, *, time_ms: int | None = None) -> None:
        """Q.SEEK to EARLIEST, LATEST, an ID, or (time_ms) the first entry at or
        after a time."""
        if (position is None) == (time_ms is None):
            raise ValueError("seek takes a position or time_ms, one of them")
        where: list[Any] = ["TIME", time_ms] if time_ms is not None else [position]
        self.client.execute("Q.SEEK", self.name, *where)

    def redrive(self, *, to: str | None = None, count: int | None = None) -> int:
        """Q.REDRIVE from this queue (a DLQ): the number moved. Not retried."""
        args: list[Any] = ["Q.REDRIVE", self.name]
        if to is not None:
            args += ["TO", to]
        if count is not None:
            args += ["COUNT", count]
        return int(self.client.execute(*args, retry=False))

    # ---- schemas ---------------------------------------------------------------------

    def schema_set(self, schema: str, *, compat: str | None = None,
                   field: str | None = None) -> int:
        """Q.SCHEMA SET: the new version number; IncompatibleSchema if refused."""
        args: list[Any] = ["Q.SCHEMA", "SET", self.name, schema]
        if compat is not None:
            args += ["COMPAT", compat]
        if field is not None:
            args += ["FIELD", field]
        return int(self.client.execute(*args))

    def schema_get(self, version: int | None = None) -> SchemaVersion | None:
        args: list[Any] = ["Q.SCHEMA", "GET", self.name]
        if version is not None:
            args.append(version)
        reply = self.client.execute(*args)
        return None if reply is None else SchemaVersion.from_reply(reply)

    def schema_versions(self) -> list[int]:
        return [int(v) for v in self.client.execute("Q.SCHEMA", "VERSIONS", self.name)]

    def schema_check(self, schema: str, *, compat: str | None = None) -> None:
        """Q.SCHEMA CHECK: returns if compatible, else IncompatibleSchema."""
        args: list[Any] = ["Q.SCHEMA", "CHECK", self.name, schema]
        if compat is not None:
            args += ["COMPAT", compat]
        self.client.execute(*args)

    def schema_compat(self, mode: str | None = None) -> str:
        """Q.SCHEMA COMPAT: the mode, or sets it (then returns it)."""
        if mode is None:
            return text(self.client.execute("Q.SCHEMA", "COMPAT", self.name))
        self.client.execute("Q.SCHEMA", "COMPAT", self.name, mode)
        return mode

    def schema_drop(self) -> bool:
        return bool(self.client.execute("Q.SCHEMA", "DROP", self.name))


def _receipt(item: str | Message) -> str:
    return item.receipt if isinstance(item, Message) else item


def _as_bytes(payload: Payload) -> bytes:
    return payload.encode() if isinstance(payload, str) else payload


def receipts_of(items: Iterable[str | Message]) -> list[str]:
    return [_receipt(i) for i in items]
