"""Plain XADDs of several clients in one loop iteration are held back and added
together, in one call to the log (narad/held_back.py). Nothing a
client does may tell: every command sees the XADDs that came before it, and each
client's replies come in the order of its commands.

Several clients' requests must land in one loop iteration, so the server runs in
this process (tests/server/inprocess.py): the test writes all of them, then yields.
Each scenario also checks that they did share one iteration (one commit), or it
would prove nothing. The scenarios check exact IDs and orders; the property test at
the end checks that any mix of stream and key commands from several clients, sent
in one iteration, gets the replies it gets one command per iteration."""

from __future__ import annotations

import asyncio
import re
import socket
import tempfile
from pathlib import Path
from typing import Any

import hiredis
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from narad.server import Server
from tests.examples import examples
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
    return server.node.keyspace.journal.stats.commits


async def _setup(folder: Path, clients: int, *streams: bytes) -> tuple[Server, list[socket.socket]]:
    server = open_server(folder)
    return server, await _setup_on(server, clients, *streams)


async def _setup_on(server: Server, clients: int, *streams: bytes) -> list[socket.socket]:
    """`clients` connections to `server`, and `streams` made with one entry, 0-1."""
    socks = [await connect(server) for _ in range(clients)]
    for key in streams:
        _send(socks[0], ("XADD", key, "0-1", "f", "first"))
        assert await _replies(socks[0]) == [[b"0-1"]]
    return socks


def _close(server: Server, socks: list[socket.socket]) -> None:
    for sock in socks:
        sock.close()
    server.node.keyspace.close()


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


async def _crossed_streams(folder: Path) -> None:
    """Two clients add to two streams in opposite orders within one iteration: the
    adds are held for both streams at once, and each client's replies still come in
    its commands' order, each naming its own entry."""
    server, (a, b) = await _setup(folder, 2, b"s1", b"s2")
    _send(a, ("XADD", "s1", "*", "n", "a1"), ("XADD", "s2", "*", "n", "a2"))
    _send(b, ("XADD", "s2", "*", "n", "b2"), ("XADD", "s1", "*", "n", "b1"))
    [[a1, a2], [b2, b1]] = await _replies(a, b)
    _send(a, ("XRANGE", "s1", "-", "+"), ("XRANGE", "s2", "-", "+"))
    [[s1, s2]] = await _replies(a)
    assert dict((sid, fields[1]) for sid, fields in s1[1:]) == {a1: b"a1", b1: b"b1"}
    assert dict((sid, fields[1]) for sid, fields in s2[1:]) == {a2: b"a2", b2: b"b2"}
    _close(server, [a, b])


def test_adds_to_streams_in_crossed_orders_answer_each_client_in_order(tmp_path: Path) -> None:
    asyncio.run(_crossed_streams(tmp_path))


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


async def _pushes(folder: Path) -> None:
    server, (a, b, c) = await _setup(folder, 3)
    _send(a, ("Q.CREATE", "q"))
    assert await _replies(a) == [[b"OK"]]
    commits = _commits(server)
    _send(a, ("Q.PUSH", "q", "one"))  # held back
    _send(b, ("Q.PUSH", "q", "DELAY", "0", "two"))  # the general path, after a's
    _send(c, ("Q.PUSH", "q", "three"), ("Q.PUSH", "q", "four"))  # held back, a run
    [[one], [two], [three, four]] = await _replies(a, b, c)
    assert _commits(server) == commits + 1
    _send(a, ("XRANGE", "q", "-", "+"), ("Q.POP", "q", "COUNT", 10))
    [[entries, popped]] = await _replies(a)
    assert entries == [
        [one, [b"payload", b"one"]],
        [two, [b"payload", b"two"]],
        [three, [b"payload", b"three"]],
        [four, [b"payload", b"four"]],
    ]
    pushed = zip([one, two, three, four], [b"one", b"two", b"three", b"four"], strict=True)
    assert [(m[0], m[1], m[4], m[5], m[6], m[7]) for m in popped] == [
        (b"id", sid, b"payload", payload, b"receives", 1) for sid, payload in pushed
    ]
    _close(server, [a, b, c])


