"""Reply encoding: exact frames for every type in both protocols, and round
trips through hiredis and through redis-py's own RESP2 and RESP3 parsers."""

from __future__ import annotations

import io
import math
from collections import OrderedDict, deque
from enum import IntEnum
from typing import Any

import hiredis
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from redis._parsers.resp2 import _RESP2Parser
from redis._parsers.resp3 import _RESP3Parser

from narad._speedups import load
from narad.resp import (
    NULL_ARRAY,
    OK,
    PONG,
    QUEUED,
    BigNumber,
    ErrorReply,
    Push,
    Reply,
    SimpleString,
    Verbatim,
    encode,
    encode_into,
    encode_request,
    encoder,
)

INF, NAN = float("inf"), float("nan")

# value, RESP2 frame, RESP3 frame
FRAMES: list[tuple[Reply, bytes, bytes]] = [
    (b"foo", b"$3\r\nfoo\r\n", b"$3\r\nfoo\r\n"),
    (b"", b"$0\r\n\r\n", b"$0\r\n\r\n"),
    (b"a\r\nb", b"$4\r\na\r\nb\r\n", b"$4\r\na\r\nb\r\n"),
    (bytearray(b"ab"), b"$2\r\nab\r\n", b"$2\r\nab\r\n"),
    (memoryview(b"abc")[1:], b"$2\r\nbc\r\n", b"$2\r\nbc\r\n"),
    ("héllo", b"$6\r\nh\xc3\xa9llo\r\n", b"$6\r\nh\xc3\xa9llo\r\n"),
    (b"x" * 5000, b"$5000\r\n" + b"x" * 5000 + b"\r\n", b"$5000\r\n" + b"x" * 5000 + b"\r\n"),
    (0, b":0\r\n", b":0\r\n"),
    (1, b":1\r\n", b":1\r\n"),
    (-1, b":-1\r\n", b":-1\r\n"),
    (123456, b":123456\r\n", b":123456\r\n"),
    (2**63 - 1, b":9223372036854775807\r\n", b":9223372036854775807\r\n"),
    (-(2**63), b":-9223372036854775808\r\n", b":-9223372036854775808\r\n"),
    (True, b":1\r\n", b"#t\r\n"),
    (False, b":0\r\n", b"#f\r\n"),
    (1.5, b"$3\r\n1.5\r\n", b",1.5\r\n"),
    (0.1, b"$19\r\n0.10000000000000001\r\n", b",0.10000000000000001\r\n"),
    (-0.0, b"$2\r\n-0\r\n", b",-0\r\n"),
    (1e300, b"$23\r\n1.0000000000000001e+300\r\n", b",1.0000000000000001e+300\r\n"),
    (INF, b"$3\r\ninf\r\n", b",inf\r\n"),
    (-INF, b"$4\r\n-inf\r\n", b",-inf\r\n"),
    (NAN, b"$3\r\nnan\r\n", b",nan\r\n"),
    (None, b"$-1\r\n", b"_\r\n"),
    (NULL_ARRAY, b"*-1\r\n", b"_\r\n"),
    ([], b"*0\r\n", b"*0\r\n"),
    ([b"a", 1, None], b"*3\r\n$1\r\na\r\n:1\r\n$-1\r\n", b"*3\r\n$1\r\na\r\n:1\r\n_\r\n"),
    ((b"a", [b"b"]), b"*2\r\n$1\r\na\r\n*1\r\n$1\r\nb\r\n", b"*2\r\n$1\r\na\r\n*1\r\n$1\r\nb\r\n"),
    ({}, b"*0\r\n", b"%0\r\n"),
    ({b"k": 1, "j": [2]}, b"*4\r\n$1\r\nk\r\n:1\r\n$1\r\nj\r\n*1\r\n:2\r\n",
     b"%2\r\n$1\r\nk\r\n:1\r\n$1\r\nj\r\n*1\r\n:2\r\n"),
    ({b"x"}, b"*1\r\n$1\r\nx\r\n", b"~1\r\n$1\r\nx\r\n"),
    (frozenset(), b"*0\r\n", b"~0\r\n"),
    (OK, b"+OK\r\n", b"+OK\r\n"),
    (PONG, b"+PONG\r\n", b"+PONG\r\n"),
    (QUEUED, b"+QUEUED\r\n", b"+QUEUED\r\n"),
    (SimpleString("a\r\nb"), b"+a  b\r\n", b"+a  b\r\n"),
    (ErrorReply("ERR", "unknown"), b"-ERR unknown\r\n", b"-ERR unknown\r\n"),
    (ErrorReply("WRONGTYPE", "Op"), b"-WRONGTYPE Op\r\n", b"-WRONGTYPE Op\r\n"),
    (ErrorReply("ERR", "\r\nbad\nthing\r\n"), b"-ERR bad thing\r\n", b"-ERR bad thing\r\n"),
    (ErrorReply("NOAUTH", ""), b"-NOAUTH\r\n", b"-NOAUTH\r\n"),
    (Push([b"message", b"ch", b"hi"]), b"*3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$2\r\nhi\r\n",
     b">3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$2\r\nhi\r\n"),
    (Verbatim("a\r\nb"), b"$4\r\na\r\nb\r\n", b"=8\r\ntxt:a\r\nb\r\n"),
    (Verbatim(b"# x", "mkd"), b"$3\r\n# x\r\n", b"=7\r\nmkd:# x\r\n"),
    (BigNumber(10**30), b"$31\r\n1" + b"0" * 30 + b"\r\n", b"(1" + b"0" * 30 + b"\r\n"),
    (BigNumber(-(2**64)), b"$21\r\n-18446744073709551616\r\n", b"(-18446744073709551616\r\n"),
]  # fmt: skip


