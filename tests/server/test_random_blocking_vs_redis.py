"""Random scripts of blocked readers and writers, side by side with redis-server 7.0.

Three connections take turns. A turn sends one command on a connection that is not
blocked: XREAD or XREADGROUP with BLOCK 0 (which may block), or a write that may
serve or release blocked readers, or must not: XADD, DEL, RENAME, XTRIM, XDEL,
XSETID, XGROUP CREATE / DESTROY / SETID, or a MULTI ... EXEC of adds (and a
delete). Once a turn has settled (a fourth connection sees as many blocked clients
in INFO as connections wait for a reply), every connection's state must be Redis's:
which ones are still blocked, and what each served one received (entries in
arrival order, or the error that released it).
"""

from __future__ import annotations

import select
import time
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, reject, settings
from hypothesis import strategies as st

from tests.examples import examples
from tests.server.compare import parted
from tests.server.raw import Raw
from tests.servers import NaradProcess, RedisProcess, have_redis_server

pytestmark = pytest.mark.skipif(not have_redis_server(), reason="redis-server is not installed")

CONNECTIONS = 3
key = st.sampled_from(["a", "b"])
group = st.sampled_from(["g1", "g2"])
count = st.one_of(st.just([]), st.integers(1, 2).map(lambda n: ["COUNT", str(n)]))
streams = st.sampled_from([["a"], ["b"], ["a", "b"]])

xread = st.builds(
    lambda c, ks, start: ["XREAD", *c, "BLOCK", "0", "STREAMS", *ks, *[start] * len(ks)],
    count,
    streams,
    st.sampled_from(["$", "0", "0-1"]),
)
xreadgroup = st.builds(
    lambda g, consumer, c, ks: [
        "XREADGROUP", "GROUP", g, consumer, *c, "BLOCK", "0", "STREAMS", *ks, *[">"] * len(ks)
    ],
    group,
    st.sampled_from(["c1", "c2"]),
    count,
    streams,
)  # fmt: skip
writes = st.one_of(
    st.builds(lambda k: [["XADD", k, "0-*", "f", "v"]], key),
    st.builds(lambda k: [["XADD", k, "0-*", "f", "v"]], key),
    st.builds(lambda k: [["DEL", k]], key),
    st.builds(lambda k: [["XTRIM", k, "MAXLEN", "0"]], key),
    st.builds(lambda a, b: [["RENAME", a, b]], key, key),
    st.builds(lambda k, g: [["XGROUP", "CREATE", k, g, "$", "MKSTREAM"]], key, group),
    st.builds(lambda k, g: [["XGROUP", "DESTROY", k, g]], key, group),
    st.builds(lambda k, g: [["XGROUP", "SETID", k, g, "0"]], key, group),
    st.builds(lambda k, i: [["XSETID", k, i]], key, st.sampled_from(["0-9", "5-0"])),
    st.builds(lambda k: [["XDEL", k, "0-1", "0-2"]], key),
    st.builds(
        lambda k: [["MULTI"], ["XADD", k, "0-*", "f", "x"], ["XDEL", k, "0-1", "0-2"], ["EXEC"]],
        key,
    ),
    st.builds(
        lambda ks: [["MULTI"], *[["XADD", k, "0-*", "f", "m"] for k in ks], ["EXEC"]],
        st.lists(key, min_size=1, max_size=3),
    ),
)
turn = st.tuples(
    st.integers(0, CONNECTIONS - 1),
    st.one_of(xread.map(lambda c: [c]), xreadgroup.map(lambda c: [c]), writes),
)
scripts = st.lists(turn, min_size=1, max_size=30)


class Side:
    """One server's connections and which of them wait for a reply."""

    def __init__(self, port: int) -> None:
        self.conns = [Raw(port) for _ in range(CONNECTIONS)]
        self.control = Raw(port)
        self.waiting: set[int] = set()
        assert self.control.call("FLUSHALL") == b"OK"

    def close(self) -> None:
        for raw in (*self.conns, self.control):
            raw.close()

    def send(self, index: int, commands: list[list[str]]) -> None:
        for args in commands:
            self.conns[index].send_command(*args)
        self.waiting.add(index)

    def settled(self, replies_of: dict[int, int]) -> dict[int, Any]:
        """The replies of the waiting connections that have them, once the turn has
        settled: the server's count of blocked clients is the number of our
        connections still waiting. Until then a command of the turn may be unread,
        or a reply on its way."""
        out: dict[int, Any] = {}
        deadline = time.monotonic() + 10
        while True:
            for index in sorted(self.waiting):
                raw = self.conns[index]
                if select.select([raw.sock], [], [], 0)[0]:
                    out[index] = [raw.read() for _ in range(replies_of[index])]
            self.waiting -= set(out)
            info = self.control.call("INFO", "clients")
            blocked = int(info.split(b"blocked_clients:")[1].split(b"\r\n")[0])
            if blocked == len(self.waiting):
                return out
            assert time.monotonic() < deadline, "the turn did not settle"
            time.sleep(0.001)


@pytest.fixture(scope="module")
def servers(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[NaradProcess, RedisProcess]]:
    narad = NaradProcess(tmp_path_factory.mktemp("narad"))
    redis = RedisProcess(tmp_path_factory.mktemp("redis"))
    narad.start()
    redis.start()
    yield narad, redis
    narad.stop()
    redis.stop()


@settings(
    max_examples=examples(500),
    deadline=None,
    derandomize=True,  # the same scripts on every run: a failure in CI can be run again
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(script=scripts)
def test_blocked_readers_are_served_and_released_as_in_redis(
    servers: tuple[NaradProcess, RedisProcess], script: list[tuple[int, list[list[str]]]]
) -> None:
    mine, theirs = Side(servers[0].port), Side(servers[1].port)
    replies_of: dict[int, int] = {}  # the number of replies each connection waits for
    try:
        for step, (index, commands) in enumerate(script):
            if index in mine.waiting:
                continue  # blocked: it can only wait
            replies_of[index] = len(commands)
            mine.send(index, commands)
            theirs.send(index, commands)
            ours, redis_ = mine.settled(replies_of), theirs.settled(replies_of)
            if parted(ours.get(index), redis_.get(index)):
                reject()  # the servers' states part here
            assert ours == redis_, (step, script)
    finally:
        mine.close()
        theirs.close()
