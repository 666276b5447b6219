"""A queue: a stream plus the consumer state SQS users expect, kept as a state
machine over ops in the stream's state log (narad/streams/stream.py: `log_op`
applies an op to memory with the same handler recovery replays).

The words are docs/design.md's: a message is *visible* (may be delivered now), *in
flight* (delivered, with a deadline), *delayed* (invisible until due), *acked* (done
for good unless a seek replays it) or *dead-lettered*.

In memory (all of it rebuilt from the state log on open):

- `cursor`: the offset in the data log of the next message never delivered since
  the last seek. Messages from the cursor on are visible unless tracked otherwise.
- `tracked`: offset -> packed int (see `pack`) for the interesting messages only: in
  flight, delayed, or visible again after a delivery (expired or nacked). The boring
  path, delivered then acked, leaves nothing behind.
- `ready`: a heap of tracked offsets that became visible again; `timers`: a heap of
  `due << 40 | offset` for deadlines and delays. Both are lazy: an entry that no
  longer matches `tracked` is skipped when it surfaces.
- `dedup`: producer dedup key -> `id << 44 | expires_ms`.
- `subs`: the sources this queue subscribes to (fan-out), by the source's uid.

Time only enters through arguments (`now_ms`): applying an op never reads a clock,
so replay rebuilds exactly the state that was live. An in-flight message whose
deadline passed is made visible by `expire`, which the server's timer calls; that
step is not logged because replay reaches the same state by calling it again.

Receipts name one delivery of one message of one queue: `<offset>-<delivery>-<mac>`,
offset and delivery in hex (`delivery` numbers the deliver op, one per Q.POP call or
push, that handed the message out) and `mac` the first 8 bytes of BLAKE2b keyed with
the queue's secret over the rest, in hex (16 characters: hex is cheaper to make
than base64 on the hot path). The secret
is 16 random bytes carried by the queue's `q.create` op (or, for a queue created
before receipts were signed, a `q.secret` op logged when it is first opened), so it
survives restarts and a queue re-created under the same name gets a new one: a
receipt cannot be forged, guessed from a message ID, or used on another queue.
"""

from __future__ import annotations

import hashlib
import heapq
import hmac
import os
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

from narad._speedups import load
from narad.streams import ids
from narad.streams.ids import pack_id, unpack_id
from narad.streams.machines import Machine, op_table
from narad.streams.stream import Stream

if TYPE_CHECKING:
    from narad.log import Record

VISIBLE, IN_FLIGHT, DELAYED = 0, 1, 2
STALE = -1  # `Queue.current` of a receipt of an older delivery (packed values are >= 0)
MAX_VISIBILITY_MS = 12 * 3600 * 1000
MAX_RECEIVES = (1 << 20) - 1  # the receive count stops here (it has 20 bits)
# Delays (Q.PUSH, Q.NACK, the DELAY setting) and dedup windows: at most 365 days.
MAX_WAIT_MS = 365 * 24 * 3600 * 1000
_DUE_BITS = 44  # a deadline or due time in a packed value, an expiry in a dedup entry
# The queue clock stays below this (DEBUG CLOCK refuses to pass it; the wall clock
# reaches it in the year 2526), so now + MAX_WAIT_MS always fits in _DUE_BITS.
MAX_CLOCK_MS = (1 << _DUE_BITS) - 1 - MAX_WAIT_MS
DUE_MAX = (1 << _DUE_BITS) - 1
_DELIVERY_MASK = (1 << 40) - 1  # a packed value holds a delivery number's low 40 bits
_OFFSET_BITS = 40  # in timer entries
_EXPIRES_BITS = _DUE_BITS  # in dedup entries
_EXPIRES_MASK = (1 << _EXPIRES_BITS) - 1
SECRET_BYTES = 16

# -- tracked messages, one int each (about 200 bytes per message all told) -----------


class Tracked(NamedTuple):
    state: int  # VISIBLE, IN_FLIGHT or DELAYED
    receives: int  # deliveries so far
    delivery: int  # the number of the latest delivery (names its receipt)
    due: int  # IN_FLIGHT: the visibility deadline; DELAYED: when it becomes visible
    first_ms: int  # the time of the first delivery (0: never delivered)


