"""narad/schema/validate.py: what a valid schema is, and that the compiled validator
gives python-jsonschema's verdict on every document (the fast backend is proven
equivalent on a fixed corpus and by property tests)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from narad.schema import SchemaError, compile, load
from narad.schema._document import json_path
from narad.schema.validate import HAVE_RUST, multiple_of, reference_validator
from tests.schema.strategies import json_values, schemas

D7 = "http://json-schema.org/draft-07/schema#"
D2020 = "https://json-schema.org/draft/2020-12/schema"

# ---------------------------------------------------------------------------
# Which schemas are refused, and how
# ---------------------------------------------------------------------------

REFUSED = [
    ("{", "invalid schema: not JSON"),
    ('{"type": "string"} x', "invalid schema: not JSON"),
    ('{"minimum": NaN}', "NaN is not JSON"),
    ('{"type": "string", "type": "integer"}', "duplicate key 'type'"),
    ("[]", "a schema is an object or a boolean, not an array"),
    ('"string"', "not a string"),
    ('{"type": "strin"}', "invalid schema at $.type:"),
    ('{"properties": {"a": {"minLength": -1}}}', "at $.properties.a.minLength:"),
    ('{"pattern": "("}', "at $.pattern: '(' is not a 'regex'"),
    # regexes outside native.py's linear-time subset, named with the construct
    (r'{"pattern": "^(a)\\1$"}', r"at $.pattern: pattern '^(a)\\1$' uses the backreference"),
    ('{"pattern": "(?<=a)b"}', "uses the lookaround '(?<=...)'"),
    ('{"pattern": "(?i)^abc$"}', "uses the inline flag"),
    (r'{"pattern": "^[a-z]+\\Z"}', r"uses the anchor '\Z'"),
    (r'{"properties": {"a": {"propertyNames": {"pattern": "\\bx"}}}}',
     r"at $.properties.a.propertyNames.pattern: pattern '\\bx' uses the word boundary '\b'"),
    (r'{"patternProperties": {"^\\B$": {}}}',
     r"at $.patternProperties['^\\B$']: pattern '^\\B$' uses the word boundary '\B'"),
    (r'{"pattern": "^\\w{500}$"}', "larger than the engine's compiled-size limit"),
    ('{"pattern": "(a{1000}){1000}"}', "larger than the engine's compiled-size limit"),
    (r'{"\ud800": 1}', r"invalid schema at $: the name '\ud800' holds a lone surrogate"),
    (r'{"properties": {"a": {"const": "a\udc00"}}}',
     r"at $.properties.a.const: the string 'a\udc00' holds a lone surrogate"),
    ('{"items": [{"type": "string"}]}', "at $.items:"),  # array form is draft-07 only
    ('{"$ref": "http://example.com/s.json"}',
     "at $['$ref']: $ref 'http://example.com/s.json' is remote"),
    ('{"$ref": "other.json"}', "is remote"),
    ('{"$ref": "other.json#/$defs/a"}', "is remote"),
    ('{"$id": "http://example.com/root.json", "$ref": "http://example.com/root.json#/$defs/a",'
     ' "$defs": {"a": {}}}', "is remote"),
    ('{"properties": {"a": {"$ref": "https://json-schema.org/draft/2020-12/schema"}}}',
     "at $.properties.a['$ref']"),
    ('{"$dynamicRef": "http://example.com/x"}', "is remote"),
    ('{"$ref": "#/$defs/missing"}', "points to nothing in the document"),
    ('{"$ref": "#nowhere"}', "names no anchor"),
    ('{"$ref": "#/required", "required": ["a"]}', "does not point to a schema"),
    ('{"$ref": "#"}', "at $: this reference cycle never descends into the document"),
    ('{"anyOf": [{"type": "string"}, {"$ref": "#"}]}', "never descends"),
    ('{"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"allOf": [{"$ref": "#/$defs/a"}]}},'
     ' "$ref": "#/$defs/a"}', "never descends"),
    ('{"properties": {"a": {"$id": "http://example.com/a"}}}',
     "at $.properties.a: $id is only allowed at the root"),
    ('{"properties": {"a": {"$schema": "' + D7 + '"}}}', "$schema is only allowed at the root"),
    ('{"$schema": "http://json-schema.org/draft-04/schema#"}', "is not supported"),
    ('{"$schema": "https://json-schema.org/draft/2019-09/schema"}', "is not supported"),
    ('{"$ref": "#/x", "x": {"$ref": "http://example.com/y"}}', "is remote"),
]


@pytest.mark.parametrize(("text", "fragment"), REFUSED)
def test_refused_schemas_say_why(text: str, fragment: str) -> None:
    with pytest.raises(SchemaError) as caught:
        load(text)
    message = str(caught.value)
    assert message.startswith("ERR invalid schema"), message
    assert fragment in message, message


def test_refusals_as_bytes_and_sizes() -> None:
    with pytest.raises(SchemaError, match=r"not JSON: .*utf-8"):
        load(b'{"title": "\xff"}')
    with pytest.raises(SchemaError, match=r"longer than"):
        load(" " * (1 << 20) + "{}")
    with pytest.raises(SchemaError, match=r"nested too deeply"):
        load('{"not":' * 3000 + "{}" + "}" * 3000)


ACCEPTED = [
    "true",
    "false",
    "{}",
    '{"$defs": {"a": {"type": "string"}}, "$ref": "#/$defs/a"}',
    '{"$defs": {"a b": {"type": "string"}, "c/d": {}}, "properties": {'
    '"x": {"$ref": "#/$defs/a%20b"}, "y": {"$ref": "#/$defs/c~1d"}}}',
    '{"$defs": {"a": {"$anchor": "thing", "type": "integer"}}, "$ref": "#thing"}',
    '{"$id": "https://example.com/s", "properties": {"a": {"$ref": "#"}}}',
    '{"type": "object", "properties": {"next": {"$ref": "#"}}}',
    '{"$schema": "' + D2020 + '", "prefixItems": [{"type": "string"}]}',
    '{"$schema": "' + D7 + '", "items": [{"type": "string"}], "additionalItems": false}',
    '{"$schema": "' + D7 + '", "definitions": {"a": {"$id": "#a", "type": "string"}},'
    ' "$ref": "#a"}',
    '{"properties": {"$ref": {"type": "string"}}, "enum": [{"$ref": "http://x"}]}',
]


@pytest.mark.parametrize("text", ACCEPTED)
def test_accepted_schemas(text: str) -> None:
    assert load(text) == json.loads(text)


def test_draft_07_by_its_schema_uri() -> None:
    tuple_schema = {"items": [{"type": "string"}], "additionalItems": False}
    d7 = compile({"$schema": D7, **tuple_schema})
    assert d7.draft == "draft-07"
    assert d7.is_valid(["a"]) and not d7.is_valid([1]) and not d7.is_valid(["a", "b"])
    with pytest.raises(SchemaError):
        compile(tuple_schema)
    # draft-07 ignores the siblings of $ref; 2020-12 applies them.
    ref = {"definitions": {"s": {"type": "string"}}, "$ref": "#/definitions/s", "maxLength": 1}
    assert compile({"$schema": D7, **ref}).is_valid("long")
    assert not compile(ref).is_valid("long")
    assert compile({"$schema": D7.rstrip("#"), "type": "null"}).draft == "draft-07"


def test_format_is_an_annotation_in_both_drafts() -> None:
    for schema in ({"format": "email"}, {"$schema": D7, "format": "date-time"}):
        assert compile(schema).is_valid("not that format")


def test_nothing_is_fetched(monkeypatch: pytest.MonkeyPatch) -> None:
    import urllib.request

    def no_network(*args: object, **kwargs: object) -> None:
        raise AssertionError("a schema made the validator fetch something")

    monkeypatch.setattr(urllib.request, "urlopen", no_network)
    with pytest.raises(SchemaError):
        compile({"$ref": "https://json-schema.org/draft/2020-12/schema"})
    assert compile({"$id": "https://example.com/s", "$ref": "#/$defs/a",
                    "$defs": {"a": {"type": "null"}}}).is_valid(None)


# ---------------------------------------------------------------------------
# Errors: path and reason of one violation
# ---------------------------------------------------------------------------

ORDER = {
    "type": "object",
    "properties": {
        "items": {"type": "array", "items": {
            "type": "object", "properties": {"name": {"type": "string"}}}},
        "total": {"type": "number", "minimum": 0},
        "code": {"type": "string", "pattern": "^[A-Z]{3}$"},
    },
    "required": ["total"],
}


@pytest.mark.parametrize("backend", ["auto", "reference"])
@pytest.mark.parametrize(("doc", "path", "fragment"), [
    ({"total": 1, "items": [{}, {}, {"name": 3}]}, "$.items[2].name", "3"),
    ({"total": -1}, "$.total", "-1"),
    ({}, "$", "total"),
    ({"total": 1, "code": "usd"}, "$.code", "does not match"),
    ("x", "$", "object"),
])
def test_first_error(backend: Any, doc: Any, path: str, fragment: str) -> None:
    validator = compile(ORDER, backend)
    assert validator.first_error({"total": 0}) is None
    error = validator.first_error(doc)
    assert error is not None and error[0] == path and fragment in error[1]


def test_reasons_are_clipped() -> None:
    error = compile({"maxLength": 1}).first_error("x" * 10_000)
    assert error is not None and len(error[1]) <= 300 and "\n" not in error[1]


def test_json_paths() -> None:
    assert json_path(()) == "$"
    assert json_path(("items", 2, "name")) == "$.items[2].name"
    assert json_path(("a b", "it's", "$ref", "_x1")) == "$['a b']['it\\'s']['$ref']._x1"


@pytest.mark.skipif(not HAVE_RUST, reason="jsonschema-rs is not installed")
def test_backend_choice() -> None:
    assert compile({"type": "string", "pattern": "^a$"}).backend == "rust"
    assert compile({"patternProperties": {"^a$": {}}}).backend == "reference"
    assert compile({"properties": {"p": {"patternProperties": {"x": {}}}}}).backend == "reference"
    assert compile({"type": "string"}, "reference").backend == "reference"


# ---------------------------------------------------------------------------
# Equivalence with jsonschema
# ---------------------------------------------------------------------------

# Each entry: a schema and documents that separate jsonschema from naive engines.
CORPUS: list[tuple[Any, list[Any]]] = [
    ({"pattern": "^a$"}, ["a", "a\n", "ab", "\na", 1]),
    ({"pattern": "^[0-9]+$"}, ["12", "\u0661\u0662", "1a", "", "1\n"]),
    ({"pattern": "^\\d+$"}, ["12", "\u0661\u0662", "1a", "", "1\n", "\u00b2", "\U0001d7d8"]),
    ({"pattern": "^\\w+$"}, ["é", "a_1", "a-b", "e\u0301", "\u216b", "\u200d", "\ud800"]),
    ({"pattern": "\\s"}, ["\u00a0", "a b", "ab", "\x1c", "\u200b", "\u3000"]),
    ({"pattern": "^[^\\W\\d]+$"}, ["ab", "a1", "é", "_", "\ufffd", "\udc00"]),
    ({"pattern": "^a|b$"}, ["ab", "xb\n", "ba", "xa"]),
    ({"pattern": "^.$"}, ["\n", "😀", "é", "\ud800"]),
    ({"propertyNames": {"pattern": "^a$"}}, [{"a": 1}, {"a\n": 1}, {"b": 1}]),
    ({"patternProperties": {"^[0-9]$": {"type": "string"}}, "additionalProperties": False},
     [{"1": "x"}, {"\u0661": "x"}, {"1": 1}, {"a": "x"}, {"1\n": "x"}]),
    ({"patternProperties": {"^\\d$": {"type": "string"}}, "additionalProperties": False},
     [{"1": "x"}, {"\u0661": "x"}, {"1": 1}, {"a": "x"}, {"\u00b2": "x"}]),
    ({"propertyNames": {"pattern": "^\\S+$"}}, [{"a": 1}, {"a b": 1}, {"\x1c": 1}, {"": 1}]),
    ({"patternProperties": {"^a": {}, "b$": {}}, "additionalProperties": False},
     [{"ax": 1}, {"xb": 1}, {"xb\n": 1}, {"ba": 1}]),
    ({"patternProperties": {"^a": {}}, "unevaluatedProperties": False},
     [{"ax": 1}, {"xa": 1}]),
    ({"multipleOf": 0.1}, [0.3, 0.2, 1, 0.7, 3]),
    ({"multipleOf": 0.01}, [19.99, 0.07, 1]),
    ({"multipleOf": 3}, [9, 9.0, 10, 1e308, 3 * 2**70, 3 * 2**70 + 1]),
    ({"multipleOf": 1e-308}, [1, 0.5]),
    ({"multipleOf": 2}, [True, 4, 5.5]),
    ({"type": "integer"}, [1, 1.0, 1.5, True, 2**70, -(2**70), "1"]),
    ({"type": "number"}, [1, 1.5, True, None]),
    ({"maximum": 2**64}, [2**64, 2**65, 1.8446744073709552e19]),
    ({"minimum": 0}, [10**400, -(10**400), 0, -0.0]),
    ({"exclusiveMaximum": 1.5}, [1, 1.5, 1.4999999999999998]),
    ({"enum": [1, "a", None, [1], {"a": 1}]}, [1, 1.0, True, "a", None, [1], [True], {"a": 1}]),
    ({"enum": [False, 0]}, [False, 0, 0.0, None]),
    ({"const": [1]}, [[1], [True], [1.0]]),
    ({"const": False}, [0, False]),
    ({"const": {"a": [1, {"b": None}]}}, [{"a": [1, {"b": None}]}, {"a": [1, {"b": 0}]}]),
    ({"uniqueItems": True}, [[1, 1.0], [1, True], [0, False], [{"a": 1}, {"a": True}],
                             [[1], [1]], [{"a": 1, "b": 2}, {"b": 2, "a": 1}]]),
    ({"maxLength": 1}, ["😀", "e\u0301", "", "ab"]),
    ({"minLength": 2}, ["😀", "ab"]),
    ({"format": "email"}, ["nope"]),
    ({"type": "object", "required": ["a"], "properties": {"a": {"type": "string"}},
      "additionalProperties": False}, [{"a": "x"}, {"a": "x", "b": 1}, {}, {"a": 1}]),
    ({"minProperties": 1, "maxProperties": 2}, [{}, {"a": 1}, {"a": 1, "b": 2, "c": 3}, []]),
    ({"prefixItems": [{"type": "string"}], "items": {"type": "integer"}, "minItems": 1,
      "maxItems": 3}, [["a"], ["a", 1], [1], ["a", "b"], [], ["a", 1, 2, 3]]),
    ({"contains": {"type": "string"}, "minContains": 2, "maxContains": 3},
     [["a", "b"], ["a"], [1, 2], ["a", "b", "c", "d"]]),
    ({"contains": {"type": "string"}, "minContains": 0}, [[], [1]]),
    ({"dependentRequired": {"a": ["b"]}}, [{"a": 1}, {"a": 1, "b": 2}, {"b": 1}]),
    ({"dependentSchemas": {"a": {"required": ["c"]}}}, [{"a": 1}, {"a": 1, "c": 1}]),
    ({"if": {"type": "string"}, "then": {"minLength": 2}, "else": {"type": "integer"}},
     ["ab", "a", 1, 1.5]),
    ({"not": {"type": "string"}}, ["a", 1]),
    ({"anyOf": [{"type": "string"}, {"minimum": 3}]}, ["a", 2, 4]),
    ({"oneOf": [{"type": "integer"}, {"minimum": 3}]}, [1, 4, 3.5]),
    ({"allOf": [{"type": "integer"}, {"minimum": 3}]}, [1, 4, 3.5]),
    ({"unevaluatedProperties": False, "properties": {"a": {}},
      "allOf": [{"properties": {"b": {}}}]}, [{"a": 1, "b": 2}, {"c": 1}]),
    ({"unevaluatedItems": False, "prefixItems": [{}]}, [[1], [1, 2]]),
    ({"$defs": {"node": {"type": "object", "properties": {
        "v": {"type": "integer"}, "next": {"$ref": "#/$defs/node"}}}},
      "$ref": "#/$defs/node"}, [{"v": 1, "next": {"v": 2, "next": {"v": "x"}}},
                                {"v": 1, "next": {"v": 2}}]),
    ({"$defs": {"a": {"$anchor": "A", "type": "string"}}, "items": {"$ref": "#A"}},
     [["x"], [1]]),
    ({"$ref": "#/$defs/s", "maxLength": 2, "$defs": {"s": {"type": "string"}}},
     ["ab", "abc", 1]),
    ({"$schema": D7, "definitions": {"s": {"type": "string"}}, "$ref": "#/definitions/s",
      "maxLength": 2}, ["abc", 1]),
    ({"$schema": D7, "items": [{"type": "string"}], "additionalItems": {"type": "integer"}},
     [["a", 1], ["a", "b"], []]),
    ({"$schema": D7, "dependencies": {"a": ["b"], "c": {"required": ["d"]}}},
     [{"a": 1}, {"a": 1, "b": 1}, {"c": 1}, {"c": 1, "d": 1}]),
    ({"$schema": D7, "prefixItems": [{"type": "string"}]}, [[1]]),
    ({"$schema": D7, "exclusiveMinimum": 1, "multipleOf": 0.5}, [1, 1.5, 1.25]),
    ({"$dynamicAnchor": "n", "type": "object", "properties": {
        "c": {"$dynamicRef": "#n"}}}, [{"c": {"c": {}}}, {"c": 1}]),
    (True, [1, None, {}]),
    (False, [1, None, {}]),
    ({"type": ["string", "null"], "maxLength": 2}, ["ab", "abc", None, 1]),
    ({"properties": {"a b": {"type": "integer"}, "": {"type": "null"}}},
     [{"a b": 1}, {"a b": "1"}, {"": None}, {"": 0}]),
]


def _verdicts(schema: Any, docs: list[Any]) -> None:
    validator = compile(schema)
    reference = reference_validator(schema)
    for doc in docs:
        expected = reference.is_valid(doc)
        assert validator.is_valid(doc) is expected, (schema, doc, validator.backend)
        assert (validator.first_error(doc) is None) is expected, (schema, doc)


@pytest.mark.parametrize(("schema", "docs"), CORPUS)
def test_corpus_verdicts_equal_jsonschema(schema: Any, docs: list[Any]) -> None:
    _verdicts(schema, docs)


PATTERN_CORPUS = [(s, d) for s, d in CORPUS if isinstance(s, dict) and list(s) == ["pattern"]]


@pytest.mark.parametrize(("schema", "docs"), PATTERN_CORPUS)
def test_corpus_patterns_are_re_search(schema: Any, docs: list[Any]) -> None:
    """The reference's `re` is native.search: the patterns are held to `re` itself too."""
    validator = compile(schema)
    for doc in docs:
        expected = not isinstance(doc, str) or re.search(schema["pattern"], doc) is not None
        assert validator.is_valid(doc) is expected, (schema, doc)
        assert (validator.first_error(doc) is None) is expected, (schema, doc)


