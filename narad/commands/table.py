"""The one command table: name, arity, flags, keys, docs -> handler.

Every command Narad answers is registered here with `@command`; COMMAND, COMMAND
COUNT / INFO / DOCS / LIST are generated from the table and from each command's
arguments, key specs and tips (narad/commands/arguments.py), so redis-cli's hints and
client-side key routing see exactly what the server does.

Arity follows Redis: N means exactly N arguments counting the name, -N at least N.
Flags follow Redis 7 names (write, readonly, admin, fast, blocking, noauth, loading,
stale, no_multi, ...); `write` decides what a replica refuses and what is replicated.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from narad.acl import catalogue
from narad.acl.user import READ, WRITE
from narad.commands import arguments
from narad.metrics import Histogram

if TYPE_CHECKING:
    from narad.node import Session

Handler = Callable[["Session", list[bytes]], Any]
# A run handler takes a command and the ones queued after it that it can answer in
# one go: run(session, argv, queued) runs them, writes their replies to the
# session's connection and returns the argvs it ran (argv first), or returns None
# with nothing done (the general path then runs argv). It may instead hold the
# writes back in `node.barrier.held_back` (narad/barrier.py), whose `apply` then
# makes them and writes the replies; a run handler that finds other writes held back
# there adds them first unless it joins them. Its reply to one command is at most
# RUN_REPLY_BYTES_MAX bytes (the caller bounds the output buffer with it).
RUN_REPLY_BYTES_MAX = 48
RunHandler = Callable[["Session", list[bytes], "deque[list[bytes]]"], "list[list[bytes]] | None"]
# A run handler takes only commands whose name and key are argv's (byte for byte), so
# the permission check of argv (narad/dispatch.py) holds for every command it takes.

# The keys a command touches, from its arguments: (argv index, access) pairs, access
# READ and/or WRITE (narad/acl/user.py; 0: any key pattern that matches will do, as
# Redis's key specs without ACCESS, INSERT, UPDATE or DELETE). An index of None means
# keys its arguments do not name (narad/acl/check.py). A finder never raises: for
# arguments it cannot read it returns the keys it found.
KeyAccess = tuple["int | None", int]
KeyFinder = Callable[[list[bytes]], list[KeyAccess]]


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
    run: RunHandler | None = None  # the pipelined fast path, if the command has one
    # Keys named beyond `keys` (options: XREAD's STREAMS, Q.CREATE's DLQ, ...), or a
    # command whose keys' access depends on its arguments: its own finder.
    find_keys: KeyFinder | None = None
    access: int = 0  # what `keys` are touched with (see KeyAccess); set by `command`
    acl: catalogue.Entry | None = None  # this command as ACL rules see it
    # Counters for INFO commandstats, as Redis keeps them in its command table.
    calls: int = 0
    usec: int = 0
    rejected: int = 0  # refused before running (arity, auth, unknown subcommand, ...)
    failed: int = 0  # ran and answered an error
    latency: Histogram | None = None  # INFO latencystats, while latency-tracking is on
    # Whether its reply tells nothing of the keyspace (PING, INFO, CONFIG, ROLE, WAIT,
    # ...): it leaves without waiting for the replicas' acks of the commits before
    # it (narad/barrier.py). Set by `command` (see `_data_free`).
    data_free: bool = False

    def track(self, ns: int, count: int = 1) -> None:
        """Record `count` calls that took `ns` nanoseconds each (latency-tracking)."""
        histogram = self.latency
        if histogram is None:
            histogram = self.latency = Histogram()
        histogram.record(ns, count)

    def reset_stats(self) -> None:
        """CONFIG RESETSTAT: the counters back to zero."""
        self.calls = self.usec = self.rejected = self.failed = 0
        self.latency = None

    def check_arity(self, argc: int) -> bool:
        return argc == self.arity if self.arity >= 0 else argc >= -self.arity

    def key_positions(self, argc: int) -> range:
        first, last, step = self.keys
        if first == 0:
            return range(0)
        last = argc + last if last < 0 else last
        return range(first, min(last, argc - 1) + 1, step)

    def keys_of(self, argv: list[bytes]) -> list[KeyAccess]:
        """Every key `argv` touches with its access: the one answer of the permission
        check, COMMAND GETKEYS and GETKEYSANDFLAGS."""
        if self.find_keys is not None:
            return self.find_keys(argv)
        access = self.access
        return [(i, access) for i in self.key_positions(len(argv))]


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
    categories: str = "",
) -> Callable[[Handler], Handler]:
    """Register the decorated handler `handler(session, args)`; args[0] is the name.
    `categories` adds ACL categories to those the flags and group imply."""

    def register(handler: Handler) -> Handler:
        full = name if parent is None else f"{parent}|{name}"
        all_categories = (*_categories(flags, group), *categories.split(), *_narad_categories(full))
        cmd = Command(
            full,
            handler,
            arity,
            frozenset(flags.split()),
            keys,
            group,
            summary or (handler.__doc__ or "").strip().splitlines()[0],
            since,
            complexity,
            all_categories,
        )
        cmd.data_free = _data_free(name, parent, group, cmd.flags)
        cmd.access = KEY_ACCESS.get(full, _default_access(cmd.flags))
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
                    categories=("@slow",),
                ),
            )
            if container.acl is None:
                container.acl = catalogue.register(parent, container.categories, False)
            container.subcommands[name] = cmd
        cmd.acl = catalogue.register(cmd.name, cmd.categories, "noauth" in cmd.flags)
        return handler

    return register


def container(name: str, group: str, summary: str, since: str = "1.0.0") -> None:
    """Declare a command that only dispatches to subcommands (CLIENT, CONFIG, ...)."""
    cmd = COMMANDS.setdefault(
        name.encode(),
        Command(name, None, -2, frozenset(), (0, 0, 0), group, summary, categories=("@slow",)),
    )
    cmd.summary, cmd.since, cmd.group = summary, since, group
    LOOKUP[name.encode()] = LOOKUP[name.upper().encode()] = cmd
    if cmd.acl is None:
        cmd.acl = catalogue.register(name, cmd.categories, False)


def finds_keys(name: str, finder: KeyFinder) -> None:
    """Give the registered command `name` ("parent|sub") its own key finder."""
    parent, _, sub = name.partition("|")
    cmd = COMMANDS[parent.encode()]
    if sub:
        cmd = cmd.subcommands[sub]
    cmd.find_keys = finder


GROUP_CATEGORIES = {
    "stream": "@stream",
    "connection": "@connection",
    "transactions": "@transaction",
    "keyspace": "@keyspace",
    "scripting": "@scripting",
}


# Narad's own ACL categories (narad/acl/catalogue.py) beyond the Q.* ones: what a
# replica or a failover sends a leader, and what a sentinel sends a data node
# (narad/sentinel/: link.py, watch.py, failover.py, sentinel.py).
REPLICATION_COMMANDS = frozenset({"psync", "replconf", "fence", "promote", "replicaof", "slaveof"})
SENTINEL_COMMANDS = frozenset(
    {"auth", "ping", "info", "client|setname", "client|list", "fence", "promote", "replicaof"}
)


def _narad_categories(full: str) -> tuple[str, ...]:
    cats = []
    if full.startswith("q.schema"):
        cats.append("@schema")
    elif full.startswith("q."):
        cats.append("@queue")
    if full in REPLICATION_COMMANDS:
        cats.append("@replication")
    if full in SENTINEL_COMMANDS:
        cats.append("@sentinel")
    return tuple(cats)


def _narad_only(name: str) -> bool:
    """Whether Redis lacks the command: COMMAND INFO shows Narad's own categories
    (@queue, ...) for these only."""
    return name.startswith("q.") or name.split("|")[0] in ("fence", "promote")


def _default_access(flags: frozenset[str]) -> int:
    """A command flagged `write` writes its keys, a `readonly` one reads them."""
    if "write" in flags:
        return WRITE
    return READ if "readonly" in flags else 0


# Key access where the flags' default is not what the command does, after Redis 7's
# key specs: commands that read what they change (their reply carries the entries),
# and those that only look at whether a key exists.
KEY_ACCESS = {
    "xreadgroup": READ | WRITE,
    "xclaim": READ | WRITE,
    "xautoclaim": READ | WRITE,
    "q.pop": READ | WRITE,
    "q.consume": READ | WRITE,
    "xlen": 0,
    "exists": 0,
    "type": 0,
    "watch": 0,
}


# Commands of the data-free groups that read the keyspace all the same.
_READS_KEYSPACE = frozenset({"dbsize", "exec", "debug"})


def _data_free(name: str, parent: str | None, group: str, flags: frozenset[str]) -> bool:
    """Whether a command's reply reveals nothing of the keyspace: connection, server
    and transaction commands that do not write, but those that read keys anyway."""
    if name in ("wait", "waitaof"):
        return True
    return (
        group in ("connection", "server", "transactions")
        and "write" not in flags
        and (parent or name) not in _READS_KEYSPACE
    )


def _categories(flags: str, group: str) -> tuple[str, ...]:
    cats = [GROUP_CATEGORIES[group]] if group in GROUP_CATEGORIES else []
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


# The flags COMMAND shows, in Redis 7.0's order (addReplyCommandFlags); flags Narad
# uses internally only (such as `noauth`) are not shown.
SHOWN_FLAGS = (
    "write", "readonly", "denyoom", "module", "admin", "pubsub", "noscript", "blocking",
    "loading", "stale", "skip_monitor", "skip_slowlog", "asking", "fast", "no_auth",
    "no_mandatory_keys", "no_async_loading", "no_multi", "movablekeys", "allow_busy",
)
# ACL categories in Redis 7.0's order (ACLCommandCategories).
CATEGORY_ORDER = (
    "@keyspace", "@read", "@write", "@set", "@sortedset", "@list", "@hash", "@string",
    "@bitmap", "@hyperloglog", "@geo", "@stream", "@pubsub", "@admin", "@fast", "@slow",
    "@blocking", "@dangerous", "@connection", "@transaction", "@scripting",
    "@queue", "@schema", "@replication", "@sentinel",
)


def info_reply(cmd: Command) -> list[Any]:
    """COMMAND INFO's array for one command, as Redis 7 shapes it: flags and
    categories are sets of simple strings (arrays under RESP2), in Redis's order.
    Made once per command: the table does not change after import."""
    made = _INFO_REPLIES.get(cmd.name)
    if made is None:
        made = _INFO_REPLIES[cmd.name] = _make_info_reply(cmd)
    return made


# COMMAND INFO and COMMAND DOCS replies by full command name, made at first use.
_INFO_REPLIES: dict[str, list[Any]] = {}
_DOCS_REPLIES: dict[str, dict[str, Any]] = {}


def _make_info_reply(cmd: Command) -> list[Any]:
    first, last, step = cmd.keys
    flags = [f for f in SHOWN_FLAGS if f in cmd.flags]
    shown = cmd.categories
    if not _narad_only(cmd.name):  # as Redis shows it: its own categories only
        shown = tuple(c for c in shown if c[1:] in catalogue.REDIS_CATEGORIES)
    categories = sorted(
        shown,
        key=lambda c: CATEGORY_ORDER.index(c) if c in CATEGORY_ORDER else len(CATEGORY_ORDER),
    )
    return [
        cmd.name,
        cmd.arity,
        ordered_set(flags),
        first,
        last,
        step,
        ordered_set(categories),
        ordered_set(arguments.TIPS.get(cmd.name, ())),
        _key_specs(cmd),
        # Redis answers an empty set when there are no subcommands, else an array.
        [info_reply(sub) for sub in cmd.subcommands.values()] or ListSet([]),
    ]


def help_reply(lines: Iterable[str]) -> list[Any]:
    """A HELP subcommand's reply: one simple string per line, as Redis sends them."""
    from narad.resp import SimpleString

    return [SimpleString(line) for line in lines]


