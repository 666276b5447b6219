"""Q.SCHEMA through a real server: every subcommand's replies and error texts,
validation on XADD (the fields object and FIELD), refusals that append nothing,
and schemas kept across restart, kill -9, RENAME, SWAPDB, DEL and FLUSHDB.

The schema library itself (what a valid schema is, compatibility, verdicts) is
tested in tests/schema; these tests are about the wiring."""

from __future__ import annotations

import itertools
import json
import random
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from narad.commands.schema import check_payloads
from narad.commands.table import COMMANDS, LOOKUP
from narad.config import Config
from narad.errors import CommandError
from narad.server import Server
from tests.server.raw import Raw
from tests.servers import NaradProcess

ORDER = {
    "type": "object",
    "properties": {
        "sku": {"type": "string", "pattern": "^[A-Z]+-[0-9]+$"},
        "qty": {"type": "string", "pattern": "^[1-9][0-9]*$"},
    },
    "required": ["sku", "qty"],
}
ORDER_TEXT = json.dumps(ORDER)
# BACKWARD-compatible with ORDER: qty is no longer required.
ORDER_V2 = {**ORDER, "required": ["sku"]}
ORDER_V2_TEXT = json.dumps(ORDER_V2)
# Not BACKWARD-compatible with ORDER: a new required property.
ORDER_NOTE = {**ORDER, "required": ["sku", "qty", "note"]}
ORDER_NOTE_TEXT = json.dumps(ORDER_NOTE)
DOC = json.dumps({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]})

_names = itertools.count()


def err(text: str) -> tuple[str, str]:
    return ("error", text)


@pytest.fixture
def conn(shared_narad: NaradProcess) -> Iterator[Raw]:
    with Raw(shared_narad.port) as c:
        yield c


@pytest.fixture
def key(conn: Raw) -> Iterator[str]:
    """A fresh existing stream (one entry), deleted afterwards."""
    name = f"s{next(_names)}"
    conn.call("XADD", name, "*", "sku", "A-1", "qty", "1")
    yield name
    conn.call("DEL", name)


def q(conn: Raw, *args: Any) -> Any:
    return conn.call("Q.SCHEMA", *args)


# -- SET / GET / VERSIONS ---------------------------------------------------------------


def test_set_get_versions(conn: Raw, key: str) -> None:
    assert q(conn, "VERSIONS", key) == []
    assert q(conn, "GET", key) is None
    assert q(conn, "SET", key, ORDER_TEXT) == 1
    assert q(conn, "SET", key, ORDER_TEXT) == 1  # the same text again adds no version
    assert q(conn, "SET", key, ORDER_V2_TEXT) == 2
    assert q(conn, "VERSIONS", key) == [1, 2]
    v1, v2 = ORDER_TEXT.encode(), ORDER_V2_TEXT.encode()
    assert q(conn, "GET", key) == [b"version", 2, b"schema", v2, b"field", None]
    assert q(conn, "GET", key, "1") == [b"version", 1, b"schema", v1, b"field", None]
    assert q(conn, "GET", key, "3") is None
    assert q(conn, "get", key, "2")[1] == 2  # subcommand names in any case
    assert conn.call("q.schema", "versions", key) == [1, 2]


def test_get_is_a_map_under_resp3(conn: Raw, key: str) -> None:
    conn.call("HELLO", "3")
    assert q(conn, "SET", key, DOC, "FIELD", "doc") == 1
    assert q(conn, "GET", key) == {b"version": 1, b"schema": DOC.encode(), b"field": b"doc"}
    assert q(conn, "GET", key, "7") is None


def test_schema_text_is_kept_exactly(conn: Raw, key: str) -> None:
    text = '{ "type" : "object",\n  "title": "caf\u00e9" }'
    assert q(conn, "SET", key, text) == 1
    assert q(conn, "GET", key)[3] == text.encode()


def test_incompatible_set_adds_nothing(conn: Raw, key: str) -> None:
    assert q(conn, "SET", key, ORDER_TEXT) == 1
    assert q(conn, "SET", key, ORDER_NOTE_TEXT) == err(
        'INCOMPATIBLE $.required: the new schema requires property "note", version 1 does not'
    )
    assert q(conn, "VERSIONS", key) == [1]
    assert q(conn, "SET", key, ORDER_NOTE_TEXT, "COMPAT", "NONE") == 2
    assert q(conn, "COMPAT", key) == b"NONE"  # the COMPAT option sets the key's mode


