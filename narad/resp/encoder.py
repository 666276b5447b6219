"""Reply encoding, RESP2 and RESP3: values in, bytes out.

Owns: how every `Reply` value is framed for each protocol version (the table is in
`narad.resp.replies`), and the client-side request framing `encode_request`.
Must never: do I/O, decide what a command answers, or pick the protocol version
(the connection's HELLO state does, and passes it in).

The hot path is a dict lookup on the exact type of the value followed by one to
three bytearray appends; frames of the commonest replies (+OK, :0, :1, nulls,
small bulk-string headers) are built once at import. Subclasses of the plain
types (IntEnum, a str subclass) take a slower isinstance walk.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence, Set
from itertools import chain
from typing import Any, Final

from narad._speedups import load
from narad.resp.replies import (
    BigNumber,
    Encoded,
    ErrorReply,
    NullArray,
    Push,
    Reply,
    SimpleString,
    Verbatim,
    wire_bytes,
)

# ---------------------------------------------------------------------------
# Precomputed frames
# ---------------------------------------------------------------------------

_CRLF: Final = b"\r\n"
_CACHED: Final = 1024  # lengths and integers below this have a prebuilt frame
_INT_FRAMES: Final = [b":%d\r\n" % i for i in range(_CACHED)]
_BULK_HEADS: Final = [b"$%d\r\n" % i for i in range(_CACHED)]
_ARRAY_HEADS: Final = [b"*%d\r\n" % i for i in range(_CACHED)]
_INT64_MIN: Final = -(1 << 63)
_INT64_MAX: Final = (1 << 63) - 1
_U64_MAX: Final = (1 << 64) - 1

NULL2: Final = b"$-1\r\n"  # RESP2 null bulk string
NULL_ARRAY2: Final = b"*-1\r\n"  # RESP2 null array
NULL3: Final = b"_\r\n"  # RESP3 null, for both

Writer = Callable[[bytearray, Any], None]


# ---------------------------------------------------------------------------
# Public API
# ---------------------------------------------------------------------------


def encode(value: Reply, protocol: int) -> bytes:
    """The frame of `value` for RESP `protocol` (2 or 3).

    Raises TypeError for a value that is not a `Reply`, OverflowError for an int
    outside the signed 64-bit range (use `BigNumber`), ValueError for another
    protocol number.
    """
    buf = bytearray()
    encode_into(buf, value, protocol)
    return bytes(buf)


def encode_into(buf: bytearray, value: Reply, protocol: int) -> None:
    """Append the frame of `value` to `buf`, so that many replies go out in one
    send. On an exception `buf` may hold part of the frame: the caller's bug."""
    if protocol == 3:
        _put(buf, value, _WRITERS3)
    elif protocol == 2:
        _put(buf, value, _WRITERS2)
    else:
        raise ValueError(f"unknown protocol version {protocol}")


def encode_ids_into(buf: bytearray, ms: int, seq: int, count: int) -> None:
    """Append the bulk strings `<ms>-<seq>` of `count` consecutive stream IDs from
    (ms, seq) to `buf`: the replies of a run of XADDs, the same in RESP2 and RESP3.
    A sequence past 2^64-1 carries into the milliseconds; the last ID must not pass
    the largest, 18446744073709551615-18446744073709551615."""
    for _ in range(count):
        text = b"%d-%d" % (ms, seq)
        buf += b"$%d\r\n%b\r\n" % (len(text), text)
        if seq == _U64_MAX:
            ms, seq = ms + 1, 0
        else:
            seq += 1


