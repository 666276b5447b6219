"""DEBUG: refused unless `enable-debug-command` allows it, as in Redis. CLOCK moves the
clock that queues keep time by, so tests can pass visibility deadlines and delays
without sleeping; SLEEP holds the event loop as Redis's does, so tests can stop a
server that is stuck in a request."""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING, Any

from narad.commands.args import parse_int
from narad.commands.table import command, help_reply
from narad.errors import CommandError, syntax, unknown_subcommand
from narad.queues.queue import MAX_CLOCK_MS
from narad.resp import SimpleString

if TYPE_CHECKING:
    from narad.node import Session

NOT_ALLOWED = (
    'DEBUG command not allowed. If the enable-debug-command option is set to "local", '
    "you can run it from a local connection, otherwise you need to set this option in "
    "the configuration file, and then restart the server."
)

HELP = [
    "DEBUG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "CLOCK",
    "    Print the queue clock (milliseconds).",
    "CLOCK FREEZE [<ms>]",
    "    Stop the queue clock, at <ms> if given.",
    "CLOCK ADVANCE <ms>",
    "    Move the queue clock forward; deadlines and delays due by then take effect.",
    "CLOCK RESUME",
    "    Let the queue clock run again from where it stands.",
    "SLEEP <seconds>",
    "    Stop the server for <seconds>, the event loop held. Decimals allowed.",
    "HELP",
    "    Print this help.",
]


def _allowed(session: Session) -> bool:
    mode = str(session.node.config["enable-debug-command"])
    if mode == "yes":
        return True
    return mode == "local" and session.addr.startswith(("127.", "[::1]"))


@command("debug", -2, "admin noscript loading stale", group="server", summary="A debug tool.")
def debug(session: Session, args: list[bytes]) -> Any:
    if not _allowed(session):
        raise CommandError(NOT_ALLOWED)
    sub = args[1].lower()
    if sub == b"help":
        return help_reply(HELP)
    if sub == b"sleep" and len(args) == 3:
        return _sleep(args[2])
    if sub != b"clock":
        raise unknown_subcommand(args[1], "debug")
    clock = session.node.queues.clock
    action = args[2].lower() if len(args) > 2 else b""
    if action == b"" and len(args) == 2:
        return clock.now_ms()
    if action == b"freeze" and len(args) in (3, 4):
        at = parse_int(args[3]) if len(args) == 4 else None
        if at is not None and not 0 <= at <= MAX_CLOCK_MS:
            raise CommandError(f"value is out of range, value must between 0 and {MAX_CLOCK_MS}")
        now = clock.freeze(at)
    elif action == b"advance" and len(args) == 4:
        step = parse_int(args[3])
        if step < 0:
            raise CommandError("the clock only moves forward")
        if step > MAX_CLOCK_MS - clock.now_ms():  # queue deadlines must fit their field
            raise CommandError(f"the clock cannot pass {MAX_CLOCK_MS}")
        now = clock.advance(step)
    elif action == b"resume" and len(args) == 3:
        clock.resume()
        now = clock.now_ms()
    else:
        raise syntax()
    session.node.queues.tick()
    return now


def _sleep(arg: bytes) -> Any:
    try:
        seconds = float(arg)
    except ValueError:
        raise CommandError("value is not a valid float") from None
    if not math.isfinite(seconds) or seconds < 0:
        raise CommandError("value is not a valid float")
    time.sleep(seconds)  # on the loop, on purpose
    return SimpleString("OK")