class ListSet(AbstractSet[Any]):
    """A RESP3 set reply (an array under RESP2) that keeps its items' order and may
    hold unhashable items such as maps."""

    def __init__(self, items: list[Any]) -> None:
        self.items = items

    def __iter__(self) -> Iterator[Any]:
        return iter(self.items)

    def __len__(self) -> int:
        return len(self.items)

    def __contains__(self, item: object) -> bool:
        return item in self.items


def ordered_set(names: Iterable[str]) -> Any:
    """A RESP3 set of simple strings, in the given order."""
    from narad.resp import SimpleString

    return ListSet([SimpleString(name) for name in names])


# A key spec's flags for each access, in Redis's words: the default spec of a
# command that narad/commands/arguments.py does not list (COMMAND GETKEYSANDFLAGS
# answers the same words).
KEY_FLAGS = {
    0: ("RO",),
    READ: ("RO", "access"),
    WRITE: ("RW", "update"),
    READ | WRITE: ("RW", "access", "update"),
}


def _key_specs(cmd: Command) -> Any:
    """COMMAND INFO's key specs: Redis 7.0's for its commands (arguments.KEY_SPECS),
    else one spec from the table's key positions and access."""
    listed = arguments.KEY_SPEC_MAPS.get(cmd.name)
    if listed is not None:
        return ListSet([{**spec, "flags": ordered_set(spec["flags"])} for spec in listed])
    first, last, step = cmd.keys
    if first == 0:
        return ListSet([])
    return ListSet(
        [
            {
                "flags": ordered_set(KEY_FLAGS[cmd.access]),
                "begin_search": {"type": "index", "spec": {"index": first}},
                "find_keys": {
                    "type": "range",
                    "spec": {
                        "lastkey": last if last < 0 else last - first,
                        "keystep": step,
                        "limit": 0,
                    },
                },
            }
        ]
    )


