"""Replication commands: REPLICAOF (SLAVEOF), ROLE, REPLCONF, PSYNC, WAIT, WAITAOF.

The protocol between a replica and its leader is docs/replication.md's
(narad/replication/wire.py); the role moves are narad/replication/role.py's.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from narad.commands.args import parse_int, parse_timeout_ms
from narad.commands.table import command
from narad.errors import CommandError, syntax
from narad.keywatch import Block
from narad.log.format import EPOCH_MAX
from narad.logs import NOTICE
from narad.replication.fullcopy import CopyOut
from narad.replication.role import ACKS_KEY
from narad.resp import SimpleString

if TYPE_CHECKING:
    from narad.node import Session

OK = SimpleString("OK")
logger = logging.getLogger("narad.replication")


# -- REPLICAOF ------------------------------------------------------------------------


def _replicaof(session: Session, args: list[bytes]) -> Any:
    replication = session.node.replication
    host, port_arg = args[1].decode("utf-8", "replace"), args[2]
    if host.lower() == "no" and port_arg.lower() == b"one":
        replication.no_one()
        return OK
    if session.connection.replica_link is not None:
        raise CommandError("Command is not valid when client is a replica.")
    port = parse_int(port_arg, "Invalid master port")
    if not 0 <= port <= 65535:
        raise CommandError("Invalid master port")
    return SimpleString(replication.replicaof(host, port, session.connection))


@command("replicaof", 3, "admin noscript stale no_async_loading", group="server", since="5.0.0")
def replicaof(session: Session, args: list[bytes]) -> Any:
    """Configures a server as replica of another, or promotes it to a master."""
    return _replicaof(session, args)


@command("slaveof", 3, "admin noscript stale no_async_loading", group="server")
def slaveof(session: Session, args: list[bytes]) -> Any:
    """Sets a Redis server as a replica of another, or promotes it to being a master."""
    return _replicaof(session, args)


@command(
    "role", 1, "noscript loading stale fast", group="server", since="2.8.12",
    categories="@admin @dangerous",
)
def role(session: Session, args: list[bytes]) -> Any:
    """Returns the replication role."""
    node = session.node
    follower = node.replication.follower
    position = node.keyspace.journal.position
    if follower is not None:
        return [b"slave", follower.host.encode(), follower.port, follower.state.encode(), position]
    links = node.replication.leader.links.values()
    replicas = [[link.ip.encode(), b"%d" % link.port, b"%d" % link.acked] for link in links]
    return [b"master", position, replicas]


# -- the link (sent by replicas) --------------------------------------------------------


@command("replconf", -1, "admin noscript loading stale allow_busy", group="server", since="3.0.0")
def replconf(session: Session, args: list[bytes]) -> Any:
    """An internal command for configuring the replication stream."""
    from narad.node import NO_REPLY

    if len(args) % 2 == 0:
        raise syntax()
    options = [(args[i].lower(), args[i + 1]) for i in range(1, len(args), 2)]
    if options and options[0][0] == b"ack":
        link = session.connection.replica_link
        if link is not None:
            position = parse_int(options[0][1])
            fsynced = position
            for name, value in options[1:]:
                if name == b"fack":
                    fsynced = parse_int(value)
            session.node.replication.leader.acked(link, position, fsynced)
        return NO_REPLY  # an ack is never answered, as in Redis
    for name, value in options:
        if name == b"listening-port":
            port = parse_int(value)
            if not 0 <= port <= 65535:
                raise CommandError("Invalid listening port")
            session.replconf["listening-port"] = str(port)
        elif name == b"ip-address":
            session.replconf["ip-address"] = value.decode("utf-8", "replace")
        elif name == b"capa":
            session.replconf["capa"] = value.decode("utf-8", "replace")
        elif name == b"getack":
            pass  # acks go out once a second anyway
        else:
            raise CommandError(
                f"Unrecognized REPLCONF option: {name.decode('utf-8', 'replace')}"
            )
    return OK


def parse_epoch(arg: bytes) -> int:
    """A leader epoch as FENCE, PROMOTE and PSYNC take it: 0 to EPOCH_MAX, what a
    journal record holds (docs/replication.md). Checked before anything is promised,
    followed or written, so no node keeps an epoch it could not write."""
    epoch = parse_int(arg)
    if not 0 <= epoch <= EPOCH_MAX:
        raise CommandError(
            f"the epoch must be from 0 to {EPOCH_MAX} (a journal record holds it in 32 bits)"
        )
    return epoch


@command("psync", -3, "admin noscript no_async_loading no_multi", group="server", since="2.8.0")
def psync(session: Session, args: list[bytes]) -> Any:
    """Internal command used in replication: follow this node's journal from a position
    (PSYNC history position epoch; docs/replication.md)."""
    from narad.node import NO_REPLY

    node = session.node
    replication = node.replication
    if replication.is_replica:
        raise CommandError(
            "this node is a replica: replicas follow the leader itself (chained "
            "replication is not supported)"
        )
    if session.connection.replica_link is not None:
        raise CommandError("this connection follows the journal already")
    history = args[1].decode("utf-8", "replace")
    position = parse_int(args[2])
    epoch = parse_epoch(args[3]) if len(args) > 3 else 0
    promised = parse_epoch(args[4]) if len(args) > 4 else 0  # to a failover (FENCE)
    journal = node.keyspace.journal
    if position < 0:
        raise CommandError("the position and the epoch must be at least 0")
    if promised > journal.epoch:
        replication.fence(promised)
        raise CommandError(
            f"the replica promised a failover epoch {promised}, above this node's "
            f"{journal.epoch}"
        )
    ip = session.replconf.get("ip-address") or session.addr.rpartition(":")[0].strip("[]")
    port = int(session.replconf.get("listening-port", "0"))
    # A replica with nothing yet is of this history, as it adopts it.
    same_history = history == journal.history or position == epoch == 0
    if same_history and epoch > journal.epoch:
        replication.fence(epoch)
        raise CommandError(
            f"the replica has seen leader epoch {epoch}, above this node's {journal.epoch}"
        )
    if same_history:
        found, end = journal.epoch_end(epoch)
        if position > 0 and (found != epoch or position > end):
            return SimpleString(f"TRUNCATE {found} {end}")
    if same_history and position >= journal.log.start_offset:
        reply = f"+CONTINUE {journal.history} {journal.position} {journal.epoch}\r\n"
        copy = None
    else:  # behind what the journal keeps, or another history: a full copy first
        if journal.pending:
            node.barrier.commit_now()  # the copy is taken between two commits
        copy = CopyOut.of(journal)
        reply = (
            f"+FULLCOPY {journal.history} {copy.position} {journal.epoch} "
            f"{copy.bytes_total}\r\n"
        )
        logger.log(
            NOTICE,
            "event=full_copy_begin replica=%s:%d its_position=%d position=%d logs=%d bytes=%d",
            ip, port, position, copy.position, len(copy.logs), copy.bytes_total,
        )
    if session.out:  # replies to the handshake come before the journal
        session.write(session.take_out())
    session.write(reply.encode())
    start = copy.position if copy is not None else position
    replication.leader.attach(session.connection, start, ip, port, copy)
    return NO_REPLY


# -- a sentinel's failover ---------------------------------------------------------------


@command("fence", -2, "admin noscript loading stale", group="server")
def fence(session: Session, args: list[bytes]) -> Any:
    """Promises a failover's epoch: no commit of an older leader is taken from now on
    (a leader steps down; with DRAIN it refuses writes while its replicas catch up);
    answers the epoch and position of the node's journal (docs/failover.md)."""
    if len(args) > 3 or (len(args) == 3 and args[2].lower() != b"drain"):
        raise syntax()
    epoch = parse_epoch(args[1])
    if epoch < 1:
        raise CommandError("the epoch must be at least 1")
    return session.node.replication.promise(epoch, len(args) == 3, session.connection)