def pack(state: int, receives: int, delivery: int, due: int, first_ms: int) -> int:
    """`due` must be at most DUE_MAX (the commands' ranges see to it; `fit_due` for a
    value read from a log); a delivery number is kept modulo 2^40."""
    delivery &= _DELIVERY_MASK
    return (((first_ms << 44 | due) << 40 | delivery) << 20 | receives) << 2 | state


def fit_due(due: int) -> int:
    """A due time from an op, within its packed field: ops written before the
    commands bounded their numbers may hold more (the wait was then lost to overflow;
    now it lasts until DUE_MAX)."""
    return min(max(due, 0), DUE_MAX)


def unpack(value: int) -> Tracked:
    return Tracked(
        value & 3,
        receives_of(value),
        delivery_of(value),
        (value >> 62) & ((1 << 44) - 1),
        value >> 106,
    )


def receives_of(value: int) -> int:
    """The receive count in a packed value (see `pack`); the hot paths read it alone."""
    return (value >> 2) & 0xFFFFF


def delivery_of(value: int) -> int:
    """The delivery number in a packed value (see `pack`)."""
    return (value >> 22) & ((1 << 40) - 1)


_MAC_CHARS = 16  # 8 bytes in hex


def new_secret() -> bytes:
    return os.urandom(SECRET_BYTES)


def mac_key(secret: bytes) -> hashlib.blake2b:
    """A keyed BLAKE2b to copy for each receipt (cheaper than keying each time)."""
    return hashlib.blake2b(digest_size=8, key=secret)


def _mac(key: hashlib.blake2b, head: bytes) -> bytes:
    h = key.copy()
    h.update(head)
    return h.hexdigest().encode()


def receipt(key: hashlib.blake2b, offset: int, delivery: int) -> bytes:
    """The receipt of delivery `delivery` of the message at `offset` (see above)."""
    head = b"%x-%x" % (offset, delivery)
    return head + b"-" + _mac(key, head)


def parse_receipt(key: hashlib.blake2b, raw: bytes) -> tuple[int, int] | None:
    """(offset, delivery) when `raw` is a receipt signed with `key`, else None."""
    cut = len(raw) - _MAC_CHARS - 1  # where the "-" before the MAC is
    if cut < 1 or raw[cut] != 0x2D:
        return None
    head = raw[:cut]
    if not hmac.compare_digest(raw[cut + 1 :], _mac(key, head)):
        return None
    offset, _, delivery = head.partition(b"-")  # signed by us: well formed
    return int(offset, 16), int(delivery, 16)


# -- settings ---------------------------------------------------------------------------


@dataclass
class Settings:
    """A queue's settings, as Q.CREATE and Q.CONFIG name them."""

    visibility: int = 30_000  # ms a delivery stays in flight unless Q.POP says otherwise
    maxreceives: int = 0  # deliveries before dead-lettering (0: no limit)
    dlq: bytes = b""  # the dead-letter queue's name ("": drop and count)
    delay: int = 0  # ms every pushed message stays invisible
    retention: int = 0  # ms the data log keeps messages (0: the server's retention-ms)
    maxbytes: int = 0  # bytes the data log keeps (0: the server's retention-bytes)
    dedupwindow: int = 300_000  # ms a DEDUP key is remembered

    NAMES = ("visibility", "maxreceives", "dlq", "delay", "retention", "maxbytes", "dedupwindow")

    def to_list(self) -> list[Any]:
        return [getattr(self, name) for name in self.NAMES]

    @classmethod
    def from_list(cls, raw: list[Any]) -> Settings:
        return cls(*raw)

    def differences(self, other: Settings) -> list[str]:
        return [name for name in self.NAMES if getattr(self, name) != getattr(other, name)]