def encode_request(args: Iterable[bytes | str | int]) -> bytes:
    """A command as a client sends it: an array of bulk strings. str is UTF-8,
    int its decimal digits. The reverse of `RequestParser`."""
    parts: list[bytes] = []
    for arg in args:
        data = _argument_bytes(arg)
        parts += (_bulk_head(len(data)), data, _CRLF)
    return b"".join([_array_head(len(parts) // 3), *parts])


def _argument_bytes(arg: bytes | str | int) -> bytes:
    if isinstance(arg, bytes):
        return arg
    if isinstance(arg, str):
        return arg.encode("utf-8", "surrogateescape")
    if isinstance(arg, int):
        return b"%d" % arg
    raise TypeError(f"a request argument is bytes, str or int, not {type(arg).__name__}")


# ---------------------------------------------------------------------------
# Dispatch
# ---------------------------------------------------------------------------


def _put(buf: bytearray, value: Any, writers: dict[type, Writer]) -> None:
    writer = writers.get(type(value))
    if writer is None:
        writer = _writer_for_subclass(value, writers)
    writer(buf, value)


def _put_all(buf: bytearray, items: Iterable[Any], writers: dict[type, Writer]) -> None:
    """Append the frame of each item; bytes, the commonest item in arrays, is
    written inline to save a dispatch per element."""
    for item in items:
        if type(item) is bytes:
            length = len(item)
            buf += _BULK_HEADS[length] if length < _CACHED else b"$%d\r\n" % length
            buf += item
            buf += _CRLF
        else:
            _put(buf, item, writers)


def _writer_for_subclass(value: Any, writers: dict[type, Writer]) -> Writer:
    """The writer of the first plain type `value` is an instance of. The order
    matters: bool before int, str/bytes before Sequence."""
    for base in (bool, int, float, str, bytes, bytearray, memoryview):
        if isinstance(value, base):
            return writers[base]
    if isinstance(value, Mapping):
        return writers[dict]
    if isinstance(value, Set):
        return writers[set]
    if isinstance(value, Sequence):
        return writers[list]
    raise TypeError(f"cannot encode a {type(value).__name__} as a reply")


def _bulk_head(length: int) -> bytes:
    return _BULK_HEADS[length] if length < _CACHED else b"$%d\r\n" % length


def _array_head(length: int) -> bytes:
    return _ARRAY_HEADS[length] if length < _CACHED else b"*%d\r\n" % length


# ---------------------------------------------------------------------------
# Writers shared by both protocols
# ---------------------------------------------------------------------------


def _bulk(buf: bytearray, value: bytes | bytearray | memoryview) -> None:
    length = len(value) if type(value) is not memoryview else value.nbytes
    buf += _BULK_HEADS[length] if length < _CACHED else b"$%d\r\n" % length
    buf += value
    buf += _CRLF


def _str(buf: bytearray, value: str) -> None:
    _bulk(buf, wire_bytes(value))


def _int(buf: bytearray, value: int) -> None:
    if 0 <= value < _CACHED:
        buf += _INT_FRAMES[value]
    elif _INT64_MIN <= value <= _INT64_MAX:
        buf += b":%d\r\n" % value
    else:
        raise OverflowError(f"{value} does not fit a RESP integer; use BigNumber")


def _prebuilt(buf: bytearray, value: SimpleString | ErrorReply | Encoded) -> None:
    buf += value.frame


def _double_text(value: float) -> bytes:
    """Redis's "%.17g", with inf, -inf and nan spelled that way."""
    return b"%.17g" % value


# ---------------------------------------------------------------------------
# RESP2
# ---------------------------------------------------------------------------


def _null2(buf: bytearray, value: None) -> None:
    buf += NULL2


def _null_array2(buf: bytearray, value: NullArray) -> None:
    buf += NULL_ARRAY2


def _bool2(buf: bytearray, value: bool) -> None:
    buf += _INT_FRAMES[1] if value else _INT_FRAMES[0]


def _double2(buf: bytearray, value: float) -> None:
    _bulk(buf, _double_text(value))


def _array2(buf: bytearray, value: Sequence[Any] | Set[Any]) -> None:
    buf += _array_head(len(value))
    _put_all(buf, value, _WRITERS2)


def _map2(buf: bytearray, value: Mapping[Any, Any]) -> None:
    buf += _array_head(2 * len(value))
    _put_all(buf, chain.from_iterable(value.items()), _WRITERS2)


def _push2(buf: bytearray, value: Push) -> None:
    _array2(buf, value.items)


def _verbatim2(buf: bytearray, value: Verbatim) -> None:
    _put(buf, value.text, _WRITERS2)


def _big_number2(buf: bytearray, value: BigNumber) -> None:
    _bulk(buf, b"%d" % value.value)


# ---------------------------------------------------------------------------
# RESP3
# ---------------------------------------------------------------------------


def _null3(buf: bytearray, value: NullArray | None) -> None:
    buf += NULL3


def _bool3(buf: bytearray, value: bool) -> None:
    buf += b"#t\r\n" if value else b"#f\r\n"


def _double3(buf: bytearray, value: float) -> None:
    buf += b",%b\r\n" % _double_text(value)


def _array3(buf: bytearray, value: Sequence[Any]) -> None:
    buf += _array_head(len(value))
    _put_all(buf, value, _WRITERS3)


def _set3(buf: bytearray, value: Set[Any]) -> None:
    buf += b"~%d\r\n" % len(value)
    _put_all(buf, value, _WRITERS3)


def _map3(buf: bytearray, value: Mapping[Any, Any]) -> None:
    buf += b"%%%d\r\n" % len(value)
    _put_all(buf, chain.from_iterable(value.items()), _WRITERS3)


def _push3(buf: bytearray, value: Push) -> None:
    buf += b">%d\r\n" % len(value.items)
    _put_all(buf, value.items, _WRITERS3)


def _verbatim3(buf: bytearray, value: Verbatim) -> None:
    text = value.text
    data = wire_bytes(text) if isinstance(text, str) else text
    buf += b"=%d\r\n%b:" % (len(data) + 4, value.format.encode("ascii"))
    buf += data
    buf += _CRLF


def _big_number3(buf: bytearray, value: BigNumber) -> None:
    buf += b"(%d\r\n" % value.value


# ---------------------------------------------------------------------------
# Tables: exact type -> writer
# ---------------------------------------------------------------------------

_COMMON: Final[dict[type, Writer]] = {
    bytes: _bulk,
    bytearray: _bulk,
    memoryview: _bulk,
    str: _str,
    int: _int,
    SimpleString: _prebuilt,
    ErrorReply: _prebuilt,
    Encoded: _prebuilt,
}
_WRITERS2: Final[dict[type, Writer]] = {
    **_COMMON,
    type(None): _null2,
    NullArray: _null_array2,
    bool: _bool2,
    float: _double2,
    list: _array2,
    tuple: _array2,
    dict: _map2,
    set: _array2,
    frozenset: _array2,
    Push: _push2,
    Verbatim: _verbatim2,
    BigNumber: _big_number2,
}
_WRITERS3: Final[dict[type, Writer]] = {
    **_COMMON,
    type(None): _null3,
    NullArray: _null3,
    bool: _bool3,
    float: _double3,
    list: _array3,
    tuple: _array3,
    dict: _map3,
    set: _set3,
    frozenset: _set3,
    Push: _push3,
    Verbatim: _verbatim3,
    BigNumber: _big_number3,
}


pure_encode_ids_into = encode_ids_into
_twin = load("resp")
if _twin is not None:
    encode_ids_into = _twin.encode_ids_into
