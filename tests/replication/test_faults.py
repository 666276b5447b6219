"""Replication under faults: a leader killed -9 under load and failed over, a leader
partitioned from its replicas, a replica killed -9 again and again under load.

What is checked is the promise of docs/design.md: an acknowledged write (its reply
came, with `min-replicas-to-ack 1`) survives a failover to the most advanced
replica; a consumer's acknowledged ack is never undone; a leader cut off from its
quorum acknowledges nothing, and what it committed alone is cut when it follows the
new leader; in the end every node holds the same logs.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from tests import netns
from tests.replication.cluster import assert_same_logs, follow, group, offset, wait_synced
from tests.servers import NaradProcess, wait_until

# Long enough for any loaded reply on loopback; a broken link fails sooner.
SOCKET_TIMEOUT_S = 15.0
# A delivery the consumer leaves unacked returns after this; the checks wait for it.
VISIBILITY_MS = 1500
# Every producer and the consumer stop after this many operations, whatever happens.
MAX_OPS = 20_000
# Every SKIP_ACK-th delivery is left unacked, so some are in flight when a node dies.
SKIP_ACK = 7


def _client(node: NaradProcess) -> redis.Redis:
    """A client that tries each command once: a write whose connection broke is not
    sent again, so an acknowledged reply belongs to exactly one attempt."""
    return node.client(
        socket_timeout=SOCKET_TIMEOUT_S,
        socket_connect_timeout=SOCKET_TIMEOUT_S,
        retry=Retry(NoBackoff(), 0),
    )


class Load:
    """Producers (XADD to `s`, Q.PUSH to `q`) and a consumer (Q.POP then Q.ACK on `q`)
    in threads against one node. Each records what was acknowledged to it: the IDs
    of writes whose reply was an ID, the IDs of messages whose Q.ACK answered 1.
    A thread stops at the first connection error, when told, or after MAX_OPS."""

    def __init__(self, node: NaradProcess, producers: int = 2) -> None:
        self.node = node
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.xadds: set[bytes] = set()
        self.pushes: set[bytes] = set()
        self.consumer_acked: set[bytes] = set()
        self.refused: list[str] = []  # error replies (NOREPL, NOREPLICAS): not acked
        workers: list[Callable[[], None]] = []
        for i in range(producers):
            workers += [self._xadd_worker(i), self._push_worker(i)]
        workers.append(self._consumer)
        self.threads = [threading.Thread(target=work, daemon=True) for work in workers]

    def __enter__(self) -> Load:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.finish()

    def finish(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=2 * SOCKET_TIMEOUT_S)
        assert not any(thread.is_alive() for thread in self.threads)

    def acked_writes(self) -> int:
        with self.lock:
            return len(self.xadds) + len(self.pushes)

    def _loop(self, step: Callable[[redis.Redis, int], None]) -> None:
        client = _client(self.node)
        try:
            for n in range(MAX_OPS):
                if self.stop.is_set():
                    return
                try:
                    step(client, n)
                except redis.ResponseError as exc:
                    with self.lock:
                        self.refused.append(str(exc))
        except (redis.ConnectionError, redis.TimeoutError):
            return
        finally:
            client.close()

    def _xadd_worker(self, i: int) -> Callable[[], None]:
        def step(client: redis.Redis, n: int) -> None:
            mid = client.xadd("s", {"p": i, "n": n})
            with self.lock:
                self.xadds.add(mid)
        return lambda: self._loop(step)

    def _push_worker(self, i: int) -> Callable[[], None]:
        def step(client: redis.Redis, n: int) -> None:
            mid = client.execute_command("Q.PUSH", "q", f"{i}-{n}")
            with self.lock:
                self.pushes.add(mid)
        return lambda: self._loop(step)

    def _consumer(self) -> None:
        seen = 0

        def step(client: redis.Redis, n: int) -> None:
            nonlocal seen
            got = client.execute_command("Q.POP", "q", "COUNT", 10, "VISIBILITY", VISIBILITY_MS)
            for message in got:
                seen += 1
                if seen % SKIP_ACK == 0:
                    continue
                if client.execute_command("Q.ACK", "q", message[b"receipt"]) >= 1:
                    with self.lock:
                        self.consumer_acked.add(message[b"id"])
        self._loop(step)


def _ids(node: NaradProcess, key: str) -> set[bytes]:
    return {mid for mid, _ in node.client().xrange(key)}


def _stats(node: NaradProcess) -> dict[bytes, Any]:
    return dict(node.client().execute_command("Q.STATS", "q"))


def _comparable(stats: dict[bytes, Any]) -> dict[bytes, Any]:
    """Q.STATS as every node of a group must agree on it. Not the age of the oldest
    message, which grows as it is read; and visible plus in flight only as a sum: a
    delivery past its deadline becomes visible on the leader in memory alone (no op),
    so a replica goes on counting it in flight."""
    out = dict(stats)
    del out[b"oldest_visible_age_ms"]
    out[b"visible"] += out.pop(b"in_flight")
    return out


def _settled(replicas: list[NaradProcess]) -> None:
    """Wait until every replica's link to its dead leader is down."""
    wait_until(
        lambda: all(
            replica.client().info("replication")["master_link_status"] == "down"
            for replica in replicas
        ),
        timeout=20,
    )


