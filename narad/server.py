"""The server: a data node's lifecycle. It builds the node (narad/node.py) and its
dispatcher (narad/dispatch.py), opens the keyspace, listens (narad/listen.py), runs
the once-a-second upkeep and the statistics' sampling, applies the connection
settings CONFIG SET changes, and stops on a signal or SHUTDOWN. Connections are
narad/connection.py's.

`Server.serve` runs on asyncio's runner with uvloop's loop where present
(narad/serve.py), and anyio's APIs work inside it for work that wants task groups.

The commit barrier (narad/barrier.py) makes replies honest about durability: every
command parsed in an event-loop iteration runs at once and encodes its reply into
its session's output buffer; at the end of the iteration the node
(`Node.end_of_iteration`) adds the held-back entries, serves blocked sessions whose
keys changed, commits everything written in the iteration as one record of the
node's journal (one write and, under `fsync always`, one fsync, however many logs it
touched: narad/log/journal.py), and only then hands the output buffers to their
connections. So no reply, to any client, leaves before the data it reports or
depends on is committed (docs/durability.md).
"""

from __future__ import annotations

import asyncio
import faulthandler
import logging
import os
import platform
import shutil
import signal
import ssl
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import narad.commands  # noqa: F401 - fills the command table
from narad import __version__, metrics, tls
from narad.config import Config
from narad.config.kinds import AUTO_PORT, BadValue
from narad.connection import Client
from narad.dispatch import Dispatcher
from narad.listen import Listeners
from narad.log.files import OPEN_FILES
from narad.logs import NOTICE
from narad.metrics_http import HttpServer
from narad.node import Node
from narad.site import NodeSite

logger = logging.getLogger("narad.server")

