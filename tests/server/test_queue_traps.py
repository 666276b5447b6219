"""What a new user trips on with queues, and what Narad answers instead: the README's
example works pasted in order, Q.CREATE ... NX makes sure a queue exists whatever its
settings, Q.DROP refuses a queue others use (a DLQ, a subscription's source) naming
them, and Q.PEEK shows what Q.POP would deliver next without delivering it, so a look
at a DLQ leaves it whole for Q.REDRIVE (docs/queues.md)."""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

import pytest
import redis

from tests.servers import NaradProcess

ROOT = Path(__file__).resolve().parents[2]


def _error(client: redis.Redis, *args: object) -> str:
    with pytest.raises(redis.ResponseError) as raised:
        client.execute_command(*args)
    return str(raised.value)


@pytest.mark.skipif(subprocess.run(["which", "redis-cli"], capture_output=True).returncode,
                    reason="redis-cli is not installed")
def test_the_readme_queue_example_works_pasted(narad: NaradProcess) -> None:
    block = re.search(r"```sh\n(redis-cli Q\.CREATE.*?)```", (ROOT / "README.md").read_text(),
                      re.S)
    assert block is not None
    receipt = b""
    for line in block.group(1).splitlines():
        words = shlex.split(line, comments=True)
        words = [receipt.decode() if w == "<receipt>" else w for w in words]
        run = subprocess.run([*words[:1], "-p", str(narad.port), *words[1:]],
                             capture_output=True, timeout=30)
        assert run.returncode == 0 and not run.stdout.startswith(b"(error)"), (line, run)
        assert b"ERR" not in run.stdout, (line, run.stdout)
        if "Q.POP" in line:
            # redis-cli -3 prints a map's pairs as `key value` lines
            receipt = next(line.split(b" ")[1] for line in run.stdout.splitlines()
                           if line.startswith(b"receipt "))
    assert narad.client().execute_command("Q.STATS", "jobs")[b"acked"] == 1


def test_create_nx_makes_sure_a_queue_exists(shared_narad: NaradProcess) -> None:
    client = shared_narad.client(protocol=3, db=1)
    assert client.execute_command("Q.CREATE", "nx:q", "VISIBILITY", 5000, "NX") == 1
    client.execute_command("Q.CONFIG", "nx:q", "SET", "visibility", 9000)
    # Plain Q.CREATE with other settings is an error; NX answers 0 and changes nothing.
    assert "exists with other settings" in _error(client, "Q.CREATE", "nx:q", "VISIBILITY", 5000)
    assert client.execute_command("Q.CREATE", "nx:q", "VISIBILITY", 5000, "NX") == 0
    assert client.execute_command("Q.CREATE", "nx:q", "nx") == 0
    assert client.execute_command("Q.CONFIG", "nx:q", "GET", "visibility") == {
        b"visibility": 9000}
    # A plain stream becomes a queue, as with plain Q.CREATE.
    client.xadd("nx:plain", {"payload": "x"})
    assert client.execute_command("Q.CREATE", "nx:plain", "NX") == 1
    # NX is a flag, last; a DLQ named nx is still a value.
    assert "NOQUEUE" in _error(client, "Q.CREATE", "nx:other", "DLQ", "nx")
    assert "syntax error" in _error(client, "Q.CREATE", "nx:other", "NX", "DLQ", "x")
    assert client.exists("nx:other") == 0


def test_drop_refuses_a_queue_in_use(shared_narad: NaradProcess) -> None:
    client = shared_narad.client(protocol=3, db=2)
    for name in ("dead", "jobs", "audit", "copies"):
        client.execute_command("Q.CREATE", name)
    client.execute_command("Q.CONFIG", "jobs", "SET", "dlq", "dead")
    client.execute_command("Q.CONFIG", "audit", "SET", "dlq", "dead")
    client.execute_command("Q.SUBSCRIBE", "copies", "jobs")
    assert _error(client, "Q.DROP", "dead") == (
        "queue 'dead' is the DLQ of 'audit', 'jobs': change those first, or Q.DROP it FORCE")
    assert _error(client, "Q.DROP", "jobs") == (
        "queue 'jobs' is the source of 'copies' (Q.SUBSCRIBE): change those first, "
        "or Q.DROP it FORCE")
    assert "syntax error" in _error(client, "Q.DROP", "dead", "NOW")
    assert client.execute_command("Q.LIST") == [b"audit", b"copies", b"dead", b"jobs"]
    # The same queue name in another database is not a user.
    other = shared_narad.client(protocol=3, db=3)
    other.execute_command("Q.CREATE", "dead")
    assert other.execute_command("Q.DROP", "dead") == 1
    assert client.execute_command("Q.DROP", "dead", "FORCE") == 1
    assert client.execute_command("Q.UNSUBSCRIBE", "copies", "jobs") == 1
    assert client.execute_command("Q.DROP", "jobs") == 1