def test_incompatible_lists_every_reason(conn: Raw, key: str) -> None:
    q(conn, "SET", key, ORDER_TEXT)
    changed = {
        "type": "object",
        "properties": {"sku": {"type": "integer"}, "qty": {"type": "string", "maxLength": 3}},
        "required": ["sku", "qty", "note"],
    }
    reply = q(conn, "SET", key, json.dumps(changed))
    assert reply[0] == "error" and reply[1].startswith("INCOMPATIBLE ")
    reasons = reply[1][len("INCOMPATIBLE ") :].split("; ")
    assert [r.split(":")[0] for r in reasons] == [
        "$.required", "$.properties.sku.type", "$.properties.qty.maxLength"
    ]


def test_field_is_inherited_and_cannot_change(conn: Raw, key: str) -> None:
    assert q(conn, "SET", key, DOC, "FIELD", "doc") == 1
    v2 = json.dumps({"type": "object", "properties": {"n": {"type": "integer"}}})
    assert q(conn, "SET", key, v2) == 2
    assert q(conn, "GET", key)[5] == b"doc"
    assert q(conn, "SET", key, DOC, "FIELD", "body", "COMPAT", "NONE") == err(
        "ERR FIELD cannot change from 'doc' to 'body'; drop the schema first"
    )
    assert q(conn, "VERSIONS", key) == [1, 2]


def test_invalid_schemas(conn: Raw, key: str) -> None:
    assert q(conn, "SET", key, "{nope")[1].startswith("ERR invalid schema: not JSON: ")
    assert q(conn, "SET", key, "[1]") == err(
        "ERR invalid schema: a schema is an object or a boolean, not an array"
    )
    assert q(conn, "SET", key, '{"type": "strung"}')[1].startswith("ERR invalid schema at $.type: ")
    assert q(conn, "SET", key, '{"type": "string", "pattern": "("}') == err(
        "ERR invalid schema at $.pattern: '(' is not a 'regex'"
    )
    remote = q(conn, "SET", key, '{"$ref": "https://example.com/s.json"}')
    assert remote[1].startswith("ERR invalid schema")
    assert "example.com" in remote[1]
    assert q(conn, "SET", key, b'{"a": "\xff"}') == err("ERR invalid schema: not UTF-8 text")
    assert q(conn, "CHECK", key, "{nope")[1].startswith("ERR invalid schema: not JSON: ")
    assert q(conn, "VERSIONS", key) == []


# -- CHECK / COMPAT / DROP --------------------------------------------------------------


def test_check(conn: Raw, key: str) -> None:
    assert q(conn, "CHECK", key, ORDER_NOTE_TEXT) == b"OK"  # no version yet: anything goes
    q(conn, "SET", key, ORDER_TEXT)
    assert q(conn, "CHECK", key, ORDER_V2_TEXT) == b"OK"
    assert q(conn, "CHECK", key, ORDER_NOTE_TEXT)[1].startswith("INCOMPATIBLE $.required: ")
    assert q(conn, "CHECK", key, ORDER_NOTE_TEXT, "COMPAT", "none") == b"OK"
    assert q(conn, "CHECK", key, ORDER_V2_TEXT, "COMPAT", "FORWARD")[1].startswith("INCOMPATIBLE")
    assert q(conn, "VERSIONS", key) == [1]  # CHECK never adds a version
    assert q(conn, "COMPAT", key) == b"BACKWARD"  # nor changes the mode


def test_compat(conn: Raw, key: str) -> None:
    assert q(conn, "COMPAT", key) == b"BACKWARD"
    for mode in ("FORWARD", "FULL", "NONE", "BACKWARD_TRANSITIVE", "FORWARD_TRANSITIVE",
                 "FULL_TRANSITIVE", "BACKWARD"):
        assert q(conn, "COMPAT", key, mode) == b"OK"
        assert q(conn, "COMPAT", key) == mode.encode()
    assert q(conn, "COMPAT", key, "full") == b"OK"
    assert q(conn, "COMPAT", key) == b"FULL"
    assert q(conn, "COMPAT", key, "FULL") == b"OK"  # unchanged: still OK
    # A mode set before the first version holds for the versions after it.
    assert q(conn, "SET", key, ORDER_TEXT) == 1
    assert q(conn, "COMPAT", key) == b"FULL"
    assert q(conn, "SET", key, ORDER_V2_TEXT)[1].startswith("INCOMPATIBLE")  # not FORWARD
    assert q(conn, "COMPAT", key, "sideways") == err("ERR unknown compatibility mode 'sideways'")
    assert q(conn, "COMPAT", key) == b"FULL"


