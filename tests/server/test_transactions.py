"""MULTI / EXEC / DISCARD and WATCH / UNWATCH on stream keys, side by side with
redis-server 7.0, and through redis-py pipelines."""

from __future__ import annotations

from typing import Any

import pytest
import redis
import redis.asyncio

from tests.server.raw import Raw, call_both, read_exactly
from tests.servers import NaradProcess, RedisProcess

SCRIPTS = {
    "queued_and_exec": [
        ["SELECT", "1"],
        ["DEL", "t"],
        ["MULTI"],
        ["XADD", "t", "1-0", "a", "1"],
        ["XADD", "t", "0-0", "a", "1"],
        ["XADD", "t", "2-0", "a"],
        ["XLEN", "t"],
        ["XRANGE", "t", "-", "+"],
        ["EXEC"],
        ["XLEN", "t"],
    ],
    "execabort_unknown_command": [
        ["SELECT", "1"],
        ["DEL", "t"],
        ["MULTI"],
        ["XADD", "t", "1-0", "a", "1"],
        ["NOSUCHCOMMAND", "x"],
        ["XLEN", "t"],
        ["EXEC"],
        ["XLEN", "t"],
        ["EXEC"],
    ],
    "execabort_wrong_arity": [
        ["SELECT", "1"],
        ["DEL", "t"],
        ["MULTI"],
        ["XADD", "t", "1-0", "a", "1"],
        ["XLEN"],
        ["EXEC"],
        ["XLEN", "t"],
    ],
    "execabort_unknown_subcommand": [
        ["MULTI"],
        ["CLIENT", "NOSUCH"],
        ["CONFIG"],
        ["EXEC"],
    ],
    "nesting_and_misuse": [
        ["EXEC"],
        ["DISCARD"],
        ["MULTI"],
        ["MULTI"],
        ["WATCH", "t"],
        ["PING"],
        ["EXEC"],
        ["MULTI"],
        ["PING"],
        ["DISCARD"],
        ["EXEC"],
        ["MULTI"],
        ["EXEC"],
        ["MULTI", "x"],
        ["DISCARD", "x"],
        ["WATCH"],
        ["UNWATCH", "x"],
    ],
    "select_inside": [
        ["SELECT", "2"],
        ["DEL", "t"],
        ["MULTI"],
        ["SELECT", "3"],
        ["DEL", "t"],
        ["XADD", "t", "1-0", "db", "3"],
        ["SELECT", "2"],
        ["XADD", "t", "1-0", "db", "2"],
        ["SELECT", "99"],
        ["EXEC"],
        ["XRANGE", "t", "-", "+"],
        ["SELECT", "3"],
        ["XRANGE", "t", "-", "+"],
        ["DEL", "t"],
    ],
    "blocking_inside": [
        ["SELECT", "1"],
        ["DEL", "t", "u"],
        ["XADD", "t", "1-0", "a", "1"],
        ["MULTI"],
        ["XREAD", "BLOCK", "0", "STREAMS", "u", "$"],
        ["XREAD", "BLOCK", "100", "STREAMS", "t", "0"],
        ["XREAD", "BLOCK", "100", "STREAMS", "t", "$"],
        ["EXEC"],
    ],
    "inside_queue_replies": [
        ["MULTI"],
        ["PING"],
        ["ECHO", "x"],
        ["CLIENT", "GETNAME"],
        ["CONFIG", "GET", "maxclients"],
        ["DBSIZE", "x"],
        ["DISCARD"],
        ["MULTI"],
        ["TYPE", "nosuch"],
        ["EXISTS", "nosuch"],
        ["ECHO", "x"],
        ["EXEC"],
    ],
}


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_same_replies_as_redis(
    name: str, shared_narad: NaradProcess, redis_server: RedisProcess
) -> None:
    assert call_both(shared_narad.port, redis_server.port, SCRIPTS[name]) == []


def test_exec_with_arguments_as_redis(
    shared_narad: NaradProcess, redis_server: RedisProcess
) -> None:
    script = [["MULTI"], ["PING"], ["EXEC", "x"], ["EXEC"]]
    assert call_both(shared_narad.port, redis_server.port, script) == []


