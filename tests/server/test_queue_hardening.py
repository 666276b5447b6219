"""Hostile input to the Q.* commands through a real server (docs/queues.md):
every number option at and past its documented range, and receipts that are not
this queue's (forged, another queue's, a message ID, a dropped queue's)."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from pathlib import Path

import pytest
import redis

from narad.config import Config
from narad.keyspace import Keyspace
from narad.queues.queue import Settings
from narad.streams.ids import pack_id
from narad.streams.stream import Stream
from tests.server.raw import Raw
from tests.servers import NaradProcess

_names = itertools.count()

NOT_INTEGER = "value is not an integer or out of range"
INT64_MAX = (1 << 63) - 1
MAX_WAIT_MS = 365 * 24 * 3600 * 1000  # docs/queues.md: delays and dedup windows


@pytest.fixture(scope="module")
def server(debug_narad: NaradProcess) -> NaradProcess:
    return debug_narad


@pytest.fixture
def r(frozen_client: redis.Redis) -> redis.Redis:
    return frozen_client


def fresh(r: redis.Redis, *settings: object) -> bytes:
    name = f"hq{next(_names)}".encode()
    assert r.execute_command("Q.CREATE", name, "VISIBILITY", 1000, *settings) == b"OK"
    return name


def error(r: redis.Redis, *args: object) -> str:
    with pytest.raises(redis.ResponseError) as exc:
        r.execute_command(*args)
    return str(exc.value)


def state(r: redis.Redis, q: bytes) -> tuple[object, ...]:
    """What a refused command must leave as it was."""
    return (
        r.xlen(q),
        r.execute_command("Q.STATS", q),
        r.execute_command("Q.CONFIG", q, "GET"),
        r.xrange(q),
    )


# -- numbers ------------------------------------------------------------------------


class Option:
    """One number option: its range and how to send a value to it on queue `q`,
    where `receipt` is the receipt of a message of `q` in flight."""

    def __init__(self, name: str, low: int, high: int, build: Callable[..., list[object]]):
        self.name, self.low, self.high, self.build = name, low, high, build

    def __repr__(self) -> str:
        return self.name


def _setting(name: str) -> list[Option]:
    low, high = {
        "visibility": (0, 43_200_000),
        "maxreceives": (0, 1_048_575),
        "delay": (0, MAX_WAIT_MS),
        "retention": (0, INT64_MAX),
        "maxbytes": (0, INT64_MAX),
        "dedupwindow": (0, MAX_WAIT_MS),
    }[name]
    return [
        Option(f"Q.CREATE {name}", low, high, lambda q, rc, v: ["Q.CREATE", q + b"new", name, v]),
        Option(f"Q.CONFIG SET {name}", low, high, lambda q, rc, v: ["Q.CONFIG", q, "SET", name, v]),
    ]


OPTIONS = [
    *(o for n in Settings.NAMES if n != "dlq" for o in _setting(n)),
    Option("Q.PUSH DELAY", 0, MAX_WAIT_MS, lambda q, rc, v: ["Q.PUSH", q, "DELAY", v, "p"]),
    Option("Q.POP COUNT", 1, 10_000, lambda q, rc, v: ["Q.POP", q, "COUNT", v]),
    Option("Q.POP VISIBILITY", 0, 43_200_000, lambda q, rc, v: ["Q.POP", q, "VISIBILITY", v]),
    Option("Q.NACK DELAY", 0, MAX_WAIT_MS, lambda q, rc, v: ["Q.NACK", q, rc, "DELAY", v]),
    Option("Q.TOUCH ms", 0, 43_200_000, lambda q, rc, v: ["Q.TOUCH", q, rc, v]),
    Option("Q.SEEK TIME", 0, INT64_MAX, lambda q, rc, v: ["Q.SEEK", q, "TIME", v]),
    Option("Q.REDRIVE COUNT", 1, INT64_MAX, lambda q, rc, v: ["Q.REDRIVE", q, "TO", q, "COUNT", v]),
    Option("Q.CONSUME PREFETCH", 1, 10_000, lambda q, rc, v: ["Q.CONSUME", q, "PREFETCH", v]),
    Option(
        "Q.CONSUME VISIBILITY", 0, 43_200_000, lambda q, rc, v: ["Q.CONSUME", q, "VISIBILITY", v]
    ),
]


def expected(option: Option, value: object) -> str | None:
    """The error Redis's rules give for `value` (None: accepted)."""
    if not isinstance(value, int) or not -(1 << 63) <= value <= INT64_MAX:
        return NOT_INTEGER
    if option.low <= value <= option.high:
        return None
    return f"value is out of range, value must between {option.low} and {option.high}"