@dataclass
class Subscription:
    """This queue copies every committed message of the source (by uid) from `next`."""

    source: int  # the source stream's uid
    next: int  # the source offset to copy next
    hint_data_offset: int  # this queue's data end when `next` was last logged
    initial: int  # where copying started (Q.SUBSCRIBE FROM)


# -- the queue --------------------------------------------------------------------------


class Queue:
    def __init__(self, stream: Stream, settings: Settings, secret: bytes | None) -> None:
        self.stream = stream
        self.settings = settings
        # None only between opening a queue made before receipts were signed and the
        # `q.secret` op the server logs for it then (QueueService.opened).
        self.secret = secret
        self.mac_key = None if secret is None else mac_key(secret)
        self.cursor = stream.start
        self.tracked: dict[int, int] = {}
        self.ready: list[int] = []
        self.timers: list[int] = []
        self.deliveries = 0
        self.acked = 0
        self.dead_lettered = 0
        self.dropped = 0
        self.schema_rejected = 0  # fan-out copies the queue's schema refused
        # Counters for /metrics (narad/collectors.py), since this process opened the
        # queue: not durable, and grown by replayed ops too (a restart starts them
        # from what recovery replayed, which Prometheus reads as a counter reset).
        self.delivered = 0  # messages handed out (each delivery of each message)
        self.nacked = 0  # messages made visible again or delayed by Q.NACK
        self.expired = 0  # deliveries whose visibility deadline passed (not dead-lettered)
        self.receives_empty = 0  # Q.POP calls that found nothing visible when they ran
        self.dedup: dict[bytes, int] = {}
        self.subs: dict[int, Subscription] = {}
        # Not durable: push-mode consumers (narad/queues/push.py) and what they hold.
        self.consumers: list[Any] = []
        self.holder: dict[int, Any] = {}  # offset -> the push consumer it was pushed to

    # -- choosing what to deliver (no op: the caller logs a deliver op) ---------------

    def choose(self, count: int) -> tuple[list[int], int]:
        """Up to `count` visible messages, oldest offset first: those visible again
        and those from the cursor on, merged. Returns them and the cursor after."""
        stream = self.stream
        end, deleted = stream.data.next_offset, stream.deleted
        tracked, ready = self.tracked, self.ready
        cursor = max(self.cursor, stream.start)
        chosen: list[int] = []
        taken: set[int] = set()
        while len(chosen) < count:
            self._clean_ready(taken)
            if ready and ready[0] < cursor:
                taken.add(ready[0])
                chosen.append(heapq.heappop(ready))
                continue
            while cursor < end:  # the next message from the cursor
                offset = cursor
                cursor += 1
                if offset in deleted:
                    continue
                value = tracked.get(offset)
                if value is None or value & 3 == VISIBLE:
                    chosen.append(offset)
                    taken.add(offset)
                    break
            else:
                if ready:  # visible again, beyond a cursor that a seek moved back
                    taken.add(ready[0])
                    chosen.append(heapq.heappop(ready))
                    continue
                break
        return chosen, cursor

    def unchoose(self, offsets: list[int]) -> None:
        """Give back what `choose` returned when it is not delivered after all."""
        for offset in offsets:
            if offset in self.tracked:
                heapq.heappush(self.ready, offset)

    def _clean_ready(self, taken: set[int] | None = None) -> None:
        """Pop heap entries that no longer name a visible tracked message."""
        ready, tracked, stream = self.ready, self.tracked, self.stream
        while ready:
            top = ready[0]
            if top < stream.start or top in stream.deleted:
                heapq.heappop(ready)
                tracked.pop(top, None)
            elif tracked.get(top, IN_FLIGHT) & 3 != VISIBLE or (taken and top in taken):
                heapq.heappop(ready)
            else:
                return

    def oldest_visible(self) -> int | None:
        """The offset of the oldest visible message, if any (nothing is taken)."""
        self._clean_ready()
        stream = self.stream
        best = self.ready[0] if self.ready else None
        offset, end = max(self.cursor, stream.start), stream.data.next_offset
        while offset < end and (best is None or offset < best):
            value = self.tracked.get(offset)
            if offset not in stream.deleted and (value is None or value & 3 == VISIBLE):
                return offset
            offset += 1
        return best

    def oldest_visible_id_ms(self) -> int | None:
        """The time part of the oldest visible message's ID (None: none visible),
        from memory alone, never a file: exact when memory holds that message (the
        log's write buffer, or it is the last one), else the ID time of the record
        the data log's sparse index names at or before it (narad/log/reading.py's
        `id_ms_floor`). So an age from it is never below the true age, and at most
        one index interval (4 KiB of messages) above. For /metrics and INFO queues,
        which must not read files; Q.STATS reads the message itself."""
        offset = self.oldest_visible()
        if offset is None:
            return None
        data = self.stream.data
        if offset == data.next_offset - 1:
            return int(data.last_id[0])
        return data.id_ms_floor(offset)

    def expire(self, now_ms: int) -> tuple[list[int], list[int]]:
        """Deadlines and delays due by `now_ms`: those messages become visible.
        Returns (visible again, to dead-letter): a message already delivered
        `maxreceives` times is not made visible but returned for dead-lettering."""
        timers, tracked = self.timers, self.tracked
        visible: list[int] = []
        dead: list[int] = []
        limit = now_ms << _OFFSET_BITS | ((1 << _OFFSET_BITS) - 1)
        mask = (1 << _OFFSET_BITS) - 1
        while timers and timers[0] <= limit:
            entry = heapq.heappop(timers)
            offset, due = entry & mask, entry >> _OFFSET_BITS
            value = tracked.get(offset)
            if value is None:
                continue
            t = unpack(value)
            if t.state == VISIBLE or t.due != due:
                continue
            if self._dead_on_visible(t):
                dead.append(offset)
                continue
            self._make_visible(offset, t)
            visible.append(offset)
            if t.state == IN_FLIGHT:
                self.expired += 1
        return visible, dead

    def _dead_on_visible(self, t: Tracked) -> bool:
        limit = self.settings.maxreceives
        return bool(limit) and t.receives >= limit

    def _make_visible(self, offset: int, t: Tracked) -> None:
        # Tracked even when never delivered and ahead of the cursor: where the cursor
        # stood when the timer fired must not matter, so that replay agrees.
        self.tracked[offset] = pack(VISIBLE, t.receives, t.delivery, 0, t.first_ms)
        heapq.heappush(self.ready, offset)

    def unacked_floor(self) -> int:
        """The offset of the first message not acked (visible, in flight or delayed)
        that the log still holds: everything from the start up to it is acked or
        dead-lettered. State left about offsets below the start (removed by size) does
        not hold it back. O(messages tracked)."""
        start = self.stream.start
        floor = max(self.cursor, start)
        for offset in self.tracked:
            if start <= offset < floor:
                floor = offset
        return floor

    def next_due(self) -> int | None:
        return self.timers[0] >> _OFFSET_BITS if self.timers else None

    def _timer(self, due: int, offset: int) -> None:
        heapq.heappush(self.timers, due << _OFFSET_BITS | offset)

    # -- receipts ---------------------------------------------------------------------

    def current(self, offset: int, delivery: int) -> int | None:
        """What a receipt names: the tracked message's packed value when it names
        the latest delivery, STALE when the message was delivered again since, None
        when the message is no longer tracked (acked, dead-lettered, trimmed)."""
        value = self.tracked.get(offset)
        if value is None or offset < self.stream.start:
            return None
        if delivery_of(value) != delivery & _DELIVERY_MASK or not receives_of(value):
            return STALE
        return value

    # -- dedup --------------------------------------------------------------------------

    def dedup_lookup(self, key: bytes, now_ms: int) -> int | None:
        value = self.dedup.get(key)
        if value is None or value & _EXPIRES_MASK <= now_ms:
            return None
        return value >> _EXPIRES_BITS

    def dedup_purge(self, now_ms: int) -> None:
        """Forget expired keys, oldest first (insertion order is expiry order while
        the window stays the same; a key out of order is only forgotten later)."""
        dedup = self.dedup
        for key in list(dedup):
            if dedup[key] & _EXPIRES_MASK > now_ms:
                break
            del dedup[key]

    # -- statistics ---------------------------------------------------------------------

    def counts(self) -> dict[str, int]:
        """visible, in_flight, delayed: O(tracked), in a compiled loop (about 10 ms
        for a million tracked messages)."""
        stream = self.stream
        start, end = stream.start, stream.data.next_offset
        cursor = max(self.cursor, start)
        visible, in_flight, delayed, ahead = count_tracked(
            self.tracked, start, end, stream.deleted, cursor
        )
        deleted_ahead = sum(1 for o in stream.deleted if o >= cursor)
        untracked = max(0, end - cursor - deleted_ahead - ahead)
        return {"visible": visible + untracked, "in_flight": in_flight, "delayed": delayed}

    # -- snapshots ----------------------------------------------------------------------

    def snapshot(self) -> list[Any]:
        return [
            self.settings.to_list(),
            self.cursor,
            [[o, *unpack(v)] for o, v in self.tracked.items()],
            self.deliveries,
            [self.acked, self.dead_lettered, self.dropped, self.schema_rejected],
            [[k, pack_id(v >> _EXPIRES_BITS), v & _EXPIRES_MASK] for k, v in self.dedup.items()],
            [[s.source, s.next, s.hint_data_offset, s.initial] for s in self.subs.values()],
            self.secret,
        ]

    @classmethod
    def from_snapshot(cls, stream: Stream, raw: list[Any]) -> Queue:
        # Snapshots written before receipts were signed end at `subs` and hold three
        # counters.
        settings, cursor, tracked, deliveries, counters, dedup, subs, *rest = raw
        secret = bytes(rest[0]) if rest and rest[0] is not None else None
        queue = cls(stream, Settings.from_list(settings), secret)
        queue.cursor = cursor
        for offset, *fields in tracked:
            queue._track(offset, pack(*fields))
        queue.deliveries = deliveries
        queue.acked, queue.dead_lettered, queue.dropped, *rejected = counters
        queue.schema_rejected = rejected[0] if rejected else 0
        queue.dedup = {
            bytes(k): unpack_id(sid) << _EXPIRES_BITS | expires for k, sid, expires in dedup
        }
        queue.subs = {s[0]: Subscription(*s) for s in subs}
        return queue

    def _track(self, offset: int, value: int) -> None:
        """Set a tracked message and the heap entry its state needs."""
        self.tracked[offset] = value
        state = value & 3
        if state == VISIBLE:
            heapq.heappush(self.ready, offset)
        else:
            self._timer(unpack(value).due, offset)

    def forget_lost_tail(self) -> None:
        """After recovery: state about offsets the data log no longer has (their
        records were not durable, so no producer was acked) is dropped."""
        end = self.stream.data.next_offset
        for offset in [o for o in self.tracked if o >= end]:
            del self.tracked[offset]
        self.cursor = min(self.cursor, end)
        last = self.stream.last_id
        for key in [k for k, v in self.dedup.items() if v >> _EXPIRES_BITS > last]:
            del self.dedup[key]