@command("promote", 2, "admin noscript stale", group="server")
def promote(session: Session, args: list[bytes]) -> Any:
    """Makes a node fenced for a failover's epoch the leader of that epoch."""
    session.node.replication.promote(parse_epoch(args[1]))
    return OK


# -- WAIT, WAITAOF ------------------------------------------------------------------------


def _target(session: Session) -> int:
    """The position that holds every write this client sent so far: the journal's,
    or the commit that ends this iteration when writes wait for it."""
    journal = session.node.keyspace.journal
    return journal.position + (1 if journal.pending else 0)


def _refuse_on_replica(session: Session, name: str, why: str) -> None:
    if session.node.replication.is_replica:
        raise CommandError(f"{name} cannot be used with replica instances. Please also note {why}")


def _wait_until(
    session: Session, timeout_ms: int, counts: Callable[[], Any], enough: Callable[[Any], bool]
) -> Any:
    """`counts()` now when `enough` (or in a transaction, which cannot block), else a
    block retried as replicas ack, answering `counts()` at the timeout."""
    now = counts()
    if enough(now) or session.in_exec:
        return now

    def retry(key: bytes) -> Any:
        found = counts()
        return found if enough(found) else None

    return Block([ACKS_KEY], timeout_ms, retry, counts)


@command("wait", 3, "noscript", group="generic", since="3.0.0", categories="@connection")
def wait(session: Session, args: list[bytes]) -> Any:
    """Blocks until the asynchronous replication of all preceding write commands sent by
    the connection is completed."""
    wanted = parse_int(args[1])
    timeout = parse_timeout_ms(args[2])
    _refuse_on_replica(
        session, "WAIT",
        "that since Redis 4.0 if a replica is configured to be writable (which is not the "
        "default) writes to replicas are just local and are not propagated.",
    )
    leader = session.node.replication.leader
    target = _target(session)
    return _wait_until(
        session, timeout, lambda: leader.count_acked(target), lambda count: count >= wanted
    )


@command("waitaof", 4, "noscript", group="generic", since="7.2.0", categories="@connection")
def waitaof(session: Session, args: list[bytes]) -> Any:
    """Blocks until all of the preceding write commands sent by the connection are
    written to the append-only file of the master and/or replicas."""
    local = parse_int(args[1])
    wanted = parse_int(args[2])
    timeout = parse_timeout_ms(args[3])
    _refuse_on_replica(
        session, "WAITAOF", "that writes to replicas are just local and are not propagated."
    )
    leader = session.node.replication.leader
    journal = session.node.keyspace.journal
    target = _target(session)

    def counts() -> list[int]:
        return [int(journal.log.durable_end >= target), leader.count_acked(target, fsynced=True)]

    return _wait_until(
        session, timeout, counts, lambda found: found[0] >= local and found[1] >= wanted
    )