@pytest.mark.parametrize(("value", "resp2", "resp3"), FRAMES, ids=[repr(f[0])[:40] for f in FRAMES])
def test_frames(value: Reply, resp2: bytes, resp3: bytes) -> None:
    assert encode(value, 2) == resp2
    assert encode(value, 3) == resp3


def test_encode_into_appends() -> None:
    buf = bytearray(b"+OK\r\n")
    encode_into(buf, [b"a"], 3)
    encode_into(buf, None, 2)
    assert buf == b"+OK\r\n*1\r\n$1\r\na\r\n$-1\r\n"


def test_subclasses_of_plain_types() -> None:
    class Color(IntEnum):
        RED = 3

    class Name(str):
        pass

    assert encode(Color.RED, 3) == b":3\r\n"
    assert encode(Name("ab"), 2) == b"$2\r\nab\r\n"
    assert encode(OrderedDict([(b"k", b"v")]), 3) == b"%1\r\n$1\r\nk\r\n$1\r\nv\r\n"
    assert encode(deque([1]), 2) == b"*1\r\n:1\r\n"


def test_refused_values() -> None:
    with pytest.raises(TypeError):
        encode(object(), 3)  # type: ignore[arg-type]
    with pytest.raises(OverflowError):
        encode(2**63, 2)
    with pytest.raises(OverflowError):
        encode([-(2**63) - 1], 3)
    with pytest.raises(ValueError, match="protocol"):
        encode(b"x", 1)
    with pytest.raises(ValueError):
        ErrorReply("err", "lower-case code")
    with pytest.raises(ValueError):
        ErrorReply("ERR X", "space in code")
    with pytest.raises(ValueError):
        Verbatim("x", "text")


@given(st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=0x10FFFF)))
@settings(max_examples=200, derandomize=True)
def test_text_never_fails_to_encode(text: str) -> None:
    """Lone surrogates included (JSON text such as "\\ud800" decodes to one): every
    text a command answers with becomes a frame, and an error or simple string
    stays one line."""
    for value in (text, Verbatim(text), [text], {text: text}):
        for protocol in (2, 3):
            encode(value, protocol)  # type: ignore[arg-type]
    for frame in (ErrorReply("ERR", text).frame, SimpleString(text).frame):
        assert frame.endswith(b"\r\n") and b"\r" not in frame[:-2] and b"\n" not in frame[:-2]


