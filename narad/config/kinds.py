"""The kinds of setting value: how each reads its arguments (from a config-file line, a
command-line flag or CONFIG SET), shows its value for CONFIG GET and writes it as the
arguments of config-file lines.

A value a kind refuses raises BadValue whose text is Redis 7.0's reason. Typed values
are bool, int, str, a tuple of floats (percentiles) or OutputBufferLimits; a kind keeps
no value of its own, only its bounds.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import ClassVar, NamedTuple

from narad.config.lexer import bare_or_quoted, quote
from narad.config.numbers import (
    INT_MAX,
    LLONG_MAX,
    format_memory,
    format_percentile,
    parse_integer,
    parse_memory,
)

BIND_ADDRESSES_MAX = 16


class BadValue(Exception):
    """A value a kind cannot accept; the text is Redis's reason, e.g. "argument must ..."."""


class Kind:
    """How one kind of setting reads its arguments and renders its value.

    `parse` gets the arguments (one, or several for a multi-argument kind) and the
    current value (for kinds that update part of it) and raises BadValue with Redis's
    reason. `show` renders for CONFIG GET; `write` gives the arguments of each
    config-file line for the value (several lines for some kinds).
    """

    label: ClassVar[str]
    multi_arg: ClassVar[bool] = False
    # Whether successive lines of one config file add up (`save`) or the last wins.
    accumulates: ClassVar[bool] = False

    def parse(self, args: Sequence[str], current: object) -> object:
        raise NotImplementedError

    def show(self, value: object) -> str:
        return str(value)

    def write(self, value: object) -> list[str]:
        return [self.show(value)]


class BoolKind(Kind):
    """yes or no (any case). `only`, when set, is the one value Narad accepts, and
    `why` says why the other is refused."""

    label: ClassVar[str] = "bool"

    def __init__(self, only: bool | None = None, why: str = "") -> None:
        self.only = only
        self.why = why

    def parse(self, args: Sequence[str], current: object) -> object:
        text = args[0].lower()
        if text not in ("yes", "no"):
            raise BadValue("argument must be 'yes' or 'no'")
        value = text == "yes"
        if self.only is not None and value != self.only:
            raise BadValue(f"argument must be '{self.show(self.only)}' ({self.why})")
        return value

    def show(self, value: object) -> str:
        return "yes" if value else "no"


class IntKind(Kind):
    """A whole number between `minimum` and `maximum`, inclusive. `why`, when set,
    says why the range is so narrow (a reserved setting that accepts one value)."""

    label: ClassVar[str] = "int"

    def __init__(self, minimum: int = 0, maximum: int = LLONG_MAX, why: str = "") -> None:
        self.minimum = minimum
        self.maximum = maximum
        self.why = why

    def parse(self, args: Sequence[str], current: object) -> object:
        try:
            value = self.number(args[0])
        except ValueError as exc:
            raise BadValue(str(exc)) from None
        return self.bounded(value)

    @staticmethod
    def number(text: str) -> int:
        return parse_integer(text)

    def bounded(self, value: int) -> int:
        if self.minimum <= value <= self.maximum:
            return value
        if self.why:
            raise BadValue(f"argument must be {self.minimum} ({self.why})")
        raise BadValue(f"argument must be between {self.minimum} and {self.maximum} inclusive")


class PortOrAutoKind(IntKind):
    """A port (0: off), or `auto`: a rule of the setting's own (the value is then
    AUTO_PORT; whoever reads the setting applies the rule)."""

    label: ClassVar[str] = "special"

    def parse(self, args: Sequence[str], current: object) -> object:
        if args[0].lower() == "auto":
            return AUTO_PORT
        return super().parse(args, current)

    def show(self, value: object) -> str:
        return "auto" if value == AUTO_PORT else str(value)


AUTO_PORT = -1


class MemoryKind(IntKind):
    """A byte count with units (512mb, 1gb, 64k); shown as plain bytes by CONFIG GET."""

    label: ClassVar[str] = "memory"

    @staticmethod
    def number(text: str) -> int:
        return parse_memory(text)

    def write(self, value: object) -> list[str]:
        assert isinstance(value, int)
        return [format_memory(value)]


