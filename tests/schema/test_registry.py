"""narad/schema/registry.py and payload.py: proposals, ops, replay and snapshots, and
the error text of every refusal path."""

from __future__ import annotations

import json
from typing import Any

import msgpack
import pytest

from narad.errors import CommandError
from narad.schema import (
    IncompatibleError,
    Mode,
    PayloadError,
    Registry,
    SchemaError,
    compile,
    validate_fields,
    validate_payload,
)

Q = b"orders"
V1 = '{"type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"]}'
V2 = ('{"type": "object", "properties": {"id": {"type": "string"},'
      ' "n": {"type": "integer"}}, "required": ["id"], "additionalProperties": false}')


def applied(registry: Registry, op: Any) -> Any:
    """Apply like the server: the op goes through the log (msgpack) first."""
    assert op is not None
    registry.apply(msgpack.unpackb(msgpack.packb(op), raw=False))
    return op


def test_versions_count_from_one_and_keep_text() -> None:
    registry = Registry()
    assert registry.validator(Q) is None and registry.versions(Q) == []
    op = applied(registry, registry.propose(Q, V1))
    assert op == ["schema.set", Q, 1, V1, None, "BACKWARD"]
    closed = '{"type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"]}'
    applied(registry, registry.propose(Q, closed.replace("}}, ", "}}, \"title\": \"t\", ")))
    assert registry.versions(Q) == [1, 2]
    version = registry.get(Q, 1)
    assert version is not None and version.text == V1 and version.schema == json.loads(V1)
    assert registry.get(Q, 3) is None and registry.get(Q, 0) is None
    latest = registry.get(Q)
    assert latest is not None and latest.number == 2
    active = registry.validator(Q)
    assert active is not None and active.version == 2 and active.field is None


def test_identical_schema_adds_no_version() -> None:
    registry = Registry()
    applied(registry, registry.propose(Q, V1))
    assert registry.propose(Q, V1) is None
    assert registry.propose(Q, V1, mode="FULL") == ["schema.compat", Q, "FULL"]
    assert registry.propose(Q, V1.encode()) is None


def test_incompatible_version_is_refused_with_every_reason() -> None:
    registry = Registry()
    applied(registry, registry.propose(Q, V2))
    with pytest.raises(IncompatibleError) as caught:
        registry.propose(Q, V2.replace('"integer"', '"string"').replace(
            '"required": ["id"]', '"required": ["id", "n"]'))
    assert str(caught.value) == (
        'INCOMPATIBLE $.required: the new schema requires property "n", version 1 does not; '
        '$.properties.n.type: the new schema does not accept integer, version 1 does')
    assert [r.path for r in caught.value.reasons] == ["$.required", "$.properties.n.type"]
    assert registry.versions(Q) == [1]  # a refused proposal changes nothing


def test_mode_given_with_set_is_used_and_kept() -> None:
    registry = Registry()
    applied(registry, registry.propose(Q, V2))
    with pytest.raises(IncompatibleError):  # V1 opens V2's model: not FORWARD, ...
        registry.propose(Q, V1, mode="forward")
    assert registry.mode(Q) is Mode.BACKWARD
    applied(registry, registry.propose(Q, V1, mode="backward_transitive"))  # ... but BACKWARD
    assert registry.mode(Q) is Mode.BACKWARD_TRANSITIVE
    assert registry.propose_compat(Q, "BACKWARD_TRANSITIVE") is None
    applied(registry, registry.propose_compat(Q, "none"))
    assert registry.mode(Q) is Mode.NONE
    applied(registry, registry.propose(Q, '{"type": "string"}'))
    assert registry.versions(Q) == [1, 2, 3]


def test_mode_before_first_version_and_drop() -> None:
    registry = Registry()
    assert registry.mode(Q) is Mode.BACKWARD
    assert registry.propose_drop(Q) is None
    applied(registry, registry.propose_compat(Q, "FULL"))
    assert registry.mode(Q) is Mode.FULL and registry.validator(Q) is None
    applied(registry, registry.propose(Q, V1))
    assert applied(registry, registry.propose_drop(Q)) == ["schema.drop", Q]
    assert registry.versions(Q) == [] and registry.mode(Q) is Mode.BACKWARD
    assert applied(registry, registry.propose(Q, V2))[2] == 1


