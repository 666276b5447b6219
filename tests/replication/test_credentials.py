"""A replica must prove who it is to count: a replica without the leader's credentials
is refused at its handshake and counts for nothing toward `min-replicas-to-ack`; once
given them (`masterauth`), it follows and counts (issue 29)."""

from __future__ import annotations

from pathlib import Path

import pytest
import redis

from tests.servers import NaradProcess, wait_until

SECRET = "s3cret-leader"


def test_a_replica_without_credentials_is_refused_and_counts_for_nothing(tmp_path: Path) -> None:
    leader = NaradProcess(
        tmp_path / "leader",
        ["--requirepass", SECRET, "--min-replicas-to-ack", "1", "--min-replicas-timeout", "500"],
    ).start()
    replica = NaradProcess(tmp_path / "replica", ["--repl-timeout", "2"]).start()
    try:
        client = leader.client(password=SECRET)
        follower = replica.client()
        assert follower.replicaof(leader.host, leader.port)
        wait_until(lambda: "event=replication_link_down" in replica.log_path.read_text(),
                   timeout=10)
        assert "NOAUTH" in replica.log_path.read_text()
        assert client.info("replication")["connected_slaves"] == 0
        assert follower.info("replication")["master_link_status"] == "down"
        with pytest.raises(redis.ResponseError, match="NOREPLICAS"):
            client.xadd("s", {"f": "v"})

        follower.config_set("masterauth", SECRET)
        wait_until(lambda: client.info("replication")["connected_slaves"] == 1, timeout=10)
        assert client.xadd("s", {"f": "v"})
        wait_until(lambda: follower.xlen("s") == 1, timeout=10)
    finally:
        replica.stop()
        leader.stop()
