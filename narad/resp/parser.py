"""Request parsing: bytes from a client in, commands out. No sockets, no anyio.

Owns: the public face of request parsing and the choice of implementation. Must
never: do I/O or interpret arguments (each command parses its own).

Contract, shared by both implementations (tests/resp runs every test on both):

- `feed(data)` buffers bytes and never parses; it raises only
  QueryBufferLimit, and drops data after a failure (the connection is closing).
- `commands()` returns every command completed so far, in order, each a
  non-empty `list[bytes]`, and keeps partial input buffered. "Need more data" is
  an empty list, not an exception. Commands Redis skips (a blank inline line,
  `*0`, `*-1`, any `*<negative>`) are not returned.
- Malformed bytes: the commands before them are still returned (Redis runs
  them, then replies with the error and closes), and the error is raised by the
  next call; when nothing came before them it is raised at once. So a server
  drains with

      while batch := parser.commands():   # ProtocolError: reply -ERR, close
          run(batch)

  and after a failure every call raises the same error.
- ProtocolError.message is Redis 7.0's text without "ERR ", e.g. "Protocol
  error: invalid bulk length".
- QueryBufferLimit is raised by `feed` when the bytes held (see `held_bytes`)
  would exceed max_query_buffer: close the connection without a reply, as Redis
  does. Held bytes count the unfinished command from its first byte, so a
  single command is bounded by max_query_buffer; Redis counts only its unparsed
  query buffer and could hold more.
- `authenticated = False` applies Redis's pre-AUTH limits (10 arguments, 16 KiB
  bulks) and makes `commands()` return at most one command per call.
- Commands and errors do not depend on how the input is split across `feed`
  calls (QueryBufferLimit does: it depends on how much is fed between drains).

Differences from Redis 7.0, both for tighter bounds: a command with more than
max_multibulk_len (1 Mi) arguments is an invalid multibulk length (Redis allows
INT_MAX); a * / $ / inline line longer than max_inline_len is too big even when
its end arrived in the same read (Redis decides per 16 KiB read, so it accepts
some lines a little longer).

`RequestParser` is HiredisRequestParser unless NARAD_PURE=1 or hiredis is missing.
"""

from __future__ import annotations

from narad._speedups import PURE
from narad.resp._pure_parser import (
    DEFAULT_MAX_BULK_LEN,
    DEFAULT_MAX_INLINE_LEN,
    DEFAULT_MAX_MULTIBULK_LEN,
    DEFAULT_MAX_QUERY_BUFFER,
    PurePythonRequestParser,
)
from narad.resp.errors import ProtocolError, QueryBufferLimit

try:
    from narad.resp._hiredis_parser import HiredisRequestParser
except ImportError:  # hiredis not installed: the reference parser serves alone
    HiredisRequestParser = None  # type: ignore[assignment,misc]

RequestParser: type[PurePythonRequestParser]
if PURE or HiredisRequestParser is None:
    RequestParser = PurePythonRequestParser
else:
    RequestParser = HiredisRequestParser

__all__ = [
    "DEFAULT_MAX_BULK_LEN",
    "DEFAULT_MAX_INLINE_LEN",
    "DEFAULT_MAX_MULTIBULK_LEN",
    "DEFAULT_MAX_QUERY_BUFFER",
    "HiredisRequestParser",
    "ProtocolError",
    "PurePythonRequestParser",
    "QueryBufferLimit",
    "RequestParser",
]
