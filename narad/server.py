"""The server: connections, auth, limits, blocking, replies. The only socket I/O.

The hot path sits directly on the event loop's transport/protocol API (one Client per
connection); `Server.serve` runs on asyncio's runner with uvloop's loop where present
(narad/serve.py), and anyio's APIs work inside it for work that wants task groups.

The commit barrier (narad/barrier.py) makes replies honest about durability: every
command parsed in an event-loop iteration runs at once and encodes its reply into its
client's output buffer; at the end of the iteration the barrier serves blocked
clients whose keys changed (`before_commit`), commits everything written in the
iteration as one record of the node's journal (one write and, under `fsync always`,
one fsync, however many logs it touched: narad/log/journal.py), and only then hands
the output buffers to their transports. So no reply, to any client, leaves before the
data it reports or depends on is committed (docs/durability.md).

Deferred writes: the entry of a plain `XADD key * field value ...` or `Q.PUSH queue
payload` may be held back (`barrier.deferred`) and added together with the like
entries of other clients, one call to the log per stream (narad/commands/deferred.py).
The rule that keeps this invisible: `barrier.settle()` applies them before anything
else runs that could see or change their stream: every other command, the end of the
iteration, the once-a-second upkeep and the queues' timers. So every command still
sees the effects of all commands that arrived before it, and each client's replies
stay in order.
"""

from __future__ import annotations

import asyncio
import contextlib
import faulthandler
import logging
import os
import signal
import socket
import sys
import time
from collections import Counter, deque
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any

from narad import errors, metrics
from narad.barrier import CommitBarrier
from narad.commands.table import LOOKUP, RUN_REPLY_BYTES_MAX, Block, Command, all_commands
from narad.config import Config
from narad.config.kinds import BadValue, OutputBufferLimits
from narad.errors import CommandError
from narad.keyspace import Keyspace
from narad.listen import Listeners
from narad.log import LogFailed
from narad.queues.service import QueueService, RunningLoop
from narad.resp import (
    ErrorReply,
    ProtocolError,
    QueryBufferLimit,
    RequestParser,
    encode_into,
)
from narad.resp.encoder import encode_ids_into

logger = logging.getLogger("narad.server")

# Commands a client in MULTI runs at once instead of queueing.
MULTI_IMMEDIATE = frozenset({b"exec", b"discard", b"multi", b"watch", b"quit", b"reset"})
QUEUED = object()  # the reply marker for a queued command
# Lines of an HTTP request, read as inline commands: a web page that posts to a local
# port can make a browser send Redis commands in the body (cross-protocol scripting).
# The connection is closed at such a line and nothing after it runs, as Redis 7.0 does.
CROSS_PROTOCOL = frozenset({b"post", b"host:"})
CROSS_PROTOCOL_LOG_INTERVAL_S = 60.0  # at most one log line this often, as in Redis
INTERNAL_ERROR_TEXT_MAX = 256  # characters of an unexpected exception's text in its reply
CRON_INTERVAL_S = 1.0
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
NO_REPLY = object()  # a handler's answer when nothing is to be sent (CLIENT REPLY OFF)


@dataclass
class Stats:
    started_s: float = field(default_factory=time.time)
    connections_received: int = 0
    rejected_connections: int = 0
    commands_processed: int = 0
    error_replies: int = 0
    net_input_bytes: int = 0
    net_output_bytes: int = 0
    reads_processed: int = 0  # data_received calls: one per socket read, as Redis counts
    writes_processed: int = 0  # transport writes of replies
    errors: Counter[str] = field(default_factory=Counter)
    # instantaneous_*: sampled every metrics.SAMPLE_INTERVAL_S by Server._sample.
    ops_rate: metrics.Rate = field(default_factory=metrics.Rate)
    input_rate: metrics.Rate = field(default_factory=metrics.Rate)
    output_rate: metrics.Rate = field(default_factory=metrics.Rate)

    def reset(self) -> None:
        fresh = Stats(started_s=self.started_s)
        self.__dict__.update(fresh.__dict__)
        for cmd in all_commands():
            cmd.calls = cmd.usec = cmd.rejected = cmd.failed = 0
            cmd.latency = None

    def sample(self, now_s: float) -> None:
        self.ops_rate.sample(self.commands_processed, now_s)
        self.input_rate.sample(self.net_input_bytes, now_s)
        self.output_rate.sample(self.net_output_bytes, now_s)


@dataclass
class SlowEntry:
    id: int
    at_s: int
    usec: int
    argv: list[bytes]
    addr: str
    name: str


