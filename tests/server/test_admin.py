"""Server commands: INFO, CONFIG, DBSIZE, TIME, COMMAND ..., SHUTDOWN, LASTSAVE,
FUNCTION FLUSH, SLOWLOG, MONITOR and WAIT, and redis-cli against the server."""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest
from redis.backoff import NoBackoff
from redis.retry import Retry

from tests.server.raw import Raw, call_both
from tests.servers import ROOT, NaradProcess, RedisProcess, wait_until

SCRIPTS = {
    "config": [
        ["CONFIG"],
        ["CONFIG", "nosuch"],
        ["CONFIG", "GET"],
        ["CONFIG", "GET", "maxclients"],
        ["CONFIG", "GET", "MAXCLIENTS"],
        ["CONFIG", "GET", "nosuch-setting"],
        ["CONFIG", "GET", "slowlog-max*"],
        ["CONFIG", "GET", "proto-max-bulk-len"],
        ["CONFIG", "GET", "stream-node-max-entries"],
        ["CONFIG", "GET", "databases"],
        ["CONFIG", "SET"],
        ["CONFIG", "SET", "maxclients"],
        ["CONFIG", "SET", "nosuch", "1"],
        ["CONFIG", "SET", "maxclients", "x"],
        ["CONFIG", "SET", "maxclients", "-5"],
        ["CONFIG", "SET", "maxclients", "100", "maxclients", "200"],
        ["CONFIG", "SET", "slowlog-max-len", "x"],
        ["CONFIG", "SET", "databases", "3"],
        ["CONFIG", "SET", "protected-mode", "maybe"],
        ["CONFIG", "SET", "client-output-buffer-limit", "normal 0 0"],
        ["CONFIG", "SET", "client-output-buffer-limit", "foo 1 1 1"],
        ["CONFIG", "SET", "stream-node-max-entries", "x"],
        ["CONFIG", "SET", "stream-node-max-entries", "50"],
        ["CONFIG", "GET", "stream-node-max-entries"],
        ["CONFIG", "SET", "stream-node-max-entries", "100"],
        ["CONFIG", "SET", "slowlog-max-len", "200", "slowlog-log-slower-than", "20000"],
        ["CONFIG", "GET", "slowlog-max-len"],
        ["CONFIG", "GET", "slowlog-log-slower-than"],
        ["CONFIG", "SET", "slowlog-max-len", "128", "slowlog-log-slower-than", "10000"],
        ["CONFIG", "RESETSTAT", "x"],
        ["CONFIG", "REWRITE"],
        ["CONFIG", "REWRITE", "x"],
    ],
    "command_errors": [
        ["COMMAND", "nosuch"],
        ["COMMAND", "COUNT", "x"],
        ["COMMAND", "GETKEYS"],
        ["COMMAND", "GETKEYS", "nosuch"],
        ["COMMAND", "GETKEYS", "nosuch", "a"],
        ["COMMAND", "GETKEYS", "PING", "x"],
        ["COMMAND", "GETKEYS", "XLEN", "a", "b"],
        ["COMMAND", "GETKEYS", "XADD", "a"],
        ["COMMAND", "GETKEYS", "XADD", "s", "*", "f", "v"],
        ["COMMAND", "GETKEYS", "XLEN", "s"],
        ["COMMAND", "GETKEYS", "DEL", "a", "b", "c"],
        ["COMMAND", "GETKEYS", "RENAME", "a", "b"],
        ["COMMAND", "GETKEYS", "XGROUP", "CREATE", "k", "g", "$"],
        ["COMMAND", "GETKEYS", "XGROUP", "NOPE", "k"],
        ["COMMAND", "GETKEYS", "XINFO", "HELP"],
        ["COMMAND", "GETKEYS", "XREAD", "STREAMS", "a", "b", "0", "0"],
        ["COMMAND", "GETKEYS", "XREAD", "COUNT", "2", "BLOCK", "0", "STREAMS", "a", "0"],
        ["COMMAND", "GETKEYS", "XREAD", "STREAMS", "a"],
        ["COMMAND", "GETKEYS", "XREADGROUP", "GROUP", "g", "c", "STREAMS", "a", ">"],
        ["COMMAND", "INFO", "nosuch"],
        ["COMMAND", "DOCS", "nosuch"],
        ["COMMAND", "LIST", "FILTERBY", "foo", "x"],
        ["COMMAND", "LIST", "x"],
        ["COMMAND", "LIST", "FILTERBY", "MODULE", "x"],
    ],
    "slowlog_errors": [
        ["SLOWLOG"],
        ["SLOWLOG", "nosuch"],
        ["SLOWLOG", "GET", "-2"],
        ["SLOWLOG", "GET", "x"],
        ["SLOWLOG", "GET", "1", "2"],
        ["SLOWLOG", "LEN", "x"],
        ["SLOWLOG", "RESET", "x"],
    ],
}


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_same_replies_as_redis(
    name: str, shared_narad: NaradProcess, redis_server: RedisProcess
) -> None:
    assert call_both(shared_narad.port, redis_server.port, SCRIPTS[name]) == []


