"""The Q.* commands through a real server and redis-py: replies, errors, and the
queue contract of docs/queues.md. The server's queue clock is frozen and moved with
DEBUG CLOCK, so deadlines and delays pass without sleeping."""

from __future__ import annotations

import itertools
import socket
from pathlib import Path

import hiredis
import pytest
import redis

from tests.servers import NaradProcess, wait_until

_names = itertools.count()


@pytest.fixture(scope="module")
def server(debug_narad: NaradProcess) -> NaradProcess:
    return debug_narad


@pytest.fixture
def r(frozen_client: redis.Redis) -> redis.Redis:
    return frozen_client


@pytest.fixture
def q(r: redis.Redis) -> bytes:
    """A fresh queue with a 1 s visibility timeout."""
    name = f"q{next(_names)}".encode()
    assert r.execute_command("Q.CREATE", name, "VISIBILITY", 1000) == b"OK"
    return name


def advance(r: redis.Redis, ms: int) -> None:
    r.execute_command("DEBUG", "CLOCK", "ADVANCE", ms)


def pop(r: redis.Redis, q: bytes, *args: object) -> list[dict[bytes, object]]:
    return r.execute_command("Q.POP", q, *args)  # type: ignore[no-any-return]


def stats(r: redis.Redis, q: bytes) -> dict[bytes, object]:
    return r.execute_command("Q.STATS", q)  # type: ignore[no-any-return]


def error(r: redis.Redis, *args: object) -> str:
    with pytest.raises(redis.ResponseError) as exc:
        r.execute_command(*args)
    return str(exc.value)


# -- create, config, list, drop --------------------------------------------------------


def test_create_is_idempotent_and_names_differences(r: redis.Redis, q: bytes) -> None:
    assert r.execute_command("Q.CREATE", q, "VISIBILITY", 1000) == b"OK"
    text = error(r, "Q.CREATE", q, "VISIBILITY", 2000, "MAXRECEIVES", 3)
    assert "exists with other settings" in text
    assert "visibility is 1000 (asked 2000)" in text
    assert "maxreceives is 0 (asked 3)" in text
    assert r.type(q) == b"stream"


def test_create_errors_change_nothing(r: redis.Redis) -> None:
    assert error(r, "Q.CREATE", "nq", "COLOR", "red") == "unknown queue setting 'COLOR'"
    assert error(r, "Q.CREATE", "nq", "VISIBILITY", "x") == (
        "value is not an integer or out of range"
    )
    assert "value is out of range, value must between 0 and 43200000" in error(
        r, "Q.CREATE", "nq", "VISIBILITY", 43200001
    )
    assert error(r, "Q.CREATE", "nq", "DLQ", "nowhere") == "NOQUEUE no such queue 'nowhere'"
    assert error(r, "Q.CREATE", "nq", "VISIBILITY") == "syntax error"
    assert error(r, "Q.CREATE") == "wrong number of arguments for 'q.create' command"
    assert r.exists("nq") == 0


def test_config_get_set(r: redis.Redis, q: bytes) -> None:
    config = r.execute_command("Q.CONFIG", q, "GET")
    assert config[b"visibility"] == 1000
    assert config[b"dedupwindow"] == 300000
    assert r.execute_command("Q.CONFIG", q, "SET", "visibility", 5000, "delay", 7) == b"OK"
    assert r.execute_command("Q.CONFIG", q, "GET", "visibility") == {b"visibility": 5000}
    assert r.execute_command("Q.CONFIG", q, "GET", "delay") == {b"delay": 7}
    assert error(r, "Q.CONFIG", q, "SET", "visibility", -1).startswith("value is out of range")
    assert error(r, "Q.CONFIG", "missing", "GET").startswith("NOQUEUE no such queue")
    assert error(r, "Q.CONFIG", q, "FROB") == "syntax error"


def test_list_and_drop(r: redis.Redis) -> None:
    r.execute_command("Q.CREATE", "list-a")
    r.execute_command("Q.CREATE", "list-b")
    r.xadd("list-plain", {"f": "v"})
    listed = r.execute_command("Q.LIST", "MATCH", "list-*")
    assert listed == [b"list-a", b"list-b"]
    assert r.execute_command("Q.DROP", "list-a") == 1
    assert r.execute_command("Q.DROP", "list-a") == 0
    assert r.execute_command("Q.DROP", "list-plain") == 0
    assert r.execute_command("Q.LIST", "MATCH", "list-*") == [b"list-b"]
    assert r.exists("list-a") == 0


