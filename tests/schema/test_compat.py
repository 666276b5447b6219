"""narad/schema/compat.py on a corpus of evolution pairs: for each pair, the exact set
of reasons (path into the proposed schema, message fragment) under BACKWARD and under
FORWARD; FULL must report both, NONE nothing. Then the transitive modes, reason texts
and the mode names."""

from __future__ import annotations

from typing import Any, NamedTuple

import pytest

from narad.errors import CommandError
from narad.schema import Mode, parse_mode
from narad.schema.compat import accepts_superset, check
from narad.schema.validate import check as check_schema

D7 = "http://json-schema.org/draft-07/schema#"
OBJ = {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]}
CLOSED = {**OBJ, "additionalProperties": False}

Expected = list[tuple[str, str]]  # (path, fragment of the message)


class Case(NamedTuple):
    name: str
    old: Any
    new: Any
    backward: Expected  # [] = compatible
    forward: Expected


def props(**properties: Any) -> dict[str, Any]:
    return {"type": "object", "properties": properties}


CASES = [
    # -- type ----------------------------------------------------------------
    Case("same type", {"type": "string"}, {"type": "string"}, [], []),
    Case("integer widened to number", {"type": "integer"}, {"type": "number"},
         [], [("$.type", "does not accept non-integer number")]),
    Case("number narrowed to integer", {"type": "number"}, {"type": "integer"},
         [("$.type", "does not accept non-integer number")], []),
    Case("type changed", {"type": "string"}, {"type": "integer"},
         [("$.type", "does not accept string")], [("$.type", "does not accept integer")]),
    Case("type list gains null", {"type": "string"}, {"type": ["string", "null"]},
         [], [("$.type", "does not accept null")]),
    Case("type list loses one", {"type": ["string", "integer"]}, {"type": "string"},
         [("$.type", "does not accept integer")], []),
    Case("type added to any", {}, {"type": "object"},
         [("$.type", "accepts any type")], []),
    Case("number list vs integer", {"type": ["integer", "string"]}, {"type": ["number", "string"]},
         [], [("$.type", "non-integer number")]),
    # -- properties / required / additionalProperties ----------------------------
    Case("open model gains typed property", OBJ,
         {**OBJ, "properties": {"a": {"type": "string"}, "b": {"type": "integer"}}},
         [("$.properties.b", "constrains property \"b\"")], []),
    Case("open model gains untyped property", OBJ,
         {**OBJ, "properties": {"a": {"type": "string"}, "b": {"description": "free"}}}, [], []),
    Case("closed model gains optional property", CLOSED,
         {**CLOSED, "properties": {"a": {"type": "string"}, "b": {"type": "integer"}}},
         [], [("$.properties.b", "version 1 does not allow property \"b\"")]),
    Case("closed model gains required property", CLOSED,
         {**CLOSED, "properties": {"a": {"type": "string"}, "b": {"type": "integer"}},
          "required": ["a", "b"]},
         [("$.required", "requires property \"b\"")],
         [("$.properties.b", "does not allow property \"b\"")]),
    Case("property removed from open model", {**OBJ, "required": []},
         {"type": "object", "properties": {}}, [], [("$.properties.a", "constrains property")]),
    Case("property removed from closed model", {**CLOSED, "required": []},
         {"type": "object", "properties": {}, "additionalProperties": False},
         [("$.additionalProperties", "does not allow property \"a\"")], []),
    Case("required added", OBJ, {**OBJ, "required": ["a", "b"]},
         [("$.required", "requires property \"b\"")], []),
    Case("required removed", OBJ, {**OBJ, "required": []},
         [], [("$.required", "requires property \"a\"")]),
    Case("model opened", CLOSED, OBJ, [], [("$.additionalProperties", "accepts nothing")]),
    Case("additionalProperties typed then widened",
         {"type": "object", "additionalProperties": {"type": "integer"}},
         {"type": "object", "additionalProperties": {"type": "number"}},
         [], [("$.additionalProperties.type", "non-integer number")]),
    Case("property type narrowed", props(a={"type": "number"}), props(a={"type": "integer"}),
         [("$.properties.a.type", "non-integer number")], []),
    Case("nested object gains required", props(a=props(b={"type": "string"})),
         props(a={**props(b={"type": "string"}), "required": ["b"]}),
         [("$.properties.a.required", "requires property \"b\"")], []),
    Case("odd property name", props(**{"a b": {"type": "string"}}),
         props(**{"a b": {"type": "integer"}}),
         [("$.properties['a b'].type", "does not accept string")],
         [("$.properties['a b'].type", "does not accept integer")]),
    Case("patternProperties unchanged, property added under a pattern",
         {"type": "object", "patternProperties": {"^x": {"type": "integer"}},
          "additionalProperties": False},
         {"type": "object", "patternProperties": {"^x": {"type": "integer"}},
          "properties": {"xa": {"type": "integer"}}, "additionalProperties": False}, [], []),
    Case("patternProperties changed",
         {"type": "object", "patternProperties": {"^x": {"type": "integer"}}},
         {"type": "object", "patternProperties": {"^x": {"type": "number"}}},
         [("$.patternProperties", "patternProperties")],
         [("$.patternProperties", "patternProperties")]),
    Case("minProperties raised", {"type": "object", "minProperties": 1},
         {"type": "object", "minProperties": 2},
         [("$.minProperties", "requires minProperties 2")], []),
    Case("maxProperties added", {"type": "object"}, {"type": "object", "maxProperties": 3},
         [("$.maxProperties", "requires maxProperties 3")], []),
    # -- enum / const ---------------------------------------------------------
    Case("enum value added", {"enum": ["a", "b"]}, {"enum": ["a", "b", "c"]},
         [], [("$", "refuses \"c\"")]),
    Case("enum value removed", {"enum": ["a", "b"]}, {"enum": ["a"]},
         [("$", "refuses \"b\"")], []),
    Case("enum to type", {"enum": ["a", "b"]}, {"type": "string"},
         [], [("$.enum", "accepts only listed values")]),
    Case("const to enum", {"const": 1}, {"enum": [1, 2]}, [], [("$", "refuses 2")]),
    Case("enum 1 vs 1.0 and true", {"enum": [1]}, {"enum": [1.0]}, [], []),
    Case("enum true is not 1", {"enum": [True]}, {"enum": [1]},
         [("$", "refuses true")], [("$", "refuses 1")]),
    Case("enum values the type excludes", {"type": "string", "enum": ["a", 1]},
         {"type": "string", "enum": ["a"]}, [], []),
    Case("boolean type is finite", {"type": "boolean"}, {"enum": [True, False]}, [], []),
    Case("enum inside array items", {"type": "array", "items": {"enum": ["x", "y"]}},
         {"type": "array", "items": {"enum": ["x"]}},
         [("$.items", "refuses \"y\"")], []),
    # -- numbers --------------------------------------------------------------
    Case("minimum lowered", {"type": "number", "minimum": 5}, {"type": "number", "minimum": 0},
         [], [("$.minimum", "requires minimum 5")]),
    Case("maximum lowered", {"type": "number", "maximum": 10},
         {"type": "number", "maximum": 9},
         [("$.maximum", "requires maximum 9")], []),
    Case("exclusiveMinimum for inclusive integer bound",
         {"type": "integer", "minimum": 1}, {"type": "integer", "exclusiveMinimum": 0},
         [], []),
    Case("exclusiveMinimum on numbers is stricter",
         {"type": "number", "minimum": 1}, {"type": "number", "exclusiveMinimum": 1},
         [("$.exclusiveMinimum", "requires exclusiveMinimum 1")], []),
    Case("exclusiveMaximum to maximum", {"type": "number", "exclusiveMaximum": 10},
         {"type": "number", "maximum": 10},
         [], [("$.exclusiveMaximum", "requires exclusiveMaximum 10")]),
    Case("bound added", {"type": "integer"}, {"type": "integer", "minimum": 0},
         [("$.minimum", "allows no limit")], []),
    Case("bound irrelevant to the type", {"type": "string"}, {"type": "string", "minimum": 3},
         [], []),
    Case("multipleOf divides", {"type": "integer", "multipleOf": 4},
         {"type": "integer", "multipleOf": 2},
         [], [("$.multipleOf", "requires multipleOf 4")]),
    Case("multipleOf float changed", {"type": "number", "multipleOf": 0.2},
         {"type": "number", "multipleOf": 0.1},
         [("$.multipleOf", "requires multipleOf 0.1")],
         [("$.multipleOf", "requires multipleOf 0.2")]),
    Case("multipleOf 1 on integers", {"type": "integer"}, {"type": "integer", "multipleOf": 1},
         [], []),
    # -- strings --------------------------------------------------------------
    Case("maxLength lowered", {"type": "string", "maxLength": 5},
         {"type": "string", "maxLength": 4}, [("$.maxLength", "requires maxLength 4")], []),
    Case("minLength lowered", {"type": "string", "minLength": 3},
         {"type": "string", "minLength": 1}, [], [("$.minLength", "requires minLength 3")]),
    Case("pattern changed", {"type": "string", "pattern": "^a"},
         {"type": "string", "pattern": "^[ab]"},
         [("$.pattern", "only an identical pattern")],
         [("$.pattern", "only an identical pattern")]),
    Case("pattern removed", {"type": "string", "pattern": "^a"}, {"type": "string"},
         [], [("$.pattern", "has no pattern")]),
    Case("format added", {"type": "string"}, {"type": "string", "format": "email"},
         [("$.format", "requires format \"email\"")], []),
    Case("format same", {"type": "string", "format": "date"},
         {"type": "string", "format": "date", "description": "day"}, [], []),
    # -- arrays ---------------------------------------------------------------
    Case("items widened", {"type": "array", "items": {"type": "integer"}},
         {"type": "array", "items": {"type": "number"}},
         [], [("$.items.type", "non-integer number")]),
    Case("items added", {"type": "array"}, {"type": "array", "items": {"type": "string"}},
         [("$.items.type", "accepts any type")], []),
    Case("minItems raised", {"type": "array", "minItems": 1}, {"type": "array", "minItems": 2},
         [("$.minItems", "requires minItems 2")], []),
    Case("maxItems raised", {"type": "array", "maxItems": 2}, {"type": "array", "maxItems": 3},
         [], [("$.maxItems", "requires maxItems 2")]),
    Case("uniqueItems added", {"type": "array"}, {"type": "array", "uniqueItems": True},
         [("$.uniqueItems", "requires unique items")], []),
    Case("uniqueItems added to short arrays", {"type": "array", "maxItems": 1},
         {"type": "array", "maxItems": 1, "uniqueItems": True}, [], []),
    Case("prefixItems gains a position",
         {"type": "array", "prefixItems": [{"type": "string"}]},
         {"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}]},
         [("$.prefixItems[1].type", "accepts any type")], []),
    Case("closed tuple gains optional position",
         {"type": "array", "prefixItems": [{"type": "string"}], "items": False},
         {"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}],
          "items": False},
         [], [("$.prefixItems[1]", "accepts nothing here")]),
    Case("draft-07 tuple to 2020-12 prefixItems",
         {"$schema": D7, "type": "array", "items": [{"type": "string"}],
          "additionalItems": False},
         {"type": "array", "prefixItems": [{"type": "string"}], "items": False}, [], []),
    Case("nested array of objects",
         {"type": "array", "items": props(id={"type": "integer"})},
         {"type": "array", "items": props(id={"type": "string"})},
         [("$.items.properties.id.type", "does not accept integer")],
         [("$.items.properties.id.type", "does not accept string")]),
    Case("contains added", {"type": "array"}, {"type": "array", "contains": {"type": "string"}},
         [("$.contains", "adds or changes contains")], []),
    # -- allOf / anyOf / oneOf ------------------------------------------------
    Case("anyOf gains a branch", {"anyOf": [{"type": "string"}, {"type": "integer"}]},
         {"anyOf": [{"type": "string"}, {"type": "integer"}, {"type": "null"}]},
         [], [("$.anyOf[2]", "version 1 refuses null")]),
    Case("anyOf loses a branch", {"anyOf": [{"type": "string"}, {"type": "integer"}]},
         {"anyOf": [{"type": "string"}]},
         [("$.anyOf", "no branch of anyOf"), ("$.anyOf[0].type", "does not accept integer")],
         []),
    Case("type becomes anyOf", {"type": "string"},
         {"anyOf": [{"type": "string"}, {"type": "null"}]}, [], [("$.anyOf[1]", "refuses null")]),
    Case("allOf split equals merged", {"type": "object", "properties": {"a": {"type": "string"}},
                                       "required": ["a"]},
         {"allOf": [{"type": "object"}, {"properties": {"a": {"type": "string"}}},
                    {"required": ["a"]}]}, [], []),
    Case("allOf gains a constraint", {"allOf": [{"type": "integer"}]},
         {"allOf": [{"type": "integer"}, {"minimum": 0}]},
         [("$.allOf[1].minimum", "allows no limit")], []),
    Case("oneOf tagged union gains a variant",
         {"oneOf": [{"type": "object", "required": ["k"], "properties": {"k": {"const": "a"}}},
                    {"type": "object", "required": ["k"], "properties": {"k": {"const": "b"}}}]},
         {"oneOf": [{"type": "object", "required": ["k"], "properties": {"k": {"const": "a"}}},
                    {"type": "object", "required": ["k"], "properties": {"k": {"const": "b"}}},
                    {"type": "object", "required": ["k"], "properties": {"k": {"const": "c"}}}]},
         [], [("$.oneOf[2]", "exactly one branch")]),
    Case("oneOf with overlapping branches",
         {"type": "integer"}, {"oneOf": [{"type": "integer"}, {"type": "number"}]},
         [("$.oneOf", "exactly one branch")],  # integers match both: only fractions pass
         [("$.oneOf[1].type", "does not accept non-integer number")]),
    Case("oneOf by type", {"type": "string"},
         {"oneOf": [{"type": "string"}, {"type": "integer"}]}, [],
         [("$.oneOf[1].type", "does not accept integer")]),
    Case("not added", {"type": "string"}, {"type": "string", "not": {"const": "x"}},
         [("$.not", "adds or changes not")], []),
    Case("not removed", {"type": "string", "not": {"const": "x"}}, {"type": "string"},
         [], [("$.not", "adds or changes not")]),
    Case("if/then/else unchanged", {"if": {"type": "string"}, "then": {"minLength": 1}},
         {"if": {"type": "string"}, "then": {"minLength": 1}, "title": "t"}, [], []),
    # -- $ref -----------------------------------------------------------------
    Case("ref target widened",
         {"$defs": {"id": {"type": "integer"}}, "properties": {"id": {"$ref": "#/$defs/id"}}},
         {"$defs": {"id": {"type": "number"}}, "properties": {"id": {"$ref": "#/$defs/id"}}},
         [], [("$['$defs'].id.type", "non-integer number")]),
    Case("ref inlined", {"$defs": {"s": {"type": "string"}}, "$ref": "#/$defs/s"},
         {"type": "string"}, [], []),
    Case("recursive schema gains required deep inside",
         {"$defs": {"n": {"type": "object", "properties": {"next": {"$ref": "#/$defs/n"}}}},
          "$ref": "#/$defs/n"},
         {"$defs": {"n": {"type": "object", "properties": {"next": {"$ref": "#/$defs/n"}},
                          "required": ["v"]}}, "$ref": "#/$defs/n"},
         [("$['$defs'].n.required", "requires property \"v\"")], []),
    Case("ref with siblings", {"$defs": {"s": {"type": "string"}}, "$ref": "#/$defs/s"},
         {"$defs": {"s": {"type": "string"}}, "$ref": "#/$defs/s", "maxLength": 3},
         [("$.maxLength", "requires maxLength 3")], []),
    # -- booleans and annotations ---------------------------------------------
    Case("true to schema", True, {"type": "string"}, [("$.type", "accepts any type")], []),
    Case("schema to true", {"type": "string"}, True, [], [("$.type", "accepts any type")]),
    Case("false to anything", False, {"type": "string"}, [], [("$", "accepts nothing here")]),
    Case("annotations only", {"type": "string", "title": "a", "description": "b"},
         {"type": "string", "title": "c", "examples": ["x"], "default": "y", "deprecated": True,
          "readOnly": True, "writeOnly": False, "$comment": "z"}, [], []),
    # -- keywords the checker does not understand ------------------------------
    Case("unknown keyword changed", {"type": "string", "x-unit": "kg"},
         {"type": "string", "x-unit": "g"},
         [("$['x-unit']", "x-unit is not understood")], [("$['x-unit']", "not understood")]),
    Case("unknown keyword removed", {"type": "string", "x-unit": "kg"}, {"type": "string"},
         [("$['x-unit']", "not understood")], [("$['x-unit']", "not understood")]),
    Case("unknown keyword unchanged", {"type": "string", "x-unit": "kg"},
         {"type": "string", "x-unit": "kg", "title": "w"}, [], []),
    Case("unevaluatedProperties changed",
         {"type": "object", "unevaluatedProperties": False},
         {"type": "object", "properties": {"a": {}}, "unevaluatedProperties": False},
         [("$.unevaluatedProperties", "only an unchanged node")],
         [("$.unevaluatedProperties", "only an unchanged node")]),
    Case("dependentRequired added", {"type": "object"},
         {"type": "object", "dependentRequired": {"a": ["b"]}},
         [("$.dependentRequired", "adds or changes dependentRequired")], []),
    Case("propertyNames unchanged", {"type": "object", "propertyNames": {"maxLength": 3}},
         {"type": "object", "propertyNames": {"maxLength": 3}, "maxProperties": 9},
         [("$.maxProperties", "requires maxProperties 9")], []),
    # -- several reasons at once ----------------------------------------------
    Case("every reason reported",
         props(a={"type": "string", "maxLength": 9}, b={"type": "integer"}),
         {**props(a={"type": "string", "maxLength": 5}, b={"type": "string"}),
          "required": ["a"]},
         [("$.properties.a.maxLength", "requires maxLength 5"),
          ("$.properties.b.type", "does not accept integer"),
          ("$.required", "requires property \"a\"")],
         [("$.properties.b.type", "does not accept string")]),
]


def _match(reasons: list[Any], expected: Expected) -> None:
    assert sorted({r.path for r in reasons}) == sorted({p for p, _ in expected}), reasons
    for path, fragment in expected:
        assert any(r.path == path and fragment in r.message for r in reasons), (
            path, fragment, [str(r) for r in reasons])


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_corpus(case: Case) -> None:
    check_schema(case.old)
    check_schema(case.new)
    _match(check([case.old], case.new, Mode.BACKWARD), case.backward)
    _match(check([case.old], case.new, Mode.FORWARD), case.forward)
    _match(check([case.old], case.new, Mode.FULL), case.backward + case.forward)
    assert check([case.old], case.new, Mode.NONE) == []


def test_corpus_size() -> None:
    assert len(CASES) >= 60
    assert sum(1 for c in CASES if c.backward) >= 25
    assert sum(1 for c in CASES if not c.backward) >= 25


# ---------------------------------------------------------------------------
# Modes, transitivity and reason texts
# ---------------------------------------------------------------------------

V1 = {"type": "object", "properties": {"a": {"type": "string"}}}
V2 = {"type": "object", "properties": {"a": {"type": "string"}, "b": {}}}
V3 = {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "integer"}}}