def test_exec_replies_leave_in_one_array(shared_narad: NaradProcess) -> None:
    with Raw(shared_narad.port) as conn:
        conn.call("SELECT", "4")
        conn.call("DEL", "arr")
        conn.send(b"MULTI\r\nXADD arr 1-0 a 1\r\nXADD arr 1-0 a 1\r\nXLEN arr\r\nEXEC\r\nPING\r\n")
        expected = (
            b"+OK\r\n+QUEUED\r\n+QUEUED\r\n+QUEUED\r\n*3\r\n$3\r\n1-0\r\n"
            b"-ERR The ID specified in XADD is equal or smaller than the target stream top item\r\n"
            b":1\r\n+PONG\r\n"
        )
        assert read_exactly(conn.sock, len(expected)) == expected


# -- redis-py pipelines -------------------------------------------------------------------


@pytest.mark.parametrize("proto", [2, 3])
def test_redis_py_transaction_pipeline(shared_narad: NaradProcess, proto: int) -> None:
    client = shared_narad.client(protocol=proto, db=5)
    client.delete("pipe")
    with client.pipeline(transaction=True) as pipe:
        pipe.xadd("pipe", {"a": "1"}, id="1-0").xadd("pipe", {"a": "2"}, id="2-0")
        pipe.xlen("pipe").xrange("pipe")
        results = pipe.execute()
    assert results[:3] == [b"1-0", b"2-0", 2]
    assert [e[0] for e in results[3]] == [b"1-0", b"2-0"]
    with client.pipeline(transaction=True) as pipe:
        pipe.xadd("pipe", {"a": "3"}, id="1-0").xlen("pipe")
        with pytest.raises(redis.ResponseError, match="equal or smaller"):
            pipe.execute()
    with client.pipeline(transaction=True) as pipe:
        pipe.xadd("pipe", {"a": "3"}, id="1-0").xlen("pipe")
        failed, length = pipe.execute(raise_on_error=False)
    assert isinstance(failed, redis.ResponseError) and length == 2
    with client.pipeline(transaction=True) as pipe:
        pipe.xlen("pipe").execute_command("NOSUCHCOMMAND")
        with pytest.raises(redis.ResponseError):
            pipe.execute()
    assert client.xlen("pipe") == 2
    client.close()


@pytest.mark.parametrize("proto", [2, 3])
def test_redis_py_watch_retry(shared_narad: NaradProcess, proto: int) -> None:
    client = shared_narad.client(protocol=proto, db=5)
    other = shared_narad.client(protocol=proto, db=5)
    client.delete("counter")
    client.xadd("counter", {"n": "0"}, id="1-0")
    attempts = []

    def append_next(pipe: redis.client.Pipeline) -> None:
        last_id, _ = pipe.xrevrange("counter", count=1)[0]
        attempts.append(last_id)
        if len(attempts) == 1:
            other.xadd("counter", {"n": "other"}, id="2-0")  # spoils the first try
        pipe.multi()
        pipe.xadd("counter", {"n": "mine"}, id=f"{int(last_id.split(b'-')[0]) + 1}-0")

    results = client.transaction(append_next, "counter")
    assert attempts == [b"1-0", b"2-0"]
    assert results == [b"3-0"]
    client.close()
    other.close()


@pytest.mark.anyio
@pytest.mark.parametrize("proto", [2, 3])
async def test_redis_py_asyncio_transaction_and_watch(
    shared_narad: NaradProcess, proto: int
) -> None:
    client = redis.asyncio.Redis(port=shared_narad.port, protocol=proto, db=6)
    other = redis.asyncio.Redis(port=shared_narad.port, protocol=proto, db=6)
    await client.delete("aw")
    async with client.pipeline(transaction=True) as pipe:
        await pipe.watch("aw")
        await other.xadd("aw", {"x": "1"})
        pipe.multi()
        pipe.xadd("aw", {"y": "1"})
        with pytest.raises(redis.WatchError):
            await pipe.execute()
    assert await client.xlen("aw") == 1
    async with client.pipeline(transaction=True) as pipe:
        await pipe.watch("aw")
        pipe.multi()
        pipe.xadd("aw", {"y": "1"}).xlen("aw")
        assert (await pipe.execute())[1] == 2
    await client.aclose()
    await other.aclose()


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