def test_surrogates_become_bytes() -> None:
    # A byte that was not UTF-8 (decoded with surrogateescape) goes back as that byte;
    # any other lone surrogate is written as its three-byte form.
    assert encode("a\udcffb", 2) == b"$3\r\na\xffb\r\n"
    assert encode("\ud800", 3) == b"$3\r\n\xed\xa0\x80\r\n"
    assert ErrorReply("ERR", "bad \ud800\r\nx").frame == b"-ERR bad \xed\xa0\x80  x\r\n"
    assert SimpleString("\udcfe").frame == b"+\xfe\r\n"


def test_error_reply_parts() -> None:
    error = ErrorReply("NOGROUP", "No such key 'q'")
    assert (error.code, error.message) == ("NOGROUP", "No such key 'q'")
    assert error.text == "NOGROUP No such key 'q'"
    assert ErrorReply("ERR", "").text == "ERR"
    assert ErrorReply("ERR", "x") == ErrorReply("ERR", "x") != ErrorReply("ERR", "y")
    assert len({ErrorReply("ERR", "x"), ErrorReply("ERR", "x")}) == 1


def test_encode_request() -> None:
    assert encode_request([b"SET", "k", 5]) == b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\n5\r\n"
    assert encode_request([]) == b"*0\r\n"
    with pytest.raises(TypeError):
        encode_request([1.5])  # type: ignore[list-item]


# ---------------------------------------------------------------------------
# Round trips through other parsers
# ---------------------------------------------------------------------------


class _Buffer:
    """Just enough of redis-py's SocketBuffer to parse frames from memory."""

    def __init__(self, data: bytes) -> None:
        self._io = io.BytesIO(data)

    def readline(self, timeout: object = None) -> bytes:
        line = self._io.readline()
        assert line.endswith(b"\r\n")
        return line[:-2]

    def read(self, length: int, timeout: object = None) -> bytes:
        data = self._io.read(length + 2)
        assert data.endswith(b"\r\n")
        return data[:-2]

    def at_end(self) -> bool:
        return self._io.read(1) == b""


def redis_py_parse(frame: bytes, protocol: int) -> Any:
    parser: Any = _RESP3Parser(65536) if protocol == 3 else _RESP2Parser(65536)  # type: ignore[no-untyped-call]
    parser._buffer = _Buffer(frame)
    if protocol == 3:
        value = parser._read_response(disable_decoding=True, push_request=True)
    else:
        value = parser._read_response(disable_decoding=True)
    assert parser._buffer.at_end()
    return value


def hiredis_parse(frame: bytes) -> Any:
    """The one value in `frame`; a top-level False would look like "incomplete"
    to hiredis, so callers wrap values in a list when it can be one."""
    reader = hiredis.Reader()
    reader.feed(frame)
    value = reader.gets()
    assert value is not False and reader.gets() is False
    return value


SAMPLE: list[Reply] = [
    b"bulk", "text", 0, 7, -7, True, False, 2.5, None, NULL_ARRAY, [b"a", [1, [None]]],
    {b"k": [b"v", 1]}, {b"m"}, OK, Push([b"message", b"c", b"p"]), Verbatim("v"),
    BigNumber(10**20),
]  # fmt: skip