def test_transitive_modes_check_every_version() -> None:
    olds = [V1, V2, V2]
    # v2 allowed any b: v3 typing it breaks BACKWARD against v2 and v1 alike.
    assert check(olds, V3, Mode.BACKWARD)
    closed = [{**V1, "additionalProperties": False}, V2]
    assert check(closed, V3, Mode.FORWARD) == []
    assert [str(r) for r in check(closed, V3, Mode.FORWARD_TRANSITIVE)] == [
        "$.properties.b: version 1 does not allow property \"b\", the new schema does",
        "$.additionalProperties: version 1 accepts nothing here, the new schema accepts values",
    ]
    assert check(closed, V3, Mode.FULL_TRANSITIVE)
    assert check([{"type": "integer"}, {"type": "number"}], {"type": "number"},
                 Mode.BACKWARD) == []
    reasons = check([{"type": "integer"}, {"type": "number"}], {"type": "number"},
                    Mode.FULL_TRANSITIVE)
    assert [str(r) for r in reasons] == [
        "$.type: version 1 does not accept non-integer number, the new schema does"]
    assert check([{"type": "string"}], {"type": "integer"},
                 Mode.BACKWARD_TRANSITIVE) != []


def test_no_previous_version_is_compatible() -> None:
    for mode in Mode:
        assert check([], {"type": "string"}, mode) == []