# -- WATCH ----------------------------------------------------------------------------------


def _watch_outcome(
    port: int, proto: int, setup: list[list[Any]], spoiler: list[list[Any]]
) -> bytes:
    """WATCH w in db 7 after `setup`, let another client run `spoiler`, then
    MULTI / XLEN w / EXEC; the raw bytes of EXEC's reply."""
    with Raw(port) as watcher, Raw(port) as other:
        watcher.call("HELLO", proto)
        for conn in (watcher, other):
            conn.call("SELECT", "7")
        other.call("FLUSHDB")
        other.call("SELECT", "8")
        other.call("FLUSHDB")
        other.call("SELECT", "7")
        for args in setup:
            other.call(*args)
        watcher.call("WATCH", "w")
        for args in spoiler:
            other.call(*args)
        watcher.call("MULTI")
        watcher.call("XLEN", "w")
        watcher.send(b"EXEC\r\n")
        data = watcher.sock.recv(1024)
        watcher.call("UNWATCH")
        return data


EXISTING = [["XADD", "w", "1-0", "a", "1"], ["XADD", "w", "2-0", "a", "2"]]
SPOILERS: dict[str, tuple[list[list[Any]], list[list[Any]]]] = {
    "nothing": (EXISTING, []),
    "xadd": (EXISTING, [["XADD", "w", "*", "a", "3"]]),
    "xadd_creates": ([], [["XADD", "w", "*", "a", "3"]]),
    "xadd_other_key": (EXISTING, [["XADD", "v", "*", "a", "3"]]),
    "xadd_same_name_other_db": (EXISTING, [["SELECT", "8"], ["XADD", "w", "*", "a", "3"]]),
    "xadd_refused": (EXISTING, [["XADD", "w", "1-0", "a", "3"]]),
    "xadd_nomkstream_missing": ([], [["XADD", "w", "NOMKSTREAM", "*", "a", "3"]]),
    "xdel": (EXISTING, [["XDEL", "w", "1-0"]]),
    "xdel_nothing": (EXISTING, [["XDEL", "w", "9-0"]]),
    "xtrim": (EXISTING, [["XTRIM", "w", "MAXLEN", "1"]]),
    "xtrim_nothing": (EXISTING, [["XTRIM", "w", "MAXLEN", "10"]]),
    "del": (EXISTING, [["DEL", "w"]]),
    "del_missing": ([], [["DEL", "w"]]),
    "unlink": (EXISTING, [["UNLINK", "w"]]),
    "rename_from": (EXISTING, [["RENAME", "w", "w2"]]),
    "rename_onto": ([["XADD", "src", "1-0", "a", "1"]], [["RENAME", "src", "w"]]),
    "renamenx_refused": ([*EXISTING, ["XADD", "src", "1-0", "a", "1"]], [["RENAMENX", "src", "w"]]),
    "flushdb": (EXISTING, [["FLUSHDB"]]),
    "flushdb_missing_key": ([], [["FLUSHDB"]]),
    "flushdb_other_db": (EXISTING, [["SELECT", "8"], ["FLUSHDB"]]),
    "flushall": (EXISTING, [["FLUSHALL"]]),
    "swapdb": (EXISTING, [["SWAPDB", "7", "8"], ["SWAPDB", "7", "8"]]),
    "swapdb_missing_both": ([], [["SWAPDB", "7", "8"], ["SWAPDB", "7", "8"]]),
    "read_only": (EXISTING, [["XRANGE", "w", "-", "+"], ["XLEN", "w"], ["EXISTS", "w"]]),
}


@pytest.mark.parametrize("proto", [2, 3])
@pytest.mark.parametrize("name", sorted(SPOILERS))
def test_watch_as_redis(
    name: str, proto: int, shared_narad: NaradProcess, redis_server: RedisProcess
) -> None:
    setup, spoiler = SPOILERS[name]
    mine = _watch_outcome(shared_narad.port, proto, setup, spoiler)
    theirs = _watch_outcome(redis_server.port, proto, setup, spoiler)
    assert mine == theirs
    assert mine in (b"*-1\r\n", b"_\r\n") or mine.startswith(b"*1\r\n")


