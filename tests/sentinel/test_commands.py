"""The SENTINEL commands and events through redis-py and redis-cli, in RESP2 and RESP3:
Redis Sentinel's reply shapes, discovery of replicas and sentinels, and its errors."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis

from tests.sentinel.cluster import NAME, deployment
from tests.servers import free_port, wait_until
from tests.tls import TLSClients, tls_connection


@pytest.mark.parametrize("protocol", [2, 3])
def test_sentinel_answers_as_redis_sentinel(tmp_path: Path, protocol: int) -> None:
    with deployment(tmp_path, protocol=protocol) as found:
        leader, *replicas = found.nodes
        client = found.sentinels[0].client(protocol=protocol)
        masters = client.sentinel_masters()
        state = masters[NAME]
        assert (state["ip"], state["port"]) == (leader.host, leader.port)
        assert state["is_master"] and not state["is_sdown"] and not state["is_odown"]
        assert state["num-slaves"] == 2
        assert state["num-other-sentinels"] == 2
        assert state["quorum"] == 2
        assert state["down-after-milliseconds"] == 1000
        host, port = client.sentinel_get_master_addr_by_name(NAME)
        assert (host.decode(), port) == (leader.host, leader.port)
        shown = {(r["ip"], r["port"]) for r in client.sentinel_slaves(NAME)}
        assert shown == {(r.host, r.port) for r in replicas}
        for replica in client.sentinel_slaves(NAME):
            assert replica["is_slave"] and replica["master-link-status"] == "ok"
            assert replica["master-port"] == leader.port
        peers = client.sentinel_sentinels(NAME)
        assert {p["port"] for p in peers} == {s.port for s in found.sentinels[1:]}
        assert all(p["is_sentinel"] for p in peers)
        myid = client.execute_command("SENTINEL", "MYID")
        assert len(myid) == 40
        assert {p["runid"] for p in found.sentinels[1].client(protocol=protocol)
                .sentinel_sentinels(NAME)} >= {myid.decode()}
        assert client.execute_command("ROLE") == [b"sentinel", [NAME.encode()]]
        assert client.execute_command("SENTINEL", "CKQUORUM", NAME).startswith(b"OK 3 usable")
        info = client.info("sentinel")
        assert info["sentinel_masters"] == 1
        assert info["master0"]["status"] == "ok"
        # redis-py's Sentinel client finds the leader and the replicas.
        sentinel = found.sentinel_client()
        assert sentinel.discover_master(NAME) == (leader.host, leader.port)
        assert set(sentinel.discover_slaves(NAME)) == {(r.host, r.port) for r in replicas}
        master = sentinel.master_for(NAME, socket_timeout=2)
        assert master.xadd("s", {"a": "1"})
        reader = sentinel.slave_for(NAME, socket_timeout=2)
        deadline = time.monotonic() + 5
        while reader.xlen("s") != 1 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert reader.xlen("s") == 1


def test_sentinel_errors_and_redis_cli(tmp_path: Path) -> None:
    with deployment(tmp_path, replicas=1, sentinels=1) as found:
        sentinel = found.sentinels[0]
        client = sentinel.client(protocol=2)
        tls_flags = sentinel.certs.cli_flags() if isinstance(sentinel, TLSClients) else []
        for args, error in [
            (("SENTINEL", "MASTER", "nope"), "No such master with that name"),
            (("SENTINEL", "MASTER"), "wrong number of arguments for 'sentinel|master'"),
            (("SENTINEL", "NOPE"), "unknown subcommand 'NOPE'. Try SENTINEL HELP."),
            (("SENTINEL", "MONITOR", "x", "127.0.0.1", "1", "0"), "Quorum must be 1 or greater."),
            (("SENTINEL", "MONITOR", "x", "127.0.0.1", "p", "1"), "Invalid port"),
            (("SENTINEL", "MONITOR", NAME, "127.0.0.1", "1", "1"), "Duplicated master name"),
            (("SENTINEL", "SET", NAME, "quorum"), "wrong number of arguments"),
            (("PUBLISH", "x", "y"), "Only HELLO messages are accepted by Sentinel instances."),
            (("XADD", "s", "*", "a", "1"), "unknown command 'XADD'"),
        ]:
            with pytest.raises(redis.ResponseError, match=error):
                client.execute_command(*args)
        assert client.execute_command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", "nope") is None
        with pytest.raises(redis.ResponseError, match="NOQUORUM 1 usable Sentinels"):
            client.execute_command("SENTINEL", "CKQUORUM", NAME)
        assert client.execute_command("SENTINEL", "SET", NAME, "down-after-milliseconds",
                                      "2000") == b"OK"
        assert client.sentinel_master(NAME)["down-after-milliseconds"] == 2000
        assert "sentinel down-after-milliseconds mymaster 2000" in sentinel.conf.read_text()
        # Garbage on the socket is an error reply and a closed connection; the sentinel
        # goes on serving.
        out = subprocess.run(
            ["redis-cli", "-p", str(sentinel.port), *tls_flags,
             "SENTINEL", "GET-MASTER-ADDR-BY-NAME", NAME],
            capture_output=True, text=True, timeout=10,
        ).stdout.split()
        assert out == [found.nodes[0].host, str(found.nodes[0].port)]
        with (tls_connection(sentinel.host, sentinel.port, sentinel.certs.context())
              if isinstance(sentinel, TLSClients)
              else socket.create_connection((sentinel.host, sentinel.port))) as sock:
            sock.sendall(b"*1\r\n$-5\r\n")
            assert sock.recv(100).startswith(b"-ERR Protocol error")
        assert client.ping()


@pytest.mark.parametrize("protocol", [2, 3])
def test_events_are_published(tmp_path: Path, protocol: int) -> None:
    with deployment(tmp_path, protocol=protocol, replicas=1, sentinels=1) as found:
        client = found.sentinels[0].client(protocol=protocol)
        pubsub = client.pubsub()
        pubsub.psubscribe("*")
        pubsub.subscribe("+sdown")
        replica = found.nodes[1]
        replica.kill()
        seen: list[tuple[str, str]] = []
        deadline = time.monotonic() + 5
        wanted = {("+sdown", "message"), ("+sdown", "pmessage")}
        while time.monotonic() < deadline and not wanted <= set(seen):
            message = pubsub.get_message(timeout=0.2)
            if message and message["type"] in ("message", "pmessage"):
                seen.append((message["channel"].decode(), message["type"]))
                if message["channel"] == b"+sdown" and message["type"] == "message":
                    expected = (f"slave {replica.host}:{replica.port} {replica.host} "
                                f"{replica.port} @ {NAME} {found.nodes[0].host} "
                                f"{found.nodes[0].port}")
                    assert message["data"].decode() == expected
        assert ("+sdown", "message") in seen
        assert ("+sdown", "pmessage") in seen
        replica.start()


def test_ckquorum_and_info_warn_when_acks_are_too_few_for_a_majority(tmp_path: Path) -> None:
    with deployment(tmp_path, replicas=2, sentinels=2) as found:
        client = found.sentinels[0].client(protocol=2)
        found.nodes[0].client().config_set("min-replicas-to-ack", 0)

        def warned() -> bool:
            return "master0_warning" in client.info("sentinel")

        wait_until(warned, timeout=10)
        with pytest.raises(redis.ResponseError, match=r"UNSAFE .*min-replicas-to-ack is 0 on "
                           "the master: with 3 data nodes it must be at least 1"):
            client.execute_command("SENTINEL", "CKQUORUM", NAME)


def test_started_as_narad_server_sentinel_with_a_password(tmp_path: Path) -> None:
    conf = tmp_path / "s.conf"
    conf.write_text("requirepass pw\nmetrics-port 0\nsentinel monitor m 127.0.0.1 1 1\n")
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "narad", "server", str(conf), "--sentinel", "--port", str(port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        client = redis.Redis(port=port, protocol=2)
        wait_until(lambda: _answers(port), timeout=20)
        with pytest.raises(redis.AuthenticationError):
            client.execute_command("SENTINEL", "MASTERS")
        with pytest.raises(redis.AuthenticationError):
            redis.Redis(port=port, password="wrong", protocol=2).ping()
        authed = redis.Redis(port=port, password="pw", protocol=3)
        assert authed.sentinel_masters()["m"]["is_sdown"] is False
        assert "sentinel myid " in conf.read_text()  # its state is recorded
    finally:
        proc.kill()
        proc.wait()
    missing = subprocess.run([sys.executable, "-m", "narad", "sentinel"], capture_output=True,
                             text=True, timeout=60)
    assert missing.returncode == 1
    assert "Sentinel needs config file on disk to save state. Exiting..." in missing.stderr


def _answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(64).startswith(b"-NOAUTH")
    except OSError:
        return False


def test_one_vote_per_epoch_recorded_before_the_answer(tmp_path: Path) -> None:
    with deployment(tmp_path, replicas=1, sentinels=1) as found:
        sentinel = found.sentinels[0]
        client = sentinel.client(protocol=2)
        leader = found.nodes[0]
        a, b = "a" * 40, "b" * 40

        def ask(epoch: int, run_id: str) -> list[object]:
            reply: list[object] = client.execute_command(
                "SENTINEL", "IS-MASTER-DOWN-BY-ADDR", leader.host, leader.port, epoch, run_id)
            return reply

        assert ask(5, a) == [0, a.encode(), 5]
        assert ask(5, b) == [0, a.encode(), 5]  # the vote of epoch 5 stands
        assert ask(4, b) == [0, a.encode(), 5]  # an older epoch gets the current vote
        assert ask(6, b) == [0, b.encode(), 6]
        assert ask(7, "*") == [0, b"*", 0]  # no vote asked: the down state alone
        text = sentinel.conf.read_text()
        assert "sentinel leader-epoch mymaster 6" in text
        assert "sentinel current-epoch 6" in text  # "*" asks no vote: no epoch taken
        with pytest.raises(redis.ResponseError, match="value is not an integer"):
            ask("x", a)  # type: ignore[arg-type]


def test_monitor_remove_and_reset_at_runtime(tmp_path: Path) -> None:
    with deployment(tmp_path, replicas=1, sentinels=1) as found:
        sentinel = found.sentinels[0]
        client = sentinel.client(protocol=3)
        leader = found.nodes[0]
        pubsub = client.pubsub()
        pubsub.subscribe("+monitor", "-monitor", "+reset-master")
        assert client.execute_command("SENTINEL", "MONITOR", "other", leader.host,
                                      leader.port, 1) == b"OK"
        assert set(client.sentinel_masters()) == {NAME, "other"}
        assert "sentinel monitor other" in sentinel.conf.read_text()
        wait_until(lambda: client.sentinel_master("other")["num-slaves"] == 1)
        assert client.execute_command("SENTINEL", "RESET", "oth*") == 1
        assert client.sentinel_master("other")["num-slaves"] == 0  # found again later
        wait_until(lambda: client.sentinel_master("other")["num-slaves"] == 1)
        assert client.execute_command("SENTINEL", "REMOVE", "other") == b"OK"
        assert set(client.sentinel_masters()) == {NAME}
        assert "other" not in sentinel.conf.read_text()
        kinds = []
        deadline = time.monotonic() + 5
        while len(kinds) < 3 and time.monotonic() < deadline:
            message = pubsub.get_message(timeout=0.2)
            if message and message["type"] == "message":
                kinds.append(message["channel"])
        assert kinds == [b"+monitor", b"+reset-master", b"-monitor"]
        cache = client.execute_command("SENTINEL", "INFO-CACHE", NAME)
        assert cache[0] == NAME.encode() and len(cache[1]) == 2
        assert b"role:master" in cache[1][0][1]