# -- counting -----------------------------------------------------------------------------


def count_tracked(
    tracked: dict[int, int], start: int, end: int, deleted: set[int], cursor: int
) -> tuple[int, int, int, int]:
    """Of the tracked messages with start <= offset < end and not deleted: how many
    are visible, in flight and delayed, and how many lie at or after `cursor`."""
    by_state = [0, 0, 0, 0]
    ahead = 0
    for offset, value in tracked.items():
        if start <= offset < end and offset not in deleted:
            by_state[value & 3] += 1
            ahead += offset >= cursor
    return by_state[VISIBLE], by_state[IN_FLIGHT], by_state[DELAYED], ahead


pure_count_tracked = count_tracked  # the reference, for the tests of the twin
_twin = load("_queues")
if _twin is not None:
    count_tracked = _twin.count_tracked


# -- reading messages -------------------------------------------------------------------


def read_records(stream: Stream, offsets: Iterable[int]) -> list[Record]:
    """The data records at `offsets` (each present), in the order given, read in
    runs of consecutive offsets; those not yet appended to the file come from the
    log's write buffer."""
    data = stream.data
    out: list[Record] = []
    run: list[int] = []

    def flush() -> None:
        if run:
            out.extend(data.read_with_buffer(run[0], len(run)))
            run.clear()

    for offset in offsets:
        if run and offset != run[-1] + 1:
            flush()
        run.append(offset)
    flush()
    return out


