"""Property tests: round trips, random bytes, and the two parsers (and the
compiled twins) agreeing on every input."""

from __future__ import annotations

import os
from itertools import pairwise
from typing import Any

import hiredis
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from narad._speedups import load
from narad.resp import (
    HiredisRequestParser,
    PurePythonRequestParser,
    _hiredis_parser,
    encode_request,
)
from tests.examples import examples

from ._support import PARSERS, Outcome, parser_classes, run

Parser = type[PurePythonRequestParser]
TWIN = load("resp")

commands_st = st.lists(st.lists(st.binary(max_size=40), min_size=1, max_size=8), max_size=12)

# Pieces that make RESP-like inputs: framing bytes, numbers, quotes, blanks,
# reply type markers, whole frames, and random bytes.
# fmt: off
TOKENS = [
    b"*", b"$", b"\r\n", b"\r", b"\n", b"0", b"1", b"2", b"4", b"10", b"-1", b"-", b"+",
    b":", b"=", b"(", b",", b"#", b"_", b"%", b"~", b">", b"|", b"!", b" ", b"\t", b"\x0b",
    b'"', b"'", b"\\", b"\\x4", b"x", b"\x00", b"\xff", b"PING", b"*1\r\n", b"*2\r\n",
    b"$4\r\nPING\r\n", b"$0\r\n\r\n", b"*-1\r\n", b"*0\r\n", b"*1234567\r\n", b"$12\r\n",
]
# fmt: on
# Frames of every RESP type, well formed or nearly: what hiredis accepts and
# Redis may not.
# fmt: off
ELEMENTS = [
    b"+OK\r\n", b":1\r\n", b"=8\r\ntxt:PING\r\n", b"(12\r\n", b",1.5\r\n", b"#t\r\n",
    b"_\r\n", b"-ERR x\r\n", b"%1\r\n$1\r\na\r\n:2\r\n", b"~1\r\n$1\r\na\r\n",
    b">1\r\n$1\r\na\r\n", b"*1\r\n$1\r\na\r\n", b"$-1\r\n", b"$4\r\nPINGXY",
    b"$4\r\nPING\r", b"$2\r\n\r\n\r\n", b"$0\r\n\r\n",
]
# fmt: on
# A bulk-shaped frame under any marker: "+1\r\n1\r\n" looks like "$1\r\n1\r\n" but
# for one byte, and hiredis reads it as an array element.
bulk_like_st = st.builds(
    lambda marker, payload: b"%b%d\r\n%b\r\n" % (marker, len(payload), payload),
    st.sampled_from([b"$", b"$", b"+", b":", b"=", b"(", b",", b"-", b"_", b"#", b"*"]),
    st.one_of(st.sampled_from([b"1", b"", b"ab", b"12"]), st.binary(max_size=10)),
)
element_st = st.one_of(st.sampled_from(ELEMENTS), bulk_like_st)
array_st = st.builds(
    lambda marker, elements: b"%b%d\r\n" % (marker, len(elements)) + b"".join(elements),
    st.sampled_from([b"*", b"*", b"*", b"~", b">"]),
    st.lists(element_st, max_size=4),
)
piece_st = st.one_of(
    st.sampled_from(TOKENS),
    st.binary(max_size=6),
    st.lists(st.binary(max_size=12), min_size=1, max_size=4).map(encode_request),
    array_st,
)
resp_like_st = st.lists(piece_st, max_size=30).map(b"".join)
limits_st: st.SearchStrategy[dict[str, int]] = st.one_of(
    st.just({}),
    st.fixed_dictionaries(
        {},
        optional={
            "max_bulk_len": st.integers(0, 12),
            "max_multibulk_len": st.integers(0, 4),
            "max_inline_len": st.integers(1, 12),
            "max_query_buffer": st.integers(0, 120),
        },
    ),
)


def cut(data: bytes, points: list[int]) -> list[bytes]:
    edges = sorted({0, len(data), *(p % (len(data) + 1) for p in points)})
    return [data[a:b] for a, b in pairwise(edges)] or [data]


@parser_classes
@settings(max_examples=examples(300), deadline=None)
@given(commands=commands_st, points=st.lists(st.integers(0, 10_000), max_size=6))
def test_parse_of_encode_is_identity(
    parser_class: Parser, commands: list[list[bytes]], points: list[int]
) -> None:
    data = b"".join(map(encode_request, commands))
    assert run(parser_class, cut(data, points)) == Outcome(commands=commands)


@parser_classes
@settings(max_examples=examples(500), deadline=None)
@given(data=st.binary(max_size=200))
def test_random_bytes_parse_or_raise_protocol_error(parser_class: Parser, data: bytes) -> None:
    """run() catches ProtocolError and QueryBufferLimit (impossible at the
    default limits); any other exception escapes and fails the test."""
    outcome = run(parser_class, [data])
    assert not outcome.buffer_limit


