"""The stream commands and options of Redis 8 on a real server: XDELEX, XACKDEL and
the KEEPREF / DELREF / ACKED option of XADD and XTRIM.

Only redis-server 7.0 runs on this machine, so the expected replies are Redis 8's as
its documentation and its own tests (tests/unit/type/stream.tcl, stream-cgroups.tcl)
give them; each case below is one of those, in Narad's words. Every new state op is
also checked to survive kill -9 (tests/replication/ checks replicas replay them).
"""

from __future__ import annotations

from typing import Any

import pytest
import redis

from tests.server.raw import Raw
from tests.servers import NaradProcess


def call(r: redis.Redis, *args: Any) -> Any:
    return r.execute_command(*args)


def wire(r: redis.Redis, *args: Any) -> Any:
    """The reply as the wire has it (redis-py reshapes XREADGROUP's and XPENDING's)."""
    with Raw(r.connection_pool.connection_kwargs["port"]) as conn:
        return conn.call(*args)


def error_of(r: redis.Redis, *args: Any) -> str:
    with pytest.raises(redis.ResponseError) as err:
        r.execute_command(*args)
    return str(err.value)


@pytest.fixture
def r(shared_narad: NaradProcess) -> redis.Redis:
    client = shared_narad.client()
    client.flushall()
    return client


def pending_summary(r: redis.Redis, key: str, group: str) -> list[Any]:
    """XPENDING key group as the wire has it (redis-py makes a dict of it)."""
    got = r.xpending(key, group)
    owners = [[c["name"], b"%d" % c["pending"]] for c in got["consumers"]] or None
    return [got["pending"], got["min"], got["max"], owners]


def two_groups_reading(r: redis.Redis, key: str = "mystream", n: int = 2) -> None:
    for i in range(1, n + 1):
        call(r, "XADD", key, f"{i}-0", "f", "v")
    for group, consumer in (("group1", "consumer1"), ("group2", "consumer2")):
        call(r, "XGROUP", "CREATE", key, group, "0")
        call(r, "XREADGROUP", "GROUP", group, consumer, "STREAMS", key, ">")


EMPTY_PENDING = [0, None, None, None]


# -- XDELEX ---------------------------------------------------------------------------


def test_xdelex_argument_errors(r: redis.Redis) -> None:
    call(r, "XADD", "s", "1-0", "f", "v")
    wrong = error_of(r, "XDELEX", "s", "IDS", "1")
    assert "wrong number of arguments for 'xdelex' command" in wrong
    for numids in ("abc", "0", "-5"):
        assert error_of(r, "XDELEX", "s", "IDS", numids, "1-1") == (
            "Number of IDs must be a positive integer"
        )
    assert error_of(r, "XDELEX", "s", "IDS", "3", "1-1", "2-2") == (
        "The `numids` parameter must match the number of arguments"
    )
    assert error_of(r, "XDELEX", "s", "IDS", "1", "1-1", "2-2") == "syntax error"
    for a, b in (("KEEPREF", "DELREF"), ("KEEPREF", "ACKED"), ("DELREF", "ACKED")):
        assert error_of(r, "XDELEX", "s", a, b, "IDS", "1", "1-1") == "syntax error"
    assert error_of(r, "XDELEX", "s", "BOGUS", "IDS", "1", "1-1") == "syntax error"
    assert error_of(r, "XDELEX", "s", "IDS", "2", "1-0", "nope") == (
        "Invalid stream ID specified as stream command argument"
    )
    assert error_of(r, "XDELEX", "s", "IDS", "1", "+") == (
        "Invalid stream ID specified as stream command argument"
    )
    # Nothing was deleted by a refused call.
    assert call(r, "XLEN", "s") == 1


def test_xdelex_basic_and_missing(r: redis.Redis) -> None:
    assert call(r, "XDELEX", "nokey", "IDS", "2", "1-0", "2-0") == [-1, -1]
    for i in range(1, 4):
        call(r, "XADD", "s", f"{i}-0", "f", f"v{i}")
    assert call(r, "XDELEX", "s", "IDS", "3", "1-0", "9-0", "1-0") == [1, -1, -1]
    assert call(r, "XDELEX", "s", "IDS", "1", "2-0") == [1]
    assert r.xrange("s") == [(b"3-0", {b"f": b"v3"})]
    info = r.xinfo_stream("s")
    assert info["max-deleted-entry-id"] == b"2-0" and info["entries-added"] == 3
    # The IDS block may come before the option, in either case.
    assert call(r, "XDELEX", "s", "ids", "1", "3-0", "keepref") == [1]


def test_xdelex_keepref_keeps_references(r: redis.Redis) -> None:
    two_groups_reading(r)
    assert call(r, "XDELEX", "mystream", "KEEPREF", "IDS", "2", "1-0", "2-0") == [1, 1]
    assert call(r, "XLEN", "mystream") == 0
    assert pending_summary(r, "mystream", "group1") == [2, b"1-0", b"2-0", [[b"consumer1", b"2"]]]
    # XCLAIM drops references to deleted entries, as in Redis.
    assert call(r, "XCLAIM", "mystream", "group1", "c", "0", "1-0") == []


