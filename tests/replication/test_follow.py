"""A replica follows its leader's journal: catch-up, live commits, every kind of state,
reads on the replica and writes refused, restart after kill -9, ROLE and INFO."""

from __future__ import annotations

import subprocess
import threading

import pytest
import redis

from tests.replication.cluster import (
    SCHEMA,
    assert_same_logs,
    follow,
    group,
    offset,
    queue_stats,
    state_of,
    wait_synced,
    write_everything,
)
from tests.servers import NaradProcess, wait_until


def test_replicas_catch_up_then_follow_every_kind_of_change(tmp_path):
    leader = NaradProcess(tmp_path / "leader").start()
    replicas = [NaradProcess(tmp_path / f"r{i}").start() for i in (1, 2)]
    nodes = [leader, *replicas]
    try:
        r = leader.client()
        write_everything(r, "before")  # caught up from position 0
        for replica in replicas:
            follow(replica, leader)
        wait_synced(leader, replicas)
        write_everything(r, "live")  # followed as it is committed
        position = wait_synced(leader, replicas)
        assert position > 0
        for tag in ("before", "live"):
            want = state_of(r, tag)
            for replica in replicas:
                assert state_of(replica.client(), tag) == want
    finally:
        for node in nodes:
            node.stop()
    assert_same_logs(nodes)


def test_a_replica_serves_reads_and_refuses_every_write(tmp_path):
    with group(tmp_path, 1) as (leader, replica):
        r, rr = leader.client(), replica.client()
        r.xadd("s", {"a": 1})
        r.xgroup_create("s", "g", id="0")
        r.execute_command("Q.CREATE", "q")
        r.execute_command("Q.PUSH", "q", "x")
        wait_synced(leader, [replica])
        refused = [
            ("XADD", "s", "*", "a", "2"),
            ("XREADGROUP", "GROUP", "g", "c", "STREAMS", "s", ">"),
            ("XACK", "s", "g", "0-1"),
            ("XGROUP", "CREATE", "s", "g2", "0"),
            ("XTRIM", "s", "MAXLEN", "0"),
            ("XDEL", "s", "0-1"),
            ("DEL", "s"),
            ("FLUSHALL",),
            ("Q.POP", "q"),
            ("Q.PUSH", "q", "y"),
            ("Q.SCHEMA", "SET", "q", SCHEMA),
        ]
        for argv in refused:
            with pytest.raises(redis.ReadOnlyError):
                rr.execute_command(*argv)
        one = replica.client(single_connection_client=True)
        one.execute_command("MULTI")
        with pytest.raises(redis.ReadOnlyError):
            one.execute_command("XADD", "s", "*", "a", "3")
        with pytest.raises(redis.ResponseError, match="Transaction discarded"):
            one.execute_command("EXEC")
        assert rr.xlen("s") == 1
        assert queue_stats(rr, "q") == queue_stats(r, "q")
        assert offset(replica) == offset(leader)

        # A blocked XREAD on the replica wakes when the leader's entry arrives.
        got: list[object] = []
        reader = threading.Thread(
            target=lambda: got.append(replica.client().xread({"s": "$"}, block=10000))
        )
        reader.start()
        wait_until(lambda: replica.client().info("clients")["blocked_clients"] == 1)
        new_id = r.xadd("s", {"a": "live"})
        reader.join(timeout=10)
        assert got and got[0][0][1][0][0].decode() == new_id.decode()


def test_role_and_info_replication_read_as_on_redis(tmp_path):
    with group(tmp_path, 1) as (leader, replica):
        leader.client().xadd("s", {"a": 1})
        position = wait_synced(leader, [replica])
        role = leader.client().execute_command("ROLE")
        assert role == [b"master", position, [[b"127.0.0.1", str(replica.port).encode(),
                                                str(position).encode()]]]
        assert replica.client().execute_command("ROLE") == [
            b"slave", b"127.0.0.1", leader.port, b"connected", position
        ]
        out = subprocess.run(
            ["redis-cli", "-p", str(replica.port), "INFO", "replication"],
            capture_output=True, text=True, check=True,
        ).stdout
        fields = dict(line.split(":", 1) for line in out.split() if ":" in line)
        assert fields["role"] == "slave"
        assert fields["master_host"] == "127.0.0.1"
        assert fields["master_port"] == str(leader.port)
        assert fields["master_link_status"] == "up"
        assert fields["slave_repl_offset"] == str(position)
        assert fields["master_replid"] == leader.client().info("replication")["master_replid"]
        info = leader.client().info("replication")
        assert info["connected_slaves"] == 1
        assert info["slave0"]["port"] == replica.port
        assert info["slave0"]["offset"] == position
        assert info["slave0"]["state"] == "online"
        assert leader.client().execute_command("HELLO", "3")[b"role"] == b"master"
        assert replica.client().execute_command("HELLO", "3")[b"role"] == b"replica"
        assert replica.client().replicaof("127.0.0.1", leader.port) == (
            b"OK Already connected to specified master"
        )
        with pytest.raises(redis.ResponseError, match="Invalid master port"):
            replica.client().execute_command("REPLICAOF", "127.0.0.1", "port")


def test_a_replica_killed_under_load_resumes_from_its_own_position(tmp_path):
    with group(tmp_path, 1, replica_extra=["--loglevel", "verbose"]) as (leader, replica):
        r = leader.client()
        stop = threading.Event()
        acked: list[bytes] = []

        def produce() -> None:
            client = leader.client()
            while not stop.is_set() and len(acked) < 20_000:
                pipe = client.pipeline(transaction=False)
                for _ in range(50):
                    pipe.xadd("load", {"v": "x" * 50})
                acked.extend(pipe.execute())

        worker = threading.Thread(target=produce)
        worker.start()
        wait_until(lambda: len(acked) > 2000)
        replica.kill()
        wait_until(lambda: len(acked) > 6000)
        stop.set()
        worker.join(timeout=20)
        replica.start()  # it follows the leader it followed before, from where it was
        wait_synced(leader, [replica])
        assert replica.client().xlen("load") == r.xlen("load") == len(acked)
        links = [line for line in replica.log().splitlines() if "replication_link_up" in line]
        resumed_at = int(links[-1].split("position=")[1].split()[0].strip("'"))
        assert resumed_at > 0  # from its own position: no copy from scratch
        assert_same_logs_after_stop([leader, replica])


def assert_same_logs_after_stop(nodes: list[NaradProcess]) -> None:
    for node in nodes:
        node.stop()
    assert_same_logs(nodes)