class Server:
    def __init__(self, config: Config) -> None:
        self.config = config
        self.keyspace = Keyspace(config)
        self.keyspace.on_touch = self.key_written
        self.clients: dict[int, Client] = {}
        self.stats = Stats()
        self.slowlog: deque[SlowEntry] = deque()
        self.slowlog_next_id = 0
        self.monitors: list[Client] = []
        self.waiters: dict[tuple[int, bytes], deque[Client]] = {}
        self.watchers: dict[tuple[int, bytes], set[Client]] = {}
        self.signaled: dict[tuple[int, bytes], None] = {}  # in the order signaled
        self.barrier = CommitBarrier(self.keyspace, self)
        self.queues = QueueService(self.keyspace, self, self.barrier, RunningLoop())
        self.keyspace.on_delete = self.queues.dropped
        self._next_client_id = 1
        self._cross_protocol_logged_s = -CROSS_PROTOCOL_LOG_INTERVAL_S
        self._cross_protocol_unlogged = 0  # attacks since the last log line
        self.loop: asyncio.AbstractEventLoop | None = None
        self.shutdown_requested: asyncio.Event | None = None
        self.exit_status = 0  # what the process exits with once stopped
        self.run_id = os.urandom(20).hex()
        self._stop_deadline_armed = False  # by the first stop signal (_stop_signal)
        self.tcp_port = 0
        self.slowlog_threshold_us = int(config["slowlog-log-slower-than"])  # type: ignore[call-overload]
        config.on_change("slowlog-log-slower-than", self._set_slowlog_threshold)
        self.output_limit_bytes = 0
        self._set_output_limit(config["client-output-buffer-limit"])
        config.on_change("client-output-buffer-limit", self._set_output_limit)
        self.latency_tracking = bool(config["latency-tracking"])
        config.on_change("latency-tracking", self._set_latency_tracking)
        self.listeners: Listeners | None = None
        config.on_change("port", self._listen_on_port)
        config.on_change("bind", self._listen_on_addresses)
        for name in (
            "fsync", "segment-bytes", "segment-ms", "retention-ms", "retention-bytes",
            "stream-node-max-entries",
        ):
            config.on_change(name, self._apply_log_settings)
        for name in ("proto-max-bulk-len", "client-query-buffer-limit"):
            config.on_change(name, self._apply_parser_limits)

    # -- settings applied at runtime (CONFIG SET; the others are read where used) ------

    def _set_output_limit(self, value: object) -> None:
        assert isinstance(value, OutputBufferLimits)
        self.output_limit_bytes = value.normal.hard_bytes
        self.normal_output_limit = value.normal

    def _set_slowlog_threshold(self, value: object) -> None:
        self.slowlog_threshold_us = int(value)  # type: ignore[call-overload]

    def _set_latency_tracking(self, value: object) -> None:
        self.latency_tracking = bool(value)

    def _listen_on_port(self, value: object) -> None:
        self._listen("Unable to listen on this port. Check server logs.")

    def _listen_on_addresses(self, value: object) -> None:
        self._listen("Failed to bind to specified addresses.")

    def _listen(self, failure: str) -> None:
        """Listen where `port` and `bind` say now (narad/listen.py); on failure the
        old listeners stay and CONFIG SET answers Redis's `failure` text."""
        if self.listeners is None:  # not serving yet: serve() listens
            return
        port = int(self.config["port"])  # type: ignore[call-overload]
        addresses = str(self.config["bind"]).split()
        try:
            self.listeners.listen(addresses, port)
        except OSError as exc:
            logger.warning("cannot listen on %s port %d: %s", " ".join(addresses), port, exc)
            raise BadValue(failure) from None
        self.tcp_port = self.listeners.port
        logger.info("listening on %s port %d", " ".join(addresses), self.tcp_port)

    def _apply_log_settings(self, value: object) -> None:
        self.keyspace.apply_settings()
        for queue in self.queues.queues():
            self.queues.apply_settings(queue)

    def _apply_parser_limits(self, value: object) -> None:
        bulk = int(self.config["proto-max-bulk-len"])  # type: ignore[call-overload]
        query = int(self.config["client-query-buffer-limit"])  # type: ignore[call-overload]
        for client in self.clients.values():
            client.parser.max_bulk_len = bulk
            client.parser.max_query_buffer = query

    # -- around each commit (narad/barrier.py's hooks) ---------------------------------

    def before_commit(self) -> None:
        # The commit after this must run whatever happens while serving: replies of
        # every client wait on it.
        queues = self.queues
        if queues.to_serve or queues.subscribed:
            try:
                queues.serve()
            except Exception as exc:
                self.unexpected(exc, "queue consumers", "serving")
        try:
            self.serve_signaled()
        except Exception as exc:
            self.unexpected(exc, "blocked clients", "serving")

    def after_commit(self, committed: bool) -> None:
        keyspace = self.keyspace
        keyspace.remove_doomed()
        if keyspace.checkpoint_due():
            keyspace.checkpointer.begin(asyncio.get_running_loop())
        carried = keyspace.journal.carried
        if committed and self.queues.subscribed and self.queues.copies_due(carried):
            self.barrier.schedule()  # what became committed in a source may now be copied

    def commit_failed(self, why: str, clients_closed: int) -> None:
        """The journal refuses every commit from now on, and a reply that reads what
        the failed commit took would claim it too, so the server stops (exit status
        1); the next start recovers every commit that finished."""
        if self.exit_status == 0:
            logger.critical(
                "event=commit_failed clients_closed=%d reason=%r; stopping: the next start "
                "recovers every finished commit", clients_closed, why,
            )
            self.exit_status = 1
            self.request_shutdown()

    # -- executing commands ---------------------------------------------------------------

    def execute(self, client: Client, argv: list[bytes]) -> None:
        """Run one command and encode its reply into the client's output buffer."""
        cmd = LOOKUP.get(argv[0]) or LOOKUP.get(argv[0].lower())
        argc = len(argv)
        if (
            cmd is not None
            and cmd.handler is not None
            and client.multi is None
            and client.authenticated
            and (argc == cmd.arity if cmd.arity >= 0 else argc >= -cmd.arity)
        ):
            if cmd.run is not None and self._run(client, cmd, argv):
                return
            barrier = self.barrier
            if barrier.deferred is not None:
                barrier.settle()
            try:
                self.call(client, cmd, argv)
            except CommandError as exc:
                client.reply_error(exc)
            return
        if self.barrier.deferred is not None:
            self.barrier.settle()
        self._execute_checked(client, argv, cmd)

    def _run(self, client: Client, cmd: Command, argv: list[bytes]) -> bool:
        """The pipelined fast path: `cmd.run` answers `argv` and the like commands
        queued after it at once; the same effects, replies and statistics as `call`
        for each. False (nothing done) when it declines or anything would differ:
        MONITOR, CLIENT REPLY, a reply that could pass the output limit."""
        assert cmd.run is not None
        queue = client.queue
        limit = self.output_limit_bytes
        if (
            self.monitors
            or client.reply_off
            or client.skip_current
            or client.skip_next
            or (limit and len(client.out) + RUN_REPLY_BYTES_MAX * (len(queue) + 1) > limit)
        ):
            return False
        start = time.perf_counter_ns()
        try:
            run = cmd.run(client, argv, queue)
        except (LogFailed, ValueError):
            return False  # nothing was done: the general path reports it
        if run is None:
            return False
        count = len(run)
        if count > 1:
            for _ in range(count - 1):
                queue.popleft()
        ns = time.perf_counter_ns() - start
        usec = ns // 1000
        client.last_command = cmd.name
        cmd.calls += count
        cmd.usec += usec
        self.stats.commands_processed += count
        if self.latency_tracking:
            metrics.track(cmd, ns // count, count)
        each = usec // count
        if each >= self.slowlog_threshold_us >= 0:
            for one in run:
                self._slowlog_add(client, one, each)
        self.barrier.wants_send(client)
        return True

    def _execute_checked(self, client: Client, argv: list[bytes], cmd: Command | None) -> None:
        """The general path: unknown commands, subcommands, checks, MULTI queueing."""
        name = argv[0].lower()
        if name in CROSS_PROTOCOL:
            self._cross_protocol(client, argv[0])
            return
        queueing = client.multi is not None and name not in MULTI_IMMEDIATE
        try:
            if cmd is None:
                raise errors.unknown_command(argv[0], argv[1:])
            if cmd.subcommands and len(argv) >= 2:
                cmd = cmd.subcommands.get(argv[1].lower().decode("utf-8", "replace"), cmd)
            self._check(client, cmd, argv)
            if queueing and "no_multi" in cmd.flags:
                raise CommandError("Command not allowed inside a transaction")
        except CommandError as exc:
            if queueing:
                client.multi_failed = True
            if cmd is not None:
                cmd.rejected += 1
            if name == b"exec":
                # A refused EXEC discards the transaction, if any, as in Redis.
                client.multi = None
                client.unwatch_all()
                why = exc.message if exc.code == "ERR" else f"{exc.code} {exc.message}"
                exc = CommandError(f"Transaction discarded because of: {why}", "EXECABORT")
            client.reply_error(exc)
            return
        if queueing:
            assert client.multi is not None
            client.multi.append(argv)
            client.reply(QUEUED)
            return
        try:
            self.call(client, cmd, argv)
        except CommandError as exc:
            client.reply_error(exc)

    def _cross_protocol(self, client: Client, name: bytes) -> None:
        """An HTTP line arrived as a command: drop the connection and everything it
        sent after the line (queued, pipelined or in MULTI) unrun and unanswered."""
        client.queue.clear()
        client.multi = None
        client.out.clear()
        client.close()
        now = time.monotonic()
        self._cross_protocol_unlogged += 1
        if now - self._cross_protocol_logged_s >= CROSS_PROTOCOL_LOG_INTERVAL_S:
            logger.warning(
                "event=cross_protocol_attack client=%s line=%r attacks=%d action=closed"
                " (an HTTP request sent to the Redis port, as a web page can make a"
                " browser do; logged at most once a minute)",
                client.addr,
                name[:16].decode("ascii", "replace"),
                self._cross_protocol_unlogged,
            )
            self._cross_protocol_logged_s = now
            self._cross_protocol_unlogged = 0

    def unexpected(self, exc: Exception, command: str, during: str = "running") -> CommandError:
        """An exception no code path expected (a bug) while `during` `command`: one
        log line, the traceback only at `loglevel debug`, and the error reply that
        stands for it (the connection lives on)."""
        kind = type(exc).__name__
        text = str(exc)[:INTERNAL_ERROR_TEXT_MAX]
        logger.error(
            "event=internal_error command=%s during=%s exception=%s text=%r",
            command,
            during,
            kind,
            text,
        )
        logger.debug("traceback of the internal error in %s", command, exc_info=exc)
        return CommandError(f"internal error {during} '{command}': {kind}: {text}")

    def _check(self, client: Client, cmd: Command, argv: list[bytes]) -> None:
        if cmd.handler is None:  # a container called without or with an unknown subcommand
            if len(argv) < 2:
                raise errors.wrong_arity(cmd.name)
            raise errors.unknown_subcommand(argv[1], cmd.name)
        if not cmd.check_arity(len(argv)):
            raise errors.wrong_arity(cmd.name)
        if not client.authenticated and "noauth" not in cmd.flags:
            raise errors.NOAUTH

    def call(self, client: Client, cmd: Command, argv: list[bytes]) -> Any:
        """Run a checked command; its reply goes to the client (or is returned in EXEC)."""
        assert cmd.handler is not None
        client.last_command = cmd.name
        start = time.perf_counter_ns()
        try:
            reply = cmd.handler(client, argv)
        except CommandError:
            cmd.failed += 1
            raise
        except LogFailed as exc:
            cmd.failed += 1
            raise CommandError(str(exc), "IOERR") from None
        except Exception as exc:
            cmd.failed += 1
            raise self.unexpected(exc, cmd.name) from None
        finally:
            ns = time.perf_counter_ns() - start
            usec = ns // 1000
            cmd.calls += 1
            cmd.usec += usec
            self.stats.commands_processed += 1
            if self.latency_tracking:
                metrics.track(cmd, ns)
            if usec >= self.slowlog_threshold_us >= 0:
                self._slowlog_add(client, argv, usec)
            if self.monitors and "admin" not in cmd.flags:
                self._feed_monitors(client, argv)
        if reply.__class__ is Block:
            client.block(reply, cmd)
        elif client.in_exec:
            return reply
        else:
            client.reply(reply)
        return None

    def _slowlog_add(self, client: Client, argv: list[bytes], usec: int) -> None:
        shown = [
            a if len(a) <= 128 else a[:128] + b"... (%d more bytes)" % (len(a) - 128)
            for a in argv[:32]
        ]
        if len(argv) > 32:
            shown[-1] = b"... (%d more arguments)" % (len(argv) - 31)
        self.slowlog.appendleft(
            SlowEntry(self.slowlog_next_id, int(time.time()), usec, shown, client.addr, client.name)
        )
        self.slowlog_next_id += 1
        limit = int(self.config["slowlog-max-len"])  # type: ignore[call-overload]
        while len(self.slowlog) > limit:
            self.slowlog.pop()

    def _feed_monitors(self, client: Client, argv: list[bytes]) -> None:
        """MONITOR lines, as Redis 7.0 feeds them: after the command ran (so in its
        db after SELECT, queued commands before their EXEC), passwords redacted,
        admin commands not shown."""
        now = time.time()
        args = " ".join('"' + _monitor_escape(a) + '"' for a in _redacted(argv))
        line = f"{now:.6f} [{client.db} {client.addr}] {args}"
        from narad.resp import SimpleString

        for monitor in self.monitors:
            if monitor is not client:
                monitor.reply(SimpleString(line))

    # -- WATCH ----------------------------------------------------------------------------

    def key_touched(self, db: int, key: bytes) -> None:
        """A command wrote `key`: transactions watching it will abort."""
        for client in self.watchers.get((db, key), ()):
            client.watch_dirty = True

    def key_written(self, db: int, key: bytes) -> None:
        """A command wrote `key`: WATCHers abort, blocked readers get another look."""
        if self.watchers:
            self.key_touched(db, key)
        if self.waiters:
            self.signal_key(db, key)
        if self.queues.consuming:
            stream = self.keyspace.get(db, key)
            if stream is not None:
                self.queues.written(stream)

    def touch_db(self, db: int) -> None:
        for (wdb, _), clients in self.watchers.items():
            if wdb == db:
                for client in clients:
                    client.watch_dirty = True

    # -- blocking -------------------------------------------------------------------------

    def signal_key(self, db: int, key: bytes) -> None:
        """Something changed at `key`: blocked clients there get another look."""
        if (db, key) in self.waiters:
            self.signaled[(db, key)] = None
            self.barrier.schedule()

    def serve_signaled(self) -> None:
        """Blocked clients get another look, as Redis 7.0 serves them: key by key in
        the order the keys were signaled, on each key in the order its clients
        blocked, each client retrying for that key."""
        while self.signaled:
            signaled, self.signaled = self.signaled, {}
            found_nothing: set[Hashable] = set()
            for key in signaled:
                for client in list(self.waiters.get(key, ())):
                    block = client.blocked
                    # (A client served for an earlier key may be blocked again on others.)
                    if block is None or block.alike in found_nothing or key not in block.keys:
                        continue
                    if not client.retry_blocked(key[1]) and block.alike is not None:
                        found_nothing.add(block.alike)

    def add_waiter(self, client: Client, key: tuple[int, bytes]) -> None:
        self.waiters.setdefault(key, deque()).append(client)

    def remove_waiter(self, client: Client, key: tuple[int, bytes]) -> None:
        queue = self.waiters.get(key)
        if queue is not None:
            with contextlib.suppress(ValueError):
                queue.remove(client)
            if not queue:
                del self.waiters[key]

    @property
    def blocked_clients(self) -> int:
        return sum(1 for c in self.clients.values() if c.blocked is not None)

    # -- lifecycle ------------------------------------------------------------------------

    def _cron(self) -> None:
        """Once a second: keyspace upkeep, and idle clients past `timeout` closed."""
        assert self.loop is not None
        self._cron_handle = self.loop.call_later(CRON_INTERVAL_S, self._cron)
        try:
            self.barrier.settle()
            try:
                self.keyspace.maintain()
            except LogFailed as exc:
                logger.error("keyspace upkeep failed: %s", exc)
            self.queues.tick()
        except Exception as exc:  # the commit below still runs, and so does the next upkeep
            self.unexpected(exc, "upkeep")
        self.barrier.schedule()  # trim ops written by retention are committed as usual
        idle_max = int(self.config["timeout"])  # type: ignore[call-overload]
        if idle_max:
            now = time.time()
            for client in list(self.clients.values()):
                if client.blocked is None and now - client.last_interaction_s > idle_max:
                    client.close()
        if self.normal_output_limit.soft_bytes:
            self._enforce_soft_output_limit()

    def _enforce_soft_output_limit(self) -> None:
        """client-output-buffer-limit's soft limit, as Redis applies it: a client
        whose pending replies stay at or past `soft_bytes` for more than
        `soft_seconds` is disconnected. Checked here, once a second."""
        _, soft_bytes, soft_seconds = self.normal_output_limit
        now = time.monotonic()
        for client in list(self.clients.values()):
            transport = client.transport
            pending = len(client.out) + (
                transport.get_write_buffer_size() if transport is not None else 0
            )
            if pending < soft_bytes:
                client.soft_limit_since = None
            elif client.soft_limit_since is None:
                client.soft_limit_since = now
            elif now - client.soft_limit_since > soft_seconds:
                client._over_output_limit()

    def _sample(self) -> None:
        """Every metrics.SAMPLE_INTERVAL_S: a sample of each instantaneous_* rate."""
        assert self.loop is not None
        self._sample_handle = self.loop.call_later(metrics.SAMPLE_INTERVAL_S, self._sample)
        self.stats.sample(time.monotonic())

    def new_client_id(self) -> int:
        cid = self._next_client_id
        self._next_client_id += 1
        return cid

    def request_shutdown(self) -> None:
        if self.shutdown_requested is not None:
            self.shutdown_requested.set()

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
        logger.warning(
            "event=stop_requested signal=%s deadline_s=%d", signal.Signals(signum).name, timeout
        )
        if not self._stop_deadline_armed:
            self._stop_deadline_armed = True
            faulthandler.dump_traceback_later(timeout, exit=True, file=_log_stream())
        assert self.loop is not None
        self.loop.call_soon_threadsafe(self.request_shutdown)

    async def serve(self, ready: Callable[[int], None] | None = None) -> None:
        """Open the keyspace, listen, and run until SIGTERM, SIGINT or SHUTDOWN."""
        self.loop = asyncio.get_running_loop()
        self.shutdown_requested = asyncio.Event()
        self.keyspace.open(self)
        self.queues.opened()
        self.listeners = Listeners(self.loop, lambda: Client(self))
        self.listeners.listen(
            str(self.config["bind"]).split(), int(self.config["port"])  # type: ignore[call-overload]
        )
        await self.listeners.started()
        port = self.tcp_port = self.listeners.port
        previous = {sig: signal.signal(sig, self._stop_signal) for sig in STOP_SIGNALS}
        self._cron_handle = self.loop.call_later(CRON_INTERVAL_S, self._cron)
        self._sample_handle = self.loop.call_later(metrics.SAMPLE_INTERVAL_S, self._sample)
        logger.info("ready to accept connections on port %d", port)
        if ready is not None:
            ready(port)
        try:
            await self.shutdown_requested.wait()
        finally:
            self._cron_handle.cancel()
            self._sample_handle.cancel()
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            self.listeners.close()
            self.barrier.end_of_iteration()
            self.barrier.stop()  # nothing commits after this: the keyspace closes
            for client in list(self.clients.values()):
                client.close()
            self.keyspace.close()
            faulthandler.cancel_dump_traceback_later()  # the stop finished in time
            logger.info("stopped")


def _log_stream() -> Any:
    """The open file the server logs to, for the stack dump of a stop past its
    deadline (standard error when the log has no file of its own)."""
    for handler in logging.getLogger("narad").handlers:
        stream = getattr(handler, "stream", None)
        if stream is not None and hasattr(stream, "fileno"):
            return stream
    return sys.stderr


def _redacted(argv: list[bytes]) -> list[bytes]:
    """`argv` as MONITOR may show it: AUTH's and HELLO AUTH's credentials hidden."""
    name = argv[0].lower()
    if name == b"auth":
        return [argv[0]] + [b"(redacted)"] * (len(argv) - 1)
    if name == b"hello":
        shown = list(argv)
        for i, arg in enumerate(argv):
            if arg.lower() == b"auth":
                shown[i + 1 : i + 3] = [b"(redacted)"] * len(shown[i + 1 : i + 3])
        return shown
    return argv


def _monitor_escape(arg: bytes) -> str:
    out = []
    for byte in arg:
        ch = chr(byte)
        if ch in '\\"':
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\r":
            out.append("\\r")
        elif ch == "\t":
            out.append("\\t")
        elif 32 <= byte < 127:
            out.append(ch)
        else:
            out.append(f"\\x{byte:02x}")
    return "".join(out)


class Client(asyncio.Protocol):
    """One connection. Owned by the event loop thread."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.id = server.new_client_id()
        self.transport: asyncio.Transport | None = None
        self.addr = ""
        self.laddr = ""
        self.name = ""
        self.lib_name = ""
        self.lib_ver = ""
        self.db = 0
        self.protocol = 2
        self.authenticated = not server.config["requirepass"]
        config = server.config
        self.parser = RequestParser(
            max_bulk_len=int(config["proto-max-bulk-len"]),  # type: ignore[call-overload]
            max_query_buffer=int(config["client-query-buffer-limit"]),  # type: ignore[call-overload]
        )
        self.queue: deque[list[bytes]] = deque()  # parsed commands not yet run
        self.out = bytearray()  # replies not yet released by the commit barrier
        self.multi: list[list[bytes]] | None = None
        self.multi_failed = False
        self.in_exec = False
        self.watched: set[tuple[int, bytes]] = set()
        self.watch_dirty = False  # a watched key was written since WATCH
        self.reply_off = False  # CLIENT REPLY OFF
        self.skip_current = False  # CLIENT REPLY SKIP: this command's reply is dropped
        self.skip_next = False  # CLIENT REPLY SKIP was just called
        self.blocked: Block | None = None
        self.blocked_command: Command | None = None  # the command `blocked` belongs to
        self.soft_limit_since: float | None = None  # output past the soft limit since
        self._block_timer: asyncio.TimerHandle | None = None
        self.closing = False
        self.created_s = time.time()
        self.last_interaction_s = self.created_s
        self.last_command = ""
        self.protocol_error: str | None = None
        self.push_handler: Any = None  # set by push-mode commands (Q.CONSUME)

    # -- asyncio.Protocol ---------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A stream transport (uvloop's does not subclass asyncio.Transport).
        self.transport = stream_transport = transport  # type: ignore[assignment]
        peer = transport.get_extra_info("peername")
        sock = transport.get_extra_info("sockname")
        self.addr = _format_addr(peer)
        self.laddr = _format_addr(sock)
        server = self.server
        server.stats.connections_received += 1
        maxclients = int(server.config["maxclients"])  # type: ignore[call-overload]
        if len(server.clients) >= maxclients:
            server.stats.rejected_connections += 1
            stream_transport.write(b"-ERR max number of clients reached\r\n")  # type: ignore[attr-defined]
            transport.close()
            return
        if self._refused_by_protected_mode(peer):
            server.stats.rejected_connections += 1
            stream_transport.write(PROTECTED_MODE_ERROR)  # type: ignore[attr-defined]
            transport.close()
            return
        server.clients[self.id] = self
        keepalive = int(server.config["tcp-keepalive"])  # type: ignore[call-overload]
        if keepalive:
            _keepalive(transport.get_extra_info("socket"), keepalive)

    def _refused_by_protected_mode(self, peer: Any) -> bool:
        config = self.server.config
        if not config["protected-mode"] or config["requirepass"]:
            return False
        host = peer[0] if isinstance(peer, tuple) else ""
        return bool(host) and not (host.startswith("127.") or host in ("::1", "localhost"))

    def data_received(self, data: bytes) -> None:
        self.last_interaction_s = time.time()
        stats = self.server.stats
        stats.net_input_bytes += len(data)
        stats.reads_processed += 1
        parser = self.parser
        queue = self.queue
        if not queue and self.protocol_error is None:
            parser.authenticated = self.authenticated
            batch = parser.feed_whole(data)
            if batch is not None:
                if len(batch) == 1 and self.blocked is None and not self.closing:
                    # One whole command and nothing else buffered: what run_queued
                    # would do, without its loop.
                    self._execute(batch[0])
                    return
                queue.extend(batch)
                self.run_queued()
                return
        try:
            parser.feed(data)
        except QueryBufferLimit:
            logger.warning("closing client %s: query buffer limit reached", self.addr)
            self.close()
            return
        self.run_queued()

    def _next_batch(self) -> bool:
        """Parse more commands into the queue; False when none are complete."""
        self.parser.authenticated = self.authenticated
        try:
            batch = self.parser.commands()
        except ProtocolError as exc:
            self.protocol_error = exc.message
            return False
        self.queue.extend(batch)
        return bool(batch)

    def run_queued(self) -> None:
        """Run parsed commands in order until one blocks, the client closes, or the
        input is used up. Parsing is lazy, so that AUTH lifts the pre-auth limits
        for the commands after it."""
        queue = self.queue
        while self.blocked is None and not self.closing:
            if not queue and (
                self.protocol_error is not None
                or not self.parser.has_input
                or not self._next_batch()
            ):
                break
            self._execute(queue.popleft())
        if (
            self.protocol_error is not None
            and not self.queue
            and self.blocked is None
            and not self.closing
        ):
            self.reply(ErrorReply("ERR", self.protocol_error))
            self.close_after_reply()

    def _execute(self, argv: list[bytes]) -> None:
        """Run one command; a CLIENT REPLY SKIP it set applies to the next one."""
        try:
            self.server.execute(self, argv)
        except Exception as exc:  # outside the handler (which `call` guards): a bug
            name = argv[0][:64].decode("utf-8", "replace").lower()
            self.reply_error(self.server.unexpected(exc, name, "dispatching"))
        if self.skip_current or self.skip_next:
            self.skip_current, self.skip_next = self.skip_next, False

    def connection_lost(self, exc: Exception | None) -> None:
        self.closing = True
        self.unblock()
        self.unwatch_all()
        server = self.server
        server.clients.pop(self.id, None)
        server.barrier.forget(self)
        if self in server.monitors:
            server.monitors.remove(self)
        if self.push_handler is not None:
            self.push_handler.disconnected()
            self.push_handler = None

    # -- replies ----------------------------------------------------------------------

    def reply(self, value: Any) -> None:
        if self.reply_off or self.skip_current or value is NO_REPLY:
            return
        out = self.out
        if not out:
            self.server.barrier.wants_send(self)
        if value.__class__ is bytes:  # the most common reply: a bulk string
            out += b"$%d\r\n%b\r\n" % (len(value), value)
        elif value is QUEUED:
            out += b"+QUEUED\r\n"
        else:
            mark = len(out)
            try:
                encode_into(out, value, self.protocol)
            except Exception as exc:  # a value the encoder refuses: a bug
                del out[mark:]
                self.reply_error(
                    self.server.unexpected(exc, self.last_command, "encoding the reply of")
                )
                return
        limit = self.server.output_limit_bytes
        if limit and len(out) > limit:
            self._over_output_limit()

    def reply_ids(self, ms: int, seq: int, count: int) -> None:
        """The replies of `count` held-back commands that each added one entry: their
        consecutive stream IDs from (ms, seq). The client was registered for sending
        when the commands were taken (`Server._run`), and the barrier settles before it
        sends, so that registration still stands."""
        out = self.out
        encode_ids_into(out, ms, seq, count)
        limit = self.server.output_limit_bytes
        if limit and len(out) > limit:
            self._over_output_limit()

    def _over_output_limit(self) -> None:
        """Replies beyond the output buffer limit: drop them and the connection."""
        logger.warning("closing client %s: output buffer limit reached", self.addr)
        self.out.clear()
        self.queue.clear()
        self.closing = True
        if self.transport is not None:
            self.transport.abort()

    def reply_error(self, exc: CommandError) -> None:
        stats = self.server.stats
        stats.error_replies += 1
        stats.errors[exc.code] += 1
        self.reply(ErrorReply(exc.code, exc.message))

    def push(self, value: Any) -> None:
        """Out-of-band data (push frames, MONITOR lines): never suppressed."""
        if not self.out:
            self.server.barrier.wants_send(self)
        out = self.out
        mark = len(out)
        try:
            encode_into(out, value, self.protocol)
        except Exception as exc:  # a value the encoder refuses: a bug; the frame is dropped
            del out[mark:]
            self.server.unexpected(exc, self.last_command, "encoding a push frame of")

    def send(self) -> None:
        """Hand the output buffer to the socket (for the commit barrier)."""
        data, self.out = self.out, bytearray()
        self.write(data)

    def take_out(self) -> bytearray:
        """The output buffer, emptied: the commit barrier holds it until it may go."""
        data, self.out = self.out, bytearray()
        return data

    def write(self, data: bytes | bytearray) -> None:
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        if data:
            stats = self.server.stats
            stats.net_output_bytes += len(data)
            stats.writes_processed += 1
            transport.write(data)
            hard = self.server.output_limit_bytes
            if hard and transport.get_write_buffer_size() > hard:
                logger.warning("closing client %s: output buffer limit reached", self.addr)
                transport.abort()
                return
        if self.closing and not self.out:
            transport.close()

    def close_after_reply(self) -> None:
        self.closing = True
        self.server.barrier.wants_send(self)

    def close(self) -> None:
        self.closing = True
        if self.transport is not None:
            self.transport.close()

    # -- transactions -------------------------------------------------------------------

    def watch(self, key: bytes) -> None:
        entry = (self.db, key)
        if entry not in self.watched:
            self.watched.add(entry)
            self.server.watchers.setdefault(entry, set()).add(self)

    def unwatch_all(self) -> None:
        watchers = self.server.watchers
        for entry in self.watched:
            clients = watchers.get(entry)
            if clients is not None:
                clients.discard(self)
                if not clients:
                    del watchers[entry]
        self.watched.clear()
        self.watch_dirty = False

    def reset(self) -> None:
        """RESET: back to a fresh connection's state (auth included)."""
        self.multi = None
        self.multi_failed = False
        self.unwatch_all()
        self.unblock()
        self.db = 0
        self.protocol = 2
        self.name = ""
        self.reply_off = self.skip_current = self.skip_next = False
        self.authenticated = not self.server.config["requirepass"]
        if self in self.server.monitors:
            self.server.monitors.remove(self)
        if self.push_handler is not None:
            self.push_handler.disconnected()
            self.push_handler = None

    # -- blocking -----------------------------------------------------------------------

    def block(self, block: Block, cmd: Command) -> None:
        self.blocked = block
        self.blocked_command = cmd
        for key in block.keys:
            self.server.add_waiter(self, key)
        if block.timeout_ms:
            assert self.server.loop is not None
            self._block_timer = self.server.loop.call_later(block.timeout_ms / 1000, self._timeout)

    def retry_blocked(self, key: bytes) -> bool:
        """Try the blocked command again for its signaled `key`; whether it finished
        (replied)."""
        block = self.blocked
        assert block is not None
        try:
            reply = block.retry(key)
        except Exception as exc:
            if not isinstance(exc, CommandError):
                exc = self.server.unexpected(exc, self.last_command, "retrying the blocked")
            if self.blocked_command is not None:  # counted as failed, as Redis 7.0 does
                self.blocked_command.failed += 1
            self.unblock()
            self.reply_error(exc)
            self.run_queued()
            return True
        if reply is None:
            return False
        self.unblock()
        self.reply(reply)
        self.run_queued()
        return True

    def _timeout(self) -> None:
        block = self.blocked
        if block is None:
            return
        self.unblock()
        self.reply(block.timeout_reply)
        self.run_queued()

    def unblock(self) -> None:
        block, self.blocked = self.blocked, None
        self.blocked_command = None
        if block is None:
            return
        for key in block.keys:
            self.server.remove_waiter(self, key)
        if self._block_timer is not None:
            self._block_timer.cancel()
            self._block_timer = None


PROTECTED_MODE_ERROR = (
    b"-DENIED Narad is running in protected mode: no password is set and the client "
    b"is not on the loopback interface. Set a password (requirepass) or bind to the "
    b"addresses you mean to serve and turn protected-mode off.\r\n"
)


def _keepalive(sock: Any, idle_s: int) -> None:
    """TCP keepalive as Redis sets it (anetKeepAlive): the first probe after `idle_s`
    idle seconds, then one every third of that, the peer dropped after 3 unanswered."""
    if sock is None or sock.family not in (socket.AF_INET, socket.AF_INET6):
        return
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        if hasattr(socket, "TCP_KEEPIDLE"):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, idle_s)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, max(idle_s // 3, 1))
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT, 3)


def _format_addr(addr: Any) -> str:
    if isinstance(addr, tuple) and len(addr) >= 2:
        host = addr[0]
        return f"[{host}]:{addr[1]}" if ":" in host else f"{host}:{addr[1]}"
    return str(addr or "")
