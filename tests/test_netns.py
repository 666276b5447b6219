"""tests/netns.py: real partitions between redis-servers and Narad servers in namespaces.

The test process stays in the root namespace and speaks to the servers through
redis-py; "unreachable" is a connect that times out (the packets are dropped, not
refused), and a `redis-cli` run inside one namespace shows what that node can reach.
"""

from __future__ import annotations

import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from tests import netns
from tests.servers import NaradProcess, RedisProcess, ServerProcess, have_redis_server

# Long enough for a loopback-speed connect, far shorter than the kernel's SYN retries.
CONNECT_TIMEOUT_S = 1.0


@pytest.fixture
def network() -> Iterator[netns.Network]:
    netns.require()
    with netns.Network(2) as net:
        yield net


@pytest.fixture
def redises(network: netns.Network, tmp_path: Path) -> Iterator[list[ServerProcess]]:
    """A redis-server in each namespace, listening on the namespace's address."""
    if not have_redis_server():
        pytest.skip("redis-server is not installed")
    servers: list[ServerProcess] = []
    try:
        for node in network.nodes:
            folder = tmp_path / f"redis{node.index}"
            servers.append(RedisProcess(folder, netns=node.namespace, host=node.address))
            servers[-1].start()
        yield servers
    finally:
        for server in servers:
            if server.proc is not None:
                server.stop()


def reaches(server: ServerProcess) -> bool:
    """Whether the root namespace gets a PONG from `server` now, on a new connection
    tried once (redis-py would otherwise retry a timeout, with backoff)."""
    client = server.client(
        socket_connect_timeout=CONNECT_TIMEOUT_S,
        socket_timeout=CONNECT_TIMEOUT_S,
        retry=Retry(NoBackoff(), 0),
    )
    try:
        return bool(client.ping())
    except (redis.ConnectionError, redis.TimeoutError):
        return False
    finally:
        client.close()


def ping_from(network: netns.Network, i: int, server: ServerProcess) -> str | None:
    """PING `server` with redis-cli run inside node i: its reply, or None when no
    reply comes before the timeout (redis-cli itself would wait for the kernel)."""
    proc = network.popen(
        i,
        ["redis-cli", "-h", server.host, "-p", str(server.port), "PING"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        out, _ = proc.communicate(timeout=1.5 * CONNECT_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        return None
    return str(out).strip()


def test_servers_run_in_their_namespaces(
    network: netns.Network, redises: list[ServerProcess]
) -> None:
    for node, server in zip(network.nodes, redises, strict=True):
        assert server.proc is not None
        # `ip netns exec` execs in place: the PID we hold is the server's own.
        assert Path(f"/proc/{server.proc.pid}/comm").read_text().strip() == "redis-server"
        ours = netns.run(["ip", "netns", "pids", node.namespace]).stdout.split()
        assert str(server.proc.pid) in ours
        assert reaches(server)
        assert server.client().config_get("bind") == {"bind": node.address}


def test_cut_isolate_heal(network: netns.Network, redises: list[ServerProcess]) -> None:
    first, second = redises
    assert ping_from(network, 0, second) == "PONG"
    assert ping_from(network, 1, first) == "PONG"

    network.cut(0, 1)
    assert ping_from(network, 0, second) is None
    assert ping_from(network, 1, first) is None
    assert reaches(first) and reaches(second)

    network.heal()
    assert ping_from(network, 0, second) == "PONG"

    network.isolate(0)
    assert not reaches(first)
    assert reaches(second)
    assert ping_from(network, 1, first) is None
    assert ping_from(network, 0, second) is None

    network.heal()
    assert reaches(first) and reaches(second)
    assert ping_from(network, 0, second) == "PONG"
    assert ping_from(network, 1, first) == "PONG"


def test_a_cut_drops_packets_and_an_open_connection_survives_it(
    network: netns.Network, redises: list[ServerProcess]
) -> None:
    """A dropped packet is not a reset: on a connection made before the isolation a
    PING gets no reply and no error during it, and its reply arrives on the same
    socket once healed, when TCP retransmits."""
    server = redises[0]
    with socket.create_connection((server.host, server.port), timeout=CONNECT_TIMEOUT_S) as sock:
        sock.sendall(b"PING\r\n")
        assert sock.recv(64) == b"+PONG\r\n"
        network.isolate(0)
        sock.sendall(b"PING\r\n")
        with pytest.raises(TimeoutError):
            sock.recv(64)
        network.heal()
        sock.settimeout(20)
        assert sock.recv(64) == b"+PONG\r\n"


def test_narad_server_in_a_namespace(network: netns.Network, tmp_path: Path) -> None:
    node = network.node(1)
    server = NaradProcess(tmp_path / "narad", netns=node.namespace, host=node.address).start()
    try:
        client = server.client()
        assert client.config_get("bind") == {"bind": node.address}
        assert client.xadd("s", {"f": "v"})
        assert client.xlen("s") == 1
        network.isolate(1)
        assert not reaches(server)
        network.heal()
        assert reaches(server)
        assert client.xlen("s") == 1
    finally:
        server.stop()


def test_leaves_nothing_behind_and_cleans_up_the_stale(tmp_path: Path) -> None:
    netns.require()
    with netns.Network(2) as net:
        names = [node.namespace for node in net.nodes]
        links = [net.bridge, *(node.host_veth for node in net.nodes)]
        sleeper = net.popen(0, ["sleep", "60"])
    assert sleeper.poll() is not None
    assert not set(names) & set(netns.run(["ip", "netns", "list"]).stdout.split())
    for link in links:
        assert netns.run(["ip", "link", "show", link], check=False).returncode != 0

    # A leftover of a run that died: a namespace, a process in it, and a linked
    # bridge, all named for a PID that no longer runs.
    dead = subprocess.Popen(["true"])
    dead.wait()
    stale_ns = f"{netns.PREFIX}{dead.pid}-77-0"
    stale_link = "nrd999br"
    netns.run(["ip", "netns", "add", stale_ns])
    netns.run(["ip", "link", "add", stale_link, "type", "bridge"])
    netns.run(["ip", "link", "set", stale_link, "alias", f"{netns.PREFIX}{dead.pid}-999"])
    orphan = subprocess.Popen(["ip", "netns", "exec", stale_ns, "sleep", "60"])
    try:
        removed = netns.cleanup_stale()
        assert stale_ns in removed and stale_link in removed
        assert orphan.wait(timeout=5) == -9
        assert netns.run(["ip", "link", "show", stale_link], check=False).returncode != 0
    finally:
        if orphan.poll() is None:
            orphan.kill()
            orphan.wait()
        netns.run(["ip", "netns", "del", stale_ns], check=False)
        netns.run(["ip", "link", "del", stale_link], check=False)
