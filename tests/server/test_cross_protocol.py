"""Cross-protocol scripting: a web page can make a local browser send an HTTP request
to the server's port, with Redis commands in its body. A `POST` or `Host:` line closes
the connection, as in Redis 7.0, and nothing sent after it runs: not in the same read,
not pipelined, not queued in MULTI, not before AUTH. Each event is logged, at most once
a minute."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import PASSWORD
from tests.server.raw import Raw, encode
from tests.servers import NaradProcess, RedisProcess

EVENT = "event=cross_protocol_attack"


def send_and_drain(port: int, data: bytes) -> bytes:
    """Send `data` in one write and return what the server sends until it closes.
    Unlike test_protocol's `exchange`, the sending half stays open: the server must
    close the connection by itself."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(data)
        out = b""
        try:
            while chunk := sock.recv(65536):
                out += chunk
        except ConnectionResetError:
            pass
        return out


def http_post(body: bytes) -> bytes:
    return (
        b"POST / HTTP/1.1\r\nHost: 127.0.0.1:6379\r\nContent-Type: text/plain\r\n"
        b"Content-Length: %d\r\n\r\n%b" % (len(body), body)
    )


@pytest.fixture
def server(tmp_path: Path) -> Iterator[NaradProcess]:
    proc = NaradProcess(tmp_path / "narad").start()
    yield proc
    proc.stop()


def events(server: NaradProcess) -> int:
    return server.log_path.read_text(errors="replace").count(EVENT)


def test_an_http_post_runs_none_of_its_body_and_is_logged_once(server: NaradProcess) -> None:
    body = b"Q.CREATE x\r\nQ.PUSH x pwned\r\nXADD s * f v\r\nFLUSHALL\r\n"
    with server.client() as watcher:
        watcher.xadd("kept", {"f": "v"})
        assert send_and_drain(server.port, http_post(body)) == b""
        assert watcher.exists("x", "s") == 0
        assert watcher.xlen("kept") == 1  # FLUSHALL did not run
        assert watcher.ping()
    assert events(server) == 1


def test_a_host_line_closes_after_an_unknown_http_method(server: NaradProcess) -> None:
    request = b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\nXADD s * f v\r\n"
    # Replies still waiting for the connection are dropped with it, as Redis skips
    # writing to a client it is about to close.
    assert send_and_drain(server.port, request) == b""
    with server.client() as watcher:
        assert watcher.exists("s") == 0
    assert events(server) == 1


def test_pipelined_commands_after_post_do_not_run(server: NaradProcess) -> None:
    pipeline = encode(["XADD", "before", "*", "f", "v"]) + encode(["post", "/"])
    pipeline += b"".join(encode(["XADD", "after", "*", "f", str(i)]) for i in range(50))
    send_and_drain(server.port, pipeline)
    with server.client() as watcher:
        assert watcher.xlen("before") == 1
        assert watcher.exists("after") == 0


def test_post_inside_multi_drops_the_transaction(server: NaradProcess) -> None:
    with Raw(server.port) as raw:
        assert raw.call("MULTI") == b"OK"
        assert raw.call("XADD", "queued", "*", "f", "v") == b"QUEUED"
        raw.send(encode(["HOST:", "evil"]) + encode(["EXEC"]))
        assert raw.read_all_until_closed() == b""
    with server.client() as watcher:
        assert watcher.exists("queued") == 0


def test_post_before_auth_closes_too(tmp_path: Path) -> None:
    server = NaradProcess(tmp_path / "pw", ["--requirepass", PASSWORD]).start()
    try:
        request = http_post(b"AUTH %b\r\nXADD s * f v\r\n" % PASSWORD.encode())
        assert send_and_drain(server.port, request) == b""
        with server.client(password=PASSWORD) as watcher:
            assert watcher.exists("s") == 0
        assert events(server) == 1
    finally:
        server.stop()


def test_repeated_attacks_log_one_line_a_minute(server: NaradProcess) -> None:
    for _ in range(5):
        send_and_drain(server.port, http_post(b"PING\r\n"))
    assert events(server) == 1
    with server.client() as watcher:
        assert watcher.ping()


def test_redis_does_the_same(server: NaradProcess, redis_server: RedisProcess) -> None:
    body = b"XADD pwned * f v\r\n"
    for port in (server.port, redis_server.port):
        assert send_and_drain(port, http_post(body)) == b""
    with server.client() as mine, redis_server.client() as theirs:
        assert mine.exists("pwned") == theirs.exists("pwned") == 0
