"""The wire protocol through raw sockets: inline commands, pipelining, malformed input
and its `-ERR Protocol error: ...` texts, size limits, pre-auth limits, and a fuzz test
in which garbage on one connection never disturbs another. Compared byte for byte
with redis-server 7.0 where Redis 7.0 behaves the same."""

from __future__ import annotations

import contextlib
import re
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import hiredis
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.examples import examples
from tests.server.raw import Raw, encode
from tests.servers import NaradProcess, RedisProcess


def exchange(port: int, data: bytes | list[bytes]) -> bytes:
    """Send `data`, close the sending half, and return everything the server sends
    until it closes. A server that waits for more input sees end-of-file and closes,
    so commands that are incomplete simply get no reply."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        for chunk in data if isinstance(data, list) else [data]:
            try:
                sock.sendall(chunk)
            except (BrokenPipeError, ConnectionResetError):
                break
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_WR)
        out = b""
        try:
            while chunk := sock.recv(65536):
                out += chunk
        except ConnectionResetError:
            pass
        return out


INLINE = [
    b"PING\r\n",
    b"PING\n",
    b"ping hello\r\n",
    b"PING\r\nPING\nPING\r\n",
    b"\r\n\r\nPING\r\n",
    b"   \r\nPING\r\n",
    b"  PING   a  \r\n",
    b"\tPING\tb\r\n",
    b'ECHO "two words"\r\n',
    b"ECHO 'single quoted'\r\n",
    b'ECHO "a\\x41b"\r\n',
    b'ECHO "tab\\there\\nnewline"\r\n',
    b"ECHO 'a\\'b'\r\n",
    b'ECHO ""\r\n',
    b"ECHO ''\r\n",
    b'ECHO "x"y\r\n',
    b"ECHO 'x'y\r\n",
    b'ECHO "unbalanced\r\n',
    b"ECHO 'unbalanced\r\n",
    b'ECHO "\\xZZ"\r\n',
    b"XADD inline 1-1 field value\r\nXRANGE inline - +\r\nDEL inline\r\n",
    b"ECHO\r\n",
    b"NOSUCH a b\r\n",
    b"PING\r\nQUIT\r\nPING\r\n",
    b"PING",  # no line end: waits for more
]

MALFORMED = [
    b"*x\r\n",
    b"*-1\r\nPING\r\n",
    b"*0\r\nPING\r\n",
    b"*1\r\n+PING\r\n",
    b"*1\r\n:1\r\n",
    b"*1\r\n$x\r\n",
    b"*1\r\n$-1\r\n",
    b"*1\r\n$ 4\r\nPING\r\n",
    b"*1 \r\n$4\r\nPING\r\n",
    b"*+1\r\n$4\r\nPING\r\n",
    b"*1\r\n$+4\r\nPING\r\n",
    b"*01\r\n$04\r\nPING\r\n",
    b"*1\r\n$4\r\nPINGxx\r\n",
    b"*1\r\n$4\r\nPING\r\n*2\r\n:1\r\n",
    b"*1\r\n$4\r\nPING\r\n\x00\x01\r\n",
    b"*1\r\n$4\r\nPING\r\n*1\r\n$0\r\n\r\n",
    b"*2\r\n$4\r\nECHO\r\n$3\r\nabc",
    b"*3\r\n$3\r\nSET\r\n",
    b"*" + b"1" * 70000,
    b"*1\r\n$" + b"1" * 70000,
    b"A" * 70000,
    b"*1\r\n$536870913\r\n",
    b"*1\r\n$536870912\r\n",
    b"*3000000000\r\n",
    b"*99999999999999999999\r\n",
    b"*1\r\n$99999999999999999999\r\n",
    b"*1\r\n$-2\r\n",
    b"*-5\r\n",
    b"*\r\n",
    b"$4\r\nPING\r\n",
    b"+PING\r\n",
]


@pytest.mark.parametrize("data", INLINE, ids=repr)
def test_inline_as_redis(
    data: bytes, shared_narad: NaradProcess, redis_server: RedisProcess
) -> None:
    assert exchange(shared_narad.port, data) == exchange(redis_server.port, data)


@pytest.mark.parametrize("data", MALFORMED, ids=lambda d: repr(d[:30]))
def test_malformed_as_redis(
    data: bytes, shared_narad: NaradProcess, redis_server: RedisProcess
) -> None:
    mine = exchange(shared_narad.port, data)
    assert mine == exchange(redis_server.port, data)
    if b"Protocol error" in mine:
        assert mine.endswith(b"\r\n") and mine.count(b"-ERR Protocol error") == 1


def test_unknown_binary_command_name_as_redis(
    shared_narad: NaradProcess, redis_server: RedisProcess
) -> None:
    data = b"\xff\xfe\r\n"
    assert exchange(shared_narad.port, data) == exchange(redis_server.port, data)


def test_protocol_error_closes_after_earlier_replies(shared_narad: NaradProcess) -> None:
    with Raw(shared_narad.port) as conn:
        conn.send(b"PING\r\nECHO a\r\n*1\r\n+bad\r\nPING\r\n")
        data = conn.read_all_until_closed()
    assert data == b"+PONG\r\n$1\r\na\r\n-ERR Protocol error: expected '$', got '+'\r\n"


def test_many_arguments_beyond_narads_bound(shared_narad: NaradProcess) -> None:
    """A deliberate difference: Redis 7.0 accepts up to INT_MAX arguments in one
    request and waits for them; Narad bounds a request at 1024*1024 arguments with
    Redis's own error text."""
    assert exchange(shared_narad.port, b"*1048577\r\n") == (
        b"-ERR Protocol error: invalid multibulk length\r\n"
    )
    # Right at the bound the request is valid and waited on.
    assert exchange(shared_narad.port, b"*1048576\r\n$6\r\nEXISTS\r\n") == b""


