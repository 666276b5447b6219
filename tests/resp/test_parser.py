"""Request parsing, both implementations: every input whole, a byte at a time,
cut at every position, and with trailing partial bytes."""

from __future__ import annotations

import pytest

from narad.resp import (
    HiredisRequestParser,
    ProtocolError,
    PurePythonRequestParser,
    QueryBufferLimit,
    RequestParser,
    encode_request,
)
from narad.resp._pure_parser import BIG_BULK_LEN
from narad.resp.replies import ErrorReply

from ._support import parser_classes, run, run_every_split

Parser = type[PurePythonRequestParser]
PING_ARGS = [b"PING"]
PING = encode_request(PING_ARGS)

# ---------------------------------------------------------------------------
# Well-formed input
# ---------------------------------------------------------------------------

GOOD = [
    # multibulk
    (PING, [[b"PING"]]),
    (encode_request([b"SET", b"k", b"v"]) * 3, [[b"SET", b"k", b"v"]] * 3),
    (encode_request([b"ECHO", b""]), [[b"ECHO", b""]]),
    (encode_request([b"X", b"a\r\nb\x00*$\r\n"]), [[b"X", b"a\r\nb\x00*$\r\n"]]),
    # Redis skips the two bytes after a payload and the byte after a line's CR
    (b"*1\r\n$4\r\nPINGXY" + PING, [[b"PING"], [b"PING"]]),
    (b"*1\rX$4\rYPING\r\n", [[b"PING"]]),
    # empty and negative counts are skipped
    (b"*0\r\n" + PING, [[b"PING"]]),
    (b"*-1\r\n" + PING, [[b"PING"]]),
    (b"*-5\r\n*-9223372036854775808\r\n" + PING, [[b"PING"]]),
    (PING + b"*-1\r\n" + PING + b"*0\r\n" + PING, [[b"PING"]] * 3),
    # inline
    (b"PING\r\n", [[b"PING"]]),
    (b"PING\n", [[b"PING"]]),
    (b"  \r\n\r\n\n\t\nPING\n", [[b"PING"]]),
    (b"SET k \"a b\" 'c d'\r\n", [[b"SET", b"k", b"a b", b"c d"]]),
    (b"ECHO a\x0bb\r\n", [[b"ECHO", b"a\x0bb"]]),
    (b"ECHO a\rb\r\n", [[b"ECHO", b"a", b"b"]]),
    (b"$3\r\n", [[b"$3"]]),  # only '*' starts a multibulk request
    (PING + b"~1\r\n$1\r\na\r\n", [[b"PING"], [b"~1"], [b"$1"], [b"a"]]),
    (b"\xff\r\n", [[b"\xff"]]),
    # inline and multibulk mixed
    (b"PING\r\n" + PING + b"PING\n" + PING, [[b"PING"]] * 4),
]


@parser_classes
@pytest.mark.parametrize(("data", "expected"), GOOD, ids=[repr(g[0])[:60] for g in GOOD])
def test_well_formed(parser_class: Parser, data: bytes, expected: list[list[bytes]]) -> None:
    outcome = run_every_split(parser_class, data)
    assert outcome.error is None
    assert outcome.commands == expected
    assert outcome.held_bytes == 0
    assert all(type(arg) is bytes for command in outcome.commands for arg in command)


PARTIAL = [
    b"*",
    b"*1",
    b"*1\r",
    b"*1\r\n",
    b"*1\r\n$",
    b"*1\r\n$4\r",
    b"*1\r\n$4\r\nPI",
    b"*1\r\n$4\r\nPING",
    b"*1\r\n$4\r\nPING\r",
    b"*2\r\n$4\r\nPING\r\n",
    b"*1\r\nx",  # Redis waits for the end of the line before looking at it
    b"PING",
    b"PING\r",
    b'SET "a',
    b"*1\r\n$4\x00\r\nPING\r\n",  # a NUL hides the CR from Redis: the line has not ended
    b"*1\x00\r\n",
    b"PING\x00\r\n",
]


@parser_classes
@pytest.mark.parametrize("tail", PARTIAL, ids=repr)
def test_trailing_partial_input_is_kept(parser_class: Parser, tail: bytes) -> None:
    data = PING + b"PING\r\n" + tail
    outcome = run_every_split(parser_class, data)
    assert outcome == run(parser_class, [data])
    assert outcome.error is None
    assert outcome.commands == [[b"PING"], [b"PING"]]
    assert outcome.held_bytes == len(tail)


