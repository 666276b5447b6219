"""Compatibility modes: which earlier versions a new schema version is checked against,
and in which direction (narad/schema/compat.py does the checking).

Kept apart from compat.py so that the registry and the commands can name modes
without importing the checker, which only Q.SCHEMA SET, CHECK and COMPAT use.
"""

from __future__ import annotations

import enum

from narad.schema.errors import unknown_mode


class Mode(enum.Enum):
    NONE = "NONE"
    BACKWARD = "BACKWARD"
    BACKWARD_TRANSITIVE = "BACKWARD_TRANSITIVE"
    FORWARD = "FORWARD"
    FORWARD_TRANSITIVE = "FORWARD_TRANSITIVE"
    FULL = "FULL"
    FULL_TRANSITIVE = "FULL_TRANSITIVE"

    @property
    def backward(self) -> bool:
        return self.value.startswith(("BACKWARD", "FULL"))

    @property
    def forward(self) -> bool:
        return self.value.startswith(("FORWARD", "FULL"))

    @property
    def transitive(self) -> bool:
        return self.value.endswith("_TRANSITIVE")


DEFAULT_MODE = Mode.BACKWARD


def parse_mode(text: str | bytes | Mode) -> Mode:
    """A mode from its name, any case; CommandError `ERR unknown compatibility mode`."""
    if isinstance(text, Mode):
        return text
    name = text.decode("utf-8", "replace") if isinstance(text, bytes) else text
    try:
        return Mode(name.upper())
    except ValueError:
        raise unknown_mode(name) from None
