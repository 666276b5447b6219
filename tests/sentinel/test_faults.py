"""Failover under faults, with three data nodes, three sentinels and redis-py's
Sentinel client unchanged, in RESP2 and RESP3: the leader killed -9, stopped past
`down-after-milliseconds` and continued, a sentinel crashing mid-failover, two
failovers in a row, a planned switchover, the old leader restarted on its old
config. After each: no acknowledged write lost, no consumer ack undone, no push
duplicated (DEDUP answers a repeat with the first ID), one leader, and every node's
logs identical (docs/failover.md)."""

from __future__ import annotations

import os
import signal
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from tests import netns
from tests.replication.cluster import assert_same_logs
from tests.sentinel.cluster import NAME, Deployment, deployment
from tests.sentinel.load import QUEUE, SentinelLoad, _fields
from tests.sentinel.test_election import PHANTOM, PHANTOM_EPOCH, vote_for
from tests.servers import NaradProcess, wait_until

PROTOCOLS = [pytest.param(2, id="resp2"), pytest.param(3, id="resp3")]
# The same, and once more with users and TLS on every link (tests/sentinel/cluster.py's
# `deployment(users=True, certs=...)`).
SETUPS = [
    pytest.param(2, False, id="resp2"), pytest.param(3, False, id="resp3"),
    pytest.param(3, True, id="resp3-users-tls"),
]


def _deployment(
    request: pytest.FixtureRequest, tmp_path: Path, protocol: int, secured: bool,
) -> Any:
    certs = request.getfixturevalue("tls_certs") if secured else None
    return deployment(tmp_path, protocol=protocol, certs=certs, users=secured)


def _prepare(found: Deployment) -> None:
    leader = found.nodes[0].client()
    leader.execute_command("Q.CREATE", QUEUE, "DEDUPWINDOW", 600_000, "VISIBILITY", 2000)


def _new_leader(found: Deployment, old: tuple[str, int], timeout: float = 20) -> NaradProcess:
    """Wait until every sentinel names the same leader, not `old`; that node."""
    def agreed() -> tuple[str, int] | None:
        seen = set()
        for sentinel in found.sentinels:
            try:
                host, port = sentinel.client(protocol=2).sentinel_get_master_addr_by_name(NAME)
            except (redis.RedisError, TypeError):
                continue
            seen.add((host.decode(), int(port)))
        if len(seen) == 1 and old not in seen:
            return seen.pop()
        return None

    return found.node_at(wait_until(agreed, timeout=timeout))


def _reconverged(found: Deployment, leader: NaradProcess, timeout: float = 30) -> None:
    """Wait until every node follows `leader` and holds its position."""
    seen: list[object] = []

    def done() -> bool:
        try:
            target = leader.client().info("replication")["master_repl_offset"]
            seen[:] = [leader.port, target]
            for node in found.nodes:
                if node is leader:
                    continue
                info = node.client().info("replication")
                seen.append({k: info.get(k) for k in (
                    "master_port", "master_link_status", "master_repl_offset")})
                if info.get("master_port") != leader.port or info["master_link_status"] != "up":
                    return False
                if info["master_repl_offset"] != target:
                    return False
        except redis.RedisError as exc:
            seen.append(exc)
            return False
        return True

    try:
        wait_until(done, timeout=timeout, interval=0.1)
    except TimeoutError:
        raise AssertionError(f"not reconverged on {leader.port}: {seen}") from None


def _check(found: Deployment, load: SentinelLoad, leader: NaradProcess) -> None:
    """Nothing acknowledged is lost; nothing pushed twice; one leader; acked messages
    never delivered again; identical logs."""
    assert load.errors == [], load.errors[:3]
    _reconverged(found, leader)
    roles = [node.client().info("replication")["role"] for node in found.nodes]
    assert roles.count("master") == 1, roles
    entries = leader.client().xrange(QUEUE)
    ids = {mid for mid, _ in entries}
    lost = {key: mid for key, mid in load.pushed.items() if mid not in ids}
    assert not lost, f"{len(lost)} acknowledged pushes lost, e.g. {list(lost.items())[:3]}"
    payloads = Counter(fields[b"payload"] for _, fields in entries)
    twice = [p for p, n in payloads.items() if n > 1]
    assert not twice, f"pushed twice: {twice[:5]}"
    # Unacked deliveries come back after their visibility; none of what was acked does.
    client = leader.client()
    wait_until(lambda: _stats(client)[b"in_flight"] == 0, timeout=30, interval=0.1)
    again: set[bytes] = set()
    for _ in range(1000):
        got = client.execute_command("Q.POP", QUEUE, "COUNT", 500, "VISIBILITY", 600_000)
        if not got:
            break
        again |= {_fields(message)[b"id"] for message in got}
    assert not again & load.consumer_acked
    _reconverged(found, leader)
    for node in found.nodes:
        node.stop()
    assert_same_logs(found.nodes)


