"""A schema document: its draft, its in-document references, and JSON paths.

Owns the shape rules Narad adds to JSON Schema, which both the validator and the
compatibility checker rely on:

- `$schema` appears only at the root and names draft 2020-12 (the default) or draft-07.
- `$id` appears only at the root (draft-07 also allows plain-name anchors `"#name"`).
- Every `$ref` and `$dynamicRef` is a fragment (`#`, `#/json/pointer`, `#anchor`) and
  resolves to a schema inside the document: nothing is ever fetched, and no reference
  names another document.
- No cycle of references stays on the same instance (`{"$ref": "#"}`, or `anyOf`
  back to the root): every cycle descends into a property or an item first, so
  validating and comparing always terminate.

It never validates instances and never touches the meta-schema (validate.py does).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import unquote

Schema = Any  # a parsed JSON Schema: a dict or a bool
PathPart = str | int
Path = tuple[PathPart, ...]
Draft = Literal["2020-12", "draft-07"]

DRAFT_2020: Draft = "2020-12"
DRAFT_07: Draft = "draft-07"
_DRAFTS: dict[str, Draft] = {
    "https://json-schema.org/draft/2020-12/schema": "2020-12",
    "http://json-schema.org/draft-07/schema": "draft-07",
    "https://json-schema.org/draft-07/schema": "draft-07",
}


class ShapeError(ValueError):
    """The document breaks one of the rules above: `reason`, at `path` in the schema."""

    def __init__(self, reason: str, path: Path = ()) -> None:
        super().__init__(reason)
        self.reason = reason
        self.path = path


# ---------------------------------------------------------------------------
# JSON paths: `$`, `.name` for plain names, `['odd name']`, `[3]` for indices.
# ---------------------------------------------------------------------------

_PLAIN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def json_path(parts: Path) -> str:
    out = ["$"]
    for part in parts:
        if isinstance(part, int):
            out.append(f"[{part}]")
        elif _PLAIN.match(part):
            out.append(f".{part}")
        else:
            quoted = part.replace("\\", "\\\\").replace("'", "\\'")
            out.append(f"['{quoted}']")
    return "".join(out)


# ---------------------------------------------------------------------------
# Drafts and where subschemas live
# ---------------------------------------------------------------------------


def draft_of(schema: Schema) -> Draft:
    """The draft named by the root's `$schema` (2020-12 when absent)."""
    if not isinstance(schema, dict) or "$schema" not in schema:
        return "2020-12"
    uri = schema["$schema"]
    if not isinstance(uri, str) or uri.rstrip("#") not in _DRAFTS:
        raise ShapeError(
            f"$schema {uri!r} is not supported (use draft 2020-12 or draft-07)",
            ("$schema",),
        )
    return _DRAFTS[uri.rstrip("#")]


# Keywords whose value is one subschema, a name->subschema map, or a list of them.
_SINGLE_COMMON = ("additionalProperties", "propertyNames", "contains", "not", "if",
                  "then", "else")
SINGLE = {
    DRAFT_2020: (*_SINGLE_COMMON, "items", "unevaluatedItems", "unevaluatedProperties",
                 "contentSchema"),
    DRAFT_07: (*_SINGLE_COMMON, "additionalItems"),
}
MAP = {
    DRAFT_2020: ("properties", "patternProperties", "$defs", "definitions",
                 "dependentSchemas"),
    DRAFT_07: ("properties", "patternProperties", "$defs", "definitions", "dependencies"),
}
LIST = {
    DRAFT_2020: ("allOf", "anyOf", "oneOf", "prefixItems"),
    DRAFT_07: ("allOf", "anyOf", "oneOf"),
}
# Applicators whose subschemas apply to the same instance (no descent).
IN_PLACE = frozenset({"allOf", "anyOf", "oneOf", "not", "if", "then", "else",
                      "dependentSchemas", "dependencies"})


def is_schema(value: object) -> bool:
    return isinstance(value, dict | bool)


