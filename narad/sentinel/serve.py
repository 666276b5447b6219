"""`narad sentinel FILE`: the sentinel process. It loads its config file (which it
must be able to rewrite: it records its id, epochs, votes and what it discovers
there), listens for clients (redis-cli, redis-py's `Sentinel`, other sentinels), and
watches its groups (narad/sentinel/sentinel.py) until SHUTDOWN, SIGTERM or SIGINT.

A client connection reads requests with the server's parser (the same limits on
hostile input), answers in RESP2 or, after HELLO 3, RESP3, and delivers the
sentinel's events to it once it SUBSCRIBEs or PSUBSCRIBEs to them. A subscriber
that falls OUTBOX_MESSAGES messages behind is disconnected, as Redis does past its
pub/sub output buffer limit.
"""

from __future__ import annotations

import argparse
import asyncio
import fnmatch
import itertools
import logging
import os
import signal
import sys
import time
from typing import Any

import anyio
import anyio.abc
import anyio.streams.stapled

from narad.errors import CommandError
from narad.resp import ErrorReply, ProtocolError, Push, QueryBufferLimit, RequestParser, encode
from narad.sentinel import commands
from narad.sentinel import config as sentinel_config
from narad.sentinel.sentinel import Sentinel

logger = logging.getLogger("narad.sentinel")

OUTBOX_MESSAGES = 10_000
RECEIVE_BYTES = 1 << 16
NO_REPLY = object()
SUBSCRIBED_ONLY = {b"subscribe", b"psubscribe", b"unsubscribe", b"punsubscribe", b"ping",
                   b"quit", b"reset"}
PRE_AUTH = {b"auth", b"hello", b"quit"}
_ids = itertools.count(1)


class Connection:
    def __init__(self, sentinel: Sentinel, stream: anyio.abc.SocketStream) -> None:
        self.sentinel = sentinel
        self.stream = stream
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
        handler = commands.COMMANDS.get(name)
        if handler is None:
            raise commands.unknown(argv[0], argv)
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


# -- the process ---------------------------------------------------------------------------


class SentinelServer:
    def __init__(self, config: sentinel_config.SentinelConfig) -> None:
        self.config = config
        self._scope: anyio.CancelScope | None = None

    def stop(self) -> None:
        if self._scope is not None:
            self._scope.cancel()

    async def run(self) -> None:
        self._scope = anyio.CancelScope()
        config = self.config
        self.sentinel = Sentinel(config, self.stop)
        listeners = [
            await anyio.create_tcp_listener(local_host=host, local_port=config.port,
                                            reuse_port=False)
            for host in config.bind
        ]
        listener = anyio.streams.stapled.MultiListener(listeners)
        first = listener.listeners[0]
        self.sentinel.port = int(first.extra(anyio.abc.SocketAttribute.local_port))
        logger.warning(
            "event=sentinel_ready port=%d id=%s config=%s", self.sentinel.port,
            self.sentinel.my_id, config.path,
        )
        with self._scope:
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(self._signals)
                tasks.start_soon(self.sentinel.run, tasks)
                await listener.serve(self._client, tasks)

    async def _client(self, stream: anyio.abc.SocketStream) -> None:
        connection = Connection(self.sentinel, stream)
        self.sentinel.connections.add(connection)
        self.sentinel.connections_received += 1
        try:
            await connection.serve()
        except Exception as exc:  # a connection's end, however it came, is its alone
            logger.debug("event=client_closed client=%s reason=%r", connection.addr, exc)
        finally:
            self.sentinel.connections.discard(connection)

    async def _signals(self) -> None:
        with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async for signum in signals:
                logger.warning("event=shutdown signal=%s", signal.Signals(signum).name)
                self.sentinel.persist()
                self.stop()
                return


def run(args: argparse.Namespace) -> int:
    """`narad sentinel FILE [--port N] [--bind ADDR ...]`, or `narad server FILE
    --sentinel [--port N]` (narad/cli.py, narad/serve.py parse the command line)."""
    from narad import serve

    if not args.config_file:
        print("Sentinel needs config file on disk to save state. Exiting...", file=sys.stderr)
        return 1
    overrides = [
        (name.lstrip("-"), [words] if isinstance(words, str) else list(words))
        for name, words in args.overrides
    ]
    try:
        config = sentinel_config.load(args.config_file, overrides)
    except sentinel_config.ConfigError as exc:
        print(f"*** FATAL CONFIG FILE ERROR ***\n{exc}", file=sys.stderr)
        return 1
    if not os.access(config.path, os.W_OK):
        print("Sentinel config file is not writable. Exiting...", file=sys.stderr)
        return 1
    _setup_logging(config)
    server = SentinelServer(config)
    try:
        with asyncio.Runner(loop_factory=serve.loop_factory()) as runner:
            runner.run(server.run())
    except OSError as exc:
        logger.error("event=sentinel_failed reason=%r", str(exc))
        return 1
    return 0


def _setup_logging(config: sentinel_config.SentinelConfig) -> None:
    from narad.serve import LOG_LEVELS

    handler: logging.Handler = (
        logging.FileHandler(config.logfile) if config.logfile else logging.StreamHandler()
    )
    handler.setFormatter(
        logging.Formatter("ts=%(asctime)s level=%(levelname)s logger=%(name)s msg=%(message)r")
    )
    root = logging.getLogger("narad")
    root.handlers[:] = [handler]
    root.propagate = False
    level = LOG_LEVELS.get(config.loglevel, logging.WARNING)
    root.setLevel(level)
