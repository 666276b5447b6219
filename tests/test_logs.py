"""narad/logs.py: level names, line-safe values, logfmt text and JSON lines."""

from __future__ import annotations

import json
import logging
import sys

import pytest

from narad import logs


def _record(level: int, msg: str, *args: object, exc: bool = False) -> logging.LogRecord:
    exc_info = None
    if exc:
        try:
            raise ValueError("bad\nthing")
        except ValueError:
            exc_info = sys.exc_info()
    return logging.LogRecord("narad.test", level, __file__, 1, msg, args, exc_info)


def _line(record: logging.LogRecord, json_lines: bool = False) -> str:
    return logs.LineFormatter(json_lines).format(record)


@pytest.mark.parametrize(
    ("level", "name"),
    [
        (logging.DEBUG, "debug"),
        (logging.INFO, "verbose"),
        (logs.NOTICE, "notice"),
        (logging.WARNING, "warning"),
        (logging.ERROR, "warning"),
        (logging.CRITICAL, "warning"),
    ],
)
def test_levels_carry_loglevel_names(level: int, name: str) -> None:
    assert f" level={name} " in _line(_record(level, "event=x"))
    assert logs.level_name(logs.LOG_LEVELS[name]) == name


def test_loglevel_order() -> None:
    levels = [logs.LOG_LEVELS[n] for n in ("debug", "verbose", "notice", "warning", "nothing")]
    assert levels == sorted(levels) and len(set(levels)) == 5


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        ("plain", "plain"),
        ("", '""'),
        ("two words", '"two words"'),
        ('say "hi"', '"say \\"hi\\""'),
        ("a=b", '"a=b"'),
        ("back\\slash", "back\\slash"),
        ("back\\ slash", '"back\\\\ slash"'),
        ("line\nbreak", '"line\\nbreak"'),
        ("bell\x07", '"bell\\x07"'),
        (b"bytes", "bytes"),
        (b"\xff\xfeq", "\\xff\\xfeq"),
        ("ünï", "ünï"),
        (12, "12"),
    ],
)
def test_quote(value: object, shown: str) -> None:
    assert logs.quote(value) == shown


def test_no_repr_reaches_a_line() -> None:
    line = _line(
        _record(
            logging.WARNING,
            "event=x key=%r other=%s plain %s and %r count=%d",
            b"k'1",
            b'q"2',
            b"free",
            "it's",
            3,
        )
    )
    assert "b'" not in line and 'b"' not in line
    assert "key=k'1 other=\"q\\\"2\"" in line
    assert 'msg="plain free and it\'s count=3"' in line


def test_event_pairs_then_text() -> None:
    line = _line(_record(logs.NOTICE, "event=fenced epoch=%d: writes are refused", 5))
    assert line.endswith(' event=fenced epoch=5 msg="writes are refused"')
    assert line.startswith("ts=") and " logger=narad.test " in line
    free = _line(_record(logging.INFO, "recovering %s: %d of %d bytes", "/a b", 1, 2))
    assert free.endswith(' msg="recovering /a b: 1 of 2 bytes"')


def test_one_line_even_with_a_traceback() -> None:
    line = _line(_record(logging.ERROR, "event=failed", exc=True))
    assert "\n" not in line and " traceback=\"Traceback " in line
    obj = json.loads(_line(_record(logging.ERROR, "event=failed", exc=True), json_lines=True))
    assert obj["traceback"].startswith("Traceback") and "bad\nthing" in obj["traceback"]


def test_json_lines() -> None:
    record = _record(
        logs.NOTICE, "event=recovered streams=%d seconds=%.3f path=%s: done", 3, 0.25, "/x y"
    )
    obj = json.loads(_line(record, json_lines=True))
    assert obj["level"] == "notice" and obj["logger"] == "narad.test"
    assert obj["event"] == "recovered" and obj["streams"] == 3 and obj["seconds"] == 0.25
    assert obj["path"] == "/x y" and obj["msg"] == "done"
    assert obj["ts"].endswith("Z") and "T" in obj["ts"]
    odd = json.loads(_line(_record(logging.WARNING, "event=x key=%s", b"\xff\n"), True))
    assert odd["key"] == "\\xff\n"


def test_rare_formats_still_format() -> None:
    assert _line(_record(logging.INFO, "%d%%", 5)).endswith(" msg=5%")
    assert _line(_record(logging.INFO, "%*d", 3, 7)).endswith(" msg=7")  # text trimmed
    mapping = logging.LogRecord("n", logging.INFO, "", 1, "v=%(v)s", ({"v": b"x y"},), None)
    assert _line(mapping).endswith('v="x y"')