def children(node: Schema, draft: Draft) -> Iterator[tuple[Path, Schema]]:
    """Each direct subschema of `node` with its relative path, per `draft`."""
    if not isinstance(node, dict):
        return
    for key in SINGLE[draft]:
        if key in node and is_schema(node[key]):
            yield (key,), node[key]
    for key in MAP[draft]:
        value = node.get(key)
        if isinstance(value, dict):
            for name, sub in value.items():
                if is_schema(sub):
                    yield (key, name), sub
    for key in LIST[draft]:
        value = node.get(key)
        if isinstance(value, list):
            for index, sub in enumerate(value):
                yield (key, index), sub
    if draft == DRAFT_07 and isinstance(node.get("items"), list | dict | bool):
        items = node["items"]
        if isinstance(items, list):
            for index, sub in enumerate(items):
                yield ("items", index), sub
        else:
            yield ("items",), items


# ---------------------------------------------------------------------------
# The document
# ---------------------------------------------------------------------------


@dataclass
class Document:
    """One checked schema document. Read-only after construction.

    `nodes` lists every subschema reachable from the root (through keywords and
    references) with its path; `anchors` maps anchor names to their subschemas.
    """

    root: Schema
    draft: Draft = DRAFT_2020
    anchors: dict[str, Schema] = field(default_factory=dict)
    dynamic_anchors: dict[str, list[Schema]] = field(default_factory=dict)
    nodes: list[tuple[Path, Schema]] = field(default_factory=list)
    has_dynamic: bool = False  # a `$dynamicRef` appears somewhere
    _ids: set[int] = field(default_factory=set, repr=False)  # ids of `nodes`
    _paths: dict[int, Path] = field(default_factory=dict, repr=False)  # id -> path

    @classmethod
    def load(cls, root: Schema) -> Document:
        """Check the shape rules; raise ShapeError naming the first broken one."""
        doc = cls(root, draft_of(root))
        doc._index((), root)
        doc._check_refs()
        doc._check_cycles()
        return doc

    def path_of(self, node: Schema) -> Path | None:
        """Where `node` sits in the document (its first indexed path), if it does."""
        if len(self._paths) != len(self.nodes):
            self._paths = {id(known): path for path, known in reversed(self.nodes)}
        return self._paths.get(id(node))

    # -- references --------------------------------------------------------

    def resolve(self, ref: object) -> Schema:
        """The subschema a fragment reference names; ShapeError if none."""
        if not isinstance(ref, str) or not ref.startswith("#"):
            raise ShapeError(
                f"$ref {ref!r} is remote; only references inside the document "
                "('#', '#/pointer', '#anchor') are allowed"
            )
        fragment = unquote(ref[1:])
        if fragment == "" or fragment.startswith("/"):
            target = _pointer(self.root, fragment, ref)
        elif fragment in self.anchors:
            target = self.anchors[fragment]
        else:
            raise ShapeError(f"$ref {ref!r} names no anchor in the document")
        if not is_schema(target):
            raise ShapeError(f"$ref {ref!r} does not point to a schema")
        return target

    def deref(self, node: Schema) -> Schema:
        """Follow pure references: a node that is only a `$ref` (in draft-07 any node
        with `$ref`, whose siblings that draft ignores) becomes its target."""
        for _ in range(len(self.nodes) + 1):
            if not isinstance(node, dict) or "$ref" not in node:
                return node
            if self.draft == DRAFT_2020 and any(
                key not in IGNORED_AT_NODE for key in node if key != "$ref"
            ):
                return node
            node = self.resolve(node["$ref"])
        raise AssertionError("reference chain longer than the document")

    # -- construction ------------------------------------------------------

    def _index(self, path: Path, start: Schema) -> None:
        stack: list[tuple[Path, Schema]] = [(path, start)]
        while stack:
            path, node = stack.pop()
            if id(node) in self._ids:
                continue
            self._ids.add(id(node))
            self.nodes.append((path, node))
            self._note_anchors(path, node)
            for rel, sub in children(node, self.draft):
                stack.append((path + rel, sub))

    def _note_anchors(self, path: Path, node: Schema) -> None:
        if not isinstance(node, dict):
            return
        if path and "$schema" in node:
            raise ShapeError("$schema is only allowed at the root", path)
        if path and "$id" in node:
            anchor = node["$id"]
            if self.draft != DRAFT_07 or not str(anchor).startswith("#"):
                raise ShapeError("$id is only allowed at the root", path)
            self.anchors[str(anchor)[1:]] = node
        if isinstance(node.get("$anchor"), str) and self.draft == DRAFT_2020:
            self.anchors[node["$anchor"]] = node
        if isinstance(node.get("$dynamicAnchor"), str) and self.draft == DRAFT_2020:
            self.anchors.setdefault(node["$dynamicAnchor"], node)
            self.dynamic_anchors.setdefault(node["$dynamicAnchor"], []).append(node)

    def _check_refs(self) -> None:
        """Resolve every reference; index what the targets reach too (a pointer may
        lead anywhere in the document, even under a keyword Narad does not walk)."""
        done = 0
        while done < len(self.nodes):
            path, node = self.nodes[done]
            done += 1
            for key in ("$ref", "$dynamicRef"):
                if isinstance(node, dict) and key in node:
                    self.has_dynamic |= key == "$dynamicRef"
                    target = self._resolve_at(node[key], (*path, key))
                    self._index((*path, key), target)

    def _resolve_at(self, ref: object, path: Path) -> Schema:
        try:
            return self.resolve(ref)
        except ShapeError as error:
            raise ShapeError(error.reason, path) from None

    def in_place_targets(self, node: Schema) -> Iterator[Schema]:
        """Subschemas evaluated against the same instance as `node`."""
        if not isinstance(node, dict):
            return
        if "$ref" in node:
            yield self.resolve(node["$ref"])
        if "$dynamicRef" in node:
            yield self.resolve(node["$dynamicRef"])
            name = str(node["$dynamicRef"]).lstrip("#")
            yield from self.dynamic_anchors.get(name, [])
        for rel, sub in children(node, self.draft):
            if rel[0] in IN_PLACE:
                yield sub

    def _check_cycles(self) -> None:
        paths = {id(node): path for path, node in self.nodes}
        state: dict[int, int] = {}  # 1: on the DFS stack, 2: done
        for _, node in self.nodes:
            self._visit(node, state, paths)

    def _visit(self, node: Schema, state: dict[int, int], paths: dict[int, Path]) -> None:
        stack: list[tuple[Schema, Iterator[Schema]]] = []
        if state.get(id(node)):
            return
        state[id(node)] = 1
        stack.append((node, self.in_place_targets(node)))
        while stack:
            current, targets = stack[-1]
            nxt = next(targets, None)
            if nxt is None:
                state[id(current)] = 2
                stack.pop()
            elif state.get(id(nxt)) == 1:
                raise ShapeError(
                    "this reference cycle never descends into the document",
                    paths.get(id(current), ()),
                )
            elif not state.get(id(nxt)):
                state[id(nxt)] = 1
                stack.append((nxt, self.in_place_targets(nxt)))


# Keywords that never change which documents a schema accepts (or only locate others).
ANNOTATIONS = frozenset({"title", "description", "examples", "$comment", "default",
                         "deprecated", "readOnly", "writeOnly"})
IGNORED_AT_NODE = ANNOTATIONS | {"$schema", "$id", "$anchor", "$defs", "definitions"}


def _pointer(root: Schema, fragment: str, ref: str) -> Schema:
    node = root
    for raw in fragment.split("/")[1:]:
        token = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(node, Mapping) and token in node:
            node = node[token]
        elif isinstance(node, list) and token.isdigit() and int(token) < len(node):
            node = node[int(token)]
        else:
            raise ShapeError(f"$ref {ref!r} points to nothing in the document")
    return node
