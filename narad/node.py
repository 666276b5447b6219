"""The node and its sessions: what a command handler can reach.

A handler is called as `handler(session, argv)` (narad/commands/table.py) and reaches
only what `Session` and its `node` expose:

- `Node` holds the node's services: the config, the keyspace, the queue service, the
  key events (`keys`: WATCH and blocked sessions, narad/keywatch.py), the commit
  barrier, replication, the statistics, the observers (slow log and MONITOR:
  narad/observers.py), the sessions, and shutdown. It does no socket I/O; the
  server (narad/server.py) runs its lifecycle and its connections
  (narad/connection.py).
- `Session` is one connection's state: database, protocol, user, name, MULTI and
  WATCH, blocking, CLIENT REPLY, and the output buffer its replies are encoded into.
  The commit barrier hands that buffer to the session's `connection`, which owns the
  socket (narad/connection.py); a session never writes to a socket itself.

The services below the node (barrier, queues, replication, key events) never import
this module: each names the small interface it needs of the node (a reply sink, key
events, a replication host) and the node passes itself, or a part of itself, in.

Owned by the event loop thread.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections import deque
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from narad import errors
from narad.acl import Acl, User
from narad.barrier import CommitBarrier, CommitFailed
from narad.config import Config
from narad.config.kinds import OutputBufferLimits
from narad.errors import CommandError
from narad.events import Timers
from narad.held_back import Counted, HeldBackAdds
from narad.keyspace import Keyspace
from narad.keywatch import Block, Key, KeyWatch
from narad.log import LogFailed
from narad.metrics import Stats
from narad.observers import Observers
from narad.queues.service import QueueService, RunningLoop
from narad.replication.role import Replication
from narad.resp import ErrorReply, encode_into
from narad.resp.encoder import encode_ids_into
from narad.streams.ids import SEQ_MASK
from narad.tls import Contexts

if TYPE_CHECKING:
    from narad.replication.leader import ReplicaLink
    from narad.streams.stream import Stream

logger = logging.getLogger("narad.server")

QUEUED = object()  # the reply marker for a queued command
NO_REPLY = object()  # a handler's answer when nothing is to be sent (CLIENT REPLY OFF)


class Streamed(NamedTuple):
    """A handler's answer that is an array too long to encode in one turn of the event
    loop: its length, and its elements a list at a time. The session encodes the
    header at once and each list when its connection asks for more
    (`Session.reply_more`), so that other clients run in between. The handler
    guarantees that the lists hold exactly `length` elements, whatever runs in
    between; a list that cannot be made (an exception) closes the connection."""

    length: int
    parts: Iterator[list[Any]]


class Runner(Protocol):
    """What a handler may ask of the dispatcher that runs it (narad/dispatch.py): EXEC
    checks its queued commands again with `permit` and runs them through `call`."""

    def call(self, session: Session, cmd: Any, argv: list[bytes]) -> Any:
        """Run a checked command; its reply goes to the session (or is returned in EXEC)."""

    def permit(self, session: Session, cmd: Any, argv: list[bytes], at_exec: bool = False) -> None:
        """Raise NOPERM unless the session's user may run `argv` (narad/acl/)."""


class Connection(Protocol):
    """A session's connection, as the session and its handlers use it (narad/connection.py)."""

    addr: str
    laddr: str
    created_s: float
    last_interaction_s: float
    closing: bool  # closes once its replies are written
    transport: asyncio.Transport | None
    replica_link: ReplicaLink | None  # set once it is a replica following this node
    queue: deque[list[bytes]]  # commands parsed, not yet run

    def write(self, data: bytes | bytearray) -> None:
        """Write to the socket now."""

    def run_queued(self) -> None:
        """Run the commands parsed and not yet run (after a blocked command replied)."""

    def abort(self, why: str) -> None:
        """Drop the connection at once, its unsent output with it."""

    def over_output_limit(self) -> None:
        """Drop the replies and the connection: past the output buffer limit."""

    def forget_input(self) -> None:
        """Drop what was parsed and not yet run."""

    def close(self) -> None: ...