CRON_INTERVAL_S = 1.0
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class Server:
    def __init__(self, config: Config) -> None:
        self.config = config
        self.node = node = Node(config)
        self.dispatch = Dispatcher(node)
        self.loop: asyncio.AbstractEventLoop | None = None
        self._stop_deadline_armed = False  # by the first stop signal (_stop_signal)
        self.listeners: Listeners | None = None
        self.tls_listeners: Listeners | None = None
        self.metrics: HttpServer | None = None  # the metrics port's, while it listens
        self._sample_due = 0.0  # loop time the sampling timer is due at
        self._build_tls()  # tls.TLSError: the start fails, as Redis's does
        config.on_change("port", self._listen_on_port)
        config.on_change("tls-port", self._listen_on_tls_port)
        config.on_change("bind", self._listen_on_addresses)
        for setting in config.settings():
            if setting.name.startswith("tls-") and setting.name != "tls-port":
                config.on_change(setting.name, self._reload_tls)
        config.on_change("maxclients", self._check_maxclients)
        for name in ("proto-max-bulk-len", "client-query-buffer-limit"):
            config.on_change(name, self._apply_parser_limits)

    # -- settings applied at runtime (CONFIG SET; the others are read where used) ------

    def _listen_on_port(self, value: object) -> None:
        self._listen("Unable to listen on this port. Check server logs.")

    def _listen_on_tls_port(self, value: object) -> None:
        self._reload_tls(value)
        self._listen("Unable to listen on this port. Check server logs.")

    def _build_tls(self) -> None:
        """The TLS contexts the tls-* settings make, in force while tls-port or
        tls-replication is set (none otherwise), as Redis configures TLS; raises
        tls.TLSError, changing nothing, when they do not load."""
        config = self.config
        if int(config["tls-port"]) or config["tls-replication"]:  # type: ignore[call-overload]
            self.node.tls = tls.build(tls.TLSSettings.from_config(config))
        else:
            self.node.tls = None

    def _reload_tls(self, value: object) -> None:
        """Any tls-* CONFIG SET reloads every file, as Redis does: new connections
        get the new contexts, those already made keep theirs. Files that do not
        load refuse the SET with Redis's text, and the old contexts stay."""
        try:
            self._build_tls()
        except tls.TLSError as exc:
            logger.warning("event=tls_reload_failed reason=%r", str(exc))
            raise BadValue("Unable to update TLS configuration. Check server logs.") from None
        if self.tls_listeners is not None:
            self.tls_listeners.renew()

    @staticmethod
    def _check_maxclients(value: object) -> None:
        """More clients than the descriptor budget holds are refused with Redis's
        text; the value is read where connections are accepted."""
        clients_max = OPEN_FILES.clients_max
        if int(value) > clients_max:  # type: ignore[call-overload]
            raise BadValue(
                "The operating system is not able to handle the specified number of "
                f"clients, try with {clients_max}"
            )

    def _listen_on_addresses(self, value: object) -> None:
        self._listen("Failed to bind to specified addresses.")

    def _listen(self, failure: str) -> None:
        """Listen where `port` and `bind` say now (narad/listen.py); on failure the
        old listeners stay and CONFIG SET answers Redis's `failure` text."""
        if self.listeners is None:  # not serving yet: serve() listens
            return
        try:
            self._listen_now()
        except OSError as exc:
            logger.warning(
                "cannot listen on %s port %s tls-port %s: %s", self.config["bind"],
                self.config["port"], self.config["tls-port"], exc,
            )
            raise BadValue(failure) from None

    def _listen_now(self) -> None:
        """Listen on `port` and `tls-port` at the `bind` addresses. The plain port is
        listened on unless it is 0 with a TLS port set (Redis's TLS-only node); 0
        with no TLS port is one ephemeral port. OSError, the plain listeners moved
        or not, when one cannot be bound (CONFIG SET then applies the old values
        again)."""
        assert self.listeners is not None and self.tls_listeners is not None
        config, node = self.config, self.node
        port = int(config["port"])  # type: ignore[call-overload]
        tls_port = int(config["tls-port"])  # type: ignore[call-overload]
        addresses = str(config["bind"]).split()
        self.listeners.listen(addresses if port or not tls_port else [], port)
        self.tls_listeners.listen(addresses if tls_port else [], tls_port)
        node.tls_port = self.tls_listeners.port if tls_port else 0
        plain = bool(port or not tls_port)
        node.tcp_port = self.listeners.port if plain else node.tls_port
        logger.log(
            NOTICE, "event=listening bind=%s port=%d tls_port=%d", " ".join(addresses),
            self.listeners.port if plain else 0, node.tls_port,
        )

    def metrics_port(self) -> int:
        """The port `metrics-port` names: `auto` is 8379 beside port 6379, else the
        client port + 2000 (the TLS port's when port is 0); 0 (off) when both ports
        are 0 or the sum passes 65535."""
        config = self.config
        asked = int(config["metrics-port"])  # type: ignore[call-overload]
        if asked != AUTO_PORT:
            return int(asked)
        port: int = config["port"] or config["tls-port"]  # type: ignore[assignment]
        if port == 6379:
            return 8379
        return port + 2000 if port and port + 2000 <= 65535 else 0

    async def _listen_for_metrics(self) -> None:
        """Serve /metrics and the dashboard (narad/site.py) on the metrics port at
        `metrics-bind`'s addresses, else `bind`'s. OSError naming them when they
        cannot be bound: the start fails, as for the client port."""
        assert self.loop is not None
        port = self.metrics_port()
        if not port:
            return
        addresses = str(self.config["metrics-bind"] or self.config["bind"]).split()
        self.metrics = HttpServer(self.loop, NodeSite(self.node))
        await self.metrics.listen(addresses, port)
        logger.info("metrics and dashboard on %s port %d", " ".join(addresses), self.metrics.port)

    def _server_context(self) -> ssl.SSLContext | None:
        return self.node.tls.server if self.node.tls is not None else None

    def _apply_parser_limits(self, value: object) -> None:
        bulk = int(self.config["proto-max-bulk-len"])  # type: ignore[call-overload]
        query = int(self.config["client-query-buffer-limit"])  # type: ignore[call-overload]
        for session in self.node.sessions.values():
            parser = session.connection.parser  # type: ignore[attr-defined]
            parser.max_bulk_len = bulk
            parser.max_query_buffer = query

    def new_client(self) -> Client:
        """A connection to this node (the listeners' protocol factory)."""
        return Client(self.node, self.dispatch)

    # -- lifecycle ------------------------------------------------------------------------

    def _cron(self) -> None:
        """Once a second: the node's upkeep, and idle clients past `timeout` closed."""
        assert self.loop is not None
        self._cron_handle = self.loop.call_later(CRON_INTERVAL_S, self._cron)
        node = self.node
        node.upkeep()
        idle_max = int(self.config["timeout"])  # type: ignore[call-overload]
        if idle_max:
            now = time.time()
            for session in list(node.sessions.values()):
                if (
                    session.blocked is None
                    and now - session.connection.last_interaction_s > idle_max
                ):
                    session.close()
        if node.normal_output_limit.soft_bytes:
            self._enforce_soft_output_limit()

    def _enforce_soft_output_limit(self) -> None:
        """client-output-buffer-limit's soft limit, as Redis applies it: a client
        whose pending replies stay at or past `soft_bytes` for more than
        `soft_seconds` is disconnected. Checked here, once a second."""
        limit = self.node.normal_output_limit
        now = time.monotonic()
        for session in list(self.node.sessions.values()):
            client: Client = session.connection  # type: ignore[assignment]
            transport = client.transport
            pending = len(session.out) + (
                transport.get_write_buffer_size() if transport is not None else 0
            )
            client.soft_limit_since, over = limit.soft_since(pending, client.soft_limit_since, now)
            if over:
                client.over_output_limit()

    def _sample(self) -> None:
        """Every metrics.SAMPLE_INTERVAL_S: a sample of each instantaneous_* rate, and
        of the event loop's lag (how late this timer ran: what a client's command
        waits when it arrives while something else holds the loop)."""
        loop = self.loop
        assert loop is not None
        now = loop.time()
        stats = self.node.stats
        stats.loop_lag.record(max(0, int((now - self._sample_due) * 1e9)))
        self._sample_due = now + metrics.SAMPLE_INTERVAL_S
        self._sample_handle = loop.call_at(self._sample_due, self._sample)
        stats.sample(time.monotonic())

    def _stop_signal(self, signum: int, frame: object) -> None:
        """SIGTERM or SIGINT. Python runs this in the main thread at its next check for
        signals, which comes even while a request holds the event loop in a long call
        that checks (a sleep, a regex match, a wait on I/O). It asks the loop for the
        graceful stop and arms a deadline on a thread of its own that needs no
        interpreter lock: if the stop has not finished within `shutdown-timeout`, that
        thread dumps every thread's stack to the log and exits the process with
        status 1 (what is committed stays, as after kill -9). The deadline is the
        first signal's: a later one does not move it."""
        timeout = int(self.config["shutdown-timeout"])  # type: ignore[call-overload]
        logger.log(
            NOTICE, "event=stop_requested signal=%s deadline_s=%d", signal.Signals(signum).name,
            timeout,
        )
        if not self._stop_deadline_armed:
            self._stop_deadline_armed = True
            faulthandler.dump_traceback_later(timeout, exit=True, file=_log_stream())
        assert self.loop is not None
        self.loop.call_soon_threadsafe(self.node.request_shutdown)

    async def serve(self, ready: Callable[[int], None] | None = None) -> None:
        """Open the keyspace, listen, and run until SIGTERM, SIGINT or SHUTDOWN."""
        self.loop = asyncio.get_running_loop()
        node = self.node
        node.shutdown_requested = asyncio.Event()
        self._log_start()
        created = _first_missing(node.keyspace.root)
        try:
            node.keyspace.open()
            self._listen_first()
            await self._listen_for_metrics()
        except BaseException:
            node.keyspace.close()
            if created is not None:  # a failed start leaves no data dir of its own
                shutil.rmtree(created, ignore_errors=True)
            raise
        if node.keyspace.leads:
            node.queues.opened()
        assert self.listeners is not None and self.tls_listeners is not None
        await self.listeners.started()
        await self.tls_listeners.started()
        port = node.tcp_port
        previous = {sig: signal.signal(sig, self._stop_signal) for sig in STOP_SIGNALS}
        self._cron_handle = self.loop.call_later(CRON_INTERVAL_S, self._cron)
        self._sample_due = self.loop.time() + metrics.SAMPLE_INTERVAL_S
        self._sample_handle = self.loop.call_at(self._sample_due, self._sample)
        node.replication.start()
        self._log_role()
        logger.log(NOTICE, "event=ready port=%d: ready to accept connections", port)
        if ready is not None:
            ready(port)
        try:
            await node.shutdown_requested.wait()
        finally:
            self._cron_handle.cancel()
            self._sample_handle.cancel()
            node.replication.stop()
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            self.listeners.close()
            self.tls_listeners.close()
            if self.metrics is not None:
                self.metrics.close()
            node.end_of_iteration()
            node.barrier.stop()  # nothing commits after this: the keyspace closes
            for session in list(node.sessions.values()):
                session.close()
            node.keyspace.close()
            faulthandler.cancel_dump_traceback_later()  # the stop finished in time
            logger.log(NOTICE, "event=stopped")

    def _listen_first(self) -> None:
        """Listen where the settings say, or raise ListenError naming the addresses
        and port that could not be bound."""
        assert self.loop is not None
        self.listeners = Listeners(self.loop, self.new_client)
        self.tls_listeners = Listeners(self.loop, self.new_client, self._server_context)
        try:
            self._listen_now()
        except OSError as exc:
            self.listeners.close()
            self.tls_listeners.close()
            raise ListenError(
                f"cannot listen on {self.config['bind']} port {self.config['port']}"
                f" tls-port {self.config['tls-port']}: {exc.strerror or exc}"
            ) from exc

    def _log_start(self) -> None:
        """The start-up lines: what runs, on which data, with which durability."""
        config, keyspace = self.config, self.node.keyspace
        logger.log(
            NOTICE, "event=starting version=%s pid=%d python=%s", __version__,
            os.getpid(), platform.python_version(),
        )
        logger.log(NOTICE, "event=data_dir path=%s", keyspace.root.resolve())
        logger.log(
            NOTICE, "event=fsync policy=%s acked_writes_are=%s", keyspace.policy.value,
            "durable" if keyspace.policy.value == "always" else "appended",
        )
        if config.path is not None:
            logger.log(NOTICE, "event=config file=%s", config.path)

    def _log_role(self) -> None:
        replication, journal = self.node.replication, self.node.keyspace.journal
        follower = replication.follower
        if follower is None:
            logger.log(
                NOTICE, "event=role role=leader epoch=%d position=%d replicas_needed=%d",
                journal.epoch, journal.position, replication.leader.quorum,
            )
        else:
            logger.log(
                NOTICE, "event=role role=replica leader=%s:%d epoch=%d position=%d",
                follower.host, follower.port, journal.epoch, journal.position,
            )


class ListenError(OSError):
    """The server could not listen where its settings say: the message names them."""


def _first_missing(path: Path) -> Path | None:
    """The outermost folder of `path` that does not exist yet (None: it exists)."""
    path = path.absolute()
    if path.exists():
        return None
    while not path.parent.exists():
        path = path.parent
    return path


def _log_stream() -> Any:
    """The open file the server logs to, for the stack dump of a stop past its
    deadline (standard error when the log has no file of its own)."""
    for handler in logging.getLogger("narad").handlers:
        stream = getattr(handler, "stream", None)
        if stream is not None and hasattr(stream, "fileno"):
            return stream
    return sys.stderr