# -- INFO ---------------------------------------------------------------------------------


def _sections(text: bytes) -> list[str]:
    return [line[2:] for line in text.decode().splitlines() if line.startswith("# ")]


def _fields(text: bytes) -> dict[str, str]:
    lines = [line for line in text.decode().splitlines() if line and not line.startswith("#")]
    return dict(line.split(":", 1) for line in lines)


def test_info_sections(shared_narad: NaradProcess, redis_server: RedisProcess) -> None:
    with Raw(shared_narad.port) as mine, Raw(redis_server.port) as theirs:
        for args in ([], ["default"], ["all"], ["everything"]):
            narad_sections = _sections(mine.call("INFO", *args))
            redis_sections = _sections(theirs.call("INFO", *args))
            # Narad adds its own sections at the end (Queues only in all and everything,
            # as Redis keeps sections that grow with the keys out of the default); the
            # rest are Redis's, in its order.
            ours = ["Narad", "Queues"] if args in (["all"], ["everything"]) else ["Narad"]
            assert narad_sections == [*redis_sections, *ours], args
        for args in (["server"], ["SERVER"], ["clients", "keyspace"], ["cluster"], ["errorstats"]):
            assert _sections(mine.call("INFO", *args)) == _sections(theirs.call("INFO", *args))
        assert mine.call("INFO", "nosuch") == theirs.call("INFO", "nosuch") == b""
        assert _sections(mine.call("INFO", "narad")) == ["Narad"]
        assert _sections(mine.call("INFO", "commandstats")) == ["Commandstats"]


def test_info_fields(shared_narad: NaradProcess) -> None:
    with Raw(shared_narad.port) as conn:
        info = _fields(conn.call("INFO", "everything"))
        narad = _fields(conn.call("INFO", "narad"))
    assert info["redis_version"].startswith("7.0.")
    assert info["narad_version"]
    assert info["arch_bits"] == "64"
    assert info["redis_mode"] == "standalone"
    assert int(info["tcp_port"]) == shared_narad.port
    assert int(info["process_id"]) == shared_narad.proc.pid  # type: ignore[union-attr]
    assert info["cluster_enabled"] == "0"
    assert info["role"] == "master"
    for field in (
        "connected_clients",
        "blocked_clients",
        "maxclients",
        "used_memory",
        "used_memory_rss",
        "total_connections_received",
        "total_commands_processed",
        "total_error_replies",
        "rejected_connections",
        "loading",
        "aof_enabled",
        "uptime_in_seconds",
        "run_id",
        "used_cpu_sys",
        "used_cpu_user",
    ):
        assert field in info, field
    assert int(info["blocked_clients"]) >= 0
    assert int(info["connected_clients"]) >= 1
    for field in (
        "narad_version",
        "fsync",
        "group_commits",
        "fsyncs",
        "streams",
        "log_bytes",
        "data_dir",
    ):
        assert field in narad, field
    assert narad["fsync"] == "always"


def test_info_keyspace_lines(shared_narad: NaradProcess) -> None:
    with Raw(shared_narad.port) as conn:
        for db, count in ((10, 1), (11, 3)):
            conn.call("SELECT", db)
            conn.call("FLUSHDB")
            for i in range(count):
                conn.call("XADD", f"ks{i}", "*", "a", "1")
        conn.call("SELECT", 12)
        conn.call("FLUSHDB")
        keyspace = _fields(conn.call("INFO", "keyspace"))
        assert keyspace["db10"] == "keys=1,expires=0,avg_ttl=0"
        assert keyspace["db11"] == "keys=3,expires=0,avg_ttl=0"
        assert "db12" not in keyspace
        for db in (10, 11):
            conn.call("SELECT", db)
            conn.call("FLUSHDB")


