"""Blocking XREAD: served when another client adds data, in arrival order, `$`,
timeouts, BLOCK 0, keys deleted or swapped meanwhile, blocked_clients, CLIENT KILL;
side by side with redis-server 7.0 wherever the outcome is observable."""

from __future__ import annotations

import socket
import threading
from typing import Any

import anyio
import pytest
import redis.asyncio

from tests.server.raw import Raw
from tests.servers import NaradProcess, RedisProcess, wait_until

STILL_BLOCKED = "still blocked"
QUIET_S = 0.1  # how long a blocked client is watched for a reply it must not get


def _blocked_clients(port: int) -> int:
    with Raw(port) as conn:
        info = conn.call("INFO", "clients").decode()
    return int(info.split("blocked_clients:")[1].split("\r\n")[0])


def _reply_or_still_blocked(conn: Raw) -> Any:
    conn.sock.settimeout(QUIET_S)
    try:
        return conn.read()
    except TimeoutError:
        return STILL_BLOCKED
    finally:
        conn.sock.settimeout(10)


def _scenario(
    port: int,
    setup: list[list[Any]],
    blocking: list[Any],
    writes: list[list[Any]],
    proto: int = 2,
    db: int = 3,
) -> list[Any]:
    """Run `setup`, block a client on `blocking`, run `writes` from another client
    once the first is blocked; what the blocked client got after each write.

    Both servers serve a blocked client before they answer the write that woke it,
    so INFO's blocked_clients says, without waiting, whether a reply is due."""
    with Raw(port) as blocked, Raw(port) as writer:
        for conn in (blocked, writer):
            conn.call("SELECT", db)
        writer.call("FLUSHDB")
        for args in setup:
            writer.call(*args)
        blocked.call("HELLO", proto)
        before = _blocked_clients(port)
        blocked.send_command(*blocking)
        wait_until(lambda: _blocked_clients(port) == before + 1)
        outcomes: list[Any] = []
        served = False
        for args in writes:
            writer.call(*args)
            if served:
                outcomes.append(ALREADY_SERVED)
            elif _blocked_clients(port) == before + 1:
                outcomes.append(STILL_BLOCKED)
            else:
                outcomes.append(blocked.read())
                served = True
        assert _reply_or_still_blocked(blocked) == STILL_BLOCKED  # nothing more came
        return outcomes


ALREADY_SERVED = "already served"


