"""Running one command for a session: table lookup, subcommands, arity, the auth
check, the permission check (ACL: narad/acl/), MULTI queueing, the handler call, its
error reply, and what follows every call (the command's statistics, the slow log,
MONITOR lines: narad/observers.py). No socket I/O: it runs commands for any session
of a node (narad/node.py), so a test can run real commands on a real keyspace
(tests/streams/test_groups.py).

Contracts it keeps:
- Every command sees the effects of all commands that arrived before it: adds held
  back for a later commit (narad/held_back.py) are applied before any command runs
  but the pipelined fast path that joins them.
- A command that fails answers an error reply and the connection lives; an exception
  no code path expected is answered `-ERR internal error running '<command>':
  <type>: <text>`, counted in the command's `failed`, and logged as one line
  (`event=internal_error`, the traceback only at loglevel debug: narad/errors.py).
- A refused EXEC discards the transaction; a command refused while queueing in MULTI
  makes EXEC abort, as in Redis.
- No command runs unless its session's user may run it on every key it touches
  (`permit`): checked here, once, for every path a command takes (the fast path, the
  pipelined run, MULTI queueing, and again at EXEC), never in a handler. A session
  whose user is unrestricted (`Session.restricted` false) pays one attribute test.
- A `POST` or `Host:` line (an HTTP request sent to the port) closes the connection,
  and nothing the client sent after it runs or is answered.

Owned by the event loop thread.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from narad import errors
from narad.acl.check import check
from narad.commands.table import LOOKUP, RUN_REPLY_BYTES_MAX, Command
from narad.errors import CommandError
from narad.keywatch import Block
from narad.log import LogFailed
from narad.node import QUEUED, Node, Session

# The server's logger: its lines keep the name they had (the log shows it, and
# narad/serve.py sets this logger's level).
logger = logging.getLogger("narad.server")

# Commands a session in MULTI runs at once instead of queueing.
MULTI_IMMEDIATE = frozenset({b"exec", b"discard", b"multi", b"watch", b"quit", b"reset"})
# Lines of an HTTP request, read as inline commands: a web page that posts to a local
# port can make a browser send Redis commands in the body (cross-protocol scripting).
# The connection is closed at such a line and nothing after it runs, as Redis 7.0 does.
CROSS_PROTOCOL = frozenset({b"post", b"host:"})
CROSS_PROTOCOL_LOG_INTERVAL_S = 60.0  # at most one log line this often, as in Redis


class Dispatcher:
    """Runs the commands of every session of a node, and feeds its observers."""

    def __init__(self, node: Node) -> None:
        self.node = node
        config = node.config
        self.stats = node.stats
        self.barrier = node.barrier
        self.observers = node.observers
        self.monitors = node.observers.monitors  # the same list, changed in place
        node.runner = self
        self._cross_protocol_logged_s = -CROSS_PROTOCOL_LOG_INTERVAL_S
        self._cross_protocol_unlogged = 0  # attacks since the last log line
        self.latency_tracking = bool(config["latency-tracking"])
        config.on_change("latency-tracking", self._set_latency_tracking)

    def _set_latency_tracking(self, value: object) -> None:
        self.latency_tracking = bool(value)

    def execute(self, session: Session, argv: list[bytes]) -> None:
        """Run one command and encode its reply into the session's output buffer."""
        cmd = LOOKUP.get(argv[0]) or LOOKUP.get(argv[0].lower())
        argc = len(argv)
        node = self.node
        if (
            cmd is not None
            and cmd.handler is not None
            and session.multi is None
            and session.authenticated
            and (argc == cmd.arity if cmd.arity >= 0 else argc >= -cmd.arity)
            and node.refusal is None
        ):
            if session.restricted and not self._permitted(session, cmd, argv):
                return
            if cmd.run is not None and self._run(session, cmd, argv):
                return
            if node.held_back is not None:
                node.apply_held_back()
            try:
                self.call(session, cmd, argv)
            except CommandError as exc:
                session.reply_error(exc)
            return
        if node.held_back is not None:
            node.apply_held_back()
        self._execute_checked(session, argv, cmd)

    def _permitted(self, session: Session, cmd: Command, argv: list[bytes]) -> bool:
        """The fast path's permission check: True, or the refusal answered."""
        if cmd.subcommands and len(argv) >= 2:  # COMMAND <sub> reaches the fast path
            cmd = cmd.subcommands.get(argv[1].lower().decode("utf-8", "replace"), cmd)
        try:
            self.permit(session, cmd, argv)
        except CommandError as exc:
            cmd.rejected += 1
            if self.node.held_back is not None:  # replies stay in order
                self.node.apply_held_back()
            session.reply_error(exc)
            return False
        return True

    def permit(
        self, session: Session, cmd: Command, argv: list[bytes], at_exec: bool = False
    ) -> None:
        """Raise NOPERM, with an ACL LOG entry, unless the session's user may run `argv`
        (its command, or subcommand, `cmd`) on every key it touches; `at_exec` with
        Redis's text for a queued command refused at EXEC."""
        user = session.user
        if not user.unrestricted:
            entry = cmd.acl
            assert entry is not None
            try:
                keys = cmd.keys_of(argv)
            except Exception as exc:  # a finder's bug: refuse rather than guess
                raise errors.internal(exc, cmd.name, "finding the keys of") from None
            denied = check(user, entry, argv, keys)
            if denied is not None:
                in_multi = at_exec or session.multi is not None
                self.node.acl.log.add(
                    denied.reason,
                    "multi" if in_multi else "toplevel",
                    denied.object(entry, argv),
                    user.name.encode("utf-8", "surrogateescape"),
                    session.client_info(cmd.name),
                )
                raise denied.exec_error() if at_exec else denied.error(user, entry)

    def _run(self, session: Session, cmd: Command, argv: list[bytes]) -> bool:
        """The pipelined fast path: `cmd.run` answers `argv` and the like commands
        queued after it at once; the same effects, replies and statistics as `call`
        for each. False (nothing done) when it declines or anything would differ:
        MONITOR, CLIENT REPLY, a reply that could pass the output limit."""
        assert cmd.run is not None
        queue = session.connection.queue
        limit = self.node.output_limit_bytes
        if (
            self.monitors
            or session.reply_off
            or session.skip_current
            or session.skip_next
            or (limit and len(session.out) + RUN_REPLY_BYTES_MAX * (len(queue) + 1) > limit)
        ):
            return False
        start = time.perf_counter_ns()
        session.reads_data = True
        try:
            run = cmd.run(session, argv, queue)
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
        session.last_command = cmd.name
        cmd.calls += count
        cmd.usec += usec
        self.stats.commands_processed += count
        if self.latency_tracking:
            cmd.track(ns // count, count)
        each = usec // count
        if each >= self.observers.slowlog_threshold_us >= 0:
            for one in run:
                self.observers.slowlog_add(session, one, each)
        self.barrier.wants_send(session)
        return True

    def _execute_checked(self, session: Session, argv: list[bytes], cmd: Command | None) -> None:
        """The general path: unknown commands, subcommands, checks, MULTI queueing."""
        name = argv[0].lower()
        if name in CROSS_PROTOCOL:
            self._cross_protocol(session, argv[0])
            return
        queueing = session.multi is not None and name not in MULTI_IMMEDIATE
        try:
            if cmd is None:
                raise errors.unknown_command(argv[0], argv[1:])
            if cmd.subcommands and len(argv) >= 2:
                cmd = cmd.subcommands.get(argv[1].lower().decode("utf-8", "replace"), cmd)
            self._check(session, cmd, argv)
            if queueing and "no_multi" in cmd.flags:
                raise CommandError("Command not allowed inside a transaction")
        except CommandError as exc:
            if queueing:
                session.multi_failed = True
            if cmd is not None:
                cmd.rejected += 1
            if name == b"exec":
                # A refused EXEC discards the transaction, if any, as in Redis.
                session.multi = None
                session.unwatch_all()
                why = exc.message if exc.code == "ERR" else f"{exc.code} {exc.message}"
                exc = CommandError(f"Transaction discarded because of: {why}", "EXECABORT")
            session.reply_error(exc)
            return
        if queueing:
            assert session.multi is not None
            session.multi.append(argv)
            session.reply(QUEUED)
            return
        try:
            self.call(session, cmd, argv)
        except CommandError as exc:
            session.reply_error(exc)

    def _cross_protocol(self, session: Session, name: bytes) -> None:
        """An HTTP line arrived as a command: drop the connection and everything it
        sent after the line (queued, pipelined or in MULTI) unrun and unanswered."""
        session.connection.forget_input()
        session.multi = None
        session.out.clear()
        session.close()
        now = time.monotonic()
        self._cross_protocol_unlogged += 1
        if now - self._cross_protocol_logged_s >= CROSS_PROTOCOL_LOG_INTERVAL_S:
            logger.warning(
                "event=cross_protocol_attack client=%s line=%r attacks=%d action=closed"
                " (an HTTP request sent to the Redis port, as a web page can make a"
                " browser do; logged at most once a minute)",
                session.addr,
                name[:16].decode("ascii", "replace"),
                self._cross_protocol_unlogged,
            )
            self._cross_protocol_logged_s = now
            self._cross_protocol_unlogged = 0

    def _check(self, session: Session, cmd: Command, argv: list[bytes]) -> None:
        if cmd.handler is None:  # a container called without or with an unknown subcommand
            if len(argv) < 2:
                raise errors.wrong_arity(cmd.name)
            raise errors.unknown_subcommand(argv[1], cmd.name)
        if not cmd.check_arity(len(argv)):
            raise errors.wrong_arity(cmd.name)
        if not session.authenticated and "noauth" not in cmd.flags:
            if not self.node.acl.users.default_logs_in():
                raise errors.NOAUTH
            session.log_in(self.node.acl.users.default)  # the default user became open
        if session.restricted:
            self.permit(session, cmd, argv)
        refusal = self.node.refusal
        if refusal is not None and "write" in cmd.flags:
            raise refusal

    def call(self, session: Session, cmd: Command, argv: list[bytes]) -> Any:
        """Run a checked command; its reply goes to the session (or is returned in EXEC)."""
        assert cmd.handler is not None
        session.last_command = cmd.name
        if not cmd.data_free:
            session.reads_data = True
        start = time.perf_counter_ns()
        try:
            reply = cmd.handler(session, argv)
        except CommandError:
            cmd.failed += 1
            raise
        except LogFailed as exc:
            cmd.failed += 1
            raise CommandError(str(exc), "IOERR") from None
        except Exception as exc:
            cmd.failed += 1
            raise errors.internal(exc, cmd.name) from None
        finally:
            ns = time.perf_counter_ns() - start
            usec = ns // 1000
            cmd.calls += 1
            cmd.usec += usec
            self.stats.commands_processed += 1
            if self.latency_tracking:
                cmd.track(ns)
            observers = self.observers
            if usec >= observers.slowlog_threshold_us >= 0:
                observers.slowlog_add(session, argv, usec)
            if self.monitors and "admin" not in cmd.flags:
                observers.feed_monitors(session, argv)
        if reply.__class__ is Block:
            session.block(reply, cmd)
        elif session.in_exec:
            return reply
        else:
            session.reply(reply)
        return None
