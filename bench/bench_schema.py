"""Validating a realistic 10-field order document, per backend, and the JSON parse
that Q.PUSH adds in front of it (the standard library's and msgspec's, which Q.PUSH
tries first), and the whole per-payload check.

python -m pytest bench/bench_schema.py --benchmark-only
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from narad.schema import compile, validate_payload
from narad.schema.payload import UNSURE, fast_parse
from narad.schema.validate import HAVE_RUST, reference_validator

ORDER_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["id", "customer", "amount", "currency", "created_ms", "items"],
    "properties": {
        "id": {"type": "string", "pattern": "^ord_[a-z0-9]{8,32}$"},
        "customer": {"type": "string", "minLength": 1, "maxLength": 64},
        "amount": {"type": "number", "minimum": 0},
        "currency": {"enum": ["EUR", "USD", "GBP", "INR"]},
        "created_ms": {"type": "integer", "minimum": 0},
        "items": {
            "type": "array",
            "minItems": 1,
            "maxItems": 100,
            "items": {
                "type": "object",
                "required": ["sku", "qty"],
                "properties": {"sku": {"type": "string"}, "qty": {"type": "integer", "minimum": 1}},
                "additionalProperties": False,
            },
        },
        "express": {"type": "boolean"},
        "note": {"type": ["string", "null"], "maxLength": 500},
        "tags": {"type": "array", "items": {"type": "string"}, "uniqueItems": True},
        "address": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "zip": {"type": "string"}},
        },
    },
    "additionalProperties": False,
}
ORDER = {
    "id": "ord_8f3k2j1m9x",
    "customer": "alice",
    "amount": 129.5,
    "currency": "EUR",
    "created_ms": 1_700_000_000_000,
    "items": [{"sku": "A-1", "qty": 2}, {"sku": "B-7", "qty": 1}],
    "express": True,
    "note": None,
    "tags": ["gift", "fragile"],
    "address": {"city": "Pune", "zip": "411001"},
}
PAYLOAD = json.dumps(ORDER).encode()

BACKENDS: dict[str, Callable[[Any], bool]] = {
    "jsonschema": reference_validator(ORDER_SCHEMA).is_valid,
    "narad-reference": compile(ORDER_SCHEMA, "reference").is_valid,
}
if HAVE_RUST:
    BACKENDS["narad-rust"] = compile(ORDER_SCHEMA, "rust").is_valid
try:
    import fastjsonschema

    _fast = fastjsonschema.compile(ORDER_SCHEMA)

    def _fast_is_valid(doc: Any) -> bool:
        try:
            _fast(doc)
            return True
        except fastjsonschema.JsonSchemaException:
            return False

    BACKENDS["fastjsonschema"] = _fast_is_valid
except ImportError:
    pass


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_validate_order(benchmark, backend: str) -> None:  # type: ignore[no-untyped-def]
    assert benchmark(BACKENDS[backend], ORDER) is True


def test_parse_order_json(benchmark) -> None:  # type: ignore[no-untyped-def]
    assert benchmark(json.loads, PAYLOAD) == ORDER


def test_fast_parse_order_json(benchmark) -> None:  # type: ignore[no-untyped-def]
    assert fast_parse(PAYLOAD) is not UNSURE
    assert benchmark(fast_parse, PAYLOAD) == ORDER


def test_validate_payload_order(benchmark) -> None:  # type: ignore[no-untyped-def]
    validator = compile(ORDER_SCHEMA)
    assert benchmark(validate_payload, validator, PAYLOAD) is None