def _stats(client: redis.Redis) -> dict[bytes, Any]:
    reply = client.execute_command("Q.STATS", QUEUE)
    return reply if isinstance(reply, dict) else dict(zip(reply[::2], reply[1::2], strict=True))


def _run_fault(
    found: Deployment, fault: Any, heal: Any = None
) -> tuple[SentinelLoad, NaradProcess]:
    _prepare(found)
    old = found.nodes[0]
    with SentinelLoad(found.sentinel_client()) as load:
        wait_until(lambda: load.acked() >= 300, timeout=30)
        at = time.monotonic()
        fault(old)
        new = _new_leader(found, (old.host, old.port))
        wait_until(lambda: load.first_ack_after(at + 0.01) is not None, timeout=30)
        if heal is not None:
            heal(old)
        before = load.acked()
        wait_until(lambda: load.acked() >= before + 200, timeout=30)
    return load, new


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_leader_killed(tmp_path: Path, protocol: int) -> None:
    with deployment(tmp_path, protocol=protocol) as found:
        load, new = _run_fault(found, lambda old: old.kill())
        found.nodes[0].start()  # its old config: it leads, until told to follow
        _check(found, load, new)


@pytest.mark.slow
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_leader_stopped_past_down_after_then_continued(tmp_path: Path, protocol: int) -> None:
    def stop(old: NaradProcess) -> None:
        assert old.proc is not None
        os.kill(old.proc.pid, signal.SIGSTOP)

    def cont(old: NaradProcess) -> None:
        assert old.proc is not None
        os.kill(old.proc.pid, signal.SIGCONT)

    with deployment(tmp_path, protocol=protocol) as found:
        load, new = _run_fault(found, stop, cont)
        _check(found, load, new)


@pytest.mark.slow
@pytest.mark.parametrize(("protocol", "secured"), SETUPS)
def test_two_failovers_in_a_row(
    request: pytest.FixtureRequest, tmp_path: Path, protocol: int, secured: bool,
) -> None:
    with _deployment(request, tmp_path, protocol, secured) as found:
        load, first = _run_fault(found, lambda old: old.kill())
        found.nodes[0].start()
        _reconverged(found, first)
        with SentinelLoad(found.sentinel_client()) as more:
            wait_until(lambda: more.acked() >= 200, timeout=30)
            first.kill()
            second = _new_leader(found, (first.host, first.port))
            before = more.acked()
            wait_until(lambda: more.acked() >= before + 200, timeout=30)
        assert second is not first
        first.start()
        load.pushed.update(more.pushed)
        load.consumer_acked |= more.consumer_acked
        _check(found, load, second)


@pytest.mark.slow
@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("when", ["crash-after-election", "crash-after-promotion"])
def test_a_sentinel_crashing_mid_failover(tmp_path: Path, protocol: int, when: str) -> None:
    """The sentinel elected first crashes at that step; the others finish the
    failover in a later epoch. Which one is elected first is made sure of, not left
    to the turns (which a sentinel that sees the leader down late may lose): as the
    leader is killed, the others vote for a sentinel that is not there, which holds
    them back for twice failover-timeout, and the one to crash votes for itself in
    that epoch, so that it tries the next."""
    settings = [f"sentinel down-after-milliseconds {NAME} 1000",
                f"sentinel failover-timeout {NAME} 2000"]
    with deployment(tmp_path, protocol=protocol, sentinel_settings=settings) as found:
        ids = {s: s.client(protocol=2).execute_command("SENTINEL", "MYID") for s in found.sentinels}
        first = min(found.sentinels, key=lambda s: ids[s])
        first.client(protocol=2).execute_command("SENTINEL", "SIMULATE-FAILURE", when)

        def fault(old: NaradProcess) -> None:
            for sentinel in found.sentinels:
                voted = ids[first].decode() if sentinel is first else PHANTOM
                vote_for(sentinel, old, PHANTOM_EPOCH, voted)
            old.kill()

        load, new = _run_fault(found, fault)
        assert first.proc is not None and first.proc.poll() == 99  # it did crash
        found.nodes[0].start()
        _check(found, load, new)