def test_bulk_within_proto_max_bulk_len(shared_narad: NaradProcess) -> None:
    payload = b"z" * 3_000_000
    with Raw(shared_narad.port) as conn:
        assert conn.call("ECHO", payload) == payload
        conn.call("SELECT", "1")
        conn.call("DEL", "big")
        assert conn.call("XADD", "big", "1-0", "f", payload) == b"1-0"
        assert conn.call("XRANGE", "big", "-", "+") == [[b"1-0", [b"f", payload]]]
        conn.call("DEL", "big")


def test_proto_max_bulk_len_setting(tmp_path: Path) -> None:
    server = NaradProcess(tmp_path / "n").start()
    try:
        with Raw(server.port) as conn:
            conn.call("CONFIG", "SET", "proto-max-bulk-len", "2mb")
            assert conn.call("ECHO", b"a" * (2 * 1024 * 1024)) == b"a" * (2 * 1024 * 1024)
        assert exchange(server.port, b"*2\r\n$4\r\nECHO\r\n$2097153\r\n") == (
            b"-ERR Protocol error: invalid bulk length\r\n"
        )
    finally:
        server.stop()


def test_query_buffer_limit_closes_silently(tmp_path: Path) -> None:
    server = NaradProcess(tmp_path / "n").start()
    try:
        with Raw(server.port) as conn:
            conn.call("CONFIG", "SET", "client-query-buffer-limit", "1mb")
            # As in Redis: a request whose unread part grows past the limit is dropped
            # with its connection, without a reply.
            data = [b"*2\r\n$4\r\nECHO\r\n$2000000\r\n", b"x" * 1_500_000]
            assert exchange(server.port, data) == b""
            assert conn.call("PING") == b"PONG"
    finally:
        server.stop()


# -- pipelining ----------------------------------------------------------------------------


