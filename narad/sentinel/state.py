"""What a sentinel knows of each monitored group: its data nodes (the leader and its
replicas), the other sentinels that watch it, and the failover under way, if any;
and how SENTINEL MASTER / REPLICAS / SENTINELS show them, field for field as Redis
Sentinel 7.0 does (every value a bulk string; a map under RESP3).

Times are `time.monotonic()` seconds. Owned by the sentinel's event loop thread.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from narad.sentinel.config import MasterConfig
from narad.sentinel.link import Link

# A peer's answer that the leader is down counts for this long (Redis: 5 ask periods).
MASTER_DOWN_VALID_S = 0.5


def address(host: str, port: int) -> str:
    return f"{host}:{port}"


@dataclass(eq=False)
class Node:
    """A data node of a group: what its PING and INFO replies said, and when."""

    host: str
    port: int
    link: Link
    created_s: float = field(default_factory=time.monotonic)
    last_ok_s: float = field(default_factory=time.monotonic)  # last valid PING reply
    last_reply_s: float = field(default_factory=time.monotonic)  # any PING reply
    ping_sent_s: float = 0.0  # a PING awaiting its reply since then (0: none)
    sdown_since_s: float = 0.0  # 0: not subjectively down
    # Since when, as leader, it says it refuses writes because it was fenced (0: not).
    fenced_since_s: float = 0.0
    info: dict[str, str] = field(default_factory=dict)
    info_text: bytes | None = None
    info_s: float = 0.0  # when INFO last answered (0: never)
    role: str = ""  # as INFO reported it: "master" or "slave"
    role_s: float = field(default_factory=time.monotonic)
    flags: set[str] = field(default_factory=set)  # failover steps: promoted, reconf_sent ...

    @property
    def name(self) -> str:
        return address(self.host, self.port)

    def number(self, key: str, default: int = 0) -> int:
        try:
            return int(self.info.get(key, default))
        except ValueError:
            return default

    @property
    def run_id(self) -> str:
        return self.info.get("run_id", "")

    @property
    def epoch(self) -> int:
        """The higher of the leader epoch its journal is in and the one it promised."""
        return max(self.number("narad_epoch"), self.number("narad_promised_epoch"))

    @property
    def master_address(self) -> str:
        """The leader a replica follows, as its INFO says."""
        return address(self.info.get("master_host", "?"), self.number("master_port"))

    @property
    def link_up(self) -> bool:
        return self.info.get("master_link_status") == "up"

    @property
    def offset(self) -> int:
        key = "slave_repl_offset" if self.role == "slave" else "master_repl_offset"
        return self.number(key)

    @property
    def priority(self) -> int:
        return self.number("slave_priority", 100)


@dataclass(eq=False)
class Peer:
    """Another sentinel watching the same group."""

    ip: str
    port: int
    run_id: str
    link: Link
    last_hello_s: float = field(default_factory=time.monotonic)
    last_ok_s: float = field(default_factory=time.monotonic)
    ping_sent_s: float = 0.0
    sdown_since_s: float = 0.0
    master_down_s: float = 0.0  # when it last said the group's leader is down (0: not)
    voted_leader: str = ""
    voted_epoch: int = 0

    @property
    def name(self) -> str:
        return address(self.ip, self.port)

    def says_master_down(self, now: float) -> bool:
        return bool(self.master_down_s) and now - self.master_down_s < MASTER_DOWN_VALID_S


@dataclass(eq=False)
class Failover:
    """A failover this sentinel runs (it was elected for `epoch`, or was asked)."""

    epoch: int
    forced: bool  # SENTINEL FAILOVER: no agreement asked, the leader drained if reachable
    state: str = "wait_start"  # Redis's failover-state names
    started_s: float = field(default_factory=time.monotonic)
    promoted: str = ""  # the address of the node chosen
    promote_sent: bool = False
    drained: Node | None = None  # the leader FENCE ... DRAIN was sent to


@dataclass(eq=False)
class Group:
    """A monitored group, by its configured name. `config.host`/`config.port` is the
    leader as this sentinel last learned it (the config file keeps it)."""

    config: MasterConfig
    nodes: dict[str, Node] = field(default_factory=dict)  # every data node, the leader too
    peers: dict[str, Peer] = field(default_factory=dict)  # by run id
    odown_since_s: float = 0.0
    failover: Failover | None = None
    # When this sentinel last tried a failover, or voted for another's: it starts no
    # failover of its own for 2 * failover-timeout after (as Redis Sentinel).
    failover_start_s: float = 0.0
    # When this sentinel may try, its turn (by run id) after +odown or after that wait.
    try_failover_s: float = 0.0
    voted_leader: str = ""  # the run id voted for in `config.leader_epoch`
    # The group's history (master_replid), from the leader's INFO.
    history: str = ""
    # Why the last failover could promote nothing (shown by INFO), until one does.
    stuck: str = ""
    # Sentinels claimed (by a client name on a node, or a hello) but not yet in
    # `peers`: (ip, port, run id) -> monotonic time before which the claim is not
    # probed again (it is being probed, or was refused). Bounded: CLAIMS_MAX.
    claims: dict[tuple[str, int, str], float] = field(default_factory=dict)
    # Failovers this sentinel ran, by how they ended (their event's name without the
    # sign: end, end-for-timeout, abort-no-majority, abort-timeout, ...), and when
    # the last one ended (Unix seconds; 0: none). Not kept across restarts.
    failovers: dict[str, int] = field(default_factory=dict)
    last_failover_end: float = 0.0
    # Leader changes this sentinel applied (its own failovers' and those it learned
    # of), and when the last one was applied (Unix seconds; 0: none).
    leader_switches: int = 0
    last_switch: float = 0.0

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def leader_address(self) -> str:
        return address(self.config.host, self.config.port)

    @property
    def leader(self) -> Node | None:
        return self.nodes.get(self.leader_address)

    def replicas(self) -> list[Node]:
        return [node for key, node in self.nodes.items() if key != self.leader_address]

    @property
    def down_after_s(self) -> float:
        return self.config.down_after_ms / 1000

    @property
    def failover_timeout_s(self) -> float:
        return self.config.failover_timeout_ms / 1000


def _ms(seconds: float) -> bytes:
    return b"%d" % int(seconds * 1000)


def _since(now: float, then: float) -> bytes:
    return _ms(now - then) if then else b"0"


def _flags(flags: list[str]) -> bytes:
    return ",".join(flags).encode()


def _common(
    name: str, ip: str, port: int, run_id: str, flags: list[str], link: Link,
    ping_sent_s: float, last_ok_s: float, last_reply_s: float, sdown_since_s: float,
    odown_since_s: float, down_after_ms: int, failover: Failover | None, now: float,
) -> dict[bytes, bytes]:
    if not link.connected:
        flags.append("disconnected")
    fields: dict[bytes, bytes] = {
        b"name": name.encode(),
        b"ip": ip.encode(),
        b"port": b"%d" % port,
        b"runid": run_id.encode(),
        b"flags": _flags(flags),
        b"link-pending-commands": b"0",
        b"link-refcount": b"1",
    }
    if failover is not None:
        fields[b"failover-state"] = failover.state.encode()
    fields[b"last-ping-sent"] = _since(now, ping_sent_s)
    fields[b"last-ok-ping-reply"] = _ms(now - last_ok_s)
    fields[b"last-ping-reply"] = _ms(now - last_reply_s)
    if sdown_since_s:
        fields[b"s-down-time"] = _ms(now - sdown_since_s)
    if odown_since_s:
        fields[b"o-down-time"] = _ms(now - odown_since_s)
    fields[b"down-after-milliseconds"] = b"%d" % down_after_ms
    return fields


def _reported(node: Node, fields: dict[bytes, bytes], now: float) -> None:
    fields[b"info-refresh"] = _since(now, node.info_s)
    fields[b"role-reported"] = b"master" if node.role == "master" else b"slave"
    fields[b"role-reported-time"] = _ms(now - node.role_s)


def master_entry(group: Group, now: float) -> dict[bytes, bytes]:
    """SENTINEL MASTER's reply for `group`."""
    config = group.config
    node = group.leader
    flags = []
    if node is not None and node.sdown_since_s:
        flags.append("s_down")
    if group.odown_since_s:
        flags.append("o_down")
    flags.append("master")
    if group.failover is not None:
        flags.append("failover_in_progress")
        if group.failover.forced:
            flags.append("force_failover")
    dummy = node or Node(config.host, config.port, Link(config.host, config.port))
    fields = _common(
        config.name, config.host, config.port, dummy.run_id, flags, dummy.link,
        dummy.ping_sent_s, dummy.last_ok_s, dummy.last_reply_s, dummy.sdown_since_s,
        group.odown_since_s, config.down_after_ms, group.failover, now,
    )
    _reported(dummy, fields, now)
    fields[b"config-epoch"] = b"%d" % config.config_epoch
    fields[b"num-slaves"] = b"%d" % len(group.replicas())
    fields[b"num-other-sentinels"] = b"%d" % len(group.peers)
    fields[b"quorum"] = b"%d" % config.quorum
    fields[b"failover-timeout"] = b"%d" % config.failover_timeout_ms
    fields[b"parallel-syncs"] = b"%d" % config.parallel_syncs
    return fields