@settings(max_examples=examples(1500), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    data=st.one_of(resp_like_st, st.binary(max_size=120)),
    points=st.lists(st.integers(0, 10_000), max_size=5),
    limits=limits_st,
    authenticated=st.booleans(),
)
def test_parsers_agree_and_splits_do_not_matter(
    data: bytes, points: list[int], limits: dict[str, int], authenticated: bool
) -> None:
    outcomes = []
    for parser_class in PARSERS:
        for chunks in ([data], cut(data, points), [data[i : i + 1] for i in range(len(data))]):
            outcomes.append(run_as(parser_class, chunks, authenticated, limits))
    if "max_query_buffer" in limits:  # how much is held at once depends on the split
        assert all(o == outcomes[0] for o in outcomes[::3])
        assert all(o == outcomes[1] for o in outcomes[1::3])
    else:
        assert all(o == outcomes[0] for o in outcomes)


def run_as(
    parser_class: Parser, chunks: list[bytes], authenticated: bool, limits: dict[str, int]
) -> Outcome:
    if authenticated:
        return run(parser_class, chunks, **limits)

    class Unauthenticated(parser_class):  # type: ignore[valid-type,misc]
        def __init__(self, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self.authenticated = False

    return run(Unauthenticated, chunks, **limits)


# ---------------------------------------------------------------------------
# The hiredis fast path's helpers and their compiled twins
# ---------------------------------------------------------------------------


def hiredis_replies(data: bytes) -> list[Any]:
    reader = hiredis.Reader()
    reader.feed(data)
    replies = []
    try:
        while (reply := reader.gets()) is not False:
            replies.append(reply)
    except (hiredis.ProtocolError, TypeError):  # TypeError: `%1\r\n*1...`, a list as key
        pass
    return replies


@settings(max_examples=examples(1000), deadline=None)
@given(
    data=resp_like_st, limits=st.tuples(st.integers(0, 5), st.integers(0, 12), st.integers(0, 5))
)
def test_frames_end_proves_only_what_the_reference_reads(
    data: bytes, limits: tuple[int, int, int]
) -> None:
    """Whatever hiredis proposes, an accepted run is exactly what the reference
    parser reads from the same bytes."""
    replies = hiredis_replies(data)
    for count in range(1, len(replies) + 1):
        end = _hiredis_parser.py_frames_end(replies[:count], data, 0, *limits)
        if TWIN is not None:
            assert TWIN.frames_end(replies[:count], data, 0, *limits) == end
        if end < 0:
            continue
        max_count, max_len, max_line = limits
        parser = PurePythonRequestParser(
            max_bulk_len=max_len, max_multibulk_len=max_count, max_inline_len=max_line
        )
        parser.feed(data[:end])
        assert parser.commands() == [r for r in replies[:count] if r]
        assert parser.held_bytes == 0


@pytest.mark.skipif(TWIN is None, reason="compiled twin not built")
@settings(max_examples=examples(500), deadline=None)
@given(data=resp_like_st, start=st.integers(0, 200), stop=st.integers(0, 200))
def test_big_count_at_twin(data: bytes, start: int, stop: int) -> None:
    assert TWIN is not None
    assert TWIN.DIGITS == _hiredis_parser.BIG_COUNT_DIGITS
    expected = _hiredis_parser.py_big_count_at(data, start, stop)
    assert TWIN.big_count_at(data, start, stop) == expected


def test_hiredis_parser_is_tested() -> None:
    assert HiredisRequestParser in PARSERS


def test_compiled_twin_is_built_when_required() -> None:
    """CI sets NARAD_REQUIRE_SPEEDUPS=1 so that the compiled path is really tested."""
    if os.environ.get("NARAD_REQUIRE_SPEEDUPS") != "1":
        pytest.skip("NARAD_REQUIRE_SPEEDUPS is not set")
    if os.environ.get("NARAD_PURE", "") not in ("", "0"):
        assert _hiredis_parser.frames_end is _hiredis_parser.py_frames_end
    else:
        assert TWIN is not None and _hiredis_parser.frames_end is TWIN.frames_end


@settings(max_examples=examples(1500), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    data=st.one_of(resp_like_st, commands_st.map(lambda c: b"".join(map(encode_request, c)))),
    limits=st.tuples(st.integers(0, 9), st.integers(0, 40), st.integers(1, 6)),
)
def test_whole_commands_are_what_the_reference_reads(
    data: bytes, limits: tuple[int, int, int]
) -> None:
    """feed_whole's helper, both twins: when it answers, the input is nothing but
    those commands for the reference parser, with nothing left over."""
    answers = [_hiredis_parser.py_whole_commands(data, *limits)]
    if TWIN is not None:
        answers.append(TWIN.whole_commands(data, *limits))
    max_count, max_len, max_line = limits
    for answer in answers:
        if answer is None:
            continue
        parser = PurePythonRequestParser(
            max_bulk_len=max_len, max_multibulk_len=max_count, max_inline_len=max_line
        )
        parser.feed(data)
        assert parser.commands() == answer
        assert parser.commands() == []
        assert not parser.has_input
    if None not in answers:
        assert answers[0] == answers[-1]


@pytest.mark.skipif(TWIN is None, reason="compiled twin not built")
@settings(max_examples=examples(300), deadline=None)
@given(commands=st.lists(st.lists(st.binary(max_size=40), min_size=1, max_size=8), min_size=1))
def test_whole_commands_twin_takes_every_canonical_run(commands: list[list[bytes]]) -> None:
    assert TWIN is not None
    data = b"".join(map(encode_request, commands))
    assert TWIN.whole_commands(data, 1 << 20, 1 << 29, 1 << 16) == commands
