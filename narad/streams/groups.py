"""Consumer groups: each group's cursor, pending entries list (PEL) and consumers, as
a state machine over the stream's state log (docs/design.md, "Consumer state is a log
too").

Rules:

- Every change is one op made by `Stream.log_op`, which applies it with the
  handler registered here and appends it to the state log (committed with the next
  group commit, like the reply that reports it); recovery replays the same handlers, so memory is
  exactly what the state log says. A handler reads only its op and the group state:
  no clock, no stream entries. Whatever a command decided from the stream (which
  entries exist, the new read counter, the time it used) travels in the op.
- One op per command call and stream, however many entries it touches; a call that
  changes nothing writes nothing.
- Only the interesting state is kept: each group's cursor (`last_id`,
  `entries_read`), its pending entries and its consumers. An acked entry is removed
  from the PEL and from its consumer and leaves nothing behind.
- IDs inside ops and snapshots are 16-byte big-endian strings (msgpack ints stop at
  64 bits); a list of IDs is their concatenation ("blob").
- Semantics are Redis 7.0's (src/t_stream.c), including its read counter and lag
  estimates and what XCLAIM / XAUTOCLAIM do with entries deleted from the stream.

Ops (fields after the name; names are bytes, times are Unix ms):

    gcreate       group, last_id, entries_read|None
    gdestroy      group
    gsetid        group, last_id, entries_read|None
    gconsumer     group, consumer, now                      (XGROUP CREATECONSUMER)
    gdelconsumer  group, consumer                           (drops its pending entries)
    gdeliver      group, consumer, now, last_id, entries_read|None, ids
                  new entries delivered by XREADGROUP `>`: each ID becomes pending for
                  the consumer with delivery time `now` and count 1 (NOACK: no IDs,
                  only the cursor moves); creates the consumer if needed
    ghistory      group, consumer, now, ids
                  XREADGROUP with an explicit ID re-delivered these pending entries:
                  delivery time `now`, count + 1 (entries no longer in the stream are
                  answered but not counted, as in Redis 7.0)
    gack          group, ids                                 (each was pending)
    gclaim        group, consumer, now, delivery_ms, retry_count|None, increment,
                  claimed ids, deleted ids, last_id|None
                  XCLAIM / XAUTOCLAIM: deleted IDs leave the PEL (their entries are
                  gone from the stream); claimed IDs (repeats allowed, applied in
                  order) move to the consumer, created if absent, with `delivery_ms`
                  and a count set to `retry_count`, or + 1 if `increment`; a claimed
                  ID not pending is created with count 1 first (FORCE); `last_id`
                  raises the cursor (LASTID)

    greadclaim    group, consumer, now, claimed ids, last_id, entries_read|None, ids
                  XREADGROUP `>` with CLAIM: the claimed IDs (pending, idle long
                  enough) move to the consumer with delivery time `now` and count
                  + 1; then the new IDs are delivered as by gdeliver

    gnack         group, ids, delivery counts
                  XNACK: each ID (pending, or created if not: FORCE) becomes pending
                  for nobody with delivery time 0 and the count given, at the end
                  of the group's nack zone (narad/streams/pel.py's Group)

Every op that names a consumer sets its seen time to the op's `now`, except
gdelconsumer. Must never: read the clock in a handler, do I/O other than through
`Stream`. Owned by the event loop thread, as the Stream is.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

from narad.log import decode_fields
from narad.streams import ids
from narad.streams.ids import pack_id, unpack_id
from narad.streams.machines import Machine, op_table
from narad.streams.pel import Group, PendingEntry
from narad.streams.stream import Entry

if TYPE_CHECKING:
    from narad.streams.stream import Stream


# How many of a read's entries, (ID, bytes of its fields and values) in reply order,
# the reply takes (narad/commands/streams.py's ReadBudget.fit).
Fit = Callable[[list[tuple[int, int]]], int]


def payload_size(payload: bytes) -> int:
    """The bytes of the fields and values of an entry payload as stored
    (narad/log/format.py's encode_fields: a count, then each string's size and bytes)."""
    return len(payload) - 4 - 4 * int.from_bytes(payload[:4], "little")


# The largest delivery count (XNACK FATAL's); counting on from it stays there.
INT64_MAX = (1 << 63) - 1


def now_ms() -> int:
    """The wall clock in Unix ms: the one clock of consumer groups (tests patch it)."""
    return time.time_ns() // 1_000_000


def _pack_opt(sid: int | None) -> bytes | None:
    return None if sid is None else pack_id(sid)


def _unpack_opt(raw: bytes | None) -> int | None:
    return None if raw is None else unpack_id(raw)


def _group(stream: Stream, name: bytes) -> Group:
    group = stream.groups.get(name)
    assert group is not None, f"op on unknown group {name!r}"
    return group


# -- op handlers ---------------------------------------------------------------------------

_OPS, _op = op_table()


@_op("gcreate")
def _apply_create(stream: Stream, op: list[Any]) -> None:
    _, name, last_id, entries_read = op
    assert name not in stream.groups
    stream.groups[name] = Group(name, unpack_id(last_id), entries_read)


@_op("gdestroy")
def _apply_destroy(stream: Stream, op: list[Any]) -> None:
    del stream.groups[op[1]]


@_op("gsetid")
def _apply_setid(stream: Stream, op: list[Any]) -> None:
    _, name, last_id, entries_read = op
    group = _group(stream, name)
    group.last_id = unpack_id(last_id)
    group.entries_read = entries_read


@_op("gconsumer")
def _apply_consumer(stream: Stream, op: list[Any]) -> None:
    _, name, consumer, now = op
    _group(stream, name)._touch_consumer(consumer, now)


@_op("gdelconsumer")
def _apply_delconsumer(stream: Stream, op: list[Any]) -> None:
    group = _group(stream, op[1])
    consumer = group.consumers.pop(op[2])
    for sid in consumer.pending:
        del group.pel[sid]


@_op("gdeliver")
def _apply_deliver(stream: Stream, op: list[Any]) -> None:
    _, name, consumer_name, now, last_id, entries_read, blob = op
    group = _group(stream, name)
    consumer = group._touch_consumer(consumer_name, now)
    group.last_id = unpack_id(last_id)
    group.entries_read = entries_read
    group._give_new(ids.unpack_all(blob), consumer, now)


@_op("ghistory")
def _apply_history(stream: Stream, op: list[Any]) -> None:
    _, name, consumer_name, now, blob = op
    group = _group(stream, name)
    group._touch_consumer(consumer_name, now)
    for sid in ids.unpack_all(blob):
        entry: PendingEntry = group.pel[sid]
        entry.delivery_ms = now
        entry.delivery_count += 1


@_op("greadclaim")
def _apply_read_claim(stream: Stream, op: list[Any]) -> None:
    _, name, consumer_name, now, claimed, last_id, entries_read, blob = op
    group = _group(stream, name)
    consumer = group._touch_consumer(consumer_name, now)
    for sid in ids.unpack_all(claimed):
        entry = group._give(sid, consumer, now)
        entry.delivery_count = min(entry.delivery_count + 1, INT64_MAX)
    group.last_id = unpack_id(last_id)
    group.entries_read = entries_read
    group._give_new(ids.unpack_all(blob), consumer, now)


@_op("gnack")
def _apply_nack(stream: Stream, op: list[Any]) -> None:
    _, name, blob, counts = op
    group = _group(stream, name)
    for sid, count in zip(ids.unpack_all(blob), counts, strict=True):
        group._nack(sid, count)


@_op("gack")
def _apply_ack(stream: Stream, op: list[Any]) -> None:
    _group(stream, op[1])._drop_all(ids.unpack_all(op[2]))


@_op("gclaim")
def _apply_claim(stream: Stream, op: list[Any]) -> None:
    _, name, consumer_name, now, delivery_ms, retry_count, increment, claimed, deleted, last = op
    group = _group(stream, name)
    last_id = _unpack_opt(last)
    if last_id is not None and last_id > group.last_id:
        group.last_id = last_id
    for sid in ids.unpack_all(deleted):
        group._drop(sid)
    sids = ids.unpack_all(claimed)
    if not sids:
        return
    consumer = group._touch_consumer(consumer_name, now)
    for sid in sids:
        entry = group._give(sid, consumer, delivery_ms)
        if retry_count is not None:
            entry.delivery_count = retry_count
        elif increment:
            entry.delivery_count = min(entry.delivery_count + 1, INT64_MAX)


# -- the stream's counters: read counter and lag as Redis 7.0 estimates them ---------------


class Counters(NamedTuple):
    """What the read-counter rules need from a stream, taken once per command."""

    length: int
    entries_added: int
    last_id: int
    max_deleted_id: int
    first_id: int  # ID of the first live entry; 0 when empty

    @classmethod
    def of(cls, stream: Stream) -> Counters:
        first = stream.first_entry() if stream.length else None
        return cls(
            stream.length,
            stream.entries_added,
            stream.last_id,
            stream.max_deleted_id,
            first[0] if first is not None else 0,
        )

    def has_tombstones(self, start: int, end: int = ids.ID_MAX) -> bool:
        """Whether an XDELed entry may lie in [start, end] (Redis's
        streamRangeHasTombstones: only the newest deletion is remembered)."""
        if not self.length or not self.max_deleted_id:
            return False
        if self.first_id > self.max_deleted_id:
            return False
        return start <= self.max_deleted_id <= end

    def estimate_read(self, sid: int) -> int | None:
        """The read counter of an entry at `sid`, when it can be known without
        counting (Redis's streamEstimateDistanceFromFirstEverEntry); None otherwise."""
        if not self.entries_added:
            return 0
        if not self.length and sid <= self.last_id:
            return self.entries_added
        if sid == self.last_id:
            return self.entries_added
        if sid > self.last_id:
            return None
        if not self.max_deleted_id or self.max_deleted_id < self.first_id:
            if sid < self.first_id:
                return self.entries_added - self.length
            if sid == self.first_id:
                return self.entries_added - self.length + 1
        return None

    def lag(self, group: Group) -> int | None:
        """Entries not yet read by the group, or None when it cannot be told."""
        if not self.entries_added:
            return 0
        if group.entries_read is not None and not self.has_tombstones(group.last_id):
            return self.entries_added - group.entries_read
        read = self.estimate_read(group.last_id)
        return None if read is None else self.entries_added - read

    def advance(self, entries_read: int | None, sid: int) -> int | None:
        """The read counter after delivering `sid` (above the cursor) with `>`."""
        if entries_read is not None and not self.has_tombstones(sid):
            return entries_read + 1
        if self.entries_added:
            return self.estimate_read(sid)
        return entries_read


# -- changes: each builds one op and commits it ----------------------------------------------


def create_group(stream: Stream, name: bytes, last_id: int, entries_read: int | None) -> bool:
    """XGROUP CREATE; False if the group exists."""
    if name in stream.groups:
        return False
    stream.log_op(["gcreate", name, pack_id(last_id), entries_read])
    return True


def destroy_group(stream: Stream, name: bytes) -> bool:
    if name not in stream.groups:
        return False
    stream.log_op(["gdestroy", name])
    return True


def set_group_id(stream: Stream, group: Group, last_id: int, entries_read: int | None) -> None:
    stream.log_op(["gsetid", group.name, pack_id(last_id), entries_read])


def create_consumer(stream: Stream, group: Group, name: bytes, now: int) -> bool:
    if name in group.consumers:
        return False
    stream.log_op(["gconsumer", group.name, name, now])
    return True


def delete_consumer(stream: Stream, group: Group, name: bytes) -> int:
    """XGROUP DELCONSUMER: how many entries it had pending (now dropped)."""
    consumer = group.consumers.get(name)
    if consumer is None:
        return 0
    pending = len(consumer.pending)
    stream.log_op(["gdelconsumer", group.name, name])
    return pending


def read_new(
    stream: Stream, group: Group, consumer: bytes, count: int, noack: bool, now: int
) -> list[Entry]:
    """XREADGROUP `>`: up to `count` (0: all) entries after the cursor, delivered to
    `consumer` (pending unless `noack`); the cursor and read counter follow."""
    found = read_new_raw(stream, group, consumer, count, noack, now)
    return [(sid, decode_fields(payload)) for sid, payload in found]


def read_new_raw(
    stream: Stream,
    group: Group,
    consumer: bytes,
    count: int,
    noack: bool,
    now: int,
    fit: Fit | None = None,
) -> list[tuple[int, bytes]]:
    """`read_new` with the entries' payloads as stored (Stream.range_raw). `fit`, when
    given, says how many of the entries found the reply takes: only those are
    delivered (XREADGROUP's MAXSIZE)."""
    found: list[tuple[int, bytes]] = []
    if group.last_id != ids.ID_MAX:
        found = stream.range_raw(group.last_id + 1, ids.ID_MAX, count)
    if fit is not None:
        found = found[: fit([(sid, payload_size(payload)) for sid, payload in found])]
    sids = [sid for sid, _ in found]
    last_id, entries_read = _cursor_after(stream, group, sids)
    delivered = b"" if noack else ids.pack_all(sids)
    stream.log_op(
        ["gdeliver", group.name, consumer, now, pack_id(last_id), entries_read, delivered]
    )
    return found


def _cursor_after(stream: Stream, group: Group, sids: list[int]) -> tuple[int, int | None]:
    """The group's cursor and read counter after delivering `sids` (increasing, after
    the cursor) with `>`."""
    last_id, entries_read = group.last_id, group.entries_read
    if sids:
        deleted = stream.max_deleted_id
        if entries_read is not None and (not deleted or sids[0] > deleted):
            # No tombstone can lie at or after the first (Counters.has_tombstones is
            # False for each): `advance` would add one per entry.
            entries_read += len(sids)
        else:
            counters = Counters.of(stream)
            for sid in sids:
                entries_read = counters.advance(entries_read, sid)
        last_id = sids[-1]
    return last_id, entries_read


class ClaimedRead(NamedTuple):
    """One entry of an XREADGROUP ... CLAIM reply: a claimed entry's idle time and
    delivery count are those it had before this read; a new entry's are 0, 0."""

    sid: int
    fields: list[bytes]
    idle_ms: int
    delivery_count: int


def claimable(group: Group, min_idle_ms: int, now: int) -> list[int]:
    """The group's pending IDs a claim with `min_idle_ms` may take: the nacked ones
    first (in the order they were nacked, whatever their idle time), then those
    idle at least that long, most idle first (then in ID order)."""
    nacked = group.nacked
    found = [
        (entry.delivery_ms, sid)
        for sid, entry in group.pel.items()
        if now - entry.delivery_ms >= min_idle_ms and sid not in nacked
    ]
    found.sort()
    return [*nacked, *(sid for _, sid in found)]


NACK_MODES = ("silent", "fail", "fatal")


def nack(
    stream: Stream,
    group: Group,
    sids: list[int],
    mode: str,
    retry_count: int | None,
    force: bool,
) -> int:
    """XNACK: release each of `sids` pending in `group` to nobody, its delivery count
    one less (SILENT), the same (FAIL), INT64_MAX (FATAL) or `retry_count`; with
    `force`, an ID not pending whose entry is in the stream becomes pending so, its
    count 0 (INT64_MAX for FATAL, or `retry_count`). How many were released."""
    released: dict[int, int] = {}
    for sid in sids:
        entry = group.pel.get(sid)
        if entry is not None:
            count = released.get(sid, entry.delivery_count)
            if mode == "silent":
                count = max(count - 1, 0)
            elif mode == "fatal":
                count = INT64_MAX
        elif force and (sid in released or stream.offset_of(sid) is not None):
            count = INT64_MAX if mode == "fatal" else 0
        else:
            continue
        released[sid] = count if retry_count is None else retry_count
    if released:
        stream.log_op(["gnack", group.name, ids.pack_all(list(released)), list(released.values())])
    return len(released)


def next_claimable_ms(group: Group, min_idle_ms: int, now: int) -> int | None:
    """When the next pending entry not claimable yet becomes so with `min_idle_ms`
    (Unix ms, after `now`); None when there is none."""
    due = [
        entry.delivery_ms + min_idle_ms
        for entry in group.pel.values()
        if entry.delivery_ms + min_idle_ms > now
    ]
    return min(due) if due else None


def read_claiming(
    stream: Stream,
    group: Group,
    consumer: bytes,
    min_idle_ms: int,
    count: int,
    noack: bool,
    now: int,
    fit: Fit | None = None,
) -> list[ClaimedRead]:
    """XREADGROUP `>` with CLAIM: first the pending entries idle at least
    `min_idle_ms` (any owner, most idle first; entries no longer in the stream are
    passed over), claimed by `consumer`; then new entries, as `read_new` delivers
    them; at most `count` (0: all) in all, and as many as `fit` takes. NOACK applies
    to the new entries only. One op; none when there is nothing to answer."""
    out: list[ClaimedRead] = []
    pel = group.pel
    for sid in claimable(group, min_idle_ms, now):
        if count and len(out) == count:
            break
        entry = stream.entry(sid)
        if entry is None:
            continue
        pending = pel[sid]
        idle = -1 if sid in group.nacked else now - pending.delivery_ms
        out.append(ClaimedRead(sid, entry[1], idle, pending.delivery_count))
    claimed = len(out)
    if (not count or claimed < count) and group.last_id != ids.ID_MAX:
        left = count - claimed if count else 0
        found = stream.range(group.last_id + 1, ids.ID_MAX, left)
        out += [ClaimedRead(sid, fields, 0, 0) for sid, fields in found]
    if fit is not None:
        out = out[: fit([(e.sid, sum(map(len, e.fields))) for e in out])]
    if not out:
        return out
    claimed = min(claimed, len(out))
    new = [e.sid for e in out[claimed:]]
    last_id, entries_read = _cursor_after(stream, group, new)
    stream.log_op(
        [
            "greadclaim",
            group.name,
            consumer,
            now,
            ids.pack_all([e.sid for e in out[:claimed]]),
            pack_id(last_id),
            entries_read,
            b"" if noack else ids.pack_all(new),
        ]
    )
    return out


def read_history(
    stream: Stream,
    group: Group,
    consumer: bytes,
    after: int,
    count: int,
    now: int,
    fit: Fit | None = None,
) -> list[tuple[int, list[bytes] | None]]:
    """XREADGROUP with an ID: the consumer's pending entries above `after`, at most
    `count` (0: all); fields are None for an entry no longer in the stream. Entries
    still there count as delivered again. `fit` as for `read_new_raw`."""
    owner = group.consumers.get(consumer)
    sids = [] if owner is None else group.first_owned(owner, count, after + 1)
    out: list[tuple[int, list[bytes] | None]] = []
    for sid in sids:
        entry = stream.entry(sid)
        out.append((sid, None if entry is None else entry[1]))
    if fit is not None:
        out = out[: fit([(sid, sum(map(len, f)) if f else 0) for sid, f in out])]
    again = [sid for sid, fields in out if fields is not None]
    stream.log_op(["ghistory", group.name, consumer, now, ids.pack_all(again)])
    return out


def ack(stream: Stream, group: Group, sids: list[int]) -> int:
    """XACK: how many of `sids` were pending (now acked)."""
    acked = group.pel.pending_of(sids)
    if acked:
        stream.log_op(["gack", group.name, ids.pack_all(acked)])
    return len(acked)


@dataclass
class ClaimOptions:
    """XCLAIM's options, resolved against the clock by the command."""

    min_idle_ms: int = 0
    delivery_ms: int = 0  # the claimed entries' new delivery time
    retry_count: int | None = None  # set the delivery count (None: + 1 unless justid)
    force: bool = False
    justid: bool = False
    last_id: int | None = None


def claim(
    stream: Stream, group: Group, consumer: bytes, sids: list[int], opts: ClaimOptions, now: int
) -> tuple[list[int], list[int]]:
    """XCLAIM: the IDs claimed by `consumer`, in argument order (repeats included),
    and the pending IDs dropped because their entries are no longer in the stream."""
    claimed: list[int] = []
    deleted: list[int] = []
    seen: dict[int, int] = {}  # ID -> its delivery time after an earlier claim
    for sid in sids:
        entry: PendingEntry | None = group.pel.get(sid)
        pending = sid in seen or (entry is not None and sid not in deleted)
        if stream.offset_of(sid) is None:
            if pending and sid not in deleted:
                deleted.append(sid)
            continue
        if not pending and not opts.force:
            continue
        delivered = seen.get(sid, entry.delivery_ms if entry else None)
        if (
            delivered is not None
            and opts.min_idle_ms
            and now - delivered < opts.min_idle_ms
            and (sid in seen or sid not in group.nacked)  # nacked: claimable at once
        ):
            continue
        claimed.append(sid)
        seen[sid] = opts.delivery_ms
    moves_cursor = opts.last_id is not None and opts.last_id > group.last_id
    if claimed or deleted or moves_cursor:
        _commit_claim(stream, group, consumer, now, opts, claimed, deleted)
    return claimed, deleted


def _commit_claim(
    stream: Stream,
    group: Group,
    consumer: bytes,
    now: int,
    opts: ClaimOptions,
    claimed: list[int],
    deleted: list[int],
) -> None:
    stream.log_op(
        [
            "gclaim",
            group.name,
            consumer,
            now,
            opts.delivery_ms,
            opts.retry_count,
            not opts.justid,
            ids.pack_all(claimed),
            ids.pack_all(deleted),
            _pack_opt(opts.last_id),
        ]
    )


def autoclaim(
    stream: Stream,
    group: Group,
    consumer: bytes,
    min_idle_ms: int,
    start: int,
    count: int,
    justid: bool,
    now: int,
) -> tuple[int, list[int], list[int]]:
    """XAUTOCLAIM: walk the PEL from `start`, claiming entries idle for at least
    `min_idle_ms`, until `count` are claimed or dropped (entries gone from the stream
    are dropped) or 10 * `count` were looked at. Returns (next cursor or 0, claimed
    IDs, dropped IDs)."""
    walk = iter(group.pel.irange(minimum=start))
    claimed: list[int] = []
    deleted: list[int] = []
    attempts = count * 10
    while attempts and count:
        attempts -= 1
        sid = next(walk, None)
        if sid is None:
            break
        if stream.offset_of(sid) is None:
            deleted.append(sid)
            count -= 1
            continue
        if (
            min_idle_ms
            and now - group.pel[sid].delivery_ms < min_idle_ms
            and sid not in group.nacked
        ):
            continue
        claimed.append(sid)
        count -= 1
    cursor = next(walk, None) or 0
    if claimed or deleted:
        opts = ClaimOptions(delivery_ms=now, justid=justid)
        _commit_claim(stream, group, consumer, now, opts, claimed, deleted)
    return cursor, claimed, deleted


# -- the machine -----------------------------------------------------------------------


def _snapshot(stream: Stream) -> list[Any]:
    return [group.snapshot() for group in stream.groups.values()]


def _restore(stream: Stream, raw: list[Any] | None) -> None:
    stream.groups = {}
    for part in raw or ():
        group = Group.from_snapshot(part)
        stream.groups[group.name] = group


GROUPS_MACHINE = Machine("groups", _OPS, snapshot=_snapshot, restore=_restore)
