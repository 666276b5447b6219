"""Reply values that plain Python types cannot say.

Owns: the marker types the encoder understands beside the plain ones (bytes, str,
int, float, bool, None, list, tuple, dict, set), and the `Reply` type that names
everything a command may answer. Must never: encode for a protocol version (that is
`encoder`), do I/O, or know about commands.

How each value goes on the wire, RESP3 / RESP2:

    bytes, str           $ bulk string            / same
    int                  : integer                / same
    bool                 #t #f                    / :1 :0
    float                , double                 / $ bulk string of the same text
    None                 _ null                   / $-1 (null bulk string)
    NULL_ARRAY           _ null                   / *-1 (null array)
    list, tuple          * array                  / same
    dict                 % map                    / * flat array key, value, ...
    set, frozenset       ~ set                    / * array
    SimpleString         + simple string          / same
    ErrorReply           - error                  / same
    Push                 > push                   / * array (as pub/sub messages are)
    Verbatim             = verbatim string        / $ bulk string
    BigNumber            ( big number             / $ bulk string of the digits
    Encoded              its frame, as it is      / same
"""

from __future__ import annotations

import codecs
import re
from collections.abc import Mapping, Sequence, Set
from typing import Any, Final, TypeAlias

# An error code is the reply's first word; clients dispatch on it (WRONGTYPE, NOGROUP).
_CODE = re.compile(r"[A-Z][A-Z0-9_-]*")


def _wire_surrogates(exc: UnicodeError) -> tuple[bytes, int]:
    """The `narad.wire` encoding error handler: a surrogate from a byte that was not
    UTF-8 (U+DC80..U+DCFF, as `surrogateescape` decodes it) gives that byte back;
    any other lone surrogate (from JSON text such as "\\ud800") is written as
    `surrogatepass` writes it. So encoding text never fails."""
    if not isinstance(exc, UnicodeEncodeError):
        raise exc
    out = bytearray()
    for char in exc.object[exc.start : exc.end]:
        code = ord(char)
        if 0xDC80 <= code <= 0xDCFF:
            out.append(code - 0xDC00)
        else:
            out += char.encode("utf-8", "surrogatepass")
    return bytes(out), exc.end


codecs.register_error("narad.wire", _wire_surrogates)


def wire_bytes(text: str) -> bytes:
    """`text` as UTF-8 for a reply; never raises (see `_wire_surrogates`)."""
    return text.encode("utf-8", "narad.wire")


def _one_line(text: str) -> str:
    """`text` made safe for a one-line frame, as Redis does for formatted errors:
    CR and LF at the ends are trimmed, the ones inside become spaces."""
    if "\r" not in text and "\n" not in text:
        return text
    return text.strip("\r\n").replace("\r", " ").replace("\n", " ")


class SimpleString:
    """A `+` simple string, such as OK or PONG. CR and LF become spaces.

    The frame is built once, here; the encoder only appends it, so module-level
    constants such as `OK` cost nothing to send.
    """

    __slots__ = ("frame", "text")

    def __init__(self, text: str) -> None:
        self.text: Final = text
        self.frame: Final = b"+" + wire_bytes(_one_line(text)) + b"\r\n"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SimpleString) and other.text == self.text

    def __hash__(self) -> int:
        return hash((SimpleString, self.text))

    def __repr__(self) -> str:
        return f"SimpleString({self.text!r})"