def values(option: Option) -> list[object]:
    return [
        option.low,
        option.high,
        option.low - 1,
        option.high + 1,
        -1,
        1 << 63,
        1 << 64,
        -(1 << 63) - 1,
        "x",
        "1.5",
        "",
        " 1",
        "01",
    ]


CASES = [(o, v) for o in OPTIONS for v in values(o)]


@pytest.mark.parametrize(("option", "value"), CASES, ids=[f"{o}={v!r}" for o, v in CASES])
def test_number_option_bounds(
    server: NaradProcess, r: redis.Redis, option: Option, value: object
) -> None:
    q = fresh(r)
    r.execute_command("Q.PUSH", q, "a", "b")
    [m] = r.execute_command("Q.POP", q)
    before = state(r, q)
    # A command of its own connection: Q.CONSUME switches a connection to push mode.
    client = server.client(protocol=3)
    try:
        args = option.build(q, m[b"receipt"], value)
        want = expected(option, value)
        if want is None:
            assert client.execute_command(*args) is not None
        else:
            assert error(client, *args) == want
            assert state(r, q) == before  # nothing appended, nothing changed
            assert r.exists(q + b"new") == 0
    finally:
        client.close()


def test_pop_block_bounds(r: redis.Redis) -> None:
    q = fresh(r)
    r.execute_command("Q.PUSH", q, "a")
    before = state(r, q)
    # As Redis: past a signed 64-bit integer, or an end (now + ms) past one.
    assert error(r, "Q.POP", q, "BLOCK", INT64_MAX) == "timeout is out of range"
    assert error(r, "Q.POP", q, "BLOCK", 1 << 63) == "timeout is not an integer or out of range"
    assert error(r, "Q.POP", q, "BLOCK", 1 << 64) == "timeout is not an integer or out of range"
    assert error(r, "Q.POP", q, "BLOCK", "x") == "timeout is not an integer or out of range"
    assert error(r, "Q.POP", q, "BLOCK", -1) == "timeout is negative"
    assert state(r, q) == before
    [m] = r.execute_command("Q.POP", q, "BLOCK", 1 << 62)  # accepted: a message is visible
    assert m[b"payload"] == b"a"


def test_the_longest_delays_hold_their_messages_back(r: redis.Redis) -> None:
    """Each delay at its maximum is a delay: the message stays invisible until then
    (once, 2^53 ms overflowed the packed due time and was delivered at once)."""
    q = fresh(r, "MAXRECEIVES", 5)
    r.execute_command("Q.PUSH", q, "DELAY", MAX_WAIT_MS, "pushed")
    slow = fresh(r, "DELAY", MAX_WAIT_MS)
    r.execute_command("Q.PUSH", slow, "queue-delayed")
    r.execute_command("Q.PUSH", q, "nacked")
    [m] = r.execute_command("Q.POP", q)
    assert r.execute_command("Q.NACK", q, m[b"receipt"], "DELAY", MAX_WAIT_MS) == b"OK"
    assert r.execute_command("Q.POP", q) == []
    assert r.execute_command("Q.POP", slow) == []
    assert r.execute_command("Q.STATS", q)[b"delayed"] == 2
    r.execute_command("DEBUG", "CLOCK", "ADVANCE", MAX_WAIT_MS - 1)
    assert r.execute_command("Q.POP", q) == [] and r.execute_command("Q.POP", slow) == []
    r.execute_command("DEBUG", "CLOCK", "ADVANCE", 1)
    got = r.execute_command("Q.POP", q, "COUNT", 10)
    assert sorted(m[b"payload"] for m in got) == [b"nacked", b"pushed"]
    assert [m[b"payload"] for m in r.execute_command("Q.POP", slow)] == [b"queue-delayed"]