@pytest.mark.slow
@pytest.mark.parametrize(("protocol", "secured"), SETUPS)
def test_planned_switchover_cuts_nothing(
    request: pytest.FixtureRequest, tmp_path: Path, protocol: int, secured: bool,
) -> None:
    with _deployment(request, tmp_path, protocol, secured) as found:
        _prepare(found)
        old = found.nodes[0]
        with SentinelLoad(found.sentinel_client()) as load:
            wait_until(lambda: load.acked() >= 300, timeout=30)
            client = found.sentinels[1].client(protocol=protocol)
            assert client.execute_command("SENTINEL", "FAILOVER", NAME) == b"OK"
            with pytest.raises(redis.ResponseError, match="INPROG"):
                client.execute_command("SENTINEL", "FAILOVER", NAME)
            new = _new_leader(found, (old.host, old.port))
            before = load.acked()
            wait_until(lambda: load.acked() >= before + 200, timeout=30)
        assert "event=truncating" not in old.log()  # the old leader had nothing to cut
        _check(found, load, new)


# -- partitions (network namespaces: nodes 0-2 the data nodes, 3-5 the sentinels) ---------


@pytest.fixture
def network() -> Iterator[netns.Network]:
    netns.require()
    with netns.Network(6) as net:
        yield net


@pytest.mark.slow
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_leader_partitioned_from_everything(
    network: netns.Network, tmp_path: Path, protocol: int
) -> None:
    with deployment(tmp_path, protocol=protocol, network=network) as found:
        load, new = _run_fault(found, lambda old: network.isolate(0), lambda old: network.heal())
        _check(found, load, new)


@pytest.mark.slow
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_leader_partitioned_with_one_replica(
    network: netns.Network, tmp_path: Path, protocol: int
) -> None:
    """The leader and one replica, a majority of the data nodes, are cut from the
    other replica and from every sentinel; the clients reach every node. The
    sentinels see the leader down but can fence only one data node of three: they
    promote nothing, and say so, while the leader goes on committing with the replica
    on its side. Healed, the group has one leader again and has lost nothing."""
    with deployment(tmp_path, protocol=protocol, network=network) as found:
        _prepare(found)
        with SentinelLoad(found.sentinel_client()) as load:
            wait_until(lambda: load.acked() >= 300, timeout=30)
            for near in (0, 1):
                for far in (2, 3, 4, 5):
                    network.cut(near, far)
            # The sentinel that ran the failover says why it promoted nothing.
            wait_until(lambda: any("master0_failover_blocked" in s.client(protocol=2).info(
                "sentinel") for s in found.sentinels), timeout=30, interval=0.1)
            # The leader and its replica, a majority, still commit. (redis-py finds no
            # leader through the sentinels, which see it down: its clients that must
            # connect again wait for the heal.)
            direct = found.nodes[0].client()
            for i in range(20):
                key = f"direct-{i}"
                mid = direct.execute_command("Q.PUSH", QUEUE, "DEDUP", key, key)
                with load.lock:
                    load.pushed[key] = mid
            network.heal()
            # The replica cut off promised an epoch; when it reaches the leader again,
            # the leader steps down, and a failover with a majority follows.
            new = wait_until(lambda: _settled(found), timeout=60, interval=0.2)
            before = load.acked()
            wait_until(lambda: load.acked() >= before + 200, timeout=60)
        assert any("-failover-abort-no-majority" in s.log() for s in found.sentinels)
        _check(found, load, new)


def _settled(found: Deployment) -> NaradProcess | None:
    """The node every sentinel names, once it takes writes and every other node
    follows it."""
    try:
        node = _new_leader(found, ("", 0), timeout=0.5)
        info = node.client().info("replication")
        if info["role"] != "master" or info["narad_fenced"]:
            return None
        for other in found.nodes:
            theirs = other.client().info("replication")
            if other is not node and (theirs.get("master_port") != node.port
                                      or theirs["master_link_status"] != "up"):
                return None
    except (TimeoutError, redis.RedisError):
        return None
    return node