SCENARIOS: dict[str, tuple[list[list[Any]], list[Any], list[list[Any]]]] = {
    "served_by_xadd": (
        [["XADD", "s", "1-0", "a", "1"]],
        ["XREAD", "BLOCK", "0", "STREAMS", "s", "$"],
        [["XADD", "s", "2-0", "b", "2"]],
    ),
    "dollar_on_missing_key": (
        [],
        ["XREAD", "BLOCK", "0", "STREAMS", "s", "$"],
        [["XADD", "s", "1-1", "a", "1"]],
    ),
    "explicit_id_waits_past_it": (
        [["XADD", "s", "5-0", "a", "1"]],
        ["XREAD", "BLOCK", "0", "STREAMS", "s", "7-0"],
        [["XADD", "s", "6-0", "a", "1"], ["XADD", "s", "8-0", "a", "1"]],
    ),
    "count_with_block": (
        [],
        ["XREAD", "COUNT", "1", "BLOCK", "0", "STREAMS", "s", "0"],
        [["XADD", "s", "1-0", "a", "1", "b", "2"]],
    ),
    "several_keys_one_served": (
        [["XADD", "s", "1-0", "a", "1"], ["XADD", "t", "1-0", "a", "1"]],
        ["XREAD", "BLOCK", "0", "STREAMS", "s", "t", "$", "$"],
        [["XADD", "t", "2-0", "c", "3"]],
    ),
    "other_key_does_not_serve": (
        [],
        ["XREAD", "BLOCK", "0", "STREAMS", "s", "$"],
        [["XADD", "other", "1-0", "a", "1"], ["XADD", "s", "1-0", "a", "1"]],
    ),
    "other_db_does_not_serve": (
        [],
        ["XREAD", "BLOCK", "0", "STREAMS", "s", "$"],
        [
            ["SELECT", "4"],
            ["XADD", "s", "1-0", "a", "1"],
            ["SELECT", "3"],
            ["XADD", "s", "1-0", "a", "1"],
        ],
    ),
    "del_then_xadd": (
        [["XADD", "s", "3-0", "a", "1"]],
        ["XREAD", "BLOCK", "0", "STREAMS", "s", "$"],
        [["DEL", "s"], ["XADD", "s", "1-0", "low", "1"], ["XADD", "s", "9-0", "high", "1"]],
    ),
    "flushall_then_xadd": (
        [["XADD", "s", "3-0", "a", "1"]],
        ["XREAD", "BLOCK", "0", "STREAMS", "s", "$"],
        [["FLUSHALL"], ["XADD", "s", "4-0", "a", "1"]],
    ),
    "xdel_and_xtrim_do_not_serve": (
        [["XADD", "s", "1-0", "a", "1"], ["XADD", "s", "2-0", "a", "1"]],
        ["XREAD", "BLOCK", "0", "STREAMS", "s", "$"],
        [["XDEL", "s", "1-0"], ["XTRIM", "s", "MAXLEN", "0"], ["XADD", "s", "3-0", "a", "1"]],
    ),
    "xsetid_does_not_serve": (
        [["XADD", "s", "1-0", "a", "1"]],
        ["XREAD", "BLOCK", "0", "STREAMS", "s", "$"],
        [["XSETID", "s", "5-0"], ["XADD", "s", "6-0", "a", "1"]],
    ),
    "rename_onto_the_key": (
        [
            ["XADD", "s", "1-0", "a", "1"],
            ["XADD", "src", "1-0", "x", "1"],
            ["XADD", "src", "7-0", "x", "2"],
        ],
        ["XREAD", "BLOCK", "0", "STREAMS", "s", "$"],
        [["RENAME", "src", "s"]],
    ),
    "swapdb_brings_data": (
        [
            ["SELECT", "4"],
            ["FLUSHDB"],
            ["XADD", "s", "9-0", "from", "db4"],
            ["SELECT", "3"],
            ["XADD", "s", "1-0", "a", "1"],
        ],
        ["XREAD", "BLOCK", "0", "STREAMS", "s", "$"],
        [["SWAPDB", "3", "4"], ["SWAPDB", "3", "4"]],
    ),
    # Two keys ready at once: only the first signaled is served, as in Redis.
    "multi_over_two_keys_serves_the_first": (
        [],
        ["XREAD", "BLOCK", "0", "STREAMS", "s", "t", "$", "$"],
        [["MULTI"], ["XADD", "t", "1-0", "a", "1"], ["XADD", "s", "1-0", "b", "2"], ["EXEC"]],
    ),
    "group_multi_over_two_keys_serves_the_first": (
        [
            ["XGROUP", "CREATE", "s", "g", "$", "MKSTREAM"],
            ["XGROUP", "CREATE", "t", "g", "$", "MKSTREAM"],
        ],
        ["XREADGROUP", "GROUP", "g", "c", "BLOCK", "0", "STREAMS", "s", "t", ">", ">"],
        [["MULTI"], ["XADD", "t", "1-0", "a", "1"], ["XADD", "s", "1-0", "b", "2"], ["EXEC"]],
    ),
    # Served once the last ID passed the one waited after, entries or not, as in Redis.
    "rename_of_an_emptied_stream_serves_nothing": (
        [["XADD", "src", "5-0", "a", "1"], ["XTRIM", "src", "MAXLEN", "0"]],
        ["XREAD", "BLOCK", "0", "STREAMS", "s", "$"],
        [["RENAME", "src", "s"]],
    ),
    "multi_writes_one_reply": (
        [],
        ["XREAD", "BLOCK", "0", "STREAMS", "s", "0"],
        [["MULTI"], ["XADD", "s", "1-0", "a", "1"], ["XADD", "s", "2-0", "b", "2"], ["EXEC"]],
    ),
}


@pytest.mark.parametrize("proto", [2, 3])
@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_blocking_as_redis(
    name: str, proto: int, shared_narad: NaradProcess, redis_server: RedisProcess
) -> None:
    setup, blocking, writes = SCENARIOS[name]
    mine = _scenario(shared_narad.port, setup, blocking, writes, proto)
    theirs = _scenario(redis_server.port, setup, blocking, writes, proto)
    assert mine == theirs
    assert any(outcome not in (STILL_BLOCKED, ALREADY_SERVED) for outcome in mine), "unserved"