@parser_classes
def test_partial_command_completes_later(parser_class: Parser) -> None:
    parser = parser_class()
    parser.feed(PING + b"*2\r\n$4\r\nECHO\r\n$5\r\nhel")
    assert parser.commands() == [[b"PING"]]
    assert parser.commands() == []
    parser.feed(b"lo\r\n")
    assert parser.commands() == [[b"ECHO", b"hello"]]
    assert parser.held_bytes == 0


@parser_classes
def test_pipeline_of_many_commands(parser_class: Parser) -> None:
    commands = [[b"XADD", b"s", b"*", b"f", b"%d" % i, b"g", b"x" * (i % 300)] for i in range(3000)]
    data = b"".join(map(encode_request, commands))
    assert run(parser_class, [data]).commands == commands
    chunks = [data[i : i + 4096] for i in range(0, len(data), 4096)]
    assert run(parser_class, chunks).commands == commands


@parser_classes
def test_has_input_says_whether_commands_can_return_anything(parser_class: Parser) -> None:
    parser = parser_class()
    assert not parser.has_input
    parser.feed(PING + PING[:3])
    assert parser.has_input
    assert parser.commands() == [[PING_ARGS[0]]]
    assert parser.has_input  # the partial command
    parser.feed(PING[3:])
    assert parser.commands() == [[PING_ARGS[0]]]
    assert not parser.has_input
    assert parser.commands() == []
    parser.feed(b"*1\r\n$x\r\n")
    assert parser.has_input
    with pytest.raises(ProtocolError):
        parser.commands()
    assert parser.has_input  # the failure is raised again