class EnumKind(Kind):
    """One of `choices` (any case); the value is the choice in lower case."""

    label: ClassVar[str] = "enum"

    def __init__(self, choices: tuple[str, ...]) -> None:
        self.choices = choices

    def parse(self, args: Sequence[str], current: object) -> object:
        text = args[0].lower()
        if text not in self.choices:
            raise BadValue(f"argument(s) must be one of the following: {', '.join(self.choices)}")
        return text


class StringKind(Kind):
    """Any text, empty included."""

    label: ClassVar[str] = "string"

    def parse(self, args: Sequence[str], current: object) -> object:
        return args[0]

    def write(self, value: object) -> list[str]:
        return [quote(str(value))]


class ReplicaOfKind(Kind):
    """`replicaof <host> <port>`, or `replicaof no one` (also an empty value): the
    value is "host port", or "" for a leader."""

    label: ClassVar[str] = "special"
    multi_arg: ClassVar[bool] = True

    def parse(self, args: Sequence[str], current: object) -> object:
        if len(args) == 1 and args[0] == "":
            return ""
        if len(args) != 2:
            raise BadValue("wrong number of arguments")
        host, port = args
        if host.lower() == "no" and port.lower() == "one":
            return ""
        try:
            number = parse_integer(port)
        except ValueError:
            number = -1
        if not 0 < number <= 65535:
            raise BadValue("Invalid master port")
        return f"{host} {number}"

    def write(self, value: object) -> list[str]:
        return [str(value) if value else "no one"]


def replica_of(value: object) -> tuple[str, int] | None:
    """The (host, port) of a `replicaof` value, or None for a leader."""
    if not value:
        return None
    host, port = str(value).rsplit(" ", 1)
    return host, int(port)


class BindKind(Kind):
    """Addresses to listen on; the value is them joined by single spaces.

    One empty argument means no address. Empty pieces (from doubled spaces in a
    CONFIG SET value) are dropped; addresses are not checked here, binding them does.
    """

    label: ClassVar[str] = "special"
    multi_arg: ClassVar[bool] = True

    def parse(self, args: Sequence[str], current: object) -> object:
        if len(args) > BIND_ADDRESSES_MAX:
            raise BadValue("Too many bind addresses specified.")
        return " ".join(arg for arg in args if arg)

    def write(self, value: object) -> list[str]:
        addresses = str(value).split()
        return [" ".join(bare_or_quoted(a) for a in addresses) if addresses else '""']


_SAVE_NUMBER = re.compile(r"[ \t\n\v\f\r]*[+-]?[0-9]+")


class SaveKind(Kind):
    """Redis's `save <seconds> <changes> ...`: pairs with seconds >= 1, changes >= 0.

    The value is the pairs joined by spaces ("" for none, also written `save ""`). In a
    config file, successive `save` lines add pairs, as in redis.conf.
    """

    label: ClassVar[str] = "special"
    multi_arg: ClassVar[bool] = True
    accumulates: ClassVar[bool] = True

    def parse(self, args: Sequence[str], current: object) -> object:
        if len(args) == 1 and args[0] == "":
            args = ()
        if len(args) % 2:
            raise BadValue("Invalid save parameters")
        numbers = [self._number(arg, i % 2) for i, arg in enumerate(args)]
        return " ".join(str(n) for n in numbers)

    @staticmethod
    def _number(text: str, is_changes: int) -> int:
        if _SAVE_NUMBER.fullmatch(text) is None:
            raise BadValue("Invalid save parameters")
        value = int(text)
        low, high = (0, INT_MAX) if is_changes else (1, LLONG_MAX)
        if not low <= value <= high:
            raise BadValue("Invalid save parameters")
        return value

    def write(self, value: object) -> list[str]:
        numbers = str(value).split()
        pairs = [f"{numbers[i]} {numbers[i + 1]}" for i in range(0, len(numbers), 2)]
        return pairs or ['""']


_DECIMAL = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?|[+-]?inf(inity)?", re.I)


