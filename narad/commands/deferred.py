"""Plain produces held back within a loop iteration and added together.

The run handlers of `XADD key * field value ...` and `Q.PUSH queue payload` do not
add their entries: they hand them to `defer_entries`, which gathers the entries of
every client, to any number of streams, into one `DeferredAdds`. `Server.settle`
applies it (one clock reading, one `Stream.add_run` per stream) before anything else
runs (narad/server.py, "Deferred writes"), and then every client gets its IDs as its
replies, in the order its commands came. So the entries, IDs and replies are those of
running the commands one by one within one millisecond.

Invariant: between taking an entry and applying it nothing writes to any stream held
(every other command settles first), so what `can_hold` checked when the entry was
taken still holds when it is applied.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from narad.errors import CommandError
from narad.log import LogFailed
from narad.streams import ids
from narad.streams.stream import Stream

if TYPE_CHECKING:
    from narad.client import Client
    from narad.commands.table import Command
    from narad.keyspace import Keyspace
    from narad.server import Server

FIELDS_FROM = 3  # a held-back argv's entry fields are argv[FIELDS_FROM:]

# One command run handed in: the client, its command, its stream, how many entries.
Taker = tuple["Client", "Command", Stream, int]
# What adding a stream's entries gave: the first one's ID (the others follow it), or
# one ID or refusal per entry (added one by one), or one refusal for all.
Outcome = int | list["int | CommandError"] | CommandError


def can_hold(keyspace: Keyspace, stream: Stream) -> bool:
    """Whether entries for `stream` may be held back: it has no schema (each entry
    is validated alone), its log has not failed and its IDs are not near their end
    (the general handlers report those)."""
    return (
        stream.uid not in keyspace.validators
        and stream.data.failure is None
        and stream.last_id >> 64 != ids.U64_MAX
    )


def defer_entries(client: Client, cmd: Command, stream: Stream, argvs: list[list[bytes]]) -> None:
    """Hold back one entry per argv of `argvs` (its fields argv[FIELDS_FROM:]) for
    `stream` (`can_hold`), with what is held back for it and for other streams. The
    caller has counted the commands and registered the client for sending
    (`Dispatcher._run`)."""
    server = client.server
    deferred = server.barrier.deferred
    if deferred is None:
        deferred = server.barrier.deferred = DeferredAdds(server)
    run = deferred.runs.get(stream)
    if run is None:
        deferred.runs[stream] = list(argvs)
    else:
        run += argvs
    deferred.takers.append((client, cmd, stream, len(argvs)))


class DeferredAdds:
    """The entries held back, by stream, and who takes their IDs, in arrival order."""

    __slots__ = ("runs", "server", "takers")

    def __init__(self, server: Server) -> None:
        self.server = server
        self.runs: dict[Stream, list[list[bytes]]] = {}
        self.takers: list[Taker] = []

    def apply(self) -> None:
        start = time.perf_counter_ns()
        ms = time.time_ns() // 1_000_000
        outcomes: dict[Stream, Outcome] = {}
        for stream, argvs in self.runs.items():
            outcome: Outcome
            try:
                outcome = _add(stream, argvs, ms)
            except ValueError:  # a record over the log's limit: nothing was added
                outcome = [_add_one(stream, argv, ms) for argv in argvs]
            except LogFailed as exc:
                outcome = CommandError(str(exc), "IOERR")
            except Exception as exc:  # a bug: each taker gets an error reply, as in Dispatcher.call
                name = self.takers[0][1].name
                outcome = self.server.dispatch.unexpected(exc, name, "adding the held-back")
            outcomes[stream] = outcome
            if not isinstance(outcome, CommandError) and (
                isinstance(outcome, int) or any(isinstance(o, int) for o in outcome)
            ):
                self.server.key_written(stream.db, stream.key)
        usec = (time.perf_counter_ns() - start) // 1000
        total = sum(len(argvs) for argvs in self.runs.values())
        for client, cmd, stream, count in self.takers:
            cmd.usec += usec * count // total
            outcome = outcomes[stream]
            if isinstance(outcome, int):
                client.reply_ids(outcome >> 64, outcome & ids.SEQ_MASK, count)
                outcomes[stream] = outcome + count
            elif isinstance(outcome, CommandError):
                cmd.failed += count
                for _ in range(count):
                    client.reply_error(outcome)
            else:
                for one in outcome[:count]:
                    if isinstance(one, int):
                        client.reply_ids(one >> 64, one & ids.SEQ_MASK, 1)
                    else:
                        cmd.failed += 1
                        client.reply_error(one)
                del outcome[:count]


def _add(stream: Stream, argvs: list[list[bytes]], ms: int) -> int:
    """Add `argvs` to `stream` with IDs from clock reading `ms`; the first one's ID.
    Raises as `Stream.add_run` does: ValueError with nothing added."""
    sid = ids.next_auto(stream.last_id, ms)
    assert sid is not None  # can_hold: the IDs are not near their end
    stream.add_run(sid, argvs, FIELDS_FROM, ms)
    return sid


def _add_one(stream: Stream, argv: list[bytes], ms: int) -> int | CommandError:
    """When a stream's joint add was refused: one entry alone, as its command would
    have been, so that only the entries at fault get the error."""
    try:
        return _add(stream, [argv], ms)
    except ValueError as exc:
        return CommandError(str(exc))
    except LogFailed as exc:
        return CommandError(str(exc), "IOERR")