def test_timeout_reply_bytes(shared_narad: NaradProcess, redis_server: RedisProcess) -> None:
    for port in (shared_narad.port, redis_server.port):
        for proto, null in ((2, b"*-1\r\n"), (3, b"_\r\n")):
            with Raw(port) as conn:
                conn.call("HELLO", proto)
                conn.send(b"XREAD BLOCK 20 STREAMS never-written $\r\nPING\r\n")
                data = b""
                while not data.endswith(b"+PONG\r\n"):
                    data += conn.sock.recv(1024)
                assert data == null + b"+PONG\r\n"


def test_several_blocked_clients_served_in_arrival_order(
    shared_narad: NaradProcess, redis_server: RedisProcess
) -> None:
    """Each blocked client's next pipelined command runs as it is served: the order
    of those writes is the order in which the blocked clients were served."""

    def run(port: int) -> tuple[list[bytes], list[Any]]:
        clients = [Raw(port) for _ in range(5)]
        with Raw(port) as writer:
            writer.call("SELECT", 5)
            writer.call("FLUSHDB")
            base = _blocked_clients(port)
            for i, conn in enumerate(clients):
                conn.call("SELECT", 5)
                conn.send(b"XREAD BLOCK 0 STREAMS wake $\r\nXADD served * who c%d\r\n" % i)
                wait_until(lambda i=i: _blocked_clients(port) == base + i + 1)
            writer.call("XADD", "wake", "1-0", "go", "1")
            replies = [(conn.read(), conn.read()) for conn in clients]
            order = [fields[1] for _, fields in writer.call("XRANGE", "served", "-", "+")]
            for conn in clients:
                conn.close()
        return order, [reply for reply, _ in replies]

    mine, theirs = run(shared_narad.port), run(redis_server.port)
    assert mine[0] == [b"c0", b"c1", b"c2", b"c3", b"c4"]
    assert mine == theirs


def test_block_zero_waits_until_data(shared_narad: NaradProcess) -> None:
    client = shared_narad.client(db=6)
    client.delete("forever")
    result: list[Any] = []

    def reader() -> None:
        blocked = shared_narad.client(db=6)
        result.append(blocked.xread({"forever": "$"}, block=0))
        blocked.close()

    thread = threading.Thread(target=reader)
    thread.start()
    wait_until(lambda: client.info("clients")["blocked_clients"] >= 1)
    thread.join(QUIET_S)
    assert thread.is_alive() and result == []
    added = client.xadd("forever", {"k": "v"})
    thread.join(10)
    assert result == [[[b"forever", [(added, {b"k": b"v"})]]]]
    client.close()


def test_blocked_pipeline_waits_behind_xread(shared_narad: NaradProcess) -> None:
    with Raw(shared_narad.port) as blocked, Raw(shared_narad.port) as writer:
        for conn in (blocked, writer):
            conn.call("SELECT", 7)
        writer.call("DEL", "pipe")
        blocked.send(b"XREAD BLOCK 0 STREAMS pipe $\r\nECHO after\r\n")
        assert _reply_or_still_blocked(blocked) == STILL_BLOCKED
        writer.call("XADD", "pipe", "1-0", "f", "v")
        assert blocked.read() == [[b"pipe", [[b"1-0", [b"f", b"v"]]]]]
        assert blocked.read() == b"after"


def test_blocked_clients_counted_and_killed(shared_narad: NaradProcess) -> None:
    port = shared_narad.port
    base = _blocked_clients(port)
    blocked = [Raw(port) for _ in range(3)]
    ids = []
    for conn in blocked:
        conn.call("SELECT", 8)
        ids.append(conn.call("CLIENT", "ID"))
        conn.send_command("XREAD", "BLOCK", "0", "STREAMS", "nobody-writes", "$")
    wait_until(lambda: _blocked_clients(port) == base + 3)
    with Raw(port) as admin:
        listing = admin.call("CLIENT", "LIST").decode().splitlines()
        flags = {int(line.split()[0][3:]): line.split(" flags=")[1].split()[0] for line in listing}
        assert [flags[i] for i in ids] == ["b", "b", "b"]
        assert admin.call("CLIENT", "KILL", "ID", ids[1]) == 1
        assert blocked[1].read_all_until_closed() == b""
        wait_until(lambda: _blocked_clients(port) == base + 2)
        blocked[0].close()  # a blocked client that goes away by itself
        wait_until(lambda: _blocked_clients(port) == base + 1)
        admin.call("SELECT", 8)
        admin.call("XADD", "nobody-writes", "*", "a", "1")
        assert blocked[2].read()[0][0] == b"nobody-writes"
        wait_until(lambda: _blocked_clients(port) == base)
        assert admin.call("PING") == b"PONG"
    for conn in blocked:
        conn.close()


