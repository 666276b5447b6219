"""A real node's log: start-up lines, level names, no Python reprs after a varied
workload with errors and a replica link, JSON lines, and a start that cannot listen."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import redis

from tests.server.raw import Raw
from tests.servers import ROOT, NaradProcess, wait_until

LINE = re.compile(r'^ts=\S+Z level=(debug|verbose|notice|warning) logger=narad[.\w]* (.*)$')


def _lines(server: NaradProcess) -> list[str]:
    return server.log_path.read_text(errors="replace").splitlines()


def _events(server: NaradProcess, event: str) -> list[str]:
    return [line for line in _lines(server) if f" event={event}" in line]


def test_start_up_lines(tmp_path: Path) -> None:
    server = NaradProcess(tmp_path / "n", ["--fsync", "everysec"]).start()
    try:
        with server.client() as client:
            client.xadd("s", {"f": "v"})
        server.kill()  # kill -9: the next start replays the journal
        server.start()
    finally:
        assert server.stop() == 0
    data = (tmp_path / "n" / "data").resolve()
    assert _events(server, "starting")[-1].split(" event=starting ")[1].startswith("version=")
    assert _events(server, "data_dir")[-1].endswith(f" path={data}")
    assert " policy=everysec acked_writes_are=appended" in _events(server, "fsync")[-1]
    assert f" port={server.port} " in _events(server, "listening")[-1]
    assert " role=leader " in _events(server, "role")[-1]
    recovered = _events(server, "recovered")[-1]
    fields = dict(pair.split("=", 1) for pair in recovered.split(" event=recovered ")[1].split())
    assert int(fields["commits_replayed"]) >= 1 and int(fields["records_replayed"]) >= 1
    assert float(fields["seconds"]) >= 0 and fields["streams"] == "1"
    for event in ("starting", "data_dir", "fsync", "listening", "role", "recovered", "ready"):
        assert " level=notice " in _events(server, event)[-1], event
    assert " level=notice " in _events(server, "stopped")[-1]
    assert " level=notice " in _events(server, "stop_requested")[-1]  # routine, not warning
    for line in _lines(server):
        assert LINE.match(line), line


def _workload(leader: NaradProcess, replica: NaradProcess) -> None:
    """Commands that log: odd key names (quotes, spaces, bytes that are not UTF-8),
    refusals, schema refusals, a replica's link up and down, a cross-protocol attack."""
    odd = [b"k'1", b'q"2', b"sp ace", b"\xff\xfe", b"new\nline"]
    with Raw(leader.port) as conn:
        conn.call("CONFIG", "SET", "loglevel", "debug")
        for key in odd:
            conn.call("XADD", key, "*", b"f\xff", b"v'\"")
            conn.call("Q.CREATE", key + b"q")
            conn.call("Q.PUSH", key + b"q", b"payload\x00\xff")
            conn.call("Q.POP", key + b"q", "VISIBILITY", "1")
            conn.call("XADD", key, "bad-id", "f", "v")  # an error reply
        conn.call("Q.CREATE", b"dl\xffq")
        conn.call("Q.CREATE", b"src\xff", "MAXRECEIVES", "1", "DLQ", b"dl\xffq")
        conn.call("Q.SCHEMA", "SET", b"dl\xffq", '{"type":"object"}')
        conn.call("Q.PUSH", b"src\xff", b"not json")
        conn.call("Q.POP", b"src\xff", "VISIBILITY", "1")
        conn.call("Q.CREATE", "k")
        conn.call("Q.SCHEMA", "SET", "k", '{"type":"object"}', "FIELD", b"\xff")
        conn.call("NOSUCH", b"\xff")
        conn.call("ACL", "SETUSER", b"us'er", "on", ">pw", "~*", "+@all")
    with Raw(replica.port) as conn:
        assert conn.call("REPLICAOF", "127.0.0.1", str(leader.port)) == b"OK"
    wait_until(lambda: _events(replica, "replication_link_up"), timeout=30)
    with Raw(leader.port) as conn:
        conn.call("XADD", b"after\xff", "*", "f", "v")
        wait_until(lambda: conn.call("Q.POP", b"src\xff") is not None)
    replica.kill()  # the leader sees its replica go
    wait_until(lambda: _events(leader, "replica_detached"), timeout=30)
    with socket.create_connection(("127.0.0.1", leader.port)) as sock:
        sock.sendall(b"POST / HTTP/1.1\r\nHost: x\r\n\r\n")  # a cross-protocol attack
        sock.recv(100)