def test_round_trip_through_redis_py() -> None:
    assert redis_py_parse(encode(SAMPLE, 2), 2) == [
        b"bulk", b"text", 0, 7, -7, 1, 0, b"2.5", None, None, [b"a", [1, [None]]],
        [b"k", [b"v", 1]], [b"m"], b"OK", [b"message", b"c", b"p"], b"v", b"100000000000000000000",
    ]  # fmt: skip
    assert redis_py_parse(encode(SAMPLE[:-3] + SAMPLE[-2:], 3), 3) == [
        b"bulk", b"text", 0, 7, -7, True, False, 2.5, None, None, [b"a", [1, [None]]],
        {b"k": [b"v", 1]}, [b"m"], b"OK", b"v", 10**20,
    ]  # fmt: skip
    assert redis_py_parse(encode(Push([b"message", b"c", b"p"]), 3), 3) == [
        b"message", b"c", b"p",
    ]  # fmt: skip
    error = redis_py_parse(encode(ErrorReply("WRONGTYPE", "Operation"), 3), 3)
    assert type(error).__name__ == "ResponseError" and str(error) == "WRONGTYPE Operation"


def test_round_trip_through_hiredis() -> None:
    resp2 = hiredis_parse(encode(SAMPLE, 2))
    resp3 = hiredis_parse(encode(SAMPLE, 3))
    assert resp2[:7] == [*resp3[:5], 1, 0] and resp3[5:7] == [True, False]
    assert (resp2[7], resp3[7]) == (b"2.5", 2.5)
    assert resp2[11] == [b"k", [b"v", 1]] and resp3[11] == {b"k": [b"v", 1]}
    assert resp3[16] == b"100000000000000000000"
    assert math.isnan(hiredis_parse(encode(NAN, 3)))
    assert hiredis_parse(encode(-INF, 3)) == -INF


# Values hiredis reads back unchanged under RESP3 (sets come back as lists).
plain_st = st.recursive(
    st.one_of(
        st.binary(max_size=30),
        st.integers(-(2**63), 2**63 - 1),
        st.booleans(),
        st.none(),
        st.floats(allow_nan=False),
    ),
    lambda children: st.one_of(
        st.lists(children, max_size=5),
        st.dictionaries(st.binary(max_size=8), children, max_size=4),
    ),
    max_leaves=25,
)


@settings(max_examples=300, deadline=None)
@given(value=plain_st)
def test_resp3_round_trip(value: Any) -> None:
    assert hiredis_parse(encode([value], 3)) == [value]
    assert redis_py_parse(encode(value, 3), 3) == value


def as_resp2(value: Any) -> Any:
    """What a RESP2 client reads back for `value`."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, float):
        return b"%.17g" % value
    if isinstance(value, list):
        return [as_resp2(v) for v in value]
    if isinstance(value, dict):
        return [as_resp2(x) for item in value.items() for x in item]
    return value


@settings(max_examples=300, deadline=None)
@given(value=plain_st)
def test_resp2_round_trip(value: Any) -> None:
    assert hiredis_parse(encode([value], 2)) == [as_resp2(value)]
    assert redis_py_parse(encode(value, 2), 2) == as_resp2(value)


ID_ENCODERS = [pytest.param(encoder.pure_encode_ids_into, id="pure")]
_RESP_TWIN = load("resp")
if _RESP_TWIN is not None:
    ID_ENCODERS.append(pytest.param(_RESP_TWIN.encode_ids_into, id="cython"))


@pytest.mark.parametrize("encode_ids_into", ID_ENCODERS)
@pytest.mark.parametrize(
    ("ms", "seq", "count"),
    [
        (0, 0, 1),
        (1700000000123, 0, 20),
        (1700000000123, 8, 5),
        (5, 2**64 - 3, 6),
        (2**64 - 2, 2**64 - 1, 2),
        (2**64 - 1, 2**64 - 2, 2),
        (7, 7, 0),
    ],
)
def test_encode_ids_into(encode_ids_into, ms: int, seq: int, count: int) -> None:  # type: ignore[no-untyped-def]
    """The replies of a run of XADDs: one bulk string per consecutive ID."""
    expected = bytearray(b"before")
    sid = ms << 64 | seq
    for one in range(sid, sid + count):
        encode_into(expected, b"%d-%d" % (one >> 64, one & (2**64 - 1)), 2)
    buf = bytearray(b"before")
    encode_ids_into(buf, ms, seq, count)
    assert buf == expected