def test_info_through_redis_py_resp3(shared_narad: NaradProcess) -> None:
    for proto in (2, 3):
        client = shared_narad.client(protocol=proto)
        info = client.info()
        assert str(info["redis_version"]).startswith("7.0.")
        assert info["cluster_enabled"] == 0
        assert "blocked_clients" in client.info("clients")
        client.close()


STATS_SCRIPT = [
    ["XADD", "cs", "1-0", "a", "1"],
    ["XADD", "cs", "1-0", "a", "1"],  # fails: the ID is too small
    ["XADD", "cs"],  # rejected: arity
    ["XADD", "cs", "x", "a", "1"],
    ["XLEN", "cs"],
    ["XLEN"],
    ["NOSUCH"],
    ["CONFIG", "GET", "maxclients"],
    ["MULTI"],
    ["XLEN"],
    ["EXEC"],
    ["DEL", "cs"],
]


def _stats_after(port: int) -> tuple[dict[str, dict[str, str]], dict[str, str], str]:
    with Raw(port) as conn:
        conn.call("DEL", "cs")
        conn.call("CONFIG", "RESETSTAT")
        for args in STATS_SCRIPT:
            conn.call(*args)
        commands = {
            name[len("cmdstat_") :]: dict(kv.split("=") for kv in value.split(","))
            for name, value in _fields(conn.call("INFO", "commandstats")).items()
        }
        errors = _fields(conn.call("INFO", "errorstats"))
        total = _fields(conn.call("INFO", "stats"))["total_error_replies"]
    return commands, errors, total


def test_commandstats_and_errorstats_as_redis(
    shared_narad: NaradProcess, redis_server: RedisProcess
) -> None:
    mine, theirs = _stats_after(shared_narad.port), _stats_after(redis_server.port)
    assert mine[1:] == theirs[1:]
    counters = ("calls", "rejected_calls", "failed_calls")
    for name in ("xadd", "xlen", "del", "multi", "exec", "config|get"):
        assert {k: mine[0][name][k] for k in counters} == {k: theirs[0][name][k] for k in counters}
    assert set(mine[0]["xadd"]) == {"calls", "usec", "usec_per_call", *counters}


def test_resetstat(shared_narad: NaradProcess) -> None:
    with Raw(shared_narad.port) as conn:
        conn.call("NOSUCH")
        conn.call("XLEN")
        assert int(_fields(conn.call("INFO", "stats"))["total_error_replies"]) >= 2
        assert conn.call("CONFIG", "RESETSTAT") == b"OK"
        assert _fields(conn.call("INFO", "stats"))["total_error_replies"] == "0"
        assert _fields(conn.call("INFO", "errorstats")) == {}
        assert "cmdstat_xlen" not in _fields(conn.call("INFO", "commandstats"))


# -- CONFIG with a config file ------------------------------------------------------------


def test_config_rewrite_with_a_config_file(tmp_path: Path) -> None:
    conf = tmp_path / "narad.conf"
    shutil.copy(ROOT / "conf" / "narad.conf", conf)
    server = NaradProcess(tmp_path / "n", ["--config", str(conf)]).start()
    try:
        client = server.client()
        assert client.config_get("slowlog-max-len") == {"slowlog-max-len": "128"}
        assert client.config_set("slowlog-max-len", 77) is True
        assert client.config_set("stream-node-max-entries", 33) is True
        assert client.execute_command("CONFIG", "REWRITE") == b"OK"
        text = conf.read_text()
        assert "slowlog-max-len 77" in text
        assert "stream-node-max-entries 33" in text
        # Comments of the shipped file stay.
        original = (ROOT / "conf" / "narad.conf").read_text()
        comments = [line for line in original.splitlines() if line.startswith("#")]
        assert comments and all(line in text for line in comments[:20])
        client.close()
        server.restart()
        client = server.client()
        assert client.config_get("slowlog-max-len") == {"slowlog-max-len": "77"}
        assert client.config_get("stream-node-max-entries") == {"stream-node-max-entries": "33"}
        assert client.info("server")["config_file"] == str(conf)
        client.close()
    finally:
        server.stop()