def replica_entry(group: Group, node: Node, now: float) -> dict[bytes, bytes]:
    """One entry of SENTINEL REPLICAS's reply."""
    flags = ["s_down"] if node.sdown_since_s else []
    flags.append("slave")
    flags += sorted(node.flags)
    fields = _common(
        node.name, node.host, node.port, node.run_id, flags, node.link, node.ping_sent_s,
        node.last_ok_s, node.last_reply_s, node.sdown_since_s, 0.0,
        group.config.down_after_ms, None, now,
    )
    _reported(node, fields, now)
    down_s = node.number("master_link_down_since_seconds")
    fields[b"master-link-down-time"] = b"%d" % (down_s * 1000)
    fields[b"master-link-status"] = b"ok" if node.link_up else b"err"
    fields[b"master-host"] = node.info.get("master_host", "?").encode()
    fields[b"master-port"] = b"%d" % node.number("master_port")
    fields[b"slave-priority"] = b"%d" % node.priority
    fields[b"slave-repl-offset"] = b"%d" % node.number("slave_repl_offset")
    fields[b"replica-announced"] = b"1"
    return fields


def sentinel_entry(group: Group, peer: Peer, now: float) -> dict[bytes, bytes]:
    """One entry of SENTINEL SENTINELS's reply."""
    flags = ["s_down"] if peer.sdown_since_s else []
    flags.append("sentinel")
    if peer.says_master_down(now):
        flags.append("master_down")
    fields = _common(
        peer.run_id, peer.ip, peer.port, peer.run_id, flags, peer.link, peer.ping_sent_s,
        peer.last_ok_s, peer.last_ok_s, peer.sdown_since_s, 0.0,
        group.config.down_after_ms, None, now,
    )
    fields[b"last-hello-message"] = _ms(now - peer.last_hello_s)
    fields[b"voted-leader"] = (peer.voted_leader or "?").encode()
    fields[b"voted-leader-epoch"] = b"%d" % peer.voted_epoch
    return fields