def test_the_longest_dedup_window_answers_the_first_id(r: redis.Redis) -> None:
    q = fresh(r, "DEDUPWINDOW", MAX_WAIT_MS)
    first = r.execute_command("Q.PUSH", q, "DEDUP", "k", "one")
    assert r.execute_command("Q.PUSH", q, "DEDUP", "k", "two") == first
    assert [sid for sid, _ in r.xrange(q)] == [first]
    r.execute_command("DEBUG", "CLOCK", "ADVANCE", MAX_WAIT_MS)
    assert r.execute_command("Q.PUSH", q, "DEDUP", "k", "three") != first


def test_debug_clock_stays_where_deadlines_fit(r: redis.Redis) -> None:
    limit = (1 << 44) - 1 - MAX_WAIT_MS
    assert error(r, "DEBUG", "CLOCK", "FREEZE", limit + 1) == (
        f"value is out of range, value must between 0 and {limit}"
    )
    now = r.execute_command("DEBUG", "CLOCK")
    assert error(r, "DEBUG", "CLOCK", "ADVANCE", limit - now + 1) == (
        f"the clock cannot pass {limit}"
    )
    assert r.execute_command("DEBUG", "CLOCK") == now


# -- receipts -----------------------------------------------------------------------


def invalid(raw: bytes, q: bytes) -> str:
    return f"invalid receipt '{raw.decode()}': not a receipt of queue '{q.decode()}'"


def test_a_receipt_belongs_to_its_queue(r: redis.Redis) -> None:
    orders, emails = fresh(r), fresh(r)
    r.execute_command("Q.PUSH", orders, "o")
    r.execute_command("Q.PUSH", emails, "e")
    [o] = r.execute_command("Q.POP", orders)
    [e] = r.execute_command("Q.POP", emails)
    assert o[b"receipt"] != e[b"receipt"]  # the same offset and delivery in each
    before = state(r, emails)
    for command in (
        ["Q.ACK", emails, o[b"receipt"]],
        ["Q.ACK", emails, e[b"receipt"], o[b"receipt"]],  # all or nothing
        ["Q.NACK", emails, o[b"receipt"]],
        ["Q.TOUCH", emails, o[b"receipt"], 5000],
    ):
        assert error(r, *command) == invalid(o[b"receipt"], emails)
    assert state(r, emails) == before
    assert r.execute_command("Q.ACK", emails, e[b"receipt"]) == 1
    assert r.execute_command("Q.ACK", orders, o[b"receipt"]) == 1


@pytest.mark.parametrize(
    "make",
    [
        lambda m: m[b"id"],  # a message ID
        lambda m: m[b"receipt"].rsplit(b"-", 1)[0],  # the old, unsigned form
        lambda m: m[b"receipt"][:-1] + (b"A" if m[b"receipt"][-1:] != b"A" else b"B"),  # forged
        lambda m: b"1" + m[b"receipt"],  # another offset under the same MAC
        lambda m: m[b"receipt"] + b"-",
        lambda m: b"",
        lambda m: b"\xff\xfe-1-AAAAAAAAAAA",
    ],
    ids=["message-id", "unsigned", "forged-mac", "other-offset", "trailing", "empty", "binary"],
)
def test_what_is_not_a_receipt_is_refused(r: redis.Redis, make: Callable[..., bytes]) -> None:
    q = fresh(r)
    r.execute_command("Q.PUSH", q, "m")
    [m] = r.execute_command("Q.POP", q)
    bad = make(m)
    before = state(r, q)
    text = error(r, "Q.ACK", q, m[b"receipt"], bad)
    assert text.startswith("invalid receipt '") and text.endswith(f"of queue '{q.decode()}'")
    assert error(r, "Q.NACK", q, bad).startswith("invalid receipt")
    assert error(r, "Q.TOUCH", q, bad, 10).startswith("invalid receipt")
    assert state(r, q) == before  # the good receipt in the call was not acked either
    assert r.execute_command("Q.ACK", q, m[b"receipt"]) == 1


