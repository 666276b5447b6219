"""Validation cost is bounded: every regex a schema holds runs in Rust's linear-time
engine, on every path (the fast verdict, the explanation of a refusal, the
python-jsonschema paths for patternProperties and lone surrogates, the
compatibility checker), and a regex outside that engine's subset is refused at
Q.SCHEMA SET naming the construct.

Each case below is a classic catastrophic-backtracking input for Python's `re`
(hours of CPU): the server judges it and still answers PING on another connection.
The clients' socket timeout turns a stuck server into a failure, not a hang."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
import redis

from tests.servers import NaradProcess

EVIL = "^(a+)+$"
ATTACK = "a" * 40 + "!"


@pytest.fixture
def r(shared_narad: NaradProcess) -> Iterator[redis.Redis]:
    client = shared_narad.client(decode_responses=True, socket_timeout=60)
    yield client
    client.close()


def still_answers(server: NaradProcess) -> None:
    other = server.client(socket_timeout=10)
    assert other.ping()
    other.close()


def test_backtracking_pattern_is_judged_in_linear_time(
        r: redis.Redis, shared_narad: NaradProcess) -> None:
    r.execute_command("Q.CREATE", "redos")
    schema = {"type": "string", "pattern": EVIL}
    assert r.execute_command("Q.SCHEMA", "SET", "redos", json.dumps(schema)) == 1
    with pytest.raises(redis.ResponseError) as caught:
        r.execute_command("Q.PUSH", "redos", json.dumps(ATTACK))  # refused, and explained
    assert str(caught.value) == f"SCHEMA $: '{ATTACK}' does not match '{EVIL}' (version 1)"
    with pytest.raises(redis.ResponseError, match=r"^SCHEMA \$: "):  # a lone surrogate: jsonschema
        r.execute_command("Q.PUSH", "redos", '"' + "a" * 40 + '\\ud800"')
    r.execute_command("Q.PUSH", "redos", json.dumps("a" * 40))
    still_answers(shared_narad)


def test_backtracking_pattern_properties_are_judged_in_linear_time(
        r: redis.Redis, shared_narad: NaradProcess) -> None:
    r.execute_command("Q.CREATE", "redos-props")
    schema = {"type": "object", "patternProperties": {EVIL: {"type": "integer"}},
              "additionalProperties": {"type": "string"}}
    assert r.execute_command("Q.SCHEMA", "SET", "redos-props", json.dumps(schema)) == 1
    r.execute_command("Q.PUSH", "redos-props", json.dumps({ATTACK: "x"}))
    with pytest.raises(redis.ResponseError, match=r"^SCHEMA \$\.aaa: 'x' is not of type 'integer'"):
        r.execute_command("Q.PUSH", "redos-props", json.dumps({"aaa": "x"}))
    with pytest.raises(redis.ResponseError, match=r"is not of type 'string'"):
        r.execute_command("Q.PUSH", "redos-props", json.dumps({ATTACK: 1}))
    still_answers(shared_narad)


def test_compatibility_checker_matches_in_linear_time(
        r: redis.Redis, shared_narad: NaradProcess) -> None:
    r.execute_command("Q.CREATE", "redos-compat")
    v1 = {"type": "object", "patternProperties": {EVIL: {"type": "integer"}},
          "properties": {ATTACK: {"type": "string"}}}
    v2 = {**v1, "properties": {ATTACK: {"type": "string"}, "b": {"type": "string"}},
          "additionalProperties": False}
    assert r.execute_command("Q.SCHEMA", "SET", "redos-compat", json.dumps(v1)) == 1
    with pytest.raises(redis.ResponseError, match=r"^INCOMPATIBLE "):
        r.execute_command("Q.SCHEMA", "SET", "redos-compat", json.dumps(v2))
    still_answers(shared_narad)


@pytest.mark.parametrize(("pattern", "construct"), [
    ("^(a)\\1$", "the backreference or octal escape '\\1'"),
    ("^(?=a)a", "the lookaround '(?=...)'"),
    ("\\bword\\b", "the word boundary '\\b'"),
    ("(?i)abc", "the inline flag or special group '(?i...)'"),
])
def test_patterns_outside_the_linear_engine_are_refused(
        r: redis.Redis, pattern: str, construct: str) -> None:
    key = f"refused-{abs(hash(pattern))}"
    r.execute_command("Q.CREATE", key)
    for schema, where in (({"pattern": pattern}, "$.pattern"),
                          ({"patternProperties": {pattern: {}}}, None)):
        with pytest.raises(redis.ResponseError) as caught:
            r.execute_command("Q.SCHEMA", "SET", key, json.dumps(schema))
        message = str(caught.value)
        assert message.startswith("invalid schema at "), message
        assert where is None or message.startswith(f"invalid schema at {where}: "), message
        assert f"pattern {pattern!r} uses {construct}" in message, message
    assert r.execute_command("Q.SCHEMA", "VERSIONS", key) == []


def test_class_escapes_have_pythons_unicode_meaning(r: redis.Redis) -> None:
    """`\\d` is Python's: any Unicode decimal digit, so Arabic-Indic digits match."""
    r.execute_command("Q.CREATE", "dated")
    schema = '{"type":"string","pattern":"^\\\\d{4}-\\\\d{2}$"}'
    assert json.loads(schema)["pattern"] == "^\\d{4}-\\d{2}$"
    assert r.execute_command("Q.SCHEMA", "SET", "dated", schema) == 1
    arabic_indic = "\u0662\u0660\u0662\u0664-\u0660\u0661"  # 2024-01
    r.execute_command("Q.PUSH", "dated", json.dumps("2024-01"))
    r.execute_command("Q.PUSH", "dated", json.dumps(arabic_indic))  # JSON escapes
    r.execute_command("Q.PUSH", "dated", json.dumps(arabic_indic, ensure_ascii=False))  # UTF-8
    with pytest.raises(redis.ResponseError) as caught:
        r.execute_command("Q.PUSH", "dated", json.dumps("abcd-01"))
    assert str(caught.value) == ("SCHEMA $: 'abcd-01' does not match '^\\\\d{4}-\\\\d{2}$' "
                                 "(version 1)")
    with pytest.raises(redis.ResponseError, match=r"^SCHEMA \$: "):  # Python: \d is no superscript
        r.execute_command("Q.PUSH", "dated", json.dumps("2024-0\u00b2"))
    assert r.execute_command("Q.STATS", "dated")["pushed"] == 3


def test_a_lone_surrogate_is_in_no_class_escape(r: redis.Redis) -> None:
    """A lone surrogate (JSON's "\\ud800") is, as in Python, a non-digit non-word
    character: `\\D` and `\\W` match it, `\\w` does not."""
    r.execute_command("Q.CREATE", "lone")
    schema = json.dumps({"type": "string", "pattern": "^\\D\\W$"})
    assert r.execute_command("Q.SCHEMA", "SET", "lone", schema) == 1
    r.execute_command("Q.PUSH", "lone", '"\\ud800\\udbff"')
    with pytest.raises(redis.ResponseError, match=r"^SCHEMA \$: "):
        r.execute_command("Q.PUSH", "lone", '"\\ud800a"')
    assert r.execute_command("Q.STATS", "lone")["pushed"] == 1
