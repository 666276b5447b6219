"""`narad sentinel FILE`: the sentinel process. It loads its config file (which it
must be able to rewrite: it records its id, epochs, votes and what it discovers
there), listens for clients (redis-cli, redis-py's `Sentinel`, other sentinels), and
watches its groups (narad/sentinel/sentinel.py) until SHUTDOWN, SIGTERM or SIGINT.

It wires the parts together: each client connection (narad/sentinel/connection.py)
gets the command table (narad/sentinel/commands.py), and the sentinel's decisions
get the tasks they start, the links' loops (narad/sentinel/watch.py) and a
failover's (narad/sentinel/failover.py).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from typing import Any

import anyio
import anyio.abc
import anyio.streams.stapled
import anyio.streams.tls

from narad import tls
from narad.logs import NOTICE
from narad.metrics_http import HttpServer
from narad.process import log_level, log_to, loop_factory
from narad.sentinel import commands, failover, metrics, watch
from narad.sentinel import config as sentinel_config
from narad.sentinel.connection import Connection
from narad.sentinel.sentinel import Sentinel

logger = logging.getLogger("narad.sentinel")


class _TLSListener(anyio.streams.tls.TLSListener):
    """anyio's TLS listener, each handshake in a task of its own and bounded by
    HANDSHAKE_TIMEOUT_S; one that fails drops its connection alone and is logged as
    one line, not as an error."""

    @staticmethod
    async def handle_handshake_error(exc: BaseException, stream: anyio.abc.AnyByteStream) -> None:
        await anyio.aclose_forcefully(stream)
        if not isinstance(exc, Exception) or isinstance(exc, anyio.get_cancelled_exc_class()):
            raise exc
        logger.info("event=tls_handshake_failed reason=%r", str(exc) or type(exc).__name__)


class SentinelServer:
    def __init__(
        self, config: sentinel_config.SentinelConfig, contexts: tls.Contexts | None = None
    ) -> None:
        self.config = config
        self.contexts = contexts  # narad/tls.py's, with tls-port or tls-replication
        self._scope: anyio.CancelScope | None = None

    def stop(self) -> None:
        if self._scope is not None:
            self._scope.cancel()

    async def run(self) -> None:
        self._scope = anyio.CancelScope()
        config = self.config
        contexts = self.contexts
        self.sentinel = Sentinel(
            config, self.stop, watch=watch.run, start_failover=failover.start,
            tls=contexts.client if contexts is not None and config.tls.replication else None,
        )
        # The plain port unless it is 0 with a TLS port set (TLS only, as Redis).
        plain = bool(config.port or not config.tls_port)
        listeners: list[anyio.abc.Listener[Any]] = []
        if plain:
            listeners += [
                await anyio.create_tcp_listener(local_host=host, local_port=config.port,
                                                reuse_port=False)
                for host in config.bind
            ]
            first = listeners[0]
            self.sentinel.port = int(first.extra(anyio.abc.SocketAttribute.local_port))
        if config.tls_port:
            assert contexts is not None
            for host in config.bind:
                tcp = await anyio.create_tcp_listener(
                    local_host=host, local_port=config.tls_port, reuse_port=False
                )
                listeners.append(_TLSListener(
                    tcp, contexts.server, standard_compatible=False,
                    handshake_timeout=tls.HANDSHAKE_TIMEOUT_S,
                ))
            self.sentinel.tls_port = config.tls_port
            if not plain:
                self.sentinel.port = config.tls_port
        listener = anyio.streams.stapled.MultiListener(listeners)
        port = metrics.metrics_port(config.port, config.tls_port, config.metrics_port)
        http: HttpServer | None = None
        if port:  # OSError naming the address and port: the start fails
            http = HttpServer(asyncio.get_running_loop(), metrics.SentinelSite(self.sentinel))
            await http.listen(list(config.bind), port)
            logger.info("event=metrics_listening bind=%s port=%d", " ".join(config.bind), http.port)
        logger.log(
            NOTICE,
            "event=sentinel_ready port=%d id=%s config=%s", self.sentinel.port,
            self.sentinel.my_id, config.path,
        )
        try:
            with self._scope:
                async with anyio.create_task_group() as tasks:
                    tasks.start_soon(self._signals)
                    tasks.start_soon(self.sentinel.run, tasks)
                    await listener.serve(self._client, tasks)
        finally:
            if http is not None:
                http.close()

    async def _client(self, stream: anyio.abc.SocketStream) -> None:
        connection = Connection(self.sentinel, stream, commands.COMMANDS)
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
                logger.log(NOTICE, "event=shutdown signal=%s", signal.Signals(signum).name)
                self.sentinel.persist()
                self.stop()
                return


def run(args: argparse.Namespace) -> int:
    """`narad sentinel FILE [--port N] [--bind ADDR ...]`, or `narad server FILE
    --sentinel [--port N]` (narad/cli.py, narad/serve.py parse the command line)."""
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
    contexts = None
    if config.tls_port or config.tls.replication:
        try:
            contexts = tls.build(config.tls)
        except tls.TLSError as exc:
            print(f"*** FATAL CONFIG FILE ERROR ***\nFailed to configure TLS: {exc}",
                  file=sys.stderr)
            return 1
    _setup_logging(config)
    server = SentinelServer(config, contexts)
    try:
        with asyncio.Runner(loop_factory=loop_factory()) as runner:
            runner.run(server.run())
    except OSError as exc:
        logger.error("event=sentinel_failed reason=%r", str(exc))
        return 1
    return 0


def _setup_logging(config: sentinel_config.SentinelConfig) -> None:
    root = log_to(config.logfile, config.log_format)
    root.propagate = False
    root.setLevel(log_level(config.loglevel))
