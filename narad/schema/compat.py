"""Compatibility between schema versions, with Confluent Schema Registry's modes.

Owns one relation, `accepts_superset(wide, narrow)`: is every document valid under
`narrow` also valid under `wide`? BACKWARD asks it with wide = the new version and
narrow = the latest one (consumers upgrade first); FORWARD the other way round; FULL
both; the _TRANSITIVE modes against every earlier version; NONE never asks.

The checker is SOUND: it never calls an incompatible change compatible. Where it
cannot decide it answers "incompatible" with a reason naming why. Every reason has a
JSON path into the proposed schema and a message; all reasons are reported.

How it decides, node by node (`_Compare.sup`):

- References resolve inside each document; a pair of nodes met again on the way down
  is assumed compatible (sound: _document.py guarantees every reference cycle
  descends into a smaller part of the instance).
- `allOf` (and `$ref` with siblings) on the wide side is split: narrow must fit each
  part. On the narrow side its parts are merged into one node whose keywords never
  accept less than the conjunction did (see `_meet`).
- `anyOf` / `oneOf` on the narrow side: each branch on its own must fit. On the wide
  side `anyOf` needs one branch that holds all of narrow; `oneOf` also needs every
  other branch provably disjoint from narrow (by type, or by a required property whose
  values narrow lists and the branch refuses).
- Identical `allOf`, `anyOf`, `oneOf`, `not`, `if`/`then`/`else`, `contains` (with
  min/maxContains), `propertyNames`, `dependentRequired`, `dependentSchemas` and
  `dependencies` cancel out; removing one from the wide side is fine, adding or
  changing one is reported.
- When narrow admits finitely many values (`const`, `enum`, or only null/booleans),
  each is validated against wide with jsonschema: the answer is exact.
- Otherwise each keyword family is compared for the types narrow admits: `type`
  (integer within number), numeric bounds and `multipleOf`, string lengths, `pattern`
  and `format` (only identical counts), array bounds, `uniqueItems`, `prefixItems` /
  `items` / `additionalItems`, object bounds, `required`, and per property name
  `properties` / `patternProperties` / `additionalProperties` (an open content model
  gives an unnamed property any value, so it cannot gain a typed property; a closed
  one can gain an optional property).
- `unevaluatedProperties` / `unevaluatedItems`: only an unchanged node is compatible;
  `$dynamicRef` anywhere: only an unchanged schema.
- Annotations (title, description, examples, $comment, default, deprecated, readOnly,
  writeOnly) never matter. Any other keyword the checker does not understand is
  incompatible as soon as it differs between the two, and the reason names it.

It never validates produced documents (validate.py) and never stores versions.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from narad.schema import native
from narad.schema._document import (
    ANNOTATIONS,
    DRAFT_07,
    DRAFT_2020,
    IGNORED_AT_NODE,
    LIST,
    MAP,
    SINGLE,
    Document,
    Path,
    Schema,
    json_path,
)
from narad.schema.errors import clip
from narad.schema.modes import DEFAULT_MODE, Mode
from narad.schema.validate import reference_validator

STEPS_MAX = 20_000  # node pairs compared per check before giving up (incompatible)
DEPTH_MAX = 150  # nesting of comparisons before giving up (incompatible)


# ---------------------------------------------------------------------------
# Reasons
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Reason:
    """One incompatibility: `path` is a JSON path into the proposed schema."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


def check(old_schemas: Sequence[Schema], new: Schema, mode: Mode = DEFAULT_MODE) -> list[Reason]:
    """Reasons why `new` cannot follow `old_schemas` (oldest first) under `mode`;
    empty when compatible. Every schema must have passed `validate.check`."""
    numbered = list(enumerate(old_schemas, start=1))
    if mode is Mode.NONE or not numbered:
        return []
    against = numbered if mode.transitive else numbered[-1:]
    reasons: list[Reason] = []
    for version, old in reversed(against):
        label = f"version {version}"
        try:
            if mode.backward:
                reasons += accepts_superset(new, old, wide_label="the new schema",
                                            narrow_label=label, report="wide")
            if mode.forward:
                reasons += accepts_superset(old, new, wide_label=label,
                                            narrow_label="the new schema", report="narrow")
        except native.Unsupported as error:  # a version stored before patterns were checked
            reasons.append(Reason("$", f"{label} cannot be compared: its {error}, which Narad "
                                       "no longer runs (only COMPAT NONE can follow it)"))
    return list(dict.fromkeys(reasons))