def test_hiredis_reads_each_new_read_that_starts_a_command(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A run that ends at the end of the buffer leaves nothing partial: the next
    read goes to hiredis again, not to the reference machine."""
    if HiredisRequestParser is None:
        pytest.skip("hiredis is not installed")
    from narad.resp import _hiredis_parser

    calls = []
    real = _hiredis_parser._hiredis_read

    def counting(buf: bytes, pos: int) -> object:
        calls.append(pos)
        return real(buf, pos)

    monkeypatch.setattr(_hiredis_parser, "_hiredis_read", counting)
    def reference(self: HiredisRequestParser) -> None:
        assert self._pos >= len(self._buf), "the reference machine read a command"

    monkeypatch.setattr(HiredisRequestParser, "_next_command", reference)
    parser = HiredisRequestParser()
    for _ in range(3):
        parser.feed(PING * 2)
        assert parser.commands() == [[b"PING"]] * 2
    assert len(calls) == 3


@parser_classes
def test_feed_many_times_before_parsing(parser_class: Parser) -> None:
    parser = parser_class()
    for _ in range(100):
        parser.feed(PING[:5])
        parser.feed(PING[5:])
    assert parser.commands() == [[b"PING"]] * 100


@parser_classes
def test_feed_accepts_bytes_like(parser_class: Parser) -> None:
    parser = parser_class()
    buf = bytearray(PING)
    parser.feed(buf)
    buf[:] = b"x" * len(buf)  # the parser must have copied it
    parser.feed(memoryview(PING))
    assert parser.commands() == [[b"PING"], [b"PING"]]


# ---------------------------------------------------------------------------
# Big bulk strings arrive in pieces
# ---------------------------------------------------------------------------


@parser_classes
@pytest.mark.parametrize("size", [BIG_BULK_LEN - 1, BIG_BULK_LEN, 3 * 1024 * 1024 + 7])
def test_big_bulk_in_pieces(parser_class: Parser, size: int) -> None:
    payload = bytes(range(256)) * (size // 256) + b"z" * (size % 256)
    data = encode_request([b"SET", b"k", payload]) + PING
    for piece in (1024, 65536, 1 << 20):
        chunks = [data[i : i + piece] for i in range(0, len(data), piece)]
        outcome = run(parser_class, chunks)
        assert outcome.commands == [[b"SET", b"k", payload], [b"PING"]]
        assert outcome.held_bytes == 0


@parser_classes
def test_big_bulk_held_bytes_count_the_partial_command(parser_class: Parser) -> None:
    parser = parser_class()
    head = b"*2\r\n$3\r\nSET\r\n$100000\r\n"
    parser.feed(PING + head + b"x" * 50000)
    assert parser.commands() == [[b"PING"]]
    assert parser.held_bytes == len(head) + 50000
    parser.feed(b"x" * 50000 + b"\r")
    assert parser.commands() == []
    parser.feed(b"\n")
    assert parser.commands() == [[b"SET", b"x" * 100000]]
    assert parser.held_bytes == 0


# ---------------------------------------------------------------------------
# Malformed input: Redis 7.0's texts
# ---------------------------------------------------------------------------

INVALID_MULTIBULK = "Protocol error: invalid multibulk length"
INVALID_BULK = "Protocol error: invalid bulk length"
UNBALANCED = "Protocol error: unbalanced quotes in request"


def expected_dollar(char: str) -> str:
    return f"Protocol error: expected '$', got '{char}'"


BAD = [
    (b"*x\r\n", INVALID_MULTIBULK),
    (b"*\r\n", INVALID_MULTIBULK),
    (b"*01\r\n", INVALID_MULTIBULK),
    (b"*+1\r\n", INVALID_MULTIBULK),
    (b"* 1\r\n", INVALID_MULTIBULK),
    (b"*1 \r\n", INVALID_MULTIBULK),
    (b"*-0\r\n", INVALID_MULTIBULK),
    (b"*-\r\n", INVALID_MULTIBULK),
    (b"*1.0\r\n", INVALID_MULTIBULK),
    (b"*9223372036854775808\r\n", INVALID_MULTIBULK),
    (b"*-9223372036854775809\r\n", INVALID_MULTIBULK),
    (b"*1048577\r\n", INVALID_MULTIBULK),  # Narad's max_multibulk_len
    (b"*2147483648\r\n", INVALID_MULTIBULK),
    (b"*4000000000\r\n", INVALID_MULTIBULK),
    (b"*1\r\n$x\r\n", INVALID_BULK),
    (b"*1\r\n$\r\n", INVALID_BULK),
    (b"*1\r\n$-1\r\n", INVALID_BULK),
    (b"*1\r\n$-0\r\n", INVALID_BULK),
    (b"*1\r\n$04\r\nPING\r\n", INVALID_BULK),
    (b"*1\r\n$+4\r\nPING\r\n", INVALID_BULK),
    (b"*1\r\n$4 \r\nPING\r\n", INVALID_BULK),
    (b"*1\r\n$\xff\r\n", INVALID_BULK),
    (b"*1\r\n$536870913\r\n", INVALID_BULK),
    (b"*1\r\n$99999999999999999999\r\n", INVALID_BULK),
    (b"*1\r\nx\r\n", expected_dollar("x")),
    (b"*1\r\n\r\n", expected_dollar(" ")),
    (b"*1\r\n\n\r\n", expected_dollar(" ")),
    (b"*1\r\n\xff\r\n", expected_dollar("\udcff")),
    (b"*2\r\n$4\r\nECHO\r\n:1\r\n", expected_dollar(":")),
    # reply types hiredis would accept inside a request
    (b"*1\r\n+PING\r\n", expected_dollar("+")),
    (b"*1\r\n+1\r\n1\r\n", expected_dollar("+")),  # "$1\r\n1\r\n" but for its marker
    (b"*1\r\n-ERR x\r\n", expected_dollar("-")),
    (b"*1\r\n=8\r\ntxt:PING\r\n", expected_dollar("=")),
    (b"*1\r\n(1\r\n", expected_dollar("(")),
    (b"*1\r\n,1.5\r\n", expected_dollar(",")),
    (b"*1\r\n#t\r\n", expected_dollar("#")),
    (b"*1\r\n_\r\n", expected_dollar("_")),
    (b"*1\r\n*1\r\n$4\r\nPING\r\n", expected_dollar("*")),
    (b"*1\r\n%1\r\n$1\r\na\r\n$1\r\nb\r\n", expected_dollar("%")),
    (b"*1\r\n~1\r\n$1\r\na\r\n", expected_dollar("~")),
    (b"*1\r\n>1\r\n$1\r\na\r\n", expected_dollar(">")),
    (b"*1\r\n|1\r\n$1\r\na\r\n$1\r\nb\r\n$1\r\nc\r\n", expected_dollar("|")),
    (b"*1\r\n!1\r\nx\r\n", expected_dollar("!")),
    (b"*1\r\n*2000000000\r\n", expected_dollar("*")),
    # a + frame and a = frame whose sizes cancel out against $ frames
    (b"*3\r\n+PINGPONGPI\r\n=14\r\ntxt:PINGPONGPI\r\n$1\r\nx\r\n", expected_dollar("+")),
    # inline quoting
    (b'ECHO "a\r\n', UNBALANCED),
    (b"ECHO 'a\r\n", UNBALANCED),
    (b'ECHO "a"b\r\n', UNBALANCED),
    (b"ECHO 'a'b\r\n", UNBALANCED),
    (b'ECHO "a\\"\r\n', UNBALANCED),
]


@parser_classes
@pytest.mark.parametrize(("data", "message"), BAD, ids=[repr(b[0])[:60] for b in BAD])
def test_malformed(parser_class: Parser, data: bytes, message: str) -> None:
    outcome = run_every_split(parser_class, data)
    assert outcome.commands == []
    assert outcome.error == message
    # after good commands, and with anything after the bad bytes
    outcome = run_every_split(parser_class, PING + b"PING\r\n" + data + PING)
    assert outcome.commands == [[b"PING"], [b"PING"]]
    assert outcome.error == message


def test_error_text_goes_back_to_the_byte_redis_sent() -> None:
    parser = PurePythonRequestParser()
    parser.feed(b"*1\r\n\xff\r\n")
    with pytest.raises(ProtocolError) as caught:
        parser.commands()
    frame = ErrorReply("ERR", caught.value.message).frame
    assert frame == b"-ERR Protocol error: expected '$', got '\xff'\r\n"


@parser_classes
def test_commands_before_an_error_come_first(parser_class: Parser) -> None:
    parser = parser_class()
    parser.feed(PING + b"ECHO a\r\n*1\r\nx\r\n" + PING)
    assert parser.commands() == [[b"PING"], [b"ECHO", b"a"]]
    with pytest.raises(ProtocolError, match="expected '\\$', got 'x'"):
        parser.commands()
    parser.feed(PING)  # dropped: the connection is closing
    with pytest.raises(ProtocolError):  # and for ever after
        parser.commands()


@parser_classes
def test_error_with_nothing_before_it_is_raised_at_once(parser_class: Parser) -> None:
    parser = parser_class()
    parser.feed(b"*1\r\n$x\r\n")
    with pytest.raises(ProtocolError, match="invalid bulk length"):
        parser.commands()


# ---------------------------------------------------------------------------
# Limits
# ---------------------------------------------------------------------------

TOO_BIG_MBULK = "Protocol error: too big mbulk count string"
TOO_BIG_BULK = "Protocol error: too big bulk count string"
TOO_BIG_INLINE = "Protocol error: too big inline request"


@parser_classes
def test_default_limits(parser_class: Parser) -> None:
    line = 64 * 1024
    cases = [
        (b"*" + b"1" * line, TOO_BIG_MBULK),
        (b"*" + b"1" * line + b"\r\n", TOO_BIG_MBULK),
        (b"*1\r\n$" + b"1" * line, TOO_BIG_BULK),
        (b"a" * (line + 1), TOO_BIG_INLINE),
        (b"a" * (line + 1) + b"\n", TOO_BIG_INLINE),
        # a NUL hides the end of the line until the line is too big
        (b"*1\x00\r\n" + b"x" * line, TOO_BIG_MBULK),
        (b"*1\r\n$1\x00\r\n" + b"x" * line, TOO_BIG_BULK),
        (b"PING\x00\r\n" + b"x" * line, TOO_BIG_INLINE),
        (b"*1\r\n\x00\r\n" + b"x" * line, TOO_BIG_BULK),
    ]
    for data, message in cases:
        assert run(parser_class, [data]).error == message, data[:20]
        chunks = [data[i : i + 1000] for i in range(0, len(data), 1000)]
        assert run(parser_class, chunks).error == message, data[:20]
    fits = b"a" * line + b"\n"
    assert run(parser_class, [fits]).commands == [[b"a" * line]]


@parser_classes
def test_max_multibulk_len(parser_class: Parser) -> None:
    fits = encode_request([b"x"] * 3)
    assert run_every_split(parser_class, fits, max_multibulk_len=3).commands == [[b"x"] * 3]
    over = encode_request([b"x"] * 4)
    assert run_every_split(parser_class, over, max_multibulk_len=3).error == INVALID_MULTIBULK
    assert run(parser_class, [over[:4]], max_multibulk_len=3).error == INVALID_MULTIBULK


@parser_classes
def test_max_bulk_len(parser_class: Parser) -> None:
    fits = encode_request([b"x" * 10])
    assert run_every_split(parser_class, fits, max_bulk_len=10).commands == [[b"x" * 10]]
    over = encode_request([b"x" * 11])
    assert run_every_split(parser_class, over, max_bulk_len=10).error == INVALID_BULK
    assert run(parser_class, [b"*1\r\n$11\r\n"], max_bulk_len=10).error == INVALID_BULK


@parser_classes
def test_max_inline_len_boundaries(parser_class: Parser) -> None:
    # the inline line counts the bytes before LF, a CR included
    assert run_every_split(parser_class, b"PING\r\n", max_inline_len=5).commands == [[b"PING"]]
    assert run_every_split(parser_class, b"PING\r\n", max_inline_len=4).error == TOO_BIG_INLINE
    # a * or $ line counts the bytes before its CR
    data = encode_request([b"x" * 10])  # *1 and $10
    assert run_every_split(parser_class, data, max_inline_len=3).commands == [[b"x" * 10]]
    assert run_every_split(parser_class, data, max_inline_len=2).error == TOO_BIG_BULK
    assert run_every_split(parser_class, data, max_inline_len=1).error == TOO_BIG_MBULK
    assert run_every_split(parser_class, b"*-1\r\n", max_inline_len=3).commands == []
    assert run_every_split(parser_class, b"*-1\r\n", max_inline_len=2).error == TOO_BIG_MBULK


@parser_classes
def test_query_buffer_limit(parser_class: Parser) -> None:
    parser = parser_class(max_query_buffer=30)
    parser.feed(PING * 2)  # 28 bytes
    assert parser.held_bytes == 28
    with pytest.raises(QueryBufferLimit):
        parser.feed(b"abc")
    parser.feed(PING)  # dropped
    with pytest.raises(QueryBufferLimit):
        parser.commands()


@parser_classes
def test_query_buffer_counts_the_unfinished_command(parser_class: Parser) -> None:
    parser = parser_class(max_query_buffer=40)
    parser.feed(PING * 2)
    assert parser.commands() == [[b"PING"], [b"PING"]]
    assert parser.held_bytes == 0
    parser.feed(b"*2\r\n$4\r\nECHO\r\n$20\r\n")  # 20 bytes held
    assert parser.commands() == []
    parser.feed(b"x" * 20)
    with pytest.raises(QueryBufferLimit) as caught:
        parser.feed(b"\r\n")
    assert (caught.value.held_bytes, caught.value.limit_bytes) == (41, 40)  # 19 + 20 + 2


@parser_classes
def test_unauthenticated_limits(parser_class: Parser) -> None:
    parser = parser_class()
    parser.authenticated = False
    parser.feed(encode_request([b"x"] * 10) + encode_request([b"AUTH", b"p" * 16384]) + PING)
    assert parser.commands() == [[b"x"] * 10]  # one command per call before AUTH
    assert parser.commands() == [[b"AUTH", b"p" * 16384]]
    parser.authenticated = True
    assert parser.commands() == [[b"PING"]]
    for data, message in [
        (encode_request([b"x"] * 11), "Protocol error: unauthenticated multibulk length"),
        (encode_request([b"x" * 16385]), "Protocol error: unauthenticated bulk length"),
        (b"*1048577\r\n", INVALID_MULTIBULK),
        (b"*1\r\n$-1\r\n", INVALID_BULK),
    ]:
        parser = parser_class()
        parser.authenticated = False
        parser.feed(data)
        with pytest.raises(ProtocolError) as caught:
            parser.commands()
        assert caught.value.message == message


@parser_classes
def test_unauthenticated_inline_has_no_extra_limit(parser_class: Parser) -> None:
    parser = parser_class()
    parser.authenticated = False
    parser.feed(b"AUTH " + b"p" * 20000 + b"\r\nPING\r\n")
    assert parser.commands() == [[b"AUTH", b"p" * 20000]]
    assert parser.commands() == [[b"PING"]]


# ---------------------------------------------------------------------------
# Selection
# ---------------------------------------------------------------------------


def test_request_parser_is_chosen_by_narad_pure() -> None:
    from narad._speedups import PURE

    expected = PurePythonRequestParser if PURE else HiredisRequestParser
    assert RequestParser is expected
