"""The parsers against a real redis-server: same commands run, same error text,
for fixed cases and for random inputs. Skipped when redis-server is absent."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import hiredis
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from narad.resp import ErrorReply, PurePythonRequestParser, encode, encode_request

from ._support import PARSERS, Outcome, run
from .test_inline import CASES as INLINE_CASES

REDIS_SERVER = shutil.which("redis-server")
pytestmark = pytest.mark.skipif(REDIS_SERVER is None, reason="redis-server not installed")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.fixture(scope="module")
def redis_port(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    assert REDIS_SERVER is not None
    version = subprocess.run([REDIS_SERVER, "--version"], capture_output=True, text=True).stdout
    if " v=7." not in version:
        pytest.skip(f"error texts are Redis 7's; found {version.strip()}")
    port = free_port()
    directory: Path = tmp_path_factory.mktemp("redis")
    server = subprocess.Popen(
        [REDIS_SERVER, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
         "--appendonly", "no", "--dir", str(directory), "--loglevel", "warning"],
        stdout=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        wait_for_ping(port, deadline=time.monotonic() + 10)
        yield port
    finally:
        server.terminate()
        server.wait(timeout=10)


def wait_for_ping(port: int, deadline: float) -> None:
    while True:
        try:
            if exchange(port, b"PING\r\n") == b"+PONG\r\n":
                return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise TimeoutError("redis-server did not start")
        time.sleep(0.05)


def exchange(port: int, data: bytes) -> bytes:
    """Send `data`, close our side, and return every byte Redis sends before it
    closes the connection (it runs what it parsed, then sees the end)."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(data)
        sock.shutdown(socket.SHUT_WR)
        replies = b""
        while chunk := sock.recv(65536):
            replies += chunk
        return replies


def expected_replies(outcome: Outcome) -> bytes:
    """What Redis answers to the commands and error of `outcome`; only PING and
    one-argument ECHO are allowed, so the answers are known."""
    out = bytearray()
    for command in outcome.commands:
        if command == [b"PING"]:
            out += b"+PONG\r\n"
        else:
            assert command[0] == b"ECHO" and len(command) == 2
            out += encode(command[1], 2)
    if outcome.error is not None:
        out += ErrorReply("ERR", outcome.error).frame
    return bytes(out)


def only_ping_and_echo(outcome: Outcome) -> bool:
    return all(c == [b"PING"] or (c[0] == b"ECHO" and len(c) == 2) for c in outcome.commands)


PING = encode_request([b"PING"])
FIXED = [
    PING + b"PING\r\n" + encode_request([b"ECHO", b"a\r\nb"]),
    PING + b"*1\r\nx\r\n",
    b"*1\r\n\r\n",
    b"*1\r\n\n\r\n",
    b"*1\r\n\xff\r\n",
    b"*1\r\n$\xff\r\n",
    b"*1\r\n+PING\r\n",
    b"*1\r\n+1\r\n1\r\n",
    b"*2\r\n$4\r\nECHO\r\n:1\r\n",
    b"*-5\r\n*0\r\n*-1\r\n" + PING,
    b"*1\r\n$4\r\nPINGXY" + PING,
    b"*1\rX$4\rYPING\r\n",
    b"*01\r\n",
    b"*-0\r\n",
    b"*1\r\n$-1\r\n",
    b"*1\r\n$04\r\nPING\r\n",
    b"*1\r\n$536870913\r\n",
    b"*9223372036854775808\r\n",
    b"*1\r\n$4\x00\r\nPING\r\n",
    b"PING\x00\r\n",
    b"*1\x00\r\n" + b"x" * 70000,
    b"*1\r\n$1\x00\r\n" + b"x" * 70000,
    b"PING\x00\r\n" + b"x" * 70000,
    b"*" + b"1" * 70000,
    b"*1\r\n$" + b"1" * 70000,
    b"x" * 70000,
    b"ECHO \"a\\x41\\n\" \r\nECHO 'b\\'c'\r\n  \r\n\nPING\n",
    b'ECHO "a"b\r\n',
    b"ECHO 'a\r\n",
    b"ECHO a\x0bb\r\n",
    PING[:-3],
]


@pytest.mark.parametrize("data", FIXED, ids=lambda d: repr(d)[:50])
def test_fixed_inputs(redis_port: int, data: bytes) -> None:
    outcome = run(PurePythonRequestParser, [data])
    assert only_ping_and_echo(outcome)
    assert exchange(redis_port, data) == expected_replies(outcome)


@pytest.mark.parametrize(
    ("line", "expected"),
    [(line, args) for line, args in INLINE_CASES if b"\n" not in line and args != []],
    ids=lambda v: repr(v)[:40],
)
def test_inline_quoting(redis_port: int, line: bytes, expected: list[bytes] | None) -> None:
    request = b"DEL k\r\nRPUSH k " + line + b"\r\nLRANGE k 0 -1\r\n"
    reader = hiredis.Reader()
    reader.feed(exchange(redis_port, request))
    replies = []
    while (reply := reader.gets()) is not False:
        replies.append(reply)
    if expected is None:
        assert str(replies[1]) == "ERR Protocol error: unbalanced quotes in request"
    else:
        assert replies[2] == expected


PIECES = [
    PING, b"PING\r\n", b"PING\n", b"ECHO ", b"*2\r\n$4\r\nECHO\r\n", b"$1\r\n", b"$3\r\n", b"a",
    b"\r\n", b"\r", b"\n", b"*", b"$", b"-1", b"0", b"+", b":", b'"', b"'", b"\\x4", b"\\",
    b" ", b"\x0b", b"\x00", b"*1\r\n", b"*0\r\n", b"*-1\r\n",
]  # fmt: skip
redis_input_st = st.lists(
    st.one_of(
        st.sampled_from(PIECES),
        st.binary(max_size=8).map(lambda b: encode_request([b"ECHO", b])),
        st.binary(max_size=3),
    ),
    max_size=12,
).map(b"".join)


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=redis_input_st)
def test_random_inputs(redis_port: int, data: bytes) -> None:
    outcomes = [run(cls, [data]) for cls in PARSERS]
    assert all(o == outcomes[0] for o in outcomes)
    assume(only_ping_and_echo(outcomes[0]))
    assert exchange(redis_port, data) == expected_replies(outcomes[0])
