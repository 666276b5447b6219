"""Keyspace commands: DEL, UNLINK, EXISTS, TYPE, KEYS, SCAN, RENAME, RENAMENX, in
several databases, side by side with redis-server 7.0."""

from __future__ import annotations

import random
from typing import Any

import pytest

from tests.server.raw import Raw, call_both, encode
from tests.servers import NaradProcess, RedisProcess


def _fill(conn: Raw, db: int, keys: list[Any]) -> None:
    """FLUSHDB `db`, then a stream at each key, in one pipelined send."""
    conn.call("SELECT", db)
    conn.call("FLUSHDB")
    conn.send(b"".join(encode(["XADD", key, "1-0", "f", "v"]) for key in keys))
    for _ in keys:
        assert conn.read() == b"1-0"


SCRIPTS = {
    "del_unlink_exists_type": [
        ["SELECT", "1"],
        ["FLUSHDB"],
        *[["XADD", f"k{i}", "1-0", "f", "v"] for i in range(6)],
        ["EXISTS", "k0"],
        ["EXISTS", "k0", "k0", "k1", "nosuch"],
        ["EXISTS", "nosuch"],
        ["TYPE", "k0"],
        ["TYPE", "nosuch"],
        ["DEL", "k0"],
        ["DEL", "k0"],
        ["DEL", "k1", "k2", "nosuch", "k1"],
        ["UNLINK", "k3", "nosuch"],
        ["UNLINK", "k3"],
        ["EXISTS", "k0", "k1", "k2", "k3", "k4", "k5"],
        ["DBSIZE"],
        ["TYPE", "k0"],
        ["XLEN", "k0"],
        ["XADD", "k0", "1-0", "f", "again"],
        ["XRANGE", "k0", "-", "+"],
        ["DEL"],
        ["UNLINK"],
        ["EXISTS"],
        ["TYPE"],
        ["TYPE", "a", "b"],
    ],
    "rename": [
        ["SELECT", "2"],
        ["FLUSHDB"],
        ["XADD", "a", "1-0", "f", "a1"],
        ["XADD", "a", "2-0", "f", "a2"],
        ["XADD", "b", "1-0", "f", "b1"],
        ["RENAME", "a", "c"],
        ["EXISTS", "a", "c"],
        ["XRANGE", "c", "-", "+"],
        ["XADD", "c", "2-0", "f", "x"],
        ["XADD", "c", "3-0", "f", "a3"],
        ["RENAME", "c", "b"],
        ["XRANGE", "b", "-", "+"],
        ["XLEN", "b"],
        ["DBSIZE"],
        ["RENAME", "b", "b"],
        ["XLEN", "b"],
        ["RENAME", "nosuch", "x"],
        ["RENAME", "nosuch", "nosuch"],
        ["RENAMENX", "nosuch", "x"],
        ["XADD", "d", "1-0", "f", "d1"],
        ["RENAMENX", "d", "b"],
        ["RENAMENX", "d", "d"],
        ["RENAMENX", "d", "e"],
        ["EXISTS", "d", "e"],
        ["XINFO", "STREAM", "e"],
        ["RENAME", "a"],
        ["RENAME", "a", "b", "c"],
        ["RENAMENX", "a"],
        ["SELECT", "3"],
        ["EXISTS", "b", "e"],
    ],
    "keys_patterns": [
        ["SELECT", "4"],
        ["FLUSHDB"],
        ["KEYS", "*"],
        *[
            ["XADD", key, "1-0", "f", "v"]
            for key in (
                "hello",
                "hallo",
                "hxllo",
                "hllo",
                "heeeello",
                "h*llo",
                "h?llo",
                "h[a]llo",
                "user:1",
                "user:2",
                "user:10",
                "user:1:name",
                "a\\b",
                "ä",
                "x y",
                "",
            )
        ],
        ["KEYS", "h?llo"],
        ["KEYS", "h*llo"],
        ["KEYS", "h[ae]llo"],
        ["KEYS", "h[^e]llo"],
        ["KEYS", "h[a-b]llo"],
        ["KEYS", "h[b-a]llo"],
        ["KEYS", "h\\*llo"],
        ["KEYS", "h\\?llo"],
        ["KEYS", "h\\[a\\]llo"],
        ["KEYS", "user:?"],
        ["KEYS", "user:*"],
        ["KEYS", "user:[0-9]"],
        ["KEYS", "user:[0-9]*"],
        ["KEYS", "*:name"],
        ["KEYS", "a\\\\b"],
        ["KEYS", "a\\b"],
        ["KEYS", "?"],
        ["KEYS", "x y"],
        ["KEYS", "h[a"],
        ["KEYS", "["],
        ["KEYS", ""],
        ["KEYS", "**"],
        ["KEYS", "nothing*"],
        ["KEYS"],
        ["KEYS", "a", "b"],
    ],
}