def test_xdelex_delref_drops_every_reference(r: redis.Redis) -> None:
    two_groups_reading(r)
    assert call(r, "XDELEX", "mystream", "DELREF", "IDS", "1", "1-0") == [1]
    assert pending_summary(r, "mystream", "group1") == [1, b"2-0", b"2-0", [[b"consumer1", b"1"]]]
    assert pending_summary(r, "mystream", "group2") == [1, b"2-0", b"2-0", [[b"consumer2", b"1"]]]
    # A dangling reference (entry deleted by XDEL) goes too; the entry answers -1.
    call(r, "XDEL", "mystream", "2-0")
    assert call(r, "XDELEX", "mystream", "DELREF", "IDS", "1", "2-0") == [-1]
    assert pending_summary(r, "mystream", "group1") == EMPTY_PENDING
    assert pending_summary(r, "mystream", "group2") == EMPTY_PENDING


def test_xdelex_acked_deletes_only_what_no_group_needs(r: redis.Redis) -> None:
    for i in range(5):
        call(r, "XADD", "mystream", f"{i}-1", "item", str(i))
    call(r, "XGROUP", "CREATE", "mystream", "mygroup", "0")
    call(r, "XREADGROUP", "GROUP", "mygroup", "consumer1", "STREAMS", "mystream", ">")
    ids = ["0-1", "1-1", "2-1", "3-1", "4-1"]
    assert call(r, "XDELEX", "mystream", "ACKED", "IDS", "5", *ids) == [2] * 5
    call(r, "XACK", "mystream", "mygroup", "0-1", "1-1")
    assert call(r, "XDELEX", "mystream", "ACKED", "IDS", "5", *ids) == [1, 1, 2, 2, 2]
    call(r, "XGROUP", "DESTROY", "mystream", "mygroup")
    # No group left: nothing refers to the entries.
    assert call(r, "XDELEX", "mystream", "ACKED", "IDS", "5", *ids) == [-1, -1, 1, 1, 1]
    assert call(r, "XLEN", "mystream") == 0


def test_xdelex_acked_keeps_entries_a_group_has_not_read(r: redis.Redis) -> None:
    for i in range(1, 6):
        call(r, "XADD", "mystream", f"{i}-0", "f", f"v{i}")
    call(r, "XGROUP", "CREATE", "mystream", "group1", "1-0")
    call(r, "XGROUP", "CREATE", "mystream", "group2", "3-0")
    assert call(r, "XDELEX", "mystream", "ACKED", "IDS", "1", "1-0") == [1]
    assert call(r, "XDELEX", "mystream", "ACKED", "IDS", "1", "2-0") == [2]
    call(r, "XREADGROUP", "GROUP", "group1", "c", "COUNT", "1", "STREAMS", "mystream", ">")
    call(r, "XACK", "mystream", "group1", "2-0")
    assert call(r, "XDELEX", "mystream", "ACKED", "IDS", "2", "2-0", "4-0") == [1, 2]
    # An ID after every cursor is referenced even when there is no such entry.
    assert call(r, "XDELEX", "mystream", "ACKED", "IDS", "1", "99-0") == [2]


def test_xdelex_more_than_eight_ids(r: redis.Redis) -> None:
    call(r, "XGROUP", "CREATE", "mystream", "mygroup", "$", "MKSTREAM")
    for i in range(50):
        call(r, "XADD", "mystream", f"{i}-1", "f", "v")
    ids = [f"{i}-1" for i in range(60)]
    assert call(r, "XDELEX", "mystream", "IDS", "60", *ids) == [1] * 50 + [-1] * 10
    assert call(r, "XLEN", "mystream") == 0
    assert r.ping()


# -- XACKDEL --------------------------------------------------------------------------


def test_xackdel_argument_errors(r: redis.Redis) -> None:
    for args in ((), ("s",), ("s", "g"), ("s", "g", "IDS", "1")):
        assert "wrong number of arguments for 'xackdel' command" in error_of(r, "XACKDEL", *args)
    call(r, "XADD", "s", "1-0", "f", "v")
    call(r, "XGROUP", "CREATE", "s", "g", "0")
    for numids in ("abc", "0", "-5"):
        assert error_of(r, "XACKDEL", "s", "g", "IDS", numids, "1-1") == (
            "Number of IDs must be a positive integer"
        )
    assert error_of(r, "XACKDEL", "s", "g", "IDS", "3", "1-1", "2-2") == (
        "The `numids` parameter must match the number of arguments"
    )
    assert error_of(r, "XACKDEL", "s", "g", "IDS", "1", "1-1", "2-2") == "syntax error"
    for a, b in (("KEEPREF", "DELREF"), ("KEEPREF", "ACKED"), ("DELREF", "ACKED")):
        assert error_of(r, "XACKDEL", "s", "g", a, b, "IDS", "1", "1-1") == "syntax error"
    assert error_of(r, "XACKDEL", "s", "g", "IDS", "1", "x") == (
        "Invalid stream ID specified as stream command argument"
    )


def test_xackdel_missing_key_or_group(r: redis.Redis) -> None:
    assert call(r, "XACKDEL", "s", "g", "IDS", "2", "1-1", "2-2") == [-1, -1]
    call(r, "XADD", "s", "1-0", "f", "v")
    assert call(r, "XACKDEL", "s", "g", "IDS", "2", "1-1", "2-2") == [-1, -1]


