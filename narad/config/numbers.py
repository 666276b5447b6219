"""Numbers in settings as Redis reads and writes them: strict 64-bit integers, byte
counts with units, percentiles as C's %f, and the C limits that bound them.

A text that is not a number of the kind raises ValueError whose text is Redis's reason
("argument must be a memory value", "argument couldn't be parsed into an integer").
"""

from __future__ import annotations

import re

KB = 1024
MB = 1024 * KB
GB = 1024 * MB
INT_MAX = 2**31 - 1
UINT_MAX = 2**32 - 1
LLONG_MAX = 2**63 - 1
LLONG_MIN = -(2**63)

_MEMORY = re.compile(r"([0-9]+)(b|k|kb|m|mb|g|gb)?", re.IGNORECASE)
_UNITS = {"": 1, "b": 1, "k": 1000, "kb": KB, "m": 1000**2, "mb": MB, "g": 1000**3, "gb": GB}


def parse_memory(text: str) -> int:
    """A byte count with Redis's units: b, k (1000), kb (1024), m, mb, g, gb, any case.

    Raises ValueError("argument must be a memory value") for anything else (a sign,
    blanks, a fraction, an empty string).
    """
    match = _MEMORY.fullmatch(text)
    if match is None:
        raise ValueError("argument must be a memory value")
    return int(match[1]) * _UNITS[(match[2] or "").lower()]


def format_memory(count: int) -> str:
    """A byte count as CONFIG REWRITE writes it: in gb, mb or kb when exact."""
    for unit, size in (("gb", GB), ("mb", MB), ("kb", KB)):
        if count and count % size == 0:
            return f"{count // size}{unit}"
    return str(count)


_INTEGER = re.compile(r"-?[1-9][0-9]*|0")


def parse_integer(text: str) -> int:
    """A signed 64-bit integer in Redis's strict form: no '+', no blanks, no leading
    zeros, no "-0". Raises ValueError otherwise."""
    if _INTEGER.fullmatch(text) is None or not LLONG_MIN <= int(text) <= LLONG_MAX:
        raise ValueError("argument couldn't be parsed into an integer")
    return int(text)


def format_percentile(value: float) -> str:
    """A percentile as Redis prints it: C's %f, trailing zeros (and point) dropped."""
    return f"{value:f}".rstrip("0").rstrip(".")
