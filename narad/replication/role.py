"""The node's role: leader, or replica of a leader, and the moves between them.

- A leader serves writes; its replicas follow its journal (narad/replication/
  leader.py). With `min-replicas-to-ack N`, writes are refused up front with
  NOREPLICAS while fewer than N replicas are connected and acknowledging, and a
  reply waits for N replicas to hold its commit (committed: docs/design.md).
- A replica follows one leader (narad/replication/follower.py), serves reads and
  refuses every write with READONLY; it runs none of the server's own writes
  (Keyspace.leads is False): those are the leader's, and come with its commits.
- REPLICAOF host port on a leader steps it down: its replicas' links close, replies
  still waiting for their quorum are never sent (their connections close: not
  acknowledged), and every other client connection closes, so that clients find the
  new leader.
- REPLICAOF NO ONE promotes: the node begins an epoch higher than any it has seen
  (its first commit says so), and its own writes (queue timers, retention, fan-out)
  start from the replicated state.
- The role outlives a restart: a replica records its leader in `<dir>/replicaof`
  (crash-safe) and follows it again when it starts, unless `replicaof` in the config
  names another; only REPLICAOF NO ONE makes it a leader again. So a replica that
  restarts never writes commits of its own into its leader's epoch.
- A sentinel's failover (docs/failover.md) first fences the data nodes: FENCE epoch
  records a promise, durably in `<dir>/fence`, that this node takes no commit of a
  leader below that epoch (a replica ends its link and asks again with the promise,
  which fences any older leader it reaches; a leader steps down, or with DRAIN
  refuses writes while its replicas catch up) and answers what its journal holds.
  PROMOTE epoch then makes it the leader of exactly the epoch it promised, so each
  epoch has at most one leader, the one the sentinel elected for it chose.

Owned by the event loop thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING

from narad import errors
from narad.config.kinds import BadValue, ReplicaOfKind, replica_of
from narad.errors import CommandError
from narad.log import checkpoint
from narad.log.format import EPOCH_MAX
from narad.logs import NOTICE
from narad.replication.follower import Follower
from narad.replication.leader import Leader

if TYPE_CHECKING:
    from narad.replication.host import Host
    from narad.replication.leader import Peer

logger = logging.getLogger("narad.replication")

READONLY = CommandError("You can't write against a read only replica.", "READONLY")
NOREPLICAS = CommandError("Not enough good replicas to write.", "NOREPLICAS")
# What WAIT and WAITAOF block on: signaled when replicas ack and when the journal
# is fsynced (narad/commands/replication.py).
ACKS_KEY = (-1, b"replica acks")
TICK_S = 0.1
ROLE_FILE = "replicaof"  # in the data dir: the leader this node follows
FENCE_FILE = "fence"  # in the data dir: the highest epoch promised to a failover


class Replication:
    def __init__(self, node: Host) -> None:
        self.node = node
        self.leader = Leader(node, self.update_refusal, self.acks_changed)
        node.barrier.write_error_changed = self.update_refusal
        self.follower: Follower | None = None
        self._tick_handle: asyncio.TimerHandle | None = None
        self._last_ping_s = 0.0
        # The highest leader epoch a replica's handshake showed above this node's own:
        # a newer leader exists, so this one acknowledges nothing (fenced) until
        # REPLICAOF tells it what to do.
        self.fenced_by = 0
        # The highest epoch this node promised a failover (FENCE): no commit of a
        # leader below it is taken, and it leads in no other epoch until promoted.
        self.promised = 0
        # FENCE ... DRAIN on a leader: writes are refused while its replicas catch up.
        self.draining = False
        node.config.on_change("min-replicas-to-ack", self._quorum_changed)
        node.config.on_change("repl-backlog-size", self._backlog_changed)

    @property
    def is_replica(self) -> bool:
        return self.follower is not None

    def start(self) -> None:
        """Take the role the config says (the keyspace is open, the server listens)."""
        node = self.node
        node.barrier.released_at_commit = self.leader.released_at_commit
        node.keyspace.kept_for_replicas = self.leader.kept
        node.keyspace.journal.written = self.leader.pump_all
        lines = checkpoint.read(self._fence_file)
        self.promised = int(lines[0]) if lines else 0
        if self.promised > node.keyspace.journal.epoch:
            node.keyspace.leads = False  # promised a failover: not leading
        target = replica_of(node.config["replicaof"]) or self._remembered()
        if target is not None:
            self._follow(*target)
        self.update_refusal()
        self._tick_handle = asyncio.get_running_loop().call_later(TICK_S, self._tick)

    def stop(self) -> None:
        if self._tick_handle is not None:
            self._tick_handle.cancel()
        if self.follower is not None:
            self.follower.stop()
        self.leader.drop_all()

    # -- REPLICAOF ------------------------------------------------------------------------

    def replicaof(self, host: str, port: int, caller: Peer | None) -> str:
        """Follow the leader at host:port; the reply's text."""
        follower = self.follower
        if (
            follower is not None
            and follower.host.lower() == host.lower()
            and follower.port == port
            and not follower.refused
        ):
            return "OK Already connected to specified master"
        if follower is not None:
            follower.stop()
        else:
            self._step_down(caller)
        self._follow(host, port)
        return "OK"

    @property
    def _role_file(self) -> Path:
        return self.node.keyspace.root / ROLE_FILE

    @property
    def _fence_file(self) -> Path:
        return self.node.keyspace.root / FENCE_FILE

    def _remembered(self) -> tuple[str, int] | None:
        """The leader this data dir followed when its server stopped, if any."""
        lines = checkpoint.read(self._role_file)
        if not lines:
            return None
        try:
            return replica_of(ReplicaOfKind().parse(lines[0].split(), ""))
        except BadValue:
            return None

    def fence(self, epoch: int) -> None:
        """A replica has seen leader epoch `epoch`, above this leader's: step down at
        once (writes answer READONLY, clients are disconnected to find the new one)."""
        if self.follower is not None or epoch <= self.fenced_by:
            return
        self.fenced_by = epoch
        logger.error(
            "event=fenced epoch_seen=%d own_epoch=%d: a newer leader exists; writes are "
            "refused until REPLICAOF", epoch, self.node.keyspace.journal.epoch,
        )
        self.node.keyspace.leads = False
        self._step_down(None)
        self.update_refusal()

    # -- a sentinel's failover (FENCE, PROMOTE) ------------------------------------------

    def promise(self, epoch: int, drain: bool, caller: Peer) -> dict[bytes, object]:
        """FENCE: take no commit of a leader below `epoch` from now on (durably), and
        answer what this node's journal holds, for the failover to pick the node
        that holds every committed write."""
        journal = self.node.keyspace.journal
        if epoch <= max(self.promised, journal.epoch):
            raise CommandError(
                f"epoch {epoch} is not above this node's epoch {journal.epoch} and "
                f"promise {self.promised}", "STALE",
            )
        checkpoint.write(self._fence_file, [str(epoch)])
        self.promised = epoch
        follower = self.follower
        if follower is not None:  # nothing more from the old link: ask again, promising
            follower.stop()
            self.follower = Follower(
                self.node, follower.host, follower.port, lambda: self.promised
            )
            self.follower.start()
        elif drain:
            self.draining = True
            self.node.keyspace.leads = False
            if journal.pending:
                self.node.barrier.commit_now()
            self.update_refusal()
            logger.log(NOTICE, "event=draining epoch=%d position=%d", epoch, journal.position)
        else:
            logger.log(NOTICE, "event=fenced epoch_promised=%d own_epoch=%d", epoch, journal.epoch)
            self.node.keyspace.leads = False
            self._step_down(caller)
            self.update_refusal()
        epochs = journal.log.epochs
        copying = follower is not None and follower.copy is not None
        return {
            b"epoch": epochs[-1][0] if epochs else 0,
            b"position": journal.position,
            b"history": journal.history.encode(),
            b"role": b"slave" if follower is not None else b"master",
            b"copying": int(copying),
        }

    def promote(self, epoch: int) -> None:
        """PROMOTE: lead in `epoch`, the epoch this node last promised."""
        if epoch != self.promised:
            raise CommandError(
                f"epoch {epoch} is not the one this node promised ({self.promised})", "STALE"
            )
        if self.follower is None and not self._refuses_writes():
            raise CommandError("this node leads already")
        self.no_one(epoch)

    def _follow(self, host: str, port: int) -> None:
        self.fenced_by = 0
        self.draining = False
        self.node.keyspace.leads = False
        checkpoint.write(self._role_file, [f"{host} {port}"])
        self.node.config.put("replicaof", f"{host} {port}")
        self.follower = Follower(self.node, host, port, lambda: self.promised)
        self.follower.start()
        self.update_refusal()
        logger.log(NOTICE, "event=following leader=%s:%d", host, port)

    def no_one(self, epoch: int = 0) -> None:
        """Stop following and lead, in `epoch` (PROMOTE) or else in an epoch above
        every one seen and promised."""
        journal = self.node.keyspace.journal
        follower = self.follower
        # Fenced by a replica's promise of the very epoch this node promised too: that
        # is this failover's, not a newer leader's.
        fenced = self.fenced_by if self.fenced_by > self.promised else 0
        seen = max(fenced, journal.epoch, follower.leader_epoch if follower else 0)
        if epoch and epoch <= seen:
            raise CommandError(f"epoch {epoch} is not above epoch {seen}, seen", "STALE")
        if follower is None and not self._refuses_writes():
            return
        if not epoch and max(seen, self.promised) >= EPOCH_MAX:
            raise CommandError(
                f"no leader epoch is left above {max(seen, self.promised)}: a journal record "
                f"holds at most {EPOCH_MAX} (PROMOTE {EPOCH_MAX}, promised by FENCE, can "
                "still lead in it)", "STALE",
            )
        self.follower = None
        if follower is not None:
            follower.stop()
        self.fenced_by = 0
        self.draining = False
        node = self.node
        node.config.put("replicaof", "no one")
        journal.written = self.leader.pump_all  # a journal reopened since start has none
        epoch = epoch or max(seen, self.promised) + 1
        journal.begin_epoch(epoch)
        with contextlib.suppress(FileNotFoundError):
            self._role_file.unlink()
        node.keyspace.leads = True
        node.queues.opened()
        node.barrier.schedule()  # the epoch's first commit
        self.update_refusal()
        logger.log(NOTICE, "event=promoted epoch=%d position=%d", epoch, journal.position)

    def _step_down(self, caller: Peer | None) -> None:
        """This leader stops leading: nothing more is acknowledged as its own."""
        node = self.node
        self.leader.drop_all()
        dropped = node.barrier.drop_sealed()
        closed = node.close_sessions(but=caller)
        logger.log(NOTICE, "event=stepped_down clients_closed=%d held_replies_dropped=%d",
                       closed, dropped)

    # -- what writes meet ---------------------------------------------------------------

    def update_refusal(self) -> None:
        """What the dispatcher answers a write with, before running it, if anything."""
        node = self.node
        quorum = self.leader.quorum
        write_error = node.keyspace.journal.write_error
        if self.follower is not None or self._refuses_writes():
            node.refusal = READONLY
        elif write_error is not None:  # as Redis, before min-replicas
            node.refusal = errors.write_error(write_error)
        elif quorum and self.leader.good_replicas() < quorum:
            node.refusal = NOREPLICAS
        else:
            node.refusal = None

    @property
    def fenced(self) -> bool:
        """A leader that refuses writes: a newer epoch exists or was promised, or it
        drains (INFO narad_fenced). Sentinels fail over a leader fenced for longer
        than `down-after-milliseconds`."""
        return self.follower is None and self._refuses_writes()

    def _refuses_writes(self) -> bool:
        """A leader that may not take writes: fenced by a newer leader, draining, or
        holding a promise to a failover above its epoch."""
        journal = self.node.keyspace.journal
        return bool(self.fenced_by or self.draining or self.promised > journal.epoch)

    def _quorum_changed(self, value: object) -> None:
        self.node.barrier.release(self.leader.quorum_position())
        self.update_refusal()

    def _backlog_changed(self, value: object) -> None:
        checkpointer = self.node.keyspace.checkpointer
        if checkpointer is not None:
            checkpointer.backlog_bytes = value  # type: ignore[assignment]

    def acks_changed(self) -> None:
        keys = self.node.keys
        if ACKS_KEY in keys.waiters:
            keys.wake(*ACKS_KEY)

    def _tick(self) -> None:
        """Every TICK_S: sealed replies past their timeout, pings, WAIT and WAITAOF."""
        self._tick_handle = asyncio.get_running_loop().call_later(TICK_S, self._tick)
        leader = self.leader
        if self.follower is None:
            if leader.links:
                leader.drop_silent()
                leader.enforce_output_limit()
            if leader.quorum:
                leader.expire_sealed()
            now = time.monotonic()
            period = int(self.node.config["repl-ping-replica-period"])  # type: ignore[call-overload]
            if leader.links and now - self._last_ping_s >= period:
                self._last_ping_s = now
                leader.ping()
            self.update_refusal()
        self.acks_changed()
