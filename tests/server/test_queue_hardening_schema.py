"""What the server appends on its own respects the target's schema (docs/queues.md
"Schemas"): fan-out copies, dead letters and Q.REDRIVE, through a real
server."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
import redis

from tests.servers import NaradProcess, wait_until

_names = itertools.count()

NEEDS_N = json.dumps({"type": "object", "required": ["n"]})


@pytest.fixture(scope="module")
def server(debug_narad: NaradProcess) -> NaradProcess:
    return debug_narad


@pytest.fixture
def r(frozen_client: redis.Redis) -> redis.Redis:
    return frozen_client


def name(kind: str) -> str:
    return f"{kind}{next(_names)}"


def create(r: redis.Redis, key: str, *settings: object) -> str:
    assert r.execute_command("Q.CREATE", key, *settings) == b"OK"
    return key


def payloads(r: redis.Redis, key: str) -> list[bytes]:
    return [fields[b"payload"] for _, fields in r.xrange(key)]


def stats(r: redis.Redis, key: str) -> dict[bytes, object]:
    return r.execute_command("Q.STATS", key)  # type: ignore[no-any-return]


def error(r: redis.Redis, *args: object) -> str:
    with pytest.raises(redis.ResponseError) as exc:
        r.execute_command(*args)
    return str(exc.value)


# -- fan-out ------------------------------------------------------------------------


def test_a_copy_the_subscriber_refuses_goes_to_its_dlq(
    server: NaradProcess, r: redis.Redis
) -> None:
    src, dlq = create(r, name("src")), create(r, name("dlq"))
    sub = create(r, name("sub"), "DLQ", dlq)
    assert r.execute_command("Q.SCHEMA", "SET", sub, NEEDS_N) == 1
    assert r.execute_command("Q.SUBSCRIBE", sub, src) == b"OK"
    r.execute_command("Q.PUSH", src, '{"n": 1}', "not json", '{"x": 1}', '{"n": 2}')
    wait_until(lambda: stats(r, sub)[b"schema_rejected"] == 2)
    assert payloads(r, sub) == [b'{"n": 1}', b'{"n": 2}']  # never the refused ones
    letters = [fields for _, fields in r.xrange(dlq)]
    assert [f[b"payload"] for f in letters] == [b"not json", b'{"x": 1}']
    source_ids = [sid for sid, _ in r.xrange(src)]
    for letter, sid in zip(letters, (source_ids[1], source_ids[2]), strict=True):
        assert letter[b"origin"] == sub.encode()
        assert letter[b"source"] == src.encode() and letter[b"source_id"] == sid
        assert letter[b"schema_error"].startswith(b"SCHEMA $")
    assert stats(r, src)[b"pushed"] == 4  # the source keeps everything
    # Later copies keep coming: the subscription moved past the refused ones.
    r.execute_command("Q.PUSH", src, '{"n": 3}')
    wait_until(lambda: len(payloads(r, sub)) == 3)
    assert stats(r, sub)[b"schema_rejected"] == 2
    assert server.log().count(f'what="fan-out copy" target={sub} ') == 1


def test_a_refused_copy_without_a_dlq_that_takes_it_is_dropped(r: redis.Redis) -> None:
    src = create(r, name("src"))
    picky_dlq = create(r, name("dlq"))
    assert r.execute_command("Q.SCHEMA", "SET", picky_dlq, NEEDS_N) == 1
    plain = create(r, name("sub"))
    picky = create(r, name("sub"), "DLQ", picky_dlq)
    for sub in (plain, picky):
        assert r.execute_command("Q.SCHEMA", "SET", sub, NEEDS_N) == 1
        assert r.execute_command("Q.SUBSCRIBE", sub, src) == b"OK"
    r.execute_command("Q.PUSH", src, "bad", '{"n": 1}')
    for sub in (plain, picky):
        wait_until(lambda sub=sub: len(payloads(r, sub)) == 1)  # type: ignore[misc]
        assert payloads(r, sub) == [b'{"n": 1}']
        assert stats(r, sub)[b"schema_rejected"] == 1
    assert r.xlen(picky_dlq) == 0  # its schema refuses the letter too


def test_copies_stay_exactly_once_across_kill9(tmp_path: Path) -> None:
    server = NaradProcess(tmp_path / "n", ["--fsync", "always"])
    server.start()
    try:
        r = server.client(protocol=3)
        create(r, "src")
        create(r, "dlq")
        create(r, "sub", "DLQ", "dlq")
        r.execute_command("Q.SCHEMA", "SET", "sub", NEEDS_N)
        r.execute_command("Q.SUBSCRIBE", "sub", "src")
        r.execute_command("Q.PUSH", "src", '{"n": 1}', "bad", "worse")
        wait_until(lambda: stats(r, "sub")[b"schema_rejected"] == 2)
        r.close()
        server.kill()
        server.start()
        r = server.client(protocol=3)
        r.execute_command("Q.PUSH", "src", '{"n": 2}', "bad again")
        wait_until(lambda: stats(r, "sub")[b"schema_rejected"] == 3)
        assert payloads(r, "sub") == [b'{"n": 1}', b'{"n": 2}']
        assert payloads(r, "dlq") == [b"bad", b"worse", b"bad again"]
        r.close()
    finally:
        server.stop()


# -- dead letters -------------------------------------------------------------------


def test_a_dead_letter_the_dlq_refuses_is_dropped(server: NaradProcess, r: redis.Redis) -> None:
    dlq = create(r, name("dlq"))
    assert r.execute_command("Q.SCHEMA", "SET", dlq, NEEDS_N) == 1
    q = create(r, name("q"), "VISIBILITY", 1000, "MAXRECEIVES", 1, "DLQ", dlq)
    r.execute_command("Q.PUSH", q, '{"n": 1}', "bad")
    assert len(r.execute_command("Q.POP", q, "COUNT", 2)) == 2
    r.execute_command("DEBUG", "CLOCK", "ADVANCE", 1000)
    r.execute_command("Q.POP", q)  # after the timer: both dead now
    assert payloads(r, dlq) == [b'{"n": 1}']
    s = stats(r, q)
    assert (s[b"dead_lettered"], s[b"dropped"], s[b"in_flight"], s[b"visible"]) == (1, 1, 0, 0)
    assert server.log().count(f'what="dead letter" target={dlq} from={q} ') == 1


# -- redrive ------------------------------------------------------------------------


def _dead_letters(r: redis.Redis, *messages: str) -> tuple[str, str]:
    """A queue and its DLQ holding `messages` as dead letters, in order."""
    dlq = create(r, name("dlq"))
    q = create(r, name("q"), "VISIBILITY", 1000, "MAXRECEIVES", 1, "DLQ", dlq)
    r.execute_command("Q.PUSH", q, *messages)
    r.execute_command("Q.POP", q, "COUNT", len(messages))
    r.execute_command("DEBUG", "CLOCK", "ADVANCE", 1000)
    r.execute_command("Q.POP", q)
    assert r.xlen(dlq) == len(messages)
    return q, dlq


def test_redrive_to_stops_before_a_message_the_target_refuses(r: redis.Redis) -> None:
    _, dlq = _dead_letters(r, '{"n": 1}', "bad", '{"n": 2}')
    target = create(r, name("t"))
    assert r.execute_command("Q.SCHEMA", "SET", target, NEEDS_N) == 1
    assert r.execute_command("Q.REDRIVE", dlq, "TO", target) == 1
    assert payloads(r, target) == [b'{"n": 1}']
    before = (stats(r, dlq), r.xlen(target))
    text = error(r, "Q.REDRIVE", dlq, "TO", target)
    assert text.startswith("SCHEMA $") and text.endswith("(version 1)")
    assert (stats(r, dlq), r.xlen(target)) == before  # nothing moved
    assert stats(r, dlq)[b"visible"] == 2


def test_redrive_to_the_origin_checks_its_schema(r: redis.Redis) -> None:
    q, dlq = _dead_letters(r, "bad", '{"n": 1}')
    assert r.execute_command("Q.SCHEMA", "SET", q, NEEDS_N) == 1  # set after the push
    length = r.xlen(q)
    assert error(r, "Q.REDRIVE", dlq).startswith("SCHEMA $")
    assert r.xlen(q) == length and stats(r, dlq)[b"visible"] == 2


def test_a_dlq_that_feeds_the_subscriber_does_not_take_its_refused_copies(
    r: redis.Redis,
) -> None:
    """The source is the subscriber's DLQ: a refused copy sent there would be copied
    back and refused again without end, so it is dropped."""
    src = create(r, name("src"))
    sub = create(r, name("sub"), "DLQ", src)
    assert r.execute_command("Q.SCHEMA", "SET", sub, NEEDS_N) == 1
    assert r.execute_command("Q.SUBSCRIBE", sub, src) == b"OK"
    r.execute_command("Q.PUSH", src, "bad", '{"n": 1}')
    wait_until(lambda: len(payloads(r, sub)) == 1)
    r.execute_command("Q.PUSH", src, '{"n": 2}')  # forwarding goes on
    wait_until(lambda: len(payloads(r, sub)) == 2)
    assert stats(r, sub)[b"schema_rejected"] == 1
    assert r.xlen(src) == 3