def test_xackdel_only_acks_what_is_pending(r: redis.Redis) -> None:
    call(r, "XADD", "s", "1-1", "f", "v")
    call(r, "XADD", "s", "2-1", "f", "v")
    call(r, "XGROUP", "CREATE", "s", "g", "0")
    call(r, "XREADGROUP", "GROUP", "g", "c1", "COUNT", "1", "STREAMS", "s", ">")
    assert call(r, "XACKDEL", "s", "g", "IDS", "3", "1-1", "2-1", "1-1") == [1, -1, -1]
    assert call(r, "XLEN", "s") == 1
    assert call(r, "XACK", "s", "g", "1-1") == 0


def test_xackdel_delref(r: redis.Redis) -> None:
    two_groups_reading(r)
    assert call(r, "XACKDEL", "mystream", "group1", "DELREF", "IDS", "2", "1-0", "2-0") == [1, 1]
    assert call(r, "XLEN", "mystream") == 0
    assert pending_summary(r, "mystream", "group1") == EMPTY_PENDING
    assert pending_summary(r, "mystream", "group2") == EMPTY_PENDING
    assert call(r, "XACKDEL", "mystream", "group2", "DELREF", "IDS", "2", "1-0", "2-0") == [-1, -1]


def test_xackdel_acked(r: redis.Redis) -> None:
    two_groups_reading(r)
    assert call(r, "XACKDEL", "mystream", "group1", "ACKED", "IDS", "2", "1-0", "2-0") == [2, 2]
    assert call(r, "XLEN", "mystream") == 2
    assert pending_summary(r, "mystream", "group1") == EMPTY_PENDING
    assert pending_summary(r, "mystream", "group2") == [2, b"1-0", b"2-0", [[b"consumer2", b"2"]]]
    assert call(r, "XACKDEL", "mystream", "group2", "ACKED", "IDS", "2", "1-0", "2-0") == [1, 1]
    assert call(r, "XLEN", "mystream") == 0
    assert pending_summary(r, "mystream", "group2") == EMPTY_PENDING


def test_xackdel_keepref(r: redis.Redis) -> None:
    two_groups_reading(r)
    assert call(r, "XACKDEL", "mystream", "group1", "KEEPREF", "IDS", "2", "1-0", "2-0") == [1, 1]
    assert call(r, "XLEN", "mystream") == 0
    assert pending_summary(r, "mystream", "group1") == EMPTY_PENDING
    assert pending_summary(r, "mystream", "group2") == [2, b"1-0", b"2-0", [[b"consumer2", b"2"]]]
    # Acking the dangling references answers 1: acked, the entries gone already.
    assert call(r, "XACKDEL", "mystream", "group2", "IDS", "2", "1-0", "2-0") == [1, 1]
    assert pending_summary(r, "mystream", "group2") == EMPTY_PENDING


def test_xackdel_more_than_eight_ids(r: redis.Redis) -> None:
    call(r, "XGROUP", "CREATE", "mystream", "mygroup", "$", "MKSTREAM")
    ids = [f"{i}-1" for i in range(50)]
    assert call(r, "XACKDEL", "mystream", "mygroup", "IDS", "50", *ids) == [-1] * 50
    for sid in ids:
        call(r, "XADD", "mystream", sid, "f", "v")
    call(r, "XREADGROUP", "GROUP", "mygroup", "c", "STREAMS", "mystream", ">")
    assert call(r, "XACKDEL", "mystream", "mygroup", "IDS", "50", *ids) == [1] * 50
    assert call(r, "XLEN", "mystream") == 0
    assert r.ping()


# -- XADD / XTRIM with a strategy -----------------------------------------------------


def test_xtrim_strategies(r: redis.Redis) -> None:
    for key in ("k", "d", "a"):
        two_groups_reading(r, key, n=5)
        call(r, "XACK", key, "group1", "1-0", "2-0", "3-0")
        call(r, "XACK", key, "group2", "1-0", "3-0", "4-0")
    assert call(r, "XTRIM", "k", "MAXLEN", "2", "KEEPREF") == 3
    assert pending_summary(r, "k", "group1")[0] == 2  # 4-0 and 5-0
    assert pending_summary(r, "k", "group2") == [2, b"2-0", b"5-0", [[b"consumer2", b"2"]]]
    assert call(r, "XTRIM", "d", "MAXLEN", "2", "DELREF") == 3
    assert pending_summary(r, "d", "group1") == [2, b"4-0", b"5-0", [[b"consumer1", b"2"]]]
    assert pending_summary(r, "d", "group2") == [1, b"5-0", b"5-0", [[b"consumer2", b"1"]]]
    # ACKED: 2-0 is pending in group2, 4-0 in group1: only 1-0 and 3-0 may go.
    assert call(r, "XTRIM", "a", "MAXLEN", "2", "ACKED") == 2
    assert [e[0] for e in call(r, "XRANGE", "a", "-", "+")] == [b"2-0", b"4-0", b"5-0"]
    assert call(r, "XTRIM", "a", "MINID", "5-0", "ACKED") == 0
    call(r, "XACK", "a", "group2", "2-0")
    assert call(r, "XTRIM", "a", "MINID", "5-0", "ACKED") == 1
    assert [e[0] for e in call(r, "XRANGE", "a", "-", "+")] == [b"4-0", b"5-0"]
    assert r.xinfo_stream("a")["max-deleted-entry-id"] == b"0-0"  # trims leave it