def test_drop(conn: Raw, key: str) -> None:
    assert q(conn, "DROP", key) == 0
    q(conn, "SET", key, ORDER_TEXT)
    q(conn, "SET", key, ORDER_V2_TEXT)
    assert q(conn, "DROP", key) == 1
    assert q(conn, "DROP", key) == 0
    assert q(conn, "VERSIONS", key) == []
    assert q(conn, "GET", key) is None
    assert isinstance(conn.call("XADD", key, "*", "anything", "goes"), bytes)
    assert q(conn, "SET", key, ORDER_NOTE_TEXT) == 1  # numbering starts again
    # A mode alone is dropped too.
    q(conn, "DROP", key)
    q(conn, "COMPAT", key, "NONE")
    assert q(conn, "DROP", key) == 1
    assert q(conn, "COMPAT", key) == b"BACKWARD"


# -- error texts ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ["SET", "{missing}", "{}"],
        ["GET", "{missing}"],
        ["GET", "{missing}", "1"],
        ["VERSIONS", "{missing}"],
        ["CHECK", "{missing}", "{}"],
        ["COMPAT", "{missing}"],
        ["COMPAT", "{missing}", "NONE"],
        ["DROP", "{missing}"],
    ],
)
def test_unknown_key_is_noqueue(conn: Raw, args: list[str]) -> None:
    assert q(conn, *args) == err("NOQUEUE no such queue '{missing}'")
    assert conn.call("EXISTS", "{missing}") == 0


@pytest.mark.parametrize(
    ("args", "error"),
    [
        ([], "ERR wrong number of arguments for 'q.schema' command"),
        (["NOPE"], "ERR unknown subcommand 'NOPE'. Try Q.SCHEMA HELP."),
        (["NOPE", "k"], "ERR unknown subcommand 'NOPE'. Try Q.SCHEMA HELP."),
        (["SET", "k"], "ERR wrong number of arguments for 'q.schema|set' command"),
        (["GET"], "ERR wrong number of arguments for 'q.schema|get' command"),
        (["VERSIONS"], "ERR wrong number of arguments for 'q.schema|versions' command"),
        (["VERSIONS", "k", "x"], "ERR wrong number of arguments for 'q.schema|versions' command"),
        (["CHECK", "k"], "ERR wrong number of arguments for 'q.schema|check' command"),
        (["COMPAT"], "ERR wrong number of arguments for 'q.schema|compat' command"),
        (["DROP"], "ERR wrong number of arguments for 'q.schema|drop' command"),
        (["DROP", "k", "x"], "ERR wrong number of arguments for 'q.schema|drop' command"),
        (["HELP", "x"], "ERR wrong number of arguments for 'q.schema|help' command"),
        # Options are checked before the key.
        (["SET", "k", "{}", "COMPAT"], "ERR syntax error"),
        (["SET", "k", "{}", "FIELD"], "ERR syntax error"),
        (["SET", "k", "{}", "NOSUCH", "x"], "ERR syntax error"),
        (["SET", "k", "{}", "COMPAT", "SOON"], "ERR unknown compatibility mode 'SOON'"),
        (["CHECK", "k", "{}", "FIELD", "x"], "ERR syntax error"),
        (["CHECK", "k", "{}", "COMPAT", "x"], "ERR unknown compatibility mode 'x'"),
        (["GET", "k", "1", "2"], "ERR syntax error"),
        (["GET", "k", "one"], "ERR value is not an integer or out of range"),
        (["GET", "k", "01"], "ERR value is not an integer or out of range"),
        (["GET", "k", "99999999999999999999"], "ERR value is not an integer or out of range"),
        (["GET", "k", "0"], "ERR value is out of range, must be positive"),
        (["GET", "k", "-1"], "ERR value is out of range, must be positive"),
        (["COMPAT", "k", "NONE", "x"], "ERR syntax error"),
    ],
)
def test_argument_errors(conn: Raw, args: list[str], error: str) -> None:
    assert q(conn, *args) == err(error)