# -- push, pop, ack -------------------------------------------------------------------------


def test_push_pop_ack_shapes(r: redis.Redis, q: bytes) -> None:
    one = r.execute_command("Q.PUSH", q, "hello")
    ids = r.execute_command("Q.PUSH", q, "a", "b")
    assert isinstance(one, bytes) and len(ids) == 2
    messages = pop(r, q, "COUNT", 10)
    assert [m[b"payload"] for m in messages] == [b"hello", b"a", b"b"]
    first = messages[0]
    assert list(first) == [b"id", b"receipt", b"payload", b"receives", b"pushed_at"]
    assert first[b"id"] == one and first[b"receives"] == 1
    assert first[b"pushed_at"] == int(one.split(b"-")[0])
    assert pop(r, q) == []
    receipts = [m[b"receipt"] for m in messages]
    assert r.execute_command("Q.ACK", q, *receipts) == 3
    assert r.execute_command("Q.ACK", q, *receipts) == 0  # acked already
    s = stats(r, q)
    assert (s[b"visible"], s[b"in_flight"], s[b"acked"], s[b"pushed"]) == (0, 0, 3, 3)
    assert r.xlen(q) == 3  # the log keeps them: acked is not deleted
    assert [e[1][b"payload"] for e in r.xrange(q)] == [b"hello", b"a", b"b"]


def test_resp2_messages_are_flat_arrays(server: NaradProcess, q: bytes) -> None:
    r2 = server.client(protocol=2)
    r2.execute_command("Q.PUSH", q, "x")
    [message] = r2.execute_command("Q.POP", q)
    assert message[0::2] == [b"id", b"receipt", b"payload", b"receives", b"pushed_at"]
    assert message[5] == b"x" and message[7] == 1


def test_entries_with_other_fields_or_huge_ids(server: NaradProcess, q: bytes) -> None:
    """A queue is a stream: XADD may add entries with other fields, or IDs whose
    milliseconds pass 2^63 - 1 (pushed_at is then a big number, or a bulk string
    in RESP2)."""
    r3, r2 = server.client(protocol=3), server.client(protocol=2)
    r3.execute_command("XADD", q, "5-1", "k", "v", "payload", "p")
    r3.execute_command("XADD", q, "9223372036854775808-0", "payload", "big")
    first, second = r3.execute_command("Q.POP", q, "COUNT", 2)
    assert list(first) == [b"id", b"receipt", b"payload", b"receives", b"pushed_at", b"k"]
    assert (first[b"payload"], first[b"k"], first[b"pushed_at"]) == (b"p", b"v", 5)
    assert second[b"pushed_at"] == b"9223372036854775808"  # redis-py: a big number's digits
    r2.execute_command("Q.NACK", q, second[b"receipt"])
    [again] = r2.execute_command("Q.POP", q)
    assert again[5] == b"big" and again[9] == b"9223372036854775808"


def test_errors(r: redis.Redis, q: bytes) -> None:
    assert error(r, "Q.PUSH", "missing", "x") == "NOQUEUE no such queue 'missing'"
    assert error(r, "Q.POP", "missing") == "NOQUEUE no such queue 'missing'"
    assert error(r, "Q.POP", q, "COUNT", 0) == (
        "value is out of range, value must between 1 and 10000"
    )
    assert error(r, "Q.POP", q, "COUNT") == "syntax error"
    assert error(r, "Q.POP", q, "WHAT", 1) == "syntax error"
    assert error(r, "Q.POP", q, "BLOCK", -1) == "timeout is negative"
    assert error(r, "Q.ACK", q, "nonsense") == (
        f"invalid receipt 'nonsense': not a receipt of queue '{q.decode()}'"
    )
    assert error(r, "Q.ACK", q) == "wrong number of arguments for 'q.ack' command"
    assert error(r, "Q.TOUCH", q, "0-1", "x") == "value is not an integer or out of range"
    assert error(r, "Q.PUSH", q, "DEDUP", "k", "a", "b") == "DEDUP takes exactly one payload"
    assert error(r, "Q.PUSH", q, "DELAY", "-5", "a") == (
        "value is out of range, value must between 0 and 31536000000"
    )
    assert r.xlen(q) == 0  # nothing a refused command carried was appended
    assert error(r, "Q.NOSUCH", q).startswith("unknown command 'Q.NOSUCH'")