def test_xadd_trims_with_a_strategy(r: redis.Redis) -> None:
    call(r, "XADD", "s", "1-0", "f", "v")
    call(r, "XGROUP", "CREATE", "s", "g", "0")
    call(r, "XREADGROUP", "GROUP", "g", "c", "STREAMS", "s", ">")
    assert call(r, "XADD", "s", "ACKED", "MAXLEN", "1", "2-0", "f", "v") == b"2-0"
    assert call(r, "XLEN", "s") == 2  # 1-0 pending, 2-0 unread: both kept
    assert call(r, "XADD", "s", "MAXLEN", "1", "DELREF", "3-0", "f", "v") == b"3-0"
    assert call(r, "XLEN", "s") == 1
    assert pending_summary(r, "s", "g") == EMPTY_PENDING
    # Without a group ACKED trims as KEEPREF does.
    assert call(r, "XADD", "t", "ACKED", "MAXLEN", "1", "*", "f", "v")
    assert call(r, "XADD", "t", "ACKED", "MAXLEN", "1", "*", "f", "v")
    assert call(r, "XLEN", "t") == 1


def test_redis_py_methods(r: redis.Redis) -> None:
    two_groups_reading(r, "s", n=3)
    assert r.xdelex("s", "1-0", ref_policy="ACKED") == [2]
    assert r.xdelex("s", "1-0", "9-0") == [1, -1]
    assert r.xackdel("s", "group1", "2-0", "3-0", ref_policy="DELREF") == [1, 1]
    assert pending_summary(r, "s", "group2")[0] == 1  # the dangling 1-0 only
    assert r.xackdel("s", "group2", "1-0", ref_policy="ACKED") == [2]  # group1 has it
    assert r.xadd("s", {"f": "v"}, id="4-0", maxlen=0, approximate=False, ref_policy="ACKED")
    assert r.xtrim("s", maxlen=0, approximate=False, ref_policy="DELREF") == 1


KEYS = ("x", "y", "z", "w", "v")


def write_new_ops(c: redis.Redis) -> None:
    """Every state op the Redis 8 commands write, on streams x, y, z, w, v."""
    for key in KEYS:
        two_groups_reading(c, key, n=20)
    c.execute_command("XDELEX", "x", "DELREF", "IDS", "3", "1-0", "5-0", "7-0")
    c.execute_command("XACK", "x", "group1", "2-0", "3-0")
    c.execute_command("XDELEX", "x", "ACKED", "IDS", "2", "2-0", "9-0")
    c.execute_command("XACKDEL", "y", "group1", "ACKED", "IDS", "3", "1-0", "2-0", "3-0")
    c.execute_command("XACKDEL", "y", "group2", "ACKED", "IDS", "2", "1-0", "2-0")
    c.execute_command("XACKDEL", "y", "group2", "DELREF", "IDS", "1", "10-0")
    c.execute_command("XACK", "z", "group1", *[f"{i}-0" for i in range(1, 15)])
    c.execute_command("XACK", "z", "group2", *[f"{i}-0" for i in range(1, 8)], "9-0")
    c.execute_command("XTRIM", "z", "MAXLEN", "5", "ACKED")
    c.execute_command("XADD", "z", "MAXLEN", "8", "DELREF", "21-0", "f", "v")
    c.execute_command("XADD", "w", "21-0", "f", "v")
    for group, noack in (("group1", ()), ("group2", ("NOACK",))):
        c.execute_command(
            "XREADGROUP", "GROUP", group, "c9", "COUNT", "22", *noack, "CLAIM", "0",
            "STREAMS", "w", ">",
        )
    c.execute_command("XNACK", "v", "group1", "SILENT", "IDS", "2", "5-0", "3-0")
    c.execute_command("XNACK", "v", "group2", "FATAL", "IDS", "1", "4-0", "RETRYCOUNT", "9")
    c.execute_command("XACK", "v", "group1", "1-0", "2-0")
    c.execute_command("XNACK", "v", "group1", "FAIL", "IDS", "2", "1-0", "2-0", "FORCE")
    c.execute_command("XREADGROUP", "GROUP", "group1", "c9", "COUNT", "1", "CLAIM", "0",
                      "STREAMS", "v", ">")


def state_of(port: int) -> Any:
    """The entries and the whole group state of x, y, z, as the wire has them."""
    with Raw(port) as raw:
        return [
            (raw.call("XRANGE", key, "-", "+"), raw.call("XINFO", "STREAM", key, "FULL"))
            for key in KEYS
        ]


def test_new_ops_survive_kill_9(narad: NaradProcess) -> None:
    write_new_ops(narad.client())
    before = state_of(narad.port)
    # z: 1-7 trimmed and 9 deleted (ACKED), then 8 and 10-13 trimmed (DELREF).
    assert [e[0] for e in before[2][0]][:2] == [b"14-0", b"15-0"]
    narad.kill()
    narad.start()
    assert state_of(narad.port) == before


# -- MAXCOUNT / MAXSIZE on XREAD and XREADGROUP --------------------------------------


def entry_count(reply: Any) -> int:
    return sum(len(entries) for _, entries in reply or [])


def three_streams(r: redis.Redis, n: int = 100) -> None:
    for key in ("s1", "s2", "s3"):
        for i in range(1, n + 1):
            call(r, "XADD", key, f"{i}-0", "f", "v")


