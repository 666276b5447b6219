"""Produced bytes -> the JSON document a schema judges, and the verdict.

Owns how a Q.PUSH payload and an XADD entry become one document:

- Q.PUSH: the payload is UTF-8 JSON text (RFC 8259: no NaN or Infinity, nothing
  after the value). Text that is not JSON is refused at path `$`.
- XADD without FIELD: the entry's field/value pairs form an object whose values are
  strings (both decoded as UTF-8); a field name given twice is refused.
- XADD with FIELD name: that one field's value is the JSON document; the other fields
  are not judged. A missing or repeated FIELD is refused.

Each helper returns None (accepted) or a `Violation` (JSON path into the document,
reason); it never raises for bad input and never appends anything.

The meaning of the JSON text is the standard library's (`json`, as configured below).
A faster parser, msgspec, is tried first where its result is proven equal (see
`fast_parse`); whenever it refuses the text, or a document is not accepted at once,
the standard library's path runs and gives the verdict and the error text, so a
refusal reads exactly as it always did.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable

from narad.schema._document import json_path
from narad.schema.errors import clip
from narad.schema.validate import Validator, Violation, refuse_constant

_DECODER = json.JSONDecoder(parse_constant=refuse_constant)



@functools.cache
def _fast_decoder() -> Callable[[bytes], object] | None:
    """msgspec's JSON decoder, imported on the first payload parsed (~5 ms)."""
    try:
        import msgspec
    except ImportError:  # pragma: no cover - exercised only without the optional parser
        return None
    return msgspec.json.Decoder().decode

UNSURE = object()  # fast_parse: "ask the standard library"
# The standard library's parser raises RecursionError past the interpreter's recursion
# limit (1000 frames, minus the caller's stack); a text with at most this many `[`/`{`
# nests no deeper, far below that, so both parsers reach the same end. A nesting of d
# needs 2d bytes, so shorter texts need no count.
NESTING_SAFE = 200


def fast_parse(data: bytes) -> object:
    """The document the standard library would parse from `data`, or UNSURE.

    msgspec's JSON decoder, where it gives the standard library's value exactly: it
    refuses (and UNSURE is returned) every text the standard library refuses, plus
    NaN / Infinity (refused here too), numbers that overflow a float (`1e400`: the
    standard library's `inf`), integers past `sys.get_int_max_str_digits()`, lone
    surrogate escapes (`"\\ud800"`) and invalid UTF-8. Integers of any size stay
    exact, floats are correctly rounded, a repeated key keeps its last value in its
    first place, as in `json`. Deep nesting is left to the standard library.
    tests/schema/test_payload.py proves the equivalence.
    """
    decode = _fast_decoder()
    if decode is None:
        return UNSURE
    if len(data) > 2 * NESTING_SAFE and data.count(b"[") + data.count(b"{") > NESTING_SAFE:
        return UNSURE
    try:
        return decode(data)
    except Exception:  # any refusal: the standard library decides and explains
        return UNSURE


def parse_json(data: bytes) -> tuple[object, Violation | None]:
    """(document, None), or (None, violation) when `data` is not JSON text."""
    try:
        return _DECODER.decode(data.decode("utf-8")), None
    except UnicodeDecodeError:
        return None, ("$", "invalid JSON: not UTF-8")
    except ValueError as error:  # JSONDecodeError, NaN/Infinity, over-long integers
        return None, ("$", clip(f"invalid JSON: {error}"))
    except RecursionError:
        return None, ("$", "invalid JSON: nested too deeply")


def validate_payload(validator: Validator, payload: bytes) -> Violation | None:
    """Judge a Q.PUSH payload: parsed as JSON, then validated."""
    document = fast_parse(payload)
    if document is not UNSURE:
        try:
            if validator.verdict(document):
                return None
        except ValueError:  # a string the fast backend cannot take: the full path judges
            pass
    return _judge_payload(validator, payload)


def _judge_payload(validator: Validator, payload: bytes) -> Violation | None:
    document, violation = parse_json(payload)
    if violation is not None:
        return violation
    return validator.first_error(document)


def validate_fields(
    validator: Validator, fields: list[bytes], field: str | None
) -> Violation | None:
    """Judge an XADD entry given as [field, value, field, value, ...]."""
    assert len(fields) % 2 == 0, "XADD arity is checked before validation"
    if field is not None:
        return _validate_field(validator, fields, field)
    try:  # the common case: UTF-8 names and values, no name twice, accepted
        pairs = iter(fields)
        document = {
            name.decode(): value.decode() for name, value in zip(pairs, pairs, strict=False)
        }
        if 2 * len(document) == len(fields) and validator.verdict(document):
            return None
    except ValueError:  # not UTF-8, or a string the fast backend cannot take
        pass
    return _judge_fields(validator, fields)


def _judge_fields(validator: Validator, fields: list[bytes]) -> Violation | None:
    document: dict[str, str] = {}
    for index in range(0, len(fields), 2):
        try:
            name = fields[index].decode("utf-8")
            value = fields[index + 1].decode("utf-8")
        except UnicodeDecodeError:
            return "$", f"field pair {index // 2 + 1} is not UTF-8 text"
        if name in document:
            return json_path((name,)), "field given twice"
        document[name] = value
    return validator.first_error(document)


def _validate_field(validator: Validator, fields: list[bytes], field: str) -> Violation | None:
    wanted = field.encode("utf-8")
    values = [fields[i + 1] for i in range(0, len(fields), 2) if fields[i] == wanted]
    if not values:
        return "$", f"missing field {field!r} holding the JSON document"
    if len(values) > 1:
        return "$", f"field {field!r} given twice"
    return validate_payload(validator, values[0])
