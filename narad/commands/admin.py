"""Server commands: INFO, CONFIG, COMMAND, TIME, SHUTDOWN, LASTSAVE, SAVE, BGSAVE,
FUNCTION FLUSH, SLOWLOG, MONITOR."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from narad import glob, info
from narad.commands import arguments
from narad.commands.args import parse_int
from narad.commands.table import (
    COMMANDS,
    KEY_FLAGS,
    Command,
    all_commands,
    command,
    container,
    docs_reply,
    help_reply,
    info_reply,
    ordered_set,
)
from narad.config import ConfigError
from narad.errors import CommandError, syntax, unknown_subcommand, wrong_arity
from narad.resp import SimpleString, Verbatim

if TYPE_CHECKING:
    from narad.node import Session

OK = SimpleString("OK")


@command("info", -1, "loading stale", group="server", categories="@dangerous")
def info_(session: Session, args: list[bytes]) -> Any:
    """Returns information and statistics about the server."""
    text = info.render(session.node, [a.decode(errors="replace") for a in args[1:]])
    return Verbatim(text) if session.protocol >= 3 else text.encode()


@command("time", 1, "loading stale fast", group="server", since="2.6.0")
def time_(session: Session, args: list[bytes]) -> Any:
    """Returns the server time."""
    now = time.time_ns() // 1000
    return [b"%d" % (now // 1_000_000), b"%d" % (now % 1_000_000)]


@command("lastsave", 1, "loading stale fast", group="server", categories="@admin @dangerous")
def lastsave(session: Session, args: list[bytes]) -> Any:
    """Returns the Unix timestamp of the last successful commit to disk."""
    return session.node.keyspace.last_commit_s


@command("save", 1, "admin noscript no_async_loading no_multi", group="server")
def save(session: Session, args: list[bytes]) -> Any:
    """Synchronously saves the database(s) to disk (Narad: commits and fsyncs now)."""
    session.node.barrier.commit_now()
    return OK


@command("bgsave", -1, "admin noscript no_async_loading", group="server")
def bgsave(session: Session, args: list[bytes]) -> Any:
    """Asynchronously saves the database(s) to disk (Narad: every write is already logged)."""
    return SimpleString("Background saving started")


@command("shutdown", -1, "admin noscript loading stale no_multi allow_busy", group="server")
def shutdown(session: Session, args: list[bytes]) -> Any:
    """Synchronously saves the database(s) to disk and shuts down the Redis server."""
    if session.in_exec:
        raise CommandError("Command not allowed inside a transaction")
    for arg in args[1:]:
        if arg.lower() not in (b"nosave", b"save", b"now", b"force", b"abort"):
            raise syntax()
    if any(a.lower() == b"abort" for a in args[1:]):
        raise CommandError("No shutdown in progress.")
    session.node.request_shutdown()
    from narad.node import NO_REPLY

    return NO_REPLY


@command("monitor", 1, "admin noscript loading stale", group="server")
def monitor(session: Session, args: list[bytes]) -> Any:
    """Listens for all requests received by the server in real-time."""
    if session.in_exec:
        raise CommandError("MONITOR isn't allowed for DENY BLOCKING client")
    if session not in session.node.observers.monitors:
        session.node.observers.monitors.append(session)
    return OK


# -- CONFIG -------------------------------------------------------------------------------

container("config", "server", "A container for server configuration commands.", "2.0.0")


def _config_error(exc: ConfigError) -> CommandError:
    return CommandError(str(exc))


@command("get", -3, "admin noscript loading stale", group="server", parent="config", since="2.0.0")
def config_get(session: Session, args: list[bytes]) -> Any:
    """Returns the effective values of configuration parameters."""
    pairs = session.node.config.get([a.decode(errors="replace") for a in args[2:]])
    return {name: value for name, value in pairs}


@command("set", -4, "admin noscript loading stale", group="server", parent="config", since="2.0.0")
def config_set(session: Session, args: list[bytes]) -> Any:
    """Sets configuration parameters in-flight."""
    if len(args) % 2:
        raise wrong_arity("config|set")
    pairs = [
        (args[i].decode(errors="replace"), args[i + 1].decode(errors="surrogateescape"))
        for i in range(2, len(args), 2)
    ]
    try:
        session.node.config.set(pairs)
    except ConfigError as exc:
        raise _config_error(exc) from None
    return OK


@command(
    "resetstat", 2, "admin noscript loading stale", group="server", parent="config", since="2.0.0",
)
def config_resetstat(session: Session, args: list[bytes]) -> Any:
    """Resets the server's statistics."""
    session.node.stats.reset()
    for cmd in all_commands():
        cmd.reset_stats()
    session.node.observers.slowlog.clear()
    return OK


@command(
    "rewrite", 2, "admin noscript loading stale", group="server", parent="config", since="2.8.0",
)
def config_rewrite(session: Session, args: list[bytes]) -> Any:
    """Persists the effective configuration to file."""
    try:
        session.node.config.rewrite()
    except ConfigError as exc:
        raise _config_error(exc) from None
    return OK


