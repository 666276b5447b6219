"""MULTI / EXEC / DISCARD / WATCH / UNWATCH, as Redis 7.0 runs them.

A transaction's commands are queued, then run one after the other in one event-loop
step, so no other client's command runs in between; their replies leave together
after the commit barrier (narad/server.py). WATCHed keys abort EXEC (null reply)
when any command wrote them after WATCH.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from narad.commands.table import COMMANDS, command
from narad.errors import CommandError
from narad.resp import ErrorReply, NullArray, SimpleString

if TYPE_CHECKING:
    from narad.client import Client

OK = SimpleString("OK")


@command("multi", 1, "noscript loading stale fast allow_busy", group="transactions", since="1.2.0")
def multi(client: Client, args: list[bytes]) -> Any:
    """Starts a transaction."""
    if client.multi is not None:
        raise CommandError("MULTI calls can not be nested")
    client.multi = []
    client.multi_failed = False
    return OK


@command(
    "discard", 1, "noscript loading stale fast allow_busy", group="transactions", since="2.0.0"
)
def discard(client: Client, args: list[bytes]) -> Any:
    """Discards a transaction."""
    if client.multi is None:
        raise CommandError("DISCARD without MULTI")
    client.multi = None
    client.unwatch_all()
    return OK


@command("exec", 1, "noscript loading stale skip_slowlog", group="transactions", since="1.2.0")
def exec_(client: Client, args: list[bytes]) -> Any:
    """Executes all commands in a transaction."""
    queued, client.multi = client.multi, None
    if queued is None:
        raise CommandError("EXEC without MULTI")
    dirty = client.watch_dirty
    client.unwatch_all()
    if client.multi_failed:
        client.multi_failed = False
        raise CommandError("Transaction discarded because of previous errors.", "EXECABORT")
    if dirty:
        return NullArray()
    replies: list[Any] = []
    client.in_exec = True
    try:
        for argv in queued:
            replies.append(_run_one(client, argv))
    finally:
        client.in_exec = False
    return replies


def _run_one(client: Client, argv: list[bytes]) -> Any:
    cmd = COMMANDS[argv[0].lower()]
    if cmd.subcommands:
        cmd = cmd.subcommands[argv[1].lower().decode("utf-8", "replace")]
    try:
        return client.server.dispatch.call(client, cmd, argv)
    except CommandError as exc:
        stats = client.server.stats
        stats.error_replies += 1
        stats.errors[exc.code] += 1
        return ErrorReply(exc.code, exc.message)


@command(
    "watch", -2, "noscript loading stale fast allow_busy", (1, -1, 1), "transactions", since="2.2.0"
)
def watch(client: Client, args: list[bytes]) -> Any:
    """Monitors changes to keys to determine the execution of a transaction."""
    if client.multi is not None:
        raise CommandError("WATCH inside MULTI is not allowed")
    for key in args[1:]:
        client.watch(key)
    return OK


@command(
    "unwatch", 1, "noscript loading stale fast allow_busy", group="transactions", since="2.2.0"
)
def unwatch(client: Client, args: list[bytes]) -> Any:
    """Forgets about watched keys of a transaction."""
    client.unwatch_all()
    return OK
