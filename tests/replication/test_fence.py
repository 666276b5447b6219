"""FENCE and PROMOTE, the data nodes' half of a sentinel's failover (docs/failover.md):
a fenced node takes no commit of an older leader, a fenced leader acknowledges no more
writes, and PROMOTE makes the fenced node the leader of exactly the promised epoch."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import redis

from tests.replication.cluster import follow, group, offset, wait_synced
from tests.servers import wait_until

QUORUM = ["--min-replicas-to-ack", "1", "--min-replicas-timeout", "2000"]


def _answer(client: redis.Redis, *args: object) -> dict[bytes, object]:
    reply = client.execute_command("FENCE", *args)
    if isinstance(reply, dict):  # RESP3
        return reply
    return dict(zip(reply[::2], reply[1::2], strict=True))


def test_a_fenced_replica_takes_nothing_more_from_its_old_leader(tmp_path: Path) -> None:
    with group(tmp_path, 2) as (leader, one, two):
        leader.client().xadd("s", {"a": "1"})
        position = wait_synced(leader, [one, two])
        answer = _answer(one.client(), 5)
        assert answer[b"position"] == position
        assert answer[b"role"] == b"slave"
        assert answer[b"copying"] == 0
        assert answer[b"history"] == leader.client().info("replication")["master_replid"].encode()
        # The old leader is refused on the fenced replica's next PSYNC, and fenced by it.
        def refused() -> bool:
            try:
                leader.client().xadd("s", {"a": "2"})
            except redis.ReadOnlyError:
                return True
            return False

        wait_until(refused)
        assert "event=fenced epoch_seen=5" in leader.log()
        assert offset(one) == position
        assert int(one.client().info("replication")["narad_promised_epoch"]) == 5
        # A promise is not taken back, nor repeated.
        with pytest.raises(redis.ResponseError, match=r"^STALE epoch 5 is not above"):
            one.client().execute_command("FENCE", 5)
        with pytest.raises(redis.ResponseError, match="not the one this node promised"):
            one.client().execute_command("PROMOTE", 4)


def test_promote_leads_in_the_promised_epoch_and_the_old_leader_truncates(
    tmp_path: Path,
) -> None:
    with group(tmp_path, 2, extra=QUORUM) as (leader, one, two):
        for i in range(20):
            leader.client().xadd("s", {"i": str(i)})
        wait_synced(leader, [one, two])
        for node in (one, two):
            _answer(node.client(), 3)
        assert one.client().execute_command("PROMOTE", 3) == b"OK"
        follow(two, one)
        follow(leader, one)
        one.client().xadd("s", {"i": "after"})
        wait_synced(one, [leader, two])
        for node in (one, two, leader):
            assert node.client().xlen("s") == 21
            assert int(node.client().info("replication")["narad_epoch"]) == 3


def test_a_fenced_leader_acknowledges_nothing_more(tmp_path: Path) -> None:
    with group(tmp_path, 1, extra=QUORUM) as (leader, replica):
        leader.client().xadd("s", {"a": "1"})
        wait_synced(leader, [replica])
        answer = _answer(leader.client(), 2)
        assert answer[b"role"] == b"master"
        with pytest.raises(redis.ReadOnlyError):
            leader.client().xadd("s", {"a": "2"})
        # The promise outlives a restart (kill -9 included).
        leader.kill()
        leader.start()
        with pytest.raises(redis.ReadOnlyError):
            leader.client().xadd("s", {"a": "3"})
        assert int(leader.client().info("replication")["narad_promised_epoch"]) == 2
        # REPLICAOF NO ONE still makes it a leader, above the promise.
        leader.client().replicaof("no", "one")
        wait_until(lambda: leader.client().info("replication")["narad_epoch"] == 3)


def test_a_draining_leader_refuses_writes_and_its_replicas_catch_up(tmp_path: Path) -> None:
    with group(tmp_path, 2, extra=QUORUM) as (leader, one, two):
        writer = leader.client()
        for i in range(50):
            writer.xadd("s", {"i": str(i)})
        answer = _answer(leader.client(), 4, "DRAIN")
        assert leader.client().info("replication")["master_failover_state"] == "waiting-for-sync"
        with pytest.raises(redis.ReadOnlyError):
            writer.xadd("s", {"i": "x"})
        # Its replicas stay linked and reach the drained position.
        wait_until(lambda: offset(one) == offset(two) == answer[b"position"])
        assert leader.client().info("replication")["connected_slaves"] == 2
        _answer(one.client(), 4)
        _answer(two.client(), 4)
        one.client().execute_command("PROMOTE", 4)
        follow(two, one)
        follow(leader, one)
        one.client().xadd("s", {"i": "new"})
        wait_synced(one, [two, leader])
        assert leader.client().xlen("s") == 51


def test_fence_refuses_bad_input(tmp_path: Path) -> None:
    with group(tmp_path, 0) as (leader,):
        client = leader.client()
        for args, error in [
            ((), "wrong number of arguments"),
            (("x",), "value is not an integer"),
            (("0",), "the epoch must be at least 1"),
            (("2", "NOW"), "syntax error"),
            (("2", "DRAIN", "x"), "syntax error"),
        ]:
            with pytest.raises(redis.ResponseError, match=error):
                client.execute_command("FENCE", *args)
        with pytest.raises(redis.ResponseError, match="not the one this node promised"):
            client.execute_command("PROMOTE", 1)
        time.sleep(0.05)
        assert client.xadd("s", {"a": "1"})  # nothing changed


EPOCH_MAX = (1 << 32) - 1  # a journal record holds the epoch in 32 bits


def test_epochs_past_what_a_record_holds_are_refused_before_anything_is_promised(
    tmp_path: Path,
) -> None:
    """FENCE, PROMOTE and PSYNC refuse an epoch a journal record cannot hold, before
    anything is promised or written: the node keeps serving and starts again."""
    with group(tmp_path, 0) as (leader,):
        client = leader.client()
        too_big = EPOCH_MAX + 1
        for command in (("FENCE", too_big), ("PROMOTE", too_big), ("PSYNC", "x", 0, too_big),
                        ("PSYNC", "x", 0, 0, too_big), ("FENCE", -1)):
            with pytest.raises(redis.ResponseError, match="the epoch must be from 0 to"):
                client.execute_command(*command)
        assert client.xadd("s", {"a": "1"})  # nothing was promised: still leading
        assert not (leader.folder / "data" / "fence").exists()
        leader.restart()
        assert leader.client().xlen("s") == 1


def test_the_largest_epoch_is_promised_and_led_in(tmp_path: Path) -> None:
    """FENCE and PROMOTE of the largest epoch a record holds work and survive a
    restart; no promise can follow it."""
    with group(tmp_path, 0) as (leader,):
        client = leader.client()
        _answer(client, EPOCH_MAX)
        client.execute_command("PROMOTE", EPOCH_MAX)
        wait_until(lambda: _xadd(client), timeout=5)
        leader.restart()
        client = leader.client()
        assert client.execute_command("INFO", "replication").get("narad_promised_epoch") == (
            EPOCH_MAX
        )
        assert client.xadd("s", {"b": "2"})
        with pytest.raises(redis.ResponseError, match="is not above this node's epoch"):
            client.execute_command("FENCE", EPOCH_MAX)


def test_no_epoch_left_to_lead_in_is_refused_and_the_node_lives(tmp_path: Path) -> None:
    """A client that claims, as a replica, a promise of the last epoch fences the
    leader; leading again would need an epoch above it, which no record holds:
    REPLICAOF NO ONE is refused with a clear error instead of a commit that fails,
    and the node serves reads and starts again."""
    with group(tmp_path, 0) as (leader,):
        client = leader.client()
        assert client.xadd("s", {"a": "1"})
        with pytest.raises(redis.ResponseError, match="promised a failover epoch"):
            client.execute_command("PSYNC", "x", 0, 0, EPOCH_MAX)
        client = leader.client()  # the fenced leader closed its clients
        wait_until(lambda: _refuses_writes(client), timeout=5)
        with pytest.raises(redis.ResponseError, match="no leader epoch is left"):
            client.execute_command("REPLICAOF", "NO", "ONE")
        assert client.xlen("s") == 1
        assert leader.proc is not None and leader.proc.poll() is None
        leader.restart()
        assert leader.client().xlen("s") == 1


def _refuses_writes(client: redis.Redis) -> bool:
    try:
        client.xadd("s", {"b": "2"})
    except redis.ReadOnlyError:
        return True
    except (redis.ResponseError, redis.ConnectionError):
        return False
    return False


def _xadd(client: redis.Redis) -> bool:
    try:
        return bool(client.xadd("s", {"a": "1"}))
    except redis.ResponseError:
        return False