@command("help", 2, "loading stale", group="server", parent="config", since="5.0.0")
def config_help(session: Session, args: list[bytes]) -> Any:
    """Returns helpful text about the different subcommands."""
    return help_reply([
        "CONFIG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
        "GET <pattern>",
        "    Return parameters matching the glob-like <pattern> and their values.",
        "SET <directive> <value>",
        "    Set the configuration <directive> to <value>.",
        "RESETSTAT",
        "    Reset statistics reported by the INFO command.",
        "REWRITE",
        "    Rewrite the configuration file.",
        "HELP",
        "    Print this help.",
    ])


# -- COMMAND ------------------------------------------------------------------------------


@command(
    "command", -1, "loading stale", group="server", since="2.8.13", complexity="O(N)",
    categories="@connection",
)
def command_(session: Session, args: list[bytes]) -> Any:
    """Returns detailed information about all commands."""
    if len(args) > 1:
        # COMMAND both answers alone and has subcommands; when the dispatcher hands
        # COMMAND <sub> ... here, dispatch it as it would have.
        sub = COMMANDS[b"command"].subcommands.get(args[1].lower().decode("utf-8", "replace"))
        if sub is None or sub.handler is None:
            raise unknown_subcommand(args[1], "command")
        if not sub.check_arity(len(args)):
            raise wrong_arity(sub.name)
        return sub.handler(session, args)
    return [
        info_reply(cmd) for cmd in COMMANDS.values() if cmd.handler is not None or cmd.subcommands
    ]


@command(
    "count", 2, "loading stale", group="server",
    parent="command", since="2.8.13", categories="@connection",
)
def command_count(session: Session, args: list[bytes]) -> Any:
    """Returns a count of commands."""
    return len(COMMANDS)


@command(
    "info", -2, "loading stale", group="server",
    parent="command", since="2.8.13", categories="@connection",
)
def command_info(session: Session, args: list[bytes]) -> Any:
    """Returns information about one, multiple or all commands."""
    if len(args) == 2:
        return [info_reply(cmd) for cmd in COMMANDS.values()]
    return [_lookup_info(name) for name in args[2:]]


def _lookup_info(name: bytes) -> Any:
    cmd = COMMANDS.get(name.lower())
    return info_reply(cmd) if cmd is not None else None


@command(
    "docs", -2, "loading stale", group="server",
    parent="command", since="7.0.0", categories="@connection",
)
def command_docs(session: Session, args: list[bytes]) -> Any:
    """Returns documentary information about one, multiple or all commands."""
    names = [n.lower() for n in args[2:]] or list(COMMANDS)
    return {name.decode(): docs_reply(COMMANDS[name]) for name in names if name in COMMANDS}


@command(
    "list", -2, "loading stale", group="server",
    parent="command", since="7.0.0", categories="@connection",
)
def command_list(session: Session, args: list[bytes]) -> Any:
    """Returns a list of command names."""
    # As in Redis 7.0, subcommands are listed too, by their full names ("client|list").
    commands = [c for c in all_commands() if c.handler is not None or c.subcommands]
    names = [cmd.name for cmd in commands]
    if len(args) == 5 and args[2].lower() == b"filterby":
        kind, value = args[3].lower(), args[4].decode(errors="replace").lower()
        if kind == b"pattern":

            names = [n for n in names if glob.match(value.encode(), n.encode())]
        elif kind == b"aclcat":
            names = [c.name for c in commands if f"@{value}" in c.categories]
        elif kind == b"module":
            names = []
        else:
            raise syntax()
    elif len(args) != 2:
        raise syntax()
    return names


@command(
    "getkeys", -4, "loading stale", group="server",
    parent="command", since="2.8.13", categories="@connection",
)
def command_getkeys(session: Session, args: list[bytes]) -> Any:
    """Extracts the key names from an arbitrary command."""
    argv = args[2:]
    cmd = _getkeys_command(argv)
    keys = [argv[i] for i, _ in cmd.keys_of(argv) if i is not None]
    if not keys:
        raise CommandError("Invalid arguments specified for command")
    return keys


@command(
    "getkeysandflags", -4, "loading stale", group="server",
    parent="command", since="7.0.0", categories="@connection",
)
def command_getkeysandflags(session: Session, args: list[bytes]) -> Any:
    """Extracts the key names and access flags for an arbitrary command."""
    argv = args[2:]
    cmd = _getkeys_command(argv)
    found = [(i, access) for i, access in cmd.keys_of(argv) if i is not None]
    if not found:
        raise CommandError("Invalid arguments specified for command")
    listed = arguments.KEY_SPEC_MAPS.get(cmd.name)
    if listed is None:
        return [[argv[i], ordered_set(KEY_FLAGS[access])] for i, access in found]
    return [[argv[i], ordered_set(_spec_for(listed, i)["flags"])] for i, _ in found]


