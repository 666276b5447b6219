"""Plain produces *held back* within a loop iteration and added together.

The run handlers of `XADD key * field value ...` and `Q.PUSH queue payload` do not
add their entries: they hand them to `Node.hold_back`, which gathers the entries
of every session, to any number of streams, into the one `HeldBackAdds` the commit
barrier keeps (`barrier.held_back`). `Node.apply_held_back` (narad/node.py) applies
it (one clock reading, one `Stream.add_run` per stream) before anything else runs
that could see or change those streams: every other command (narad/dispatch.py),
the end of the iteration, the once-a-second upkeep and the queues' timers. Then every
session gets its IDs as its replies, in the order its commands came. So the entries,
IDs and replies are those of running the commands one by one within one millisecond.

Invariant: between taking an entry and applying it nothing writes to any stream
held back (everything else applies them first), so what `can_hold` checked when the
entry was taken still holds when it is applied.

This module writes no reply itself: `apply` returns the replies owed, and the node
writes them to its sessions.
"""

from __future__ import annotations

import time
from typing import Any, Protocol

from narad import errors
from narad.errors import CommandError
from narad.keyspace import Keyspace
from narad.log import LogFailed
from narad.streams import ids
from narad.streams.stream import Stream

FIELDS_FROM = 3  # a held-back argv's entry fields are argv[FIELDS_FROM:]


class Counted(Protocol):
    """A command's counters (narad/commands/table.py's Command)."""

    name: str
    usec: int
    failed: int


# One command run handed in: its session, its command, its stream, how many entries.
Taker = tuple[Any, Counted, Stream, int]
# What adding a stream's entries gave: the first one's ID (the others follow it), or
# one ID or refusal per entry (added one by one), or one refusal for all.
Outcome = int | list["int | CommandError"] | CommandError
# A reply owed once the adds are made: (session, the first of `count` consecutive IDs
# or the refusal each of `count` commands gets, count).
Owed = tuple[Any, "int | CommandError", int]


def can_hold(keyspace: Keyspace, stream: Stream) -> bool:
    """Whether entries for `stream` may be held back: it has no schema (each entry
    is validated alone), its log has not failed and its IDs are not near their end
    (the general handlers report those)."""
    return (
        stream.uid not in keyspace.validators
        and stream.data.failure is None
        and stream.last_id >> 64 != ids.U64_MAX
    )


class HeldBackAdds:
    """The entries held back, by stream, and who takes their IDs, in arrival order."""

    __slots__ = ("runs", "takers")

    def __init__(self) -> None:
        self.runs: dict[Stream, list[list[bytes]]] = {}  # argvs, fields from FIELDS_FROM
        self.takers: list[Taker] = []  # in the order the commands came

    def apply(self) -> tuple[list[Stream], list[Owed]]:
        """Add every entry held back: the streams written, and the replies owed, in
        the order the commands came (the caller tells the key events and writes
        the replies: narad/node.py)."""
        start = time.perf_counter_ns()
        ms = time.time_ns() // 1_000_000
        outcomes: dict[Stream, Outcome] = {}
        written: list[Stream] = []
        for stream, argvs in self.runs.items():
            outcome: Outcome
            try:
                outcome = _add(stream, argvs, ms)
            except ValueError:  # a record over the log's limit: nothing was added
                outcome = [_add_one(stream, argv, ms) for argv in argvs]
            except LogFailed as exc:
                outcome = CommandError(str(exc), "IOERR")
            except Exception as exc:  # a bug: each taker gets an error reply, as in Dispatcher.call
                outcome = errors.internal(exc, self.takers[0][1].name, "adding the held-back")
            outcomes[stream] = outcome
            if not isinstance(outcome, CommandError) and (
                isinstance(outcome, int) or any(isinstance(o, int) for o in outcome)
            ):
                written.append(stream)
        usec = (time.perf_counter_ns() - start) // 1000
        total = sum(len(argvs) for argvs in self.runs.values())
        owed: list[Owed] = []
        for session, cmd, stream, count in self.takers:
            cmd.usec += usec * count // total
            outcome = outcomes[stream]
            if isinstance(outcome, int):
                owed.append((session, outcome, count))
                outcomes[stream] = outcome + count
            elif isinstance(outcome, CommandError):
                cmd.failed += count
                owed.append((session, outcome, count))
            else:
                for one in outcome[:count]:
                    if not isinstance(one, int):
                        cmd.failed += 1
                    owed.append((session, one, 1))
                del outcome[:count]
        return written, owed


def _add(stream: Stream, argvs: list[list[bytes]], ms: int) -> int:
    """Add `argvs` to `stream` with IDs from clock reading `ms`; the first one's ID.
    Raises as `Stream.add_run` does: ValueError with nothing added."""
    return stream.add_auto(argvs, FIELDS_FROM, ms)


def _add_one(stream: Stream, argv: list[bytes], ms: int) -> int | CommandError:
    """When a stream's joint add was refused: one entry alone, as its command would
    have been, so that only the entries at fault get the error."""
    try:
        return _add(stream, [argv], ms)
    except ValueError as exc:
        return CommandError(str(exc))
    except LogFailed as exc:
        return CommandError(str(exc), "IOERR")
