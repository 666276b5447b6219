"""Log lines: Redis's level names and one line per event, as logfmt text or JSON.

Every line of the data node and the sentinel is made here (narad/process.py installs
the handler). A line is `ts=... level=... logger=...` and then the event's own
`key=value` pairs, as the message gives them (`event=ready port=6379`), and what the
message says beyond them as `msg="..."`. With the `json` format the same fields make
one JSON object per line.

The contract, whatever a call site passes:
- levels carry the names `loglevel` is set with: debug, verbose, notice, warning
  (records above warning, errors included, are shown as warning, as Redis has no
  higher level);
- no Python repr reaches a line: a bytes argument is shown as its text (UTF-8, bytes
  that are not UTF-8 as \\xNN), a `%r` argument and the value of every `key=%s` are
  quoted logfmt-style when they need it ("a b", with \\" \\\\ \\n escaped) and bare
  otherwise (a bare value may hold a backslash: k=a\\xffb);
- a line never holds a newline: a traceback is one quoted `traceback=` field.

This module imports no other narad module: every layer logs through it.
"""

from __future__ import annotations

import json
import logging
import re
import time
import traceback
from collections.abc import Mapping
from typing import Any

# -- levels ------------------------------------------------------------------------------

DEBUG = logging.DEBUG
VERBOSE = logging.INFO
NOTICE = 25  # between verbose and warning, as in Redis: what a node does routinely
WARNING = logging.WARNING
logging.addLevelName(NOTICE, "NOTICE")

# `loglevel`'s values, as logging levels.
LOG_LEVELS = {
    "debug": DEBUG,
    "verbose": VERBOSE,
    "notice": NOTICE,
    "warning": WARNING,
    "nothing": logging.CRITICAL + 1,
}

FORMATS = ("text", "json")  # `log-format`'s values


def level_name(levelno: int) -> str:
    """The `loglevel` name a record's level is shown with."""
    if levelno >= WARNING:
        return "warning"
    if levelno >= NOTICE:
        return "notice"
    return "verbose" if levelno >= VERBOSE else "debug"


# -- values -------------------------------------------------------------------------------


def text(value: object) -> str:
    """A value as a line shows it: bytes as UTF-8 text (\\xNN for what is not)."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).decode("utf-8", "backslashreplace")
    return str(value)


_BARE = re.compile(r'[^\s"=\x00-\x1f\x7f]+')
_ESCAPES = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def quote(value: object) -> str:
    """`value` as a logfmt value: bare when it has no space, quote, `=` or control
    character (and is not empty), else in double quotes, with quotes, backslashes
    and control characters escaped."""
    shown = text(value)
    if _BARE.fullmatch(shown):
        return shown
    escaped = "".join(
        _ESCAPES.get(c) or (f"\\x{ord(c):02x}" if ord(c) < 0x20 or ord(c) == 0x7F else c)
        for c in shown
    )
    return f'"{escaped}"'


# -- messages -----------------------------------------------------------------------------

# A printf conversion of a logging message: its mapping key, flags, width, precision
# and type.
_CONVERSION = re.compile(r"%(\([^)]*\))?[#0 +-]*(\*|\d+)?(?:\.(\*|\d+))?[hlL]?([a-zA-Z%])")


def message(record: logging.LogRecord) -> str:
    """The record's message with its arguments made line-safe (see the module doc):
    `%r` and `key=%s` arguments quoted, bytes shown as text."""
    fmt, args = str(record.msg), record.args
    if not args:
        return fmt
    if isinstance(args, Mapping):
        return fmt % {k: _shown(v, "s", f"=%({k})" in fmt) for k, v in args.items()}
    out: list[str] = []
    values: list[Any] = []
    at = 0
    rest = list(args)
    for match in _CONVERSION.finditer(fmt):
        kind = match.group(4)
        out.append(fmt[at : match.start()])
        at = match.end()
        if kind == "%":
            out.append("%%")
            continue
        if "*" in match.group(0) or not rest:  # rare forms: formatted as logging would
            return record.getMessage()
        value = rest.pop(0)
        if kind in "rsa":
            after_equals = match.start() > 0 and fmt[match.start() - 1] == "="
            out.append("%s")
            values.append(_shown(value, kind, after_equals))
        else:
            out.append(match.group(0))
            values.append(value)
    out.append(fmt[at:])
    try:
        return "".join(out) % tuple(values)
    except (TypeError, ValueError):
        return record.getMessage()


def _shown(value: object, kind: str, after_equals: bool) -> str:
    if kind != "s" or after_equals:
        return quote(value)
    return text(value)


# The event's own pairs at the start of a message: key=value, the value bare or quoted.
_PAIR = re.compile(r'\s*([a-z][a-z0-9_.]*)=("(?:[^"\\]|\\.)*"|[^\s"]*)')


def fields(body: str) -> tuple[list[tuple[str, str]], str]:
    """The leading key=value pairs of a message (values as written) and the text
    after them (a bare value's trailing `:` or `;` belongs to the text)."""
    pairs: list[tuple[str, str]] = []
    at = 0
    while True:
        match = _PAIR.match(body, at)
        if match is None:
            break
        key, value, end = match.group(1), match.group(2), match.end()
        after = body[end : end + 1]
        if not value.startswith('"') and value[-1:] in (":", ";", ","):
            pairs.append((key, value[:-1]))  # the text follows
            at = end
            break
        if after in (":", ";", ","):  # a quoted value, then the text
            pairs.append((key, value))
            at = end + 1
            break
        if after and not after.isspace():
            break
        pairs.append((key, value))
        at = end
    rest = body[at:].strip()
    return pairs, rest.lstrip(":;,").strip()


def _unquote(value: str) -> str:
    if not value.startswith('"'):
        return value
    return re.sub(r"\\(x[0-9a-f]{2}|.)", _unescape, value[1:-1])


def _unescape(match: re.Match[str]) -> str:
    code = match.group(1)
    if code.startswith("x") and len(code) == 3:
        return chr(int(code[1:], 16))
    return {"n": "\n", "r": "\r", "t": "\t"}.get(code, code)


_NUMBER = re.compile(r"-?(0|[1-9][0-9]*)(\.[0-9]+)?")


def _json_value(raw: str) -> Any:
    """A bare number as a JSON number; every other value as a string."""
    if _NUMBER.fullmatch(raw):
        return float(raw) if "." in raw else int(raw)
    return _unquote(raw)


# -- the formatter -----------------------------------------------------------------------


class LineFormatter(logging.Formatter):
    """One line per record: logfmt text (`json=False`) or a JSON object."""

    def __init__(self, json_lines: bool = False) -> None:
        super().__init__()
        self.json_lines = json_lines

    def format(self, record: logging.LogRecord) -> str:
        head = [
            ("ts", _timestamp(record.created)),
            ("level", level_name(record.levelno)),
            ("logger", record.name),
        ]
        pairs, rest = fields(message(record))
        if rest:
            pairs.append(("msg", quote(rest)))
        if record.exc_info:
            trace = "".join(traceback.format_exception(*record.exc_info)).rstrip()
            pairs.append(("traceback", quote(trace)))
        if self.json_lines:
            obj: dict[str, Any] = dict(head)
            for key, value in pairs:
                obj.setdefault(key, _json_value(value))
            return json.dumps(obj, ensure_ascii=False)
        return " ".join(f"{key}={value}" for key, value in [*head, *pairs])


def _timestamp(created: float) -> str:
    """ISO 8601 in UTC with milliseconds: 2026-01-02T03:04:05.678Z."""
    seconds = int(created)
    millis = int((created - seconds) * 1000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{millis:03d}Z"