def test_help_and_command_table(conn: Raw) -> None:
    lines = q(conn, "HELP")
    assert lines[0].startswith(b"Q.SCHEMA <subcommand>")
    assert any(line.startswith(b"SET <key> <schema-json>") for line in lines)
    names = set(conn.call("COMMAND", "LIST"))
    subs = {b"set", b"get", b"versions", b"check", b"compat", b"drop", b"help"}
    assert {b"q.schema"} | {b"q.schema|" + s for s in subs} <= names
    info = conn.call("COMMAND", "INFO", "q.schema")[0]
    by_name = {sub[0]: sub for sub in info[9]}
    assert by_name[b"q.schema|set"][1:6] == [-4, [b"write", b"denyoom"], 2, 2, 1]
    assert by_name[b"q.schema|get"][1:6] == [-3, [b"readonly"], 2, 2, 1]
    assert conn.call("COMMAND", "GETKEYS", "Q.SCHEMA", "SET", "orders", "{}") == [b"orders"]


# -- validation on XADD ---------------------------------------------------------------------


def test_xadd_validates_the_fields_object(conn: Raw, key: str) -> None:
    q(conn, "SET", key, ORDER_TEXT)
    assert isinstance(conn.call("XADD", key, "*", "sku", "B-2", "qty", "3"), bytes)
    assert isinstance(conn.call("XADD", key, "*", "qty", "3", "sku", "B-2", "extra", "x"), bytes)
    refusals = {
        ("sku", "B-2"): "SCHEMA $: 'qty' is a required property (version 1)",
        ("sku", "b2", "qty", "1"):
            "SCHEMA $.sku: 'b2' does not match '^[A-Z]+-[0-9]+$' (version 1)",
        ("sku", "B-2", "qty", "0"):
            "SCHEMA $.qty: '0' does not match '^[1-9][0-9]*$' (version 1)",
        ("sku", "B-2", "qty", "1", "sku", "C-3"): "SCHEMA $.sku: field given twice (version 1)",
    }
    for fields, error in refusals.items():
        reply = conn.call("XADD", key, "*", *fields)
        assert reply[0] == "error"
        assert reply[1].replace('"', "'") == error.replace('"', "'")
    assert conn.call("XLEN", key) == 3


def test_xadd_refusal_appends_nothing_on_every_path(conn: Raw, key: str) -> None:
    q(conn, "SET", key, ORDER_TEXT)
    before = conn.call("XRANGE", key, "-", "+")
    info = conn.call("XINFO", "STREAM", key)
    bad = ["sku", "nope", "qty", "1"]
    for args in (
        ["*", *bad],  # the fast path
        ["MAXLEN", "0", "*", *bad],  # trimming must not run either
        ["MAXLEN", "~", "0", "*", *bad],
        ["MINID", "9999999999999", "*", *bad],
        ["NOMKSTREAM", "*", *bad],
        ["99999999999999-1", *bad],  # an explicit ID
        ["99999999999999-*", *bad],
    ):
        reply = conn.call("XADD", key, *args)
        assert reply[0] == "error" and reply[1].startswith("SCHEMA $.sku: "), args
    assert conn.call("XRANGE", key, "-", "+") == before
    assert conn.call("XINFO", "STREAM", key)[:12] == info[:12]
    # Errors that Redis checks first still come first.
    assert conn.call("XADD", key, "0-0", *bad) == err(
        "ERR The ID specified in XADD must be greater than 0-0"
    )
    # A good entry after all that gets the next ID as if nothing happened.
    good = conn.call("XADD", key, "MAXLEN", "1", "*", "sku", "A-9", "qty", "9")
    assert conn.call("XRANGE", key, "-", "+") == [[good, [b"sku", b"A-9", b"qty", b"9"]]]


def test_xadd_with_field(conn: Raw, key: str) -> None:
    q(conn, "SET", key, DOC, "FIELD", "doc")
    assert isinstance(conn.call("XADD", key, "*", "doc", '{"n": 1}', "trace", "t-1"), bytes)
    assert isinstance(conn.call("XADD", key, "*", "trace", "[", "doc", '{"n": -7}'), bytes)
    refusals = [
        (["doc", '{"n": "1"}'], "SCHEMA $.n: \"1\" is not of type \"integer\" (version 1)"),
        (["doc", "{}"], "SCHEMA $: \"n\" is a required property (version 1)"),
        (["other", '{"n": 1}'],
         "SCHEMA $: missing field 'doc' holding the JSON document (version 1)"),
        (["doc", '{"n": 1}', "doc", '{"n": 2}'], "SCHEMA $: field 'doc' given twice (version 1)"),
        (["doc", '{"n": NaN}'], None),
        (["doc", "not json"], None),
    ]
    for fields, error in refusals:
        reply = conn.call("XADD", key, "*", *fields)
        assert reply[0] == "error", fields
        if error is None:
            assert reply[1].startswith("SCHEMA $: invalid JSON: ") and reply[1].endswith(
                "(version 1)"
            )
        else:
            assert reply[1].replace("'", '"') == error.replace("'", '"')
    assert conn.call("XLEN", key) == 3


