"""One connection: reading and parsing its requests, its output buffer and limits,
its session state (database, protocol, MULTI, WATCH, CLIENT REPLY) and its blocking
timers.

The hot path sits directly on the event loop's transport/protocol API (one Client per
connection); each parsed command runs through the server's dispatcher
(narad/dispatch.py). A reply is encoded into the output buffer and never leaves on
its own: the commit barrier (narad/barrier.py) hands the buffer to the transport once
the commit the reply depends on is released. Replies past the output buffer limit
are dropped together with the connection.

Owned by the event loop thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import time
from collections import deque
from typing import TYPE_CHECKING, Any

from narad.commands.table import Block, Command
from narad.errors import CommandError
from narad.resp import ErrorReply, ProtocolError, QueryBufferLimit, RequestParser, encode_into
from narad.resp.encoder import encode_ids_into

if TYPE_CHECKING:
    from narad.replication.leader import ReplicaLink
    from narad.server import Server

# The server's logger: its lines keep the name they had (the log shows it, and
# narad/serve.py sets this logger's level).
logger = logging.getLogger("narad.server")

QUEUED = object()  # the reply marker for a queued command
NO_REPLY = object()  # a handler's answer when nothing is to be sent (CLIENT REPLY OFF)


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
        # Set once the connection is a replica following this node (PSYNC):
        # narad/replication/leader.py sends it the journal.
        self.replica_link: ReplicaLink | None = None
        self.replconf: dict[str, str] = {}  # REPLCONF listening-port / ip-address / capa
        # Whether a command since the last end of iteration read or wrote the keyspace
        # (its replies then wait for their commit's release: narad/barrier.py), and
        # how many of this client's reply batches the barrier holds.
        self.reads_data = False
        self.held = 0

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
            self.server.dispatch.execute(self, argv)
        except Exception as exc:  # outside the handler (which `call` guards): a bug
            name = argv[0][:64].decode("utf-8", "replace").lower()
            self.reply_error(self.server.dispatch.unexpected(exc, name, "dispatching"))
        if self.skip_current or self.skip_next:
            self.skip_current, self.skip_next = self.skip_next, False

    def connection_lost(self, exc: Exception | None) -> None:
        self.closing = True
        self.unblock()
        self.unwatch_all()
        server = self.server
        server.clients.pop(self.id, None)
        server.barrier.forget(self)
        if self in server.dispatch.monitors:
            server.dispatch.monitors.remove(self)
        if self.push_handler is not None:
            self.push_handler.disconnected()
            self.push_handler = None
        if self.replica_link is not None:
            server.replication.leader.detach(self)

    def pause_writing(self) -> None:
        if self.replica_link is not None:
            self.replica_link.paused = True

    def resume_writing(self) -> None:
        if self.replica_link is not None:
            self.server.replication.leader.resumed(self.replica_link)

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
                    self.server.dispatch.unexpected(exc, self.last_command, "encoding the reply of")
                )
                return
        limit = self.server.output_limit_bytes
        if limit and len(out) > limit:
            self._over_output_limit()

    def reply_ids(self, ms: int, seq: int, count: int) -> None:
        """The replies of `count` held-back commands that each added one entry: their
        consecutive stream IDs from (ms, seq). The client was registered for sending
        when the commands were taken (`Dispatcher._run`), and the barrier settles before it
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
        self.reads_data = True
        if not self.out:
            self.server.barrier.wants_send(self)
        out = self.out
        mark = len(out)
        try:
            encode_into(out, value, self.protocol)
        except Exception as exc:  # a value the encoder refuses: a bug; the frame is dropped
            del out[mark:]
            self.server.dispatch.unexpected(exc, self.last_command, "encoding a push frame of")

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
        if self in self.server.dispatch.monitors:
            self.server.dispatch.monitors.remove(self)
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
        self._reads_data_if_not_free()
        try:
            reply = block.retry(key)
        except Exception as exc:
            if not isinstance(exc, CommandError):
                exc = self.server.dispatch.unexpected(
                    exc, self.last_command, "retrying the blocked"
                )
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
