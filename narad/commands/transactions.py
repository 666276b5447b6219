"""MULTI / EXEC / DISCARD / WATCH / UNWATCH, as Redis 7.0 runs them.

A transaction's commands are queued, then run one after the other in one event-loop
step, so no other client's command runs in between; their replies leave together
after the commit barrier (narad/barrier.py). WATCHed keys abort EXEC (null reply)
when any command wrote them after WATCH (narad/keywatch.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from narad.commands.table import COMMANDS, command
from narad.errors import CommandError
from narad.resp import ErrorReply, NullArray, SimpleString

if TYPE_CHECKING:
    from narad.node import Session

OK = SimpleString("OK")


@command("multi", 1, "noscript loading stale fast allow_busy", group="transactions", since="1.2.0")
def multi(session: Session, args: list[bytes]) -> Any:
    """Starts a transaction."""
    if session.multi is not None:
        raise CommandError("MULTI calls can not be nested")
    session.multi = []
    session.multi_failed = False
    return OK


@command(
    "discard", 1, "noscript loading stale fast allow_busy", group="transactions", since="2.0.0"
)
def discard(session: Session, args: list[bytes]) -> Any:
    """Discards a transaction."""
    if session.multi is None:
        raise CommandError("DISCARD without MULTI")
    session.multi = None
    session.unwatch_all()
    return OK


@command("exec", 1, "noscript loading stale skip_slowlog", group="transactions", since="1.2.0")
def exec_(session: Session, args: list[bytes]) -> Any:
    """Executes all commands in a transaction."""
    queued, session.multi = session.multi, None
    if queued is None:
        raise CommandError("EXEC without MULTI")
    dirty = session.watch_dirty
    session.unwatch_all()
    if session.multi_failed:
        session.multi_failed = False
        raise CommandError("Transaction discarded because of previous errors.", "EXECABORT")
    if dirty:
        return NullArray()
    replies: list[Any] = []
    session.in_exec = True
    try:
        for argv in queued:
            replies.append(_run_one(session, argv))
    finally:
        session.in_exec = False
    return replies


def _run_one(session: Session, argv: list[bytes]) -> Any:
    cmd = COMMANDS[argv[0].lower()]
    if cmd.subcommands:
        cmd = cmd.subcommands[argv[1].lower().decode("utf-8", "replace")]
    try:
        runner = session.node.runner
        if session.restricted:  # checked when queued; the user's rules may have changed
            runner.permit(session, cmd, argv, at_exec=True)
        return runner.call(session, cmd, argv)
    except CommandError as exc:
        stats = session.node.stats
        stats.error_replies += 1
        stats.errors[exc.code] += 1
        return ErrorReply(exc.code, exc.message)


@command(
    "watch", -2, "noscript loading stale fast allow_busy", (1, -1, 1), "transactions", since="2.2.0"
)
def watch(session: Session, args: list[bytes]) -> Any:
    """Monitors changes to keys to determine the execution of a transaction."""
    if session.multi is not None:
        raise CommandError("WATCH inside MULTI is not allowed")
    for key in args[1:]:
        session.watch(key)
    return OK


@command(
    "unwatch", 1, "noscript loading stale fast allow_busy", group="transactions", since="2.2.0"
)
def unwatch(session: Session, args: list[bytes]) -> Any:
    """Forgets about watched keys of a transaction."""
    session.unwatch_all()
    return OK
