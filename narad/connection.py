"""One connection: reading and parsing its requests, and writing its replies to the
socket. The only socket I/O of a data node's clients.

The hot path sits directly on the event loop's transport/protocol API (one Client per
connection); each parsed command runs through the dispatcher (narad/dispatch.py) for
the connection's session (narad/node.py's Session), which holds everything else: the
session state and the output buffer. A reply is encoded into that buffer and never
leaves on its own: the commit barrier (narad/barrier.py) has it written here once the
commit the reply depends on is released. Replies past the output buffer limit are
dropped together with the connection.

One client cannot hold the others up: its commands stop running, and its socket stops
being read, once they ran for TURN_NS in one turn of the event loop or once
OUTPUT_HIGH_BYTES of its output wait to be sent (its socket's buffer and the replies
of this iteration), and go on in a later turn, when its socket has drained. A long
reply (narad/node.py's Streamed) is encoded a chunk at a time the same way. So a
client that sends commands and never reads their replies holds about
OUTPUT_HIGH_BYTES of them, not all of them.

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

from narad import errors
from narad.log.files import OPEN_FILES
from narad.resp import ErrorReply, ProtocolError, QueryBufferLimit, RequestParser

if TYPE_CHECKING:
    from narad.dispatch import Dispatcher
    from narad.node import Node
    from narad.replication.leader import ReplicaLink

# The server's logger: its lines keep the name they had (the log shows it, and
# narad/serve.py sets this logger's level).
logger = logging.getLogger("narad.server")

# Output a client may have waiting before its commands stop running (module doc).
OUTPUT_HIGH_BYTES = 1 << 20
# How long one client's commands may run in one turn of the event loop, checked
# every TURN_CHECK commands.
TURN_NS = 5_000_000
TURN_CHECK = 16


class Client(asyncio.Protocol):
    """One connection. Owned by the event loop thread."""

    def __init__(self, node: Node, dispatch: Dispatcher) -> None:
        self.node = node
        self.dispatch = dispatch
        self.transport: asyncio.Transport | None = None
        self.addr = ""
        self.laddr = ""
        config = node.config
        self.parser = RequestParser(
            max_bulk_len=int(config["proto-max-bulk-len"]),  # type: ignore[call-overload]
            max_query_buffer=int(config["client-query-buffer-limit"]),  # type: ignore[call-overload]
        )
        self.queue: deque[list[bytes]] = deque()  # parsed commands not yet run
        self.soft_limit_since: float | None = None  # output past the soft limit since
        self.closing = False
        self.created_s = time.time()
        self.last_interaction_s = self.created_s
        self.protocol_error: str | None = None
        # Its commands wait for a later turn of the event loop (module doc).
        self.held = False
        # Set once the connection is a replica following this node (PSYNC):
        # narad/replication/leader.py sends it the journal.
        self.replica_link: ReplicaLink | None = None
        self.session = node.new_session(self)

    # -- asyncio.Protocol ---------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A stream transport (uvloop's does not subclass asyncio.Transport).
        self.transport = stream_transport = transport  # type: ignore[assignment]
        peer = transport.get_extra_info("peername")
        sock = transport.get_extra_info("sockname")
        self.addr = _format_addr(peer)
        self.laddr = _format_addr(sock)
        node = self.node
        node.stats.connections_received += 1
        maxclients = int(node.config["maxclients"])  # type: ignore[call-overload]
        if len(node.sessions) >= maxclients:
            node.stats.rejected_connections += 1
            stream_transport.write(b"-ERR max number of clients reached\r\n")  # type: ignore[attr-defined]
            transport.close()
            return
        if self._refused_by_protected_mode(peer):
            node.stats.rejected_connections += 1
            stream_transport.write(PROTECTED_MODE_ERROR)  # type: ignore[attr-defined]
            transport.close()
            return
        node.sessions[self.session.id] = self.session
        OPEN_FILES.share(len(node.sessions))
        stream_transport.set_write_buffer_limits(high=OUTPUT_HIGH_BYTES)  # type: ignore[attr-defined]
        keepalive = int(node.config["tcp-keepalive"])  # type: ignore[call-overload]
        if keepalive:
            _keepalive(transport.get_extra_info("socket"), keepalive)

    def _refused_by_protected_mode(self, peer: Any) -> bool:
        config = self.node.config
        # As Redis: while the default user needs no password (nopass, requirepass
        # empty), only loopback clients are served.
        if not config["protected-mode"] or not self.node.acl.users.default.nopass:
            return False
        host = peer[0] if isinstance(peer, tuple) else ""
        return bool(host) and not (host.startswith("127.") or host in ("::1", "localhost"))

    def data_received(self, data: bytes) -> None:
        self.last_interaction_s = time.time()
        stats = self.node.stats
        stats.net_input_bytes += len(data)
        stats.reads_processed += 1
        parser = self.parser
        queue = self.queue
        if not queue and self.protocol_error is None and not self.held:
            session = self.session
            parser.authenticated = session.authenticated
            batch = parser.feed_whole(data)
            if batch is not None:
                if len(batch) == 1 and session.blocked is None and not self.closing:
                    # One whole command and nothing else buffered: what run_queued
                    # would do, without its loop.
                    self._execute(batch[0])
                    if self.session.streaming is not None:
                        self._hold()
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
        if not self.held:
            self.run_queued()

    def _next_batch(self) -> bool:
        """Parse more commands into the queue; False when none are complete."""
        self.parser.authenticated = self.session.authenticated
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
        session = self.session
        transport = self.transport
        if transport is not None and transport.get_write_buffer_size() > OUTPUT_HIGH_BYTES:
            self._hold()
            return
        deadline = time.perf_counter_ns() + TURN_NS
        ran = 0
        while session.blocked is None and not self.closing:
            if not queue and (
                self.protocol_error is not None
                or not self.parser.has_input
                or not self._next_batch()
            ):
                break
            self._execute(queue.popleft())
            ran += 1
            if (
                len(session.out) > OUTPUT_HIGH_BYTES
                or session.streaming is not None
                or (ran % TURN_CHECK == 0 and time.perf_counter_ns() > deadline)
            ):
                self._hold()
                return
        if (
            self.protocol_error is not None
            and not self.queue
            and session.blocked is None
            and not self.closing
        ):
            session.reply(ErrorReply("ERR", self.protocol_error))
            session.close_after_reply()

    def _hold(self) -> None:
        """Run no more of this client's commands, and read none, until `_go_on`
        finds its output handed to the socket and the socket's buffer below
        OUTPUT_HIGH_BYTES: no sooner than the next turn of the event loop."""
        if self.closing:
            return
        if not self.held:
            self.held = True
            if self.transport is not None:
                self.transport.pause_reading()
        asyncio.get_running_loop().call_soon(self._go_on)

    def _go_on(self) -> None:
        transport = self.transport
        if self.closing or not self.held or transport is None:
            return
        session = self.session
        if (
            session.out
            or (session.sealed and session.streaming is not None)
            or transport.get_write_buffer_size() > OUTPUT_HIGH_BYTES
        ):
            # Called again when the barrier hands the replies over (`write`) or the
            # socket drains (`resume_writing`).
            return
        if session.streaming is not None:
            session.reply_more()
            if session.streaming is not None or session.out:
                return
        self.held = False
        transport.resume_reading()
        self.run_queued()

    def _execute(self, argv: list[bytes]) -> None:
        """Run one command; a CLIENT REPLY SKIP it set applies to the next one."""
        session = self.session
        try:
            self.dispatch.execute(session, argv)
        except Exception as exc:  # outside the handler (which `call` guards): a bug
            name = argv[0][:64].decode("utf-8", "replace").lower()
            session.reply_error(errors.internal(exc, name, "dispatching"))
        if session.skip_current or session.skip_next:
            session.skip_current, session.skip_next = session.skip_next, False

    def connection_lost(self, exc: Exception | None) -> None:
        self.closing = True
        self.session.ended()
        OPEN_FILES.share(len(self.node.sessions))
        if self.replica_link is not None:
            self.node.replication.leader.detach(self)

    def pause_writing(self) -> None:
        if self.replica_link is not None:
            self.replica_link.paused = True

    def resume_writing(self) -> None:
        if self.replica_link is not None:
            self.node.replication.leader.resumed(self.replica_link)
        elif self.held:
            self._go_on()

    # -- writing ------------------------------------------------------------------------

    def write(self, data: bytes | bytearray) -> None:
        """Write `data` to the socket now (the session's released replies)."""
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        if data:
            stats = self.node.stats
            stats.net_output_bytes += len(data)
            stats.writes_processed += 1
            transport.write(data)
            hard = self.node.output_limit_bytes
            if hard and transport.get_write_buffer_size() > hard:
                self.abort("output buffer limit reached")
                return
            if self.held:
                asyncio.get_running_loop().call_soon(self._go_on)
        if self.closing and not self.session.out:
            transport.close()

    def over_output_limit(self) -> None:
        """Replies beyond the output buffer limit: drop them and the connection."""
        self.session.out.clear()
        self.queue.clear()
        self.abort("output buffer limit reached")

    def abort(self, why: str) -> None:
        """Drop the connection at once, its unsent output with it."""
        logger.warning("closing client %s: %s", self.addr, why)
        self.closing = True
        if self.transport is not None:
            self.transport.abort()

    def forget_input(self) -> None:
        """Drop what the client sent and was not run yet (a cross-protocol attack)."""
        self.queue.clear()

    def close(self) -> None:
        self.closing = True
        if self.transport is not None:
            self.transport.close()


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