def test_no_python_reprs_in_any_line(tmp_path: Path) -> None:
    leader = NaradProcess(tmp_path / "leader").start()
    replica = NaradProcess(tmp_path / "replica", ["--loglevel", "debug"]).start()
    try:
        _workload(leader, replica)
    finally:
        leader.stop()
        replica.stop()
    text = leader.log_path.read_text(errors="replace") + replica.log_path.read_text(
        errors="replace"
    )
    assert "event=replica_attached" in text and "event=schema_refused" in text
    assert "event=cross_protocol_attack" in text and " level=debug " in text
    for line in text.splitlines():
        assert "b'" not in line and 'b"' not in line, line
        assert LINE.match(line), line
    # The odd names are shown as their text: \xNN for bytes that are not UTF-8.
    assert 'target=dl\\xffq from=src\\xff ' in text


def test_json_lines(tmp_path: Path) -> None:
    server = NaradProcess(tmp_path / "n", ["--log-format", "json"]).start()
    try:
        with server.client() as client:
            client.xadd(b"k\xff'", {"f": "v"})
            with pytest.raises(redis.ResponseError):
                client.execute_command("Q.PUSH", b"no\xffqueue", "x")
            client.config_set("log-format", "text")
            with socket.create_connection(("127.0.0.1", server.port)) as sock:
                sock.sendall(b"POST / HTTP/1.1\r\n\r\n")  # logs one line, as text
                sock.recv(100)
            wait_until(lambda: "event=cross_protocol_attack" in server.log())
            client.config_set("log-format", "json")
    finally:
        server.stop()
    objects = [json.loads(line) for line in _lines(server) if line.startswith("{")]
    texts = [line for line in _lines(server) if not line.startswith("{")]
    assert objects and texts and all(LINE.match(line) for line in texts)
    assert {o["level"] for o in objects} <= {"debug", "verbose", "notice", "warning"}
    ready = next(o for o in objects if o.get("event") == "ready")
    assert ready["port"] == server.port and ready["logger"] == "narad.server"
    assert next(o for o in objects if o.get("event") == "recovered")["seconds"] >= 0


def _start(folder: Path, port: int) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "narad", "server", "--port", str(port), "--dir", str(folder)],
        capture_output=True, text=True, timeout=60, env={"PYTHONPATH": str(ROOT)},
        check=False,
    )


def test_a_start_that_cannot_listen_names_the_address_and_leaves_no_data_dir(
    tmp_path: Path,
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        fresh = tmp_path / "new" / "data"
        result = _start(fresh, port)
        assert result.returncode == 1
        assert f"narad: cannot listen on 127.0.0.1 port {port} tls-port 0: " in result.stderr
        assert "in use" in result.stderr and "('127.0.0.1'" not in result.stderr
        assert "event=start_failed" in result.stderr and "b'" not in result.stderr
        assert not (tmp_path / "new").exists()  # nothing of its own left behind
        kept = tmp_path / "kept"
        kept.mkdir()
        (kept / "mine").write_text("x")
        assert _start(kept, port).returncode == 1
        assert (kept / "mine").read_text() == "x"  # a dir that was there stays


def test_sentinel_lines(tmp_path: Path) -> None:
    from tests.sentinel.cluster import SentinelProcess

    leader = NaradProcess(tmp_path / "leader").start()
    sentinel = SentinelProcess(tmp_path / "s", leader, ["log-format json", "loglevel debug"])
    try:
        sentinel.start()
        wait_until(lambda: "+monitor" in sentinel.log() or "sentinel_ready" in sentinel.log())
        with sentinel.client() as client:
            client.execute_command("SENTINEL", "CONFIG", "SET", "loglevel", "verbose")
    finally:
        sentinel.stop()
        leader.stop()
    lines = _lines(sentinel)
    objects = [json.loads(line) for line in lines]  # every line is one JSON object
    assert {o["level"] for o in objects} <= {"debug", "verbose", "notice", "warning"}
    ready = next(o for o in objects if o.get("event") == "sentinel_ready")
    assert ready["level"] == "notice" and ready["port"] == sentinel.port
    assert all("b'" not in line and 'b"' not in line for line in lines)
