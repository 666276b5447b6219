"""A replica applies the state ops of the Redis 8 stream commands as its leader did,
live and again when it restarts after kill -9 (the ops and workload are those of
tests/server/test_streams_redis8.py)."""

from __future__ import annotations

from tests.replication.cluster import assert_same_logs, group, wait_synced
from tests.server.test_streams_redis8 import state_of, write_new_ops


def test_a_replica_replays_the_new_ops(tmp_path):
    with group(tmp_path, replicas=1) as nodes:
        leader, replica = nodes
        write_new_ops(leader.client())
        wait_synced(leader, [replica])
        want = state_of(leader.port)
        assert state_of(replica.port) == want
        replica.kill()
        replica.start()
        assert state_of(replica.port) == want
        wait_synced(leader, [replica])
        for node in nodes:
            node.stop()
    assert_same_logs(nodes)