def test_xadd_uses_the_latest_version(conn: Raw, key: str) -> None:
    q(conn, "SET", key, ORDER_TEXT)
    assert conn.call("XADD", key, "*", "sku", "A-1")[1].endswith("(version 1)")
    q(conn, "SET", key, ORDER_V2_TEXT)
    assert isinstance(conn.call("XADD", key, "*", "sku", "A-1"), bytes)
    assert conn.call("XADD", key, "*", "sku", "a")[1].endswith("(version 2)")
    q(conn, "DROP", key)
    assert isinstance(conn.call("XADD", key, "*", "sku", "a"), bytes)


def test_xadd_in_a_transaction(conn: Raw, key: str) -> None:
    q(conn, "SET", key, ORDER_TEXT)
    conn.call("MULTI")
    conn.call("XADD", key, "*", "sku", "A-2", "qty", "1")
    conn.call("XADD", key, "*", "sku", "bad", "qty", "1")
    conn.call("XLEN", key)
    replies = conn.call("EXEC")
    assert isinstance(replies[0], bytes)
    assert replies[1][0] == "error" and replies[1][1].startswith("SCHEMA $.sku")
    assert replies[2] == 2


def test_other_keys_and_databases_are_not_validated(conn: Raw, key: str) -> None:
    q(conn, "SET", key, ORDER_TEXT)
    other = f"{key}-other"
    assert isinstance(conn.call("XADD", other, "*", "x", "y"), bytes)
    conn.call("SELECT", "5")
    assert isinstance(conn.call("XADD", key, "*", "x", "y"), bytes)
    assert q(conn, "VERSIONS", key) == []
    conn.call("DEL", key)
    conn.call("SELECT", "0")
    conn.call("DEL", other)


# -- keys: RENAME, SWAPDB, DEL, FLUSHDB -------------------------------------------------------


def test_rename_keeps_the_schema(conn: Raw, key: str) -> None:
    q(conn, "SET", key, ORDER_TEXT)
    q(conn, "COMPAT", key, "FULL")
    moved = f"{key}-moved"
    assert conn.call("RENAME", key, moved) == b"OK"
    assert q(conn, "VERSIONS", moved) == [1]
    assert q(conn, "COMPAT", moved) == b"FULL"
    assert conn.call("XADD", moved, "*", "sku", "x")[1].startswith("SCHEMA ")
    assert q(conn, "VERSIONS", key) == err(f"NOQUEUE no such queue '{key}'")
    # A new key under the old name has no schema.
    assert isinstance(conn.call("XADD", key, "*", "sku", "x"), bytes)
    assert q(conn, "VERSIONS", key) == []
    # RENAME onto a key with a schema replaces that key and its schema.
    other = f"{key}-other"
    conn.call("XADD", other, "*", "a", "1")
    q(conn, "SET", other, DOC, "FIELD", "doc")
    conn.call("RENAME", key, other)
    assert q(conn, "VERSIONS", other) == []
    assert isinstance(conn.call("XADD", other, "*", "a", "1"), bytes)
    conn.call("DEL", moved, other)


def test_del_and_unlink_forget_the_schema(conn: Raw, key: str) -> None:
    for delete in ("DEL", "UNLINK"):
        conn.call("XADD", key, "*", "sku", "A-1", "qty", "1")
        q(conn, "SET", key, ORDER_TEXT)
        q(conn, "COMPAT", key, "NONE")
        assert conn.call(delete, key) == 1
        assert q(conn, "VERSIONS", key) == err(f"NOQUEUE no such queue '{key}'")
        assert isinstance(conn.call("XADD", key, "*", "sku", "x"), bytes)
        assert q(conn, "VERSIONS", key) == []
        assert q(conn, "COMPAT", key) == b"BACKWARD"
        conn.call("DEL", key)


