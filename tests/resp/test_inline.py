"""Inline command splitting: Redis's quoting rules, one case per rule."""

from __future__ import annotations

import pytest

from narad.resp._inline import split_inline

CASES = [
    # blanks
    (b"", []),
    (b"   ", []),
    (b"a b  c", [b"a", b"b", b"c"]),
    (b"\ta\t\r", [b"a"]),
    (b"a\rb\nc", [b"a", b"b", b"c"]),
    # \v and \f are blanks between arguments but do not end an unquoted one
    (b"\x0ba\x0c", [b"a\x0c"]),
    (b"a\x0bb", [b"a\x0bb"]),
    (b"\x0c a", [b"a"]),
    # bytes above 127 are not blanks
    (b"\xff\xa0 \x85", [b"\xff\xa0", b"\x85"]),
    # double quotes and their escapes
    (b'"a b"', [b"a b"]),
    (b'""', [b""]),
    (b'"\\n\\r\\t\\b\\a"', [b"\n\r\t\b\a"]),
    (b'"\\\\\\"\\q\\ "', [b'\\"q ']),
    (b'"\\x41\\x4a\\x4F"', [b"AJO"]),
    (b'"\\x4G"', [b"x4G"]),
    (b'"\\x4"', [b"x4"]),
    (b'"\\x00"', [b"\x00"]),
    (b'"a\r\x0bb"', [b"a\r\x0bb"]),
    # single quotes: only \' is an escape
    (b"'a\\'b'", [b"a'b"]),
    (b"'a\\nb'", [b"a\\nb"]),
    (b"'a\\\\'", None),  # the second backslash escapes the closing quote
    (b"''", [b""]),
    (b"'a \"b\"'", [b'a "b"']),
    # a quote may start inside an argument and ends it
    (b'foo"bar"', [b"foobar"]),
    (b"foo'bar' baz", [b"foobar", b"baz"]),
    (b'a"b c" d', [b"ab c", b"d"]),
    # the closing quote must be followed by a blank (isspace) or the end
    (b'"a"\x0bb', [b"a", b"b"]),
    (b'"a"\x0c', [b"a"]),
    (b'"a"b', None),
    (b"'a'b", None),
    (b'"a""b"', None),
    # unterminated
    (b'"a', None),
    (b"'a", None),
    (b'"a\\"', None),
    (b'"a\\', None),
    (b"'a\\'", None),
    (b'x "', None),
]


@pytest.mark.parametrize(("line", "expected"), CASES, ids=[repr(c[0]) for c in CASES])
def test_split_inline(line: bytes, expected: list[bytes] | None) -> None:
    assert split_inline(line) == expected


def test_plain_lines_split_on_space_tab_cr_lf_only() -> None:
    """The fast path (no quotes, no \\v or \\f) agrees with the general one."""
    line = b" SET\tkey \r value\n"
    general = split_inline(line + b' ""')
    assert general is not None
    assert split_inline(line) == general[:-1] == [b"SET", b"key", b"value"]
