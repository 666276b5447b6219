"""A data node's TLS port, through real processes and real clients (redis-py with
ssl=True, redis-cli --tls): who is served and who is refused under each
`tls-auth-clients`, a refusal or a stalled handshake never holding up the other
clients, the plain and TLS ports side by side, and CONFIG SET reloading the
certificates (new connections see the new ones, old connections stay up, files that
do not load refuse the SET and change nothing), as Redis 7.0 does."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import ssl
import subprocess
import sys
from pathlib import Path

import pytest
import redis

from tests.servers import ROOT, free_port, wait_until
from tests.tls import Certificates, TLSNaradProcess, tls_connection

TLS_ERROR = "Unable to update TLS configuration. Check server logs."


def _served(node: TLSNaradProcess, client: str | None = "client") -> bool:
    """Whether a client presenting `client`'s certificate (None: none) gets a PONG."""
    try:
        with tls_connection(node.host, node.port, node.certs.context(client)) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(64) == b"+PONG\r\n"
    except (OSError, ssl.SSLError):
        return False


def _peer_certificate(node: TLSNaradProcess) -> bytes:
    with tls_connection(node.host, node.port, node.certs.context()) as sock:
        der = sock.getpeercert(binary_form=True)
    assert der is not None
    return der


def _der(path: str) -> bytes:
    return ssl.PEM_cert_to_DER_cert(Path(path).read_text())


@pytest.fixture
def tls_node(tmp_path: Path, tls_certs: Certificates):  # type: ignore[no-untyped-def]
    node = TLSNaradProcess(tmp_path / "n", tls_certs).start()
    yield node
    node.stop()


