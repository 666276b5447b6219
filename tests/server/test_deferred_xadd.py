"""Plain XADDs of several clients in one loop iteration are held back and applied
together, as one log append (narad/server.py, "Deferred writes"). Nothing a client
does may tell: every command sees the XADDs that came before it, and each client's
replies come in the order of its commands.

Several clients' requests must land in one loop iteration, so the server runs in
this process (tests/server/inprocess.py): the test writes all of them, then yields.
Each scenario also checks that they did share one iteration (one commit), or it
would prove nothing."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path
from typing import Any

import hiredis

from narad.server import Server
from tests.server.inprocess import connect, open_server, reply
from tests.server.raw import encode


def _send(sock: socket.socket, *commands: tuple[Any, ...]) -> None:
    """Write `commands` as one pipeline, without yielding to the loop."""
    sock.send(b"".join(encode(c) for c in commands))


def _parse(data: bytes) -> list[Any]:
    reader = hiredis.Reader()
    reader.feed(data)
    out = []
    while (value := reader.gets()) is not False:
        out.append(value)
    return out


async def _replies(*socks: socket.socket) -> list[list[Any]]:
    return [_parse(await reply(sock)) for sock in socks]


def _commits(server: Server) -> int:
    return server.store.group_commit.stats.commits


async def _setup(folder: Path, clients: int, *streams: bytes) -> tuple[Server, list[socket.socket]]:
    server = open_server(folder)
    socks = [await connect(server) for _ in range(clients)]
    for key in streams:
        _send(socks[0], ("XADD", key, "0-1", "f", "first"))
        assert await _replies(socks[0]) == [[b"0-1"]]
    return server, socks


def _close(server: Server, socks: list[socket.socket]) -> None:
    for sock in socks:
        sock.close()
    server.store.close()


async def _reader_after_adds(folder: Path) -> None:
    server, (a, b, c) = await _setup(folder, 3, b"s")
    commits = _commits(server)
    _send(a, ("XADD", "s", "*", "f", "a"))
    _send(b, ("XADD", "s", "*", "f", "b"))
    _send(c, ("XRANGE", "s", "-", "+"), ("XLEN", "s"))
    [[id_a], [id_b], [entries, length]] = await _replies(a, b, c)
    assert _commits(server) == commits + 1  # one iteration
    assert entries == [[b"0-1", [b"f", b"first"]], [id_a, [b"f", b"a"]], [id_b, [b"f", b"b"]]]
    assert length == 3
    ms_a, seq_a = map(int, id_a.split(b"-"))
    assert id_b == b"%d-%d" % (ms_a, seq_a + 1)  # one clock reading for both
    _close(server, [a, b, c])


def test_a_reader_sees_the_adds_of_its_iteration_that_came_before_it(tmp_path: Path) -> None:
    asyncio.run(_reader_after_adds(tmp_path))


async def _pipeline_across_streams(folder: Path) -> None:
    server, (a, b) = await _setup(folder, 2, b"s1", b"s2")
    commits = _commits(server)
    _send(
        a,
        ("XADD", "s1", "*", "n", "1"),
        ("XADD", "s2", "*", "n", "2"),
        ("XADD", "s1", "*", "n", "3"),
        ("XLEN", "s1"),
        ("XADD", "s1", "*", "n", "4"),
    )
    _send(b, ("XADD", "s1", "*", "n", "5"), ("XADD", "s2", "*", "n", "6"))
    [[one, two, three, length, four], [five, six]] = await _replies(a, b)
    assert _commits(server) == commits + 1
    assert length == 3
    _send(a, ("XRANGE", "s1", "-", "+"), ("XRANGE", "s2", "-", "+"))
    [[s1, s2]] = await _replies(a)
    assert s1 == [
        [b"0-1", [b"f", b"first"]],
        [one, [b"n", b"1"]],
        [three, [b"n", b"3"]],
        [four, [b"n", b"4"]],
        [five, [b"n", b"5"]],
    ]
    assert s2 == [[b"0-1", [b"f", b"first"]], [two, [b"n", b"2"]], [six, [b"n", b"6"]]]
    _close(server, [a, b])


def test_each_clients_replies_keep_the_order_of_its_commands(tmp_path: Path) -> None:
    asyncio.run(_pipeline_across_streams(tmp_path))


async def _watch_then_add(folder: Path) -> None:
    server, (a, b) = await _setup(folder, 2, b"s")
    _send(b, ("WATCH", "s"), ("MULTI",), ("XLEN", "s"))
    assert await _replies(b) == [[b"OK", b"OK", b"QUEUED"]]
    commits = _commits(server)
    _send(a, ("XADD", "s", "*", "f", "a"))
    _send(b, ("EXEC",))
    [[added], [executed]] = await _replies(a, b)
    assert _commits(server) == commits + 1
    assert added.startswith(b"1") and executed is None  # the watched key changed first
    _close(server, [a, b])


def test_exec_after_an_add_of_its_iteration_to_a_watched_key_aborts(tmp_path: Path) -> None:
    asyncio.run(_watch_then_add(tmp_path))


async def _blocked_reader(folder: Path) -> None:
    server, (a, b, r) = await _setup(folder, 3, b"s")
    _send(r, ("XREAD", "BLOCK", 0, "STREAMS", "s", "$"))
    assert await _replies(r) == [[]]  # waiting
    commits = _commits(server)
    _send(a, ("XADD", "s", "*", "f", "a"))
    _send(b, ("XADD", "s", "*", "f", "b"))
    [[id_a], [id_b], [served]] = await _replies(a, b, r)
    assert _commits(server) == commits + 1
    assert served == [[b"s", [[id_a, [b"f", b"a"]], [id_b, [b"f", b"b"]]]]]
    _close(server, [a, b, r])


def test_a_blocked_reader_gets_every_add_of_the_iteration(tmp_path: Path) -> None:
    asyncio.run(_blocked_reader(tmp_path))