def test_expired_delivery_comes_back_and_old_receipt_is_stale(r: redis.Redis, q: bytes) -> None:
    r.execute_command("Q.PUSH", q, "m")
    [first] = pop(r, q)
    assert pop(r, q) == []
    advance(r, 999)
    assert pop(r, q) == []
    advance(r, 1)
    [second] = pop(r, q)
    assert second[b"id"] == first[b"id"] and second[b"receives"] == 2
    assert second[b"receipt"] != first[b"receipt"]
    text = error(r, "Q.ACK", q, first[b"receipt"])
    assert text.startswith(f"STALE receipt {first[b'receipt'].decode()}: ")
    assert error(r, "Q.NACK", q, first[b"receipt"]).startswith("STALE receipt")
    assert error(r, "Q.TOUCH", q, first[b"receipt"], 10).startswith("STALE receipt")
    assert r.execute_command("Q.ACK", q, second[b"receipt"]) == 1


def test_stale_receipt_refuses_the_whole_ack(r: redis.Redis, q: bytes) -> None:
    r.execute_command("Q.PUSH", q, "a", "b")
    _, b = pop(r, q, "COUNT", 2)
    advance(r, 1000)
    a2, b2 = pop(r, q, "COUNT", 2)
    with pytest.raises(redis.ResponseError, match=r"^STALE receipt"):
        r.execute_command("Q.ACK", q, a2[b"receipt"], b[b"receipt"])
    assert stats(r, q)[b"in_flight"] == 2  # nothing acked from that call
    assert r.execute_command("Q.ACK", q, a2[b"receipt"], b2[b"receipt"]) == 2


def test_ack_after_expiry_with_the_latest_receipt(r: redis.Redis, q: bytes) -> None:
    r.execute_command("Q.PUSH", q, "m")
    [m] = pop(r, q)
    advance(r, 5000)
    assert stats(r, q)[b"visible"] == 1
    assert r.execute_command("Q.ACK", q, m[b"receipt"]) == 1
    assert pop(r, q) == []


def test_nack_touch_and_pop_visibility(r: redis.Redis, q: bytes) -> None:
    r.execute_command("Q.PUSH", q, "m")
    [m] = pop(r, q, "VISIBILITY", 100)
    assert r.execute_command("Q.TOUCH", q, m[b"receipt"], 5000) == b"OK"
    advance(r, 4999)
    assert pop(r, q) == []
    assert r.execute_command("Q.NACK", q, m[b"receipt"]) == b"OK"
    [again] = pop(r, q)
    assert again[b"receives"] == 2
    assert r.execute_command("Q.NACK", q, again[b"receipt"], "DELAY", 300) == b"OK"
    assert pop(r, q) == []
    assert stats(r, q)[b"delayed"] == 1
    advance(r, 300)
    [third] = pop(r, q)
    assert third[b"receives"] == 3
    assert error(r, "Q.NACK", q, third[b"receipt"], "LATER", 1) == "syntax error"


def test_delay_on_push_and_default_delay(r: redis.Redis, q: bytes) -> None:
    r.execute_command("Q.PUSH", q, "DELAY", 500, "late")
    r.execute_command("Q.PUSH", q, "now")
    assert [m[b"payload"] for m in pop(r, q, "COUNT", 5)] == [b"now"]
    assert stats(r, q)[b"delayed"] == 1
    advance(r, 500)
    assert [m[b"payload"] for m in pop(r, q, "COUNT", 5)] == [b"late"]
    r.execute_command("Q.CONFIG", q, "SET", "delay", 200)
    r.execute_command("Q.PUSH", q, "default-delayed")
    assert pop(r, q) == []
    advance(r, 200)
    assert [m[b"payload"] for m in pop(r, q)] == [b"default-delayed"]
    # a payload that reads like an option is still a payload when nothing follows it
    assert r.execute_command("Q.PUSH", q, "DELAY", 5)  # two payloads: "DELAY" and "5"