def accepts_superset(
    wide: Schema,
    narrow: Schema,
    *,
    wide_label: str = "the wide schema",
    narrow_label: str = "the narrow schema",
    report: str = "wide",
) -> list[Reason]:
    """Reasons why some document valid under `narrow` may be invalid under `wide`;
    empty when every such document is valid under `wide`. Paths point into `wide`
    (report="wide") or `narrow` (report="narrow"); messages use the labels."""
    wdoc, ndoc = Document.load(wide), Document.load(narrow)
    if wdoc.has_dynamic or ndoc.has_dynamic:
        if _canonical(wide) == _canonical(narrow):
            return []
        return [Reason("$", "$dynamicRef is used: only an unchanged schema is known "
                            "to be compatible")]
    compare = _Compare(wdoc, ndoc, wide_label, narrow_label, report == "wide")
    compare.sup(_At(wdoc.root, ()), _At(ndoc.root, ()))
    return list(dict.fromkeys(compare.reasons))


# ---------------------------------------------------------------------------
# Keyword tables
# ---------------------------------------------------------------------------

NUMBERS = frozenset({"integer", "fraction"})
ALL_TYPES = frozenset({"null", "boolean", "integer", "fraction", "string", "array",
                       "object"})
_TYPE_ATOMS = {"null": {"null"}, "boolean": {"boolean"}, "integer": {"integer"},
               "number": NUMBERS, "string": {"string"}, "array": {"array"},
               "object": {"object"}}
_ATOM_NAMES = {"fraction": "non-integer number"}

# Keywords that only make sense as a group, cancelled or compared together.
UNITS: tuple[tuple[str, ...], ...] = (
    ("allOf",), ("anyOf",), ("oneOf",), ("not",), ("if", "then", "else"),
    ("contains", "minContains", "maxContains"), ("propertyNames",),
    ("dependentRequired",), ("dependentSchemas",), ("dependencies",),
)
_UNIT_TYPES = {"contains": {"array"}, "propertyNames": {"object"},
               "dependentRequired": {"object"}, "dependentSchemas": {"object"},
               "dependencies": {"object"}}
_STRUCTURAL = frozenset({"allOf", "anyOf", "oneOf"})
_MODELED_COMMON = frozenset({
    "type", "enum", "const", "minimum", "maximum", "exclusiveMinimum",
    "exclusiveMaximum", "multipleOf", "minLength", "maxLength", "pattern", "format",
    "items", "minItems", "maxItems", "uniqueItems", "properties", "patternProperties",
    "additionalProperties", "required", "minProperties", "maxProperties", "$ref",
})
_UNIT_MEMBERS = frozenset(k for unit in UNITS for k in unit)
KNOWN = {
    DRAFT_2020: _MODELED_COMMON | _UNIT_MEMBERS | {"prefixItems"},
    DRAFT_07: _MODELED_COMMON | _UNIT_MEMBERS | {"additionalItems"},
}
UNEVALUATED = frozenset({"unevaluatedProperties", "unevaluatedItems"})
IGNORED = IGNORED_AT_NODE | {"$dynamicAnchor", "$dynamicRef"}
# Keywords whose meaning differs between draft-07 and 2020-12.
_DRAFT_SENSITIVE = frozenset({"items", "additionalItems", "prefixItems", "dependencies",
                              "dependentRequired", "dependentSchemas",
                              "unevaluatedItems", "unevaluatedProperties", "$ref"})
_ORPHANS = (("then", "if"), ("else", "if"), ("minContains", "contains"),
            ("maxContains", "contains"))
_TIGHTEST = {"minimum": max, "exclusiveMinimum": max, "minLength": max,
             "minItems": max, "minProperties": max, "maximum": min,
             "exclusiveMaximum": min, "maxLength": min, "maxItems": min,
             "maxProperties": min}


def _trivial(node: Schema) -> bool:
    """A node without assertions: it accepts every value."""
    return isinstance(node, dict) and all(key in IGNORED for key in node)


def _canonical(value: object) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def _same_json(a: object, b: object) -> bool:
    return a is b or _canonical(a) == _canonical(b)


