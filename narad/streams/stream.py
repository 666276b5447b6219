"""One Redis stream on two logs: entries in its data log, every other change in its
state log.

- The data log holds only entries (flag FLAG_ENTRY), one record per XADD, so offsets
  count entries: the stream's length is `data.next_offset - start - len(deleted)`.
- The state log holds *ops*: small msgpack lists such as ["trim", offset] or a consumer
  group's deliveries and acks. Every change other than XADD is made by `log_op`,
  which applies the op to memory with the same `apply` that recovery replays, then
  appends it; so what is in memory is exactly what the logs say. The ops are those of
  the state machines registered with the stream (narad/streams/machines.py): its own,
  declared here, and its consumer groups' and queue's, which the stream only holds
  (`groups`, `queue`: the slots those machines fill).
- A snapshot op, written when the state log grows past `STATE_COMPACT_BYTES`, holds
  the whole state; the segments before it are then dropped. Recovery replays from the
  first record still in the state log, so restart time stays flat.
- Replaying never raises, so a node always starts on its own data: the first op that
  cannot be applied (a record that is not an op, an unknown op, a wrong shape, an op
  its handler refuses) becomes the stream's `fault` and ends the replay there, since
  later ops may depend on it. The state is then unknown; the keyspace keeps the stream
  out of reach (narad/keyspace.py) and nothing writes to it until it is deleted or
  `narad check --repair` truncates the state log at that op (narad/repair.py's
  `repair_states`).

In memory a stream keeps only its counters, the offsets of deleted entries still in
range, and its consumer groups; payloads stay on disk.

Owned by the event loop thread.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import msgpack

from narad.log import FLAG_ENTRY, Log, LogConfig, decode_fields, encode_fields
from narad.schema.keyspace import Fault
from narad.streams import ids
from narad.streams.ids import pack_id, unpack_id
from narad.streams.machines import Machine, Machines, op_table

if TYPE_CHECKING:
    from narad.streams.pel import Group

logger = logging.getLogger("narad.streams")

# The state log is compacted (snapshot + drop older segments) beyond this size.
STATE_COMPACT_BYTES = 16 * 1024 * 1024
READ_BATCH = 256


class RangeGone(Exception):
    """Records a range read as they were (`Stream.range_parts`) left the log first."""


Entry = tuple[int, list[bytes]]  # (entry ID, flat field/value list)

# One packer for every op, reused (a fresh one per op costs about three times as
# much); snapshots, which may be large, use their own so that its buffer is freed.
_pack_op = msgpack.Packer(use_bin_type=True).pack

_OPS, _op = op_table()  # the stream's own ops (the machine is STREAM_MACHINE, below)


class Committer(Protocol):
    """What a stream asks of the commit path (narad/log/journal.py's Journal)."""

    def note(self, log: Log) -> None: ...

    def move_start(self, log: Log, offset: int) -> None: ...


@dataclass(frozen=True)
class StateFault(Fault):
    """A state log op that replay could not apply: the stream is unavailable."""

    log: str  # the state log's folder relative to the data dir: streams/<uid>/state

    def describe(self) -> str:
        return f"its state op at {self.log} offset {self.offset} cannot be applied: {self.what}"

    def remedy(self) -> str:
        return "delete the key"


def state_log_name(uid: int) -> str:
    """Where stream `uid`'s state log lives, relative to the data dir (keyspace.py)."""
    return f"streams/{uid}/state"


def log_records(log: Log) -> Iterator[tuple[int, bytes]]:
    """(offset, payload) of every record of `log` from its logical start."""
    offset = log.start_offset
    while batch := log.read(offset, count_max=4096):
        for rec in batch:
            yield rec.offset, rec.payload
        offset = batch[-1].offset + 1


class Stream:
    def __init__(
        self,
        uid: int,
        folder: Path,
        data_config: LogConfig,
        state_config: LogConfig,
        journal: Committer,
        machines: Machines,
    ) -> None:
        """Open the stream's logs; its state is read from them by `load` (after the
        journal's recovery has given them what they lack: narad/keyspace.py), through
        the ops of `machines`."""
        self.uid = uid
        self.folder = folder
        self.journal = journal
        self.machines = machines
        self._handlers = machines.handlers
        self._note = journal.note  # tells the next commit that a log has new records
        self.data = Log.open(folder / "data", data_config)
        try:
            self.state = Log.open(folder / "state", state_config)
        except BaseException:
            self.data.close()
            raise
        self._init_state()

    def load(self) -> None:
        """Build the in-memory state from the state log (once, after opening)."""
        self._replay()

    def _init_state(self) -> None:
        self.start = self.data.start_offset  # logical first offset
        self.deleted: set[int] = set()  # offsets of XDELed entries at or after `start`
        self.top_id = 0  # last ID set by XSETID (the stream's last ID is the max)
        self.entries_added_bias = 0  # entries-added minus data entries ever appended
        self.max_deleted_id = 0
        self.groups: dict[bytes, Group] = {}
        # Set when the stream is a queue: its narad/queues/queue.py Queue, which refers
        # back to its stream (typed `Any` here, as this module sits below it).
        self.queue: Any = None
        self.db = 0  # where the keyspace holds it, kept by the keyspace
        self.key = b""
        self.node_entries = 100  # stream-node-max-entries, for `~` trimming
        self.last_id = 0  # the stream's last ID: its last entry's, or XSETID's if higher
        # (ID, offset): the records with an ID above that ID start at that offset, as
        # the last range read saw; the next read from just above it (a consumer group
        # following the stream) skips the index search. IDs only grow with offsets and
        # the data log is never truncated under a live stream, so it stays true.
        self._after_hint = (-1, 0)
        self.fault: StateFault | None = None  # the op replay could not apply, if any

    # -- counters -----------------------------------------------------------------------

    @property
    def length(self) -> int:
        return self.data.next_offset - self.start - len(self.deleted)

    @property
    def added_id(self) -> int:
        """The ID of the last entry ever added to the data log, deleted or trimmed
        since or not (0 for none). IDs only grow with offsets in the data log, so the
        stream's last ID never goes below it."""
        return ids.make(*self.data.last_id)

    def _note_last_id(self) -> None:
        self.last_id = max(self.top_id, self.added_id)

    @property
    def entries_added(self) -> int:
        return self.data.next_offset + self.entries_added_bias

    # -- ops: the only way state other than entries changes ------------------------------

    def log_op(self, op: list[Any]) -> None:
        """Apply `op` to memory and append it to the state log (committed with the
        next group commit)."""
        self.apply(op)
        self.state.append(_pack_op(op))
        self._note(self.state)

    def apply(self, op: list[Any]) -> None:
        self._handlers[op[0]](self, op)

    def follow(self, records: Iterable[tuple[int, bytes]]) -> None:
        """The leader's state records (offset, payload), appended to the state log by
        the caller, applied as replay applies them; one that cannot be applied makes
        the stream faulted, as at replay (narad/replication/apply.py)."""
        for offset, payload in records:
            if self.fault is not None or not self._apply_record(offset, payload):
                return

    def followed_entries(self) -> None:
        """The data log took the leader's entries (narad/replication/apply.py)."""
        self._note_last_id()

    def _replay(self) -> None:
        count = self.replay(log_records(self.state))
        if count and self.fault is None:
            logger.debug("stream %d: replayed %d state records", self.uid, count)

    def replay(self, records: Iterable[tuple[int, bytes]]) -> int:
        """Apply (offset, payload) state records, oldest first, up to the first that
        cannot be applied, which becomes `fault`, then make the state forget what the
        data log lost (`_forget_lost_tail`); how many were applied. An op may apply yet
        leave values that make that raise (a `snap` whose start is not an int): that too is a
        fault, at the last applied op's offset, since no later op is to blame."""
        count, last = 0, 0
        for offset, payload in records:
            if not self._apply_record(offset, payload):
                return count
            count, last = count + 1, offset
        try:
            self._forget_lost_tail()
        except Exception as error:
            self._set_fault(last, "settling the replayed state on the data log: ", error)
        return count

    def _apply_record(self, offset: int, payload: bytes) -> bool:
        """Apply one state record; False, with `fault` set, when it cannot be."""
        stage = "the record is not msgpack: "  # what the fault's reason starts with
        try:
            op = msgpack.unpackb(payload, raw=False, strict_map_key=False)
            stage = ""
            if not (isinstance(op, list) and op and isinstance(op[0], str)):
                raise ValueError("the record is not an op (a list that starts with its name)")
            handler = self._handlers.get(op[0])
            if handler is None:
                raise ValueError(self.machines.unknown(op[0]))
            stage = f"{op[0]} op: "
            handler(self, op)
        except Exception as error:
            self._set_fault(offset, stage, error)
            return False
        return True

    def _set_fault(self, offset: int, stage: str, error: Exception) -> None:
        what = stage + (" ".join(str(error).split()) or type(error).__name__)
        self.fault = StateFault(offset, self.uid, what[:300], state_log_name(self.uid))

    def _forget_lost_tail(self) -> None:
        """After replay: the data log may have lost an unacknowledged tail the state
        already saw; the state forgets it."""
        end = self.data.next_offset
        self.start = min(max(self.start, self.data.start_offset), end)
        self.deleted = {o for o in self.deleted if self.start <= o < end}
        self._note_last_id()
        for machine in self.machines.machines:
            if machine.forget_lost_tail is not None:
                machine.forget_lost_tail(self)

    def snapshot_op(self) -> list[Any]:
        return [
            "snap",
            self.start,
            sorted(self.deleted),
            pack_id(self.top_id),
            self.entries_added_bias,
            pack_id(self.max_deleted_id),
            *(m.snapshot(self) for m in self.machines.snapshotting),  # type: ignore[misc]
        ]

    def compact_if_due(self) -> bool:
        """Snapshot the state into a fresh segment; the logs' starts move past what it
        makes unneeded (the older state segments, the data before the stream's start),
        and the checkpoint after its commit deletes those segments."""
        state = self.state
        if state.size_bytes < STATE_COMPACT_BYTES:
            return False
        state.roll()
        first = state.next_offset
        state.append(msgpack.packb(self.snapshot_op(), use_bin_type=True))
        self._note(state)
        self.journal.move_start(state, first)
        self.journal.move_start(self.data, self.start)
        return True

    # -- entries ------------------------------------------------------------------------

    def add(self, sid: int, fields: list[bytes]) -> int:
        """Append an entry (ID already validated as above the last ID); its offset."""
        data = self.data
        offset = data.append(encode_fields(fields), sid >> 64, sid & ids.SEQ_MASK, FLAG_ENTRY)
        self._note(data)
        self.last_id = sid
        return offset

    def add_auto(
        self, entries: Sequence[Sequence[bytes]], first: int = 0, now_ms: int | None = None
    ) -> int:
        """Append one entry per item of `entries` (its fields from index `first` on) with
        the IDs `*` gives (`ids.next_auto`: the clock's millisecond, `now_ms` when given,
        with sequence 0 when that is above the last ID, else the last ID + 1), each
        next one + 1; the first entry's ID. The one way Narad appends auto-ID entries
        (XADD, Q.PUSH, held-back adds, the server's own appends). All or none: raises
        IdsExhausted when the last ID leaves no room for them all, and ValueError when
        an entry is over the log's record limit, with nothing added."""
        last = self.last_id
        if last > ids.ID_MAX - len(entries):
            raise ids.IdsExhausted()
        sid = ids.next_auto(last, now_ms)
        assert sid is not None  # room for every entry, checked above
        self.add_run(sid, entries, first, now_ms)
        return sid

    def add_run(
        self, sid: int, argvs: Sequence[Sequence[bytes]], first: int, now_ms: int | None = None
    ) -> None:
        """Append one entry per argv, its fields `argv[first:]`, with IDs counting up
        from `sid` (validated as above the last ID, the last one at most ID_MAX):
        the same as `add` once per argv, in one call to the log. `now_ms`, when given,
        is the clock reading the IDs came from, and becomes the records' timestamp."""
        data = self.data
        data.append_entries(argvs, first, sid >> 64, sid & ids.SEQ_MASK, FLAG_ENTRY, now_ms)
        self._note(data)
        self.last_id = sid + len(argvs) - 1

    def range(self, low: int, high: int, count: int = 0) -> list[Entry]:
        """Live entries with low <= ID <= high, oldest first, at most `count` (0: all)."""
        return [(sid, decode_fields(payload)) for sid, payload in self.range_raw(low, high, count)]

    def range_raw(self, low: int, high: int, count: int = 0) -> list[tuple[int, bytes]]:
        """`range` with each entry's payload as stored (encode_fields), not decoded."""
        data = self.data
        hint_id, hint_offset = self._after_hint
        if low - 1 == hint_id:
            offset = max(hint_offset, self.start)
        else:
            offset = max(data.offset_of_id(*ids.split(low)), self.start)
        deleted = self.deleted
        out: list[tuple[int, bytes]] = []
        if count:
            # Going on where the last read ended (a group reading new entries): the
            # IDs and payloads straight from the file, up to the segment's end.
            fast = data.read_entries(offset, count, high, deleted)
            if fast is not None:
                out, after, above = fast
                if after is not None:
                    self._after_hint = after
                    offset = after[1]
                if above or len(out) == count:
                    return out
        batch_size = min(count - len(out) + len(deleted), READ_BATCH) if count else READ_BATCH
        while True:
            batch = data.read(offset, count_max=batch_size)
            batch_size = READ_BATCH
            if not batch:
                return out
            for at, _, _, _, id_ms, id_seq, payload, _ in batch:
                sid = id_ms << 64 | id_seq
                if sid > high:
                    return out
                if at not in deleted:
                    out.append((sid, payload))
                    if len(out) == count:
                        self._after_hint = (sid, at + 1)
                        return out
            offset = batch[-1].offset + 1
            self._after_hint = (sid, offset)

    def range_parts(
        self, low: int, high: int, count: int = 0, reverse: bool = False, part: int = 1000
    ) -> tuple[int, Iterator[list[Entry]]]:
        """The live entries with low <= ID <= high (at most `count`; 0: all), oldest
        first, or newest first when `reverse`, as they are at this call: how many, and
        the entries `part` at a time, read as each list is asked for. Entries added,
        deleted or trimmed after the call change nothing of what the lists hold (the
        offsets are fixed now, and the deleted ones among them copied); the iterator
        raises RangeGone if the log no longer holds the records it has to read."""
        data = self.data
        lo = max(data.offset_of_id(*ids.split(low)), self.start)
        hi = min(data.offset_of_id(*ids.split(high), after=True), data.next_offset)
        if hi <= lo:
            return 0, iter(())
        deleted = {o for o in self.deleted if lo <= o < hi}
        total = hi - lo - len(deleted)
        if count:
            total = min(total, count)
        return total, self._parts(lo, hi, deleted, total, reverse, part)

    def _parts(
        self, lo: int, hi: int, deleted: set[int], total: int, reverse: bool, part: int
    ) -> Iterator[list[Entry]]:
        data = self.data
        left = total
        offset = hi - 1 if reverse else lo
        out: list[Entry] = []
        while left:
            read = data.read_reverse if reverse else data.read
            batch = read(offset, count_max=part)
            if not batch or not lo <= batch[0].offset < hi:
                raise RangeGone(f"offsets {lo}..{hi} of {data.path} are no longer held")
            for rec in batch:
                at = rec.offset
                if not lo <= at < hi:
                    break
                if at not in deleted:
                    out.append((ids.make(rec.id_ms, rec.id_seq), decode_fields(rec.payload)))
                    left -= 1
                    if not left:
                        break
            offset = batch[-1].offset + (-1 if reverse else 1)
            if len(out) >= part or not left:  # never an empty part (Streamed)
                yield out
                out = []

    def revrange(self, high: int, low: int, count: int = 0) -> list[Entry]:
        """Live entries with low <= ID <= high, newest first, at most `count` (0: all)."""
        data = self.data
        out: list[Entry] = []
        offset = data.offset_of_id(*ids.split(high), after=True) - 1
        while offset >= self.start:
            batch = data.read_reverse(offset, count_max=READ_BATCH)
            for rec in batch:
                sid = ids.make(rec.id_ms, rec.id_seq)
                if sid < low or rec.offset < self.start:  # a batch may reach past the start
                    return out
                if rec.offset not in self.deleted:
                    out.append((sid, decode_fields(rec.payload)))
                    if len(out) == count:
                        return out
            if not batch:
                break
            offset = batch[-1].offset - 1
        return out

    def offset_of(self, sid: int) -> int | None:
        """The offset of the live entry with ID `sid`, or None."""
        offset = self.data.offset_of_id(*ids.split(sid))
        if offset < self.start or offset in self.deleted or offset >= self.data.written_end:
            return None
        rec = self.data.read(offset, count_max=1)
        if not rec or ids.make(rec[0].id_ms, rec[0].id_seq) != sid:
            return None
        return offset

    def entry(self, sid: int) -> Entry | None:
        offset = self.offset_of(sid)
        if offset is None:
            return None
        rec = self.data.read(offset, count_max=1)[0]
        return sid, decode_fields(rec.payload)

    def first_entry(self) -> Entry | None:
        found = self.range(0, ids.ID_MAX, 1)
        return found[0] if found else None

    def last_entry(self) -> Entry | None:
        found = self.revrange(ids.ID_MAX, 0, 1)
        return found[0] if found else None

    def id_at(self, offset: int) -> int:
        rec = self.data.read(offset, count_max=1)
        return ids.make(rec[0].id_ms, rec[0].id_seq)

    # -- deleting and trimming ------------------------------------------------------------

    def delete(self, sids: list[int]) -> int:
        """XDEL: tombstone the live entries among `sids`; how many were."""
        offsets: list[int] = []
        for sid in sids:
            offset = self.offset_of(sid)
            if offset is not None and offset not in offsets:
                offsets.append(offset)
        if offsets:
            top = max(self.max_deleted_id, *(self.id_at(o) for o in offsets))
            self.log_op(["del", offsets, pack_id(top)])
        return len(offsets)

    def trim(self, maxlen: int | None, minid: int | None, approx: bool, limit: int) -> int:
        """XTRIM / XADD trimming by MAXLEN or MINID; returns entries removed.

        With `approx` only whole nodes go: a node is a block of `node_entries`
        consecutive offsets (the unit Redis's `~` trims by, here aligned on offsets).
        `limit` (0: none) bounds the entries removed.
        """
        pos, removed = self.trim_end(maxlen, minid, approx, limit)
        if pos > self.start:
            self.log_op(["trim", pos])
        return removed

    def trim_end(
        self, maxlen: int | None, minid: int | None, approx: bool, limit: int
    ) -> tuple[int, int]:
        """Where `trim` with these arguments would move the start to, and how many
        live entries that removes; changes nothing."""
        pos, removed = self.start, 0
        end = self.data.next_offset
        length = self.length
        deleted = self.deleted
        while pos < end:
            if maxlen is not None and length <= maxlen:
                break
            node_end = min((pos // self.node_entries + 1) * self.node_entries, end)
            live = node_end - pos - sum(1 for o in deleted if pos <= o < node_end)
            if limit and removed + live > limit:
                break
            if maxlen is not None:
                whole = length - live >= maxlen
            else:
                assert minid is not None
                whole = self.id_at(node_end - 1) < minid
            if whole:
                pos, length, removed = node_end, length - live, removed + live
                continue
            if approx:
                break
            while pos < node_end:
                if maxlen is not None and length <= maxlen:
                    break
                if minid is not None and self.id_at(pos) >= minid:
                    break
                if pos not in deleted:
                    length, removed = length - 1, removed + 1
                pos += 1
            break
        return pos, removed

    def set_id(self, last_id: int, entries_added: int | None, max_deleted: int | None) -> None:
        added = self.entries_added if entries_added is None else entries_added
        top_deleted = self.max_deleted_id if max_deleted is None else max_deleted
        self.log_op(
            ["setid", pack_id(last_id), added - self.data.next_offset, pack_id(top_deleted)]
        )

    def close(self) -> None:
        self.data.close()
        self.state.close()


# -- op handlers for the stream itself --------------------------------------------------


@_op("trim")
def _apply_trim(stream: Stream, op: list[Any]) -> None:
    move_start(stream, op[1])


@_op("del")
def _apply_del(stream: Stream, op: list[Any]) -> None:
    tombstone(stream, op[1], unpack_id(op[2]))


# What the trim and del ops do, for the handlers of other machines' ops that trim or
# delete too (narad/streams/references.py).


def move_start(stream: Stream, start: int) -> None:
    """Entries before offset `start` leave the stream (a trim)."""
    stream.start = max(stream.start, start)
    stream.deleted = {o for o in stream.deleted if o >= stream.start}


def tombstone(stream: Stream, offsets: Iterable[int], max_deleted_id: int) -> None:
    """The entries at `offsets` are deleted (XDEL); the max deleted ID is raised to
    `max_deleted_id`."""
    stream.deleted.update(o for o in offsets if o >= stream.start)
    stream.max_deleted_id = max(stream.max_deleted_id, max_deleted_id)
    # Deleting the head moves the logical start, so the set stays small for queues.
    while stream.start in stream.deleted:
        stream.deleted.remove(stream.start)
        stream.start += 1


@_op("setid")
def _apply_setid(stream: Stream, op: list[Any]) -> None:
    stream.top_id = unpack_id(op[1])
    stream.entries_added_bias = op[2]
    stream.max_deleted_id = unpack_id(op[3])
    stream._note_last_id()


@_op("snap")
def _apply_snapshot(stream: Stream, op: list[Any]) -> None:
    """["snap", start, deleted, top ID, bias, max deleted ID, *machine parts]"""
    _, start, deleted, top, bias, max_deleted = op[:6]
    parts = op[6:]
    stream.start = start
    stream.deleted = set(deleted)
    stream.top_id = unpack_id(top)
    stream.entries_added_bias = bias
    stream.max_deleted_id = unpack_id(max_deleted)
    for i, machine in enumerate(stream.machines.snapshotting):
        assert machine.restore is not None
        machine.restore(stream, parts[i] if i < len(parts) else None)


STREAM_MACHINE = Machine("stream", _OPS)
