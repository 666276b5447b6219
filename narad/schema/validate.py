"""Schema checking and compiled validators: one validator per schema version.

Owns what a valid schema is and which documents a schema accepts:

- A schema is JSON text for an object or a boolean, without duplicate keys, valid
  against its draft's meta-schema (2020-12 by default, draft-07 when `$schema` says
  so), plus the shape rules of `_document.py` (in-document references only).
- Every regex of a schema (`pattern`, the names of `patternProperties`) is in the
  subset of native.py, which runs in linear time with Python `re`'s meaning; any other
  is refused, naming the construct. No string of a schema holds a lone surrogate
  (JSON's `\ud800` escape), which the Rust engine cannot take; and a schema is
  compiled by the engines that will judge documents before it is accepted, so a
  schema that `check` accepts always compiles.
- The verdict on a document is python-jsonschema's, with `format` an annotation (not
  asserted, the 2020-12 default; draft-07 is treated the same way). Nothing is ever
  fetched: references resolve inside the document or the schema is refused.
  python-jsonschema's keyword modules evaluate patterns with `re.search`: their `re`
  is pointed at native.search (`_linear_regexes`), so its verdicts keep `re`'s
  meaning and never backtrack.
- The fast backend is jsonschema-rs, used where its verdicts equal jsonschema's:
  `pattern` and `multipleOf` run Python keyword code inside it (native.search, and
  jsonschema's float rule), and schemas with `patternProperties` use jsonschema
  itself. (jsonschema-rs is required all the same: its regex engine runs every
  pattern.) tests/schema prove the equivalence.
- Verdicts (`is_valid`, the produce path) come from a second jsonschema-rs validator
  that skips Python where that is proven not to matter: `pattern`s run directly in
  Rust's regex engine (rewritten by native.py to keep `re`'s meaning), and a
  Python keyword is registered only when the schema uses it (any registered keyword
  makes jsonschema-rs copy the whole document first). Explanations (`first_error`)
  always come from the first validator, so every error text stays as it was.
- A string jsonschema-rs cannot take (a lone surrogate, which JSON's `\ud800` escape
  can produce) is judged by jsonschema itself.

It never parses produced payloads (payload.py) and never compares schemas (compat.py).
"""

from __future__ import annotations

import functools
import importlib.util
import json
import re
import types
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Literal

from narad.schema import native
from narad.schema._document import (
    DRAFT_07,
    Document,
    Draft,
    Path,
    Schema,
    ShapeError,
    draft_of,
    json_path,
)
from narad.schema.errors import SchemaError, clip

if TYPE_CHECKING:
    from jsonschema.protocols import (  # type: ignore[import-untyped, unused-ignore]
        Validator as ReferenceValidator,
    )

# jsonschema, referencing and jsonschema-rs cost ~50 ms to import: they load on the
# first schema compiled or checked, so a server without schemas starts without them.
HAVE_RUST = importlib.util.find_spec("jsonschema_rs") is not None

SCHEMA_BYTES_MAX = 1 << 20  # a schema text longer than this is refused
Violation = tuple[str, str]  # (JSON path into the document, reason)
Backend = Literal["auto", "rust", "reference"]



@functools.cache
def _jsonschema() -> Any:
    import jsonschema  # type: ignore[import-untyped, unused-ignore]
    import jsonschema.exceptions  # type: ignore[import-untyped, unused-ignore]

    _linear_regexes()
    return jsonschema


def _linear_regexes() -> None:
    """Point the `re` of python-jsonschema's keyword modules at native.search.

    jsonschema evaluates every instance regex as `re.search(pattern, string)` and only
    reads the result's truth: `pattern`, `patternProperties`, and the property
    matching of `additionalProperties` (all patterns joined by `|`, a pattern of the
    subset too when its parts are) and `unevaluatedProperties`. Everything else those
    modules take from `re` stays `re`'s."""
    from jsonschema import _keywords, _legacy_keywords, _utils

    linear = types.SimpleNamespace(**{n: getattr(re, n) for n in dir(re) if not n.startswith("__")})
    linear.search = lambda pattern, string, flags=0: native.search(pattern, string) or None
    for module in (_keywords, _legacy_keywords, _utils):
        module.re = linear