def test_peek_shows_without_delivering(shared_narad: NaradProcess) -> None:
    client = shared_narad.client(protocol=3, db=4)
    client.execute_command("Q.CREATE", "dlq")
    client.execute_command("Q.CREATE", "work", "MAXRECEIVES", 1, "DLQ", "dlq")
    ids = [client.execute_command("Q.PUSH", "work", f"m{i}") for i in range(3)]
    peeked = client.execute_command("Q.PEEK", "work", "COUNT", 2)
    assert [m[b"id"] for m in peeked] == ids[:2]
    assert peeked[0] == {b"id": ids[0], b"payload": b"m0", b"receives": 0,
                         b"pushed_at": int(ids[0].split(b"-")[0])}
    assert client.execute_command("Q.STATS", "work")[b"visible"] == 3
    assert client.execute_command("Q.STATS", "work")[b"in_flight"] == 0
    got = client.execute_command("Q.POP", "work", "COUNT", 3)
    assert [m[b"id"] for m in got] == ids
    assert client.execute_command("Q.PEEK", "work") == []
    # A nacked message is dead-lettered (MAXRECEIVES 1); a look at the DLQ leaves it
    # there for Q.REDRIVE.
    client.execute_command("Q.NACK", "work", got[0][b"receipt"])
    letter = client.execute_command("Q.PEEK", "dlq", "COUNT", 10)
    assert [m[b"payload"] for m in letter] == [b"m0"] and letter[0][b"origin"] == b"work"
    assert client.execute_command("Q.PEEK", "dlq") == letter
    assert client.execute_command("Q.REDRIVE", "dlq") == 1
    # Redriven: back in `work` under a new ID. Under RESP2, flat arrays.
    flat = shared_narad.client(protocol=2, db=4).execute_command("Q.PEEK", "work")
    assert flat[0][0] == b"id" and flat[0][2:4] == [b"payload", b"m0"]
    assert b"receipt" not in flat[0]
    assert "NOQUEUE" in _error(client, "Q.PEEK", "nope")
    assert "syntax error" in _error(client, "Q.PEEK", "work", "LIMIT", 1)
    assert "out of range" in _error(client, "Q.PEEK", "work", "COUNT", 0)


def test_a_refused_batch_names_the_payload(shared_narad: NaradProcess) -> None:
    client = shared_narad.client(protocol=3, db=5)
    client.execute_command("Q.CREATE", "typed")
    client.execute_command("Q.SCHEMA", "SET", "typed", '{"type": "object", "required": ["n"]}')
    assert _error(client, "Q.PUSH", "typed", '{"n": 1}', '{"n": 2}', '{"m": 3}') == (
        'SCHEMA $: "n" is a required property (version 1, payload 3 of 3)')
    assert _error(client, "Q.PUSH", "typed", "nope").startswith("SCHEMA $: invalid JSON")
    assert "(version 1)" in _error(client, "Q.PUSH", "typed", "nope")
    assert client.xlen("typed") == 0


def test_copies_of_a_plain_stream_carry_a_payload(shared_narad: NaradProcess) -> None:
    client = shared_narad.client(protocol=3, db=6)
    client.execute_command("Q.CREATE", "copies")
    client.execute_command("Q.SCHEMA", "SET", "copies",
                           '{"type": "object", "required": ["sku"]}')
    first = client.xadd("events", {"sku": "42", "qty": "1", "note": b"caf\xc3\xa9 \xff"})
    client.execute_command("Q.SUBSCRIBE", "copies", "events", "FROM", "EARLIEST")
    client.xadd("events", {"qty": "2"})  # no sku: the schema refuses its copy
    client.execute_command("Q.PUSH", "copies", '{"sku": "7"}')  # a queue's own payload
    got = client.execute_command("Q.POP", "copies", "COUNT", 10)
    assert [m[b"payload"] for m in got] == [
        '{"sku":"42","qty":"1","note":"café \ufffd"}'.encode(), b'{"sku": "7"}']
    assert got[0][b"source"] == b"events" and got[0][b"source_id"] == first
    assert b"sku" not in got[0]
    assert client.execute_command("Q.STATS", "copies")[b"schema_rejected"] == 1
