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
"""

from __future__ import annotations

import json

from narad.schema._document import json_path
from narad.schema.errors import clip
from narad.schema.validate import Validator, Violation, refuse_constant

_DECODER = json.JSONDecoder(parse_constant=refuse_constant)


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
