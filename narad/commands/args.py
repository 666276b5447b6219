"""Argument parsing shared by command handlers, with Redis's rules and texts.

Numbers follow Redis's strict parsing: optional '-', digits, no '+', no spaces, no
leading zeros, within a signed 64-bit integer.
"""

from __future__ import annotations

from narad.errors import CommandError, not_integer

INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1


def parse_int(arg: bytes, error: str | None = None) -> int:
    """A signed 64-bit integer, or CommandError (NOT_INTEGER or `error`)."""
    if _is_canonical_int(arg):
        value = int(arg)
        if INT64_MIN <= value <= INT64_MAX:
            return value
    if error is not None:
        raise CommandError(error)
    raise not_integer()


def _is_canonical_int(arg: bytes) -> bool:
    digits = arg[1:] if arg[:1] == b"-" else arg
    if not digits or len(arg) > 20 or not digits.isdigit():
        return False
    return (digits == b"0" and arg == b"0") or digits[:1] != b"0"


def parse_timeout_ms(arg: bytes) -> int:
    """A BLOCK timeout in milliseconds (0: forever)."""
    value = parse_int(arg, "timeout is not an integer or out of range")
    if value < 0:
        raise CommandError("timeout is negative")
    return value


def lower(arg: bytes) -> bytes:
    return arg.lower()


def text(arg: bytes) -> str:
    return arg.decode("utf-8", "surrogateescape")