def _sorted_keys(diffs: list[Any]) -> list[Any]:
    """KEYS's order is the server's hash order: compare the sets."""
    out = []
    for args, mine, theirs in diffs:
        lists = isinstance(mine, list) and isinstance(theirs, list)
        if args[0] == "KEYS" and lists and sorted(mine) == sorted(theirs):
            continue
        out.append((args, mine, theirs))
    return out


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_same_replies_as_redis(
    name: str, shared_narad: NaradProcess, redis_server: RedisProcess
) -> None:
    assert _sorted_keys(call_both(shared_narad.port, redis_server.port, SCRIPTS[name])) == []


def test_glob_matches_redis_on_random_patterns(
    shared_narad: NaradProcess, redis_server: RedisProcess
) -> None:
    """KEYS with random patterns over random names made of the glob's own characters:
    the matcher must agree with Redis's stringmatchlen on every edge case."""
    rng = random.Random(7)
    alphabet = b"ab-^[]\\*?\xff"
    names = {bytes(rng.choice(alphabet) for _ in range(rng.randint(1, 4))) for _ in range(150)}
    with Raw(shared_narad.port) as mine, Raw(redis_server.port) as theirs:
        for conn in (mine, theirs):
            _fill(conn, 5, sorted(names))
        for _ in range(600):
            pattern = bytes(rng.choice(alphabet) for _ in range(rng.randint(0, 6)))
            expected = sorted(theirs.call("KEYS", pattern))
            assert sorted(mine.call("KEYS", pattern)) == expected, pattern


def test_hostile_patterns_are_answered(shared_narad: NaradProcess) -> None:
    """Patterns built to make a backtracking matcher explode, or to nest `*` deeply,
    are answered (Redis's matcher gives up on no-match early; so does Narad's)."""
    names = [b"a" * 3000, b"a" * 3000 + b"c", b"ab" * 1500]
    with Raw(shared_narad.port) as conn:
        _fill(conn, 13, names)
        for pattern in (
            b"*a" * 40 + b"b",
            b"?*" * 40 + b"x",
            b"[a]" + b"*a" * 40 + b"b",
            b"\\a" + b"*a" * 2000 + b"b",
            b"*" * 100_000,
            b"[" * 10_000,
        ):
            assert isinstance(conn.call("KEYS", pattern), list)
            assert isinstance(conn.call("SCAN", "0", "MATCH", pattern, "COUNT", "100"), list)
        assert sorted(conn.call("KEYS", "*a*c")) == [b"a" * 3000 + b"c"]
        assert conn.call("PING") == b"PONG"
        conn.call("FLUSHDB")


def test_keys_by_database(shared_narad: NaradProcess, redis_server: RedisProcess) -> None:
    script: list[list[Any]] = []
    for db in (6, 7, 8):
        script += [["SELECT", db], ["FLUSHDB"]]
        script += [["XADD", f"db{db}:{i}", "1-0", "f", "v"] for i in range(db)]
        script += [["XADD", "shared", "1-0", "db", db]]
    for db in (6, 7, 8):
        script += [
            ["SELECT", db],
            ["KEYS", "*"],
            ["KEYS", "db6:*"],
            ["DBSIZE"],
            ["XRANGE", "shared", "-", "+"],
            ["RENAME", "shared", f"moved{db}"],
            ["KEYS", "m*"],
        ]
    script += [["SELECT", "7"], ["DEL", "db6:0"], ["SELECT", "6"], ["EXISTS", "db6:0"]]
    assert _sorted_keys(call_both(shared_narad.port, redis_server.port, script)) == []


# -- SCAN --------------------------------------------------------------------------------------


def _full_scan(conn: Raw, *options: Any, after_each: Any = None) -> tuple[list[bytes], int]:
    cursor, seen, calls = b"0", [], 0
    while True:
        cursor, chunk = conn.call("SCAN", cursor, *options)
        seen += chunk
        calls += 1
        if after_each is not None:
            after_each(calls)
        if cursor == b"0":
            return seen, calls