def test_a_recreated_queue_refuses_the_old_queues_receipts(r: redis.Redis) -> None:
    q = fresh(r)
    r.execute_command("Q.PUSH", q, "m")
    [old] = r.execute_command("Q.POP", q)
    assert r.execute_command("Q.DROP", q) == 1
    assert r.execute_command("Q.CREATE", q, "VISIBILITY", 1000) == b"OK"
    r.execute_command("Q.PUSH", q, "m")
    [new] = r.execute_command("Q.POP", q)  # the same offset and delivery number
    assert new[b"receipt"] != old[b"receipt"]
    assert error(r, "Q.ACK", q, old[b"receipt"]) == invalid(old[b"receipt"], q)
    assert r.execute_command("Q.STATS", q)[b"in_flight"] == 1
    assert r.execute_command("Q.ACK", q, new[b"receipt"]) == 1


def test_push_mode_acks_check_the_receipt(server: NaradProcess, r: redis.Redis) -> None:
    q, other = fresh(r), fresh(r)
    r.execute_command("Q.PUSH", other, "x")
    [foreign] = r.execute_command("Q.POP", other)
    r.execute_command("Q.PUSH", q, "1")
    with Raw(server.port) as raw:
        assert raw.call("Q.CONSUME", q, "PREFETCH", 1) == b"OK"
        frame = raw.read()
        assert frame[0] == b"message" and frame[1] == q
        reply = raw.call("Q.ACK", q, foreign[b"receipt"])
        assert reply == ("error", "ERR " + invalid(foreign[b"receipt"], q))
        assert r.execute_command("Q.STATS", q)[b"in_flight"] == 1


def test_receipts_survive_a_restart(narad: NaradProcess) -> None:
    r = narad.client(protocol=3)
    r.execute_command("Q.CREATE", "q")
    r.execute_command("Q.PUSH", "q", "m")
    [m] = r.execute_command("Q.POP", "q", "VISIBILITY", 600_000)
    r.close()
    narad.kill()
    narad.start()
    r = narad.client(protocol=3)
    assert r.execute_command("Q.TOUCH", "q", m[b"receipt"], 600_000) == b"OK"
    assert r.execute_command("Q.ACK", "q", m[b"receipt"]) == 1
    r.close()


def _unsigned_queue(data: Path, payload: bytes) -> tuple[Keyspace, Stream]:
    """A store in `data` with queue `q` made as older versions made it (a `q.create`
    op without a secret) holding one message; the caller closes the store."""
    store = Keyspace(Config.load(None, [("dir", str(data))]))
    store.open()
    stream = store.create_stream(0, b"q")
    stream.log_op(["q.create", Settings().to_list()])
    stream.add(1 << 64, [b"payload", payload])
    return store, stream


def test_a_queue_from_before_signed_receipts_opens_and_gets_a_secret(tmp_path: Path) -> None:
    """A data dir whose queue was created without a secret (the `q.create` op of
    older versions): it opens, hands out signed receipts, and keeps its new secret
    across restarts (it was logged, not made up again on each open)."""
    _unsigned_queue(tmp_path / "old" / "data", b"before")[0].close()

    server = NaradProcess(tmp_path / "old")
    server.start()
    try:
        r = server.client(protocol=3)
        [m] = r.execute_command("Q.POP", "q", "VISIBILITY", 600_000)
        assert m[b"payload"] == b"before"
        assert error(r, "Q.ACK", "q", b"0-1") == invalid(b"0-1", b"q")
        r.close()
        server.kill()
        server.start()
        r = server.client(protocol=3)
        assert r.execute_command("Q.ACK", "q", m[b"receipt"]) == 1
        r.close()
    finally:
        server.stop()