class Node:
    """One data node's services (module doc). Built before the keyspace opens."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.stats = Stats()
        self.sessions: dict[int, Session] = {}
        self.keyspace = keyspace = Keyspace(config)
        self.barrier = CommitBarrier(keyspace, self.end_of_iteration)
        self.held_back: HeldBackAdds | None = None  # plain adds of this iteration
        self.keys = KeyWatch(self.barrier)
        keyspace.on_write = self.written
        self.timers: Timers = RunningLoop()
        self.queues = QueueService(keyspace, self.keys, self, self.timers)
        keyspace.on_delete = self.queues.dropped
        self.observers = Observers(config)
        # Users and the ACL log (narad/acl/): the users of narad.conf's `user` lines
        # or of the ACL file are loaded now (AclFileError: the node cannot start).
        self.acl = Acl(config)
        self.acl.start()
        config.users_for_rewrite = self.acl.user_lines
        # The dispatcher running this node's commands (narad/dispatch.py sets itself).
        self.runner: Runner = None  # type: ignore[assignment]
        # What every write is answered with, unrun, while set: READONLY on a replica,
        # NOREPLICAS on a leader short of its quorum (narad/replication/role.py).
        self.refusal: CommandError | None = None
        self.replication = Replication(self)
        self._next_session_id = 1
        self.run_id = os.urandom(20).hex()
        # INFO's tcp_port: the plain port listened on, else the TLS port, as Redis.
        self.tcp_port = 0
        self.tls_port = 0  # the TLS port listened on (0: none)
        # The TLS contexts in force (narad/tls.py), while tls-port or tls-replication
        # is set; narad/server.py builds them at start and at each tls-* CONFIG SET.
        self.tls: Contexts | None = None
        self.exit_status = 0  # what the process exits with once stopped
        self.shutdown_requested: asyncio.Event | None = None
        self.output_limit_bytes = 0  # client-output-buffer-limit's normal hard limit
        self._set_output_limit(config["client-output-buffer-limit"])
        config.on_change("client-output-buffer-limit", self._set_output_limit)
        for name in (
            "fsync",
            "journal-segment-bytes",
            "segment-bytes",
            "segment-ms",
            "retention-ms",
            "retention-bytes",
            "queue-retention",
            "stream-node-max-entries",
        ):
            config.on_change(name, self._apply_log_settings)

    def _set_output_limit(self, value: object) -> None:
        assert isinstance(value, OutputBufferLimits)
        self.output_limit_bytes = value.normal.hard_bytes
        self.normal_output_limit = value.normal

    def _apply_log_settings(self, value: object) -> None:
        self.keyspace.apply_settings()
        for queue in self.queues.queues():
            self.queues.apply_settings(queue)

    # -- key events ---------------------------------------------------------------------

    def written(self, db: int, key: bytes) -> None:
        """A command wrote `key`: WATCHers abort, sessions blocked there and the
        queue's push consumers get another look."""
        self.keys.written(db, key)
        if self.queues.consuming:
            stream = self.keyspace.get(db, key)
            if stream is not None:
                self.queues.written(stream)

    # -- held-back adds (narad/held_back.py) --------------------------------------------

    def hold_back(
        self, session: Session, cmd: Counted, stream: Stream, argvs: list[list[bytes]]
    ) -> None:
        """Hold back one entry per argv of `argvs` (its fields argv[FIELDS_FROM:]) for
        `stream` (narad/held_back.py's `can_hold`), to be added with the others of
        this iteration (`apply_held_back`). The caller has counted the commands and
        registered the session for sending (`Dispatcher._run`)."""
        held = self.held_back
        if held is None:
            held = self.held_back = HeldBackAdds()
        # Filled here rather than by a method of HeldBackAdds: one call less per
        # pipelined XADD or Q.PUSH (0.15 us of 3.6, bench/queue_cycle.py).
        run = held.runs.get(stream)
        if run is None:
            held.runs[stream] = list(argvs)
        else:
            run += argvs
        held.takers.append((session, cmd, stream, len(argvs)))

    def apply_held_back(self) -> None:
        """Add the entries held back, and write each session its replies."""
        held, self.held_back = self.held_back, None
        if held is None:
            return
        written, owed = held.apply()
        for stream in written:
            self.written(stream.db, stream.key)
        for session, outcome, count in owed:
            if isinstance(outcome, int):
                session.reply_ids(outcome >> 64, outcome & SEQ_MASK, count)
            else:
                for _ in range(count):
                    session.reply_error(outcome)

    def schedule(self) -> None:
        """Commit, and serve what waits, at the end of this event-loop iteration."""
        self.barrier.schedule()

    # -- sessions -----------------------------------------------------------------------

    def new_session(self, connection: Connection) -> Session:
        session = Session(self, connection, self._next_session_id)
        self._next_session_id += 1
        return session

    def users_changed(self, gone: list[User], current: Session | None = None) -> None:
        """Users were changed (ACL SETUSER, DELUSER, LOAD): each session learns
        whether its user is still unrestricted, and the sessions of the users in
        `gone` (deleted, or replaced by ACL LOAD) close, as Redis closes them:
        `current`, running the command, once its reply is out."""
        for session in list(self.sessions.values()):
            if any(session.user is user for user in gone):
                session.log_out()
                if session is current:
                    session.close_after_reply()
                else:
                    session.close()
            else:
                session.restricted = not session.user.unrestricted

    @property
    def blocked_sessions(self) -> int:
        return sum(1 for s in self.sessions.values() if s.blocked is not None)

    # -- the end of each event-loop iteration -------------------------------------------

    def end_of_iteration(self) -> None:
        """Once per iteration that wrote or replied (the barrier schedules it): add the
        held-back entries, serve queue consumers and blocked sessions, then commit
        and seal every reply with its position (narad/barrier.py)."""
        self.barrier.scheduled = False  # a registration from here on schedules the next
        if self.held_back is not None:
            self.apply_held_back()
        self._before_commit()
        if self.held_back is not None:  # taken by the sessions just served
            self.apply_held_back()
        try:
            committed = self.barrier.commit()
        except CommitFailed as exc:
            self.commit_failed(exc.why, exc.closed)
            return
        self._after_commit(committed)

    def _before_commit(self) -> None:
        # The commit after this must run whatever happens while serving: replies of
        # every session wait on it.
        queues = self.queues
        if (queues.to_serve or queues.subscribed) and self.keyspace.leads:
            try:
                queues.serve()
            except Exception as exc:
                errors.internal(exc, "queue consumers", "serving")
        try:
            self.keys.serve_woken()
        except Exception as exc:
            errors.internal(exc, "blocked clients", "serving")

    def _after_commit(self, committed: bool) -> None:
        keyspace = self.keyspace
        keyspace.remove_doomed()
        if keyspace.checkpoint_due():
            keyspace.checkpointer.begin(asyncio.get_running_loop())
        carried = keyspace.journal.carried
        if committed and self.queues.subscribed and self.queues.copies_due(carried):
            self.barrier.schedule()  # what became committed in a source may now be copied

    def commit_failed(self, why: str, clients_closed: int) -> None:
        """The journal refuses every commit from now on, and a reply that reads what
        the failed commit took would claim it too, so the node stops (exit status 1);
        the next start recovers every commit that finished."""
        if self.exit_status == 0:
            logger.critical(
                "event=commit_failed clients_closed=%d reason=%r; stopping: the next start "
                "recovers every finished commit",
                clients_closed,
                why,
            )
            self.exit_status = 1
            self.request_shutdown()

    def upkeep(self) -> None:
        """Once a second (narad/server.py): retention and compaction of the logs, the
        queues' timers; what they write is committed as usual."""
        try:
            self.apply_held_back()
            if self.keyspace.leads:  # a replica's every change is its leader's
                try:
                    self.keyspace.maintain()
                except LogFailed as exc:
                    logger.error("keyspace upkeep failed: %s", exc)
                self.queues.tick()
        except Exception as exc:  # the commit below still runs, and so does the next upkeep
            errors.internal(exc, "upkeep")
        self.barrier.schedule()  # trim ops written by retention are committed as usual

    # -- what replication asks of the node (narad/replication/host.py's Host) -----------

    def reopen_keyspace(self, truncate_to: int | None = None) -> None:
        """Reopen the keyspace on a replica's data as its follower changed it
        (narad/replication/follower.py): with `truncate_to`, its history cut back to
        that many commits (a new leader lacks those after), crash-safe; else a
        complete full copy put in place of its data (`Keyspace.reopen`)."""
        self.end_of_iteration()  # replies of reads so far leave first
        self.keyspace.reopen(truncate_to)

    def close_sessions(self, but: object = None) -> int:
        """Close every session's connection but `but`'s; how many were closed."""
        closed = 0
        for session in list(self.sessions.values()):
            if session.connection is not but:
                session.close()
                closed += 1
        return closed

    def request_shutdown(self) -> None:
        if self.shutdown_requested is not None:
            self.shutdown_requested.set()


