"""A consumer group's in-memory state: its cursor, its pending entries list (PEL)
and its consumers. Changed only by the op handlers of narad/streams/groups.py (the
groups' state machine), live and at replay; commands read it freely.

Owned by the event loop thread, as the stream that holds the groups is.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
from collections.abc import Iterator
from typing import Any

from narad.streams import ids
from narad.streams.ids import pack_id, unpack_id


class Consumer:
    """A named reader of a group. `pending` holds the IDs of the group's pending
    entries it owns: the same int objects as the group PEL's keys."""

    __slots__ = ("name", "pending", "seen_ms")

    def __init__(self, name: bytes, seen_ms: int) -> None:
        self.name = name
        self.seen_ms = seen_ms  # Unix ms of the last op that touched it
        self.pending: set[int] = set()


class PendingEntry:
    """An entry delivered and not yet acked (Redis's NACK). Kept small: it is the
    per-message cost of everything in flight."""

    __slots__ = ("consumer", "delivery_count", "delivery_ms")

    def __init__(self, consumer: Consumer, delivery_ms: int, delivery_count: int) -> None:
        self.consumer = consumer  # the owner; its `pending` holds this entry's ID
        self.delivery_ms = delivery_ms  # Unix ms of the last delivery (or claim)
        self.delivery_count = delivery_count  # deliveries so far, this one included


class Pel:
    """The pending entries list: entry ID -> PendingEntry, iterated in ID order.

    A dict, plus its keys in a sorted list for ordered walks and ranges. IDs mostly
    arrive in increasing order (deliveries with `>`), which appends; a lower one is
    inserted by bisection. A removal leaves its key in the list as a tombstone
    (skipped by walks) until tombstones are half the list, when it is compacted, so
    adding and removing cost O(1) amortized for the usual deliver-then-ack traffic.
    """

    __slots__ = ("_entries", "_keys", "_tombstones")

    def __init__(self) -> None:
        self._entries: dict[int, PendingEntry] = {}
        self._keys: list[int] = []  # sorted; a superset of the dict's keys
        self._tombstones = 0

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, sid: object) -> bool:
        return sid in self._entries

    def __getitem__(self, sid: int) -> PendingEntry:
        return self._entries[sid]

    def get(self, sid: int) -> PendingEntry | None:
        return self._entries.get(sid)

    def pending_of(self, sids: list[int]) -> dict[int, None]:
        """Those of `sids` that are pending, once each, in first-seen order."""
        entries = self._entries
        return {sid: None for sid in sids if sid in entries}

    def __setitem__(self, sid: int, entry: PendingEntry) -> None:
        entries = self._entries
        if sid not in entries:
            keys = self._keys
            if not keys or sid > keys[-1]:
                keys.append(sid)
            else:
                i = bisect.bisect_left(keys, sid)
                if i < len(keys) and keys[i] == sid:
                    self._tombstones -= 1  # a tombstone comes back to life
                else:
                    keys.insert(i, sid)
        entries[sid] = entry

    def update(self, items: dict[int, PendingEntry]) -> None:
        for sid, entry in items.items():
            self[sid] = entry

    def append_run(self, sids: list[int], consumer: Consumer, delivery_ms: int) -> bool:
        """Add a new entry (delivery count 1) for each of `sids`, increasing and all
        above every key held (the usual delivery with `>`), in one step; False, and
        nothing done, when they are not."""
        keys = self._keys
        if not sids or (keys and sids[0] <= keys[-1]):
            return False
        self._entries.update([(sid, PendingEntry(consumer, delivery_ms, 1)) for sid in sids])
        keys.extend(sids)
        return True

    def pop(self, sid: int, default: PendingEntry | None = None) -> PendingEntry | None:
        entry = self._entries.pop(sid, None)
        if entry is None:
            return default
        self._tombstones += 1
        self._compact_if_due()
        return entry

    def pop_all(self, sids: list[int]) -> list[tuple[int, PendingEntry]]:
        """Remove each of `sids` that is pending; the (ID, entry) pairs removed."""
        pop = self._entries.pop
        popped = [(sid, entry) for sid in sids if (entry := pop(sid, None)) is not None]
        self._tombstones += len(popped)
        self._compact_if_due()
        return popped

    def _compact_if_due(self) -> None:
        if self._tombstones > 64 and self._tombstones * 2 > len(self._keys):
            entries = self._entries
            self._keys = [k for k in self._keys if k in entries]
            self._tombstones = 0

    def __delitem__(self, sid: int) -> None:
        if self.pop(sid) is None:
            raise KeyError(sid)

    def irange(self, minimum: int | None = None, maximum: int | None = None) -> Iterator[int]:
        """IDs with minimum <= ID <= maximum (None: unbounded), in ID order."""
        keys, entries = self._keys, self._entries
        i = 0 if minimum is None else bisect.bisect_left(keys, minimum)
        while i < len(keys):
            sid = keys[i]
            if maximum is not None and sid > maximum:
                return
            if sid in entries:
                yield sid
            i += 1

    def __iter__(self) -> Iterator[int]:
        return self.irange()

    def first(self) -> int:
        """The smallest pending ID; the PEL must not be empty."""
        return next(self.irange())

    def last(self) -> int:
        """The largest pending ID; the PEL must not be empty."""
        entries = self._entries
        return next(k for k in reversed(self._keys) if k in entries)

    def keys(self) -> list[int]:
        entries = self._entries
        return [k for k in self._keys if k in entries]

    def values(self) -> list[PendingEntry]:
        entries = self._entries
        return [entries[k] for k in self._keys if k in entries]

    def items(self) -> list[tuple[int, PendingEntry]]:
        entries = self._entries
        return [(k, entries[k]) for k in self._keys if k in entries]


