"""Real sentinel processes watching real Narad data nodes, for the sentinel tests.

`deployment` starts a leader and its replicas (tests/replication/cluster.py's
`group`, with `min-replicas-to-ack` so that every acknowledged write is on a
majority), then the sentinels, each with its own sentinel.conf naming only the
leader, and waits until every sentinel has discovered every replica and every other
sentinel. Everything started is stopped after, by PID.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import redis
from redis.sentinel import Sentinel

from tests import netns
from tests.replication.cluster import NodeMaker, follow, group, wait_synced
from tests.servers import NaradProcess, ServerProcess, free_port, wait_until
from tests.tls import Certificates, TLSClients, make_certificates, tls_nodes

NAME = "mymaster"
# Every acknowledged write is on the leader and one replica: a majority of 3.
QUORUM_ACKS = ["--min-replicas-to-ack", "1", "--min-replicas-timeout", "2000"]


class SentinelProcess(ServerProcess):
    def __init__(
        self, folder: Path, leader: NaradProcess, settings: list[str],
        netns: str | None = None, host: str = "127.0.0.1", metrics_port: int = 0,
    ) -> None:
        super().__init__(folder, netns=netns, host=host)
        # No metrics port unless a test asks for one (port + 2000 may be another's).
        self.metrics_port = metrics_port
        self.conf = folder / "sentinel.conf"
        folder.mkdir(parents=True, exist_ok=True)
        if not self.conf.exists():  # a restart keeps what the sentinel wrote there
            lines = [
                f"metrics-port {metrics_port}",
                f"sentinel monitor {NAME} {leader.host} {leader.port} 2", *settings,
            ]
            self.conf.write_text("".join(line + "\n" for line in lines))

    def listen_flags(self) -> list[str]:
        return ["--port", str(self.port)]

    def command(self) -> list[str]:
        bind = [] if self.host == "127.0.0.1" else ["--bind", self.host]
        return [sys.executable, "-m", "narad", "sentinel", str(self.conf),
                *self.listen_flags(), *bind]

    def master(self) -> dict[str, object]:
        state: dict[str, object] = self.client(protocol=2).sentinel_master(NAME)
        return state


class TLSSentinelProcess(TLSClients, SentinelProcess):
    """A sentinel on a TLS port (`port`) alone, its links to the data nodes and the
    other sentinels over TLS (tls-replication yes), presenting `certs`' server
    certificate."""

    def __init__(
        self, folder: Path, leader: NaradProcess, settings: list[str], certs: Certificates,
    ) -> None:
        super().__init__(folder, leader, [*settings, *certs.sentinel_lines()])
        self.certs = certs

    def listen_flags(self) -> list[str]:
        return ["--port", "0", "--tls-port", str(self.port)]


# With `users`: the data nodes' default user (what the tests' clients log in as) and
# the sentinels have a password, and replicas and sentinels log in to the data nodes
# as users of least privilege (docs/security.md, "Roles").
PASSWORD = "app-secret"
NODE_USERS = [
    "--requirepass", PASSWORD,
    "--user", "replica", "on", ">replica-secret", "+@replication", "+ping",
    "--user", "sentinel", "on", ">sentinel-secret", "+@sentinel",
    "--masteruser", "replica", "--masterauth", "replica-secret",
]
SENTINEL_USERS = [
    f"requirepass {PASSWORD}", f"sentinel sentinel-pass {PASSWORD}",
    f"sentinel auth-user {NAME} sentinel", f"sentinel auth-pass {NAME} sentinel-secret",
]


def settings(down_after_ms: int = 1000, failover_timeout_ms: int = 3000) -> list[str]:
    return [
        f"sentinel down-after-milliseconds {NAME} {down_after_ms}",
        f"sentinel failover-timeout {NAME} {failover_timeout_ms}",
    ]


@dataclass
class Deployment:
    nodes: list[NaradProcess]
    sentinels: list[SentinelProcess]
    protocol: int
    # redis-py's TLS and password arguments, for the sentinels and the data nodes
    # alike ({}: none).
    tls: dict[str, object] = field(default_factory=dict)

    def sentinel_client(self, **kwargs: object) -> Sentinel:
        """redis-py's own Sentinel client, as an application would make it (with
        TLS: ssl=True for the nodes, and in sentinel_kwargs for the sentinels)."""
        return Sentinel(
            [(s.host, s.port) for s in self.sentinels],
            socket_timeout=1.0,
            protocol=self.protocol,
            sentinel_kwargs={"socket_timeout": 1.0, "protocol": self.protocol, **self.tls},
            **{**self.tls, **kwargs},
        )

    def leader_address(self) -> tuple[str, int]:
        address: tuple[str, int] = self.sentinel_client().discover_master(NAME)
        return address

    def node_at(self, address: tuple[str, int]) -> NaradProcess:
        return next(n for n in self.nodes if (n.host, n.port) == tuple(address))


@contextmanager
def deployment(
    tmp_path: Path, protocol: int = 3, replicas: int = 2, sentinels: int = 3,
    sentinel_settings: list[str] | None = None, node_extra: list[str] | None = None,
    network: netns.Network | None = None, certs: Certificates | None = None,
    users: bool = False,
    sentinel_metrics: bool = False,
) -> Iterator[Deployment]:
    """With `network`, each data node and then each sentinel runs in a namespace of
    its own, in that order (nodes 0 .. replicas, then the sentinels).

    With `certs` (or, without `network`, with NARAD_TEST_TLS=1 in the environment,
    which makes certificates for the test), every node and sentinel listens on a
    TLS port alone and every link between them, and every client, is TLS.

    With `users`, every node and sentinel asks for a password (NODE_USERS,
    SENTINEL_USERS), and every client the deployment makes gives it."""
    extra = QUORUM_ACKS + (node_extra or []) + (NODE_USERS if users else [])
    sentinel_lines = (sentinel_settings or settings()) + (SENTINEL_USERS if users else [])
    auth: dict[str, object] = {"password": PASSWORD} if users else {}
    if certs is None and network is None and os.environ.get("NARAD_TEST_TLS") == "1":
        certs = make_certificates(tmp_path / "certs")
    with ExitStack() as stack:
        if certs is not None:
            assert network is None, "TLS deployments run on loopback"
            nodes = stack.enter_context(
                group(tmp_path, replicas, extra=extra,
                      make=_authenticated(tls_nodes(certs), auth))
            )
            procs: list[SentinelProcess] = [
                TLSSentinelProcess(tmp_path / f"s{i}", nodes[0], sentinel_lines, certs)
                for i in range(sentinels)
            ]
            for proc in procs:
                proc.client_defaults = auth
                proc.start()
                stack.callback(proc.kill)
            found = Deployment(nodes, procs, protocol, {**certs.client_kwargs(), **auth})
            wait_until(lambda: all(_discovered(s, replicas, sentinels - 1) for s in procs),
                       timeout=20)
            yield found
            return
        if network is None:
            nodes = stack.enter_context(
                group(tmp_path, replicas, extra=extra, make=_authenticated(NaradProcess, auth))
            )
            places = [{} for _ in range(sentinels)]
        else:
            nodes = [
                NaradProcess(tmp_path / f"n{i}", extra, netns=spot.namespace, host=spot.address)
                for i, spot in enumerate(network.nodes[: replicas + 1])
            ]
            for node in nodes:
                node.client_defaults = auth
                node.start()
                stack.callback(node.stop)
            for node in nodes[1:]:
                follow(node, nodes[0])
            wait_synced(nodes[0], nodes[1:])
            places = [
                {"netns": spot.namespace, "host": spot.address}
                for spot in network.nodes[replicas + 1: replicas + 1 + sentinels]
            ]
        procs = [
            SentinelProcess(tmp_path / f"s{i}", nodes[0], sentinel_lines,
                            metrics_port=free_port() if sentinel_metrics else 0,
                            **places[i])
            for i in range(sentinels)
        ]
        for proc in procs:
            proc.client_defaults = auth
            proc.start()
            stack.callback(proc.kill)
        found = Deployment(nodes, procs, protocol, auth)
        wait_until(lambda: all(_discovered(s, replicas, sentinels - 1) for s in procs),
                   timeout=20)
        yield found


def _authenticated(make: NodeMaker, auth: dict[str, object]) -> NodeMaker:
    """`make`, whose nodes' clients log in with `auth`."""
    def made(folder: Path, extra: list[str]) -> NaradProcess:
        node = make(folder, extra)
        node.client_defaults = auth
        return node
    return made


def _discovered(sentinel: SentinelProcess, replicas: int, peers: int) -> bool:
    try:
        state = sentinel.master()
    except redis.RedisError:
        return False
    return state["num-slaves"] == replicas and state["num-other-sentinels"] == peers
