"""CONFIG SET through a real server: every setting it accepts is in effect at once,
shown so by INFO and by what the server does; what it cannot apply it refuses with
Redis's error and changes nothing, so CONFIG GET and CONFIG REWRITE never report a
value that is not in effect."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from tests.server.raw import Raw, encode
from tests.servers import NaradProcess, free_port, wait_until


def _fields(text: bytes) -> dict[str, str]:
    lines = [line for line in text.decode().splitlines() if line and not line.startswith("#")]
    return dict(line.split(":", 1) for line in lines)


def _info(conn: Raw, section: str) -> dict[str, str]:
    return _fields(conn.call("INFO", section))


def _fsyncs_for_writes(conn: Raw, count: int) -> int:
    """Fsyncs issued while `count` XADDs ran one after the other (each its own commit)."""
    before = int(_info(conn, "narad")["fsyncs"])
    for i in range(count):
        conn.call("XADD", "fs", "*", "i", i)
    return int(_info(conn, "narad")["fsyncs"]) - before


def _refused(port: int, host: str = "127.0.0.1") -> bool:
    try:
        socket.create_connection((host, port), timeout=2).close()
    except ConnectionRefusedError:
        return True
    return False


# -- fsync ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["fsync", "appendfsync"])
def test_config_set_fsync_changes_the_policy_in_force(tmp_path: Path, name: str) -> None:
    server = NaradProcess(tmp_path / "n", ["--fsync", "everysec"]).start()
    try:
        with Raw(server.port) as conn:
            assert _info(conn, "persistence")["aof_fsync_policy"] == "everysec"
            assert conn.call("CONFIG", "SET", name, "always") == b"OK"
            persistence = _info(conn, "persistence")
            assert persistence["aof_fsync_policy"] == "always"
            assert persistence["acked_writes_are"] == "durable"
            assert _info(conn, "narad")["fsync"] == "always"
            # Under always every commit fsyncs before its reply.
            assert _fsyncs_for_writes(conn, 20) >= 20
            assert conn.call("CONFIG", "SET", name, "no") == b"OK"
            assert _info(conn, "persistence")["aof_fsync_policy"] == "no"
            # Under no nothing fsyncs: not the commits, not the everysec thread.
            assert _fsyncs_for_writes(conn, 20) == 0
            assert conn.call("CONFIG", "GET", "fsync") == [b"fsync", b"no"]
    finally:
        server.stop()


# -- port and bind ----------------------------------------------------------------------


def test_config_set_port_moves_the_listener(narad: NaradProcess) -> None:
    old, new = narad.port, free_port()
    with Raw(old) as conn:
        assert conn.call("CONFIG", "SET", "port", new) == b"OK"
        assert conn.call("PING") == b"PONG"  # a connection made before stays
        with Raw(new) as fresh:
            assert fresh.call("PING") == b"PONG"
            assert _info(fresh, "server")["tcp_port"] == str(new)
            assert fresh.call("CONFIG", "GET", "port") == [b"port", str(new).encode()]
        assert _refused(old)
    narad.port = new  # for the fixture's stop


def test_config_set_port_that_cannot_be_bound_changes_nothing(tmp_path: Path) -> None:
    conf = tmp_path / "narad.conf"
    conf.write_text("slowlog-max-len 64\n")
    server = NaradProcess(tmp_path / "n", ["--config", str(conf)]).start()
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    busy = taken.getsockname()[1]
    try:
        with Raw(server.port) as conn:
            reply = conn.call("CONFIG", "SET", "port", busy, "slowlog-max-len", 32)
            assert reply == (
                "error",
                "ERR CONFIG SET failed (possibly related to argument 'port') - "
                "Unable to listen on this port. Check server logs.",
            )
            # All or nothing: the other pair of the command is not applied either.
            assert conn.call("CONFIG", "GET", "port") == [b"port", str(server.port).encode()]
            assert conn.call("CONFIG", "GET", "slowlog-max-len") == [b"slowlog-max-len", b"64"]
            assert _info(conn, "server")["tcp_port"] == str(server.port)
            with Raw(server.port) as fresh:
                assert fresh.call("PING") == b"PONG"
            # REWRITE writes what is in effect, never the value refused.
            assert conn.call("CONFIG", "REWRITE") == b"OK"
        text = conf.read_text()
        assert f"port {server.port}\n" in text
        assert f"port {busy}" not in text
        assert "slowlog-max-len 64\n" in text
    finally:
        taken.close()
        server.stop()


def test_config_set_bind_moves_the_listener(narad: NaradProcess) -> None:
    with Raw(narad.port) as conn:
        assert conn.call("CONFIG", "SET", "bind", "127.0.0.2 -192.0.2.1") == b"OK"
        assert conn.call("PING") == b"PONG"
        with socket.create_connection(("127.0.0.2", narad.port), timeout=5) as sock:
            sock.sendall(b"PING\r\n")
            assert sock.recv(64) == b"+PONG\r\n"
        assert _refused(narad.port, "127.0.0.1")
        reply = conn.call("CONFIG", "SET", "bind", "127.0.0.1 192.0.2.1")
        assert reply == (
            "error",
            "ERR CONFIG SET failed (possibly related to argument 'bind') - "
            "Failed to bind to specified addresses.",
        )
        assert conn.call("CONFIG", "GET", "bind") == [b"bind", b"127.0.0.2 -192.0.2.1"]
        # Names other than localhost are not looked up; bytes no name has are refused.
        for bad in (b"example.com", b"\xff\xfe", b"a" * 300):
            assert conn.call("CONFIG", "SET", "bind", bad) == reply
        assert _refused(narad.port, "127.0.0.1")
        assert conn.call("CONFIG", "SET", "bind", "127.0.0.1") == b"OK"
    with Raw(narad.port) as fresh:
        assert fresh.call("PING") == b"PONG"


# -- settings the logs and connections carry --------------------------------------------


def test_config_set_segment_bytes_reaches_an_open_stream(narad: NaradProcess) -> None:
    with Raw(narad.port) as conn:
        conn.call("XADD", "seg", "*", "f", "x")
        folders = [p for p in (narad.folder / "data" / "streams").iterdir()]
        assert len(folders) == 1
        data = folders[0] / "data"
        assert len(list(data.glob("*.log"))) == 1
        assert conn.call("CONFIG", "SET", "segment-bytes", "1kb") == b"OK"
        for _ in range(20):
            conn.call("XADD", "seg", "*", "f", "x" * 200)
    assert len(list(data.glob("*.log"))) >= 3


def _trimmed_after_node_size_change(port: int) -> int:
    with Raw(port) as conn:
        conn.call("DEL", "nodes")
        for i in range(1, 11):
            conn.call("XADD", "nodes", f"{i}-0", "f", "x")
        old = conn.call("CONFIG", "GET", "stream-node-max-entries")[1]
        conn.call("CONFIG", "SET", "stream-node-max-entries", 5)
        try:
            return int(conn.call("XTRIM", "nodes", "MAXLEN", "~", 3))
        finally:
            conn.call("CONFIG", "SET", "stream-node-max-entries", old)
            conn.call("DEL", "nodes")


def test_config_set_stream_node_max_entries_reaches_an_open_stream(narad: NaradProcess) -> None:
    # Whole nodes of 5 go: the first, leaving 5 of 10. (Narad's nodes are offset
    # ranges, so the new size applies to entries already there, as it would after a
    # restart; Redis's nodes keep the size they were made with: docs/settings.md.)
    assert _trimmed_after_node_size_change(narad.port) == 5


def test_config_set_protocol_limits_reach_open_connections(narad: NaradProcess) -> None:
    with Raw(narad.port) as conn, Raw(narad.port) as other:
        assert other.call("PING") == b"PONG"
        assert conn.call("CONFIG", "SET", "proto-max-bulk-len", "1mb") == b"OK"
        other.send(b"*2\r\n$4\r\nECHO\r\n$1048577\r\n")
        assert other.read_all_until_closed() == b"-ERR Protocol error: invalid bulk length\r\n"


def test_output_buffer_soft_limit_disconnects_a_slow_reader(narad: NaradProcess) -> None:
    with Raw(narad.port) as conn, Raw(narad.port) as slow:
        conn.call("XADD", "big", "*", "f", "x" * 100_000)
        assert conn.call("CONFIG", "SET", "client-output-buffer-limit", "normal 0 256kb 1") == b"OK"
        slow.send(encode(["XRANGE", "big", "-", "+"]) * 400)  # 40 MB of replies, never read
        wait_until(lambda: _info(conn, "clients")["connected_clients"] == "1", timeout=20)
        assert conn.call("PING") == b"PONG"


def _keepalive_timer(server_port: int, client: socket.socket) -> tuple[int, int]:
    """The kernel's timer on the server's end of `client`'s connection, from
    /proc/net/tcp: (kind, clock ticks left); kind 2 is the keepalive timer."""
    peer = client.getsockname()[1]
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local, remote, timer = fields[1], fields[2], fields[5]
        if int(local.split(":")[1], 16) == server_port and int(remote.split(":")[1], 16) == peer:
            kind, left = timer.split(":")
            return int(kind, 16), int(left, 16)
    raise AssertionError("connection not found in /proc/net/tcp")


@pytest.mark.skipif(not Path("/proc/net/tcp").exists(), reason="needs Linux's /proc/net/tcp")
def test_tcp_keepalive_is_set_on_accepted_connections(narad: NaradProcess) -> None:
    ticks = os.sysconf("SC_CLK_TCK")
    with Raw(narad.port) as conn:
        conn.call("PING")
        kind, left = _keepalive_timer(narad.port, conn.sock)
        assert kind == 2 and 200 * ticks < left <= 300 * ticks  # the default, 300 s
        assert conn.call("CONFIG", "SET", "tcp-keepalive", 77) == b"OK"
        with Raw(narad.port) as fresh:
            fresh.call("PING")
            kind, left = _keepalive_timer(narad.port, fresh.sock)
            assert kind == 2 and 60 * ticks < left <= 77 * ticks
        assert conn.call("CONFIG", "SET", "tcp-keepalive", 0) == b"OK"
        with Raw(narad.port) as fresh:
            fresh.call("PING")
            assert _keepalive_timer(narad.port, fresh.sock)[0] == 0


# -- pidfile, and what cannot change ----------------------------------------------------


def test_pidfile_written_while_serving_and_removed_at_exit(tmp_path: Path) -> None:
    pidfile = tmp_path / "narad.pid"
    conf = tmp_path / "narad.conf"
    conf.write_text(f"pidfile {pidfile}\n")
    server = NaradProcess(tmp_path / "n", ["--config", str(conf)]).start()
    try:
        assert server.proc is not None
        assert pidfile.read_text() == f"{server.proc.pid}\n"
        # A second server refused the data dir leaves the first one's pidfile alone.
        second = NaradProcess(tmp_path / "n", ["--config", str(conf)])
        with pytest.raises(RuntimeError, match="in use by process"):
            second.start()
        assert pidfile.read_text() == f"{server.proc.pid}\n"
    finally:
        assert server.stop() == 0
    assert not pidfile.exists()


REFUSED = [
    ("dir", "/tmp", "can't set immutable config"),
    ("databases", "4", "can't set immutable config"),
    ("pidfile", "/tmp/x.pid", "can't set immutable config"),
    ("logfile", "x.log", "can't set immutable config"),
    ("replicaof", "127.0.0.1 6379", "can't set immutable config"),
    ("replica-read-only", "no", "argument must be 'yes' (a replica's history is its leader's)"),
    ("min-replicas-to-ack", "1001", "argument must be between 0 and 1000 inclusive"),
]


def test_settings_that_cannot_change_are_refused(shared_narad: NaradProcess) -> None:
    with Raw(shared_narad.port) as conn:
        for name, value, reason in REFUSED:
            before = conn.call("CONFIG", "GET", name)
            assert conn.call("CONFIG", "SET", name, value) == (
                "error", f"ERR CONFIG SET failed (possibly related to argument '{name}') - {reason}"
            ), name
            assert conn.call("CONFIG", "GET", name) == before
        assert conn.call("CONFIG", "SET", "min-replicas-to-ack", 0) == b"OK"
