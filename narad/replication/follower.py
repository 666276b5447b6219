"""The replica's side of replication: one link to the leader, kept up for as long as
this node follows it (REPLICAOF host port, or `replicaof` in the config).

The link runs on anyio, in a task of its own: connect (bounded by `repl-timeout`),
the handshake (narad/replication/wire.py), then a loop that takes the leader's
journal as it comes (or first a full copy: narad/replication/fullcopy.py), appends
the whole commits of each read to this node's journal, acknowledges the position
once the journal holds it as its fsync policy holds a commit (durable under
`always`, appended under `everysec` and `no`), and then applies them
(narad/replication/apply.py). Acks also go out once a second,
so the leader sees the link live and the fsynced position advance under `fsync
everysec`. A link that breaks, times out or is refused is retried after
RETRY_S; cancelling the task (REPLICAOF NO ONE, another REPLICAOF, shutdown) ends it
wherever it waits.

A read's commits are appended, acknowledged and applied between two awaits, on the
event loop thread, so that clients of this node see each commit whole and nothing
finds the journal ahead of the logs. A commit larger than a journal record
(FLAG_CONTINUES parts) is kept in memory until its last part came, so this node's
journal always ends at a commit boundary.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import anyio

from narad.log import LogFailed, format
from narad.log.journal import FLAG_CONTINUES, BadCommit, decode_commit
from narad.log.log import WriteError
from narad.logs import NOTICE
from narad.replication import wire
from narad.replication.apply import Diverged, apply_appended
from narad.replication.fullcopy import CopyIn
from narad.replication.wire import LinkError
from narad.resp.encoder import encode_request
from narad.resp.errors import ProtocolError, QueryBufferLimit
from narad.resp.parser import PurePythonRequestParser

if TYPE_CHECKING:
    from narad.replication.host import Host

logger = logging.getLogger("narad.replication")

RETRY_S = 1.0
ACK_INTERVAL_S = 1.0
RECEIVE_BYTES = 1 << 20
# The largest bulk a leader's message holds: whole records, at most one record's frame
# or a chunk of about 1 MiB (narad/replication/leader.py, fullcopy.py; a commit in
# several records is sent from the file a chunk at a time: narad/log/journal.py's
# `tail`). A leader that announces a larger one is refused before any of it is read,
# so this, and one read, bound what a replica holds of a message.
BULK_BYTES_MAX = format.LENGTH_BYTES + format.RECORD_BYTES_MAX
# A handshake reply is one line (+OK, +CONTINUE ..., -ERR ...).
REPLY_LINE_MAX = 64 * 1024
LINK_LOST = (OSError, anyio.BrokenResourceError, anyio.EndOfStream, TimeoutError)


def _first(exc: BaseException) -> BaseException:
    """The error that ended a session (a task group raises its tasks' as a group)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


class Refused(Exception):
    """The leader sent what this node cannot read (a journal record that is not a
    commit of this node's journal version, a message over BULK_BYTES_MAX, bytes that
    are no message): it is neither appended nor acknowledged, and this node stops
    following that leader until REPLICAOF says again."""


def _epoch(word: str | bytes | int) -> int:
    """A leader epoch the leader sent: one a journal record can hold, or LinkError."""
    epoch = int(word)
    if not 0 <= epoch <= format.EPOCH_MAX:
        raise LinkError(f"the leader sent epoch {epoch}, outside 0..{format.EPOCH_MAX}")
    return epoch


class Follower:
    def __init__(
        self, node: Host, host: str, port: int, promised: Callable[[], int] = lambda: 0
    ) -> None:
        self.node = node
        # The highest epoch this node promised a failover (narad/replication/role.py).
        self.promised = promised
        self.host = host
        self.port = port
        # Redis's words for the link (ROLE): connect, connecting, sync, connected.
        self.state = "connect"
        self.last_io_s = time.monotonic()
        self.leader_position = 0  # as the leader's last message said
        self.leader_epoch = 0
        self.down_since_s = time.monotonic()
        self.last_error = ""
        # Why this node stopped following the leader (Refused), or "" while it follows.
        self.refused = ""
        self._parts: list[tuple[memoryview, list[format.Record]]] = []
        self.copy: CopyIn | None = None  # the full copy being received
        self._task: asyncio.Task[None] | None = None

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None
        self.state = "connect"

    async def _run(self) -> None:
        try:
            await self._keep_following()
        finally:  # cancelled too: a copy under way is let go
            if self.copy is not None:
                self.copy.abandon()
                self.copy = None

    async def _keep_following(self) -> None:
        while True:
            try:
                await self._session()
            except Exception as raised:  # one session's end: the link is tried again
                exc = _first(raised)
                if isinstance(exc, WriteError):  # the write error state: not now, later
                    self._broken(f"this node's journal cannot take the commits: {exc}")
                elif isinstance(exc, (LogFailed, Diverged)):
                    # The journal may hold commits the logs did not take: stop, and let
                    # the next start's recovery (which applies the journal) say more.
                    self.node.commit_failed(f"following the leader: {exc}", 0)
                    return
                elif isinstance(exc, Refused):
                    self.refused = str(exc)
                    self._broken(self.refused, logging.ERROR)
                    logger.error(
                        "event=leader_refused leader=%s reason=%r: not following it until "
                        "REPLICAOF; the journal holds nothing of what it sent",
                        self.address, self.refused,
                    )
                    self.state = "connect"
                    self._parts = []
                    return
                elif isinstance(exc, LinkError):
                    self._broken(str(exc), logging.ERROR)
                elif isinstance(exc, LINK_LOST):
                    self._broken(f"link lost: {type(exc).__name__}: {exc}")
                else:
                    logger.error("event=replication_link_failed", exc_info=exc)
                    self._broken(f"{type(exc).__name__}: {exc}", logging.ERROR)
            self.state = "connect"
            self._parts = []
            if self.copy is not None:
                self.copy.abandon()
                self.copy = None
            await anyio.sleep(RETRY_S)

    def _broken(self, why: str, level: int = logging.WARNING) -> None:
        if self.state == "connected":
            self.down_since_s = time.monotonic()
        if why != self.last_error or level >= logging.ERROR:
            logger.log(level, "event=replication_link_down leader=%s reason=%r", self.address, why)
        self.last_error = why

    # -- one session ----------------------------------------------------------------

    async def _session(self) -> None:
        config = self.node.config
        timeout = int(config["repl-timeout"])  # type: ignore[call-overload]
        self.state = "connecting"
        tls = self.node.tls.client if config["tls-replication"] and self.node.tls else None
        stream: anyio.abc.ByteStream
        with anyio.fail_after(timeout):  # the TLS handshake included
            if tls is None:
                stream = await anyio.connect_tcp(self.host, self.port)
            else:  # Redis closes without close_notify: an EOF is an end
                stream = await anyio.connect_tcp(
                    self.host, self.port, ssl_context=tls, tls_standard_compatible=False
                )
        async with stream:
            link = _Link(stream, timeout, tls is not None)
            with anyio.fail_after(timeout):
                await self._handshake(link)
            self.state = "sync" if self.copy is not None else "connected"
            self.last_error = ""
            logger.log(
                NOTICE,
                "event=replication_link_up leader=%s position=%d",
                self.address, self.node.keyspace.journal.position,
            )
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(self._ack_every_second, link)
                if link.tls:
                    tasks.start_soon(link.write_out)
                await self._follow(link)
                tasks.cancel_scope.cancel()

    async def _handshake(self, link: _Link) -> None:
        config = self.node.config
        password, user = str(config["masterauth"]), str(config["masteruser"])
        if password:
            await link.call("AUTH", *([user] if user else []), password)
        # Redis's choice: the announced port, else the TLS port when the links are
        # TLS ones, else the plain port.
        port = (
            int(config["replica-announce-port"])  # type: ignore[call-overload]
            or (config["tls-replication"] and self.node.tls_port)
            or self.node.tcp_port
        )
        await link.call("REPLCONF", "listening-port", port)
        announce = str(config["replica-announce-ip"])
        if announce:
            await link.call("REPLCONF", "ip-address", announce)
        await link.call("REPLCONF", "capa", "narad")
        self.state = "sync"
        keyspace = self.node.keyspace
        while True:
            journal = keyspace.journal
            epochs = journal.log.epochs
            last_epoch = epochs[-1][0] if epochs else 0
            # The epoch promised to a failover, if any, refuses (and fences) a leader
            # below it.
            promised = self.promised()
            reply = await link.call(
                "PSYNC", journal.history, journal.position, last_epoch, promised
            )
            words = reply.split()
            if words[:1] == ["CONTINUE"] and len(words) == 4:
                history, position, epoch = words[1], int(words[2]), _epoch(words[3])
                if history != journal.history:
                    journal.adopt_history(history)
                self.leader_position, self.leader_epoch = position, epoch
                return
            if words[:1] == ["FULLCOPY"] and len(words) == 5:
                history = words[1]
                position, epoch, size = int(words[2]), _epoch(words[3]), int(words[4])
                logger.log(
                    NOTICE,
                    "event=full_copy_begin leader=%s position=%d bytes=%d own_position=%d",
                    self.address, position, size, journal.position,
                )
                self.copy = CopyIn(keyspace, history, position, size)
                self.leader_position, self.leader_epoch = position, epoch
                return
            if words[:1] == ["TRUNCATE"] and len(words) == 3:
                # The leader's epoch `found` (the largest it has at or below this
                # node's last) ends at `end` there: what this node holds of later
                # epochs, or past that end, is not the leader's history.
                found, end = int(words[1]), int(words[2])
                position = min(end, journal.epoch_end(found)[1])
                if position >= journal.position:
                    raise LinkError(f"the leader's answer {reply!r} cuts nothing")
                logger.warning(
                    "event=truncating leader=%s from=%d to=%d (commits the leader's history "
                    "lacks)", self.address, journal.position, position,
                )
                self.node.reopen_keyspace(truncate_to=position)
                continue
            raise LinkError(f"the leader refused to sync: {reply}")

    async def _follow(self, link: _Link) -> None:
        while True:
            messages = await link.receive()
            self.last_io_s = time.monotonic()
            whole: list[tuple[memoryview, list[format.Record]]] = []  # whole commits
            for message in messages:
                if not (isinstance(message, list) and message):
                    raise LinkError(f"unexpected message from the leader: {message!r:.100}")
                kind = message[0]
                copy = self.copy
                if kind == b"journal" and len(message) == 3 and copy is None:
                    self._take(int(message[1]), message[2], whole)
                elif kind == b"copy-records" and len(message) == 4 and copy is not None:
                    copy.records(int(message[1]), int(message[2]), message[3])
                elif kind == b"copy-log" and len(message) == 4 and copy is not None:
                    await copy.begin_log(int(message[1]), int(message[2]), int(message[3]))
                elif kind == b"copy-end" and len(message) % 2 == 0 and copy is not None:
                    position, *pairs = [int(word) for word in message[1:]]
                    epochs = [(_epoch(e), p) for e, p in zip(pairs[::2], pairs[1::2], strict=True)]
                    await copy.finish(position, epochs)
                    self.node.reopen_keyspace()  # on the copy, now complete
                    self.copy = None
                    self.state = "connected"
                    link.send_now(self._ack())
                elif kind == b"ping" and len(message) == 3:
                    self.leader_position = int(message[1])
                    self.leader_epoch = max(self.leader_epoch, _epoch(message[2]))
                else:
                    raise LinkError(f"unexpected message from the leader: {message!r:.100}")
            if whole:
                self._commit(link, whole)

    def _take(
        self, first: int, frames: bytes, whole: list[tuple[memoryview, list[format.Record]]]
    ) -> None:
        """Take one `journal` message: its records go to `whole` once their commit is
        whole (a commit in several records waits in `_parts` for its last one)."""
        taken = self._parts or whole  # records taken, not yet in the journal
        journal = self.node.keyspace.journal
        expected = taken[-1][1][-1].offset + 1 if taken else journal.position
        if first != expected:
            raise LinkError(f"the leader sent position {first}, this node expected {expected}")
        records, used, status, detail = format.scan(frames, 0, 0, 1 << 30)
        if status != format.SCAN_OK or used != len(frames) or not records:
            raise LinkError(f"bad journal frames from the leader at position {first}: {detail}")
        if records[0].offset != first:
            raise LinkError(f"frames for position {records[0].offset} sent as {first}")
        for rec in records:  # each one read before any is appended or acknowledged
            try:
                decode_commit(rec.payload)
            except BadCommit as exc:
                raise Refused(
                    f"the leader's journal record at position {rec.offset} is not a commit "
                    f"this node reads: {exc}"
                ) from None
        self._parts.append((memoryview(frames), records))
        if not records[-1].flags & FLAG_CONTINUES:
            whole += self._parts
            self._parts = []

    def _commit(self, link: _Link, whole: list[tuple[memoryview, list[format.Record]]]) -> None:
        """Append the leader's whole commits `whole` to this node's journal (one write,
        and one fsync under `always`), acknowledge them, then apply them. The ack
        leaves before the apply, since the journal holds them as the fsync policy
        holds a commit (the logs and the state are rebuilt from the journal after a
        crash), and nothing else runs in between: a checkpoint, a read or a promotion
        must never find the journal ahead of the logs."""
        keyspace = self.node.keyspace
        keyspace.journal.append_followed(whole)  # WriteError: not taken, asked again
        link.send_now(self._ack())
        try:
            apply_appended(keyspace, whole)
        except WriteError as exc:  # the journal holds what the logs did not all take
            raise LogFailed(str(exc)) from exc
        self.leader_position = max(self.leader_position, keyspace.journal.position)
        self.node.barrier.schedule()  # wake readers, checkpoint when due

    def _ack(self) -> bytes:
        if self.copy is not None:
            return wire.ack(0, 0)  # alive, holding nothing of the leader's history yet
        journal = self.node.keyspace.journal
        position = journal.position
        return wire.ack(position, min(position, journal.log.durable_end))

    async def _ack_every_second(self, link: _Link) -> None:
        while True:
            await anyio.sleep(ACK_INTERVAL_S)
            link.send_now(self._ack())


class _Link:
    """A connection to the leader: requests and their one-line replies, then its
    pushed messages, each an array of bulk strings no larger than BULK_BYTES_MAX.

    The messages are read by the reference request parser (narad/resp/parser.py),
    with its bounds: it refuses a bulk announced over the limit before reading it,
    and copies a large bulk once (the leader's messages are mostly chunks of
    records)."""

    def __init__(self, stream: anyio.abc.ByteStream, timeout_s: int, tls: bool = False) -> None:
        self.stream = stream
        self.timeout_s = timeout_s
        # Over TLS the socket cannot be written directly: `send_now` leaves its bytes
        # to `write_out`, a task of the session, which sends them in order.
        self.tls = tls
        self._lines = bytearray()  # received during the handshake, not yet a reply
        self.parser = PurePythonRequestParser(
            max_bulk_len=BULK_BYTES_MAX, max_query_buffer=BULK_BYTES_MAX + 2 * RECEIVE_BYTES
        )
        self._fd = stream.extra(anyio.abc.SocketAttribute.raw_socket).fileno()
        self._unsent = bytearray()
        self._waiting = anyio.Event()  # set while `_unsent` holds bytes for write_out

    async def send(self, data: bytes) -> None:
        """Send a request of the handshake."""
        await self.stream.send(data)

    def send_now(self, data: bytes) -> None:
        """Write `data` to the socket at once, without waiting (acks, from the
        handshake's end on: see Follower._commit). What the socket does not take now
        is written first at the next call, at least once a second. Never raises: a
        broken link is for `receive` to find, and an ack that cannot leave must not
        stop the apply that follows it."""
        self._unsent += data
        if self.tls:
            self._waiting.set()
            return
        try:
            sent = os.write(self._fd, self._unsent)
        except BlockingIOError:
            return
        except OSError:
            self._unsent.clear()
            return
        del self._unsent[:sent]

    async def write_out(self) -> None:
        """Over TLS: send what `send_now` left, in order, until the link breaks (then
        `receive` finds it broken)."""
        while True:
            await self._waiting.wait()
            self._waiting = anyio.Event()
            data, self._unsent = bytes(self._unsent), bytearray()
            try:
                await self.stream.send(data)
            except (*LINK_LOST, anyio.ClosedResourceError):
                return

    async def call(self, *args: Any) -> str:
        """Send one request; its reply (a simple string) as text, or LinkError for an
        error reply or anything else."""
        await self.send(encode_request([str(arg).encode() for arg in args]))
        while (end := self._lines.find(b"\r\n")) < 0:
            if len(self._lines) > REPLY_LINE_MAX:
                raise LinkError(f"the reply to {args[0]} is over {REPLY_LINE_MAX} bytes")
            self._lines += await self.stream.receive(RECEIVE_BYTES)
        line = bytes(self._lines[:end])
        del self._lines[: end + 2]
        reply = line[1:].decode("utf-8", "replace")
        if line[:1] == b"-":
            raise LinkError(f"{args[0]} refused: {reply}")
        if line[:1] == b"+":
            return reply
        raise LinkError(f"unexpected reply to {args[0]}: {line!r:.100}")

    async def receive(self) -> list[Any]:
        """The messages that whole reads brought (at least one); LinkError after
        `repl-timeout` seconds with nothing, Refused for bytes that are no message
        or a bulk over BULK_BYTES_MAX."""
        if self._lines:  # pushed right after the handshake's last reply
            self._feed(bytes(self._lines))
            self._lines.clear()
        while True:
            try:
                messages = self.parser.commands()
            except ProtocolError as exc:
                raise Refused(_unreadable(exc.message)) from None
            if messages:
                return messages
            with anyio.fail_after(self.timeout_s):
                data = await self.stream.receive(RECEIVE_BYTES)
            self._feed(data)

    def _feed(self, data: bytes) -> None:
        try:
            self.parser.feed(data)
        except QueryBufferLimit as exc:
            raise Refused(_unreadable(str(exc))) from None


def _unreadable(why: str) -> str:
    """Why the leader's bytes are refused."""
    return (
        f"the leader's message cannot be read (a bulk holds at most {BULK_BYTES_MAX} "
        f"bytes: one journal record): {why}"
    )