def test_multiple_of_is_jsonschema_rule() -> None:
    assert not multiple_of(0.3, 0.1) and multiple_of(0.5, 0.1)
    assert multiple_of(10**400, 0.5) and not multiple_of(10**400 + 1, 2)


SETTINGS = settings(max_examples=150, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@SETTINGS
@given(schema=schemas(), docs=st.lists(json_values(), max_size=8))
def test_random_verdicts_equal_jsonschema(schema: Any, docs: list[Any]) -> None:
    _verdicts(schema, docs)


@SETTINGS
@given(schema=schemas(), data=st.data())
def test_generated_documents_verdicts_equal_jsonschema(schema: Any, data: st.DataObject) -> None:
    hypothesis_jsonschema = pytest.importorskip("hypothesis_jsonschema")
    try:
        strategy = hypothesis_jsonschema.from_schema(schema)
    except Exception:
        return
    docs = []
    for _ in range(4):
        try:
            docs.append(data.draw(strategy))
        except Exception:
            break
    _verdicts(schema, docs)


def test_a_server_without_schemas_loads_no_schema_engine() -> None:
    """jsonschema, referencing, jsonschema-rs, msgspec, the compatibility checker and
    the registry cost ~50 ms of start-up together: they load on the first schema, not
    before."""
    heavy = [
        "jsonschema",
        "referencing",
        "jsonschema_rs",
        "msgspec",
        "narad.schema.compat",
        "narad.schema.registry",
        "narad.schema.validate",
    ]
    code = (
        "import sys, narad.commands, narad.server, narad.keyspace\n"
        f"print([m for m in {heavy!r} if m in sys.modules])\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