def _atom(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "integer" if value.is_integer() else "fraction"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def _type_atoms(declared: object) -> frozenset[str]:
    """The atoms a `type` value admits (all when absent)."""
    if declared is None:
        return ALL_TYPES
    names = [declared] if isinstance(declared, str) else declared if isinstance(
        declared, list) else []
    return frozenset(a for name in names for a in _TYPE_ATOMS.get(name, ()))


def _types(node: Schema) -> frozenset[str]:
    """An upper bound of the atoms `node` accepts: from `type`, `enum`, `const`."""
    if node is False:
        return frozenset()
    if not isinstance(node, dict):
        return ALL_TYPES
    atoms = _type_atoms(node.get("type"))
    if "const" in node:
        atoms &= {_atom(node["const"])}
    if isinstance(node.get("enum"), list):
        atoms &= {_atom(v) for v in node["enum"]}
    return atoms


def _names(atoms: Iterable[str]) -> str:
    order = sorted(atoms, key=sorted(ALL_TYPES).index)
    return ", ".join(_ATOM_NAMES.get(a, a) for a in order)


def _show(value: object) -> str:
    return clip(json.dumps(value), 80)


def _number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


# ---------------------------------------------------------------------------
# Merging the parts of a conjunction (narrow side only)
# ---------------------------------------------------------------------------


def _drop_orphans(node: dict[str, Any], draft: str) -> dict[str, Any]:
    """Remove keywords that do nothing without their partner in the same node, so a
    merge cannot give them a partner (which would accept less)."""
    out = dict(node)
    for keyword, partner in _ORPHANS:
        if keyword in out and partner not in out:
            del out[keyword]
    if "additionalItems" in out and (draft != DRAFT_07 or not isinstance(out.get("items"), list)):
        del out["additionalItems"]
    return out


def _meet(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any] | None:
    """One node accepting at least every value both `a` and `b` accept (exactly their
    conjunction for context-free keywords; more where `additionalProperties`, `items`
    or unevaluated* see more siblings), or None when Narad cannot merge them."""
    out = dict(a)
    for key, value in b.items():
        if key not in out or key in ANNOTATIONS or _same_json(out[key], value):
            out[key] = out.get(key, value)
            continue
        merged = _meet_keyword(key, out[key], value)
        if merged is None:
            return None
        out[key] = merged
    return out


def _meet_keyword(key: str, a: Any, b: Any) -> Any:
    if key == "type":
        atoms = _type_atoms(a) & _type_atoms(b)
        if "fraction" in atoms and "integer" not in atoms:
            return None
        names: list[str] = [n for n in ("null", "boolean", "string", "array", "object")
                            if n in atoms]
        names += ["number"] if "fraction" in atoms else ["integer"] if "integer" in atoms else []
        return names
    if key == "required" and isinstance(a, list) and isinstance(b, list):
        return list(dict.fromkeys(a + b))
    if key in _TIGHTEST and _number(a) and _number(b):
        return _TIGHTEST[key](a, b)
    if key == "properties" and isinstance(a, dict) and isinstance(b, dict):
        out = dict(a)
        for name, sub in b.items():
            out[name] = {"allOf": [out[name], sub]} if name in out else sub
        return out
    return None


# ---------------------------------------------------------------------------
# The comparison
# ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _At:
    """A schema node and where it sits in its document (a merged or trimmed node
    keeps the path of the node it came from)."""

    node: Schema
    path: Path

    def sub(self, *rel: str | int) -> _At:
        node = self.node
        for part in rel:
            node = node[part]
        return _At(node, self.path + rel)

    def without(self, *keys: str) -> _At:
        return _At({k: v for k, v in self.node.items() if k not in keys}, self.path)


class _Compare:
    """One `accepts_superset` computation. `sup` appends a reason for everything it
    cannot prove; an empty list at the end proves the inclusion."""

    def __init__(self, wide: Document, narrow: Document, wide_label: str,
                 narrow_label: str, report_wide: bool) -> None:
        self.wide, self.narrow = wide, narrow
        self.W, self.N = wide_label, narrow_label
        self.report_wide = report_wide
        self.reasons: list[Reason] = []
        self.assumed: set[tuple[int, int]] = set()  # pairs being proven (ancestors)
        self.equal_assumed: set[tuple[int, int]] = set()  # same, for `equiv`
        self.steps = 0
        self.depth = 0
        self._validators = (reference_validator(wide.root, wide.draft),
                            reference_validator(narrow.root, narrow.draft))

    # -- plumbing ----------------------------------------------------------

    def fail(self, w: _At, n: _At, keyword: str | None, message: str) -> None:
        base = w.path if self.report_wide else n.path
        path = (*base, keyword) if keyword else base
        self.reasons.append(Reason(json_path(path), message))

    def _wide_keyword(self, keyword: str) -> str | None:
        """A wide-side keyword names a place in the report only in the wide schema."""
        return keyword if self.report_wide else None

    def trial(self, attempt: Callable[[], None]) -> list[Reason]:
        """Run `attempt`, returning its reasons instead of keeping them."""
        saved, self.reasons = self.reasons, []
        try:
            attempt()
            return self.reasons
        finally:
            self.reasons = saved

    def valid(self, wide_side: bool, at: _At, value: object) -> bool:
        """jsonschema's verdict on `value` under the node; when it cannot tell, the
        answer that keeps the check sound (wide refuses, narrow accepts)."""
        validator = self._validators[0 if wide_side else 1]
        try:
            return bool(validator.evolve(schema=at.node).is_valid(value))
        except (RecursionError, OverflowError):
            return not wide_side

    def deref(self, at: _At, doc: Document) -> _At:
        node = doc.deref(at.node)
        if node is at.node:
            return at
        return _At(node, doc.path_of(node) or at.path)

    # -- the relation ------------------------------------------------------

    def sup(self, w: _At, n: _At) -> None:
        """Append reasons why some value valid under `n` may be invalid under `w`."""
        w, n = self.deref(w, self.wide), self.deref(n, self.narrow)
        if n.node is False or w.node is True or _trivial(w.node):
            return
        key = (id(w.node), id(n.node))
        if key in self.assumed:
            return
        self.steps += 1
        if self.steps > STEPS_MAX or self.depth > DEPTH_MAX:
            self.fail(w, n, None, "too large or deep to compare; only an unchanged "
                                  "schema is known to be compatible")
            return
        self.assumed.add(key)
        self.depth += 1
        try:
            self._sup(w, n)
        finally:
            self.depth -= 1
            self.assumed.discard(key)

    def _sup(self, w: _At, n: _At) -> None:
        if w.node is False:
            self.fail(w, n, None, f"{self.W} accepts nothing here, {self.N} accepts values")
            return
        if n.node is True:
            n = _At({}, n.path)
        if self._identical(w, n):
            return
        if UNEVALUATED & (w.node.keys() | n.node.keys()):
            self._unevaluated(w, n)
            return
        finite = self._finite(n)
        if finite is not None:
            self._finite_check(w, n, finite)
            return
        w, n = self._cancel_units(w, n)
        if "allOf" in w.node or "$ref" in w.node:
            self._split_wide(w, n)
            return
        merged = self._merge_narrow(w, n)
        if merged is None or merged.node is False:
            return
        self._branches(w, merged)

    def _branches(self, w: _At, n: _At) -> None:
        for keyword in ("anyOf", "oneOf"):
            if keyword in n.node:
                self._distribute(w, n, keyword)
                return
        if "anyOf" in w.node:
            self.sup(w.without("anyOf"), n)
            self._wide_any(w, n)
        elif "oneOf" in w.node:
            self.sup(w.without("oneOf"), n)
            self._wide_one(w, n)
        else:
            self._node(w, n)

    def _identical(self, w: _At, n: _At) -> bool:
        """Same JSON, same draft and no reference inside: the same schema."""
        if self.wide.draft != self.narrow.draft or w.node != n.node:
            return False
        text = _canonical(w.node)
        return text == _canonical(n.node) and '"$ref"' not in text and (
            '"$dynamicRef"' not in text)

    def _finite_check(self, w: _At, n: _At, values: list[Any]) -> None:
        """Narrow accepts only `values`: jsonschema decides each one under wide."""
        for value in values:
            if not self.valid(True, w, value):
                self.fail(w, n, None, f"{self.W} refuses {_show(value)}, which {self.N} "
                                      "accepts")
        self._unknown(w, n)

    def _unevaluated(self, w: _At, n: _At) -> None:
        if not self.equiv(w, n):
            keyword = min(UNEVALUATED & (w.node.keys() | n.node.keys()))
            self.fail(w, n, keyword, f"{keyword} is used: only an unchanged node is "
                                     "known to be compatible")

    def _cancel_units(self, w: _At, n: _At) -> tuple[_At, _At]:
        """Drop keyword groups present and equivalent on both sides."""
        for unit in UNITS:
            if any(k in w.node for k in unit) and self._unit_equiv(w, n, unit):
                w, n = w.without(*unit), n.without(*unit)
        return w, n

    def _unit_equiv(self, w: _At, n: _At, unit: tuple[str, ...]) -> bool:
        pick = [k for k in unit if k in w.node or k in n.node]
        return all(k in w.node and k in n.node for k in pick) and self.equiv(
            _At({k: w.node[k] for k in pick}, w.path),
            _At({k: n.node[k] for k in pick}, n.path),
        )

    def _split_wide(self, w: _At, n: _At) -> None:
        """Wide is a conjunction: narrow must fit each part."""
        self.sup(w.without("allOf", "$ref"), n)
        for index in range(len(w.node.get("allOf", ()))):
            self.sup(w.sub("allOf", index), n)
        if "$ref" in w.node:
            target = self.wide.resolve(w.node["$ref"])
            self.sup(_At(target, self.wide.path_of(target) or (*w.path, "$ref")), n)

    def _merge_narrow(self, w: _At, n: _At) -> _At | None:
        """Narrow as one node without `allOf`/`$ref`; None when handled here."""
        if "allOf" not in n.node and "$ref" not in n.node:
            return n
        parts = self._conjuncts(n.node)
        if any(part is False for part in parts):
            return _At(False, n.path)
        merged: dict[str, Any] | None = {}
        for part in parts:
            merged = _meet(merged, part) if merged is not None else None
        if merged is not None:
            return _At(merged, n.path)
        for part in parts:
            if not self.trial(partial(self.sup, w, _At(part, n.path))):
                return None
        self.fail(w, n, None if self.report_wide else "allOf",
                  f"the parts of allOf in {self.N} cannot be combined for comparison and "
                  "no single part suffices")
        return None

    def _conjuncts(self, node: Schema) -> list[Schema]:
        node = self.narrow.deref(node)
        if node is True or not isinstance(node, dict):
            return [] if node is True else [node]
        base = {k: v for k, v in node.items() if k not in ("allOf", "$ref")}
        out: list[Schema] = [_drop_orphans(base, self.narrow.draft)]
        for sub in node.get("allOf", ()):
            out += self._conjuncts(sub)
        if "$ref" in node:
            out += self._conjuncts(self.narrow.resolve(node["$ref"]))
        return out

    def _distribute(self, w: _At, n: _At, keyword: str) -> None:
        """Narrow is a union (oneOf read as anyOf, which accepts more): each branch,
        with narrow's other keywords where they merge, must fit."""
        draft = self.narrow.draft
        rest = _drop_orphans(n.without(keyword).node, draft)
        for index in range(len(n.node[keyword])):
            branch = self.deref(n.sub(keyword, index), self.narrow)
            if branch.node is False:
                continue
            node = {} if branch.node is True else _drop_orphans(branch.node, draft)
            merged = _meet(rest, node) if "allOf" not in node and "$ref" not in node else None
            self.sup(w, _At(merged, branch.path) if merged is not None else branch)

    def _wide_any(self, w: _At, n: _At) -> None:
        tries = [self.trial(partial(self.sup, w.sub("anyOf", i), n))
                 for i in range(len(w.node["anyOf"]))]
        if any(not reasons for reasons in tries):
            return
        self.fail(w, n, self._wide_keyword("anyOf"), f"no branch of anyOf in {self.W} "
                                                     f"accepts everything {self.N} accepts here")
        best: list[Reason] = min(tries, key=len)
        self.reasons += best

    def _wide_one(self, w: _At, n: _At) -> None:
        count = len(w.node["oneOf"])
        for i in range(count):
            fits = not self.trial(partial(self.sup, w.sub("oneOf", i), n))
            if fits and all(self._disjoint(w.sub("oneOf", k), n) for k in range(count) if k != i):
                return
        self.fail(w, n, self._wide_keyword("oneOf"), f"cannot show that everything {self.N} "
                                                     "accepts here matches exactly one "
                                                     f"branch of oneOf in {self.W}")

    def _disjoint(self, x: _At, n: _At) -> bool:
        """Whether no value is valid under both the wide branch `x` and narrow `n`."""
        x = self.deref(x, self.wide)
        if x.node is False or n.node is False:
            return True
        if x.node is True:
            return False
        common = _types(x.node) & _types(n.node)
        if not common:
            return True
        if common != {"object"}:
            return False
        return any(self._discriminates(x, n, name) for name in n.node.get("required", ()))

    def _discriminates(self, x: _At, n: _At, name: str) -> bool:
        values = self._listed(n.node.get("properties", {}).get(name))
        if values is None or name not in x.node.get("properties", {}):
            return False
        sub = x.sub("properties", name)
        return all(not self.valid(True, sub, value) for value in values)

    @staticmethod
    def _listed(node: Schema) -> list[Any] | None:
        if isinstance(node, dict) and "const" in node:
            return [node["const"]]
        if isinstance(node, dict) and isinstance(node.get("enum"), list):
            return list(node["enum"])
        return None

    # -- one node against one node -----------------------------------------

    def _node(self, w: _At, n: _At) -> None:
        narrow_types = _types(n.node)
        wide_types = _type_atoms(w.node.get("type"))
        if narrow_types == ALL_TYPES and wide_types != ALL_TYPES:
            self.fail(w, n, "type", f"{self.W} accepts only {_names(wide_types)}, "
                                    f"{self.N} accepts any type")
        elif narrow_types - wide_types:
            self.fail(w, n, "type", f"{self.W} does not accept "
                                    f"{_names(narrow_types - wide_types)}, {self.N} does")
        for keyword in ("enum", "const"):
            if keyword in w.node:
                self.fail(w, n, keyword, f"{self.W} accepts only listed values, {self.N} "
                                         "accepts others")
        self._families(w, n, narrow_types & wide_types)
        self._unknown(w, n)

    def _families(self, w: _At, n: _At, gate: frozenset[str]) -> None:
        if gate & NUMBERS:
            _Numbers(self, w, n, (gate & NUMBERS) == {"integer"}).run()
        if "string" in gate:
            self._strings(w, n)
        if "array" in gate:
            self._arrays(w, n)
        if "object" in gate:
            self._objects(w, n)
        self._units(w, n, gate)

    def _finite(self, n: _At) -> list[Any] | None:
        """Every value narrow accepts, when they are few; else None."""
        atoms = _types(n.node)
        values = self._listed(n.node)
        if values is None and atoms <= {"null", "boolean"}:
            values = [v for v in (None, False, True) if _atom(v) in atoms]
        if values is None:
            return None
        return [v for v in values if self.valid(False, n, v)]

    def bound(self, w: _At, n: _At, keyword: str, narrow_value: object,
              holds: Callable[[Any, Any], bool], what: str) -> None:
        """Report `keyword` when wide has it and narrow's value does not satisfy it."""
        limit = w.node.get(keyword)
        if not _number(limit):
            return
        if narrow_value is None or not holds(narrow_value, limit):
            shown = "no limit" if narrow_value is None else f"{narrow_value}"
            self.fail(w, n, keyword, f"{self.W} requires {keyword} {limit}, {self.N} "
                                     f"allows {what} {shown}")

    def _strings(self, w: _At, n: _At) -> None:
        self.bound(w, n, "minLength", n.node.get("minLength", 0), _ge, "length down to")
        self.bound(w, n, "maxLength", n.node.get("maxLength"), _le, "length up to")
        for keyword in ("pattern", "format"):
            if keyword in w.node and not _same_json(w.node[keyword], n.node.get(keyword)):
                had = n.node.get(keyword)
                shown = f"has {keyword} {_show(had)}" if had is not None else f"has no {keyword}"
                self.fail(w, n, keyword, f"{self.W} requires {keyword} "
                                         f"{_show(w.node[keyword])}, {self.N} {shown}; only "
                                         f"an identical {keyword} is known to accept the "
                                         "same strings")

    # -- arrays --------------------------------------------------------------

    def _arrays(self, w: _At, n: _At) -> None:
        prefix_w, rest_w = self._items(w, self.wide)
        prefix_n, rest_n = self._items(n, self.narrow)
        longest = n.node.get("maxItems")
        if rest_n is not None and rest_n.node is False:
            longest = len(prefix_n) if longest is None else min(longest, len(prefix_n))
        self.bound(w, n, "minItems", n.node.get("minItems", 0), _ge, "arrays of length")
        self.bound(w, n, "maxItems", longest, _le, "arrays of length")
        if w.node.get("uniqueItems") is True and n.node.get("uniqueItems") is not True and (
                longest is None or longest > 1):
            self.fail(w, n, "uniqueItems", f"{self.W} requires unique items, {self.N} "
                                           "allows repeated ones")
        span = max(len(prefix_w), len(prefix_n))
        for index in range(span if longest is None else min(span, longest)):
            wide_item = prefix_w[index] if index < len(prefix_w) else rest_w
            if wide_item is not None:
                narrow_item = prefix_n[index] if index < len(prefix_n) else rest_n
                self.sup(wide_item, narrow_item or _At(True, (*n.path, "items")))
        if rest_w is not None and (longest is None or longest > span):
            self.sup(rest_w, rest_n or _At(True, (*n.path, "items")))

    @staticmethod
    def _items(at: _At, doc: Document) -> tuple[list[_At], _At | None]:
        """(positional item schemas, schema for the items after them or None)."""
        node = at.node
        if doc.draft == DRAFT_2020:
            prefix = node.get("prefixItems", [])
            rest = at.sub("items") if "items" in node else None
            return [at.sub("prefixItems", i) for i in range(len(prefix))], rest
        items = node.get("items")
        if isinstance(items, list):
            extra = at.sub("additionalItems") if "additionalItems" in node else None
            return [at.sub("items", i) for i in range(len(items))], extra
        return [], at.sub("items") if items is not None else None

    # -- objects -------------------------------------------------------------

    def _objects(self, w: _At, n: _At) -> None:
        self.bound(w, n, "minProperties", n.node.get("minProperties", 0), _ge,
                   "objects with a property count of")
        self.bound(w, n, "maxProperties", n.node.get("maxProperties"), _le,
                   "objects with a property count of")
        required = set(n.node.get("required", ()))
        for name in w.node.get("required", ()):
            if name not in required:
                self.fail(w, n, "required", f"{self.W} requires property {_show(name)}, "
                                            f"{self.N} does not")
        self._properties(w, n)

    def _properties(self, w: _At, n: _At) -> None:
        patterns_w = w.node.get("patternProperties", {})
        patterns_n = n.node.get("patternProperties", {})
        same_patterns = self._unit_equiv(w, n, ("patternProperties",))
        if patterns_w and not same_patterns:
            self.fail(w, n, "patternProperties", f"{self.W} has patternProperties that "
                                                 f"{self.N} does not have unchanged")
        names_w, names_n = w.node.get("properties", {}), n.node.get("properties", {})
        for name in dict.fromkeys([*names_w, *names_n]):
            wide_at = self._property(w, name, names_w, patterns_w)
            if wide_at is None:
                continue
            narrow_at = self._property(n, name, names_n, patterns_n, narrow=True)
            if narrow_at is None:
                self._open_property(w, n, wide_at, name)
            elif self.deref(wide_at, self.wide).node is False and name in names_n:
                self._closed_property(wide_at, narrow_at, name)
            else:
                self.sup(wide_at, narrow_at)
        if "additionalProperties" not in w.node:
            return
        extra_w = w.sub("additionalProperties")
        if patterns_n and not same_patterns:
            for pattern in patterns_n:
                self.sup(extra_w, n.sub("patternProperties", pattern))
        extra_n = n.sub("additionalProperties") if "additionalProperties" in n.node else None
        self.sup(extra_w, extra_n or _At(True, (*n.path, "additionalProperties")))

    def _open_property(self, w: _At, n: _At, wide_at: _At, name: str) -> None:
        """Narrow lets property `name` hold any value (open content model)."""
        if self.trial(partial(self.sup, wide_at, _At(True, (*n.path, "properties", name)))):
            self.fail(wide_at, _At(True, (*n.path, "properties", name)), None,
                      f"{self.W} constrains property {_show(name)}, which {self.N} accepts "
                      "with any value (its content model is open; additionalProperties: "
                      "false would close it)")

    def _closed_property(self, w: _At, n: _At, name: str) -> None:
        if self.narrow.deref(n.node) is not False:
            self.fail(w, n, None, f"{self.W} does not allow property {_show(name)}, "
                                  f"{self.N} does")

    @staticmethod
    def _property(at: _At, name: str, names: dict[str, Any], patterns: dict[str, Any],
                  narrow: bool = False) -> _At | None:
        """The schema a property `name` meets: its own, else (narrow side) one pattern
        schema matching it (the others only restrict more), else additionalProperties
        when no pattern matches; None when none applies (wide patterns are compared
        as a whole; on the narrow side None reads "any value")."""
        if name in names:
            return at.sub("properties", name)
        matching = [p for p in patterns if native.search(p, name)]
        if matching:
            return at.sub("patternProperties", matching[0]) if narrow else None
        if "additionalProperties" in at.node:
            return at.sub("additionalProperties")
        return None

    # -- groups and unknown keywords ----------------------------------------

    def _units(self, w: _At, n: _At, gate: frozenset[str]) -> None:
        for unit in UNITS:
            present = [k for k in unit if k in w.node]
            if not present or unit[0] in _STRUCTURAL:
                continue
            if not gate & _UNIT_TYPES.get(unit[0], ALL_TYPES):
                continue
            if not self._unit_equiv(w, n, unit):
                self.fail(w, n, present[0], f"{self.W} adds or changes {present[0]}; only "
                                            f"an unchanged {present[0]} is known to be "
                                            "compatible")

    def _unknown(self, w: _At, n: _At) -> None:
        known_w, known_n = KNOWN[self.wide.draft], KNOWN[self.narrow.draft]
        for key in w.node:
            if key not in known_w and key not in IGNORED and (
                    key not in n.node or not _same_json(w.node[key], n.node[key])):
                self.fail(w, n, key, f"{key} is not understood by the checker and differs "
                                     f"from {self.N}")
        for key in n.node:
            if key not in known_n and key not in IGNORED and key not in w.node:
                self.fail(w, n, key, f"{key} is not understood by the checker and differs "
                                     f"from {self.N}")

    # -- structural equivalence ----------------------------------------------

    def equiv(self, a: _At, b: _At) -> bool:
        """Whether two nodes are the same schema up to annotations and references."""
        a, b = self.deref(a, self.wide), self.deref(b, self.narrow)
        if isinstance(a.node, bool) or isinstance(b.node, bool):
            return a.node is b.node
        key = (id(a.node), id(b.node))
        if key in self.equal_assumed:
            return True
        keys = {k for k in a.node if k not in IGNORED}
        if keys != {k for k in b.node if k not in IGNORED}:
            return False
        if self.wide.draft != self.narrow.draft and keys & _DRAFT_SENSITIVE:
            return False
        self.equal_assumed.add(key)
        try:
            return all(self._equiv_keyword(a, b, k) for k in keys)
        finally:
            self.equal_assumed.discard(key)

    def _equiv_keyword(self, a: _At, b: _At, key: str) -> bool:
        va, vb = a.node[key], b.node[key]
        draft = self.wide.draft
        if key == "$ref":
            return self.equiv(_At(self.wide.resolve(va), a.path),
                              _At(self.narrow.resolve(vb), b.path))
        if key in LIST[draft] or (key == "items" and isinstance(va, list)):
            return (isinstance(va, list) and isinstance(vb, list) and len(va) == len(vb)
                    and all(self.equiv(a.sub(key, i), b.sub(key, i)) for i in range(len(va))))
        if key in MAP[draft] and isinstance(va, dict) and isinstance(vb, dict):
            return va.keys() == vb.keys() and all(
                self.equiv(a.sub(key, k), b.sub(key, k)) if isinstance(va[k], dict | bool)
                else _same_json(va[k], vb[k]) for k in va)
        if key in SINGLE[draft] or key == "items":
            return self.equiv(a.sub(key), b.sub(key))
        return _same_json(va, vb)


def _ge(a: Any, b: Any) -> bool:
    return bool(a >= b)


def _le(a: Any, b: Any) -> bool:
    return bool(a <= b)


class _Numbers:
    """Numeric keywords of one node pair; `integers`: narrow admits only integers
    among numbers, so its exclusive bounds tighten to inclusive integer ones."""

    def __init__(self, compare: _Compare, w: _At, n: _At, integers: bool) -> None:
        self.c, self.w, self.n, self.integers = compare, w, n, integers

    def run(self) -> None:
        low = self._bound("minimum", "exclusiveMinimum", max, math.ceil, 1)
        high = self._bound("maximum", "exclusiveMaximum", min, math.floor, -1)
        self._check("minimum", low, lambda v, x, lim: v >= lim, "values down to")
        self._check("exclusiveMinimum", low, lambda v, x, lim: v > lim or (v == lim and x),
                    "values down to")
        self._check("maximum", high, lambda v, x, lim: v <= lim, "values up to")
        self._check("exclusiveMaximum", high, lambda v, x, lim: v < lim or (v == lim and x),
                    "values up to")
        self._multiple_of()

    def _bound(self, inclusive: str, exclusive: str, pick: Callable[..., Any],
               to_int: Callable[[float], int], step: int) -> tuple[Any, bool] | None:
        """Narrow's tightest bound on one side as (value, exclusive?)."""
        node = self.n.node
        found = [(node[inclusive], False)] if _number(node.get(inclusive)) else []
        if _number(node.get(exclusive)):
            found.append((node[exclusive], True))
        if not found:
            return None
        if self.integers:
            found = [(to_int(v) + (step if x and to_int(v) == v else 0), False)
                     for v, x in found]
        value = pick(v for v, _ in found)
        return value, any(x for v, x in found if v == value)

    def _check(self, keyword: str, narrow: tuple[Any, bool] | None,
               holds: Callable[[Any, bool, Any], bool], what: str) -> None:
        limit = self.w.node.get(keyword)
        if not _number(limit):
            return
        if narrow is None or not holds(narrow[0], narrow[1], limit):
            shown = "no limit" if narrow is None else (
                f"{'above' if 'down' in what else 'below'} {narrow[0]}" if narrow[1]
                else f"{what} {narrow[0]}")
            self.c.fail(self.w, self.n, keyword, f"{self.c.W} requires {keyword} {limit}, "
                                                 f"{self.c.N} allows {shown}")

    def _multiple_of(self) -> None:
        divisor = self.w.node.get("multipleOf")
        if not _number(divisor):
            return
        had = self.n.node.get("multipleOf")
        if _divides(divisor, had) or (divisor == 1 and isinstance(divisor, int)
                                      and self.integers):
            return
        shown = f"multipleOf {had}" if had is not None else "any multiple"
        self.c.fail(self.w, self.n, "multipleOf", f"{self.c.W} requires multipleOf "
                                                  f"{divisor}, {self.c.N} allows {shown}")


def _divides(divisor: Any, narrow: Any) -> bool:
    """Whether every multiple of `narrow` is one of `divisor`, under jsonschema's
    arithmetic: identical values, or integers (exact in floats) dividing each other."""
    if not _number(narrow):
        return False
    if type(narrow) is type(divisor) and narrow == divisor:
        return True
    return (isinstance(divisor, int) and isinstance(narrow, int)
            and narrow <= 2**53 and narrow % divisor == 0)
