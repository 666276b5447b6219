"""Hypothesis strategies: random small schemas, random evolutions of them, and JSON
values. The schemas stay in the subset that draft-07 and 2020-12 read alike (no
`$ref`, no array-form `items`), so hypothesis-jsonschema can generate documents
from them."""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import strategies as st

NAMES = ["a", "b", "c", "d"]
PATTERNS = ["^a", "^[a-z]+$", "^\\d+$", "\\w", "^[0-9]+$", "[a-zA-Z0-9_]", "b$", "^.{0,3}$",
            "^a|b$", "^\\S+$"]
SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(-5, 5), st.sampled_from([0.5, 1.5, -2.5, 2.0]),
    st.sampled_from(["", "a", "b", "ab", "12", "x y"]),
)
TYPES = ["null", "boolean", "integer", "number", "string", "array", "object"]


def json_values(depth: int = 2) -> st.SearchStrategy[Any]:
    """Any JSON value, small, with the awkward ones (1.0, big ints, unicode digits)."""
    leaves = st.one_of(
        SCALARS, st.integers(), st.floats(allow_nan=False, allow_infinity=False),
        st.text(max_size=6),
        st.sampled_from(["a\n", "\u0661\u0662", "é", "abc", "1.0", 2**70, "\u00b2", "a\u3000b",
                         "e\u0301"]),
    )
    return st.recursive(
        leaves,
        lambda inner: st.one_of(
            st.lists(inner, max_size=4),
            st.dictionaries(st.sampled_from([*NAMES, "e", "ab"]), inner, max_size=4),
        ),
        max_leaves=8,
    )


@st.composite
def _numeric(draw: st.DrawFn) -> dict[str, Any]:
    node: dict[str, Any] = {"type": draw(st.sampled_from(["integer", "number"]))}
    for key in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
        if draw(st.booleans()):
            node[key] = draw(st.one_of(st.integers(-10, 10), st.sampled_from([0.5, -1.5])))
    if draw(st.integers(0, 4)) == 0:
        node["multipleOf"] = draw(st.sampled_from([1, 2, 3, 4, 0.5, 0.25]))
    return node


@st.composite
def _string(draw: st.DrawFn) -> dict[str, Any]:
    node: dict[str, Any] = {"type": "string"}
    if draw(st.booleans()):
        node["minLength"] = draw(st.integers(0, 3))
    if draw(st.booleans()):
        node["maxLength"] = draw(st.integers(0, 6))
    if draw(st.integers(0, 3)) == 0:
        node["pattern"] = draw(st.sampled_from(PATTERNS))
    return node


def _leaf() -> st.SearchStrategy[Any]:
    return st.one_of(
        _numeric(),
        _string(),
        st.sampled_from([{"type": "boolean"}, {"type": "null"}, {}, True]),
        st.lists(SCALARS, min_size=1, max_size=4, unique_by=lambda v: (type(v), v)).map(
            lambda vs: {"enum": vs}),
        SCALARS.map(lambda v: {"const": v}),
        st.lists(st.sampled_from(TYPES), min_size=1, max_size=3, unique=True).map(
            lambda ts: {"type": ts}),
    )


@st.composite
def _object(draw: st.DrawFn, inner: st.SearchStrategy[Any]) -> dict[str, Any]:
    names = draw(st.lists(st.sampled_from(NAMES), max_size=3, unique=True))
    node: dict[str, Any] = {"type": "object", "properties": {n: draw(inner) for n in names}}
    required = draw(st.lists(st.sampled_from(NAMES), max_size=2, unique=True))
    if required:
        node["required"] = required
    extra = draw(st.integers(0, 3))
    if extra == 1:
        node["additionalProperties"] = False
    elif extra == 2:
        node["additionalProperties"] = draw(inner)
    if draw(st.integers(0, 4)) == 0:
        node["maxProperties"] = draw(st.integers(0, 3))
    return node


@st.composite
def _array(draw: st.DrawFn, inner: st.SearchStrategy[Any]) -> dict[str, Any]:
    node: dict[str, Any] = {"type": "array"}
    if draw(st.booleans()):
        node["items"] = draw(inner)
    if draw(st.booleans()):
        node["minItems"] = draw(st.integers(0, 2))
    if draw(st.booleans()):
        node["maxItems"] = draw(st.integers(0, 4))
    if draw(st.integers(0, 3)) == 0:
        node["uniqueItems"] = True
    return node


