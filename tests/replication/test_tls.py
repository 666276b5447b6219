"""Replication over TLS: replicas with `tls-replication yes` follow a leader whose
only listener is its TLS port, presenting their certificate to it, through the
journal and through a full copy; and a replica whose certificate the leader's CA
did not sign is refused while the others go on."""

from __future__ import annotations

import socket
import threading
from pathlib import Path

from tests.replication.cluster import (
    assert_same_logs,
    follow,
    group,
    state_of,
    wait_synced,
    write_everything,
)
from tests.replication.test_fullcopy import SHORT_JOURNAL, _copies, _fill, _journal_start
from tests.servers import wait_until
from tests.tls import Certificates, TLSNaradProcess, tls_nodes


def test_replicas_follow_a_tls_only_leader_journal_and_full_copy(
    tmp_path: Path, tls_certs: Certificates
) -> None:
    make = tls_nodes(tls_certs)
    with group(tmp_path, 1, extra=SHORT_JOURNAL, make=make) as nodes:
        leader, replica = nodes
        assert leader.client().info("server")["tcp_port"] == leader.port
        write_everything(leader.client(), "before")
        _fill(leader, 4)
        wait_until(lambda: _journal_start(leader) > 0, timeout=20)
        # A new, empty replica is behind the kept journal: a full copy, over TLS.
        late = make(tmp_path / "late", []).start()
        nodes.append(late)
        follow(late, leader)
        write_everything(leader.client(), "after")
        wait_synced(leader, [replica, late], timeout=60)
        assert _copies(late) == 1
        assert _copies(replica) == 0
        info = leader.client().info("replication")
        ports = {info[f"slave{i}"]["port"] for i in range(2)}
        assert ports == {replica.port, late.port}  # each announced its TLS port
        for tag in ("before", "after"):
            expected = state_of(leader.client(), tag)
            assert state_of(late.client(), tag) == expected
            assert state_of(replica.client(), tag) == expected
        for node in nodes:
            node.stop()
        assert_same_logs(nodes)


def test_a_replica_with_a_certificate_of_another_ca_is_refused(
    tmp_path: Path, tls_certs: Certificates
) -> None:
    make = tls_nodes(tls_certs)
    with group(tmp_path, 1, make=make) as nodes:
        leader, replica = nodes
        stranger = make(
            tmp_path / "stranger",
            ["--tls-client-cert-file", tls_certs.cert("stranger"),
             "--tls-client-key-file", tls_certs.key("stranger")],
        ).start()
        nodes.append(stranger)
        follow(stranger, leader)
        leader.client().xadd("s", {"a": 1})
        wait_synced(leader, [replica])
        wait_until(lambda: "event=replication_link_down" in stranger.log(), timeout=30)
        assert stranger.client().info("replication")["master_link_status"] == "down"
        assert stranger.client().xlen("s") == 0
        assert leader.client().info("replication")["connected_slaves"] == 1


def test_a_leader_that_stalls_the_handshake_holds_nothing_up(
    tmp_path: Path, tls_certs: Certificates
) -> None:
    """A "leader" that accepts the connection and never answers the handshake: the
    replica's connect, handshake included, times out after repl-timeout and is tried
    again, while the replica serves its clients throughout."""
    with socket.create_server(("127.0.0.1", 0)) as silent:
        held: list[socket.socket] = []
        stop = threading.Event()

        def accept() -> None:
            silent.settimeout(0.2)
            while not stop.is_set():
                try:
                    held.append(silent.accept()[0])  # kept open, never read
                except TimeoutError:
                    continue

        acceptor = threading.Thread(target=accept)
        acceptor.start()
        replica = TLSNaradProcess(tmp_path / "r", tls_certs, ["--repl-timeout", "1"]).start()
        try:
            r = replica.client()
            assert r.replicaof("127.0.0.1", silent.getsockname()[1])
            wait_until(lambda: replica.log().count("event=replication_link_down") >= 1
                       and len(held) >= 2, timeout=30)
            assert "TimeoutError" in replica.log()
            assert r.ping()
            assert r.info("replication")["master_link_status"] == "down"
        finally:
            replica.stop()
            stop.set()
            acceptor.join()
            for sock in held:
                sock.close()