def test_config_set_takes_effect(shared_narad: NaradProcess) -> None:
    with Raw(shared_narad.port) as conn:
        assert conn.call("CONFIG", "SET", "proto-max-bulk-len", "1048576") == b"OK"
        try:
            with Raw(shared_narad.port) as fresh:
                fresh.send(b"*2\r\n$4\r\nECHO\r\n$1048577\r\n")
                expected = b"-ERR Protocol error: invalid bulk length\r\n"
                assert fresh.read_all_until_closed() == expected
        finally:
            conn.call("CONFIG", "SET", "proto-max-bulk-len", "512mb")
        reply = conn.call("CONFIG", "GET", "proto-max-bulk-len")
        assert reply == [b"proto-max-bulk-len", b"536870912"]


# -- DBSIZE, TIME, LASTSAVE, FUNCTION FLUSH, WAIT ------------------------------------------


def test_small_server_commands(shared_narad: NaradProcess) -> None:
    client = shared_narad.client(db=13)
    client.flushdb()
    assert client.dbsize() == 0
    for i in range(4):
        client.xadd(f"d{i}", {"a": "1"})
    assert client.dbsize() == 4
    seconds, micros = client.time()
    assert abs(seconds - time.time()) < 60 and 0 <= micros < 1_000_000
    lastsave = client.lastsave()
    assert abs(lastsave.timestamp() - time.time()) < 60
    assert client.execute_command("FUNCTION", "FLUSH") == b"OK"
    assert client.function_flush("SYNC") in (True, b"OK")
    assert client.execute_command("WAIT", 0, 0) == 0
    assert client.execute_command("WAIT", 1, 50) == 0
    client.flushdb()
    client.close()


# -- COMMAND -------------------------------------------------------------------------------


def test_command_shapes(shared_narad: NaradProcess) -> None:
    with Raw(shared_narad.port) as conn:
        everything = conn.call("COMMAND")
        names = conn.call("COMMAND", "LIST")
        assert conn.call("COMMAND", "COUNT") == len(everything)
        # As in Redis 7.0, COMMAND LIST names subcommands too.
        subcommands = {sub[0] for entry in everything for sub in entry[9]}
        assert set(names) == {e[0] for e in everything} | subcommands
        assert {b"client|list", b"config|get", b"command|docs"} <= subcommands
        required = {
            b"ping",
            b"echo",
            b"hello",
            b"auth",
            b"select",
            b"swapdb",
            b"quit",
            b"reset",
            b"client",
            b"info",
            b"config",
            b"dbsize",
            b"time",
            b"command",
            b"shutdown",
            b"lastsave",
            b"function",
            b"multi",
            b"exec",
            b"discard",
            b"watch",
            b"unwatch",
            b"monitor",
            b"slowlog",
            b"wait",
            b"del",
            b"unlink",
            b"exists",
            b"type",
            b"keys",
            b"scan",
            b"rename",
            b"renamenx",
            b"flushdb",
            b"flushall",
            b"xadd",
            b"xrange",
            b"xrevrange",
            b"xlen",
            b"xdel",
            b"xtrim",
            b"xread",
            b"xsetid",
        }
        assert required <= set(names)
        for entry in everything:
            name, arity, flags, first, last, step, categories, tips, specs, subs = entry
            assert isinstance(arity, int) and arity != 0
            assert isinstance(flags, list) and isinstance(categories, list)
            assert all(isinstance(x, int) for x in (first, last, step))
            assert isinstance(tips, list) and isinstance(specs, list) and isinstance(subs, list)
            for sub in subs:
                assert sub[0].startswith(name + b"|")
        (xadd,) = conn.call("COMMAND", "INFO", "xadd")
        assert xadd[:6] == [b"xadd", -5, xadd[2], 1, 1, 1]
        assert {b"write", b"fast"} <= set(xadd[2])
        assert b"@stream" in xadd[6]
        assert conn.call("COMMAND", "INFO", "XLEN", "nosuch")[1] is None
        (config,) = conn.call("COMMAND", "INFO", "config")
        assert {s[0] for s in config[9]} >= {b"config|get", b"config|set", b"config|rewrite"}
        docs = conn.call("COMMAND", "DOCS", "xadd", "ping")
        docs = dict(zip(docs[::2], docs[1::2], strict=True))
        assert set(docs) == {b"xadd", b"ping"}
        xadd_doc = dict(zip(docs[b"xadd"][::2], docs[b"xadd"][1::2], strict=True))
        assert xadd_doc[b"group"] == b"stream" and xadd_doc[b"since"] == b"5.0.0"
        assert xadd_doc[b"summary"]
        matching = conn.call("COMMAND", "LIST", "FILTERBY", "PATTERN", "x*")
        assert set(matching) == {n for n in names if n.startswith(b"x")}
        assert b"xadd" in conn.call("COMMAND", "LIST", "FILTERBY", "ACLCAT", "stream")
        assert conn.call("COMMAND", "GETKEYS", "XADD", "k", "*", "f", "v") == [b"k"]