@pytest.mark.parametrize("read", [["XREAD"], ["XREADGROUP", "GROUP", "g", "c"]])
def test_maxcount_maxsize_errors(r: redis.Redis, read: list[str]) -> None:
    tail = ["STREAMS", "s", "0" if read == ["XREAD"] else ">"]
    for value in ("0", "-1", "x"):
        assert error_of(r, *read, "MAXCOUNT", value, *tail) == "MAXCOUNT must be > 0"
        assert error_of(r, *read, "MAXSIZE", value, *tail) == "MAXSIZE must be > 0"
    assert error_of(r, *read, "COUNT", "5", "MAXCOUNT", "3", *tail) == (
        "MAXCOUNT must be greater than or equal to COUNT"
    )
    assert error_of(r, *read, "MAXCOUNT", "3", "COUNT", "5", *tail) == (
        "MAXCOUNT must be greater than or equal to COUNT"
    )


def test_xread_maxcount_is_cumulative(r: redis.Redis) -> None:
    three_streams(r)
    streams = ["STREAMS", "s1", "s2", "s3", "0", "0", "0"]
    assert entry_count(call(r, "XREAD", "COUNT", "50", *streams)) == 150
    got = call(r, "XREAD", "COUNT", "50", "MAXCOUNT", "80", *streams)
    assert [(k, len(e)) for k, e in got] == [(b"s1", 50), (b"s2", 30)]
    got = call(r, "XREAD", "MAXCOUNT", "7", *streams)
    assert [(k, len(e)) for k, e in got] == [(b"s1", 7)]
    assert entry_count(call(r, "XREAD", "MAXCOUNT", "5", "MAXSIZE", "100000", *streams)) == 5
    assert entry_count(call(r, "XREAD", "COUNT", "3", "MAXCOUNT", "4", *streams)) == 4


def test_maxsize_always_answers_one_entry(r: redis.Redis) -> None:
    call(r, "XADD", "big", "1-0", "f", "x" * 1000)
    call(r, "XADD", "big", "2-0", "f", "y")
    assert entry_count(call(r, "XREAD", "MAXSIZE", "1", "STREAMS", "big", "0")) == 1
    # An entry counts its ID and its fields' and values' bytes: 3 + 1001, then 3 + 2.
    assert entry_count(call(r, "XREAD", "MAXSIZE", "1008", "STREAMS", "big", "0")) == 1
    assert entry_count(call(r, "XREAD", "MAXSIZE", "1009", "STREAMS", "big", "0")) == 2
    assert entry_count(call(r, "XREAD", "MAXSIZE", "65536", "STREAMS", "big", "0")) == 2


def test_xreadgroup_delivers_only_what_it_answers(r: redis.Redis) -> None:
    three_streams(r, n=3)
    for key in ("s1", "s2", "s3"):
        call(r, "XGROUP", "CREATE", key, "g", "0")
    streams = ["STREAMS", "s1", "s2", "s3", ">", ">", ">"]
    got = call(r, "XREADGROUP", "GROUP", "g", "c", "COUNT", "3", "MAXCOUNT", "4", *streams)
    assert [(k, len(e)) for k, e in got] == [(b"s1", 3), (b"s2", 1)]
    assert [r.xpending(k, "g")["pending"] for k in ("s1", "s2", "s3")] == [3, 1, 0]
    # MAXSIZE: 2-0 of s2 is 3 + 2 bytes; the second entry would pass 7.
    got = call(r, "XREADGROUP", "GROUP", "g", "c", "MAXSIZE", "7", *streams)
    assert [(k, [e[0] for e in entries]) for k, entries in got] == [(b"s2", [b"2-0"])]
    assert [r.xpending(k, "g")["pending"] for k in ("s1", "s2", "s3")] == [3, 2, 0]
    assert r.xinfo_groups("s2")[0]["last-delivered-id"] == b"2-0"
    # History reads are bounded too, and always answer their stream.
    history = ["STREAMS", "s1", "s2", "0", "0"]
    got = call(r, "XREADGROUP", "GROUP", "g", "c", "MAXCOUNT", "2", *history)
    assert [(k, len(e)) for k, e in got] == [(b"s1", 2), (b"s2", 0)]
    assert r.xreadgroup("g", "c", {"s3": ">"}, max_count=1) == [[b"s3", [(b"1-0", {b"f": b"v"})]]]
    entries = [(b"1-0", {b"f": b"v"}), (b"2-0", {b"f": b"v"})]
    assert r.xread({"s3": 0}, count=2, max_count=3) == [[b"s3", entries]]


# -- XREADGROUP ... CLAIM -------------------------------------------------------------


def age(r: redis.Redis, key: str, group: str, consumer: str, idle_ms: int, *sids: str) -> None:
    """Make pending entries look idle for `idle_ms` (XCLAIM IDLE, count unchanged)."""
    wire(r, "XCLAIM", key, group, consumer, "0", *sids, "IDLE", str(idle_ms), "JUSTID")


def claim_read(r: redis.Redis, *args: str, key: str = "s") -> Any:
    return wire(r, "XREADGROUP", "GROUP", "g", *args, "STREAMS", key, ">")


