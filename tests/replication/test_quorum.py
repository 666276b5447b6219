"""min-replicas-to-ack: a write is acknowledged once that many replicas hold it
durably; NOREPLICAS up front, NOREPL after min-replicas-timeout; WAIT and WAITAOF."""

from __future__ import annotations

import signal

import pytest
import redis

from tests.replication.cluster import group, offset, wait_synced
from tests.servers import wait_until

QUORUM = ["min-replicas-to-ack", "1", "min-replicas-timeout", "700", "min-replicas-max-lag", "2"]


def _configure(r: redis.Redis, *pairs: str) -> None:
    r.execute_command("CONFIG", "SET", *pairs)


def test_an_acknowledged_write_is_on_a_replica_before_its_reply(tmp_path):
    with group(tmp_path, 2) as (leader, *replicas):
        r = leader.client()
        _configure(r, *QUORUM[0:2])
        for i in range(200):
            r.xadd("s", {"i": i})
            # The reply came: the commit is durable on at least one replica.
            assert max(offset(replica) for replica in replicas) >= offset(leader)
        assert r.info("replication")["narad_quorum_offset"] == offset(leader)


def test_too_few_replicas_refuses_writes_up_front(tmp_path):
    with group(tmp_path, 1) as (leader, _):
        r = leader.client()
        r.xadd("s", {"a": 1})
        _configure(r, "min-replicas-to-ack", "2")
        with pytest.raises(redis.ResponseError, match="Not enough good replicas to write"):
            r.xadd("s", {"a": 2})
        with pytest.raises(redis.ResponseError, match="Not enough good replicas to write"):
            r.execute_command("Q.CREATE", "q")
        assert r.xlen("s") == 1  # reads go on
        _configure(r, "min-replicas-to-ack", "1")
        r.xadd("s", {"a": 3})
        assert r.xlen("s") == 2


def test_a_stopped_replica_gets_norepl_then_noreplicas_and_acks_resume_after(tmp_path):
    with group(tmp_path, 1) as (leader, replica):
        r = leader.client()
        _configure(r, *QUORUM)
        r.xadd("s", {"a": 1})
        assert replica.proc is not None
        replica.proc.send_signal(signal.SIGSTOP)
        try:
            with pytest.raises(redis.ResponseError, match="Not acknowledged"):
                r.xadd("s", {"a": 2})
            # A read could show that write: it waits and is not acknowledged either.
            with pytest.raises(redis.ResponseError, match="Not acknowledged"):
                r.xrange("s")
            # Replies that tell nothing of the keyspace do not wait.
            assert r.ping()
            assert r.execute_command("ROLE")[0] == b"master"
            assert r.info("replication")["connected_slaves"] == 1
            # Once the replica's last ack is older than min-replicas-max-lag, writes
            # are refused before they run.
            wait_until(lambda: _refused(r), timeout=10)
        finally:
            replica.proc.send_signal(signal.SIGCONT)
        wait_synced(leader, [replica])
        wait_until(lambda: not _refused(r), timeout=10)
        # The write that answered NOREPL was not acknowledged, yet it was committed
        # here and reached the replica: it may survive.
        assert [f[b"a"] for _, f in r.xrange("s")][:2] == [b"1", b"2"]


def _refused(r: redis.Redis) -> bool:
    try:
        r.xadd("probe", {"x": 1})
    except redis.ResponseError as exc:
        return "Not enough good replicas" in str(exc)
    return False


def test_a_stopped_replica_does_not_slow_commits_when_the_others_meet_the_quorum(tmp_path):
    with group(tmp_path, 2) as (leader, slow, fast):
        r = leader.client()
        _configure(r, *QUORUM)
        assert slow.proc is not None
        slow.proc.send_signal(signal.SIGSTOP)
        try:
            for i in range(300):
                r.xadd("s", {"i": i})  # no NOREPL: the other replica acks
            assert offset(fast) == offset(leader)
        finally:
            slow.proc.send_signal(signal.SIGCONT)
        wait_synced(leader, [slow, fast])


def test_wait_and_waitaof_count_replicas_that_hold_the_clients_writes(tmp_path):
    with group(tmp_path, 2) as (leader, *replicas):
        r = leader.client(single_connection_client=True)
        r.xadd("s", {"a": 1})
        assert r.execute_command("WAIT", 2, 5000) == 2
        assert r.execute_command("WAITAOF", 1, 2, 5000) == [1, 2]
        assert r.execute_command("WAIT", 0, 0) == 2
        pipe = r.pipeline(transaction=False)
        pipe.xadd("s", {"a": 2})
        pipe.execute_command("WAIT", 2, 5000)
        assert pipe.execute()[1] == 2
        assert replicas[0].proc is not None
        replicas[0].proc.send_signal(signal.SIGSTOP)
        try:
            r.xadd("s", {"a": 3})
            assert r.execute_command("WAIT", 2, 300) == 1  # the count at the timeout
        finally:
            replicas[0].proc.send_signal(signal.SIGCONT)
        with pytest.raises(redis.ResponseError, match="timeout is negative"):
            r.execute_command("WAIT", 1, -1)
        with pytest.raises(redis.ResponseError, match="not an integer"):
            r.execute_command("WAITAOF", "x", 1, 0)
        with pytest.raises(redis.ResponseError, match="WAIT cannot be used with replica"):
            replicas[1].client().execute_command("WAIT", 1, 0)
        with pytest.raises(redis.ResponseError, match="WAITAOF cannot be used with replica"):
            replicas[1].client().execute_command("WAITAOF", 0, 1, 0)