def test_swapdb_and_flushdb(conn: Raw) -> None:
    conn.call("SELECT", "8")
    conn.call("XADD", "sw", "*", "sku", "A-1", "qty", "1")
    q(conn, "SET", "sw", ORDER_TEXT)
    assert conn.call("SWAPDB", "8", "9") == b"OK"
    assert q(conn, "VERSIONS", "sw") == err("NOQUEUE no such queue 'sw'")
    conn.call("SELECT", "9")
    assert q(conn, "VERSIONS", "sw") == [1]
    assert conn.call("XADD", "sw", "*", "sku", "x")[1].startswith("SCHEMA ")
    assert conn.call("FLUSHDB") == b"OK"
    conn.call("XADD", "sw", "*", "sku", "x")
    assert q(conn, "VERSIONS", "sw") == []
    conn.call("FLUSHDB")
    conn.call("SELECT", "0")


# -- durability -------------------------------------------------------------------------------


def _build_state(client: redis.Redis) -> None:
    """Schemas in several states; every reply received means the op is committed."""
    for name in ("orders", "docs", "dropped", "deleted", "renamed-from"):
        client.xadd(name, {"sku": "A-1", "qty": "1"})
    client.execute_command("Q.SCHEMA", "SET", "orders", ORDER_TEXT)
    client.execute_command("Q.SCHEMA", "SET", "orders", ORDER_V2_TEXT)
    client.execute_command("Q.SCHEMA", "COMPAT", "orders", "FORWARD")
    client.execute_command("Q.SCHEMA", "SET", "docs", DOC, "FIELD", "doc", "COMPAT", "NONE")
    client.execute_command("Q.SCHEMA", "SET", "dropped", ORDER_TEXT)
    assert client.execute_command("Q.SCHEMA", "DROP", "dropped") == 1
    client.execute_command("Q.SCHEMA", "SET", "deleted", ORDER_TEXT)
    client.delete("deleted")
    client.xadd("deleted", {"any": "thing"})
    client.execute_command("Q.SCHEMA", "SET", "renamed-from", ORDER_TEXT)
    client.rename("renamed-from", "renamed-to")


def _check_state(client: redis.Redis) -> None:
    def q(*args: Any) -> Any:
        return client.execute_command("Q.SCHEMA", *args)

    assert q("VERSIONS", "orders") == [1, 2]
    assert q("GET", "orders", "1")[b"schema"] == ORDER_TEXT.encode()
    assert q("GET", "orders")[b"schema"] == ORDER_V2_TEXT.encode()
    assert q("COMPAT", "orders") == b"FORWARD"
    with pytest.raises(redis.ResponseError, match=r"^SCHEMA \$.sku: .* \(version 2\)$"):
        client.xadd("orders", {"sku": "lower"})
    client.xadd("orders", {"sku": "B-1"})
    assert q("GET", "docs")[b"field"] == b"doc"
    assert q("COMPAT", "docs") == b"NONE"
    with pytest.raises(redis.ResponseError, match=r"^SCHEMA \$.n: .* \(version 1\)$"):
        client.xadd("docs", {"doc": '{"n": 1.5}'})
    client.xadd("docs", {"doc": '{"n": 1}'})
    assert q("VERSIONS", "dropped") == []
    assert q("COMPAT", "dropped") == b"BACKWARD"
    assert q("VERSIONS", "deleted") == []
    assert q("VERSIONS", "renamed-to") == [1]
    with pytest.raises(redis.ResponseError, match="NOQUEUE"):
        q("VERSIONS", "renamed-from")
    client.xadd("dropped", {"free": "form"})
    client.xadd("deleted", {"free": "form"})


def test_schemas_survive_restart(narad: NaradProcess) -> None:
    _build_state(narad.client())
    narad.restart()
    _check_state(narad.client())
    narad.restart()  # twice: what the first restart replayed is still in the log
    _check_state(narad.client())


def test_schemas_survive_kill_9(narad: NaradProcess) -> None:
    _build_state(narad.client())
    narad.kill()
    narad.start()
    _check_state(narad.client())