def test_check_does_not_change_state() -> None:
    registry = Registry()
    assert registry.check(Q, V1) == []
    applied(registry, registry.propose(Q, V1))
    [reason] = registry.check(Q, '{"type": "string"}')
    assert str(reason) == "$.type: the new schema does not accept object, version 1 does"
    assert registry.check(Q, '{"type": "string"}', "NONE") == []
    with pytest.raises(SchemaError, match=r"^ERR invalid schema: not JSON"):
        registry.check(Q, "{")
    assert registry.versions(Q) == [1]


def test_field_is_inherited_and_cannot_change() -> None:
    registry = Registry()
    applied(registry, registry.propose(Q, V1, field="payload"))
    applied(registry, registry.propose(Q, V1.replace('"id"]', '"id"], "title": "x"')))
    active = registry.validator(Q)
    assert active is not None and active.field == "payload" and active.version == 2
    with pytest.raises(CommandError, match=r"^ERR FIELD cannot change from 'payload' to 'doc'"):
        registry.propose(Q, V1, field="doc")


def test_bad_inputs() -> None:
    registry = Registry()
    with pytest.raises(SchemaError, match=r"^ERR invalid schema: not UTF-8 text$"):
        registry.propose(Q, b"\xff")
    with pytest.raises(SchemaError, match=r"^ERR invalid schema at \$\['\$ref'\]: .* is remote"):
        registry.propose(Q, '{"$ref": "http://example.com/s.json"}')
    with pytest.raises(CommandError, match=r"^ERR unknown compatibility mode 'SOMETIMES'$"):
        registry.propose(Q, V1, mode="SOMETIMES")
    with pytest.raises(AssertionError):
        registry.apply(["schema.set", Q, 5, V1, None, "BACKWARD"])
    with pytest.raises(AssertionError):
        registry.apply(["schema.nope", Q])


def test_replay_and_snapshot_rebuild_the_same_state() -> None:
    registry, ops = Registry(), []
    for key, text, mode, field in [
        (b"a", V1, None, None), (b"a", V2, "NONE", None), (b"b", V1, None, "doc"),
    ]:
        ops.append(applied(registry, registry.propose(key, text, mode, field)))
    ops.append(applied(registry, registry.propose_compat(b"c", "NONE")))
    ops.append(applied(registry, registry.propose_drop(b"b")))
    ops.append(applied(registry, registry.propose(b"b", V2)))

    replayed = Registry.from_snapshot(msgpack.unpackb(msgpack.packb(ops), raw=False))
    snapshot = msgpack.unpackb(msgpack.packb(registry.snapshot()), raw=False)
    compacted = Registry.from_snapshot(snapshot)
    for other in (replayed, compacted):
        keys = registry.keys()
        assert other.keys() == keys
        for key in keys:
            assert other.versions(key) == registry.versions(key)
            assert other.mode(key) is registry.mode(key)
            for number in registry.versions(key):
                mine, theirs = registry.get(key, number), other.get(key, number)
                assert mine is not None and theirs is not None
                assert (mine.text, mine.field) == (theirs.text, theirs.field)
    assert compacted.snapshot() == snapshot


# ---------------------------------------------------------------------------
# Produce time
# ---------------------------------------------------------------------------


def active_for(text: str, field: str | None = None) -> Any:
    registry = Registry()
    applied(registry, registry.propose(Q, text, field=field))
    return registry.validator(Q)


