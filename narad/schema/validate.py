"""Schema checking and compiled validators: one validator per schema version.

Owns what a valid schema is and which documents a schema accepts:

- A schema is JSON text for an object or a boolean, without duplicate keys, valid
  against its draft's meta-schema (2020-12 by default, draft-07 when `$schema` says
  so), plus the shape rules of `_document.py` (in-document references only).
- The verdict on a document is python-jsonschema's, with `format` an annotation (not
  asserted, the 2020-12 default; draft-07 is treated the same way). Nothing is ever
  fetched: references resolve inside the document or the schema is refused.
- The fast backend is jsonschema-rs, used where its verdicts equal jsonschema's:
  `pattern` and `multipleOf` run jsonschema's own Python code inside it (Python `re`
  semantics, jsonschema's float rule), and schemas with `patternProperties` (whose
  regexes jsonschema-rs would run with its own engine) use jsonschema itself. Without
  jsonschema-rs installed every schema uses jsonschema. tests/schema prove the
  equivalence.

It never parses produced payloads (payload.py) and never compares schemas (compat.py).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from fractions import Fraction
from typing import Any, Literal

import jsonschema  # type: ignore[import-untyped, unused-ignore]
import jsonschema.exceptions  # type: ignore[import-untyped, unused-ignore]
import referencing
from jsonschema.protocols import (  # type: ignore[import-untyped, unused-ignore]
    Validator as ReferenceValidator,
)

from narad.schema._document import (
    DRAFT_07,
    Document,
    Draft,
    Schema,
    ShapeError,
    draft_of,
    json_path,
)
from narad.schema.errors import SchemaError, clip

try:
    import jsonschema_rs  # type: ignore[import-not-found, unused-ignore]

    HAVE_RUST = True
except ImportError:  # pragma: no cover - exercised only without the optional backend
    HAVE_RUST = False

SCHEMA_BYTES_MAX = 1 << 20  # a schema text longer than this is refused
Violation = tuple[str, str]  # (JSON path into the document, reason)
Backend = Literal["auto", "rust", "reference"]

_NO_FETCH = referencing.Registry()  # no `retrieve`: an unknown URI is unresolvable


# ---------------------------------------------------------------------------
# Schema text -> checked schema
# ---------------------------------------------------------------------------


def load(text: str | bytes) -> Schema:
    """Parse and check a schema text; raise SchemaError saying what is wrong."""
    if len(text) > SCHEMA_BYTES_MAX:
        raise SchemaError(f"longer than {SCHEMA_BYTES_MAX} bytes")
    try:
        if isinstance(text, bytes):
            text = text.decode("utf-8")
        schema = _SCHEMA_DECODER.decode(text)
    except (UnicodeDecodeError, ValueError) as error:
        raise SchemaError(f"not JSON: {error}") from None
    except RecursionError:
        raise SchemaError("nested too deeply") from None
    check(schema)
    return schema


def check(schema: Schema) -> Document:
    """Check a parsed schema against its meta-schema and Narad's shape rules."""
    if not isinstance(schema, dict | bool):
        raise SchemaError(f"a schema is an object or a boolean, not {_kind(schema)}")
    try:
        draft = draft_of(schema)
        _check_meta(schema, draft)
        return Document.load(schema)
    except ShapeError as error:
        raise SchemaError(error.reason, json_path(error.path)) from None
    except RecursionError:
        raise SchemaError("nested too deeply") from None


def _check_meta(schema: Schema, draft: Draft) -> None:
    cls = _reference_class(draft)
    meta = cls(cls.META_SCHEMA, format_checker=cls.FORMAT_CHECKER)
    error = jsonschema.exceptions.best_match(meta.iter_errors(schema))
    if error is not None:
        raise SchemaError(clip(error.message), json_path(tuple(error.absolute_path)))


def _refuse_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"duplicate key {key!r}")
        out[key] = value
    return out


def refuse_constant(name: str) -> Any:
    """JSON has no NaN or Infinity; Python's parser accepts them unless told not to."""
    raise ValueError(f"{name} is not JSON")


_SCHEMA_DECODER = json.JSONDecoder(
    object_pairs_hook=_refuse_duplicates, parse_constant=refuse_constant
)


def _kind(value: object) -> str:
    return {list: "an array", str: "a string", int: "a number", float: "a number",
            type(None): "null"}.get(type(value), type(value).__name__)


# ---------------------------------------------------------------------------
# Compiled validators
# ---------------------------------------------------------------------------