def _drain(node: NaradProcess) -> list[bytes]:
    """Every message visible on `node` now, each delivered once (bounded)."""
    r = node.client()
    delivered: list[bytes] = []
    for _ in range(MAX_OPS // 100):
        got = r.execute_command("Q.POP", "q", "COUNT", 100, "VISIBILITY", 600_000)
        if not got:
            return delivered
        delivered += [message[b"id"] for message in got]
    raise AssertionError("the queue did not run dry")


def _check_queue_accounts_for_every_entry(node: NaradProcess) -> None:
    stats = _stats(node)
    held = stats[b"visible"] + stats[b"in_flight"] + stats[b"delayed"] + stats[b"acked"]
    assert held == stats[b"pushed"] == node.client().xlen("q"), stats


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_leader_killed_under_load_fails_over_without_losing_an_acknowledged_write(
    tmp_path: Path, seed: int
) -> None:
    rng = random.Random(seed)
    kill_after = rng.randint(200, 3000)  # acknowledged writes before the kill
    with group(tmp_path, 2) as nodes:
        old, *replicas = nodes
        r = old.client()
        r.execute_command("Q.CREATE", "q")
        r.xadd("s", {"p": "first"})
        r.execute_command("CONFIG", "SET", "min-replicas-to-ack", "1")
        wait_synced(old, replicas)

        with Load(old) as load:
            wait_until(lambda: load.acked_writes() >= kill_after, timeout=30)
            old.kill()
        assert load.refused == [], load.refused[:3]
        assert load.consumer_acked, "the consumer acked nothing before the kill"

        # Promote the replica that holds the most (positions are prefixes of one
        # history, so it holds every commit either replica holds).
        _settled(replicas)
        new, other = sorted(replicas, key=offset, reverse=True)
        assert new.client().replicaof("NO", "ONE")
        follow(other, new)
        old.start()
        follow(old, new)
        wait_synced(new, [other, old])

        assert load.xadds <= _ids(new, "s")
        assert load.pushes <= _ids(new, "q")  # present: visible, in flight or acked
        for node in nodes:
            _check_queue_accounts_for_every_entry(node)

        # Deliveries left unacked come back after VISIBILITY_MS; then whatever can be
        # delivered again is exactly what was never acked.
        wait_until(lambda: _stats(new)[b"in_flight"] == 0, timeout=20)
        again = _drain(new)
        assert not set(again) & load.consumer_acked
        wait_synced(new, [other, old])
        for node in nodes:
            node.stop()
        assert_same_logs([new, other, old])


def test_a_replica_killed_again_and_again_under_load_resumes_and_ends_identical(
    tmp_path: Path,
) -> None:
    with group(tmp_path, 2, replica_extra=["--loglevel", "verbose"]) as nodes:
        leader, victim, steady = nodes
        r = leader.client()
        r.execute_command("Q.CREATE", "q")
        r.execute_command("CONFIG", "SET", "min-replicas-to-ack", "1")
        wait_synced(leader, [victim, steady])

        with Load(leader) as load:
            for kill in range(1, 4):
                wait_until(lambda k=kill: load.acked_writes() >= 800 * k, timeout=30)
                victim.kill()
                wait_until(lambda k=kill: load.acked_writes() >= 800 * k + 400, timeout=30)
                victim.start()  # it follows the leader it remembers, from its own position
                wait_until(lambda: _link_up(victim), timeout=20)
        assert load.refused == [], load.refused[:3]
        wait_synced(leader, [victim, steady])

        for key, acked in (("s", load.xadds), ("q", load.pushes)):
            want = r.xrange(key)
            assert acked <= {mid for mid, _ in want}
            for replica in (victim, steady):
                assert replica.client().xrange(key) == want
        want_stats = _comparable(_stats(leader))
        for node in nodes:
            assert _comparable(_stats(node)) == want_stats
        ups = [line for line in _whole_log(victim).splitlines() if "replication_link_up" in line]
        resumed_at = [int(line.split("position=")[1].split()[0].strip("'")) for line in ups]
        assert len(resumed_at) >= 4 and all(at > 0 for at in resumed_at[1:]), resumed_at
        for node in nodes:
            node.stop()
        assert_same_logs(nodes)


def _whole_log(node: NaradProcess) -> str:
    """Every line the node logged, over all its starts (`log()` is the tail only)."""
    return node.log_path.read_text(errors="replace")


def _link_up(replica: NaradProcess) -> bool:
    return replica.client().info("replication")["master_link_status"] == "up"


def test_a_replica_reconnects_after_its_leader_restarts(tmp_path: Path) -> None:
    with group(tmp_path, 1) as (leader, replica):
        leader.client().xadd("s", {"n": 1})
        wait_synced(leader, [replica])
        leader.kill()
        leader.start()  # same port, same data: the replica retries and continues
        leader.client().xadd("s", {"n": 2})
        wait_synced(leader, [replica], timeout=5)
        assert replica.client().xlen("s") == 2


def test_a_replica_configured_with_min_replicas_to_ack_still_answers_reads(
    tmp_path: Path,
) -> None:
    with group(tmp_path, 1, replica_extra=["--min-replicas-to-ack", "1"]) as (leader, replica):
        leader.client().xadd("s", {"n": 1})
        wait_synced(leader, [replica])
        client = replica.client(socket_timeout=5, retry=Retry(NoBackoff(), 0))
        try:
            assert client.xlen("s") == 1
            assert len(client.xrange("s")) == 1
        except redis.TimeoutError as exc:
            raise TimeoutError("the replica sent no reply") from exc


def test_a_node_killed_twice_starts_again(tmp_path: Path) -> None:
    node = NaradProcess(tmp_path / "node").start()
    try:
        r = node.client()
        r.execute_command("Q.CREATE", "q")
        for i in range(100):
            r.xadd("s", {"n": i})
            r.execute_command("Q.PUSH", "q", i)
        node.kill()
        node.start()  # replays the journal into the logs, then checkpoints
        node.client().xadd("s", {"n": "after"})  # "q" gets nothing more
        node.kill()
        node.start()
        assert node.client().xlen("q") == 100
        assert node.client().xlen("s") == 101
    finally:
        node.stop()


# -- partitions ---------------------------------------------------------------------------


@pytest.fixture
def network() -> Iterator[netns.Network]:
    netns.require()
    with netns.Network(3) as net:
        yield net


def _attempt(r: redis.Redis, argv: tuple[object, ...]) -> str:
    """The error a write met, or "acknowledged"."""
    try:
        r.execute_command(*argv)
    except redis.ResponseError as exc:
        return str(exc).split()[0]
    return "acknowledged"


def test_a_partitioned_leader_acknowledges_nothing_and_its_lone_commits_are_cut(
    network: netns.Network, tmp_path: Path
) -> None:
    nodes = [
        NaradProcess(tmp_path / f"n{node.index}", netns=node.namespace, host=node.address)
        for node in network.nodes
    ]
    old, new, other = nodes
    try:
        for node in nodes:
            node.start()
        for replica in (new, other):
            follow(replica, old)
        wait_synced(old, [new, other])
        r = _client(old)
        r.execute_command("Q.CREATE", "q")
        for i in range(20):
            r.xadd("s", {"phase": "before", "i": i})
        r.execute_command(
            "CONFIG", "SET", "min-replicas-to-ack", "1", "min-replicas-timeout", "500",
            "min-replicas-max-lag", "3",
        )
        r.xadd("s", {"phase": "before", "i": "quorum"})
        common = wait_synced(old, [new, other])

        # The leader is cut from both replicas; the test still reaches it.
        network.cut(0, 1)
        network.cut(0, 2)
        answers = []
        for i in range(12):
            answers.append(_attempt(r, ("XADD", "s", "*", "phase", "partitioned", "i", i)))
            answers.append(_attempt(r, ("Q.PUSH", "q", f"partitioned-{i}")))
        assert set(answers) <= {"NOREPL", "NOREPLICAS"}, answers
        assert "NOREPL" in answers  # some ran (committed here alone) before the refusals
        assert offset(old) > common

        assert new.client().replicaof("NO", "ONE")
        follow(other, new)
        wanted = [new.client().xadd("s", {"phase": "new leader", "i": i}) for i in range(10)]
        new.client().execute_command("Q.PUSH", "q", "after")
        wait_synced(new, [other])

        network.heal()
        follow(old, new)  # it keeps min-replicas-to-ack 1: a replica waits on no quorum
        wait_synced(new, [old, other])
        want = new.client().xrange("s")
        assert [mid for mid, f in want if f[b"phase"] == b"new leader"] == wanted
        assert b"partitioned" not in {f[b"phase"] for _, f in want}
        for node in (old, other):
            assert node.client().xrange("s") == want
            assert node.client().xrange("q") == new.client().xrange("q")
        assert any("event=truncating" in line for line in old.log().splitlines())
    finally:
        for node in nodes:
            if node.proc is not None:
                node.stop()
    assert_same_logs([new, old, other])
