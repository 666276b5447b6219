"""Every error text of the schema package, in one place, for the server to answer with.

Each error is a `narad.errors.CommandError`: the server sends `str(error)` (code, then
message) and the connection lives on. The codes and texts are API:

- `ERR invalid schema: <what>` or `ERR invalid schema at <path>: <what>`: the text
  is not JSON, not valid JSON Schema, or uses a feature Narad refuses (a remote
  `$ref`, an unknown `$schema`, ...); the path points into the schema.
- `INCOMPATIBLE <reason>; <reason> ...`: a new version breaks the compatibility mode;
  each reason reads `<path>: <message>`, the path pointing into the proposed schema.
- `SCHEMA <path>: <reason> (version N)`: a produced document breaks version N; the
  path points into the document (`$` is the whole document).
- `ERR unknown compatibility mode '<mode>'` and `ERR FIELD ...` for bad options.

This module never decides anything: it only builds texts.
"""

from __future__ import annotations

from collections.abc import Sequence

from narad.errors import CommandError

REASON_CHARS_MAX = 300  # one reason or violation text is clipped to this many characters


def clip(text: str, limit: int = REASON_CHARS_MAX) -> str:
    """`text` on one line and at most `limit` characters (documents can be huge)."""
    text = text.replace("\r", " ").replace("\n", " ")
    return text if len(text) <= limit else text[: limit - 3] + "..."


class SchemaError(CommandError):
    """`ERR invalid schema: <what>` or `ERR invalid schema at <path>: <what>`: the
    schema text cannot become a version (`path` points into the schema)."""

    def __init__(self, what: str, path: str | None = None) -> None:
        where = f" at {path}" if path else ""
        super().__init__(f"invalid schema{where}: {clip(what, 2 * REASON_CHARS_MAX)}")
        self.what = what
        self.path = path


class IncompatibleError(CommandError):
    """`INCOMPATIBLE <reason>; ...`: the proposed version breaks the mode.

    `reasons` keeps the structured list (each has `path` and `message`).
    """

    def __init__(self, reasons: Sequence[object]) -> None:
        assert reasons, "an incompatibility has at least one reason"
        super().__init__(incompatible_text(reasons), "INCOMPATIBLE")
        self.reasons = list(reasons)


class PayloadError(CommandError):
    """`SCHEMA <path>: <reason> (version N)`: a produced document was refused."""

    def __init__(self, path: str, reason: str, version: int, where: str = "") -> None:
        super().__init__(f"{path}: {clip(reason)} (version {version}{where})", "SCHEMA")
        self.path = path
        self.reason = reason
        self.version = version

    def in_batch(self, index: int, count: int) -> PayloadError:
        """The same refusal, naming the payload of a batch: `(version N, payload I of
        COUNT)`, I counted from 1 in the command's order."""
        return PayloadError(self.path, self.reason, self.version,
                            f", payload {index + 1} of {count}")


def incompatible_text(reasons: Sequence[object]) -> str:
    """The message part of INCOMPATIBLE: reasons (`str(reason)` each) joined by '; '."""
    return "; ".join(clip(str(reason)) for reason in reasons)


def unknown_mode(mode: str) -> CommandError:
    return CommandError(f"unknown compatibility mode '{clip(mode, 64)}'")


def field_changed(old: str, new: str) -> CommandError:
    return CommandError(
        f"FIELD cannot change from '{clip(old, 64)}' to '{clip(new, 64)}'; "
        "drop the schema first"
    )