def test_plain_pushes_held_back_make_the_messages_other_pushes_make(tmp_path: Path) -> None:
    asyncio.run(_pushes(tmp_path))


TOO_BIG = r"ERR record of \d+ bytes exceeds the maximum of 1073741824"


async def _send_big(
    server: Server, sock: socket.socket, big: tuple[Any, ...], then: tuple[Any, ...]
) -> list[Any]:
    """Send the command `big`, with `then` right behind it in the last write (so
    that both are read in one iteration), and return their two replies."""
    data = encode(big)
    assert server.loop is not None
    await server.loop.sock_sendall(sock, data[:-64])
    sock.send(data[-64:] + encode(then))
    del data
    return await _read(sock, hiredis.Reader(), 2, patience_s=60)


async def _oversized(folder: Path) -> None:
    # A record holds at most 1 GiB (narad/log/format.py). The limits on the request
    # (query buffer, bulk length) are raised past it for this.
    server = open_server(
        folder, ("client-query-buffer-limit", "4gb"), ("proto-max-bulk-len", "2gb")
    )
    [a] = await _setup_on(server, 1, b"s")
    _send(a, ("Q.CREATE", "q"))
    assert await _replies(a) == [[b"OK"]]
    field = b"x" * (400 * 1024 * 1024)
    # A plain XADD, held back in one run with the small one after it.
    refused, added = await _send_big(
        server, a, ("XADD", "s", "*", "a", field, "b", field, "c", field),
        ("XADD", "s", "*", "f", "small"),
    )  # fmt: skip
    assert isinstance(refused, hiredis.ReplyError) and re.fullmatch(TOO_BIG, str(refused))
    _send(a, ("XRANGE", "s", "-", "+"))
    assert await _replies(a) == [[[[b"0-1", [b"f", b"first"]], [added, [b"f", b"small"]]]]]
    # The general path: refused before the key is made.
    refused, exists = await _send_big(
        server, a, ("XADD", "new", "MAXLEN", 5, "*", "a", field, "b", field, "c", field),
        ("EXISTS", "new"),
    )  # fmt: skip
    assert isinstance(refused, hiredis.ReplyError) and re.fullmatch(TOO_BIG, str(refused))
    assert exists == 0
    # Q.PUSH of several payloads: all or none.
    payload = field * 3
    del field
    refused, length = await _send_big(server, a, ("Q.PUSH", "q", "small", payload), ("XLEN", "q"))
    assert isinstance(refused, hiredis.ReplyError) and re.fullmatch(TOO_BIG, str(refused))
    assert length == 0
    _close(server, [a])


@pytest.mark.slow
def test_an_entry_over_the_record_limit_is_refused_and_changes_nothing(tmp_path: Path) -> None:
    asyncio.run(_oversized(tmp_path))


# -- any mix of commands in one iteration answers as one command per iteration ---------

def _on_a_key(*template: str) -> st.SearchStrategy[tuple[str, ...]]:
    """`template` with its "KEY" replaced by one of the test's two stream keys."""
    return st.sampled_from(("s1", "s2")).map(
        lambda key: tuple(key if arg == "KEY" else arg for arg in template)
    )


COMMAND_ST = st.one_of(
    _on_a_key("XADD", "KEY", "*", "f", "v"),
    _on_a_key("XADD", "KEY", "*", "a", "1", "b", "v"),
    _on_a_key("XADD", "KEY", "MAXLEN", "3", "*", "f", "v"),
    _on_a_key("XADD", "KEY", "NOMKSTREAM", "*", "f", "v"),
    _on_a_key("XLEN", "KEY"),
    _on_a_key("XRANGE", "KEY", "-", "+"),
    _on_a_key("XTRIM", "KEY", "MAXLEN", "2"),
    _on_a_key("XINFO", "STREAM", "KEY"),
    _on_a_key("DEL", "KEY"),
    _on_a_key("EXISTS", "KEY"),
    st.just(("RENAME", "s1", "s2")),
    # The queue q, created before the script: plain pushes are held back too, in the
    # same batch as XADDs to q; pushes with options or several payloads are not.
    st.just(("Q.PUSH", "q", "v")),
    st.just(("Q.PUSH", "q", "v", "v")),
    st.just(("Q.PUSH", "q", "DELAY", "0", "v")),
    st.just(("XADD", "q", "*", "payload", "v")),
    st.just(("Q.POP", "q", "COUNT", "2")),
    st.just(("XRANGE", "q", "-", "+")),
)
SCRIPT_ST = st.lists(st.tuples(st.integers(0, 3), COMMAND_ST), min_size=1, max_size=30)