def docs_reply(cmd: Command) -> dict[str, Any]:
    """COMMAND DOCS's map for one command, in Redis 7.0's field order; `arguments`
    come from narad/commands/arguments.py (none for a container of subcommands).
    Made once per command, as `info_reply`."""
    made = _DOCS_REPLIES.get(cmd.name)
    if made is None:
        made = _DOCS_REPLIES[cmd.name] = _make_docs_reply(cmd)
    return made


def _make_docs_reply(cmd: Command) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "summary": cmd.summary,
        "since": cmd.since,
        "group": cmd.group,
        "complexity": cmd.complexity,
    }
    if cmd.name in arguments.DOC_FLAGS:
        doc["doc_flags"] = ordered_set(arguments.DOC_FLAGS[cmd.name])
    if cmd.name in arguments.DEPRECATED:
        doc["deprecated_since"], doc["replaced_by"] = arguments.DEPRECATED[cmd.name]
    args = arguments.ARGUMENTS.get(cmd.name)
    if args:
        doc["arguments"] = [_argument_reply(arg) for arg in args]
    if cmd.subcommands:
        doc["subcommands"] = {sub.name: docs_reply(sub) for sub in cmd.subcommands.values()}
    return doc


def _argument_reply(arg: dict[str, Any]) -> dict[str, Any]:
    """One argument's map: its flags a set of simple strings, as Redis sends them."""
    out = dict(arg)
    if "flags" in out:
        out["flags"] = ordered_set(out["flags"])
    if "arguments" in out:
        out["arguments"] = [_argument_reply(inner) for inner in out["arguments"]]
    return out


def all_commands() -> Iterable[Command]:
    """Every command and subcommand."""
    for cmd in COMMANDS.values():
        yield cmd
        yield from cmd.subcommands.values()