def test_pipelining_many_commands_in_one_send(shared_narad: NaradProcess) -> None:
    commands = [b"SELECT 2\r\n", b"DEL pipe\r\n"]
    for i in range(1, 2001):
        commands.append(encode(["XADD", "pipe", f"{i}-0", "n", str(i)]))
        if i % 100 == 0:
            commands.append(encode(["ECHO", f"mark{i}"]))
            commands.append(b"XLEN pipe\r\n")
    commands.append(b"XADD pipe 1-0 n again\r\n")
    commands.append(b"PING\r\n")
    with Raw(shared_narad.port) as conn:
        conn.send(b"".join(commands))
        assert conn.read() == b"OK"
        assert conn.read() in (0, 1)
        for i in range(1, 2001):
            assert conn.read() == f"{i}-0".encode()
            if i % 100 == 0:
                assert conn.read() == f"mark{i}".encode()
                assert conn.read() == i
        assert conn.read()[0] == "error"
        assert conn.read() == b"PONG"
        assert conn.call("XLEN", "pipe") == 2000
        conn.call("DEL", "pipe")


@pytest.mark.parametrize("marker", [b"%", b"~"])
def test_a_map_or_set_after_a_command_reads_as_redis_does(
    shared_narad: NaradProcess, marker: bytes
) -> None:
    """hiredis refuses `%1` / `~1` holding an array (no dict or set can hold one):
    the commands before it still run and the rest is read as Redis 7.0 reads it
    (inline lines; these replies are redis-server's)."""
    tail = marker + b"1\r\n*1\r\n$0\r\n\r\n"
    reply = exchange(shared_narad.port, encode(["PING"]) + tail + encode(["PING"]))
    assert reply == (
        b"+PONG\r\n-ERR unknown command '" + marker + b"1', with args beginning with: \r\n"
        b"-ERR unknown command '', with args beginning with: \r\n+PONG\r\n"
    )


def test_pipelining_byte_by_byte(shared_narad: NaradProcess) -> None:
    request = b"PING\r\n" + encode(["ECHO", "split"]) + b"ECHO inline\r\n"
    with socket.create_connection(("127.0.0.1", shared_narad.port), timeout=10) as sock:
        for i in range(len(request)):
            sock.sendall(request[i : i + 1])
        expected = b"+PONG\r\n$5\r\nsplit\r\n$6\r\ninline\r\n"
        data = b""
        while len(data) < len(expected):
            data += sock.recv(1024)
        assert data == expected


def test_redis_py_non_transaction_pipeline(shared_narad: NaradProcess) -> None:
    for proto in (2, 3):
        client = shared_narad.client(protocol=proto, db=3)
        client.delete("nt")
        with client.pipeline(transaction=False) as pipe:
            for i in range(500):
                pipe.xadd("nt", {"i": str(i)}, id=f"{i + 1}-0")
            pipe.xlen("nt")
            results = pipe.execute()
        assert results[:500] == [f"{i + 1}-0".encode() for i in range(500)]
        assert results[500] == 500
        client.delete("nt")
        client.close()


# -- before AUTH ---------------------------------------------------------------------------


UNAUTHENTICATED = [
    b"*11\r\n",
    b"*10\r\n",
    b"*1\r\n$16385\r\n",
    b"*1\r\n$16384\r\n",
    b"A" * 20000 + b"\r\n",
    b"PING\r\n",
    b"PING x y z\r\n",
    b"AUTH s3cret\r\n*20\r\n",
    b"*2\r\n$4\r\nAUTH\r\n$6\r\ns3cret\r\n*1\r\n$20000\r\n",
    b"AUTH wrong\r\n*11\r\n",
    b"AUTH s3cret\r\nPING\r\n",
    b"HELLO 3 AUTH default s3cret\r\n*1\r\n$20000\r\n",
]


@pytest.mark.parametrize("data", UNAUTHENTICATED, ids=lambda d: repr(d[:30]))
def test_unauthenticated_limits_as_redis(
    data: bytes, narad_pw: NaradProcess, redis_pw: RedisProcess
) -> None:
    mine, theirs = exchange(narad_pw.port, data), exchange(redis_pw.port, data)
    if data.startswith(b"HELLO"):  # HELLO's reply has the connection id
        mine, theirs = (re.sub(rb"\$2\r\nid\r\n:\d+\r\n", b"", x) for x in (mine, theirs))
    assert mine == theirs


# -- fuzzing ---------------------------------------------------------------------------------