@pytest.mark.parametrize(("payload", "error"), [
    (b'{"id": "x"}', None),
    (b' {"id": "x"}\n', None),
    (b'{"id": 1}', 'SCHEMA $.id: 1 is not of type "string" (version 1)'),
    (b"{}", None),  # only "required": checked below
    (b"[]", "SCHEMA $: "),
    (b"", "SCHEMA $: invalid JSON: Expecting value: line 1 column 1 (char 0) (version 1)"),
    (b'{"id": "x"} {}', "SCHEMA $: invalid JSON: Extra data"),
    (b'{"id": NaN}', "SCHEMA $: invalid JSON: NaN is not JSON (version 1)"),
    (b'{"id": Infinity}', "SCHEMA $: invalid JSON: Infinity is not JSON (version 1)"),
    (b'{"id": "\xff"}', "SCHEMA $: invalid JSON: not UTF-8 (version 1)"),
    (b"[" * 100_000, "SCHEMA $: invalid JSON: "),
    (b"1" * 5000, "SCHEMA $: invalid JSON: "),
])
def test_push_payloads(payload: bytes, error: str | None) -> None:
    active = active_for(V1.replace(', "required": ["id"]', ""))
    if error is None:
        active.check_payload(payload)
        return
    with pytest.raises(PayloadError) as caught:
        active.check_payload(payload)
    assert str(caught.value).startswith(error), str(caught.value)
    assert str(caught.value).endswith("(version 1)")


def test_required_and_nested_paths() -> None:
    active = active_for('{"type": "object", "properties": {"items": {"type": "array",'
                        ' "items": {"required": ["name"]}}}}')
    with pytest.raises(PayloadError) as caught:
        active.check_payload(b'{"items": [{"name": 1}, {"name": 2}, {}]}')
    assert caught.value.path == "$.items[2]" and "name" in caught.value.reason
    assert str(caught.value).startswith("SCHEMA $.items[2]: ")


@pytest.mark.parametrize(("fields", "error"), [
    ([b"id", b"x"], None),
    ([b"id", b"x", b"n", b"1"], None),  # values are strings: "1" is a string
    ([b"n", b"1"], "SCHEMA $: "),
    ([b"id", b"x", b"id", b"y"], "SCHEMA $.id: field given twice (version 1)"),
    ([b"id", b"\xff"], "SCHEMA $: field pair 1 is not UTF-8 text (version 1)"),
])
def test_xadd_fields_form_an_object_of_strings(fields: list[bytes], error: str | None) -> None:
    active = active_for(V1)
    if error is None:
        active.check_fields(fields)
        return
    with pytest.raises(PayloadError) as caught:
        active.check_fields(fields)
    assert str(caught.value).startswith(error), str(caught.value)


@pytest.mark.parametrize(("fields", "error"), [
    ([b"doc", b'{"id": "x"}', b"other", b"anything"], None),
    ([b"doc", b'{"id": 5}'], 'SCHEMA $.id: 5 is not of type "string" (version 1)'),
    ([b"doc", b"{"], "SCHEMA $: invalid JSON: "),
    ([b"other", b"{}"], "SCHEMA $: missing field 'doc' holding the JSON document (version 1)"),
    ([b"doc", b"{}", b"doc", b"{}"], "SCHEMA $: field 'doc' given twice (version 1)"),
])
def test_xadd_with_field_parses_that_value(fields: list[bytes], error: str | None) -> None:
    active = active_for(V1, field="doc")
    if error is None:
        active.check_fields(fields)
        return
    with pytest.raises(PayloadError) as caught:
        active.check_fields(fields)
    assert str(caught.value).startswith(error), str(caught.value)


def test_helpers_return_violations() -> None:
    validator = compile({"type": "object", "required": ["a"]})
    assert validate_payload(validator, b'{"a": 1}') is None
    assert validate_payload(validator, b"{}") == ("$", "\"a\" is a required property")
    assert validate_fields(validator, [b"a", b"1"], None) is None
    assert validate_fields(validator, [b"x", b'{"a": 1}'], "x") is None


def test_errors_are_command_errors() -> None:
    error = PayloadError("$.a", "bad\nvalue", 3)
    assert isinstance(error, CommandError) and error.code == "SCHEMA"
    assert str(error) == "SCHEMA $.a: bad value (version 3)"
    assert str(SchemaError("x", "$.a")) == "ERR invalid schema at $.a: x"
    assert str(SchemaError("x")) == "ERR invalid schema: x"