@functools.cache
def _jsonschema_rs() -> Any:
    import jsonschema_rs  # type: ignore[import-not-found, unused-ignore]

    return jsonschema_rs


@functools.cache
def _no_fetch() -> Any:
    """A registry without `retrieve`: an unknown URI is unresolvable."""
    import referencing

    return referencing.Registry()


# ---------------------------------------------------------------------------
# Schema text -> checked schema
# ---------------------------------------------------------------------------


def load(text: str | bytes) -> Schema:
    """Parse and check a schema text; raise SchemaError saying what is wrong."""
    schema = _parse(text)
    check(schema)
    return schema


def prepare(text: str | bytes) -> Validator:
    """Parse, check and compile a schema text with the engines that will judge its
    documents (SchemaError saying what is wrong): what a new version must pass, so
    that applying it later, at any start, cannot fail."""
    return compile(_parse(text))


def _parse(text: str | bytes) -> Schema:
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
    return schema


def check(schema: Schema) -> Document:
    """Check a parsed schema against its meta-schema and Narad's shape rules, and that
    every regex in it runs in the linear-time engine (native.py)."""
    if not isinstance(schema, dict | bool):
        raise SchemaError(f"a schema is an object or a boolean, not {_kind(schema)}")
    try:
        _check_unicode(schema)
        draft = draft_of(schema)
        _check_meta(schema, draft)
        doc = Document.load(schema)
        _check_regexes(doc)
        return doc
    except ShapeError as error:
        raise SchemaError(error.reason, json_path(error.path)) from None
    except RecursionError:
        raise SchemaError("nested too deeply") from None


def _check_unicode(schema: Schema) -> None:
    """No key or string holds a lone surrogate (valid JSON escapes, but not text)."""
    stack: list[tuple[Path, object]] = [((), schema)]
    while stack:
        path, value = stack.pop()
        if isinstance(value, str) and _SURROGATE.search(value):
            raise ShapeError(f"the string {clip(ascii(value), 80)} holds {_LONE}", path)
        if isinstance(value, dict):
            for name, item in value.items():
                if _SURROGATE.search(name):  # the path shows the parent: replies are UTF-8
                    raise ShapeError(f"the name {clip(ascii(name), 80)} holds {_LONE}", path)
                stack.append(((*path, name), item))
        elif isinstance(value, list):
            stack.extend(((*path, index), item) for index, item in enumerate(value))


_SURROGATE = re.compile("[\ud800-\udfff]")  # one class: no backtracking
_LONE = "a lone surrogate (JSON's \\ud800-\\udfff escapes must pair up into one character)"


def _check_regexes(doc: Document) -> None:
    for path, node in doc.nodes:
        if not isinstance(node, dict):
            continue
        pattern = node.get("pattern")
        if isinstance(pattern, str):
            _refuse_regex(pattern, (*path, "pattern"))
        names = node.get("patternProperties")
        if isinstance(names, dict):
            for name in names:
                _refuse_regex(name, (*path, "patternProperties", name))
            if len(names) > 1 and "additionalProperties" in node:
                # python-jsonschema's additionalProperties matches them as one regex.
                _refuse_regex("|".join(names), (*path, "patternProperties"))


def _refuse_regex(pattern: str, path: Path) -> None:
    why = native.problem(pattern)
    if why is not None:
        raise ShapeError(f"pattern {clip(pattern, 80)!r} uses {why}; Narad runs only "
                         "patterns it can match in linear time", path)