def test_dedup_window(r: redis.Redis, q: bytes) -> None:
    r.execute_command("Q.CONFIG", q, "SET", "dedupwindow", 1000)
    first = r.execute_command("Q.PUSH", q, "DEDUP", "k1", "a")
    assert r.execute_command("Q.PUSH", q, "DEDUP", "k1", "other") == first
    assert r.xlen(q) == 1
    advance(r, 1000)
    later = r.execute_command("Q.PUSH", q, "DEDUP", "k1", "b")
    assert later != first and r.xlen(q) == 2


def test_order_oldest_first_with_redeliveries(r: redis.Redis, q: bytes) -> None:
    r.execute_command("Q.PUSH", q, "a", "b", "c")
    a, b = pop(r, q, "COUNT", 2)
    r.execute_command("Q.NACK", q, b[b"receipt"])
    r.execute_command("Q.NACK", q, a[b"receipt"])
    r.execute_command("Q.PUSH", q, "d")
    assert [m[b"payload"] for m in pop(r, q, "COUNT", 10)] == [b"a", b"b", b"c", b"d"]


# -- dead letters ----------------------------------------------------------------------------


def test_max_receives_moves_to_dlq_and_redrive_returns(r: redis.Redis) -> None:
    r.execute_command("Q.CREATE", "dl-dead")
    r.execute_command("Q.CREATE", "dl-src", "VISIBILITY", 100, "MAXRECEIVES", 2, "DLQ", "dl-dead")
    sid = r.execute_command("Q.PUSH", "dl-src", "poison")
    for _ in range(2):
        assert len(pop(r, b"dl-src")) == 1
        advance(r, 100)
    assert pop(r, b"dl-src") == []
    s = stats(r, b"dl-src")
    assert (s[b"dead_lettered"], s[b"visible"], s[b"in_flight"]) == (1, 0, 0)
    [dead] = pop(r, b"dl-dead", "VISIBILITY", 100)
    assert dead[b"payload"] == b"poison"
    assert dead[b"origin"] == b"dl-src" and dead[b"origin_id"] == sid
    assert dead[b"receives"] == 1 and dead[b"origin_receives"] == b"2"
    assert int(dead[b"first_received_at"]) > 0
    advance(r, 100)
    assert r.execute_command("Q.REDRIVE", "dl-dead") == 1
    [back] = pop(r, b"dl-src")
    assert back[b"payload"] == b"poison" and b"origin" not in back
    assert stats(r, b"dl-dead")[b"visible"] == 0


def test_nack_at_max_receives_dead_letters_and_without_dlq_drops(r: redis.Redis) -> None:
    r.execute_command("Q.CREATE", "drop-q", "MAXRECEIVES", 1)
    r.execute_command("Q.PUSH", "drop-q", "x")
    [m] = pop(r, b"drop-q")
    r.execute_command("Q.NACK", "drop-q", m[b"receipt"])
    s = stats(r, b"drop-q")
    assert (s[b"dropped"], s[b"visible"], s[b"dead_lettered"]) == (1, 0, 0)


def test_redrive_to_and_count(r: redis.Redis) -> None:
    r.execute_command("Q.CREATE", "rd-dead")
    r.execute_command("Q.CREATE", "rd-other")
    r.execute_command("Q.PUSH", "rd-dead", "1", "2", "3")
    assert r.execute_command("Q.REDRIVE", "rd-dead", "TO", "rd-other", "COUNT", 2) == 2
    assert [m[b"payload"] for m in pop(r, b"rd-other", "COUNT", 5)] == [b"1", b"2"]
    text = error(r, "Q.REDRIVE", "rd-dead")  # "3" names no origin queue
    assert "not a queue now" in text
    assert stats(r, b"rd-dead")[b"visible"] == 1
    assert error(r, "Q.REDRIVE", "rd-dead", "TO", "missing") == "NOQUEUE no such queue 'missing'"


# -- replay and fan-out -----------------------------------------------------------------------