class ErrorReply:
    """A `-` error reply: `code` is its first word, `message` the rest.

    Keeping the code apart lets the server count errors by code (INFO errorstats)
    without parsing text. `code` must be upper case (ERR, WRONGTYPE, NOGROUP ...);
    a bad code is our bug and raises ValueError. CR and LF in `message` become
    spaces, as Redis does.
    """

    __slots__ = ("code", "frame", "message")

    def __init__(self, code: str, message: str) -> None:
        if not _CODE.fullmatch(code):
            raise ValueError(f"error code must be an upper-case word, got {code!r}")
        self.code: Final = code
        self.message: Final = _one_line(message)
        text = f"-{code} {self.message}" if self.message else f"-{code}"
        self.frame: Final = wire_bytes(text) + b"\r\n"

    @property
    def text(self) -> str:
        """The error as the client sees it, without the leading '-'."""
        return f"{self.code} {self.message}" if self.message else self.code

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ErrorReply) and other.frame == self.frame

    def __hash__(self) -> int:
        return hash((ErrorReply, self.frame))

    def __repr__(self) -> str:
        return f"ErrorReply({self.code!r}, {self.message!r})"


class NullArray:
    """The RESP2 null array `*-1` (XREAD and BLPOP on timeout, EXEC after WATCH
    fails). RESP3 has one null, `_`. Use the `NULL_ARRAY` instance."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "NULL_ARRAY"


class Push:
    """A RESP3 `>` push frame: out-of-band data such as a pub/sub message or a
    Q.CONSUME delivery. Under RESP2 it is a plain array, as pub/sub messages are."""

    __slots__ = ("items",)

    def __init__(self, items: Sequence[Reply]) -> None:
        self.items: Final = tuple(items)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Push) and other.items == self.items

    def __hash__(self) -> int:
        return hash((Push, self.items))

    def __repr__(self) -> str:
        return f"Push({list(self.items)!r})"


class Encoded:
    """A value already framed, built without an intermediate list of Python objects:
    for replies whose frame is the same in RESP2 and RESP3 (arrays of bulk strings,
    such as stream entries), or framed for the protocol of the one connection it is
    sent on (Q.POP's messages). The encoder appends `frame` as it is."""

    __slots__ = ("frame",)

    def __init__(self, frame: bytes) -> None:
        self.frame: Final = frame

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Encoded) and other.frame == self.frame

    def __hash__(self) -> int:
        return hash((Encoded, self.frame))

    def __repr__(self) -> str:
        return f"Encoded({self.frame!r})"


class Verbatim:
    """A RESP3 `=` verbatim string (INFO, CLIENT LIST): text with a three-letter
    format, "txt" or "mkd". A bulk string under RESP2."""

    __slots__ = ("format", "text")

    def __init__(self, text: str | bytes, format: str = "txt") -> None:
        if len(format) != 3 or not format.isascii():
            raise ValueError(f"verbatim format must be 3 ASCII characters, got {format!r}")
        self.text: Final = text
        self.format: Final = format

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Verbatim) and (other.text, other.format) == (
            self.text,
            self.format,
        )

    def __hash__(self) -> int:
        return hash((Verbatim, self.text, self.format))

    def __repr__(self) -> str:
        return f"Verbatim({self.text!r}, {self.format!r})"


class BigNumber:
    """A RESP3 `(` big number: an integer outside the signed 64-bit range.
    A bulk string of its digits under RESP2."""

    __slots__ = ("value",)

    def __init__(self, value: int) -> None:
        self.value: Final = value

    def __eq__(self, other: object) -> bool:
        return isinstance(other, BigNumber) and other.value == self.value

    def __hash__(self) -> int:
        return hash((BigNumber, self.value))

    def __repr__(self) -> str:
        return f"BigNumber({self.value!r})"


NULL_ARRAY: Final = NullArray()
OK: Final = SimpleString("OK")
PONG: Final = SimpleString("PONG")
QUEUED: Final = SimpleString("QUEUED")

# Everything a command may answer. Sequence and Set are covariant, so list[bytes]
# is a Reply; Mapping keys are Any because dict keys are invariant.
Reply: TypeAlias = (
    bytes
    | bytearray
    | memoryview
    | str
    | int
    | float
    | SimpleString
    | ErrorReply
    | NullArray
    | Push
    | Verbatim
    | BigNumber
    | Encoded
    | Sequence["Reply"]
    | Mapping[Any, "Reply"]
    | Set[Any]
    | None
)