class Session:
    """One connection's state (module doc), and its output buffer: replies are
    encoded into `out`, and the commit barrier (narad/barrier.py, for which a session
    is a ReplySink) has them written to the connection once their commit is released.
    Owned by the event loop thread."""

    def __init__(self, node: Node, connection: Connection, session_id: int) -> None:
        self.node = node
        self.barrier = node.barrier  # registers the replies (narad/barrier.py)
        self.connection = connection
        self.id = session_id
        self.name = ""
        self.lib_name = ""
        self.lib_ver = ""
        self.db = 0
        self.protocol = 2
        # The user (narad/acl/), whether the connection logged in as it, and whether
        # the dispatcher must check its permissions (false: the user may run every
        # command on every key and channel; kept so by Node.users_changed).
        self.user: User = node.acl.users.default
        self.authenticated = node.acl.users.default_logs_in()
        self.restricted = not self.user.unrestricted
        self.multi: list[list[bytes]] | None = None
        self.multi_failed = False
        self.in_exec = False
        self.watched: set[Key] = set()
        self.watch_dirty = False  # a watched key was written since WATCH
        self.reply_off = False  # CLIENT REPLY OFF
        self.skip_current = False  # CLIENT REPLY SKIP: this command's reply is dropped
        self.skip_next = False  # CLIENT REPLY SKIP was just called
        self.blocked: Block | None = None
        # The Command (narad/commands/table.py) that answered `blocked`: whether its
        # reply tells nothing of the keyspace, and what counts its failures.
        self.blocked_command: Any = None
        self._block_timer: asyncio.TimerHandle | None = None
        self.last_command = ""
        self.push_handler: Any = None  # set by push-mode commands (Q.CONSUME)
        self.replconf: dict[str, str] = {}  # REPLCONF listening-port / ip-address / capa
        self.out = bytearray()  # replies not yet sealed by the commit barrier
        # Whether a command since the last end of iteration read or wrote the keyspace
        # (its replies then wait for their commit's release: narad/barrier.py), and
        # how many of this session's reply batches the barrier holds sealed.
        self.reads_data = False
        self.sealed = 0
        # The parts of a Streamed reply still to encode.
        self.streaming: Iterator[list[Any]] | None = None

    @property
    def addr(self) -> str:
        return self.connection.addr

    # -- the user ---------------------------------------------------------------------

    def log_in(self, user: User) -> None:
        self.user = user
        self.authenticated = True
        self.restricted = not user.unrestricted

    def log_out(self) -> None:
        """Back to the default user, not logged in (its user was deleted)."""
        self.user = self.node.acl.users.default
        self.authenticated = False
        self.restricted = not self.user.unrestricted

    def client_info(self, current: str | None = None) -> str:
        """This connection's CLIENT LIST line (no newline); `current` names the command
        the caller is running."""
        now = time.time()
        conn = self.connection
        flags = "N"
        if conn.replica_link is not None:
            flags = "S"  # a replica's link, as Redis shows it to its leader
        elif self.blocked is not None:
            flags = "b"
        elif self.multi is not None:
            flags = "x"
        cmd = current or self.last_command or "NULL"
        multi = len(self.multi) if self.multi is not None else -1
        return (
            f"id={self.id} addr={conn.addr} laddr={conn.laddr} fd=-1 name={self.name} "
            f"age={int(now - conn.created_s)} idle={int(now - conn.last_interaction_s)} "
            f"flags={flags} db={self.db} sub=0 psub=0 ssub=0 multi={multi} "
            f"qbuf=0 qbuf-free=0 argv-mem=0 multi-mem=0 rbs=0 rbp=0 obl=0 oll=0 "
            f"omem={len(self.out)} tot-mem=0 events=r cmd={cmd} user={self.user.name} "
            f"redir=-1 resp={self.protocol} lib-name={self.lib_name} lib-ver={self.lib_ver}"
        )

    @property
    def closing(self) -> bool:
        return self.connection.closing

    # -- replies ----------------------------------------------------------------------

    def reply(self, value: Any) -> None:
        if self.reply_off or self.skip_current or value is NO_REPLY:
            return
        out = self.out
        if not out:
            self.barrier.wants_send(self)
        if value.__class__ is bytes:  # the most common reply: a bulk string
            out += b"$%d\r\n%b\r\n" % (len(value), value)
        elif value is QUEUED:
            out += b"+QUEUED\r\n"
        elif value.__class__ is Streamed:
            out += b"*%d\r\n" % value.length
            self.streaming = value.parts
        else:
            mark = len(out)
            try:
                encode_into(out, value, self.protocol)
            except Exception as exc:  # a value the encoder refuses: a bug
                del out[mark:]
                self.reply_error(errors.internal(exc, self.last_command, "encoding the reply of"))
                return
        limit = self.node.output_limit_bytes
        if limit and len(out) > limit:
            self.connection.over_output_limit()

    def reply_ids(self, ms: int, seq: int, count: int) -> None:
        """The replies of `count` held-back commands that each added one entry: their
        consecutive stream IDs from (ms, seq). The session was registered for sending
        when the commands were taken (`Dispatcher._run`), and the held-back adds are
        made before the barrier seals, so that registration still stands."""
        out = self.out
        encode_ids_into(out, ms, seq, count)
        limit = self.node.output_limit_bytes
        if limit and len(out) > limit:
            self.connection.over_output_limit()

    def reply_more(self) -> None:
        """Encode the next part of the Streamed reply (see `Streamed`)."""
        parts = self.streaming
        assert parts is not None
        try:
            part = next(parts, None)
        except Exception as exc:  # the part could not be made: the reply cannot end
            self.streaming = None
            self.connection.abort(f"a long reply could not be completed: {exc!r}")
            return
        if part is None:
            self.streaming = None
            return
        self.reads_data = True  # sealed behind the parts before it
        out = self.out
        if not out:
            self.barrier.wants_send(self)
        for value in part:
            encode_into(out, value, self.protocol)

    def reply_error(self, exc: CommandError) -> None:
        stats = self.node.stats
        stats.error_replies += 1
        stats.errors[exc.code] += 1
        self.reply(ErrorReply(exc.code, exc.message))

    def push(self, value: Any) -> None:
        """Out-of-band data (push frames, MONITOR lines): never suppressed."""
        self.reads_data = True
        if not self.out:
            self.barrier.wants_send(self)
        out = self.out
        mark = len(out)
        try:
            encode_into(out, value, self.protocol)
        except Exception as exc:  # a value the encoder refuses: a bug; the frame is dropped
            del out[mark:]
            errors.internal(exc, self.last_command, "encoding a push frame of")

    # -- the commit barrier's ReplySink ---------------------------------------------------

    def send(self) -> None:
        """Hand the output buffer to the connection now."""
        data, self.out = self.out, bytearray()
        self.connection.write(data)

    def take_out(self) -> bytearray:
        """The output buffer, emptied: the commit barrier holds it until it may go."""
        data, self.out = self.out, bytearray()
        return data

    def write(self, data: bytes | bytearray) -> None:
        self.connection.write(data)

    def close(self) -> None:
        self.connection.close()

    def close_after_reply(self) -> None:
        self.connection.closing = True
        self.barrier.wants_send(self)

    # -- lifecycle ----------------------------------------------------------------------

    def ended(self) -> None:
        """The connection is gone: nothing waits on this session any more, and
        nothing of it is sent."""
        self.streaming = None
        self.unblock()
        self.unwatch_all()
        node = self.node
        node.sessions.pop(self.id, None)
        node.barrier.forget(self)
        node.observers.forget(self)
        if self.push_handler is not None:
            self.push_handler.disconnected()
            self.push_handler = None

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
        users = self.node.acl.users
        self.user = users.default
        self.authenticated = users.default_logs_in()
        self.restricted = not self.user.unrestricted
        self.node.observers.forget(self)
        if self.push_handler is not None:
            self.push_handler.disconnected()
            self.push_handler = None

    # -- WATCH (narad/keywatch.py) ------------------------------------------------------

    def watch(self, key: bytes) -> None:
        self.node.keys.watch(self, self.db, key)

    def unwatch_all(self) -> None:
        self.node.keys.unwatch_all(self)

    # -- blocking -----------------------------------------------------------------------

    def block(self, block: Block, cmd: Any) -> None:
        """Wait as `block` says; `cmd` is the Command that answered it."""
        self.blocked = block
        self.blocked_command = cmd
        keys = self.node.keys
        for key in block.keys:
            keys.add_waiter(self, key)
        if block.timeout_ms:
            self._block_timer = self.node.timers.call_later(block.timeout_ms / 1000, self._timeout)

    def retry_blocked(self, key: bytes) -> bool:
        """Try the blocked command again for its woken `key`; whether it finished
        (replied)."""
        block = self.blocked
        assert block is not None
        self._reads_data_if_not_free()
        try:
            reply = block.retry(key)
        except Exception as exc:
            if not isinstance(exc, CommandError):
                exc = errors.internal(exc, self.last_command, "retrying the blocked")
            if self.blocked_command is not None:  # counted as failed, as Redis 7.0 does
                self.blocked_command.failed += 1
            self.unblock()
            self.reply_error(exc)
            self.connection.run_queued()
            return True
        if reply is None:
            return False
        self.unblock()
        self.reply(reply)
        self.connection.run_queued()
        return True

    def _reads_data_if_not_free(self) -> None:
        cmd = self.blocked_command
        if cmd is None or not cmd.data_free:
            self.reads_data = True

    def _timeout(self) -> None:
        block = self.blocked
        if block is None:
            return
        self._reads_data_if_not_free()
        self.unblock()
        reply = block.timeout_reply
        self.reply(reply() if callable(reply) else reply)
        self.connection.run_queued()

    def unblock(self) -> None:
        block, self.blocked = self.blocked, None
        self.blocked_command = None
        if block is None:
            return
        keys = self.node.keys
        for key in block.keys:
            keys.remove_waiter(self, key)
        if self._block_timer is not None:
            self._block_timer.cancel()
            self._block_timer = None