def test_numbers_past_their_fields_in_an_older_data_dir(tmp_path: Path) -> None:
    """Ops written before the bounds (a due time past 44 bits, an expiry past its
    field, the 2^40th delivery) open and mean what they said: the message stays
    delayed, the DEDUP key answers its own ID, the receipt of that delivery acks."""
    import time

    now = time.time_ns() // 1_000_000
    data = tmp_path / "old" / "data"
    store = Keyspace(Config.load(None, [("dir", str(data))]))
    store.open()
    stream = store.create_stream(0, b"q")
    stream.log_op(["q.create", Settings().to_list()])
    ids = [(now << 64) + i for i in range(3)]
    for sid in ids:
        stream.add(sid, [b"payload", b"%d" % (sid & 0xFF)])
    stream.log_op(["q.delay", now + (1 << 53), [0]])  # Q.PUSH q DELAY 9007199254740992
    stream.log_op(["q.dedup", b"k", pack_id(ids[1]), now + 26388279066624])
    stream.log_op(["q.deliver", (1 << 40) - 1, now + 600_000, now, 2, [1]])
    store.close()

    server = NaradProcess(tmp_path / "old")
    server.start()
    try:
        r = server.client(protocol=3)
        assert r.execute_command("Q.STATS", "q")[b"delayed"] == 1
        [m] = r.execute_command("Q.POP", "q", "COUNT", 10)  # the 2^40th delivery
        assert m[b"payload"] == b"2"
        assert r.execute_command("Q.ACK", "q", m[b"receipt"]) == 1
        assert r.execute_command("Q.PUSH", "q", "DEDUP", "k", "again") == b"%d-1" % now
        assert r.xlen("q") == 3
        r.close()
    finally:
        server.stop()


def test_the_secret_and_counters_survive_a_snapshot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Compaction writes the queue's state as one snapshot op; the receipt secret and
    the schema_rejected count are part of it."""
    from narad.streams import stream as stream_module

    config = Config.load(None, [("dir", str(tmp_path / "data"))])
    store = Keyspace(config)
    store.open()
    stream = store.create_stream(0, b"q")
    stream.log_op(["q.create", Settings().to_list(), b"s" * 16])
    stream.log_op(["q.rejected", 3])
    monkeypatch.setattr(stream_module, "STATE_COMPACT_BYTES", 0)
    store.maintain()
    assert stream.state.start_offset == stream.state.next_offset - 1  # one op: the snapshot
    store.close()
    store = Keyspace(config)
    store.open()
    queue = store.get(0, b"q").queue  # type: ignore[union-attr]
    assert queue is not None and (queue.secret, queue.schema_rejected) == (b"s" * 16, 3)
    store.close()


def test_a_snapshot_from_before_signed_receipts_opens(tmp_path: Path) -> None:
    """An older snapshot holds no secret and three counters: the queue opens with
    its counts, gets a secret and hands out receipts that ack."""
    store, stream = _unsigned_queue(tmp_path / "old" / "data", b"m")
    snap = stream.snapshot_op()
    queue = snap[7][:7]  # what older versions wrote: up to the subscriptions
    queue[4] = [5, 6, 7]  # acked, dead_lettered, dropped
    stream.log_op([*snap[:7], queue])
    store.close()

    server = NaradProcess(tmp_path / "old")
    server.start()
    try:
        r = server.client(protocol=3)
        s = r.execute_command("Q.STATS", "q")
        assert (s[b"acked"], s[b"dead_lettered"], s[b"dropped"], s[b"schema_rejected"]) == (
            5, 6, 7, 0,
        )  # fmt: skip
        [m] = r.execute_command("Q.POP", "q")
        assert r.execute_command("Q.ACK", "q", m[b"receipt"]) == 1
        r.close()
    finally:
        server.stop()