class Validator:
    """One compiled schema version; immutable, safe to share between tasks.

    `is_valid` is the hot path; `first_error` explains a refusal.
    """

    __slots__ = ("_first_error", "backend", "draft", "is_valid", "schema")

    def __init__(
        self,
        schema: Schema,
        draft: Draft,
        backend: str,
        is_valid: Callable[[object], bool],
        first_error: Callable[[object], Violation | None],
    ) -> None:
        self.schema = schema
        self.draft = draft
        self.backend = backend  # "rust" or "reference"
        self.is_valid = is_valid
        self._first_error = first_error

    def first_error(self, instance: object) -> Violation | None:
        """None when `instance` is valid, else (JSON path, reason) of one violation."""
        if self.is_valid(instance):
            return None
        error = self._first_error(instance)
        assert error is not None, "is_valid and the error list disagree"
        return error


def compile(schema: Schema, backend: Backend = "auto") -> Validator:
    """Check `schema` (SchemaError if invalid) and build its validator once."""
    doc = check(schema)
    if backend == "rust" or (backend == "auto" and rust_fits(doc)):
        return _rust(schema, doc.draft)
    return _reference(schema, doc.draft)


def rust_fits(doc: Document) -> bool:
    """Whether jsonschema-rs gives jsonschema's verdicts on this document."""
    return HAVE_RUST and not any(
        isinstance(node, dict) and "patternProperties" in node for _, node in doc.nodes
    )


def reference_validator(schema: Schema, draft: Draft | None = None) -> ReferenceValidator:
    """python-jsonschema's validator for `schema`: the definition of a verdict."""
    cls = _reference_class(draft or draft_of(schema))
    return cls(schema, registry=_NO_FETCH)


def _reference_class(draft: Draft) -> type[ReferenceValidator]:
    cls: type[ReferenceValidator] = (
        jsonschema.Draft7Validator if draft == DRAFT_07 else jsonschema.Draft202012Validator
    )
    return cls


def _reference(schema: Schema, draft: Draft) -> Validator:
    impl = reference_validator(schema, draft)

    def is_valid(instance: object) -> bool:
        try:
            return bool(impl.is_valid(instance))
        except RecursionError:
            return False

    def first_error(instance: object) -> Violation | None:
        try:
            error = jsonschema.exceptions.best_match(impl.iter_errors(instance))
        except RecursionError:
            return "$", "document nested too deeply to validate"
        if error is None:
            return None
        return json_path(tuple(error.absolute_path)), clip(error.message)

    return Validator(schema, draft, "reference", is_valid, first_error)


def _rust(schema: Schema, draft: Draft) -> Validator:
    cls = jsonschema_rs.Draft7Validator if draft == DRAFT_07 else (
        jsonschema_rs.Draft202012Validator)
    impl = cls(
        schema,
        validate_formats=False,
        keywords={"pattern": _Pattern, "multipleOf": _MultipleOf},
        retriever=_refuse_fetch,
    )

    def first_error(instance: object) -> Violation | None:
        error = next(iter(impl.iter_errors(instance)), None)
        if error is None:
            return None
        return json_path(tuple(error.instance_path)), clip(error.message)

    return Validator(schema, draft, "rust", impl.is_valid, first_error)


def _refuse_fetch(uri: str) -> Any:
    raise ValueError(f"{uri} is outside the document; nothing is fetched")


# jsonschema-rs keyword classes: the Python rules of jsonschema/_keywords.py.


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


class _Pattern:
    """`pattern` with Python's `re.search`, as jsonschema does."""

    def __init__(self, parent: object, value: str, path: object) -> None:
        self.regex = re.compile(value)

    def validate(self, instance: object) -> None:
        if isinstance(instance, str) and not self.regex.search(instance):
            raise ValueError(f"{instance!r} does not match {self.regex.pattern!r}")


class _MultipleOf:
    """`multipleOf` with jsonschema's rule: float division for a float divisor, `%`
    for an integer one (exact Fraction arithmetic where floats overflow)."""

    def __init__(self, parent: object, value: int | float, path: object) -> None:
        self.divisor = value

    def validate(self, instance: object) -> None:
        if _is_number(instance) and not multiple_of(instance, self.divisor):  # type: ignore[arg-type]
            raise ValueError(f"{instance!r} is not a multiple of {self.divisor!r}")


def multiple_of(instance: int | float, divisor: int | float) -> bool:
    if isinstance(divisor, float):
        try:
            quotient = instance / divisor
            return int(quotient) == quotient
        except OverflowError:
            return (Fraction(instance) / Fraction(divisor)).denominator == 1
    return not instance % divisor
