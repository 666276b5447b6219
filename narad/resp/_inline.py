"""Splitting an inline (telnet-style) command line into arguments.

Owns: the quoting rules of Redis's inline protocol. Must never: look for the end of
the line or enforce limits (the parser does), or do I/O.

The rules, as Redis 7.0 applies them:

- Arguments are separated by runs of blanks (space, \\t, \\n, \\v, \\f, \\r). An
  unquoted argument ends at a space, \\t, \\n or \\r only, so "a\\vb" is one argument.
- "double quotes" take the escapes \\n \\r \\t \\b \\a \\xHH (two hex digits) and
  \\<any other byte> for that byte; 'single quotes' take only \\' for a quote.
- A quote may start in the middle of an argument (foo"bar" is foobar) and ends it:
  the closing quote must be followed by a blank or the end of the line.
- A quote left open, or a closing quote followed by anything else, is an
  "unbalanced quotes" protocol error.
"""

from __future__ import annotations

from typing import Final

_BLANKS: Final = frozenset(b" \t\n\v\f\r")  # C isspace() in the C locale
_ENDS_UNQUOTED: Final = frozenset(b" \t\n\r")
_HEX: Final = frozenset(b"0123456789abcdefABCDEF")
_ESCAPES: Final = {ord("n"): 10, ord("r"): 13, ord("t"): 9, ord("b"): 8, ord("a"): 7}
_BACKSLASH: Final = ord("\\")
_DOUBLE: Final = ord('"')
_SINGLE: Final = ord("'")


def split_inline(line: bytes) -> list[bytes] | None:
    """The arguments of `line` (without its line ending), or None when its
    quotes are unbalanced. A blank line gives []."""
    if not any(c in line for c in (b'"', b"'", b"\v", b"\f")):
        return line.split()  # only space, \t, \n, \r can separate: str.split agrees
    args: list[bytes] = []
    at = 0
    while True:
        while at < len(line) and line[at] in _BLANKS:
            at += 1
        if at == len(line):
            return args
        arg = bytearray()
        at = _read_argument(line, at, arg)
        if at < 0:
            return None
        args.append(bytes(arg))


def _read_argument(line: bytes, at: int, arg: bytearray) -> int:
    """Append the argument starting at `at` to `arg`; return the index after it,
    or -1 on unbalanced quotes."""
    while at < len(line):
        byte = line[at]
        if byte in _ENDS_UNQUOTED:
            return at + 1
        if byte == _DOUBLE:
            return _read_double_quoted(line, at + 1, arg)
        if byte == _SINGLE:
            return _read_single_quoted(line, at + 1, arg)
        arg.append(byte)
        at += 1
    return at


def _read_double_quoted(line: bytes, at: int, arg: bytearray) -> int:
    while at < len(line):
        byte = line[at]
        if byte == _BACKSLASH and at + 1 < len(line):
            at = _read_escape(line, at, arg)
        elif byte == _DOUBLE:
            return _after_closing_quote(line, at)
        else:
            arg.append(byte)
            at += 1
    return -1


def _read_escape(line: bytes, at: int, arg: bytearray) -> int:
    """`line[at]` is a backslash followed by at least one byte."""
    code = line[at + 1]
    if code == ord("x") and at + 3 < len(line) and {line[at + 2], line[at + 3]} <= _HEX:
        arg.append(int(line[at + 2 : at + 4], 16))
        return at + 4
    arg.append(_ESCAPES.get(code, code))
    return at + 2


def _read_single_quoted(line: bytes, at: int, arg: bytearray) -> int:
    while at < len(line):
        byte = line[at]
        if byte == _BACKSLASH and line[at + 1 : at + 2] == b"'":
            arg.append(_SINGLE)
            at += 2
        elif byte == _SINGLE:
            return _after_closing_quote(line, at)
        else:
            arg.append(byte)
            at += 1
    return -1


def _after_closing_quote(line: bytes, at: int) -> int:
    """`line[at]` closes a quote: it must end the line or precede a blank."""
    after = at + 1
    if after < len(line) and line[after] not in _BLANKS:
        return -1
    return after