def test_claim_argument_errors(r: redis.Redis) -> None:
    call(r, "XADD", "s", "1-0", "f", "v")
    call(r, "XGROUP", "CREATE", "s", "g", "0")
    read = ["XREADGROUP", "GROUP", "g", "c", "CLAIM"]
    for value in ("test", "5.5", "10e", "+10", "-0", "COUNT"):
        assert error_of(r, *read, value, "STREAMS", "s", ">") == "min-idle-time is not an integer"
    for value in ("-10", "-42"):
        assert error_of(r, *read, value, "STREAMS", "s", ">") == (
            "min-idle-time must be a positive integer"
        )
    assert error_of(r, "XREADGROUP", "CLAIM", "GROUP", "g", "c", "STREAMS", "s", ">") == (
        "min-idle-time is not an integer"
    )
    assert error_of(r, "XREADGROUP", "GROUP", "g", "CLAIM", "50", "c", "STREAMS", "s", ">") == (
        "syntax error"
    )
    assert error_of(r, "XREADGROUP", "GROUP", "g", "c", "STREAMS", "s", "CLAIM", ">").startswith(
        "Unbalanced"
    )
    assert error_of(r, "XREAD", "CLAIM", "10", "STREAMS", "s", "0") == (
        "The CLAIM option is only supported by XREADGROUP. You called XREAD instead."
    )
    nogroup = ["XREADGROUP", "GROUP", "nogroup", "c", "CLAIM", "5", "STREAMS", "s", ">"]
    assert error_of(r, *nogroup) == (
        "NOGROUP No such key 's' or consumer group 'nogroup' in XREADGROUP with GROUP option"
    )


def test_claim_then_new_entries_with_idle_and_count(r: redis.Redis) -> None:
    for i in range(1, 4):
        call(r, "XADD", "s", f"{i}-0", "f", f"v{i}")
    call(r, "XGROUP", "CREATE", "s", "g", "0")
    call(r, "XREADGROUP", "GROUP", "g", "c1", "COUNT", "2", "STREAMS", "s", ">")
    assert claim_read(r, "c2", "CLAIM", "100000") == [
        [b"s", [[b"3-0", [b"f", b"v3"], 0, 0]]]
    ]
    age(r, "s", "g", "c1", 200_000, "1-0")
    age(r, "s", "g", "c1", 300_000, "2-0")
    call(r, "XADD", "s", "4-0", "f", "v4")
    got = claim_read(r, "c2", "COUNT", "2", "CLAIM", "100000")
    # Most idle first, then the new entry would come, but COUNT 2 is shared.
    assert [(e[0], e[3]) for e in got[0][1]] == [(b"2-0", 1), (b"1-0", 1)]
    assert all(isinstance(e[2], int) and e[2] >= 200_000 for e in got[0][1])
    pending = wire(r, "XPENDING", "s", "g", "-", "+", "10")
    assert [(p[0], p[1], p[3]) for p in pending] == [
        (b"1-0", b"c2", 2),
        (b"2-0", b"c2", 2),
        (b"3-0", b"c2", 1),
    ]
    assert claim_read(r, "c3", "CLAIM", "100000") == [[b"s", [[b"4-0", [b"f", b"v4"], 0, 0]]]]
    assert claim_read(r, "c3", "CLAIM", "100000") is None
    # With min-idle-time 0 everything pending is claimable at once.
    got = claim_read(r, "c4", "CLAIM", "0")
    assert sorted(e[0] for e in got[0][1]) == [b"1-0", b"2-0", b"3-0", b"4-0"]


def test_claim_with_noack_claims_but_does_not_add(r: redis.Redis) -> None:
    call(r, "XADD", "s", "1-0", "f", "v1")
    call(r, "XADD", "s", "2-0", "f", "v2")
    call(r, "XGROUP", "CREATE", "s", "g", "0")
    call(r, "XREADGROUP", "GROUP", "g", "c1", "COUNT", "1", "STREAMS", "s", ">")
    got = claim_read(r, "c1", "NOACK", "CLAIM", "0")
    assert [(e[0], e[2:]) for e in got[0][1]] == [(b"1-0", got[0][1][0][2:]), (b"2-0", [0, 0])]
    assert r.xpending("s", "g")["pending"] == 1
    got = claim_read(r, "c1", "NOACK", "CLAIM", "0")
    assert [e[0] for e in got[0][1]] == [b"1-0"] and got[0][1][0][3] == 2


def test_claim_passes_over_deleted_entries_and_ignores_history_reads(r: redis.Redis) -> None:
    for i in range(1, 4):
        call(r, "XADD", "s", f"{i}-0", "f", f"v{i}")
    call(r, "XGROUP", "CREATE", "s", "g", "0")
    call(r, "XREADGROUP", "GROUP", "g", "c1", "STREAMS", "s", ">")
    call(r, "XDEL", "s", "2-0")
    got = claim_read(r, "c2", "CLAIM", "0")
    assert [e[0] for e in got[0][1]] == [b"1-0", b"3-0"]
    history = wire(r, "XREADGROUP", "GROUP", "g", "c1", "CLAIM", "0", "STREAMS", "s", "0")
    assert history == [[b"s", [[b"2-0", None]]]]