def _check_meta(schema: Schema, draft: Draft) -> None:
    cls = _reference_class(draft)
    meta = cls(cls.META_SCHEMA, format_checker=cls.FORMAT_CHECKER)
    error = _jsonschema().exceptions.best_match(meta.iter_errors(schema))
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

    `is_valid` is the hot path; `first_error` explains a refusal. `verdict` is
    `is_valid` without its safety net: the same answer, but it may raise ValueError
    for a document the backend cannot take (the caller then asks `is_valid`).
    """

    __slots__ = ("_first_error", "backend", "draft", "is_valid", "native_patterns", "schema",
                 "verdict")

    def __init__(
        self,
        schema: Schema,
        draft: Draft,
        backend: str,
        is_valid: Callable[[object], bool],
        first_error: Callable[[object], Violation | None],
        verdict: Callable[[object], bool] | None = None,
        native_patterns: bool = False,
    ) -> None:
        self.schema = schema
        self.draft = draft
        self.backend = backend  # "rust" or "reference"
        self.is_valid = is_valid
        self._first_error = first_error
        self.verdict = verdict or is_valid
        self.native_patterns = native_patterns  # `pattern`s run in Rust's regex engine

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
    try:
        if backend == "rust" or (backend == "auto" and rust_fits(doc)):
            return _rust(schema, doc)
        return _reference(schema, doc.draft)
    except RecursionError:
        raise SchemaError("nested too deeply") from None
    except Exception as error:  # the engine's own limits; `check` should leave none
        raise SchemaError(f"the validation engine refuses it: {error}") from None


def rust_fits(doc: Document) -> bool:
    """Whether jsonschema-rs gives jsonschema's verdicts on this document."""
    return HAVE_RUST and not any(
        isinstance(node, dict) and "patternProperties" in node for _, node in doc.nodes
    )


def reference_validator(schema: Schema, draft: Draft | None = None) -> ReferenceValidator:
    """python-jsonschema's validator for `schema`: the definition of a verdict."""
    cls = _reference_class(draft or draft_of(schema))
    return cls(schema, registry=_no_fetch())


def _reference_class(draft: Draft) -> type[ReferenceValidator]:
    jsonschema = _jsonschema()
    cls: type[ReferenceValidator] = (
        jsonschema.Draft7Validator if draft == DRAFT_07 else jsonschema.Draft202012Validator
    )
    return cls


def _reference(schema: Schema, draft: Draft) -> Validator:
    impl = reference_validator(schema, draft)

    def is_valid(instance: object) -> bool:
        return _reference_is_valid(impl, instance)

    def first_error(instance: object) -> Violation | None:
        return _reference_first_error(impl, instance)

    return Validator(schema, draft, "reference", is_valid, first_error)


def _rust(schema: Schema, doc: Document) -> Validator:
    draft = doc.draft
    jsonschema_rs = _jsonschema_rs()
    cls = jsonschema_rs.Draft7Validator if draft == DRAFT_07 else (
        jsonschema_rs.Draft202012Validator)
    impl = cls(
        schema,
        validate_formats=False,
        keywords={"pattern": _Pattern, "multipleOf": _MultipleOf},
        retriever=_refuse_fetch,
    )
    fast, native_patterns = _fast_rust(cls, schema, doc)
    reference = _Lazy(lambda: reference_validator(schema, draft))

    def is_valid(instance: object) -> bool:
        try:
            return bool(fast.is_valid(instance))
        except UnicodeEncodeError:  # a lone surrogate: Rust strings cannot hold one
            return _reference_is_valid(reference.get(), instance)

    def first_error(instance: object) -> Violation | None:
        try:
            error = next(iter(impl.iter_errors(instance)), None)
        except UnicodeEncodeError:
            return _reference_first_error(reference.get(), instance)
        if error is None:
            return None
        return json_path(tuple(error.instance_path)), clip(error.message)

    return Validator(schema, draft, "rust", is_valid, first_error, fast.is_valid,
                     native_patterns)