def test_seek_replays_acked_and_keeps_in_flight(r: redis.Redis, q: bytes) -> None:
    ids = r.execute_command("Q.PUSH", q, "a", "b", "c")
    a, b = pop(r, q, "COUNT", 2)
    r.execute_command("Q.ACK", q, a[b"receipt"])
    assert r.execute_command("Q.SEEK", q, "EARLIEST") == b"OK"
    replay = pop(r, q, "COUNT", 10)
    assert [m[b"payload"] for m in replay] == [b"a", b"c"]  # b is still in flight
    assert r.execute_command("Q.ACK", q, b[b"receipt"]) == 1  # its receipt still works
    assert r.execute_command("Q.SEEK", q, ids[2]) == b"OK"
    assert pop(r, q) == []  # c is in flight
    r.execute_command("Q.SEEK", q, "LATEST")
    r.execute_command("Q.PUSH", q, "d")
    assert [m[b"payload"] for m in pop(r, q, "COUNT", 10)] == [b"d"]
    assert error(r, "Q.SEEK", q, "SOMEWHERE") == (
        "Invalid stream ID specified as stream command argument"
    )


def test_subscribe_copies_once_in_order(r: redis.Redis) -> None:
    r.execute_command("Q.CREATE", "fan-src")
    r.execute_command("Q.CREATE", "fan-a")
    r.execute_command("Q.CREATE", "fan-b")
    early = r.execute_command("Q.PUSH", "fan-src", "early")
    assert r.execute_command("Q.SUBSCRIBE", "fan-a", "fan-src", "FROM", "EARLIEST") == b"OK"
    assert r.execute_command("Q.SUBSCRIBE", "fan-b", "fan-a") == b"OK"  # a chain
    r.execute_command("Q.PUSH", "fan-src", "one", "two")
    wait_until(lambda: r.xlen("fan-b") == 2)
    got = pop(r, b"fan-a", "COUNT", 10)
    assert [m[b"payload"] for m in got] == [b"early", b"one", b"two"]
    assert got[0][b"source"] == b"fan-src" and got[0][b"source_id"] == early
    chained = pop(r, b"fan-b", "COUNT", 10)
    assert [m[b"payload"] for m in chained] == [b"one", b"two"]
    assert chained[0][b"source"] == b"fan-a"
    assert stats(r, b"fan-src")[b"subscribers"] == 1
    assert "cycle" in error(r, "Q.SUBSCRIBE", "fan-src", "fan-b")
    assert "cycle" in error(r, "Q.SUBSCRIBE", "fan-a", "fan-a")
    assert r.execute_command("Q.UNSUBSCRIBE", "fan-a", "fan-src") == 1
    assert r.execute_command("Q.UNSUBSCRIBE", "fan-a", "fan-src") == 0
    r.execute_command("Q.PUSH", "fan-src", "after")
    r.execute_command("Q.PUSH", "fan-a", "own")
    wait_until(lambda: r.xlen("fan-b") == 3)
    assert r.xlen("fan-a") == 4


def test_dropping_a_source_ends_its_subscriptions(r: redis.Redis) -> None:
    r.execute_command("Q.CREATE", "drop-src")
    r.execute_command("Q.CREATE", "drop-sub")
    r.execute_command("Q.SUBSCRIBE", "drop-sub", "drop-src")
    r.execute_command("Q.DROP", "drop-src", "FORCE")  # refused without: docs/queues.md
    wait_until(lambda: stats(r, b"drop-sub")[b"subscriptions"] == 0)


def test_a_dropped_subscriber_made_again_copies_nothing(r: redis.Redis) -> None:
    r.execute_command("Q.CREATE", "again-src")
    r.execute_command("Q.CREATE", "again-sub")
    r.execute_command("Q.SUBSCRIBE", "again-sub", "again-src")
    r.execute_command("Q.PUSH", "again-src", "one")
    wait_until(lambda: r.xlen("again-sub") == 1)
    r.execute_command("Q.DROP", "again-sub")
    r.execute_command("Q.CREATE", "again-sub")
    r.execute_command("Q.PUSH", "again-src", "two")
    r.execute_command("Q.SUBSCRIBE", "again-sub", "again-src")  # from the latest on
    r.execute_command("Q.PUSH", "again-src", "three")
    wait_until(lambda: r.xlen("again-sub") == 1)
    assert [e[1][b"payload"] for e in r.xrange("again-sub")] == [b"three"]
    r.execute_command("Q.UNSUBSCRIBE", "again-sub", "again-src")
    r.execute_command("Q.PUSH", "again-src", "four")
    r.execute_command("Q.PUSH", "again-sub", "own")  # a commit after the source's
    assert [e[1][b"payload"] for e in r.xrange("again-sub")] == [b"three", b"own"]


# -- blocking ----------------------------------------------------------------------------------


