"""Promotion begins a new leader epoch; a node that follows the new leader first cuts
the commits its history holds and the new leader's does not (crash-safe), so no
divergent commit survives on any node."""

from __future__ import annotations

import socket

import pytest
import redis

from tests.replication.cluster import assert_same_logs, follow, group, wait_synced
from tests.servers import NaradProcess, wait_until


def _ids(node: NaradProcess, key: str) -> list[bytes]:
    return [mid for mid, _ in node.client().xrange(key)]


@pytest.mark.parametrize("old_leader_crashes", [False, True])
def test_an_old_leader_cuts_what_it_committed_alone_then_follows(tmp_path, old_leader_crashes):
    extra = ["--loglevel", "verbose"]
    with group(tmp_path, 2, extra=extra) as (old, new, other):
        r = old.client()
        for i in range(50):
            r.xadd("s", {"phase": "common", "i": i})
        r.xgroup_create("s", "g", id="0")
        r.xreadgroup("g", "c", {"s": ">"}, count=10)
        common = wait_synced(old, [new, other])

        assert new.client().replicaof("NO", "ONE")
        new.client().xadd("s", {"phase": "new leader"})
        assert new.client().info("replication")["narad_epoch"] == 1
        follow(other, new)

        # The old leader, not told yet, goes on acknowledging writes alone (no
        # min-replicas-to-ack): its history and the new leader's part at `common`.
        for i in range(30):
            r.xadd("s", {"phase": "divergent", "i": i})
        r.xreadgroup("g", "c", {"s": ">"}, count=40)
        r.xadd("only-on-old", {"x": 1})
        assert old.client().info("replication")["master_repl_offset"] > common
        if old_leader_crashes:
            old.kill()
            old.start()
        follow(old, new)
        for i in range(20):
            new.client().xadd("s", {"phase": "new leader", "i": i})
        wait_synced(new, [old, other])

        want = new.client().xrange("s")
        assert b"divergent" not in {fields[b"phase"] for _, fields in want}
        for node in (old, other):
            assert node.client().xrange("s") == want
            assert node.client().xpending("s", "g") == new.client().xpending("s", "g")
            assert node.client().exists("only-on-old") == 0
            assert node.client().info("replication")["narad_epoch"] == 1
        assert any("event=truncating" in line for line in old.log().splitlines())
    assert_same_logs([new, old, other])


def test_a_replica_ahead_of_the_promoted_one_cuts_its_extra_commits(tmp_path):
    """Two replicas, one further along when the leader dies: the one that is promoted
    has less; the other must cut what it holds beyond the promotion point."""
    with group(tmp_path, 2) as (leader, ahead, behind):
        r = leader.client()
        for i in range(20):
            r.xadd("s", {"i": i})
        wait_synced(leader, [ahead, behind])
        assert behind.proc is not None
        behind.kill()  # it keeps its first 20 entries
        for i in range(20, 40):
            r.xadd("s", {"i": i})
        wait_synced(leader, [ahead])
        leader.kill()
        behind.start()
        assert behind.client().replicaof("NO", "ONE")
        behind.client().xadd("s", {"i": "after"})
        follow(ahead, behind)
        wait_synced(behind, [ahead])
        assert ahead.client().xrange("s") == behind.client().xrange("s")
        assert ahead.client().xlen("s") == 21
    assert_same_logs([behind, ahead])


def test_a_leader_that_meets_a_higher_epoch_steps_down(tmp_path):
    with group(tmp_path, 1) as (old, new):
        old.client().xadd("s", {"a": 1})
        wait_synced(old, [new])
        assert new.client().replicaof("NO", "ONE")  # epoch 1, unknown to `old`
        new.client().xadd("s", {"a": 2})
        watcher = socket.create_connection((old.host, old.port), timeout=5)
        watcher.sendall(b"PING\r\n")
        assert watcher.recv(16) == b"+PONG\r\n"
        follow(new, old)  # its handshake shows `old` the higher epoch
        wait_until(lambda: _refuses_writes(old))
        assert watcher.recv(16) == b""  # the step-down closed every client connection
        watcher.close()
        assert old.client().xlen("s") == 1  # reads go on
        assert new.client().replicaof("NO", "ONE")
        follow(old, new)
        wait_synced(new, [old])
        assert old.client().xlen("s") == 2
        assert new.client().info("replication")["narad_epoch"] == 2


def _refuses_writes(node: NaradProcess) -> bool:
    try:
        node.client().xadd("probe", {"x": 1})
    except redis.ReadOnlyError:
        return True
    return False
