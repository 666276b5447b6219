"""Sentinels over TLS and with users: three data nodes and three sentinels, each
listening on a TLS port alone, every link between them TLS (`tls-replication yes`),
passwords everywhere, replicas and sentinels logged in to the data nodes as users
of least privilege, redis-py's Sentinel client with ssl=True and a password,
unchanged. The leader killed -9: the sentinels fail over, and every acknowledged
write is on the new leader (tests/sentinel/test_faults.py's checks). A client
without a certificate, or with one from another CA, is refused by a sentinel that
goes on serving the others."""

from __future__ import annotations

import socket
from collections import Counter
from pathlib import Path

import pytest
import redis

from tests.sentinel.cluster import NAME, deployment
from tests.sentinel.test_faults import _check, _run_fault
from tests.tls import Certificates, tls_connection


def test_leader_killed_with_users_and_tls_everywhere(
    tmp_path: Path, tls_certs: Certificates,
) -> None:
    with deployment(tmp_path, protocol=3, certs=tls_certs, users=True) as found:
        sentinel = found.sentinels[0]
        links = found.nodes[0].client().client_list()
        # Each replica's link, and each sentinel's, as its own user.
        assert Counter(c["user"] for c in links if c["flags"] == "S") == {"replica": 2}
        assert Counter(c["user"] for c in links
                       if c["name"].startswith("sentinel:"))["sentinel"] == 3, links
        with pytest.raises(redis.AuthenticationError):
            found.nodes[0].client(password=None).ping()
        assert sentinel.client().info("server")["tcp_port"] == sentinel.port
        for client in ("stranger", None):
            try:
                with tls_connection(sentinel.host, sentinel.port,
                                    tls_certs.context(client)) as sock:
                    sock.sendall(b"PING\r\n")
                    answer = sock.recv(64)
            except OSError:
                answer = b""
            assert answer == b""
        with socket.create_connection((sentinel.host, sentinel.port), timeout=5) as plain:
            plain.sendall(b"PING\r\n")
            try:
                answer = plain.recv(64)
            except ConnectionResetError:
                answer = b""
            assert b"PONG" not in answer
        master = sentinel.client(protocol=2).sentinel_master(NAME)
        assert master["num-other-sentinels"] == 2
        load, new = _run_fault(found, lambda old: old.kill())
        found.nodes[0].start()  # its old config: it leads, until told to follow
        _check(found, load, new)