def test_reason_text_names_both_sides() -> None:
    [reason] = check([{"type": "integer"}], {"type": "integer", "maximum": 3})
    assert str(reason) == (
        "$.maximum: the new schema requires maximum 3, version 1 allows no limit")
    [reason] = check([{"type": "integer", "maximum": 3}], {"type": "integer"}, Mode.FORWARD)
    assert str(reason) == "$.maximum: version 1 requires maximum 3, the new schema allows no limit"


def test_accepts_superset_directly() -> None:
    assert accepts_superset({"type": "number"}, {"type": "integer"}) == []
    [reason] = accepts_superset({"type": "integer"}, {"type": "number"})
    assert reason.path == "$.type" and "the wide schema" in reason.message


def test_modes_parse() -> None:
    assert parse_mode("backward") is Mode.BACKWARD
    assert parse_mode(b"FULL_TRANSITIVE") is Mode.FULL_TRANSITIVE
    assert parse_mode(Mode.NONE) is Mode.NONE
    with pytest.raises(CommandError, match=r"^ERR unknown compatibility mode 'SIDEWAYS'$"):
        parse_mode("SIDEWAYS")
    assert [m for m in Mode if m.backward] == [
        Mode.BACKWARD, Mode.BACKWARD_TRANSITIVE, Mode.FULL, Mode.FULL_TRANSITIVE]
    assert [m for m in Mode if m.transitive] == [
        Mode.BACKWARD_TRANSITIVE, Mode.FORWARD_TRANSITIVE, Mode.FULL_TRANSITIVE]


def test_dynamic_refs_need_an_unchanged_schema() -> None:
    tree = {"$dynamicAnchor": "n", "type": "object", "properties": {"c": {"$dynamicRef": "#n"}}}
    assert check([tree], dict(tree)) == []
    [reason] = check([tree], {**tree, "title": "x", "maxProperties": 3})
    assert reason.path == "$" and "$dynamicRef" in reason.message


def test_huge_schemas_give_up_as_incompatible() -> None:
    deep: Any = {"type": "string"}
    for _ in range(200):
        deep = {"type": "array", "items": deep}
    reasons = check([deep], deep)  # identical: cancelled before any limit
    assert reasons == []
    wider = {"type": "array", "items": {"type": "array", "items": deep}}
    [reason] = check([deep], wider)
    assert "too large or deep" in reason.message
