"""`PushStream`: Q.CONSUME on a connection of its own (docs/queues.md, "Blocking
and push mode").

The server pushes `["message", queue, map]` frames, never more than PREFETCH unacked
at once; Q.ACK, Q.NACK and Q.TOUCH on the same connection free room. Frames and the
replies to those commands share the socket, so this class tells them apart by shape
(a frame is a 3-element array whose first element is `message`; no reply to ACK,
NACK, TOUCH or PING has that shape) and matches replies to commands in order.

Concurrency contract: every socket operation holds `_lock`; a reader waits for data
in short slices and lets go of the lock between them, so handler threads can ack
while another thread waits for the next message. When the connection is lost the
messages in flight to it become visible again at once (server side); the stream
raises the connection error, and a Consumer opens a new stream.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import TYPE_CHECKING, Any

import redis

from narad.client.errors import translate
from narad.client.messages import Message, text

if TYPE_CHECKING:
    from narad.client.calls import Caller

READ_SLICE_S = 0.05


class _Waiter:
    __slots__ = ("done", "error", "reply")

    def __init__(self) -> None:
        self.done = False
        self.reply: Any = None
        self.error: Exception | None = None


class PushStream:
    """Messages pushed by Q.CONSUME; iterate, or call `get(timeout_s)`."""

    def __init__(self, client: Caller, queue: str, prefetch: int,
                 visibility_ms: int | None) -> None:
        self.queue = queue
        self._lock = threading.Lock()
        self._frames: deque[Message] = deque()
        self._waiters: deque[_Waiter] = deque()
        self._conn = client.new_connection()
        self.closed = False
        args: list[Any] = ["Q.CONSUME", queue, "PREFETCH", prefetch]
        if visibility_ms is not None:
            args += ["VISIBILITY", visibility_ms]
        self._command(*args)

    # ---- messages ---------------------------------------------------------------------

    def get(self, timeout_s: float | None = None) -> Message | None:
        """The next pushed message; None after `timeout_s` (None: wait for ever)."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            with self._lock:
                if self._frames:
                    return self._frames.popleft()
                self._read_one(READ_SLICE_S)
                if self._frames:
                    return self._frames.popleft()
            if deadline is not None and time.monotonic() >= deadline:
                return None

    def __iter__(self) -> PushStream:
        return self

    def __next__(self) -> Message:
        message = self.get()
        assert message is not None
        return message

    # ---- settling ----------------------------------------------------------------------

    def ack(self, *receipts: str | Message) -> int:
        return int(self._command("Q.ACK", self.queue, *map(_receipt, receipts)))

    def nack(self, receipt: str | Message, *, delay_ms: float | None = None) -> None:
        args: list[Any] = ["Q.NACK", self.queue, _receipt(receipt)]
        if delay_ms:
            args += ["DELAY", int(delay_ms)]
        self._command(*args)

    def touch(self, receipt: str | Message, visibility_ms: float) -> None:
        self._command("Q.TOUCH", self.queue, _receipt(receipt), int(visibility_ms))

    def cancel(self) -> None:
        """Q.CANCEL: no more pushes; what is in flight stays under its deadlines and
        can still be acked here. Frames already on the way are kept for `get`."""
        self._command("Q.CANCEL")

    def close(self) -> None:
        """Close the connection: its in-flight messages become visible at once."""
        with self._lock:
            self.closed = True
            self._conn.disconnect()

    def __enter__(self) -> PushStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- the socket ----------------------------------------------------------------------

    def _command(self, *args: Any) -> Any:
        waiter = _Waiter()
        with self._lock:
            self._conn.send_command(*args)
            self._waiters.append(waiter)
            while not waiter.done:
                self._read_one(None)
        if waiter.error is not None:
            raise waiter.error
        return waiter.reply

    def _read_one(self, timeout_s: float | None) -> None:
        """Read one frame or reply if one comes within `timeout_s` (None: wait)."""
        if timeout_s is not None and not self._conn.can_read(timeout=timeout_s):
            return
        try:
            reply = self._conn.read_response(push_request=True)
        except redis.ResponseError as exc:
            self._resolve(None, translate(exc))
            return
        if _is_frame(reply):
            self._frames.append(Message.from_reply(text(reply[1]), reply[2]))
        else:
            self._resolve(reply, None)

    def _resolve(self, reply: Any, error: Exception | None) -> None:
        if not self._waiters:
            raise redis.ConnectionError(f"unexpected reply in push mode: {reply or error!r}")
        waiter = self._waiters.popleft()
        waiter.reply, waiter.error, waiter.done = reply, error, True


def _is_frame(reply: Any) -> bool:
    return (isinstance(reply, list) and len(reply) == 3
            and isinstance(reply[0], bytes) and reply[0] == b"message")


def _receipt(item: str | Message) -> str:
    return item.receipt if isinstance(item, Message) else item