def _fast_rust(cls: Any, schema: Schema, doc: Document) -> tuple[Any, bool]:
    """The verdict-only twin of `_rust`'s validator: native `pattern`s where native.py
    proves them equal to `re.search`, Python keywords only where the schema uses them.
    Returns (validator, whether its patterns are native)."""
    node_ids = {id(node) for _, node in doc.nodes if isinstance(node, dict)}
    rewrites: dict[int, str] = {}
    native_patterns = True
    uses_multiple_of = False
    seen: set[int] = set()
    for node in _dicts(schema):
        if id(node) in seen:  # one object in two places (built in Python): no rewriting
            native_patterns = False
        seen.add(id(node))
        if id(node) in node_ids and "multipleOf" in node:
            uses_multiple_of = True
        pattern = node.get("pattern")
        if not isinstance(pattern, str):
            continue
        translated = native.translate(pattern) if id(node) in node_ids else None
        if translated is None:  # outside the subset, or "pattern" in a non-schema place
            native_patterns = False
        else:
            rewrites[id(node)] = translated
    keywords: dict[str, Any] = {}
    if uses_multiple_of:
        keywords["multipleOf"] = _MultipleOf
    if not native_patterns:
        keywords["pattern"] = _Pattern
    options: dict[str, Any] = {"validate_formats": False, "retriever": _refuse_fetch}
    if keywords:
        options["keywords"] = keywords
    if native_patterns and rewrites:
        try:
            return cls(_with_patterns(schema, rewrites), **options,
                       pattern_options=native.regex_options()), True
        except Exception:  # a pattern past Rust's size limits: `pattern` stays _Pattern
            keywords["pattern"] = _Pattern
            options["keywords"] = keywords
            return cls(schema, **options), False
    return cls(schema, **options), False


def _dicts(value: object) -> Iterator[dict[str, Any]]:
    """Every object anywhere in a JSON value (schema positions or not)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            yield item
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


def _with_patterns(value: Any, rewrites: dict[int, str]) -> Any:
    """A copy of `value` whose objects named in `rewrites` (by id) get that `pattern`."""
    if isinstance(value, dict):
        out = {key: _with_patterns(item, rewrites) for key, item in value.items()}
        if id(value) in rewrites:
            out["pattern"] = rewrites[id(value)]
        return out
    if isinstance(value, list):
        return [_with_patterns(item, rewrites) for item in value]
    return value


class _Lazy:
    """A value built on first use (the reference validator is rarely needed)."""

    __slots__ = ("_make", "_value")

    def __init__(self, make: Callable[[], Any]) -> None:
        self._make = make
        self._value: Any = None

    def get(self) -> Any:
        if self._value is None:
            self._value = self._make()
        return self._value


def _reference_is_valid(impl: ReferenceValidator, instance: object) -> bool:
    try:
        return bool(impl.is_valid(instance))
    except RecursionError:
        return False


def _reference_first_error(impl: ReferenceValidator, instance: object) -> Violation | None:
    try:
        error = _jsonschema().exceptions.best_match(impl.iter_errors(instance))
    except RecursionError:
        return "$", "document nested too deeply to validate"
    if error is None:
        return None
    return json_path(tuple(error.absolute_path)), clip(error.message)


def _refuse_fetch(uri: str) -> Any:
    raise ValueError(f"{uri} is outside the document; nothing is fetched")


# jsonschema-rs keyword classes: the Python rules of jsonschema/_keywords.py.


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


class _Pattern:
    """`pattern` with `re.search`'s meaning, as jsonschema has it, run by native.search."""

    def __init__(self, parent: object, value: str, path: object) -> None:
        self.pattern = value

    def validate(self, instance: object) -> None:
        if isinstance(instance, str) and not native.search(self.pattern, instance):
            raise ValueError(f"{instance!r} does not match {self.pattern!r}")


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
            from fractions import Fraction  # the rare case; fractions costs ~2 ms to load

            return (Fraction(instance) / Fraction(divisor)).denominator == 1
    return not instance % divisor