TOKENS = [
    b"*",
    b"$",
    b"\r\n",
    b"\n",
    b"\r",
    b"0",
    b"1",
    b"2",
    b"3",
    b"-1",
    b"10",
    b"1024",
    b"99999999999",
    b"PING",
    b"ECHO",
    b"XADD",
    b"XRANGE",
    b"XREAD",
    b"XLEN",
    b"DEL",
    b"MULTI",
    b"EXEC",
    b"BLOCK",
    b"STREAMS",
    b"COUNT",
    b"fuzz",
    b"-",
    b"+",
    b"*",
    b"$",
    b'"',
    b"'",
    b"\\x4",
    b"\\",
    b" ",
    b"\x00",
    b"\xff",
    b":",
    b"_",
    b"%",
    b"~",
]

COMMAND_WORDS = [b"PING", b"ECHO", b"XLEN", b"XADD", b"fuzz", b"*", b"1-1", b"x"]
garbage = st.one_of(
    st.binary(max_size=300),
    st.lists(st.sampled_from(TOKENS), max_size=60).map(b"".join),
    st.lists(st.lists(st.sampled_from(COMMAND_WORDS), min_size=1, max_size=6), max_size=5).flatmap(
        lambda cmds: st.integers(0, max(0, sum(len(encode(c)) for c in cmds))).map(
            lambda cut: b"".join(encode(c) for c in cmds)[:cut]  # truncated requests
        )
    ),
)


@pytest.fixture(scope="module")
def fuzz_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NaradProcess]:
    server = NaradProcess(tmp_path_factory.mktemp("narad-fuzz"))
    server.start()
    yield server
    server.stop()


class Bystander:
    """A second connection that keeps doing PING and XADD while the fuzzing runs."""

    def __init__(self, port: int) -> None:
        self.conn = Raw(port)
        self.conn.call("SELECT", "5")
        self.conn.call("DEL", "bystander")
        self.added = 0
        self.failures: list[object] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                pong = self.conn.call("PING")
                added = self.conn.call("XADD", "bystander", "*", "n", str(self.added))
            except Exception as exc:  # the connection itself failed
                self.failures.append(exc)
                return
            if pong != b"PONG" or not isinstance(added, bytes):
                self.failures.append((pong, added))
                return
            self.added += 1

    def finish(self) -> int:
        self.stop.set()
        self.thread.join(10)
        assert self.failures == []
        length = self.conn.call("XLEN", "bystander")
        self.conn.close()
        return length  # type: ignore[no-any-return]


def _well_formed(data: bytes) -> bool:
    """The server's answer parses as RESP replies, with at most one protocol error,
    which comes last."""
    reader = hiredis.Reader()
    reader.feed(data)
    replies = []
    while (reply := reader.gets()) is not False:
        replies.append(reply)
    if reader.has_data():  # a reply cut short
        return False
    errors = [
        i
        for i, r in enumerate(replies)
        if isinstance(r, hiredis.ReplyError) and str(r).startswith("Protocol error")
    ]
    return not errors or errors == [len(replies) - 1]


def test_fuzz_garbage_never_disturbs_others(fuzz_server: NaradProcess) -> None:
    bystander = Bystander(fuzz_server.port)
    checker = Raw(fuzz_server.port)
    seen = {"examples": 0}

    @settings(
        max_examples=examples(1500),
        deadline=None,
        derandomize=True,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        database=None,
    )
    @given(data=garbage, split=st.integers(0, 300))
    def one_connection(data: bytes, split: int) -> None:
        seen["examples"] += 1
        answer = exchange(fuzz_server.port, [data[:split], data[split:]])
        assert _well_formed(answer), (data, answer)
        assert fuzz_server.proc is not None and fuzz_server.proc.poll() is None
        assert checker.call("PING") == b"PONG"

    try:
        one_connection()
    finally:
        added = bystander.finish()
    assert seen["examples"] >= examples(500)
    assert added >= 1
    assert checker.call("ECHO", "still fine") == b"still fine"
    checker.close()
    assert "Traceback" not in fuzz_server.log_path.read_text(errors="replace")
