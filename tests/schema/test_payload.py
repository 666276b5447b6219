"""narad/schema/payload.py: the fast parser gives the standard library's document
exactly (or steps aside), and the fast produce paths give the verdicts and error
texts of the full paths."""

from __future__ import annotations

import json
import math
import struct
import sys
from decimal import Decimal, localcontext
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from narad.schema import compile, validate_fields, validate_payload
from narad.schema.payload import (
    NESTING_SAFE,
    UNSURE,
    _judge_fields,
    _judge_payload,
    fast_parse,
    parse_json,
)
from tests.schema.strategies import json_values, schemas

SETTINGS = settings(max_examples=300, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def same(a: Any, b: Any) -> bool:
    """Equal values of equal types all the way down, keys in the same order
    (`1 == 1.0 == True` and `0.0 == -0.0` for `==`; not here)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float):
        return (a == b and math.copysign(1, a) == math.copysign(1, b)) or (a != a and b != b)
    return bool(a == b)


def check_parse(data: bytes) -> None:
    """fast_parse says UNSURE, or exactly what the standard library parses."""
    fast = fast_parse(data)
    if fast is UNSURE:
        return
    expected, violation = parse_json(data)
    assert violation is None, (data, violation)
    assert same(fast, expected), (data, fast, expected)


# -- texts where parsers are known to differ ------------------------------------------

TEXTS = [
    b"18446744073709551615", b"18446744073709551616", b"-9223372036854775808",
    b"-9223372036854775809", b"9" * 100, b"-" + b"9" * 400, b"1" * 4300, b"1" * 4301,
    b"1e400", b"-1e400", b"1E400", b"1e-400", b"1" * 400 + b".0", b"0." + b"1" * 5000,
    b"-0", b"-0.0", b"0e1", b"1.0e+2", b"0.30000000000000004", b"4.9e-324",
    b"2.4703282292062327e-324", b"2.4703282292062328e-324", b"1.7976931348623157e308",
    b"1.7976931348623158e308", b"1.7976931348623159e308", b"9007199254740993",
    b"9007199254740993.0", b"NaN", b"-NaN", b"Infinity", b"-Infinity", b"nan", b"inf",
    b'{"a":1,"b":2,"a":3}', b'{"a":{"x":1},"a":[2]}', b'"\\ud800"', b'"\\udc00x"',
    b'"\\ud800\\udc00"', b'"\\udfff\\ud800"', b'"\\ud83d\\ude00"', b'"\\u0000"', b'"\\/"',
    b'"\\x"', b'"\\U0041"', b"\xef\xbb\xbf{}", b'"\xed\xa0\x80"', b'"\xc0\x80"',
    b'"\xf4\x90\x80\x80"', b'"\xff"', b'"a\x01"', b'"a\x1f"', b'"a\x7f"', b'"\xc2\x85"',
    b'"a\tb"', b" {} ", b"\t[]\r\n", b"{}\x0c", b"\x0b1", b"\xa0 1", b"\xc2\xa0 1",
    b"1\x00", b"[1,]", b'{"a":1,}', b"[1 2]", b"", b" ", b"1 2", b"01", b"-01", b"1.",
    b".5", b"+1", b"-", b"1e", b"1e+", b"0x10", b"true", b"True", b"null", b"nul",
    b'{"a"}', b"{1:2}", b"'a'", b'"a', b"[" * 150 + b"]" * 150,
    b"[" * (NESTING_SAFE + 1) + b"]" * (NESTING_SAFE + 1), b"[" * 3000 + b"]" * 3000,
    b'["' + b"[" * 300 + b'"]', b'{"a":[' + b"{}," * 150 + b"{}]}",
]


@pytest.mark.parametrize("data", TEXTS)
def test_known_differences_step_aside(data: bytes) -> None:
    check_parse(data)


def test_what_the_fast_parser_may_not_decide() -> None:
    for data in (b"1e400", b"NaN", b'"\\ud800"', b"1" * 4301, b"[" * 3000 + b"]" * 3000,
                 b"\xef\xbb\xbf{}", b'"\xff"', b"[1,]"):
        assert fast_parse(data) is UNSURE, data
    assert fast_parse(b"1" * 4300) == int("1" * 4300)
    assert fast_parse(b"18446744073709551616") == 2**64


def test_integer_digit_limit_is_the_interpreters() -> None:
    old = sys.get_int_max_str_digits()
    try:
        sys.set_int_max_str_digits(640)
        check_parse(b"7" * 700)
        assert fast_parse(b"7" * 640) == int("7" * 640)
        sys.set_int_max_str_digits(0)
        check_parse(b"7" * 5000)
    finally:
        sys.set_int_max_str_digits(old)


# -- generated texts --------------------------------------------------------------------


@SETTINGS
@given(value=json_values(depth=4), indent=st.sampled_from([None, 1, "\t"]),
       ascii_only=st.booleans())
def test_serialized_values_parse_the_same(value: Any, indent: Any, ascii_only: bool) -> None:
    check_parse(json.dumps(value, indent=indent, ensure_ascii=ascii_only).encode())


ANY_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner,
                                                                max_size=4),
    max_leaves=20,
)


@SETTINGS
@given(value=ANY_JSON)
def test_any_json_value_parses_the_same(value: Any) -> None:
    check_parse(json.dumps(value, ensure_ascii=False).encode("utf-8", "surrogatepass"))
    check_parse(json.dumps(value).encode())


SOUP = st.text(alphabet='{}[]",:0123456789.eE+-\\u/ \t\n\r\x0catrufnlsNIy\u00e9\ud800\x01',
               max_size=24)


@SETTINGS
@given(text=SOUP)
@example(text='{"a": 1, "a": 2}')
@example(text='"\\ud800\\udc00"')
def test_json_like_soup_parses_the_same(text: str) -> None:
    check_parse(text.encode("utf-8", "surrogatepass"))


@st.composite
def number_texts(draw: st.DrawFn) -> str:
    digits = draw(st.text(alphabet="0123456789", min_size=1, max_size=40))
    digits = digits.lstrip("0") or "0"
    point = draw(st.integers(0, len(digits)))
    text = digits if point == len(digits) else f"{digits[:point] or '0'}.{digits[point:]}"
    exponent = draw(st.one_of(st.just(""), st.integers(-400, 400).map(lambda e: f"e{e}"),
                              st.integers(0, 30).map(lambda e: f"E+{e}")))
    return draw(st.sampled_from(["", "-"])) + text + exponent


@SETTINGS
@given(text=number_texts())
def test_numbers_parse_the_same(text: str) -> None:
    check_parse(text.encode())
    check_parse(f"[{text}]".encode())


@SETTINGS
@given(bits=st.integers(0, 2**64 - 1))
def test_floats_round_trip_and_halfway_points_round_the_same(bits: int) -> None:
    value = struct.unpack("<d", struct.pack("<Q", bits))[0]
    if not math.isfinite(value):
        return
    check_parse(repr(value).encode())
    above = math.nextafter(value, math.inf)
    if not math.isfinite(above):
        return
    with localcontext() as context:
        context.prec = 1200
        halfway = (Decimal(value) + Decimal(above)) / 2  # exact: ties to even decide
        for delta in (0, Decimal(10) ** -1100, -(Decimal(10) ** -1100)):
            check_parse(format(halfway + delta, "e").encode())


# -- the produce paths ----------------------------------------------------------------

ORDER = {
    "type": "object",
    "required": ["id", "amount"],
    "properties": {
        "id": {"type": "string", "pattern": "^ord_[a-z0-9]{8,32}$"},
        "amount": {"type": "number", "minimum": 0},
        "big": {"type": "integer", "maximum": 2**64},
        "note": {"type": ["string", "null"], "maxLength": 3},
    },
    "additionalProperties": False,
}
PAYLOADS = [
    b'{"id": "ord_12345678", "amount": 1}', b'{"id": "ord_12345678\\n", "amount": 1}',
    b'{"id": "ord_12345678\\n\\n", "amount": 1}', b'{"id": "ord_1", "amount": 1}',
    b'{"id": "ord_12345678", "amount": -1}', b'{"id": "ord_12345678", "amount": 1e400}',
    b'{"id": "ord_12345678", "amount": NaN}', b'{"id": "ord_12345678", "amount": 1, "x": 0}',
    b'{"id": "ord_12345678", "amount": 1, "big": 18446744073709551616}',
    b'{"id": "ord_12345678", "amount": 1, "big": 18446744073709551617}',
    b'{"id": "ord_12345678", "amount": 1, "big": 18446744073709551616.0}',
    b'{"id": "ord_12345678", "amount": 1, "note": "\\ud800"}',
    b'{"id": "ord_12345678", "amount": 1, "note": "\\ud800\\ud800\\ud800\\ud800"}',
    b'{"id": "ord_12345678", "amount": 1, "id": 3}', b'{"id": "ord_12345678"}', b"{",
    b'{"id": "ord_12345678", "amount": 1} x', b'"\xff"', b"[]", b"\xef\xbb\xbf{}", b"",
    b"[" * 3000 + b"]" * 3000,
]


@pytest.mark.parametrize("payload", PAYLOADS)
def test_payload_verdicts_and_texts_equal_the_full_path(payload: bytes) -> None:
    for backend in ("auto", "reference"):
        validator = compile(ORDER, backend)  # type: ignore[arg-type]
        assert validate_payload(validator, payload) == _judge_payload(validator, payload)


@SETTINGS
@given(schema=schemas(), docs=st.lists(json_values(), max_size=6))
def test_random_payloads_equal_the_full_path(schema: Any, docs: list[Any]) -> None:
    validator = compile(schema)
    for doc in docs:
        payload = json.dumps(doc).encode()
        assert validate_payload(validator, payload) == _judge_payload(validator, payload)


FLAT = {
    "type": "object",
    "required": ["id"],
    "properties": {"id": {"type": "string", "pattern": "^ord_[a-z0-9]{8,32}$"},
                   "qty": {"type": "string", "pattern": "^[1-9][0-9]{0,3}$"},
                   "city": {"type": "string", "maxLength": 4}},
    "additionalProperties": False,
}
ENTRIES = [
    [b"id", b"ord_12345678"], [b"id", b"ord_12345678\n"], [b"id", b"ord_12345678\n\n"],
    [b"id", b"ord_12345678", b"qty", b"0"], [b"id", b"ord_12345678", b"qty", b"12\n"],
    [b"id", b"ord_12345678", b"id", b"ord_12345678"], [b"id", b"ord_1"],
    [b"id", b"ord_12345678", b"x", b"1"], [b"id", b"\xff"], [b"\xed\xa0\x80", b"1"],
    [b"id", b"ord_12345678", b"city", b"\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9"],
    [b"id", b"ord_12345678", b"city", b"\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9"], [],
]


@pytest.mark.parametrize("fields", ENTRIES)
def test_entry_verdicts_and_texts_equal_the_full_path(fields: list[bytes]) -> None:
    for backend in ("auto", "reference"):
        validator = compile(FLAT, backend)  # type: ignore[arg-type]
        assert validate_fields(validator, fields, None) == _judge_fields(validator, fields)


@SETTINGS
@given(pairs=st.lists(st.tuples(st.sampled_from(["id", "qty", "city", "x", "\u00e9"]),
                                st.text(alphabet="ord_1234\n\u00e9\u0661", max_size=14)),
                      max_size=4))
def test_random_entries_equal_the_full_path(pairs: list[tuple[str, str]]) -> None:
    validator = compile(FLAT)
    fields = [part.encode() for pair in pairs for part in pair]
    assert validate_fields(validator, fields, None) == _judge_fields(validator, fields)