# Redis 8's stream commands, with COMMAND INFO's name, arity, flags, key positions
# and categories as Redis 8 documents them (docs/streams.md).
REDIS_8_STREAM_COMMANDS = {
    b"xdelex": [-5, [b"write", b"fast"], 1, 1, 1, [b"@write", b"@stream", b"@fast"]],
    b"xackdel": [-6, [b"write", b"fast"], 1, 1, 1, [b"@write", b"@stream", b"@fast"]],
    b"xnack": [-7, [b"write", b"fast"], 1, 1, 1, [b"@write", b"@stream", b"@fast"]],
}
# Narad's commands that Redis 7.0 lacks (Redis 7.2 has the first ones; redis-py
# sends SETINFO).
NEWER_THAN_7_0 = {b"client|setinfo", b"client|no-touch", b"waitaof", *REDIS_8_STREAM_COMMANDS}
# Narad's own, besides the Q.* commands: a sentinel's failover steps (docs/failover.md).
NARAD_ONLY = {b"fence", b"promote"}


def _command_infos(conn: Raw, names: list[bytes]) -> dict[bytes, list[object]]:
    """COMMAND INFO's name, arity, flags, key positions and categories, subcommands
    included, for `names`."""
    out = {}
    for entry in conn.call("COMMAND", "INFO", *names):
        if entry is None:
            continue
        for item in (entry, *entry[9]):
            out[item[0]] = item[1:7]
    return out


def test_command_info_as_redis(shared_narad: NaradProcess, redis_server: RedisProcess) -> None:
    with Raw(shared_narad.port) as mine, Raw(redis_server.port) as theirs:
        names = [
            n for n in mine.call("COMMAND", "LIST") if b"|" not in n and not n.startswith(b"q.")
        ]
        narad, real = _command_infos(mine, names), _command_infos(theirs, names)
    assert set(narad) - set(real) == NEWER_THAN_7_0 | NARAD_ONLY
    differ = {
        name: (narad[name], real[name])
        for name in set(narad) & set(real)
        if narad[name] != real[name]
    }
    assert differ == {}


def test_command_info_of_redis_8_stream_commands(shared_narad: NaradProcess) -> None:
    with Raw(shared_narad.port) as conn:
        infos = _command_infos(conn, list(REDIS_8_STREAM_COMMANDS))
    assert infos == {name: [name, *info][1:] for name, info in REDIS_8_STREAM_COMMANDS.items()}


def _raw_reply(port: int, request: bytes) -> bytes:
    """The bytes of the reply to `request` under RESP3."""
    with Raw(port) as conn:
        conn.call("HELLO", "3")
        conn.send(request + b"PING\r\n")
        data = b""
        while not data.endswith(b"+PONG\r\n"):
            data += conn.sock.recv(65536)
    return data[: -len(b"+PONG\r\n")]


def test_command_info_and_help_resp3_shapes_as_redis(
    shared_narad: NaradProcess, redis_server: RedisProcess
) -> None:
    for request in (b"COMMAND INFO xlen\r\n", b"COMMAND INFO exec\r\n"):
        mine = _raw_reply(shared_narad.port, request)
        theirs = _raw_reply(redis_server.port, request)
        # name, arity, flags and categories: the same bytes (sets of simple strings).
        head = mine.split(b"*0\r\n")[0]
        assert theirs.startswith(head), (mine, theirs)
        assert b"~" in head
    for request in (b"CLIENT HELP\r\n", b"CONFIG HELP\r\n", b"SLOWLOG HELP\r\n"):
        mine = _raw_reply(shared_narad.port, request).split(b"\r\n")
        theirs = _raw_reply(redis_server.port, request).split(b"\r\n")
        assert mine[1] == theirs[1] and mine[1].startswith(b"+")
        assert all(line.startswith(b"+") for line in mine[1:-1])