def test_refused_clients_never_hold_up_the_others(tls_node: TLSNaradProcess) -> None:
    certs = tls_node.certs
    r = tls_node.client()
    assert r.ping()
    assert r.xadd("s", {"a": 1})
    # A stalled handshake (connected, nothing sent) and a half one (a ClientHello cut
    # short) wait on their own; the node serves everyone else meanwhile.
    stalled = socket.create_connection((tls_node.host, tls_node.port))
    half = socket.create_connection((tls_node.host, tls_node.port))
    half.sendall(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03")
    assert not _served(tls_node, "stranger")  # a certificate of another CA
    assert not _served(tls_node, None)  # none, where one is required
    with socket.create_connection((tls_node.host, tls_node.port), timeout=5) as plain:
        plain.sendall(b"PING\r\n")  # plain text on the TLS port
        try:
            answer = plain.recv(64)
        except ConnectionResetError:
            answer = b""
        assert b"PONG" not in answer
    assert r.ping() and r.xlen("s") == 1
    assert _served(tls_node)
    with pytest.raises(redis.ConnectionError):
        redis.Redis(port=tls_node.port, **certs.client_kwargs("stranger")).ping()
    # The stalled handshakes are dropped in the end.
    for sock in (stalled, half):
        sock.settimeout(30)
        with contextlib.suppress(ConnectionResetError):
            assert sock.recv(64) == b""
        sock.close()
    clients = r.info("clients")["connected_clients"]
    assert clients == 1, clients  # no refused connection ever became a client
    info = r.info("server")
    assert info["tcp_port"] == tls_node.port  # no plain port: the TLS one, as Redis


def test_auth_clients_optional_and_no(tls_node: TLSNaradProcess) -> None:
    r = tls_node.client()
    assert r.config_set("tls-auth-clients", "optional")
    assert _served(tls_node, None)
    assert _served(tls_node)
    assert not _served(tls_node, "stranger")  # a certificate given is verified
    assert r.config_set("tls-auth-clients", "no")
    assert _served(tls_node, None)
    assert _served(tls_node, "stranger")  # not asked for, so not verified
    with pytest.raises(redis.ResponseError) as info:
        r.config_set("tls-auth-clients", "maybe")
    assert str(info.value) == (
        "CONFIG SET failed (possibly related to argument 'tls-auth-clients') - argument(s) "
        "must be one of the following: no, yes, optional"
    )
    assert r.config_get("tls-auth-clients") == {"tls-auth-clients": "no"}


def test_plain_and_tls_ports_both_listen(tmp_path: Path, tls_certs: Certificates) -> None:
    node = TLSNaradProcess(tmp_path / "n", tls_certs, plain=True).start()
    try:
        plain = redis.Redis(port=node.plain_port)
        assert plain.xadd("s", {"a": 1})
        assert node.client().xlen("s") == 1
        assert plain.info("server")["tcp_port"] == node.plain_port
        assert plain.config_get("tls-port") == {"tls-port": str(node.port)}
        # port 0 with a TLS port set: TLS only.
        assert plain.config_set("port", "0")
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", node.plain_port), timeout=2).close()
        assert node.client().info("server")["tcp_port"] == node.port
    finally:
        node.stop()


@pytest.mark.skipif(shutil.which("redis-cli") is None, reason="redis-cli is not installed")
def test_redis_cli_tls(tls_node: TLSNaradProcess) -> None:
    certs = tls_node.certs
    run = subprocess.run(
        ["redis-cli", "-p", str(tls_node.port), "--tls", "--cacert", certs.ca,
         "--cert", certs.cert("client"), "--key", certs.key("client"), "XADD", "s", "*", "a", "1"],
        capture_output=True, text=True, timeout=30,
    )
    assert run.returncode == 0 and run.stdout.strip().endswith("-0"), run
    assert tls_node.client().xlen("s") == 1


def test_config_set_reloads_the_certificates(tls_node: TLSNaradProcess) -> None:
    certs = tls_node.certs
    old = tls_node.client()
    assert old.ping()
    assert _peer_certificate(tls_node) == _der(certs.cert("server"))
    assert old.config_set("tls-cert-file", certs.cert("server2"), "tls-key-file",
                          certs.key("server2"))  # type: ignore[call-arg]
    assert _peer_certificate(tls_node) == _der(certs.cert("server2"))
    assert old.ping()  # the connection made before stays up
    # A file that does not load: the SET fails and changes nothing.
    for pairs in (
        ["tls-cert-file", "/nonexistent.crt"],
        ["tls-key-file", certs.key("server")],  # not the key of server2's certificate
        ["tls-ca-cert-file", str(Path(certs.ca).with_name("missing.crt"))],
        ["tls-protocols", "TLSv1.2 TLSv1.9"],
        ["tls-ciphers", "NO-SUCH-CIPHER"],
        ["tls-ciphersuites", "NO_SUCH_SUITE"],
    ):
        before = old.config_get(pairs[0])
        with pytest.raises(redis.ResponseError) as info:
            old.execute_command("CONFIG", "SET", *pairs)
        assert str(info.value) == (
            f"CONFIG SET failed (possibly related to argument '{pairs[0]}') - {TLS_ERROR}"
        )
        assert old.config_get(pairs[0]) == before
        assert _peer_certificate(tls_node) == _der(certs.cert("server2"))
    assert "event=tls_reload_failed" in tls_node.log()
    assert old.config_set("tls-protocols", "TLSv1.3")
    assert old.config_set("tls-ciphersuites", "TLS_AES_256_GCM_SHA384")
    with tls_connection(tls_node.host, tls_node.port, certs.context()) as sock:
        assert sock.version() == "TLSv1.3"
        assert sock.cipher()[0] == "TLS_AES_256_GCM_SHA384"
    assert _served(tls_node)


def test_config_set_tls_port_moves_the_tls_listener(
    tmp_path: Path, tls_certs: Certificates
) -> None:
    node = TLSNaradProcess(tmp_path / "n", tls_certs, plain=True).start()
    try:
        plain = redis.Redis(port=node.plain_port)
        old_port, node.port = node.port, free_port()
        assert plain.config_set("tls-port", str(node.port))
        assert node.client().ping()
        assert _refused(old_port)
        assert plain.config_set("tls-port", "0")
        assert _refused(node.port)
        assert plain.ping()
    finally:
        node.stop()


def test_a_start_with_files_that_do_not_load_fails(
    tmp_path: Path, tls_certs: Certificates
) -> None:
    run = subprocess.run(
        [sys.executable, "-m", "narad", "server", "--port", "0", "--tls-port", str(free_port()),
         "--dir", str(tmp_path / "data"), "--tls-cert-file", "/nonexistent.crt",
         "--tls-key-file", tls_certs.key("server"), "--tls-ca-cert-file", tls_certs.ca],
        capture_output=True, text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert run.returncode == 1
    assert run.stderr == (
        "narad: Failed to configure TLS: Failed to load certificate and private key: "
        f"/nonexistent.crt, {tls_certs.key('server')}: No such file or directory\n"
    )


def _refused(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    except ConnectionRefusedError:
        return True
    return False


def test_replies_leave_through_tls_in_order(tls_node: TLSNaradProcess) -> None:
    """A pipeline of writes and a streamed range read, through TLS."""
    r = tls_node.client()
    pipe = r.pipeline(transaction=False)
    for i in range(3000):
        pipe.xadd("p", {"i": i, "pad": "x" * 200})
    ids = pipe.execute()
    assert len(set(ids)) == 3000
    got = r.xrange("p")
    assert [mid for mid, _ in got] == ids
    wait_until(lambda: r.xlen("p") == 3000)


def test_an_encrypted_key_loads_with_its_password(
    tls_node: TLSNaradProcess, tmp_path: Path
) -> None:
    certs = tls_node.certs
    encrypted = tmp_path / "server.key.enc"
    subprocess.run(
        ["openssl", "pkey", "-in", certs.key("server"), "-aes256", "-passout", "pass:s3cret",
         "-out", str(encrypted)],
        check=True, capture_output=True,
    )
    r = tls_node.client()
    with pytest.raises(redis.ResponseError) as info:
        r.execute_command("CONFIG", "SET", "tls-key-file", str(encrypted),
                          "tls-key-file-pass", "wrong")
    assert str(info.value).endswith(TLS_ERROR)
    assert r.config_get("tls-key-file") == {"tls-key-file": certs.key("server")}
    assert r.execute_command("CONFIG", "SET", "tls-key-file", str(encrypted),
                             "tls-key-file-pass", "s3cret") == b"OK"
    assert _served(tls_node)
    assert r.ping()
