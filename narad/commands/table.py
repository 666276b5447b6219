"""The one command table: name, arity, flags, keys, docs -> handler.

Every command Narad answers is registered here with `@command`; COMMAND, COMMAND
COUNT / INFO / DOCS / LIST are generated from the table, so redis-cli's hints and
client-side key routing see exactly what the server does.

Arity follows Redis: N means exactly N arguments counting the name, -N at least N.
Flags follow Redis 7 names (write, readonly, admin, fast, blocking, noauth, loading,
stale, no_multi, ...); `write` decides what a replica refuses and what is replicated.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from narad.server import Client

Handler = Callable[["Client", list[bytes]], Any]


@dataclass
class Command:
    name: str  # lower case; "parent|sub" for subcommands
    handler: Handler | None
    arity: int
    flags: frozenset[str]
    keys: tuple[int, int, int]  # first key, last key (-1: last argument), step
    group: str  # Redis's doc group: stream, connection, server, generic, transactions
    summary: str
    since: str = "7.0.0"
    complexity: str = ""
    categories: tuple[str, ...] = ()
    subcommands: dict[str, Command] = field(default_factory=dict)
    # Counters for INFO commandstats, as Redis keeps them in its command table.
    calls: int = 0
    usec: int = 0
    rejected: int = 0  # refused before running (arity, auth, unknown subcommand, ...)
    failed: int = 0  # ran and answered an error

    def check_arity(self, argc: int) -> bool:
        return argc == self.arity if self.arity >= 0 else argc >= -self.arity

    def key_positions(self, argc: int) -> range:
        first, last, step = self.keys
        if first == 0:
            return range(0)
        last = argc + last if last < 0 else last
        return range(first, min(last, argc - 1) + 1, step)


COMMANDS: dict[bytes, Command] = {}  # lower-case name -> command
LOOKUP: dict[bytes, Command] = {}  # lower- and upper-case name -> command (the hot path)


def command(
    name: str,
    arity: int,
    flags: str = "",
    keys: tuple[int, int, int] = (0, 0, 0),
    group: str = "generic",
    summary: str = "",
    since: str = "1.0.0",
    complexity: str = "O(1)",
    parent: str | None = None,
) -> Callable[[Handler], Handler]:
    """Register the decorated handler `handler(client, args)`; args[0] is the name."""

    def register(handler: Handler) -> Handler:
        categories = _categories(flags, group)
        cmd = Command(
            name if parent is None else f"{parent}|{name}",
            handler,
            arity,
            frozenset(flags.split()),
            keys,
            group,
            summary or (handler.__doc__ or "").strip().splitlines()[0],
            since,
            complexity,
            categories,
        )
        if parent is None:
            existing = COMMANDS.get(name.encode())
            if existing is not None:  # a container registered first by its subcommands
                cmd.subcommands = existing.subcommands
            COMMANDS[name.encode()] = cmd
            LOOKUP[name.encode()] = LOOKUP[name.upper().encode()] = cmd
        else:
            container = COMMANDS.setdefault(
                parent.encode(),
                Command(
                    parent,
                    None,
                    -2,
                    frozenset(),
                    (0, 0, 0),
                    group,
                    f"A container for {parent.upper()} commands",
                ),
            )
            container.subcommands[name] = cmd
        return handler

    return register


def container(name: str, group: str, summary: str, since: str = "1.0.0") -> None:
    """Declare a command that only dispatches to subcommands (CLIENT, CONFIG, ...)."""
    cmd = COMMANDS.setdefault(
        name.encode(), Command(name, None, -2, frozenset(), (0, 0, 0), group, summary)
    )
    cmd.summary, cmd.since, cmd.group = summary, since, group
    LOOKUP[name.encode()] = LOOKUP[name.upper().encode()] = cmd


def _categories(flags: str, group: str) -> tuple[str, ...]:
    cats = [f"@{group}"] if group in ("stream", "connection", "transaction", "keyspace") else []
    names = flags.split()
    if "write" in names:
        cats.append("@write")
    if "readonly" in names:
        cats.append("@read")
    if "admin" in names:
        cats += ["@admin", "@dangerous"]
    if "fast" in names:
        cats.append("@fast")
    else:
        cats.append("@slow")
    if "blocking" in names:
        cats.append("@blocking")
    return tuple(cats)


# -- COMMAND replies ------------------------------------------------------------------


def info_reply(cmd: Command) -> list[Any]:
    """COMMAND INFO's array for one command, as Redis 7 shapes it."""
    first, last, step = cmd.keys
    return [
        cmd.name,
        cmd.arity,
        [_status(f) for f in sorted(cmd.flags)],
        first,
        last,
        step,
        list(cmd.categories),
        [],
        _key_specs(cmd),
        [info_reply(sub) for sub in cmd.subcommands.values()],
    ]


def _status(flag: str) -> Any:
    from narad.resp import SimpleString

    return SimpleString(flag)


def _key_specs(cmd: Command) -> list[Any]:
    first, last, step = cmd.keys
    if first == 0:
        return []
    access = "RW" if "write" in cmd.flags else "RO"
    return [
        {
            "begin_search": {"type": "index", "spec": {"index": first}},
            "find_keys": {
                "type": "range",
                "spec": {
                    "lastkey": last if last < 0 else last - first,
                    "keystep": step,
                    "limit": 0,
                },
            },
            "flags": [access],
        }
    ]


def docs_reply(cmd: Command) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "summary": cmd.summary,
        "since": cmd.since,
        "group": cmd.group,
        "complexity": cmd.complexity,
    }
    if cmd.subcommands:
        doc["subcommands"] = {sub.name: docs_reply(sub) for sub in cmd.subcommands.values()}
    return doc


def all_commands() -> Iterable[Command]:
    """Every command and subcommand."""
    for cmd in COMMANDS.values():
        yield cmd
        yield from cmd.subcommands.values()
