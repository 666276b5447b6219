"""Running one command for a client: table lookup, subcommands, arity, the auth check,
MULTI queueing, the handler call, its error reply, and what follows every call (the
command's statistics, the slow log, MONITOR lines). No socket I/O and no server of
its own: it runs commands for any client with the session state and reply methods of
narad/client.py's Client, and asks of the commit barrier only what `Barrier` names,
so a test can run real commands on a real keyspace (tests/streams/test_groups.py).

Contracts it keeps:
- Every command sees the effects of all commands that arrived before it: adds held
  back for a later commit (`barrier.deferred`) are settled before any command runs
  but the pipelined fast path that joins them (narad/server.py, "Deferred writes").
- A command that fails answers an error reply and the connection lives; an exception
  no code path expected is answered `-ERR internal error running '<command>':
  <type>: <text>`, counted in the command's `failed`, and logged as one line
  (`event=internal_error`, the traceback only at loglevel debug).
- A refused EXEC discards the transaction; a command refused while queueing in MULTI
  makes EXEC abort, as in Redis.
- A `POST` or `Host:` line (an HTTP request sent to the port) closes the connection,
  and nothing the client sent after it runs or is answered.

Owned by the event loop thread.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from narad import errors, metrics
from narad.client import QUEUED
from narad.commands.table import LOOKUP, RUN_REPLY_BYTES_MAX, Block, Command
from narad.config import Config
from narad.errors import CommandError
from narad.events import Commits
from narad.log import LogFailed

if TYPE_CHECKING:
    from narad.client import Client
    from narad.commands.deferred import DeferredAdds
    from narad.server import Stats

# The server's logger: its lines keep the name they had (the log shows it, and
# narad/serve.py sets this logger's level).
logger = logging.getLogger("narad.server")

# Commands a client in MULTI runs at once instead of queueing.
MULTI_IMMEDIATE = frozenset({b"exec", b"discard", b"multi", b"watch", b"quit", b"reset"})
# Lines of an HTTP request, read as inline commands: a web page that posts to a local
# port can make a browser send Redis commands in the body (cross-protocol scripting).
# The connection is closed at such a line and nothing after it runs, as Redis 7.0 does.
CROSS_PROTOCOL = frozenset({b"post", b"host:"})
CROSS_PROTOCOL_LOG_INTERVAL_S = 60.0  # at most one log line this often, as in Redis
INTERNAL_ERROR_TEXT_MAX = 256  # characters of an unexpected exception's text in its reply


class Barrier(Commits, Protocol):
    """What the dispatcher asks of the commit barrier (narad/barrier.py)."""

    deferred: DeferredAdds | None  # adds held back until `settle`

    def wants_send(self, client: Client) -> None:
        """`client` has replies for the end of this iteration."""


@dataclass
class SlowEntry:
    id: int
    at_s: int
    usec: int
    argv: list[bytes]
    addr: str
    name: str


class Dispatcher:
    """Runs the commands of every client of a node, and keeps what they leave
    behind: the slow log and the MONITOR clients fed after each call."""

    def __init__(self, config: Config, stats: Stats, barrier: Barrier) -> None:
        self.config = config
        self.stats = stats
        self.barrier = barrier
        self.slowlog: deque[SlowEntry] = deque()
        self.slowlog_next_id = 0
        self.monitors: list[Client] = []
        self._cross_protocol_logged_s = -CROSS_PROTOCOL_LOG_INTERVAL_S
        self._cross_protocol_unlogged = 0  # attacks since the last log line
        self.slowlog_threshold_us = int(config["slowlog-log-slower-than"])  # type: ignore[call-overload]
        config.on_change("slowlog-log-slower-than", self._set_slowlog_threshold)
        self.latency_tracking = bool(config["latency-tracking"])
        config.on_change("latency-tracking", self._set_latency_tracking)
        # What every write is answered with, unrun, while set: READONLY on a replica,
        # NOREPLICAS on a leader short of its quorum (narad/replication/role.py).
        self.refusal: CommandError | None = None

    def _set_slowlog_threshold(self, value: object) -> None:
        self.slowlog_threshold_us = int(value)  # type: ignore[call-overload]

    def _set_latency_tracking(self, value: object) -> None:
        self.latency_tracking = bool(value)

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
            and self.refusal is None
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
        limit = client.server.output_limit_bytes
        if (
            self.monitors
            or client.reply_off
            or client.skip_current
            or client.skip_next
            or (limit and len(client.out) + RUN_REPLY_BYTES_MAX * (len(queue) + 1) > limit)
        ):
            return False
        start = time.perf_counter_ns()
        client.reads_data = True
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
        if self.refusal is not None and "write" in cmd.flags:
            raise self.refusal

    def call(self, client: Client, cmd: Command, argv: list[bytes]) -> Any:
        """Run a checked command; its reply goes to the client (or is returned in EXEC)."""
        assert cmd.handler is not None
        client.last_command = cmd.name
        if not cmd.data_free:
            client.reads_data = True
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