def test_timeouts_release_and_count(shared_narad: NaradProcess) -> None:
    port = shared_narad.port
    base = _blocked_clients(port)
    conns = [Raw(port) for _ in range(4)]
    for conn in conns:
        conn.send(b"XREAD BLOCK 100 STREAMS short $\r\n")
    for conn in conns:
        assert conn.read() is None
        assert conn.call("PING") == b"PONG"
        conn.close()
    wait_until(lambda: _blocked_clients(port) == base)


def test_redis_py_blocking_resp3(shared_narad: NaradProcess) -> None:
    client = shared_narad.client(protocol=3, db=9)
    client.delete("r3")
    assert not client.xread({"r3": "$"}, block=30)  # null reply: redis-py gives {}
    result: list[Any] = []
    blocked = shared_narad.client(protocol=3, db=9)
    thread = threading.Thread(target=lambda: result.append(blocked.xread({"r3": 0}, block=0)))
    thread.start()
    wait_until(lambda: client.info("clients")["blocked_clients"] >= 1)
    added = client.xadd("r3", {"x": "1"})
    thread.join(10)
    assert result == [{b"r3": [[(added, {b"x": b"1"})]]}]
    blocked.close()
    client.close()


@pytest.mark.anyio
@pytest.mark.parametrize("proto", [2, 3])
async def test_redis_py_asyncio_blocking(shared_narad: NaradProcess, proto: int) -> None:
    writer = redis.asyncio.Redis(port=shared_narad.port, protocol=proto, db=10)
    key = f"async-block-{proto}"
    await writer.delete(key)
    readers = [redis.asyncio.Redis(port=shared_narad.port, protocol=proto, db=10) for _ in range(3)]
    results: list[Any] = [None] * 3

    async def read(i: int) -> None:
        results[i] = await readers[i].xread({key: "$"}, block=0)

    async with anyio.create_task_group() as tg:
        for i in range(3):
            tg.start_soon(read, i)
        for _ in range(1000):  # poll until all three are blocked
            if (await writer.info("clients"))["blocked_clients"] >= 3:
                break
            await anyio.sleep(0.01)
        added = await writer.xadd(key, {"n": "1"})
    for result in results:
        entries = result[key.encode()][0] if proto == 3 else result[0][1]
        assert entries == [(added, {b"n": b"1"})]
    # A timeout is a null reply, which redis-py hands back as an empty container.
    assert not await readers[0].xread({key: added}, block=20)
    for client in (writer, *readers):
        await client.aclose()


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def test_block_errors_as_redis(shared_narad: NaradProcess, redis_server: RedisProcess) -> None:
    from tests.server.raw import call_both

    script = [
        ["XREAD", "BLOCK", "-1", "STREAMS", "s", "$"],
        ["XREAD", "BLOCK", "x", "STREAMS", "s", "$"],
        ["XREAD", "BLOCK", "1.5", "STREAMS", "s", "$"],
        ["XREAD", "BLOCK", "0", "STREAMS", "s"],
        ["XREAD", "BLOCK", "0", "STREAMS", "s", "t", "$"],
        ["XREAD", "BLOCK", "0", "STREAMS", "s", "bad-id"],
        ["XREAD", "BLOCK", "10", "BLOCK", "20", "STREAMS", "s", "$"],
        ["XREAD", "BLOCK"],
        ["XREAD", "BLOCK", "9999999999999999999", "STREAMS", "s", "$"],
    ]
    assert call_both(shared_narad.port, redis_server.port, script) == []


def test_server_healthy_after_abrupt_blocked_disconnects(shared_narad: NaradProcess) -> None:
    port = shared_narad.port
    base = _blocked_clients(port)
    for _ in range(20):
        sock = socket.create_connection(("127.0.0.1", port))
        sock.sendall(b"XREAD BLOCK 0 STREAMS gone $\r\n")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        sock.close()  # RST
    wait_until(lambda: _blocked_clients(port) == base)
    client = shared_narad.client(db=11)
    assert client.xadd("gone", {"a": "1"})
    assert client.ping()
    client.delete("gone")
    client.close()