async def _read(
    sock: socket.socket, reader: hiredis.Reader, count: int, patience_s: float = 5
) -> list[Any]:
    """The next `count` replies, each awaited at most `patience_s`."""
    loop = asyncio.get_running_loop()
    out: list[Any] = []
    while len(out) < count:
        value = reader.gets()
        if value is False:
            data = await asyncio.wait_for(loop.sock_recv(sock, 65536), patience_s)
            assert data, "closed by the server"
            reader.feed(data)
        else:
            out.append(value)
    return out


def _by_client(script: list[tuple[int, tuple[str, ...]]]) -> dict[int, list[tuple[str, ...]]]:
    """Each client's commands in order, the clients in the order they first appear:
    the order the server runs them in when each client's commands arrive at once.
    Each value written is made unique ("v" becomes "v<n>"), so that reads show which
    entry is where."""
    grouped: dict[int, list[tuple[str, ...]]] = {}
    for n, (who, cmd) in enumerate(script):
        grouped.setdefault(who, []).append(tuple(f"v{n}" if a == "v" else a for a in cmd))
    return grouped


def _ids_masked(value: Any) -> Any:
    """`value` with every stream ID and Unix time in ms masked: they come from the
    clock, so two runs can agree on the entries and their order, not on those
    values (the scenarios above check the IDs); and with each receipt's MAC masked,
    since each run's queue has its own random secret."""
    if isinstance(value, list):
        return [_ids_masked(item) for item in value]
    if isinstance(value, bytes) and re.fullmatch(rb"\d+-\d+", value) and value != b"0-0":
        return b"<id>"
    if isinstance(value, bytes) and re.fullmatch(rb"[0-9a-f]+-[0-9a-f]+-[0-9a-f]{16}", value):
        return value[:-16] + b"<mac>"
    if isinstance(value, int) and value >= 10**12:
        return "<ms>"
    if isinstance(value, hiredis.ReplyError):
        return ("error", str(value))
    return value


async def _run_script(
    folder: Path, grouped: dict[int, list[tuple[str, ...]]], together: bool
) -> dict[int, list[Any]]:
    server = open_server(folder)
    socks = {who: await connect(server) for who in grouped}
    readers = {who: hiredis.Reader() for who in grouped}
    first = next(iter(grouped))
    _send(socks[first], ("Q.CREATE", "q"))
    assert await _read(socks[first], readers[first], 1) == [b"OK"]
    replies: dict[int, list[Any]] = {}
    if together:  # every client's commands in one loop iteration
        commits = _commits(server)
        for who, commands in grouped.items():
            _send(socks[who], *commands)
        for who, commands in grouped.items():
            replies[who] = await _read(socks[who], readers[who], len(commands))
        assert _commits(server) <= commits + 1
    else:  # one command per iteration, in the same order
        for who, commands in grouped.items():
            replies[who] = []
            for command in commands:
                _send(socks[who], command)
                replies[who] += await _read(socks[who], readers[who], 1)
    _close(server, list(socks.values()))
    return replies


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(script=SCRIPT_ST)
def test_commands_of_one_iteration_answer_as_one_per_iteration(
    script: list[tuple[int, tuple[str, ...]]],
) -> None:
    grouped = _by_client(script)
    with tempfile.TemporaryDirectory() as tmp:
        together = asyncio.run(_run_script(Path(tmp) / "together", grouped, True))
        alone = asyncio.run(_run_script(Path(tmp) / "alone", grouped, False))
    for who in grouped:
        assert _ids_masked(together[who]) == _ids_masked(alone[who]), who
