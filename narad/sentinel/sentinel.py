"""The sentinel's state and decisions: the groups it monitors, its epoch and votes,
its events, and the once-every-TICK_S check that marks nodes and peers down, agrees
that a leader is down, starts a failover, and points stray nodes at the leader.

The I/O runs in tasks of its own (narad/sentinel/watch.py for the links,
narad/sentinel/failover.py for a failover), which narad/sentinel/serve.py hands the
sentinel as it makes it (Watch, StartFailover): they use the sentinel, so it does not
import them. Everything here is synchronous and runs on the event loop thread, so no
state is ever seen half changed.

The contracts (docs/failover.md):
- A node is subjectively down (`s_down`) after `down-after-milliseconds` without a
  valid PING reply; a group's leader is objectively down (`o_down`) when `quorum`
  sentinels, this one included, say it is.
- One vote per epoch (IS-MASTER-DOWN-BY-ADDR with a run id), recorded in the config
  file before it is answered; a failover runs only with the votes of `quorum` and of
  a majority of all the sentinels known.
- This sentinel's epoch is above every leader epoch and promise it has seen on a data
  node, so the epoch a failover promotes into is new to every node.
"""

from __future__ import annotations

import functools
import logging
import random
import secrets
import ssl
import time
from collections.abc import Awaitable, Callable
from typing import Protocol

import anyio
import anyio.abc

from narad.sentinel import config as sentinel_config
from narad.sentinel.config import MasterConfig, SentinelConfig
from narad.sentinel.link import Link, LinkDown, Refused
from narad.sentinel.state import Group, Node, Peer, address

logger = logging.getLogger("narad.sentinel")

# A claimed sentinel (Sentinel.claim_peer) has this long, at most, to answer its
# probe; a claim refused is not probed again for CLAIM_RETRY_S; at most CLAIMS_MAX
# claims per group are remembered.
PROBE_TIMEOUT_S = 2.0
CLAIM_RETRY_S = 30.0
CLAIMS_MAX = 64

TICK_S = 0.05
# The sentinels that agree a leader is down start their failovers one after the other,
# by run id, this far apart (and a little at random), so that the first is elected
# with the others' votes instead of all splitting the vote; and so again each time
# the wait after an election ends.
STAGGER_S = 0.15
HELLO_CHANNEL = b"__sentinel__:hello"
RECONFIGURE_EVERY_S = 1.0  # a stray node is told REPLICAOF at most this often


class Client(Protocol):
    """A client connection as the sentinel sees it (narad/sentinel/connection.py)."""

    def publish(self, channel: bytes, payload: bytes) -> None:
        """An event: sent if the client subscribed to it."""

    def describe(self) -> str:
        """The client's line in CLIENT LIST."""


class Watch(Protocol):
    """The loop of requests on the link to a data node or another sentinel, run as a
    task until cancelled (narad/sentinel/watch.py's `run`)."""

    def __call__(self, sentinel: Sentinel, group: Group, item: Node | Peer) -> Awaitable[None]:
        ...


class StartFailover(Protocol):
    """Begin a failover of `group` in a new epoch, as a task of the sentinel
    (narad/sentinel/failover.py's `start`)."""

    def __call__(self, sentinel: Sentinel, group: Group, forced: bool) -> None:
        ...


