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


KEYS = ("x", "y", "z")


def write_new_ops(c: redis.Redis) -> None:
    """Every state op the Redis 8 commands write, on streams x, y, z."""
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