def record_id(rec: Record) -> int:
    return ids.make(rec.id_ms, rec.id_seq)


# -- ops ----------------------------------------------------------------------------------
#
# ["q.create", settings, secret]      the stream becomes a queue (no secret: made
#                                     before receipts were signed)
# ["q.secret", secret]                the receipt key of a queue that had none
# ["q.config", settings]              new settings
# ["q.deliver", delivery, deadline, now_ms, cursor, [offsets]]
# ["q.ack", [offsets]]                consumer acks
# ["q.nack", due, [offsets]]          visible again at `due` (0: now)
# ["q.touch", offset, deadline]
# ["q.delay", due, [offsets]]         pushed with a delay
# ["q.dedup", key, id, expires_ms]
# ["q.dead", dropped, [offsets]]      dead-lettered (appended to the DLQ first) or dropped
# ["q.take", cursor, [offsets]]       taken out for good (Q.REDRIVE moved them)
# ["q.seek", cursor]
# ["q.sub", source_uid, next, data_offset] / ["q.unsub", source_uid]   data_offset: the
#   subscriber's data log end when it subscribed (ops from before it carried none)
# ["q.subpos", source_uid, next, data_offset]   forwarding progress (a hint: see push)
# ["q.rejected", count]               fan-out copies the queue's schema refused