class Sentinel:
    def __init__(
        self,
        config: SentinelConfig,
        stop: Callable[[], None],
        watch: Watch,
        start_failover: StartFailover,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self.config = config
        # The client context of every link, with tls-replication (narad/tls.py).
        self.tls = tls
        self.stop = stop  # SHUTDOWN
        self._watch_link = watch
        self._start_failover = start_failover
        if config.myid is None:
            config.myid = secrets.token_hex(20)
            self.persist()
        self.my_id: str = config.myid
        self.groups: dict[str, Group] = {}
        self.connections: set[Client] = set()
        self._tasks: anyio.abc.TaskGroup | None = None
        self._watchers: dict[object, anyio.CancelScope] = {}
        self._reconfigured_s: dict[str, float] = {}
        # INFO's tcp_port: the plain port listened on, else the TLS one (set once bound).
        self.port = config.port
        self.tls_port = 0  # the TLS port listened on (0: none)
        self.start_s = time.monotonic()
        self.connections_received = 0
        # SENTINEL SIMULATE-FAILURE: crash-after-election, crash-after-promotion.
        self.simulated_failures: set[str] = set()
        for master in config.masters.values():
            self._add_group(master)

    # -- the groups, their nodes and peers ----------------------------------------------

    def _add_group(self, master: MasterConfig) -> Group:
        group = Group(master)
        self.groups[master.name] = group
        self.add_node(group, master.host, master.port)
        for host, port in master.known_replicas:
            self.add_node(group, host, port)
        for ip, port, run_id in master.known_sentinels:
            self.add_peer(group, ip, port, run_id)
        return group

    def monitor(self, master: MasterConfig) -> Group:
        group = self._add_group(master)
        self.config.masters[master.name] = master
        self.persist()
        self.event("+monitor", self.describe(group), f" quorum {master.quorum}")
        return group

    def remove(self, group: Group) -> None:
        self.event("-monitor", self.describe(group))
        self._stop_watching(group)
        del self.groups[group.name]
        del self.config.masters[group.name]
        self.persist()

    def reset(self, group: Group) -> None:
        """SENTINEL RESET: forget the group's replicas and sentinels (rediscovered)."""
        self._stop_watching(group)
        group.nodes.clear()
        group.peers.clear()
        group.failover = None
        group.odown_since_s = 0.0
        group.config.known_replicas.clear()
        group.config.known_sentinels.clear()
        self.add_node(group, group.config.host, group.config.port)
        self.persist()
        self.event("+reset-master", self.describe(group))

    def _stop_watching(self, group: Group) -> None:
        items: list[Node | Peer] = [*group.nodes.values(), *group.peers.values()]
        for item in items:
            scope = self._watchers.pop(item, None)
            if scope is not None:
                scope.cancel()

    def add_node(self, group: Group, host: str, port: int) -> Node:
        key = address(host, port)
        node = group.nodes.get(key)
        if node is not None:
            return node
        master = group.config
        node = Node(host, port, Link(host, port, self.hello_name(), master.auth_user,
                                     master.auth_pass, self.tls))
        group.nodes[key] = node
        if key != group.leader_address and (host, port) not in master.known_replicas:
            master.known_replicas.append((host, port))
            self.persist()
            self.event("+slave", self.describe(group, node))
        self._watch(node, group)
        return node

    def add_peer(self, group: Group, ip: str, port: int, run_id: str) -> Peer | None:
        if run_id == self.my_id:
            return None
        peer = group.peers.get(run_id)
        if peer is not None:
            if (peer.ip, peer.port) != (ip, port):
                peer.ip, peer.port = ip, port
                peer.link = self._peer_link(ip, port)
            return peer
        for other in list(group.peers.values()):  # a sentinel restarted with a new id
            if (other.ip, other.port) == (ip, port):
                self._forget_peer(group, other)
        peer = Peer(ip, port, run_id, self._peer_link(ip, port))
        group.peers[run_id] = peer
        known = group.config.known_sentinels
        known[:] = [k for k in known if k[2] != run_id] + [(ip, port, run_id)]
        self.persist()
        self.event("+sentinel", self.describe(group, peer=peer))
        self._watch(peer, group)
        return peer

    def claim_peer(self, group: Group, ip: str, port: int, run_id: str) -> Peer | None:
        """Another sentinel is said to watch `group` from ip:port as `run_id` (a client
        name on a data node, or a hello): the peer, if known at that address already.
        Otherwise the claim is probed at that address (`_probe`), and the sentinel is
        added (counted, persisted) only once it answers there as that sentinel of that
        group: a name or a message alone is never a vote."""
        if run_id == self.my_id or self._tasks is None:
            return None
        peer = group.peers.get(run_id)
        if peer is not None and (peer.ip, peer.port) == (ip, port):
            return peer
        claim = (ip, port, run_id)
        now = time.monotonic()
        if group.claims.get(claim, 0.0) > now:
            return None  # being probed, or refused a moment ago
        if len(group.claims) >= CLAIMS_MAX:
            for old in [c for c, until in group.claims.items() if until <= now]:
                del group.claims[old]
            if len(group.claims) >= CLAIMS_MAX:
                return None  # a flood of claims: the real ones are heard again later
        group.claims[claim] = now + CLAIM_RETRY_S
        self.spawn(functools.partial(self._probe, group, claim))
        return None

    async def _probe(self, group: Group, claim: tuple[str, int, str]) -> None:
        """Ask the sentinel claimed at its address who it is and whether it watches
        `group`; add it if it answers so, else log the refusal (not retried for
        CLAIM_RETRY_S)."""
        ip, port, run_id = claim
        link = self._peer_link(ip, port)
        timeout_s = min(PROBE_TIMEOUT_S, max(0.1, group.down_after_s))
        reason = ""
        try:
            answer = await link.call("SENTINEL", "MYID", timeout_s=timeout_s)
            if answer != run_id.encode():
                reason = f"its id is {answer!r}"[:80]
            else:
                await link.call("SENTINEL", "MASTER", group.name, timeout_s=timeout_s)
        except LinkDown as exc:
            reason = f"no answer: {exc}"
        except Refused as exc:
            reason = f"refused: {exc}"
        finally:
            await link.close()
        if self.groups.get(group.name) is not group:
            return  # removed or reset meanwhile
        if reason:
            logger.warning(
                "event=sentinel_claim_refused master=%s address=%s run_id=%s reason=%r",
                group.name, address(ip, port), run_id[:40], reason,
            )
            return
        group.claims.pop(claim, None)
        self.add_peer(group, ip, port, run_id)

    def _forget_peer(self, group: Group, peer: Peer) -> None:
        del group.peers[peer.run_id]
        scope = self._watchers.pop(peer, None)
        if scope is not None:
            scope.cancel()
        known = group.config.known_sentinels
        known[:] = [k for k in known if k[2] != peer.run_id]

    def _peer_link(self, ip: str, port: int) -> Link:
        password = self.config.sentinel_pass
        return Link(ip, port, "", self.config.sentinel_user, password, self.tls)

    def _watch(self, item: Node | Peer, group: Group) -> None:
        if self._tasks is None:
            return  # started by `run`
        scope = anyio.CancelScope()
        self._watchers[item] = scope

        async def watched() -> None:
            with scope:
                while True:  # a bug in one link's loop must not stop the sentinel
                    try:
                        await self._watch_link(self, group, item)
                    except Exception:
                        logger.exception("event=watch_failed instance=%s", item.name)
                        await anyio.sleep(1.0)

        self._tasks.start_soon(watched)

    def spawn(self, job: Callable[[], Awaitable[object]]) -> None:
        """Run the coroutine function `job` as a task of the sentinel; what it raises
        is logged, and stops nothing else."""
        assert self._tasks is not None

        async def guarded() -> None:
            try:
                await job()
            except Exception:
                logger.exception("event=task_failed")

        self._tasks.start_soon(guarded)

    # -- what it announces --------------------------------------------------------------

    @property
    def announce_ip(self) -> str:
        return self.config.announce_ip or ""

    @property
    def announce_port(self) -> int:
        """Redis Sentinel's: announce-port, else the TLS port when the links are TLS
        ones, else the plain port."""
        if self.config.announce_port:
            return self.config.announce_port
        if self.config.tls.replication and self.tls_port:
            return self.tls_port
        return self.port

    def hello_name(self, local_ip: str = "") -> str:
        """The client name this sentinel's links to data nodes carry, by which other
        sentinels watching the same nodes find it (CLIENT LIST): no setting on the
        data nodes is needed."""
        ip = self.announce_ip or local_ip or "127.0.0.1"
        return f"sentinel:{self.my_id}:{self.announce_port}:{ip}"

    def hello(self, group: Group, local_ip: str) -> str:
        """Redis Sentinel's hello message, sent to the other sentinels."""
        config = group.config
        ip = self.announce_ip or local_ip or "127.0.0.1"
        return (
            f"{ip},{self.announce_port},{self.my_id},{self.config.current_epoch},"
            f"{config.name},{config.host},{config.port},{config.config_epoch}"
        )

    def describe(self, group: Group, node: Node | None = None, peer: Peer | None = None) -> str:
        """An instance as Redis Sentinel's events name it ("%@")."""
        config = group.config
        master = f"master {config.name} {config.host} {config.port}"
        if node is not None:
            return f"slave {node.name} {node.host} {node.port} @ {master[7:]}"
        if peer is not None:
            return f"sentinel {peer.run_id} {peer.ip} {peer.port} @ {master[7:]}"
        return master

    def event(self, kind: str, text: str, more: str = "", level: int = logging.WARNING) -> None:
        """Log an event and publish it on the channel named by its kind, as Redis
        Sentinel does ("+sdown", "master mymaster 127.0.0.1 6379")."""
        message = text + more
        logger.log(level, "%s %s", kind, message)
        channel, payload = kind.encode(), message.encode()
        for connection in list(self.connections):
            connection.publish(channel, payload)

    def persist(self) -> None:
        """Rewrite the config file with the state (epochs, votes, discoveries); the
        rewrite is fsynced, so a vote is on disk before it is answered."""
        sentinel_config.rewrite(self.config)

    # -- epochs and votes ------------------------------------------------------------

    def observe_epoch(self, epoch: int) -> None:
        if epoch > self.config.current_epoch:
            self.config.current_epoch = epoch
            self.persist()
            self.event("+new-epoch", str(epoch))

    def new_epoch(self, group: Group) -> int:
        """A new epoch for a failover of `group`, above every epoch seen, with this
        sentinel's own vote in it."""
        seen = max([node.epoch for node in group.nodes.values()], default=0)
        epoch = max(self.config.current_epoch, seen) + 1
        self.config.current_epoch = epoch
        group.config.leader_epoch = epoch
        group.voted_leader = self.my_id
        group.failover_start_s = time.monotonic()
        self.persist()
        self.event("+new-epoch", str(epoch))
        self.event("+try-failover", self.describe(group))
        self.event("+vote-for-leader", f"{self.my_id} {epoch}")
        return epoch

    def vote(self, group: Group, epoch: int, run_id: str) -> tuple[str, int]:
        """A vote asked for `run_id` in `epoch` (IS-MASTER-DOWN-BY-ADDR): one leader
        per epoch; the answer is the leader voted for and its epoch."""
        self.observe_epoch(epoch)
        config = group.config
        if config.leader_epoch < epoch and self.config.current_epoch <= epoch:
            config.leader_epoch = epoch
            group.voted_leader = run_id
            self.persist()
            self.event("+vote-for-leader", f"{run_id} {epoch}")
            if run_id != self.my_id:
                group.failover_start_s = time.monotonic()
        return group.voted_leader, config.leader_epoch

    def take_hello(self, payload: bytes) -> None:
        """A hello from another sentinel: learn it, its epoch, and a newer leader."""
        parts = payload.decode("utf-8", "replace").split(",")
        if len(parts) != 8:
            return
        ip, port, run_id, epoch, name, master_ip, master_port, config_epoch = parts
        group = self.groups.get(name)
        if group is None or not (port.isdigit() and master_port.isdigit()):
            return
        try:
            current, newer = int(epoch), int(config_epoch)
        except ValueError:
            return
        peer = self.claim_peer(group, ip, int(port), run_id)
        if peer is None:
            return  # not a sentinel this one knows there: nothing it says is taken
        peer.last_hello_s = time.monotonic()
        self.observe_epoch(current)
        if newer > group.config.config_epoch and group.failover is None:
            self.event("+config-update-from", self.describe(group, peer=peer))
            self.switch_leader(group, master_ip, int(master_port), newer)

    def switch_leader(self, group: Group, host: str, port: int, config_epoch: int) -> None:
        """The group's leader is now host:port, as of `config_epoch`."""
        config = group.config
        old_host, old_port = config.host, config.port
        config.config_epoch = config_epoch
        if (host, port) != (old_host, old_port):
            old = address(old_host, old_port)
            config.host, config.port = host, port
            self.add_node(group, host, port)
            known = [(h, p) for h, p in config.known_replicas if (h, p) != (host, port)]
            if old in group.nodes and (old_host, old_port) not in known:
                known.append((old_host, old_port))
            config.known_replicas[:] = known
        group.odown_since_s = 0.0
        self.persist()
        if (host, port) != (old_host, old_port):
            group.leader_switches += 1
            group.last_switch = time.time()
            self.event("+switch-master", f"{config.name} {old_host} {old_port} {host} {port}")

    # -- the periodic check ---------------------------------------------------------------

    def tick(self) -> None:
        now = time.monotonic()
        for group in list(self.groups.values()):
            self._check_down(group, now)
            self._check_leader_down(group, now)
            if group.failover is None:
                self._maybe_fail_over(group, now)
                self._reconfigure_strays(group, now)

    def _check_down(self, group: Group, now: float) -> None:
        limit = group.down_after_s
        leader = group.leader
        if leader is not None:  # a leader that refuses writes, fenced, counts as down
            fenced = leader.role == "master" and leader.info.get("narad_fenced") == "1"
            if not fenced:
                leader.fenced_since_s = 0.0
            elif not leader.fenced_since_s:
                leader.fenced_since_s = now
        for node in group.nodes.values():
            fenced_long = bool(node.fenced_since_s) and now - node.fenced_since_s > limit
            down = now - node.last_ok_s > limit or (node is leader and fenced_long)
            if down and not node.sdown_since_s:
                node.sdown_since_s = now
                self.event("+sdown", self._describe_node(group, node))
            elif not down and node.sdown_since_s:
                node.sdown_since_s = 0.0
                self.event("-sdown", self._describe_node(group, node))
        for peer in group.peers.values():
            down = now - peer.last_ok_s > limit
            if down and not peer.sdown_since_s:
                peer.sdown_since_s = now
                self.event("+sdown", self.describe(group, peer=peer))
            elif not down and peer.sdown_since_s:
                peer.sdown_since_s = 0.0
                self.event("-sdown", self.describe(group, peer=peer))

    def _describe_node(self, group: Group, node: Node) -> str:
        return self.describe(group, None if node is group.leader else node)

    def _check_leader_down(self, group: Group, now: float) -> None:
        leader = group.leader
        agreeing = 0
        if leader is not None and leader.sdown_since_s:
            agreeing = 1 + sum(peer.says_master_down(now) for peer in group.peers.values())
        quorum = group.config.quorum
        if agreeing >= quorum and not group.odown_since_s:
            group.odown_since_s = now
            group.try_failover_s = now + self._stagger(group)
            self.event("+odown", self.describe(group), f" #quorum {agreeing}/{quorum}")
        elif agreeing < quorum and group.odown_since_s:
            group.odown_since_s = 0.0
            self.event("-odown", self.describe(group))

    def _stagger(self, group: Group) -> float:
        """This sentinel's turn: its place in run-id order among every sentinel it
        knows, those down included. Liveness would not do: after a pause (a loaded
        machine, a stopped process) each sees the others down until they answer
        again, and so each would count itself first."""
        ids = sorted([self.my_id, *group.peers])
        return ids.index(self.my_id) * STAGGER_S + random.random() * STAGGER_S / 3

    def _maybe_fail_over(self, group: Group, now: float) -> None:
        if not group.odown_since_s:
            return
        waited = group.failover_start_s + 2 * group.failover_timeout_s
        if now < waited:
            return
        # The wait after an election ends at about the same moment for every sentinel
        # that took part in it (each voted, or tried, then): they take turns again,
        # as at +odown. Trying at once would split the vote, and with it the next
        # wait would end together too, round after round.
        if group.try_failover_s < waited:
            group.try_failover_s = now + self._stagger(group)
        if now >= group.try_failover_s:
            self._start_failover(self, group, forced=False)

    def _reconfigure_strays(self, group: Group, now: float) -> None:
        """Follow a node that leads a newer epoch than the leader this sentinel knows
        (promoted by a failover this sentinel missed), and point at the leader every
        other live node that leads or follows another: an old leader come back (it
        truncates what it never committed), a replica left behind."""
        leader = group.leader
        known = group.config.config_epoch
        if leader is not None and not leader.sdown_since_s and leader.role == "master":
            known = max(known, leader.number("narad_epoch"))
        leading = [n for n in group.replicas() if n.role == "master" and not n.sdown_since_s]
        newest = max(leading, key=lambda n: n.number("narad_epoch"), default=None)
        if newest is not None and newest.number("narad_epoch") > known:
            self.switch_leader(group, newest.host, newest.port, newest.number("narad_epoch"))
            return
        if leader is None or leader.sdown_since_s or leader.role != "master":
            return
        for node in group.replicas():
            if node.sdown_since_s or not node.info_s:
                continue
            if node.role == "master":
                kind = "+convert-to-slave"
            elif node.master_address != leader.name:
                kind = "+fix-slave-config"
            else:
                continue
            if now - self._reconfigured_s.get(node.name, 0.0) < RECONFIGURE_EVERY_S:
                continue
            self._reconfigured_s[node.name] = now
            self.event(kind, self.describe(group, node))
            self.spawn(functools.partial(_send_replicaof, node, leader.host, leader.port))

    # -- running ------------------------------------------------------------------------

    async def run(self, tasks: anyio.abc.TaskGroup) -> None:
        """Watch every group until cancelled."""
        self._tasks = tasks
        for group in self.groups.values():
            self.event("+monitor", self.describe(group), f" quorum {group.config.quorum}")
            items: list[Node | Peer] = [*group.nodes.values(), *group.peers.values()]
            for item in items:
                self._watch(item, group)
        while True:
            await anyio.sleep(TICK_S)
            self.tick()


async def _send_replicaof(node: Node, host: str, port: int) -> None:
    try:
        await node.link.call("REPLICAOF", host, port, timeout_s=1.0)
    except (LinkDown, Refused) as exc:
        logger.info("event=replicaof_failed node=%s reason=%r", node.name, str(exc))
