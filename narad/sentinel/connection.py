"""A sentinel's client connection (redis-cli, redis-py's `Sentinel`, another
sentinel): it reads requests with the server's parser (the same limits on hostile
input), answers in RESP2 or, after HELLO 3, RESP3, runs the commands of the table it
is given (narad/sentinel/commands.py, wired in by narad/sentinel/serve.py), and
handles (P)SUBSCRIBE and (P)UNSUBSCRIBE itself, delivering the sentinel's events it
subscribed to. A subscriber that falls OUTBOX_MESSAGES messages behind is
disconnected, as Redis does past its pub/sub output buffer limit.
"""

from __future__ import annotations

import fnmatch
import itertools
import logging
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import anyio
import anyio.abc

from narad.errors import CommandError, unknown_command
from narad.resp import ErrorReply, ProtocolError, Push, QueryBufferLimit, RequestParser, encode

if TYPE_CHECKING:
    from narad.sentinel.sentinel import Sentinel

logger = logging.getLogger("narad.sentinel")

# A command's handler: the connection and the arguments (args[0] is the command's
# name) to the reply value, or CommandError.
Handler = Callable[["Connection", list[bytes]], Any]

OUTBOX_MESSAGES = 10_000
RECEIVE_BYTES = 1 << 16
NO_REPLY = object()
SUBSCRIBED_ONLY = {b"subscribe", b"psubscribe", b"unsubscribe", b"punsubscribe", b"ping",
                   b"quit", b"reset"}
PRE_AUTH = {b"auth", b"hello", b"quit"}
_ids = itertools.count(1)


class Connection:
    def __init__(
        self, sentinel: Sentinel, stream: anyio.abc.SocketStream, commands: Mapping[bytes, Handler]
    ) -> None:
        self.sentinel = sentinel
        self.stream = stream
        self.commands = commands
        self.id = next(_ids)
        self.protocol = 2
        self.authenticated = not sentinel.config.requirepass
        self.name = ""
        self.closing = False
        self.created_s = time.monotonic()
        self.channels: set[bytes] = set()
        self.patterns: set[bytes] = set()
        self._send, self._outbox = anyio.create_memory_object_stream[bytes](OUTBOX_MESSAGES)
        peer = stream.extra(anyio.abc.SocketAttribute.remote_address)
        self.addr = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)

    @property
    def subscribed(self) -> bool:
        return bool(self.channels or self.patterns)

    def describe(self) -> str:
        return (
            f"id={self.id} addr={self.addr} name={self.name} "
            f"age={int(time.monotonic() - self.created_s)} "
            f"sub={len(self.channels)} psub={len(self.patterns)} resp={self.protocol}"
        )

    def reset(self) -> None:
        self.channels.clear()
        self.patterns.clear()
        self.protocol = 2
        self.name = ""
        self.authenticated = not self.sentinel.config.requirepass

    # -- output ---------------------------------------------------------------------

    def _out(self, value: Any) -> None:
        try:
            self._send.send_nowait(encode(value, self.protocol))
        except anyio.WouldBlock:
            logger.warning("event=subscriber_dropped client=%s: too far behind", self.addr)
            self.closing = True
            self._send.close()
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            pass

    def publish(self, channel: bytes, payload: bytes) -> None:
        """An event: sent if this connection subscribed to it."""
        if channel in self.channels:
            self._out(Push([b"message", channel, payload]))
        for pattern in self.patterns:
            if _matches(pattern, channel):
                self._out(Push([b"pmessage", pattern, channel, payload]))

    # -- input ----------------------------------------------------------------------

    async def serve(self) -> None:
        async with self.stream, anyio.create_task_group() as tasks:
            tasks.start_soon(self._write)
            try:
                await self._read()
            finally:
                self._send.close()

    async def _write(self) -> None:
        async with self._outbox:
            async for data in self._outbox:
                await self.stream.send(data)
        await self.stream.aclose()

    async def _read(self) -> None:
        parser = RequestParser()
        while not self.closing:
            parser.authenticated = self.authenticated
            try:
                data = await self.stream.receive(RECEIVE_BYTES)
            except (anyio.EndOfStream, anyio.BrokenResourceError, OSError):
                return
            try:
                parser.feed(data)
                while not self.closing and (batch := parser.commands()):
                    for argv in batch:
                        self._run(argv)
                        if self.closing:
                            return
                    parser.authenticated = self.authenticated
            except QueryBufferLimit:
                return
            except ProtocolError as exc:
                self._out(ErrorReply("ERR", exc.message))
                return

    def _run(self, argv: list[bytes]) -> None:
        name = argv[0].lower()
        try:
            reply = self._dispatch(name, argv)
        except CommandError as exc:
            reply = ErrorReply(exc.code, str(exc)[len(exc.code) + 1:])
        if reply is not NO_REPLY:
            self._out(reply)

    def _dispatch(self, name: bytes, argv: list[bytes]) -> Any:
        if not self.authenticated and name not in PRE_AUTH:
            raise CommandError("Authentication required.", "NOAUTH")
        if self.subscribed and self.protocol == 2 and name not in SUBSCRIBED_ONLY:
            shown = argv[0].decode("utf-8", "replace").lower()
            raise CommandError(
                f"Can't execute '{shown}': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / "
                "QUIT / RESET are allowed in this context"
            )
        if name in (b"subscribe", b"psubscribe", b"unsubscribe", b"punsubscribe"):
            self._subscriptions(name, argv)
            return NO_REPLY
        handler = self.commands.get(name)
        if handler is None:
            raise unknown_command(argv[0], argv[1:])
        return handler(self, argv)

    def _subscriptions(self, name: bytes, argv: list[bytes]) -> None:
        patterns = name.startswith(b"p")
        held = self.patterns if patterns else self.channels
        kind = name[1:] if patterns else name
        if kind == b"subscribe" and len(argv) < 2:
            raise CommandError(f"wrong number of arguments for '{name.decode()}' command")
        targets = argv[1:] or sorted(held)
        reply_kind = name
        if not targets:  # unsubscribing from nothing: one reply saying so
            self._out(Push([reply_kind, None, len(self.channels) + len(self.patterns)]))
            return
        for target in targets:
            if kind == b"subscribe":
                held.add(target)
            else:
                held.discard(target)
            count = len(self.channels) + len(self.patterns)
            self._out(Push([reply_kind, target, count]))


def _matches(pattern: bytes, channel: bytes) -> bool:
    """Redis's glob for PSUBSCRIBE (case-sensitive; [^a] negates, as fnmatch's [!a])."""
    text = pattern.decode("utf-8", "surrogateescape").replace("[^", "[!")
    return fnmatch.fnmatchcase(channel.decode("utf-8", "surrogateescape"), text)