def test_time_and_command_docs_raw_shapes(shared_narad: NaradProcess) -> None:
    with Raw(shared_narad.port) as conn:
        seconds, micros = conn.call("TIME")
        assert seconds.isdigit() and micros.isdigit()
        conn.call("HELLO", "3")
        docs = conn.call("COMMAND", "DOCS", "XLEN")
        assert set(docs) == {b"xlen"}
        assert docs[b"xlen"][b"group"] == b"stream"


def _cli(port: int, *args: str, stdin: str | None = None) -> str:
    result = subprocess.run(
        ["redis-cli", "-p", str(port), *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


CLI_RUNS: list[tuple[list[str], str | None]] = [
    (["PING"], None),
    (["-n", "14", "FLUSHDB"], None),
    (["-n", "14", "XADD", "cli", "1-1", "f", "v"], None),
    (["-n", "14", "XADD", "cli", "1-1", "f", "v"], None),
    (["-n", "14", "XRANGE", "cli", "-", "+"], None),
    (["-n", "14", "--no-raw", "XRANGE", "cli", "-", "+"], None),
    (["-n", "14", "XLEN", "nosuch"], None),
    (["-n", "14", "--no-raw", "XLEN", "cli"], None),
    (["-3", "-n", "14", "--no-raw", "XREAD", "STREAMS", "cli", "0"], None),
    (["-3", "-n", "14", "--no-raw", "XREAD", "STREAMS", "cli", "1-1"], None),
    (["-n", "14"], 'PING\nXLEN cli\nECHO "two words"\nNOSUCH x\nXADD cli 1-1 a b\n'),
    (["-n", "14", "--scan", "--pattern", "c*"], None),
    (["-n", "14", "TYPE", "cli"], None),
    (["-n", "14", "FLUSHDB"], None),
]


@pytest.mark.skipif(shutil.which("redis-cli") is None, reason="redis-cli is not installed")
def test_redis_cli_as_with_redis(shared_narad: NaradProcess, redis_server: RedisProcess) -> None:
    for args, stdin in CLI_RUNS:
        mine = _cli(shared_narad.port, *args, stdin=stdin)
        theirs = _cli(redis_server.port, *args, stdin=stdin)
        assert mine == theirs, args


@pytest.mark.skipif(shutil.which("redis-cli") is None, reason="redis-cli is not installed")
def test_redis_cli_command_docs_and_info(shared_narad: NaradProcess) -> None:
    port = shared_narad.port
    docs = _cli(port, "COMMAND", "DOCS", "XADD")
    assert docs.splitlines()[0] == "xadd" and "summary" in docs and "stream" in docs
    assert "redis_version:7.0." in _cli(port, "INFO", "server")
    assert "cluster_enabled:0" in _cli(port, "INFO")
    assert _cli(port, "COMMAND", "COUNT").strip().isdigit()


# -- SLOWLOG -------------------------------------------------------------------------------


def _slowlog_run(port: int) -> list[list[object]]:
    with Raw(port) as conn:
        conn.call("CONFIG", "SET", "slowlog-log-slower-than", "0")
        try:
            conn.call("SLOWLOG", "RESET")
            conn.call("CLIENT", "SETNAME", "slowpoke")
            conn.call("XADD", "slow", "1-1", *["f", "v"] * 20)
            conn.call("ECHO", "x" * 200)
            conn.call("XLEN", "slow")
            conn.call("DEL", "slow")
            assert conn.call("SLOWLOG", "LEN") == 6
            entries = conn.call("SLOWLOG", "GET", "-1")
            assert len(conn.call("SLOWLOG", "GET", "2")) == 2
            assert len(conn.call("SLOWLOG", "GET")) == 9
        finally:
            conn.call("CONFIG", "SET", "slowlog-log-slower-than", "10000")
    ids = [e[0] for e in entries]
    assert ids == sorted(ids, reverse=True) and len(set(ids)) == len(ids)
    for entry in entries:
        assert isinstance(entry[1], int) and abs(entry[1] - time.time()) < 60
        assert isinstance(entry[2], int) and entry[2] >= 0
        assert entry[4].startswith(b"127.0.0.1:")
    return [[e[3], e[5]] for e in entries]


def test_slowlog_as_redis(shared_narad: NaradProcess, redis_server: RedisProcess) -> None:
    mine, theirs = _slowlog_run(shared_narad.port), _slowlog_run(redis_server.port)
    assert mine == theirs
    assert [b"ECHO", b"x" * 128 + b"... (72 more bytes)"] in [argv for argv, _ in mine]


def test_slowlog_max_len_and_off(tmp_path: Path) -> None:
    server = NaradProcess(tmp_path / "n").start()
    try:
        with Raw(server.port) as conn:
            conn.call("CONFIG", "SET", "slowlog-log-slower-than", "0", "slowlog-max-len", "3")
            for _ in range(5):
                conn.call("PING")
            assert conn.call("SLOWLOG", "LEN") == 3
            conn.call("CONFIG", "SET", "slowlog-log-slower-than", "-1")
            assert conn.call("SLOWLOG", "RESET") == b"OK"
            conn.call("PING")
            assert conn.call("SLOWLOG", "LEN") == 0
    finally:
        server.stop()


def test_slowlog_hides_passwords(tmp_path: Path) -> None:
    server = NaradProcess(tmp_path / "n", ["--requirepass", "pw"]).start()
    try:
        with Raw(server.port) as conn:
            conn.call("AUTH", "pw")
            conn.call("CONFIG", "SET", "slowlog-log-slower-than", "0")
            conn.call("AUTH", "default", "pw")
            conn.call("HELLO", "2", "AUTH", "default", "pw")
            entries = conn.call("SLOWLOG", "GET", "-1")
            logged = [arg for entry in entries for arg in entry[3]]
            assert b"pw" not in logged
            assert [b"AUTH", b"(redacted)", b"(redacted)"] in [e[3] for e in entries]
    finally:
        server.stop()


# -- MONITOR ---------------------------------------------------------------------------------


def _read_lines(sock: socket.socket, count: int) -> list[bytes]:
    data = b""
    while data.count(b"\r\n") < count:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    return data.split(b"\r\n")[:count]


def test_monitor(shared_narad: NaradProcess) -> None:
    with Raw(shared_narad.port) as watcher, Raw(shared_narad.port) as other:
        assert watcher.call("MONITOR") == b"OK"
        other.call("SELECT", "8")
        other.call("XADD", "mon", "*", "field", 'a "quoted"\nvalue')
        other.call("XLEN", "mon")
        lines = _read_lines(watcher.sock, 3)
        assert all(line.startswith(b"+") for line in lines)
        stamp, rest = lines[1][1:].split(b" ", 1)
        assert abs(float(stamp) - time.time()) < 60
        assert rest.startswith(b"[8 127.0.0.1:")
        assert rest.endswith(b'] "XADD" "mon" "*" "field" "a \\"quoted\\"\\nvalue"')
        assert lines[2].endswith(b'"XLEN" "mon"')
        # The monitor's own connection accepts nothing but QUIT/RESET in Redis; a new
        # connection still works and the monitor keeps receiving.
        assert shared_narad.client().ping()
        other.call("DEL", "mon")


def _monitor_lines(port: int) -> list[bytes]:
    """What a MONITOR sees of another client's commands, timestamps and addresses
    left out."""
    with Raw(port) as watcher, Raw(port) as other:
        watcher.call("MONITOR")
        for args in (
            ["SELECT", "2"],
            ["XADD", "mon2", "1-1", "a", "1"],
            ["CONFIG", "GET", "maxclients"],
            ["CLIENT", "LIST"],
            ["MULTI"],
            ["XLEN", "mon2"],
            ["EXEC"],
            ["XLEN"],
            ["NOSUCH"],
            ["DEL", "mon2"],
            ["PING"],
        ):
            other.call(*args)
        data = b""
        while not data.endswith(b'"PING"\r\n'):
            data += watcher.sock.recv(65536)
        return [
            re.sub(rb"^\+\d+\.\d+ \[(\d+) [^\]]+\]", rb"[\1]", line)
            for line in data.split(b"\r\n")[:-1]
        ]


def test_monitor_as_redis(shared_narad: NaradProcess, redis_server: RedisProcess) -> None:
    assert _monitor_lines(shared_narad.port) == _monitor_lines(redis_server.port)


def test_monitor_hides_passwords(tmp_path: Path) -> None:
    server = NaradProcess(tmp_path / "n", ["--requirepass", "pw"]).start()
    try:
        with Raw(server.port) as watcher, Raw(server.port) as other:
            watcher.call("AUTH", "pw")
            watcher.call("MONITOR")
            other.call("AUTH", "pw")
            other.call("AUTH", "default", "pw")
            other.call("HELLO", "2", "AUTH", "default", "pw", "SETNAME", "n")
            other.call("PING")
            lines = _read_lines(watcher.sock, 4)
            assert lines[0].endswith(b'"AUTH" "(redacted)"'), lines
            assert lines[1].endswith(b'"AUTH" "(redacted)" "(redacted)"'), lines
            assert lines[2].endswith(
                b'"HELLO" "2" "AUTH" "(redacted)" "(redacted)" "SETNAME" "n"'
            ), lines
            assert b"pw" not in b"".join(lines)
    finally:
        server.stop()


# -- SHUTDOWN --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "how", [["SHUTDOWN"], ["SHUTDOWN", "NOSAVE"], ["SHUTDOWN", "SAVE"], "SIGTERM"]
)
def test_shutdown_exits_zero_and_keeps_data(tmp_path: Path, how: object) -> None:
    server = NaradProcess(tmp_path / "n").start()
    client = server.client()
    added = [client.xadd("kept", {"n": str(i)}) for i in range(50)]
    client.execute_command("SELECT", 3)
    client.xadd("kept3", {"a": "1"})
    client.close()
    assert server.proc is not None
    if how == "SIGTERM":
        server.proc.terminate()
    else:
        with Raw(server.port) as conn:
            conn.send_command(*how)  # type: ignore[misc]
            # The connection closes without a reply, as Redis's does on success.
            assert conn.read_all_until_closed() == b""
    assert server.proc.wait(20) == 0
    server.start()
    try:
        client = server.client()
        assert [e[0] for e in client.xrange("kept")] == added
        client.execute_command("SELECT", 3)
        assert client.xlen("kept3") == 1
        client.close()
    finally:
        server.stop()


def test_shutdown_in_multi_is_refused(tmp_path: Path) -> None:
    server = NaradProcess(tmp_path / "n").start()
    try:
        with Raw(server.port) as conn:
            conn.call("MULTI")
            conn.call("SHUTDOWN")
            reply = conn.call("EXEC")
            # Redis refuses SHUTDOWN when it is queued (EXEC then answers EXECABORT); at
            # the least it must not run inside EXEC.
            assert reply in (
                [("error", "ERR Command not allowed inside a transaction")],
                ("error", "EXECABORT Transaction discarded because of previous errors."),
            )
        assert server.client().ping()
        assert server.proc is not None and server.proc.poll() is None
    finally:
        server.stop()


def test_shutdown_with_blocked_and_pipelining_clients(tmp_path: Path) -> None:
    server = NaradProcess(tmp_path / "n").start()
    blocked = Raw(server.port)
    blocked.send_command("XREAD", "BLOCK", "0", "STREAMS", "nothing", "$")
    wait_until(lambda: server.client().info("clients")["blocked_clients"] == 1)
    with Raw(server.port) as conn:
        conn.send_command("SHUTDOWN")
        conn.read_all_until_closed()
    assert blocked.read_all_until_closed() == b""
    blocked.close()
    assert server.proc is not None and server.proc.wait(20) == 0


def test_redis_py_shutdown(tmp_path: Path) -> None:
    server = NaradProcess(tmp_path / "n").start()
    client = server.client(retry=Retry(NoBackoff(), 0))
    client.xadd("s", {"a": "1"})
    assert client.shutdown() is None  # redis-py expects the connection to drop
    assert server.proc is not None and server.proc.wait(20) == 0
    assert os.listdir(server.folder / "data")