def _combinator(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.tuples(st.sampled_from(["anyOf", "oneOf", "allOf"]),
                     st.lists(inner, min_size=1, max_size=3)).map(lambda kv: {kv[0]: kv[1]})


def schemas() -> st.SearchStrategy[Any]:
    """A random small schema (at most two levels of nesting)."""
    return st.recursive(
        _leaf(),
        lambda inner: st.one_of(_object(inner), _object(inner), _array(inner),
                                _combinator(inner)),
        max_leaves=6,
    )


# ---------------------------------------------------------------------------
# Evolutions: a few random edits, widening or narrowing, anywhere in the tree.
# ---------------------------------------------------------------------------


def _nodes(schema: Any) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    stack = [schema]
    while stack:
        node = stack.pop()
        if not isinstance(node, dict):
            continue
        out.append(node)
        stack += list(node.get("properties", {}).values())
        stack += [node[k] for k in ("items", "additionalProperties") if k in node]
        for k in ("anyOf", "oneOf", "allOf"):
            stack += node.get(k, [])
    return out


SIGNED = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}
BOUNDS = {
    "integer": [*SIGNED, "multipleOf"],
    "number": [*SIGNED, "multipleOf"],
    "string": ["minLength", "maxLength"],
    "array": ["minItems", "maxItems"],
    "object": ["minProperties", "maxProperties"],
}
ALL_BOUNDS = [key for keys in BOUNDS.values() for key in keys]


@st.composite
def _edit(draw: st.DrawFn, node: dict[str, Any]) -> None:
    kind = draw(st.sampled_from([
        "bound", "drop", "required", "property", "closed", "type", "enum", "replace",
        "branch", "pattern",
    ]))
    if kind == "bound":
        key = draw(st.sampled_from(BOUNDS.get(str(node.get("type")), ALL_BOUNDS)))
        node[key] = draw(st.integers(-6, 6) if key in SIGNED else st.integers(1, 6))
    elif kind == "drop" and node:
        key = draw(st.sampled_from(sorted(node)))
        del node[key]
    elif kind == "required":
        names = list(node.get("required", []))
        name = draw(st.sampled_from(NAMES))
        node["required"] = [n for n in names if n != name] if name in names else [*names, name]
        if not node["required"]:
            del node["required"]
    elif kind == "property":
        props = node.setdefault("properties", {})
        name = draw(st.sampled_from(NAMES))
        if name in props and draw(st.booleans()):
            del props[name]
        else:
            props[name] = draw(_leaf())
    elif kind == "closed":
        node["additionalProperties"] = draw(st.sampled_from([False, True, {"type": "string"}]))
    elif kind == "type":
        node["type"] = draw(st.one_of(st.sampled_from(TYPES), st.lists(
            st.sampled_from(TYPES), min_size=1, max_size=3, unique=True)))
    elif kind == "enum":
        values = list(node.get("enum", []))
        node["enum"] = [*values, draw(SCALARS)] if values and draw(st.booleans()) else (
            values[1:] or [draw(SCALARS)])
    elif kind == "replace":
        node.clear()
        node.update(draw(_leaf().filter(lambda s: isinstance(s, dict))))
    elif kind == "branch":
        key = draw(st.sampled_from(["anyOf", "oneOf"]))
        node[key] = [*node.get(key, []), draw(_leaf())]
    elif kind == "pattern":
        node["pattern"] = draw(st.sampled_from(PATTERNS))


@st.composite
def evolutions(draw: st.DrawFn) -> tuple[Any, Any]:
    """(old, new): a random schema and a copy with one to three random edits."""
    old = draw(schemas())
    new = copy.deepcopy(old)
    if not isinstance(new, dict):
        return old, draw(schemas())
    for _ in range(draw(st.integers(1, 3))):
        nodes = _nodes(new)
        draw(_edit(draw(st.sampled_from(nodes))))
    return old, _clean(new)


def _clean(schema: Any) -> Any:
    """Repair edits that broke the meta-schema (an empty enum, a bad bound mix)."""
    for node in _nodes(schema):
        if node.get("enum") == []:
            del node["enum"]
        for key in ("anyOf", "oneOf", "allOf"):
            if key in node and not node[key]:
                del node[key]
    return schema