def _spec_for(specs: list[dict[str, Any]], position: int) -> dict[str, Any]:
    """The key spec that finds the key at argv `position`: the one that begins at
    it, else the last (a keyword spec, or a range over the remaining arguments)."""
    for spec in specs:
        if spec["begin_search"]["spec"].get("index") == position:
            return spec
    return specs[-1]


def _getkeys_command(argv: list[bytes]) -> Command:
    """The command whose keys COMMAND GETKEYS(ANDFLAGS) is asked for, or Redis's error."""
    cmd = COMMANDS.get(argv[0].lower())
    if cmd is not None and cmd.subcommands:  # XGROUP CREATE, Q.SCHEMA SET, ...
        sub = argv[1].lower().decode("utf-8", "replace") if len(argv) > 1 else ""
        cmd = cmd.subcommands.get(sub)
    if cmd is None:
        raise CommandError("Invalid command specified")
    # Redis's order: a command without keys is refused before its arity is checked.
    if cmd.keys[0] == 0 and cmd.find_keys is None:
        raise CommandError("The command has no key arguments")
    if not cmd.check_arity(len(argv)):
        raise CommandError("Invalid number of arguments specified for command")
    return cmd


@command(
    "help", 2, "loading stale", group="server", parent="command", categories="@connection",
    since="5.0.0",
)
def command_help(session: Session, args: list[bytes]) -> Any:
    """Returns helpful text about the different subcommands."""
    return help_reply([
        "COMMAND <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
        "(no subcommand)",
        "    Return details about all commands.",
        "COUNT",
        "    Return the total number of commands in this server.",
        "LIST",
        "    Return a list of all commands in this server.",
        "INFO [<command-name> ...]",
        "    Return details about the given commands.",
        "DOCS [<command-name> ...]",
        "    Return documentation details about the given commands.",
        "GETKEYS <full-command>",
        "    Return the keys from a full command.",
        "GETKEYSANDFLAGS <full-command>",
        "    Return the keys and the access flags from a full command.",
        "HELP",
        "    Print this help.",
    ])


# -- FUNCTION, SLOWLOG ----------------------------------------------------------------------

container("function", "scripting", "A container for function commands.", "7.0.0")


@command("flush", -2, "write noscript", group="scripting", parent="function", since="7.0.0")
def function_flush(session: Session, args: list[bytes]) -> Any:
    """Deletes all libraries and functions (Narad has none: nothing to do)."""
    if len(args) > 3:
        raise syntax()
    if len(args) == 3 and args[2].lower() not in (b"async", b"sync"):
        raise CommandError("FUNCTION FLUSH only supports SYNC|ASYNC option")
    return OK


@command("list", -2, "noscript", group="scripting", parent="function", since="7.0.0")
def function_list(session: Session, args: list[bytes]) -> Any:
    """Returns information about all libraries (Narad has none)."""
    return []


container("slowlog", "server", "A container for slow log commands.", "2.2.12")


@command("get", -2, "admin loading stale", group="server", parent="slowlog", since="2.2.12")
def slowlog_get(session: Session, args: list[bytes]) -> Any:
    """Returns the slow log's entries."""
    count = 10
    if len(args) == 3:
        count = parse_int(args[2], "count should be greater than or equal to -1")
        if count < -1:
            raise CommandError("count should be greater than or equal to -1")
        if count == -1:
            count = len(session.node.observers.slowlog)
    elif len(args) > 3:
        raise CommandError(
            "unknown subcommand or wrong number of arguments for "
            f"'{args[1].decode(errors='replace')}'. Try SLOWLOG HELP."
        )
    return [
        [e.id, e.at_s, e.usec, e.argv, e.addr.encode(), e.name.encode()]
        for e in list(session.node.observers.slowlog)[:count]
    ]


@command("len", 2, "admin loading stale", group="server", parent="slowlog", since="2.2.12")
def slowlog_len(session: Session, args: list[bytes]) -> Any:
    """Returns the number of entries in the slow log."""
    return len(session.node.observers.slowlog)


@command("reset", 2, "admin loading stale", group="server", parent="slowlog", since="2.2.12")
def slowlog_reset(session: Session, args: list[bytes]) -> Any:
    """Clears all entries from the slow log."""
    session.node.observers.slowlog.clear()
    return OK


@command("help", 2, "loading stale", group="server", parent="slowlog", since="6.2.0")
def slowlog_help(session: Session, args: list[bytes]) -> Any:
    """Show helpful text about the different subcommands."""
    return help_reply([
        "SLOWLOG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
        "GET [<count>]",
        "    Return top <count> entries from the slowlog (default: 10, -1 mean all).",
        "LEN",
        "    Return the length of the slowlog.",
        "RESET",
        "    Reset the slowlog.",
        "HELP",
        "    Print this help.",
    ])
