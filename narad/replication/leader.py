"""The leader's side of replication: the replicas that follow this node's journal.

A replica's link is the client connection that sent PSYNC (narad/replication/wire.py
has the protocol). From its position on, the leader pushes every commit to it as the
commit is written (`Journal.written`, before its fsync), pipelined, with no round
trip per commit: the frames of the last commit come from memory (`Journal.tail`),
anything older from the journal's files, a chunk at a time, while the socket's
buffer has room (the transport pauses and resumes the link). The journal on disk is
the backlog.

A replica that cannot follow from its own position gets a full copy of the logs
first (narad/replication/fullcopy.py), sent the same way, and then the journal from
the position the copy stands for. While replicas read, checkpoints keep the journal
from the oldest position still to send (and, during a copy, every log segment); a
replica that sends no ack for `repl-timeout` seconds is dropped, so that no replica
holds the journal for long.

Each replica acknowledges the position it holds, as its fsync policy holds a commit
(REPLCONF ACK; FACK is its fsynced position). A commit is *committed* once this node
and `min-replicas-to-ack` replicas hold it: the quorum position is the N-th highest
acknowledged position, and the commit barrier releases the replies sealed at or
below it (narad/barrier.py). Replies still sealed after `min-replicas-timeout` answer
NOREPL instead: not acknowledged, they may or may not survive.

Owned by the event loop thread.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from narad.config.kinds import OutputBufferLimits
from narad.logs import NOTICE
from narad.replication import wire
from narad.replication.fullcopy import CopyOut
from narad.replication.wire import LinkError

if TYPE_CHECKING:
    from narad.replication.host import Host

logger = logging.getLogger("narad.replication")

# A replica behind the last commit is sent the journal a chunk of about this size at
# a time, and no more while its socket holds WRITE_BUFFER_HIGH bytes unsent.
CHUNK_BYTES = 1 << 20
WRITE_BUFFER_HIGH = 8 << 20

NOREPL = (
    b"-NOREPL Not acknowledged: the write did not reach min-replicas-to-ack replicas within"
    b" min-replicas-timeout, so it may or may not survive a failover\r\n"
)


class Peer(Protocol):
    """A connection that is, or is becoming, a replica of this node."""

    transport: asyncio.Transport | None
    replica_link: ReplicaLink | None

    def write(self, data: bytes | bytearray) -> None:
        """Write to the socket now."""

    def close(self) -> None: ...


@dataclass(eq=False)
class ReplicaLink:
    peer: Peer
    ip: str  # as the replica announced it, or its peer address
    port: int  # its listening port, as announced
    sent: int  # the position up to which the journal was sent
    acked: int  # the position it holds, under its fsync policy (REPLCONF ACK)
    fsynced: int  # the position it has fsynced (REPLCONF ACK ... FACK)
    last_ack_s: float = field(default_factory=time.monotonic)
    paused: bool = False  # its socket's buffer is full: sending waits for resume
    # The full copy being sent, before the journal from `sent` (the copy's position):
    # until it is sent whole, the replica holds nothing of this history and its acks
    # count for nothing.
    copy: CopyOut | None = None
    # Since when its pending output has been at or past the soft limit, if it is.
    soft_limit_since: float | None = None

    @property
    def name(self) -> str:
        return f"{self.ip}:{self.port}"


class Leader:
    def __init__(
        self,
        node: Host,
        links_changed: Callable[[], None] = lambda: None,
        acks_changed: Callable[[], None] = lambda: None,
    ) -> None:
        self.node = node
        # What the replication role does when a replica comes or goes (what writes
        # meet changes) and when a replica acks (WAIT may be answered).
        self.links_changed = links_changed
        self.acks_changed = acks_changed
        self.links: dict[Peer, ReplicaLink] = {}

    @property
    def quorum(self) -> int:
        value: int = self.node.config["min-replicas-to-ack"]  # type: ignore[assignment]
        return value

    # -- links --------------------------------------------------------------------------

    def attach(
        self, peer: Peer, position: int, ip: str, port: int, copy: CopyOut | None = None
    ) -> ReplicaLink:
        """`client` follows this journal from `position`, which it holds already, or
        which `copy` brings it."""
        held = 0 if copy is not None else position
        link = ReplicaLink(peer, ip, port, sent=position, acked=held, fsynced=held, copy=copy)
        self.links[peer] = link
        peer.replica_link = link
        if peer.transport is not None:
            peer.transport.set_write_buffer_limits(high=WRITE_BUFFER_HIGH)
        logger.log(NOTICE, "event=replica_attached replica=%s position=%d", link.name, position)
        self.links_changed()
        self.pump(link)
        return link

    def detach(self, peer: Peer) -> None:
        link = self.links.pop(peer, None)
        if link is None:
            return
        peer.replica_link = None
        logger.log(NOTICE, "event=replica_detached replica=%s acked=%d", link.name, link.acked)
        self.links_changed()

    def drop_all(self) -> None:
        """Close every replica's link (this node stops leading)."""
        for peer in list(self.links):
            self.detach(peer)
            peer.close()

    # -- sending --------------------------------------------------------------------------

    def pump(self, link: ReplicaLink) -> None:
        """Send `link` the journal from its position up to the last commit, while its
        socket takes it."""
        journal = self.node.keyspace.journal
        transport = link.peer.transport
        if transport is None or transport.is_closing():
            return
        if link.copy is not None:
            try:
                if not link.copy.send(transport, lambda: link.paused):
                    return
            except LinkError as exc:
                logger.error("event=full_copy_failed replica=%s reason=%s", link.name, exc)
                link.peer.close()
                return
            link.copy = None
        while not link.paused and link.sent < journal.position:
            if transport.is_closing():
                return
            first, frames = journal.tail
            if link.sent == first and first + journal.tail_records == journal.position:
                count = journal.tail_records
            else:  # checkpoints keep the journal from here (`kept`)
                count, frames = journal.log.read_frames(link.sent, CHUNK_BYTES)  # type: ignore[assignment]
                if not count:
                    return
            transport.writelines(wire.journal_frames(link.sent, frames))
            link.sent += count

    def pump_all(self) -> None:
        for link in self.links.values():
            self.pump(link)

    def resumed(self, link: ReplicaLink) -> None:
        link.paused = False
        self.pump(link)

    def kept(self) -> tuple[int | None, bool]:
        """What the replicas still read (Checkpointer's `kept`): the journal from the
        oldest position still to send, and whether a full copy reads the logs."""
        if not self.links:
            return None, False
        links = self.links.values()
        return min(link.sent for link in links), any(link.copy is not None for link in links)

    def drop_silent(self) -> None:
        """Close the links of replicas that sent no ack for `repl-timeout` seconds."""
        timeout = int(self.node.config["repl-timeout"])  # type: ignore[call-overload]
        now = time.monotonic()
        for link in [link for link in self.links.values() if now - link.last_ack_s > timeout]:
            logger.warning(
                "event=replica_timed_out replica=%s seconds_silent=%d acked=%d",
                link.name, now - link.last_ack_s, link.acked,
            )
            transport = link.peer.transport
            if transport is not None:
                transport.abort()  # close() would wait for the unread output first

    def enforce_output_limit(self) -> None:
        """`client-output-buffer-limit replica <hard> <soft> <seconds>`, as Redis
        applies it: a replica whose pending output (the journal from the position not
        yet sent to it, and what its socket has not taken) passes the hard limit, or
        stays past the soft one for longer than the seconds, is disconnected. So a
        replica that acks but does not read pins the journal (`kept`) no longer than
        that; once it reconnects it resumes, or gets a full copy."""
        limits = self.node.config["client-output-buffer-limit"]
        assert isinstance(limits, OutputBufferLimits)
        limit = limits.replica
        hard = limit.hard_bytes
        if not (hard or limit.soft_bytes):
            return
        journal = self.node.keyspace.journal.log
        now = time.monotonic()
        for link in list(self.links.values()):
            transport = link.peer.transport
            if link.copy is not None or transport is None:
                continue
            pending = journal.bytes_from(link.sent) + transport.get_write_buffer_size()
            link.soft_limit_since, soft_over = limit.soft_since(
                pending, link.soft_limit_since, now
            )
            over = "hard" if hard and pending >= hard else "soft" if soft_over else ""
            if over:
                logger.warning(
                    "event=replica_output_limit replica=%s limit=%s pending_bytes=%d "
                    "sent=%d acked=%d: disconnected",
                    link.name, over, pending, link.sent, link.acked,
                )
                transport.abort()  # close() would wait for the unread output first

    def ping(self) -> None:
        """Tell every replica the position and epoch (what a replica reports as the
        leader's offset, and how it knows the link lives while nothing commits)."""
        journal = self.node.keyspace.journal
        message = wire.ping(journal.position, journal.epoch)
        for link in self.links.values():
            transport = link.peer.transport
            if transport is not None and not transport.is_closing() and not link.paused:
                transport.write(message)

    # -- acknowledgements -----------------------------------------------------------------

    def acked(self, link: ReplicaLink, position: int, fsynced: int) -> None:
        """REPLCONF ACK `position` FACK `fsynced` from `link`'s replica. A replica
        holds only what it was sent: an ack past that is a protocol error, never a
        vote (a client that sent PSYNC could otherwise claim any position and meet
        the quorum for writes only this node holds), and the link is dropped."""
        if link.copy is not None:
            link.last_ack_s = time.monotonic()
            return  # the replica holds nothing of this history yet
        if max(position, fsynced) > link.sent:
            logger.warning(
                "event=replica_protocol_error replica=%s acked=%d fsynced=%d sent=%d"
                " reason=ack_past_sent: disconnected",
                link.name, position, fsynced, link.sent,
            )
            transport = link.peer.transport
            if transport is not None:
                transport.abort()
            return
        link.last_ack_s = time.monotonic()
        link.acked = max(link.acked, position)
        link.fsynced = max(link.fsynced, min(fsynced, link.acked))
        self.node.barrier.release(self.quorum_position())
        self.acks_changed()

    def quorum_position(self) -> int:
        """The position held here and by `min-replicas-to-ack` replicas: committed."""
        journal = self.node.keyspace.journal
        need = self.quorum if self.node.keyspace.leads else 0  # a replica waits on none
        if need == 0:
            return journal.position
        acked = sorted((link.acked for link in self.links.values()), reverse=True)
        return min(acked[need - 1], journal.position) if len(acked) >= need else 0

    def released_at_commit(self, position: int) -> bool:
        return self.quorum_position() >= position

    def count_acked(self, position: int, fsynced: bool = False) -> int:
        """Replicas that hold `position` (with `fsynced`: that have fsynced it)."""
        if fsynced:
            return sum(1 for link in self.links.values() if link.fsynced >= position)
        return sum(1 for link in self.links.values() if link.acked >= position)

    def good_replicas(self) -> int:
        """Replicas that count for min-replicas-to-ack: their last ack at most
        `min-replicas-max-lag` seconds old (0: any connected replica)."""
        lag = int(self.node.config["min-replicas-max-lag"])  # type: ignore[call-overload]
        now = time.monotonic()
        return sum(
            1 for link in self.links.values()
            if link.copy is None and (not lag or now - link.last_ack_s <= lag)
        )

    def expire_sealed(self) -> None:
        """Replies sealed longer than `min-replicas-timeout` answer NOREPL."""
        timeout_ms = int(self.node.config["min-replicas-timeout"])  # type: ignore[call-overload]
        refused = self.node.barrier.refuse_sealed(time.monotonic() - timeout_ms / 1000, NOREPL)
        if refused:
            logger.warning(
                "event=norepl replies=%d quorum=%d acked_position=%d position=%d",
                refused, self.quorum, self.quorum_position(), self.node.keyspace.journal.position,
            )