def test_kill_9_during_schema_changes_keeps_every_acked_version(narad: NaradProcess) -> None:
    """Versions are set (COMPAT NONE) while entries are added; after kill -9 every
    version whose SET was answered is there with its text, and validation goes on
    with the latest version."""
    rng = random.Random(5)
    setup = narad.client()
    setup.xadd("live", {"n": "0"})
    setup.execute_command("Q.SCHEMA", "COMPAT", "live", "NONE")
    acked: dict[int, str] = {}
    stop = threading.Event()

    def setter() -> None:
        client = redis.Redis(port=narad.port, socket_timeout=5)
        try:
            for i in itertools.count():
                if stop.is_set():
                    return
                text = json.dumps({"type": "object", "title": f"v{i}"})
                acked[client.execute_command("Q.SCHEMA", "SET", "live", text)] = text
        except (redis.ConnectionError, redis.TimeoutError):
            return

    def adder() -> None:
        client = redis.Redis(port=narad.port, socket_timeout=5)
        try:
            while not stop.is_set():
                client.xadd("live", {"n": "1"})
        except (redis.ConnectionError, redis.TimeoutError):
            return

    threads = [threading.Thread(target=setter), threading.Thread(target=adder)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 10
    while len(acked) < 20 and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(rng.uniform(0.05, 0.3))
    narad.kill()
    stop.set()
    for t in threads:
        t.join(timeout=10)
    assert acked
    narad.start()
    client = narad.client()
    versions = client.execute_command("Q.SCHEMA", "VERSIONS", "live")
    assert versions == list(range(1, len(versions) + 1))
    assert max(acked) <= len(versions)
    for number, text in acked.items():
        assert client.execute_command("Q.SCHEMA", "GET", "live", number)[b"schema"] == text.encode()
    assert client.execute_command("Q.SCHEMA", "COMPAT", "live") == b"NONE"
    strict = json.dumps({"type": "object", "required": ["m"]})
    client.execute_command("Q.SCHEMA", "SET", "live", strict)
    with pytest.raises(redis.ResponseError, match=rf"\(version {len(versions) + 1}\)$"):
        client.xadd("live", {"n": "2"})


# -- in process: the metadata snapshot and check_payloads ---------------------------------------


class InProcess:
    """A real Server and Keyspace on a data dir, without sockets; handlers called
    directly as the server would call them."""

    def __init__(self, folder: Path) -> None:
        self.server = Server(Config.load(None, [("dir", str(folder))]))
        self.server.node.keyspace.open()
        self.client = self.server.new_client().session

    def run(self, *args: str | bytes) -> Any:
        argv = [a.encode() if isinstance(a, str) else a for a in args]
        cmd = LOOKUP[argv[0].upper()]
        if cmd.subcommands:
            cmd = COMMANDS[argv[0].lower()].subcommands[argv[1].decode().lower()]
        assert cmd.handler is not None
        return cmd.handler(self.client, argv)

    def close(self) -> None:
        self.server.node.keyspace.close()


def test_metadata_snapshot_keeps_schemas(tmp_path: Path) -> None:
    node = InProcess(tmp_path)
    store = node.server.node.keyspace
    node.run("XADD", "a", "*", "sku", "A-1", "qty", "1")
    node.run("XADD", "gone", "*", "x", "y")
    node.run("Q.SCHEMA", "SET", "a", ORDER_TEXT)
    node.run("Q.SCHEMA", "SET", "a", ORDER_V2_TEXT)
    node.run("Q.SCHEMA", "COMPAT", "a", "FULL_TRANSITIVE")
    node.run("Q.SCHEMA", "SET", "gone", DOC, "FIELD", "doc")
    node.run("DEL", "gone")
    node.run("XADD", "b", "*", "x", "y")
    node.run("Q.SCHEMA", "COMPAT", "b", "NONE")
    store.commit()
    store._compact_meta()
    assert store.meta is not None
    first = store.meta.start_offset
    node.close()

    node = InProcess(tmp_path)
    store = node.server.node.keyspace
    assert store.meta is not None and store.meta.start_offset == first  # replayed the snapshot
    assert node.run("Q.SCHEMA", "VERSIONS", "a") == [1, 2]
    assert node.run("Q.SCHEMA", "COMPAT", "a") == b"FULL_TRANSITIVE"
    assert node.run("Q.SCHEMA", "COMPAT", "b") == b"NONE"
    assert node.run("Q.SCHEMA", "GET", "a")[b"schema"] == ORDER_V2_TEXT.encode()
    assert set(store.validators) == {store.dbs[0][b"a"].uid}
    with pytest.raises(CommandError, match=r"\(version 2\)$"):
        node.run("XADD", "a", "*", "sku", "x")
    node.run("XADD", "gone", "*", "x", "y")
    assert node.run("Q.SCHEMA", "VERSIONS", "gone") == []
    node.close()


def test_check_payloads(tmp_path: Path) -> None:
    node = InProcess(tmp_path)
    node.run("XADD", "q", "*", "x", "y")
    stream = node.server.node.keyspace.dbs[0][b"q"]
    check_payloads(node.client, stream, [b"not json", b"{}"])  # no schema: nothing judged
    node.run("Q.SCHEMA", "SET", "q", DOC, "FIELD", "doc")  # FIELD is XADD's only
    check_payloads(node.client, stream, [b'{"n": 1}', b' {"n": 2, "m": []}\n'])
    check_payloads(node.client, stream, [])
    cases = [
        ([b'{"n": 1}', b'{"n": "2"}'],
         'SCHEMA $.n: "2" is not of type "integer" (version 1, payload 2 of 2)'),
        ([b"{}", b'{"n": "2"}'],
         'SCHEMA $: "n" is a required property (version 1, payload 1 of 2)'),
        ([b'{"n": 1}', b"{"], "SCHEMA $: invalid JSON: "),
        ([b'{"n": 1} {"n": 2}'], "SCHEMA $: invalid JSON: Extra data"),
        ([b'{"n": NaN}'], "SCHEMA $: invalid JSON: NaN is not JSON"),
        ([b'{"n": 1, "s": "\xff"}'], "SCHEMA $: invalid JSON: not UTF-8 (version 1)"),
    ]
    for payloads, text in cases:
        with pytest.raises(CommandError) as caught:
            check_payloads(node.client, stream, payloads)
        assert str(caught.value).startswith(text), str(caught.value)
        assert caught.value.code == "SCHEMA"
    assert stream.length == 1
    node.close()


def test_pipelined_xadds_are_each_validated(shared_narad: NaradProcess) -> None:
    """A run of pipelined XADDs to one key (served as one batch when the key has no
    schema) is judged command by command: the refused one alone is refused."""
    r = shared_narad.client()
    r.delete("pipe-schema")
    r.xadd("pipe-schema", {"n": "1"})
    schema = '{"type": "object", "properties": {"n": {"type": "string", "pattern": "^[0-9]+$"}}}'
    r.execute_command("Q.SCHEMA", "SET", "pipe-schema", schema)
    pipe = r.pipeline(transaction=False)
    for n in ("2", "x", "3"):
        pipe.xadd("pipe-schema", {"n": n})
    replies = pipe.execute(raise_on_error=False)
    assert isinstance(replies[1], redis.ResponseError) and str(replies[1]).startswith("SCHEMA")
    assert [f[b"n"] for _, f in r.xrange("pipe-schema")] == [b"1", b"2", b"3"]


def test_patterns_keep_pythons_meaning_and_lone_surrogates_are_judged(conn: Raw, key: str) -> None:
    """`$` matches before one final newline (Python's `re`), whichever engine runs the
    pattern; a JSON string with a lone surrogate is judged, not an internal error."""
    schema = {"type": "object", "properties": {
        "sku": {"type": "string", "pattern": "^[A-Z]+-[0-9]+$"},
        "note": {"type": "string", "maxLength": 2}}}
    q(conn, "SET", key, json.dumps(schema))
    assert isinstance(conn.call("XADD", key, "*", "sku", "B-2\n"), bytes)
    reply = conn.call("XADD", key, "*", "sku", "B-2\n\n")
    assert reply == err("SCHEMA $.sku: 'B-2\\n\\n' does not match '^[A-Z]+-[0-9]+$' (version 1)")
    queue = f"{key}:q"
    assert conn.call("Q.CREATE", queue) == b"OK"
    try:
        q(conn, "SET", queue, json.dumps(schema))
        assert isinstance(conn.call("Q.PUSH", queue, '{"note": "\\ud800"}'), bytes)
        reply = conn.call("Q.PUSH", queue, '{"note": "\\ud800\\ud800\\ud800"}')
        assert reply[0] == "error" and reply[1].startswith("SCHEMA $.note: "), reply
        assert reply[1].endswith("is too long (version 1)"), reply
        assert isinstance(conn.call("Q.PUSH", queue, '{"sku": "A-1\\n"}'), bytes)
        assert conn.call("PING") in ("PONG", b"PONG")
    finally:
        conn.call("DEL", queue)