def test_scan_full_iteration(shared_narad: NaradProcess) -> None:
    names = [f"scan:{i}".encode() for i in range(150)] + [b"other:%d" % i for i in range(30)]
    with Raw(shared_narad.port) as conn:
        _fill(conn, 9, names)
        for count in (1, 7, 10, 100, 500):
            seen, calls = _full_scan(conn, "COUNT", count)
            assert sorted(seen) == sorted(names), count
            assert len(seen) == len(set(seen)), count
            if count < len(names):
                assert calls > 1
        seen, _ = _full_scan(conn)  # the default COUNT
        assert sorted(seen) == sorted(names)
        seen, _ = _full_scan(conn, "MATCH", "other:*", "COUNT", 20)
        assert sorted(seen) == sorted(n for n in names if n.startswith(b"other:"))
        seen, _ = _full_scan(conn, "MATCH", "scan:4?", "COUNT", 1000)
        assert sorted(seen) == sorted(b"scan:4%d" % i for i in range(10))
        seen, _ = _full_scan(conn, "TYPE", "stream", "COUNT", 50)
        assert sorted(seen) == sorted(names)
        seen, _ = _full_scan(conn, "TYPE", "STREAM", "MATCH", "other:1*")
        assert sorted(seen) == sorted(n for n in names if n.startswith(b"other:1"))
        for other_type in ("string", "list", "hash", "zset", "set"):
            seen, _ = _full_scan(conn, "TYPE", other_type, "COUNT", 100)
            assert seen == []
        conn.call("FLUSHDB")
        assert conn.call("SCAN", "0") == [b"0", []]


def test_scan_while_keys_come_and_go(shared_narad: NaradProcess) -> None:
    """Keys present for the whole iteration are returned, however many others are
    added and deleted meanwhile (the guarantee Redis's SCAN gives)."""
    stable = [b"stable:%d" % i for i in range(120)]
    churn = [b"churn:%d" % i for i in range(120)]
    with Raw(shared_narad.port) as conn, Raw(shared_narad.port) as other:
        _fill(conn, 10, stable + churn)
        other.call("SELECT", "10")

        def mutate(call: int) -> None:
            for j in range(3):
                other.call("DEL", churn[(call * 3 + j) % len(churn)])
                other.call("XADD", b"new:%d:%d" % (call, j), "1-0", "f", "v")

        seen, _ = _full_scan(conn, "COUNT", 5, after_each=mutate)
        assert set(stable) <= set(seen)
        conn.call("FLUSHDB")


def test_scan_as_redis(shared_narad: NaradProcess, redis_server: RedisProcess) -> None:
    script = [
        ["SELECT", "11"],
        ["FLUSHDB"],
        ["SCAN", "0"],
        ["XADD", "one", "1-0", "f", "v"],
        ["SCAN", "0"],
        ["SCAN", "0", "TYPE", "stream"],
        ["SCAN", "0", "TYPE", "string"],
        ["SCAN", "0", "TYPE", "nosuchtype"],
        ["SCAN", "0", "MATCH", "o*"],
        ["SCAN", "0", "MATCH", "x*"],
        ["SCAN", "0", "count", "5", "match", "*", "type", "STREAM"],
        ["SCAN"],
        ["SCAN", "x"],
        ["SCAN", "1x"],
        ["SCAN", " 1"],
        ["SCAN", "+"],
        ["SCAN", "18446744073709551616"],
        ["SCAN", "0", "COUNT", "0"],
        ["SCAN", "0", "COUNT", "-1"],
        ["SCAN", "0", "COUNT", "x"],
        ["SCAN", "0", "MATCH"],
        ["SCAN", "0", "FOO", "bar"],
        ["SCAN", "0", "COUNT"],
        ["FLUSHDB"],
    ]
    assert call_both(shared_narad.port, redis_server.port, script) == []
    # Cursors are parsed as Redis parses them (what they point at is each server's own).
    with Raw(shared_narad.port) as conn:
        for cursor in ("-1", "18446744073709551615", "+5", ""):
            reply = conn.call("SCAN", cursor)
            assert isinstance(reply, list) and isinstance(reply[1], list), cursor


def test_redis_py_scan_iter(shared_narad: NaradProcess) -> None:
    client = shared_narad.client(db=12)
    client.flushdb()
    names = {f"it:{i}" for i in range(60)}
    with client.pipeline(transaction=False) as pipe:
        for name in names:
            pipe.xadd(name, {"f": "v"})
        pipe.execute()
    assert {k.decode() for k in client.scan_iter(count=13)} == names
    assert {k.decode() for k in client.scan_iter(match="it:1?", _type="stream")} == {
        f"it:1{i}" for i in range(10)
    }
    assert set(client.scan_iter(_type="string")) == set()
    assert {k.decode() for k in client.keys("it:5*")} == {"it:5"} | {f"it:5{i}" for i in range(10)}
    client.flushdb()
    client.close()
