"""The reference request parser: bytes in, commands out, in pure Python.

Owns: the request state machine (multibulk and inline framing, Redis 7.0's limits
and error texts) and the query-buffer bound. Must never: do I/O, interpret a
command's arguments, or behave differently from `HiredisRequestParser`, which
reuses this machine and only adds a faster path for runs of complete commands.

The contract is in `narad.resp.parser`. State, between calls:

    _buf[_pos:]      input not parsed yet; _fed holds what feed() added since
                     (joined lazily, so feeding many times stays linear)
    _args            arguments read so far of the unfinished multibulk command
    _args_left       arguments still expected; 0 between commands
    _bulk_len        length of the bulk whose $ line was read, -1 if none
    _big, _big_missing  a bulk of BIG_BULK_LEN or more whose frame has not all
                     arrived: its payload's pieces, kept as views of the fed bytes
                     (no copy until the final join), and how many payload bytes
                     are still missing. While some are, feed() routes data here.
    _base            stream offset of _buf[0]; _command_start the stream offset
                     of the unfinished command, so held bytes = _fed_bytes -
                     _command_start whatever the parse progress.

Line rules, from Redis's processMultibulkBuffer and processInlineBuffer: a * or $
line ends at the first CR and the byte after it is skipped unchecked, as are the
two bytes after a bulk payload; a line that holds a NUL byte never ends (Redis
searches with strchr), so it waits until it is too big. A line longer than
max_inline_len is too big even when its end has arrived: Redis reads 16 KiB at a
time and would have refused it before seeing the end, and this keeps the outcome
the same however the input is split.
"""

from __future__ import annotations

from typing import Final

from narad.resp._inline import split_inline
from narad.resp.errors import ProtocolError, QueryBufferLimit

DEFAULT_MAX_BULK_LEN: Final = 512 * 1024 * 1024  # Redis proto-max-bulk-len
DEFAULT_MAX_MULTIBULK_LEN: Final = 1024 * 1024  # arguments in one command
DEFAULT_MAX_INLINE_LEN: Final = 64 * 1024  # Redis PROTO_INLINE_MAX_SIZE
DEFAULT_MAX_QUERY_BUFFER: Final = 1024 * 1024 * 1024  # Redis client-query-buffer-limit
BIG_BULK_LEN: Final = 32 * 1024  # Redis PROTO_MBULK_BIG_ARG: bulks kept as pieces
UNAUTH_MAX_MULTIBULK_LEN: Final = 10  # limits before AUTH, as in Redis 7.0
UNAUTH_MAX_BULK_LEN: Final = 16 * 1024

INVALID_MULTIBULK_LENGTH: Final = "Protocol error: invalid multibulk length"
INVALID_BULK_LENGTH: Final = "Protocol error: invalid bulk length"
UNAUTH_MULTIBULK_LENGTH: Final = "Protocol error: unauthenticated multibulk length"
UNAUTH_BULK_LENGTH: Final = "Protocol error: unauthenticated bulk length"
TOO_BIG_MBULK_COUNT: Final = "Protocol error: too big mbulk count string"
TOO_BIG_BULK_COUNT: Final = "Protocol error: too big bulk count string"
TOO_BIG_INLINE: Final = "Protocol error: too big inline request"
UNBALANCED_QUOTES: Final = "Protocol error: unbalanced quotes in request"

_STAR: Final = ord("*")
_DOLLAR: Final = ord("$")
_INT64_MAX: Final = (1 << 63) - 1


def string2ll(text: bytes) -> int | None:
    """`text` as a signed 64-bit integer by Redis's strict rules, else None:
    "0" or an optional '-' and digits without a leading zero; no '+', no
    blanks, at most 20 bytes."""
    if text.isdigit():  # bytes.isdigit() is ASCII only
        if (text[0] == 48 and len(text) > 1) or len(text) > 20:
            return None
        value = int(text)
        return value if value <= _INT64_MAX else None
    digits = text[1:]
    if text[:1] != b"-" or not digits.isdigit() or digits[0] == 48 or len(text) > 20:
        return None
    value = -int(digits)
    return value if value >= -_INT64_MAX - 1 else None


def expected_dollar(byte: int) -> str:
    """Redis's text for a bulk line that does not start with '$'. Redis prints the
    raw byte (CR and LF become spaces); a byte above 127 is kept as a lone
    surrogate so that encoding with surrogateescape gives the byte back."""
    char = " " if byte in (10, 13) else bytes([byte]).decode("utf-8", "surrogateescape")
    return f"Protocol error: expected '$', got '{char}'"


