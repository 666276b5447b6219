"""Every error a command can answer with, in one place.

An error reply's first word is API: clients dispatch on it. Narad reuses Redis's codes
(ERR, WRONGTYPE, NOGROUP, BUSYGROUP, NOAUTH, WRONGPASS, NOPROTO, EXECABORT, LOADING,
READONLY, MISCONF, ...) with Redis 7.0's texts, and adds codes only for new meanings:

- NOQUEUE: the queue does not exist.
- STALE: a queue receipt names a delivery that expired and was redelivered.
- SCHEMA / INCOMPATIBLE: a payload or a schema version was refused.
- IOERR: the log of that key met an I/O error and refuses writes (see narad/log).

A CommandError is answered and the connection lives on; protocol errors
(narad.resp.ProtocolError) are answered and the connection is closed.
"""

from __future__ import annotations

import logging

# The server's logger: its lines keep the name they had (the log shows it, and
# narad/serve.py sets this logger's level).
logger = logging.getLogger("narad.server")

INTERNAL_ERROR_TEXT_MAX = 256  # characters of an unexpected exception's text in its reply


class CommandError(Exception):
    """An error reply: `code` is the first word, `message` the rest."""

    def __init__(self, message: str, code: str = "ERR") -> None:
        super().__init__(f"{code} {message}")
        self.code = code
        self.message = message


def internal(exc: Exception, command: str, during: str = "running") -> CommandError:
    """An exception no code path expected (a bug) while `during` `command`: one log
    line (`event=internal_error`), the traceback only at `loglevel debug`, and the
    error reply that stands for it (the connection lives on)."""
    kind = type(exc).__name__
    text = str(exc)[:INTERNAL_ERROR_TEXT_MAX]
    logger.error(
        "event=internal_error command=%s during=%s exception=%s text=%r",
        command,
        during,
        kind,
        text,
    )
    logger.debug("traceback of the internal error in %s", command, exc_info=exc)
    return CommandError(f"internal error {during} '{command}': {kind}: {text}")


def wrong_arity(name: str) -> CommandError:
    return CommandError(f"wrong number of arguments for '{name}' command")


def unknown_command(name: bytes, args: list[bytes]) -> CommandError:
    shown = "".join(f"'{_clip(a)}' " for a in args[:16])
    return CommandError(f"unknown command '{_clip(name)}', with args beginning with: {shown}")


def unknown_subcommand(sub: bytes, command: str) -> CommandError:
    return CommandError(f"unknown subcommand '{_clip(sub)}'. Try {command.upper()} HELP.")


def clip(arg: bytes) -> str:
    """A client's bytes (a key) as an error reply shows them: clipped, raw bytes as
    they came."""
    return _clip(arg)


def io_error_on(doing: str, path: object, exc: OSError) -> CommandError:
    """IOERR: `doing` met I/O error `exc` on file or folder `path` (nothing was done)."""
    return CommandError(f"{doing} failed on {path}: {exc.strerror or exc}", "IOERR")


def _clip(arg: bytes, limit: int = 128) -> str:
    text = arg[:limit].decode("utf-8", "surrogateescape")  # raw bytes echoed, as Redis does
    return text.replace("\r", " ").replace("\n", " ")


SYNTAX = "syntax error"
NOT_INTEGER = "value is not an integer or out of range"
INVALID_STREAM_ID = "Invalid stream ID specified as stream command argument"
IDS_EXHAUSTED = "The stream has exhausted the last possible ID, unable to add more items"
WRONGTYPE = CommandError("Operation against a key holding the wrong kind of value", "WRONGTYPE")
NOAUTH = CommandError("Authentication required.", "NOAUTH")
WRONGPASS = CommandError("invalid username-password pair or user is disabled.", "WRONGPASS")


def write_error(why: str) -> CommandError:
    """MISCONF, as Redis answers writes after its AOF met a write error: the node is
    in its write error state (narad/log/journal.py) for `why`."""
    return CommandError(
        f"Errors writing to disk: {why}. Writes are refused until one succeeds again",
        "MISCONF",
    )


def syntax() -> CommandError:
    return CommandError(SYNTAX)


def not_integer() -> CommandError:
    return CommandError(NOT_INTEGER)


def invalid_stream_id() -> CommandError:
    return CommandError(INVALID_STREAM_ID)


def no_queue(name: bytes) -> CommandError:
    return CommandError(f"no such queue '{_clip(name)}'", "NOQUEUE")
