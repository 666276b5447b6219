"""Stream commands without groups, side by side with redis-server 7.0."""

from __future__ import annotations

import pytest

from tests.server.compare import run_both

SCRIPTS = {
    "xadd_ids": [
        ["XADD", "s", "1-1", "a", "1"],
        ["XADD", "s", "1-1", "a", "1"],
        ["XADD", "s", "0-0", "a", "1"],
        ["XADD", "s", "1-*", "b", "2"],
        ["XADD", "s", "2", "c", "3"],
        ["XADD", "s", "abc", "a", "1"],
        ["XADD", "s", "3-0", "a"],
        ["XADD", "s", "3-0"],
        ["XADD", "s", "NOMKSTREAM", "3-0", "x", "y"],
        ["XADD", "nope", "NOMKSTREAM", "3-0", "x", "y"],
        ["XADD", "s", "18446744073709551615-18446744073709551615", "a", "1"],
        ["XADD", "s", "*", "a", "1"],
        ["XLEN", "s"],
        ["XLEN", "nope"],
        ["EXISTS", "s", "nope", "s"],
        ["TYPE", "s"],
        ["TYPE", "nope"],
    ],
    "xrange": [
        *[["XADD", "r", f"{i}-{j}", "f", f"v{i}{j}"] for i in range(1, 6) for j in range(3)],
        ["XRANGE", "r", "-", "+"],
        ["XRANGE", "r", "2", "3"],
        ["XRANGE", "r", "(2-1", "(3-2"],
        ["XRANGE", "r", "-", "+", "COUNT", "4"],
        ["XRANGE", "r", "-", "+", "COUNT", "0"],
        ["XRANGE", "r", "-", "+", "COUNT", "-1"],
        ["XRANGE", "r", "5", "1"],
        ["XRANGE", "r", "(", "+"],
        ["XRANGE", "r", "(18446744073709551615-18446744073709551615", "+"],
        ["XRANGE", "r", "-", "(0-0"],
        ["XRANGE", "r", "-", "+", "COUNT"],
        ["XRANGE", "r", "-", "+", "LIMIT", "2"],
        ["XRANGE", "r", "x", "+"],
        ["XREVRANGE", "r", "+", "-"],
        ["XREVRANGE", "r", "+", "-", "COUNT", "2"],
        ["XREVRANGE", "r", "(4-0", "(2-2"],
        ["XREVRANGE", "r", "3", "3"],
        ["XRANGE", "missing", "-", "+"],
    ],
    "xdel_xtrim": [
        *[["XADD", "d", f"{i}-0", "f", str(i)] for i in range(1, 21)],
        ["XDEL", "d", "1-0", "5-0", "5-0", "99-0"],
        ["XDEL", "d", "bad"],
        ["XLEN", "d"],
        ["XRANGE", "d", "-", "+", "COUNT", "5"],
        ["XTRIM", "d", "MAXLEN", "10"],
        ["XLEN", "d"],
        ["XRANGE", "d", "-", "+"],
        ["XTRIM", "d", "MINID", "15"],
        ["XRANGE", "d", "-", "+"],
        ["XTRIM", "d", "MAXLEN", "-1"],
        ["XTRIM", "d", "FOO", "1"],
        ["XTRIM", "d"],
        ["XTRIM", "d", "MAXLEN", "1", "LIMIT", "1"],
        ["XTRIM", "d", "MAXLEN", "1", "MINID", "2"],
        ["XTRIM", "missing", "MAXLEN", "0"],
        ["XADD", "d", "MAXLEN", "2", "30-0", "f", "x"],
        ["XRANGE", "d", "-", "+"],
        # Backwards, trimmed entries stay gone (they are still in the log's file).
        ["XREVRANGE", "d", "+", "-"],
        ["XTRIM", "d", "MAXLEN", "0"],
        ["XREVRANGE", "d", "+", "-"],
        ["XINFO", "STREAM", "d"],
        ["XADD", "d", "31-0", "f", "y"],
        ["XREVRANGE", "d", "+", "-"],
        ["XADD", "d", "MAXLEN", "abc", "31-0", "f", "x"],
        ["XADD", "d", "LIMIT", "5", "31-0", "f", "x"],
    ],
    "xsetid": [
        ["XADD", "x", "5-5", "a", "1"],
        ["XSETID", "x", "5-4"],
        ["XSETID", "x", "10-0"],
        ["XADD", "x", "9-0", "a", "1"],
        ["XADD", "x", "10-*", "a", "1"],
        ["XSETID", "missing", "1-1"],
        ["XSETID", "x", "20-0", "ENTRIESADDED", "1"],
        ["XSETID", "x", "20-0", "ENTRIESADDED", "100", "MAXDELETEDID", "25-0"],
        ["XSETID", "x", "20-0", "ENTRIESADDED", "100", "MAXDELETEDID", "15-0"],
        ["XSETID", "x", "20-0", "MAXDELETEDID", "0-0"],  # 0-0 leaves it at 15-0
        ["XINFO", "STREAM", "x"],
    ],
    "xread": [
        ["XADD", "a", "1-0", "f", "1"],
        ["XADD", "a", "2-0", "f", "2"],
        ["XADD", "b", "1-0", "g", "1"],
        ["XREAD", "STREAMS", "a", "b", "0", "0"],
        ["XREAD", "COUNT", "1", "STREAMS", "a", "b", "1-0", "0"],
        ["XREAD", "STREAMS", "a", "$"],
        ["XREAD", "STREAMS", "a", "b", "0"],
        ["XREAD", "STREAMS", "missing", "0"],
        ["XREAD", "COUNT", "x", "STREAMS", "a", "0"],
        ["XREAD", "BLOCK", "-1", "STREAMS", "a", "0"],
        ["XREAD", "FOO", "STREAMS", "a", "0"],
    ],
    "keys": [
        ["XADD", "k1", "1-0", "f", "1"],
        ["XADD", "k2", "1-0", "f", "1"],
        ["RENAME", "k1", "k3"],
        ["RENAME", "nope", "k4"],
        ["RENAMENX", "k3", "k2"],
        ["RENAMENX", "k3", "k5"],
        ["EXISTS", "k1", "k3", "k5"],
        ["DEL", "k2", "nope"],
        ["UNLINK", "k5"],
        ["DBSIZE"],
        ["SELECT", "99"],
        ["SELECT", "x"],
        ["FOO", "bar", "baz"],
    ],
}


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_same_replies_as_redis(name, shared_narad, redis_server) -> None:  # type: ignore[no-untyped-def]
    mine, real = shared_narad.client(), redis_server.client()
    mine.flushall()
    real.flushall()
    assert run_both(mine, real, SCRIPTS[name]) == []


def test_other_data_types_answer_unknown_command(shared_narad) -> None:  # type: ignore[no-untyped-def]
    client = shared_narad.client()
    for args in (["GET", "k"], ["SET", "k", "v"], ["LPUSH", "l", "x"], ["EVAL", "return 1", "0"]):
        with pytest.raises(Exception) as err:
            client.execute_command(*args)
        name = args[0]
        shown = "".join(f"'{a}' " for a in args[1:])
        assert str(err.value) == f"unknown command '{name}', with args beginning with: {shown}"