class Group:
    """A consumer group: cursor, PEL (ID order) and consumers. Changed only by the op
    handlers below; commands read it freely.

    XNACKed entries stay pending but belong to no consumer: their owner is the
    group's `unowned` stand-in (named "", never in `consumers`), their delivery time
    is 0, and `nacked` holds their IDs in the order they were nacked (the FIFO
    "nack zone" claims serve first). An entry leaves the zone when it is claimed,
    acked or dropped."""

    __slots__ = ("consumers", "entries_read", "last_id", "nacked", "name", "pel", "unowned")

    def __init__(self, name: bytes, last_id: int, entries_read: int | None) -> None:
        self.name = name
        self.last_id = last_id  # ID of the last entry handed out with `>` (or set)
        self.entries_read = entries_read  # read counter at last_id; None: unknown
        self.pel = Pel()  # entry ID -> PendingEntry, in ID order
        self.consumers: dict[bytes, Consumer] = {}
        self.unowned = Consumer(b"", 0)  # the owner of nacked entries
        self.nacked: dict[int, None] = {}  # nacked IDs, oldest nack first

    # -- queries ----------------------------------------------------------------------

    def sorted_consumers(self) -> list[Consumer]:
        """Consumers in name order (the order Redis lists them in)."""
        return [self.consumers[name] for name in sorted(self.consumers)]

    def owned_ids(self, consumer: Consumer, low: int, high: int) -> Iterator[int]:
        """IDs pending for `consumer` with low <= ID <= high, in ID order."""
        if len(consumer.pending) * 4 >= len(self.pel):
            pel = self.pel
            return (s for s in pel.irange(low, high) if pel[s].consumer is consumer)
        return iter(sorted(s for s in consumer.pending if low <= s <= high))

    def pending_ids(self, low: int, high: int, consumer: Consumer | None = None) -> Iterator[int]:
        if consumer is not None:
            return self.owned_ids(consumer, low, high)
        return iter(self.pel.irange(low, high))

    def first_owned(self, consumer: Consumer, count: int, low: int) -> list[int]:
        """The first `count` (0: all) IDs pending for `consumer` from `low` on."""
        if count and len(consumer.pending) * 4 < len(self.pel):
            return heapq.nsmallest(count, (s for s in consumer.pending if s >= low))
        found = self.owned_ids(consumer, low, ids.ID_MAX)
        return list(found) if not count else list(itertools.islice(found, count))

    # -- changes, only from op handlers ---------------------------------------------------

    def _touch_consumer(self, name: bytes, seen_ms: int) -> Consumer:
        consumer = self.consumers.get(name)
        if consumer is None:
            consumer = self.consumers[name] = Consumer(name, seen_ms)
        consumer.seen_ms = seen_ms
        return consumer

    def _give(self, sid: int, consumer: Consumer, delivery_ms: int) -> PendingEntry:
        """Make `sid` pending for `consumer` (moving it if someone else had it)."""
        entry: PendingEntry | None = self.pel.get(sid)
        if entry is None:
            entry = PendingEntry(consumer, delivery_ms, 1)
            self.pel[sid] = entry
            consumer.pending.add(sid)
            return entry
        if entry.consumer is not consumer:
            if entry.consumer is self.unowned:
                del self.nacked[sid]
            entry.consumer.pending.discard(sid)
            entry.consumer = consumer
            consumer.pending.add(sid)
        entry.delivery_ms = delivery_ms
        return entry

    def _nack(self, sid: int, delivery_count: int) -> None:
        """Make `sid` pending for nobody, at the end of the nack zone (created when
        not pending: XNACK FORCE)."""
        self._give(sid, self.unowned, 0).delivery_count = delivery_count
        self.nacked.pop(sid, None)
        self.nacked[sid] = None

    def _give_new(self, sids: list[int], consumer: Consumer, delivery_ms: int) -> None:
        """`_give` each of `sids` (increasing) to `consumer` with a delivery count of 1:
        a delivery with `>`."""
        if not self.pel.append_run(sids, consumer, delivery_ms):
            for sid in sids:
                self._give(sid, consumer, delivery_ms).delivery_count = 1
            return
        consumer.pending.update(sids)

    def _drop(self, sid: int) -> bool:
        entry: PendingEntry | None = self.pel.pop(sid, None)
        if entry is None:
            return False
        entry.consumer.pending.discard(sid)
        if self.nacked:
            self.nacked.pop(sid, None)
        return True

    def _drop_all(self, sids: list[int]) -> None:
        for sid, entry in self.pel.pop_all(sids):
            entry.consumer.pending.discard(sid)
        if self.nacked:
            for sid in sids:
                self.nacked.pop(sid, None)

    # -- snapshots ----------------------------------------------------------------------

    def snapshot(self) -> list[Any]:
        """The whole group as a msgpack-able list, PEL stored by columns."""
        consumers = self.sorted_consumers()
        index = {id(c): i for i, c in enumerate(consumers)}
        index[id(self.unowned)] = -1
        pel_ids = list(self.pel.keys())
        entries: list[PendingEntry] = list(self.pel.values())
        return [
            self.name,
            pack_id(self.last_id),
            self.entries_read,
            [[c.name, c.seen_ms] for c in consumers],
            ids.pack_all(pel_ids),
            [index[id(e.consumer)] for e in entries],
            [e.delivery_ms for e in entries],
            [e.delivery_count for e in entries],
            ids.pack_all(list(self.nacked)),
        ]

    @classmethod
    def from_snapshot(cls, raw: list[Any]) -> Group:
        """A group from `snapshot`'s list; one written before XNACK (no nack zone, its
        last item) restores with none."""
        name, last_id, entries_read, consumers, pel_ids, owners, times, counts = raw[:8]
        group = cls(name, unpack_id(last_id), entries_read)
        table = [group._touch_consumer(cname, seen) for cname, seen in consumers]
        sids = ids.unpack_all(pel_ids)
        assert len(sids) == len(owners) == len(times) == len(counts)
        pel = {}
        for sid, owner, delivery_ms, count in zip(sids, owners, times, counts, strict=True):
            consumer = table[owner] if owner >= 0 else group.unowned
            pel[sid] = PendingEntry(consumer, delivery_ms, count)
            consumer.pending.add(sid)
        group.pel.update(pel)
        nacked = ids.unpack_all(raw[8]) if len(raw) > 8 else []
        assert set(nacked) == group.unowned.pending, "the nack zone is the unowned entries"
        group.nacked = dict.fromkeys(nacked)
        return group