_OPS, _op = op_table()


def _queue(stream: Stream) -> Queue:
    queue: Queue | None = stream.queue
    assert queue is not None, "queue op on a stream that is not a queue"
    return queue


@_op("q.create")
def _apply_create(stream: Stream, op: list[Any]) -> None:
    if stream.queue is None:
        secret = bytes(op[2]) if len(op) > 2 else None
        stream.queue = Queue(stream, Settings.from_list(op[1]), secret)


@_op("q.secret")
def _apply_secret(stream: Stream, op: list[Any]) -> None:
    queue = _queue(stream)
    queue.secret = bytes(op[1])
    queue.mac_key = mac_key(queue.secret)


@_op("q.config")
def _apply_config(stream: Stream, op: list[Any]) -> None:
    _queue(stream).settings = Settings.from_list(op[1])


@_op("q.deliver")
def _apply_deliver(stream: Stream, op: list[Any]) -> None:
    _, delivery, deadline, now_ms, cursor, offsets = op
    deadline = fit_due(deadline)
    queue = _queue(stream)
    tracked = queue.tracked
    # Every message delivered for the first time by this op gets the same value: one
    # int object for all of them, where each would otherwise hold its own.
    first = pack(IN_FLIGHT, 1, delivery, deadline, now_ms)
    for offset in offsets:
        value = tracked.get(offset)
        if value is None:
            tracked[offset] = first
        else:
            t = unpack(value)
            receives = min(t.receives + 1, MAX_RECEIVES)
            tracked[offset] = pack(IN_FLIGHT, receives, delivery, deadline, t.first_ms or now_ms)
        queue._timer(deadline, offset)
    queue.deliveries = max(queue.deliveries, delivery)
    queue.delivered += len(offsets)
    queue.cursor = cursor


@_op("q.ack")
def _apply_ack(stream: Stream, op: list[Any]) -> None:
    queue = _queue(stream)
    for offset in op[1]:
        if queue.tracked.pop(offset, None) is not None:
            queue.acked += 1