class PercentilesKind(Kind):
    """Redis's latency-tracking-info-percentiles: numbers from 0 to 100, as a tuple of
    floats; one empty argument means none. Shown as C's %f without trailing zeros."""

    label: ClassVar[str] = "special"
    multi_arg: ClassVar[bool] = True

    def parse(self, args: Sequence[str], current: object) -> object:
        if len(args) == 1 and args[0] == "":
            return ()
        values = []
        for arg in args:
            if _DECIMAL.fullmatch(arg) is None:
                raise BadValue("Invalid latency-tracking-info-percentiles parameters")
            value = float(arg)
            if not 0.0 <= value <= 100.0:
                raise BadValue(
                    "latency-tracking-info-percentiles parameters should sit between [0.0,100.0]"
                )
            values.append(value)
        return tuple(values)

    def show(self, value: object) -> str:
        assert isinstance(value, tuple)
        return " ".join(format_percentile(p) for p in value)

    def write(self, value: object) -> list[str]:
        return [self.show(value) or '""']


class BufferLimit(NamedTuple):
    """Output buffer limits of one client class; 0 turns a limit off."""

    hard_bytes: int  # disconnect as soon as the pending output passes this
    soft_bytes: int  # disconnect if the pending output stays past this ...
    soft_seconds: int  # ... for this many seconds in a row

    def soft_since(
        self, pending: int, since: float | None, now: float
    ) -> tuple[float | None, bool]:
        """The soft limit as Redis keeps it, for output `pending` bytes at monotonic
        time `now`: since when the output has stood at or past `soft_bytes` (None while
        below it, or with no soft limit; `since` is the last answer), and whether it
        has stood there longer than `soft_seconds`."""
        if not self.soft_bytes or pending < self.soft_bytes:
            return None, False
        if since is None:
            return now, False
        return since, now - since > self.soft_seconds


class OutputBufferLimits(NamedTuple):
    """The value of client-output-buffer-limit: one BufferLimit per client class."""

    normal: BufferLimit
    replica: BufferLimit
    pubsub: BufferLimit

    @property
    def normal_hard_bytes(self) -> int:
        return self.normal.hard_bytes

    def limits(self) -> list[tuple[str, BufferLimit]]:
        return list(zip(self._fields, self, strict=True))


_BUFFER_CLASSES = {"normal": "normal", "replica": "replica", "slave": "replica", "pubsub": "pubsub"}
_SECONDS = re.compile(r"[ \t\n\v\f\r]*[+-]?[0-9]+")


class BufferLimitKind(Kind):
    """Redis's `<class> <hard> <soft> <soft-seconds>` groups, for any of the classes
    normal, replica (or slave), pubsub; classes not named keep their limits. CONFIG
    GET names the replica class `slave`, as Redis 7.0 does."""

    label: ClassVar[str] = "special"
    multi_arg: ClassVar[bool] = True

    def parse(self, args: Sequence[str], current: object) -> object:
        assert isinstance(current, OutputBufferLimits)
        if len(args) % 4:
            raise BadValue("Wrong number of arguments in buffer limit configuration.")
        changes = {}
        for i in range(0, len(args), 4):
            name = _BUFFER_CLASSES.get(args[i].lower())
            if name is None:
                raise BadValue("Invalid client class specified in buffer limit configuration.")
            changes[name] = self._limit(args[i + 1 : i + 4])
        return current._replace(**changes)

    @staticmethod
    def _limit(args: Sequence[str]) -> BufferLimit:
        bad = BadValue("Error in hard, soft or soft_seconds setting in buffer limit configuration.")
        try:
            hard, soft = parse_memory(args[0]), parse_memory(args[1])
        except ValueError:
            raise bad from None
        if _SECONDS.fullmatch(args[2]) is None:
            raise bad
        seconds = int(args[2])
        if max(hard, soft) > LLONG_MAX or not 0 <= seconds <= INT_MAX:
            raise bad
        return BufferLimit(hard, soft, seconds)

    def show(self, value: object) -> str:
        assert isinstance(value, OutputBufferLimits)
        return " ".join(
            f"{'slave' if name == 'replica' else name} "
            f"{lim.hard_bytes} {lim.soft_bytes} {lim.soft_seconds}"
            for name, lim in value.limits()
        )

    def write(self, value: object) -> list[str]:
        assert isinstance(value, OutputBufferLimits)
        return [
            f"{name} {format_memory(lim.hard_bytes)} {format_memory(lim.soft_bytes)} "
            f"{lim.soft_seconds}"
            for name, lim in value.limits()
        ]