class PurePythonRequestParser:
    """Sans-I/O request parser, pure Python. See `narad.resp.parser` for the
    contract.

    Owned by one connection's task; not thread-safe. `authenticated` is set by
    the server: while False, Redis's lower pre-AUTH limits apply and commands()
    returns at most one command, so AUTH runs before the next one is read.
    """

    def __init__(
        self,
        max_bulk_len: int = DEFAULT_MAX_BULK_LEN,
        max_multibulk_len: int = DEFAULT_MAX_MULTIBULK_LEN,
        max_inline_len: int = DEFAULT_MAX_INLINE_LEN,
        max_query_buffer: int = DEFAULT_MAX_QUERY_BUFFER,
    ) -> None:
        self.max_bulk_len = max_bulk_len  # bytes in one argument
        self.max_multibulk_len = max_multibulk_len  # arguments in one command
        self.max_inline_len = max_inline_len  # bytes in an inline line or a * / $ line
        self.max_query_buffer = max_query_buffer  # bytes held, see held_bytes
        self.authenticated = True
        self._buf = b""
        self._pos = 0
        self._fed: list[bytes] = []
        self._base = 0
        self._fed_bytes = 0
        self._command_start = 0
        self._args: list[bytes] = []
        self._args_left = 0
        self._bulk_len = -1
        self._big: list[memoryview] | None = None
        self._big_missing = 0
        self._failure: ProtocolError | QueryBufferLimit | None = None

    # -- public API --------------------------------------------------------

    @property
    def held_bytes(self) -> int:
        """Bytes fed and not yet returned in a command: the unfinished command
        from its first byte, and everything after it. Bounded by max_query_buffer."""
        return self._fed_bytes - self._command_start

    @property
    def has_input(self) -> bool:
        """Whether `commands()` may return a command or raise: bytes are buffered
        and not yet parsed, or a failure is waiting to be raised. When False,
        `commands()` would return []."""
        return self._failure is not None or bool(self._fed) or self._pos < len(self._buf)

    def feed_whole(self, data: bytes) -> list[list[bytes]] | None:
        """A shortcut for `feed(data)` then `commands()` when nothing is buffered and
        `data` holds only whole, well-formed commands: those commands, exactly as
        the two calls would return them. None, with nothing changed, when the
        shortcut does not apply: then call `feed` and `commands`. The reference
        parser has no shortcut."""
        return None

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        """Buffer `data`; anything but bytes is copied, bytes is kept as is.

        Raises QueryBufferLimit, storing nothing, when held_bytes would exceed
        max_query_buffer. After a failure, data is dropped: the connection is
        closing, and Redis too ignores what a client sends after bad bytes."""
        if self._failure is not None:
            return
        chunk = data if type(data) is bytes else bytes(data)
        held = self.held_bytes + len(chunk)
        if held > self.max_query_buffer:
            raise self._fail(QueryBufferLimit(held, self.max_query_buffer))
        self._fed_bytes += len(chunk)
        if self._big_missing and chunk:
            chunk = self._route_to_big(chunk)
        if chunk:
            self._fed.append(chunk)

    def commands(self) -> list[list[bytes]]:
        """Every command complete so far, in order, each a non-empty list of
        arguments; [] when more data is needed.

        On malformed bytes: if commands came before them, they are returned and
        the next call raises; otherwise ProtocolError is raised now. After a
        failure every call raises the same error."""
        if self._failure is not None:
            raise self._failure
        self._absorb_fed()
        out: list[list[bytes]] = []
        try:
            self._parse(out)
        except ProtocolError as exc:
            self._fail(exc)
            if not out:
                raise
        return out

    # -- driver ---------------------------------------------------------------

    def _parse(self, out: list[list[bytes]]) -> None:
        while True:
            if self._args_left == 0 and self._take_batch(out):
                continue
            command = self._next_command()
            if command is None:
                return
            self._command_start = self._base + self._pos
            if command:
                out.append(command)
                if not self.authenticated:
                    return

    def _take_batch(self, out: list[list[bytes]]) -> bool:
        """Hook for a faster parser: take a run of complete commands at a command
        boundary and return True, or return False to let _next_command go."""
        return False

    def _next_command(self) -> list[bytes] | None:
        """The next command; [] for one Redis skips (a blank inline line, *0,
        *-1); None when more data is needed."""
        if self._args_left == 0:
            if self._pos >= len(self._buf):
                return None
            if self._buf[self._pos] != _STAR:
                return self._inline_command()
            if not self._read_multibulk_count():
                return None
            if self._args_left == 0:
                return []
        return self._read_arguments()

    def _fail(self, error: ProtocolError | QueryBufferLimit) -> ProtocolError | QueryBufferLimit:
        """Remember `error` for every later call and drop what is buffered."""
        self._failure = error
        self._buf, self._pos, self._fed = b"", 0, []
        self._args, self._big = [], None
        self._big_missing = 0
        return error

    # -- buffering --------------------------------------------------------------

    def _absorb_fed(self) -> None:
        """Make _buf[_pos:] hold all unparsed input, copying the unparsed tail
        only when new data must be joined to it."""
        if not self._fed:
            return
        parts = self._fed
        if self._pos < len(self._buf):
            parts.insert(0, self._buf[self._pos :])
        self._base += self._pos
        self._buf = parts[0] if len(parts) == 1 else b"".join(parts)
        self._pos = 0
        self._fed = []

    def _route_to_big(self, data: bytes) -> bytes:
        """Move the start of `data` into the big bulk being collected; return the rest."""
        assert self._big is not None and not self._fed
        taken = min(len(data), self._big_missing)
        self._big.append(memoryview(data)[:taken])
        self._big_missing -= taken
        self._base += taken
        return data[taken:] if taken < len(data) else b""

    # -- multibulk ----------------------------------------------------------------

    def _read_multibulk_count(self) -> bool:
        """Read `*<count>`; False when the line is not complete yet."""
        end = self._line_end(TOO_BIG_MBULK_COUNT)
        if end < 0:
            return False
        count = string2ll(self._buf[self._pos + 1 : end])
        if count is None or count > self.max_multibulk_len:
            if self._holds_nul(end, TOO_BIG_MBULK_COUNT):
                return False
            raise ProtocolError(INVALID_MULTIBULK_LENGTH)
        if count > UNAUTH_MAX_MULTIBULK_LEN and not self.authenticated:
            raise ProtocolError(UNAUTH_MULTIBULK_LENGTH)
        self._pos = end + 2
        self._args_left = max(count, 0)
        return True

    def _read_arguments(self) -> list[bytes] | None:
        while self._args_left:
            arg = self._read_bulk()
            if arg is None:
                return None
            self._args.append(arg)
            self._args_left -= 1
        args, self._args = self._args, []
        return args

    def _read_bulk(self) -> bytes | None:
        if self._big is not None:
            return self._finish_big()
        if self._bulk_len < 0 and not self._read_bulk_length():
            return None
        buf, start = self._buf, self._pos
        stop = start + self._bulk_len
        if stop + 2 <= len(buf):
            self._pos = stop + 2
            self._bulk_len = -1
            return buf[start:stop]
        if self._bulk_len >= BIG_BULK_LEN:
            self._start_big(stop)
        return None

    def _read_bulk_length(self) -> bool:
        """Read `$<length>` into _bulk_len; False when the line is not complete yet."""
        buf, pos = self._buf, self._pos
        end = self._line_end(TOO_BIG_BULK_COUNT)
        if end < 0:
            return False
        length = string2ll(buf[pos + 1 : end]) if buf[pos] == _DOLLAR else None
        if length is None or not 0 <= length <= self.max_bulk_len:
            if self._holds_nul(end, TOO_BIG_BULK_COUNT):
                return False
            if buf[pos] != _DOLLAR:
                raise ProtocolError(expected_dollar(buf[pos]))
            raise ProtocolError(INVALID_BULK_LENGTH)
        if length > UNAUTH_MAX_BULK_LEN and not self.authenticated:
            raise ProtocolError(UNAUTH_BULK_LENGTH)
        self._pos = end + 2
        self._bulk_len = length
        return True

    def _start_big(self, stop: int) -> None:
        """Keep what has arrived of the payload _buf[_pos:stop] as a view and let
        feed() route the rest, so the payload is copied once, by the final join."""
        buf = self._buf
        arrived = min(stop, len(buf))
        self._big = [memoryview(buf)[self._pos : arrived]]
        self._big_missing = stop - arrived
        self._base += arrived
        self._buf, self._pos = buf[arrived:], 0  # at most one byte of the CR LF

    def _finish_big(self) -> bytes | None:
        assert self._big is not None
        if self._big_missing or len(self._buf) - self._pos < 2:
            return None
        arg = b"".join(self._big)
        self._big = None
        self._pos += 2
        self._bulk_len = -1
        return arg

    # -- lines --------------------------------------------------------------------

    def _line_end(self, too_big: str) -> int:
        """Index of the CR ending the * or $ line at _pos, with the byte after the
        CR present; -1 while it has not arrived. Raises `too_big` past max_inline_len."""
        buf, pos, limit = self._buf, self._pos, self.max_inline_len
        end = buf.find(b"\r", pos, pos + limit + 1)
        if end < 0 and len(buf) - pos > limit:
            raise ProtocolError(too_big)
        return end if 0 <= end < len(buf) - 1 else -1

    def _holds_nul(self, end: int, too_big: str) -> bool:
        """True when the line at _pos holds a NUL byte: for Redis it has not ended
        and never will, so wait, or raise `too_big` once the input is too long."""
        if self._buf.find(b"\0", self._pos, end) < 0:
            return False
        if len(self._buf) - self._pos > self.max_inline_len:
            raise ProtocolError(too_big)
        return True

    # -- inline -------------------------------------------------------------------

    def _inline_command(self) -> list[bytes] | None:
        """The arguments of the inline line at _pos ([] for a blank line), or None
        until its LF arrives."""
        buf, pos, limit = self._buf, self._pos, self.max_inline_len
        end = buf.find(b"\n", pos, pos + limit + 1)
        if end >= 0 and buf.find(b"\0", pos, end) >= 0:
            end = -1  # a NUL hides the LF from Redis
        if end < 0:
            if len(buf) - pos > limit:
                raise ProtocolError(TOO_BIG_INLINE)
            return None
        line_end = end - 1 if end > pos and buf[end - 1] == 13 else end
        args = split_inline(buf[pos:line_end])
        if args is None:
            raise ProtocolError(UNBALANCED_QUOTES)
        self._pos = end + 1
        return args
