"""Plain produces held back within a loop iteration and added together.

The run handlers of `XADD key * field value ...` and `Q.PUSH queue payload` do not
add their entries: they hand them to `defer_entries`, which gathers the entries of
every client to one stream into one `DeferredAdds`. `Server.settle` applies it (one
clock reading, one `Stream.add_run` for all) before anything else runs that could
see or change the stream (narad/server.py, "Deferred writes"), and each client then
gets its IDs as its replies, in the order its commands came. So the entries, IDs and
replies are those of running the commands one by one within one millisecond.

Invariant: between taking an entry and applying it nothing writes to its stream
(anything that would settles first), so what `can_hold` checked when the entry was
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
    from narad.commands.table import Command
    from narad.server import Client, Server
    from narad.store import Store

FIELDS_FROM = 3  # a held-back argv's entry fields are argv[FIELDS_FROM:]

# A run handed in: the client, its command, where its argvs start, how many there are.
Taker = tuple["Client", "Command", int, int]


def can_hold(store: Store, stream: Stream) -> bool:
    """Whether entries for `stream` may be held back: it has no schema (each entry
    is validated alone), its log has not failed and its IDs are not near their end
    (the general handlers report those)."""
    return (
        stream.uid not in store.validators
        and stream.data.failure is None
        and stream.last_id >> 64 != ids.U64_MAX
    )


def defer_entries(client: Client, cmd: Command, stream: Stream, argvs: list[list[bytes]]) -> None:
    """Hold back one entry per argv of `argvs` (its fields argv[FIELDS_FROM:]) for
    `stream` (`can_hold`), with what other clients hold back for it; what is held
    back for another stream is settled first. The caller has counted the commands
    and registered the client for sending (`Server._run`)."""
    server = client.server
    deferred = server.deferred
    if deferred is None or deferred.stream is not stream:
        server.settle()
        deferred = server.deferred = DeferredAdds(server, stream)
    deferred.takers.append((client, cmd, len(deferred.argvs), len(argvs)))
    deferred.argvs += argvs


class DeferredAdds:
    """The entries held back for one stream, and who takes their IDs."""

    __slots__ = ("argvs", "server", "stream", "takers")

    def __init__(self, server: Server, stream: Stream) -> None:
        self.server = server
        self.stream = stream
        self.argvs: list[list[bytes]] = []
        self.takers: list[Taker] = []

    def apply(self) -> None:
        start = time.perf_counter_ns()
        added = True
        try:
            self._add(self.argvs, self.takers)
        except ValueError:  # a record over the log's limit: nothing was added
            added = self._apply_one_by_one()
        except LogFailed as exc:
            added = False
            for taker in self.takers:
                _refuse(taker, CommandError(str(exc), "IOERR"))
        except Exception as exc:  # a bug: each taker gets an error reply, as in Server.call
            added = False
            error = self.server.unexpected(exc, self.takers[0][1].name, "adding the held-back")
            for taker in self.takers:
                _refuse(taker, error)
        if added:
            self.server.key_written(self.stream.db, self.stream.key)
        usec = (time.perf_counter_ns() - start) // 1000
        total = len(self.argvs)
        for _, cmd, _, count in self.takers:
            cmd.usec += usec * count // total

    def _add(self, argvs: list[list[bytes]], takers: list[Taker]) -> None:
        """Add `argvs` with IDs from one clock reading, then reply to `takers`.
        Raises as `Stream.add_run` does: ValueError with nothing added."""
        stream = self.stream
        ms = time.time_ns() // 1_000_000
        sid = ids.next_auto(stream.last_id, ms)
        assert sid is not None  # can_hold: the IDs are not near their end
        stream.add_run(sid, argvs, FIELDS_FROM, ms)
        for client, _, _, count in takers:
            client.reply_ids(sid >> 64, sid & ids.SEQ_MASK, count)
            sid += count

    def _apply_one_by_one(self) -> bool:
        """When the joint add was refused: each entry alone, as its command would
        have been, so that only the entries at fault get the error. Whether any
        was added."""
        added = False
        for client, cmd, begin, count in self.takers:
            for argv in self.argvs[begin : begin + count]:
                one: Taker = (client, cmd, 0, 1)
                try:
                    self._add([argv], [one])
                except ValueError as exc:
                    _refuse(one, CommandError(str(exc)))
                except LogFailed as exc:
                    _refuse(one, CommandError(str(exc), "IOERR"))
                else:
                    added = True
        return added


def _refuse(taker: Taker, error: CommandError) -> None:
    client, cmd, _, count = taker
    cmd.failed += count
    for _ in range(count):
        client.reply_error(error)