def test_claim_through_redis_py(r: redis.Redis) -> None:
    call(r, "XADD", "s", "1-0", "f", "v1")
    call(r, "XADD", "s", "2-0", "f", "v2")
    r.xgroup_create("s", "g", 0)
    r.xreadgroup("g", "c1", {"s": ">"}, count=1)
    age(r, "s", "g", "c1", 60_000, "1-0")
    got = r.xreadgroup("g", "c2", {"s": ">"}, claim_min_idle_time=50_000)
    ((key, entries),) = got
    assert key == b"s"
    assert [(e[0], e[1], e[3]) for e in entries] == [
        (b"1-0", {b"f": b"v1"}, 1),
        (b"2-0", {b"f": b"v2"}, 0),
    ]
    assert entries[0][2] >= 60_000 and entries[1][2] == 0


def test_blocked_claim_wakes_when_an_entry_becomes_claimable(shared_narad: NaradProcess) -> None:
    r = shared_narad.client()
    r.flushall()
    call(r, "XADD", "s", "1-0", "f", "v1")
    call(r, "XGROUP", "CREATE", "s", "g", "0")
    call(r, "XREADGROUP", "GROUP", "g", "c1", "STREAMS", "s", ">")
    with Raw(shared_narad.port, timeout=30) as blocked:
        blocked.send_command("XREADGROUP", "GROUP", "g", "c2", "BLOCK", "0", "CLAIM", "300",
                             "STREAMS", "s", ">")
        got = blocked.read()  # nothing else happens: only the alarm can serve it
    assert got[0][0] == b"s" and got[0][1][0][0] == b"1-0" and got[0][1][0][3] == 1
    assert r.xpending_range("s", "g", "-", "+", 1)[0]["consumer"] == b"c2"
    # A new entry serves a blocked CLAIM reader as any blocked reader.
    with Raw(shared_narad.port, timeout=30) as blocked:
        blocked.send_command("XREADGROUP", "GROUP", "g", "c3", "BLOCK", "0", "CLAIM", "3600000",
                             "STREAMS", "s", ">")
        wait_blocked(r, 1)
        call(r, "XADD", "s", "2-0", "f", "v2")
        assert blocked.read() == [[b"s", [[b"2-0", [b"f", b"v2"], 0, 0]]]]


def wait_blocked(r: redis.Redis, count: int) -> None:
    from tests.servers import wait_until

    wait_until(lambda: r.info("clients")["blocked_clients"] == count)


# -- XNACK ----------------------------------------------------------------------------


INT64_MAX = (1 << 63) - 1


def nack_setup(r: redis.Redis, n: int = 3) -> None:
    for i in range(1, n + 1):
        call(r, "XADD", "s", f"{i}-0", "f", f"v{i}")
    call(r, "XGROUP", "CREATE", "s", "g", "0")
    call(r, "XREADGROUP", "GROUP", "g", "c1", "STREAMS", "s", ">")


def test_xnack_argument_errors(r: redis.Redis) -> None:
    nack_setup(r)
    assert "wrong number of arguments for 'xnack' command" in error_of(
        r, "XNACK", "s", "g", "FAIL", "IDS", "1"
    )
    assert error_of(r, "XNACK", "s", "g", "MAYBE", "IDS", "1", "1-0") == "syntax error"
    assert error_of(r, "XNACK", "s", "g", "FAIL", "IDS", "0", "1-0") == (
        "Number of IDs must be a positive integer"
    )
    assert error_of(r, "XNACK", "s", "g", "FAIL", "IDS", "3", "1-0", "2-0") == (
        "The `numids` parameter must match the number of arguments"
    )
    assert error_of(r, "XNACK", "s", "g", "FAIL", "IDS", "1", "1-0", "BOGUS") == "syntax error"
    assert error_of(r, "XNACK", "s", "g", "FAIL", "IDS", "1", "1-0", "RETRYCOUNT", "-1") == (
        "Invalid RETRYCOUNT option argument for XNACK"
    )
    assert error_of(r, "XNACK", "s", "g", "FAIL", "IDS", "1", "x-y") == (
        "Invalid stream ID specified as stream command argument"
    )
    assert r.xpending("s", "g")["consumers"] == [{"name": b"c1", "pending": 3}]


def test_xnack_modes_and_what_xpending_shows(r: redis.Redis) -> None:
    nack_setup(r)
    wire(r, "XCLAIM", "s", "g", "c1", "0", "1-0", "2-0", "3-0", "RETRYCOUNT", "4", "JUSTID")
    assert call(r, "XNACK", "s", "g", "SILENT", "IDS", "2", "1-0", "9-0") == 1
    assert call(r, "XNACK", "s", "g", "FAIL", "IDS", "1", "3-0") == 1
    pending = wire(r, "XPENDING", "s", "g", "-", "+", "10")
    assert pending == [
        [b"1-0", b"", -1, 3],
        [b"2-0", b"c1", pending[1][2], 4],
        [b"3-0", b"", -1, 4],
    ]
    assert call(r, "XNACK", "s", "g", "FATAL", "IDS", "1", "2-0") == 1
    assert wire(r, "XPENDING", "s", "g", "2-0", "2-0", "1") == [[b"2-0", b"", -1, INT64_MAX]]
    assert call(r, "XNACK", "s", "g", "FAIL", "IDS", "1", "2-0", "RETRYCOUNT", "7") == 1
    summary = wire(r, "XPENDING", "s", "g")
    assert summary[:3] == [3, b"1-0", b"3-0"]
    group = r.xinfo_stream("s", full=True)["groups"][0]
    assert group["nacked-count"] == 3 and group["pel-count"] == 3
    assert [p[1:] for p in wire(r, "XINFO", "STREAM", "s", "FULL")[-1][0][-3]] == [
        [b"", 0, 3],
        [b"", 0, 7],
        [b"", 0, 4],
    ]
    # Not pending, or no such key or group: nothing to release.
    assert call(r, "XNACK", "s", "nogroup", "FAIL", "IDS", "1", "1-0") == 0
    assert call(r, "XNACK", "nokey", "g", "FAIL", "IDS", "1", "1-0") == 0
    call(r, "XACK", "s", "g", "1-0")
    assert call(r, "XNACK", "s", "g", "FAIL", "IDS", "1", "1-0") == 0
    assert r.xinfo_stream("s", full=True)["groups"][0]["nacked-count"] == 2