def test_pop_block_times_out_with_null(server: NaradProcess, q: bytes) -> None:
    client = server.client(protocol=3)
    assert client.execute_command("Q.POP", q, "BLOCK", 50) is None


def test_pop_block_is_woken_by_push_first_come_first_served(server: NaradProcess, q: bytes) -> None:
    first, second = server.client(), server.client()
    conns = []
    for client in (first, second):
        conn = client.connection_pool.get_connection()
        conn.send_command("Q.POP", q, "BLOCK", 5000)
        conns.append(conn)
        wait_until(lambda c=client: stats(c, q)[b"consumers"] >= len(conns))
    server.client().execute_command("Q.PUSH", q, "one")
    reply = conns[0].read_response()
    assert reply[0][b"payload"] == b"one"
    server.client().execute_command("Q.PUSH", q, "two")
    assert conns[1].read_response()[0][b"payload"] == b"two"


def test_pop_block_is_woken_by_expiry(server: NaradProcess, r: redis.Redis, q: bytes) -> None:
    r.execute_command("Q.PUSH", q, "m")
    [m] = pop(r, q)
    waiter = server.client().connection_pool.get_connection()
    waiter.send_command("Q.POP", q, "BLOCK", 5000)
    wait_until(lambda: stats(r, q)[b"consumers"] == 1)
    advance(r, 1000)
    reply = waiter.read_response()
    assert reply[0][b"receipt"] != m[b"receipt"] and reply[0][b"receives"] == 2


def test_pop_block_released_when_queue_dropped(server: NaradProcess, r: redis.Redis) -> None:
    r.execute_command("Q.CREATE", "gone")
    waiter = server.client().connection_pool.get_connection()
    waiter.send_command("Q.POP", "gone", "BLOCK", 5000)
    wait_until(lambda: stats(r, b"gone")[b"consumers"] == 1)
    r.execute_command("Q.DROP", "gone")
    with pytest.raises(redis.ResponseError, match="no such queue 'gone'"):
        waiter.read_response()


# -- push mode -----------------------------------------------------------------------------------


class Raw:
    """A raw socket read with hiredis: push frames arrive as hiredis parses them."""

    def __init__(self, port: int, resp3: bool) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        self.reader = hiredis.Reader()
        if resp3:
            self.call("HELLO", "3")

    def send(self, *args: object) -> None:
        parts = [str(a).encode() if not isinstance(a, bytes) else a for a in args]
        out = b"*%d\r\n" % len(parts) + b"".join(b"$%d\r\n%b\r\n" % (len(p), p) for p in parts)
        self.sock.sendall(out)

    def read(self) -> object:
        while True:
            reply = self.reader.gets()
            if reply is not False:
                return reply
            self.reader.feed(self.sock.recv(65536))

    def call(self, *args: object) -> object:
        self.send(*args)
        return self.read()


@pytest.mark.parametrize("resp3", [True, False])
def test_push_mode_prefetch_ack_and_disconnect(
    server: NaradProcess, r: redis.Redis, q: bytes, resp3: bool
) -> None:
    r.execute_command("Q.PUSH", q, "1", "2", "3")
    raw = Raw(server.port, resp3)
    assert raw.call("Q.CONSUME", q, "PREFETCH", 2) in (b"OK", "OK")
    frames = [raw.read(), raw.read()]
    for frame in frames:
        assert isinstance(frame, list) and frame[0] == b"message" and frame[1] == q
    payloads = [_field(f[2], b"payload") for f in frames]
    assert payloads == [b"1", b"2"]
    assert stats(r, q)[b"in_flight"] == 2  # no more than PREFETCH unacked
    assert raw.call("Q.ACK", q, _field(frames[0][2], b"receipt")) == 1
    third = raw.read()
    assert _field(third[2], b"payload") == b"3"  # type: ignore[index]
    pong = raw.call("PING")
    assert pong in ("PONG", b"PONG", [b"pong", b""])
    raw.sock.close()  # its in-flight messages become visible at once
    wait_until(lambda: stats(r, q)[b"visible"] == 2)
    assert [m[b"payload"] for m in pop(r, q, "COUNT", 5)] == [b"2", b"3"]


def _field(msg: object, name: bytes) -> object:
    if isinstance(msg, dict):
        return msg[name]
    assert isinstance(msg, list)
    return msg[msg.index(name) + 1]