def test_xsetid_spoils_watch(shared_narad: NaradProcess, redis_server: RedisProcess) -> None:
    """A deliberate difference: Redis 7.0's XSETID does not signal the key as modified,
    so a WATCH on it survives; Narad treats XSETID as the write it is."""
    mine = _watch_outcome(shared_narad.port, 2, EXISTING, [["XSETID", "w", "5-0"]])
    theirs = _watch_outcome(redis_server.port, 2, EXISTING, [["XSETID", "w", "5-0"]])
    assert (mine, theirs) == (b"*-1\r\n", b"*1\r\n:2\r\n")


def test_watch_null_reply_shapes(shared_narad: NaradProcess) -> None:
    setup, spoiler = SPOILERS["xadd"]
    assert _watch_outcome(shared_narad.port, 2, setup, spoiler) == b"*-1\r\n"
    assert _watch_outcome(shared_narad.port, 3, setup, spoiler) == b"_\r\n"
    setup, spoiler = SPOILERS["nothing"]
    assert _watch_outcome(shared_narad.port, 2, setup, spoiler) == b"*1\r\n:2\r\n"


def test_watch_own_write_and_unwatch_and_discard(
    shared_narad: NaradProcess, redis_server: RedisProcess
) -> None:
    script = [
        ["SELECT", "9"],
        ["DEL", "own"],
        ["WATCH", "own"],
        ["XADD", "own", "1-0", "a", "1"],
        ["MULTI"],
        ["XLEN", "own"],
        ["EXEC"],
        ["WATCH", "own"],
        ["XADD", "own", "2-0", "a", "1"],
        ["UNWATCH"],
        ["MULTI"],
        ["XLEN", "own"],
        ["EXEC"],
        ["WATCH", "own"],
        ["XADD", "own", "3-0", "a", "1"],
        ["MULTI"],
        ["DISCARD"],
        ["MULTI"],
        ["XLEN", "own"],
        ["EXEC"],
        ["WATCH", "own", "other", "own"],
        ["MULTI"],
        ["XLEN", "own"],
        ["EXEC"],
        ["DEL", "own"],
    ]
    assert call_both(shared_narad.port, redis_server.port, script) == []


def test_watch_released_after_exec(shared_narad: NaradProcess) -> None:
    """After EXEC (run or aborted), the keys are no longer watched."""
    with Raw(shared_narad.port) as a, Raw(shared_narad.port) as b:
        for conn in (a, b):
            conn.call("SELECT", "10")
        b.call("DEL", "rel")
        a.call("WATCH", "rel")
        b.call("XADD", "rel", "*", "x", "1")
        a.call("MULTI")
        assert a.call("EXEC") is None
        b.call("XADD", "rel", "*", "x", "1")
        a.call("MULTI")
        a.call("XLEN", "rel")
        assert a.call("EXEC") == [2]
        b.call("DEL", "rel")


def test_exec_is_atomic_for_other_clients(shared_narad: NaradProcess) -> None:
    """Another client's commands sent meanwhile run before or after, never between."""
    with Raw(shared_narad.port) as a, Raw(shared_narad.port) as b:
        for conn in (a, b):
            conn.call("SELECT", "11")
        a.call("DEL", "atom")
        a.call("MULTI")
        for _ in range(200):
            a.call("XADD", "atom", "*", "from", "a")
        b.send(b"".join(b"XADD atom * from b\r\n" for _ in range(50)))
        a.send(b"EXEC\r\n")
        assert len(a.read()) == 200
        for _ in range(50):
            b.read()
        sources = [fields[1] for _, fields in a.call("XRANGE", "atom", "-", "+")]
        a_positions = [i for i, s in enumerate(sources) if s == b"a"]
        assert a_positions == list(range(a_positions[0], a_positions[0] + 200))
        a.call("DEL", "atom")