def test_xnack_force_creates_unowned_entries(r: redis.Redis) -> None:
    call(r, "XADD", "s", "1-0", "f", "v")
    call(r, "XADD", "s", "2-0", "f", "v")
    call(r, "XGROUP", "CREATE", "s", "g", "$")
    assert call(r, "XNACK", "s", "g", "FAIL", "IDS", "3", "1-0", "2-0", "7-0", "FORCE") == 2
    assert call(r, "XNACK", "s", "g", "FATAL", "FORCE", "IDS", "1", "1-0") == 1
    assert [p[3] for p in wire(r, "XPENDING", "s", "g", "-", "+", "10")] == [INT64_MAX, 0]
    call(r, "XDEL", "s", "2-0")
    assert call(r, "XNACK", "s", "g", "FAIL", "IDS", "1", "3-0", "FORCE") == 0


def test_nacked_entries_are_claimable_at_once_in_nack_order(r: redis.Redis) -> None:
    nack_setup(r, n=4)
    assert call(r, "XNACK", "s", "g", "SILENT", "IDS", "2", "3-0", "1-0") == 2
    got = claim_read(r, "c2", "CLAIM", "3600000")
    # The nack zone first, in nack order; 2-0 and 4-0 are not idle long enough.
    assert [(e[0], e[2], e[3]) for e in got[0][1]] == [(b"3-0", -1, 0), (b"1-0", -1, 0)]
    assert r.xinfo_stream("s", full=True)["groups"][0]["nacked-count"] == 0
    call(r, "XNACK", "s", "g", "FAIL", "IDS", "2", "2-0", "4-0")
    assert wire(r, "XCLAIM", "s", "g", "c3", "3600000", "2-0", "JUSTID") == [b"2-0"]
    assert wire(r, "XAUTOCLAIM", "s", "g", "c4", "3600000", "0", "JUSTID") == [b"0-0", [b"4-0"], []]
    owners = [(p[0], p[1]) for p in wire(r, "XPENDING", "s", "g", "-", "+", "10")]
    assert owners == [(b"1-0", b"c2"), (b"2-0", b"c3"), (b"3-0", b"c2"), (b"4-0", b"c4")]


def test_xnack_wakes_a_blocked_claim_reader(shared_narad: NaradProcess) -> None:
    r = shared_narad.client()
    r.flushall()
    nack_setup(r, n=1)
    with Raw(shared_narad.port, timeout=30) as blocked:
        blocked.send_command("XREADGROUP", "GROUP", "g", "c2", "BLOCK", "0", "CLAIM", "3600000",
                             "STREAMS", "s", ">")
        wait_blocked(r, 1)
        assert r.xnack("s", "g", "FAIL", "1-0") == 1
        assert blocked.read() == [[b"s", [[b"1-0", [b"f", b"v1"], -1, 1]]]]


def test_xnack_through_redis_py(r: redis.Redis) -> None:
    nack_setup(r, n=2)
    assert r.xnack("s", "g", "FAIL", "1-0", "2-0", "9-0") == 2
    assert r.xnack("s", "g", "SILENT", "1-0", retrycount=5) == 1
    assert r.xnack("s", "g", "FATAL", "3-0") == 0
    call(r, "XADD", "s", "3-0", "f", "v3")
    assert r.xnack("s", "g", "FATAL", "3-0", force=True) == 1
    assert [p["times_delivered"] for p in r.xpending_range("s", "g", "-", "+", 10)] == [
        5, 1, INT64_MAX
    ]


@pytest.mark.parametrize("group", [False, True])
def test_a_woken_reader_keeps_its_maxcount(shared_narad: NaradProcess, group: bool) -> None:
    r = shared_narad.client()
    r.flushall()
    if group:
        call(r, "XGROUP", "CREATE", "s", "g", "$", "MKSTREAM")
        read = ["XREADGROUP", "GROUP", "g", "c", "BLOCK", "0", "MAXCOUNT", "2", "STREAMS", "s", ">"]
    else:
        read = ["XREAD", "BLOCK", "0", "MAXCOUNT", "2", "STREAMS", "s", "$"]
    with Raw(shared_narad.port, timeout=30) as blocked:
        blocked.send_command(*read)
        wait_blocked(r, 1)
        pipe = r.pipeline(transaction=True)
        for i in range(1, 4):
            pipe.xadd("s", {"f": "v"}, id=f"{i}-0")
        pipe.execute()
        ((key, entries),) = blocked.read()
    assert key == b"s" and [e[0] for e in entries] == [b"1-0", b"2-0"]
    if group:
        assert r.xpending("s", "g")["pending"] == 2