def test_cancel_ends_push_mode(server: NaradProcess, r: redis.Redis, q: bytes) -> None:
    raw = Raw(server.port, resp3=True)
    raw.call("Q.CONSUME", q)
    assert raw.call("Q.CANCEL") == 1
    r.execute_command("Q.PUSH", q, "later")
    assert raw.call("PING") in ("PONG", b"PONG")  # no frame came before the reply
    assert stats(r, q)[b"visible"] == 1


# -- the rest -----------------------------------------------------------------------------


def test_info_counts_queues(r: redis.Redis, q: bytes) -> None:
    r.execute_command("Q.PUSH", q, "DEDUP", "info-key", "m")
    pop(r, q)
    info = r.info("narad")
    assert info["queues"] >= 1 and info["queue_clock_frozen"] == 1
    assert info["queue_tracked_messages"] >= 1 and info["queue_dedup_keys"] >= 1


def test_debug_is_refused_unless_enabled(narad: NaradProcess) -> None:
    text = error(narad.client(), "DEBUG", "CLOCK")
    assert text.startswith("DEBUG command not allowed.")


def test_state_survives_restart(tmp_path: Path) -> None:
    proc = NaradProcess(tmp_path, ["--enable-debug-command", "yes"]).start()
    try:
        r = proc.client(protocol=3)
        r.execute_command("Q.CREATE", "keep", "VISIBILITY", 600000, "DEDUPWINDOW", 600000)
        r.execute_command("Q.PUSH", "keep", "a", "b", "c")
        dedup_id = r.execute_command("Q.PUSH", "keep", "DEDUP", "key", "d")
        a, b = pop(r, b"keep", "COUNT", 2)
        r.execute_command("Q.ACK", "keep", a[b"receipt"])
        proc.restart()
        r = proc.client(protocol=3)
        assert r.execute_command("Q.PUSH", "keep", "DEDUP", "key", "again") == dedup_id
        s = stats(r, b"keep")
        assert (s[b"in_flight"], s[b"visible"], s[b"acked"]) == (1, 2, 1)
        assert r.execute_command("Q.TOUCH", "keep", b[b"receipt"], 1000) == b"OK"
        assert [m[b"payload"] for m in pop(r, b"keep", "COUNT", 5)] == [b"c", b"d"]
        assert r.execute_command("Q.CONFIG", "keep", "GET", "visibility") == {b"visibility": 600000}
    finally:
        proc.stop()


def test_push_validates_every_payload_before_appending(r: redis.Redis, q: bytes) -> None:
    schema = '{"type": "object", "required": ["n"], "properties": {"n": {"type": "integer"}}}'
    assert r.execute_command("Q.SCHEMA", "SET", q, schema) == 1
    assert isinstance(r.execute_command("Q.PUSH", q, '{"n": 1}'), bytes)
    text = error(r, "Q.PUSH", q, '{"n": 2}', '{"n": "three"}')
    assert text.startswith("SCHEMA $.n: ") and text.endswith("(version 1, payload 2 of 2)")
    assert error(r, "Q.PUSH", q, "not json").startswith("SCHEMA $")
    assert r.xlen(q) == 1  # a refused batch appends nothing, not even its valid part
    assert error(r, "Q.PUSH", q, "DEDUP", "k", "[]").startswith("SCHEMA ")
    assert r.execute_command("Q.PUSH", q, "DEDUP", "k", '{"n": 4}') != b""


def test_pop_block_is_woken_by_redrive(server: NaradProcess, r: redis.Redis) -> None:
    r.execute_command("Q.CREATE", "wake-dead")
    r.execute_command("Q.CREATE", "wake-src", "MAXRECEIVES", 1, "DLQ", "wake-dead")
    r.execute_command("Q.PUSH", "wake-src", "m")
    [m] = pop(r, b"wake-src")
    r.execute_command("Q.NACK", "wake-src", m[b"receipt"])  # dead-lettered at once
    waiter = server.client().connection_pool.get_connection()
    waiter.send_command("Q.POP", "wake-src", "BLOCK", 5000)
    wait_until(lambda: stats(r, b"wake-src")[b"consumers"] == 1)
    assert r.execute_command("Q.REDRIVE", "wake-dead") == 1
    [back] = waiter.read_response()
    assert back[b"payload"] == b"m" and back[b"receives"] == 1