@_op("q.nack")
def _apply_nack(stream: Stream, op: list[Any]) -> None:
    queue = _queue(stream)
    due = fit_due(op[1])
    for offset in op[2]:
        value = queue.tracked.get(offset)
        if value is None:
            continue
        queue.nacked += 1
        t = unpack(value)
        if due:
            queue._track(offset, pack(DELAYED, t.receives, t.delivery, due, t.first_ms))
        else:
            queue._track(offset, pack(VISIBLE, t.receives, t.delivery, 0, t.first_ms))


@_op("q.touch")
def _apply_touch(stream: Stream, op: list[Any]) -> None:
    queue = _queue(stream)
    _, offset, deadline = op
    deadline = fit_due(deadline)
    value = queue.tracked.get(offset)
    if value is not None:
        t = unpack(value)
        queue._track(offset, pack(IN_FLIGHT, t.receives, t.delivery, deadline, t.first_ms))


@_op("q.delay")
def _apply_delay(stream: Stream, op: list[Any]) -> None:
    queue = _queue(stream)
    due = fit_due(op[1])
    for offset in op[2]:
        queue._track(offset, pack(DELAYED, 0, 0, due, 0))


@_op("q.dedup")
def _apply_dedup(stream: Stream, op: list[Any]) -> None:
    _, key, sid, expires = op
    queue = _queue(stream)
    queue.dedup.pop(bytes(key), None)  # re-inserted last: insertion order is expiry order
    queue.dedup[bytes(key)] = unpack_id(sid) << _EXPIRES_BITS | fit_due(expires)


@_op("q.dead")
def _apply_dead(stream: Stream, op: list[Any]) -> None:
    queue = _queue(stream)
    for offset in op[2]:
        if queue.tracked.pop(offset, None) is not None:
            if op[1]:
                queue.dropped += 1
            else:
                queue.dead_lettered += 1


@_op("q.take")
def _apply_take(stream: Stream, op: list[Any]) -> None:
    queue = _queue(stream)
    for offset in op[2]:
        queue.tracked.pop(offset, None)
    queue.cursor = op[1]
    queue.acked += len(op[2])


@_op("q.seek")
def _apply_seek(stream: Stream, op: list[Any]) -> None:
    _queue(stream).cursor = op[1]


@_op("q.sub")
def _apply_sub(stream: Stream, op: list[Any]) -> None:
    # An op reads nothing but itself; one logged before the op carried its data
    # offset falls back to the data log's end, as it was then read.
    source, next_offset = op[1], op[2]
    data_offset = op[3] if len(op) > 3 else stream.data.next_offset
    sub = Subscription(source, next_offset, data_offset, next_offset)
    _queue(stream).subs[source] = sub


@_op("q.unsub")
def _apply_unsub(stream: Stream, op: list[Any]) -> None:
    _queue(stream).subs.pop(op[1], None)


@_op("q.subpos")
def _apply_subpos(stream: Stream, op: list[Any]) -> None:
    _, source, next_offset, data_offset = op
    sub = _queue(stream).subs.get(source)
    if sub is not None:
        sub.next, sub.hint_data_offset = next_offset, data_offset


@_op("q.rejected")
def _apply_rejected(stream: Stream, op: list[Any]) -> None:
    _queue(stream).schema_rejected += op[1]


# -- the machine -----------------------------------------------------------------------


def _snapshot(stream: Stream) -> list[Any] | None:
    return None if stream.queue is None else stream.queue.snapshot()


def _restore(stream: Stream, raw: list[Any] | None) -> None:
    stream.queue = None if raw is None else Queue.from_snapshot(stream, raw)


def _forget_lost_tail(stream: Stream) -> None:
    if stream.queue is not None:
        stream.queue.forget_lost_tail()


def _after_repair(stream: Stream) -> list[Any] | None:
    """A repair cut the queue's state log: deliveries numbered after the cut will be
    numbered again, so a new receipt secret refuses every receipt handed out before."""
    return None if stream.queue is None else ["q.secret", new_secret()]


QUEUE_MACHINE = Machine(
    "queue", _OPS, snapshot=_snapshot, restore=_restore, forget_lost_tail=_forget_lost_tail,
    after_repair=_after_repair,
)
