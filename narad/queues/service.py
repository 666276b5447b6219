"""The server side of queues: what happens because time passes or data is
committed, not because a command asked. Owned by the server, on the event loop.

- Delivering (Q.POP, push consumers): choose visible messages, log one deliver op,
  read the records, build the message maps.
- The timer: one loop timer at the earliest deadline or delay of any queue; when it
  fires, due messages become visible (or are dead-lettered) and waiters are woken.
- Dead-lettering: the message is appended to the DLQ with its origin, then the
  source logs it as dead. A crash between the two may leave a copy in the DLQ while
  the source still holds the message (dead-lettered twice later): never lost.
- Fan-out: after every commit, each subscription copies the source's *committed*
  records (durable under `fsync always`, appended under `everysec` / `no`) that it
  has not copied yet. Each copy carries `source` and `source_id`; on open the
  position is recomputed from the copies themselves (see `recover_subscription`),
  which makes the copy exactly-once across crashes.
- Push consumers (Q.CONSUME): served at the end of each loop iteration, before the
  commit that their frames wait for.
- Schemas: what the server appends on its own (copies, dead letters, redriven
  messages) is judged by the target's schema first (`schema_refusal`), with the
  produce path's validator; docs/queues.md says what a refused entry becomes.

Every change to queue state goes through `Stream.log_op`, so replies and push frames
leave only after the commit that makes their ops durable.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from narad.clock import Clock
from narad.errors import IDS_EXHAUSTED, CommandError, no_queue
from narad.log import FLAG_ENTRY, Log, Record, decode_fields
from narad.queues.queue import (
    IN_FLIGHT,
    STALE,
    Queue,
    Settings,
    new_secret,
    parse_receipt,
    read_records,
    receipt,
    receives_of,
    record_id,
    unpack,
)
from narad.resp import BigNumber, Encoded, Push, encode_into
from narad.schema.errors import PayloadError
from narad.schema.keyspace import Unavailable
from narad.streams import ids
from narad.streams.stream import Stream

if TYPE_CHECKING:
    import asyncio

    from narad.client import Client
    from narad.server import Server

logger = logging.getLogger("narad.queues")

FORWARD_BATCH = 512  # records copied per subscription per loop iteration
PUSH_BATCH = 32  # messages one push consumer takes per turn, for fairness
SOURCE_FIELDS = (b"source", b"source_id")
ORIGIN_FIELDS = (
    b"origin", b"origin_id", b"origin_receives", b"first_received_at", b"schema_error",
)  # fmt: skip

Message = dict[bytes, Any]
INT64_MAX = (1 << 63) - 1
Delivered = tuple[Record, bytes, int]  # a delivered message: record, receipt, receives


@dataclass(eq=False)
class PushConsumer:
    """A connection in push mode (Q.CONSUME) on one queue."""

    service: QueueService
    client: Client
    queue: Queue
    prefetch: int
    visibility: int
    held: set[int] = field(default_factory=set)  # offsets pushed and not yet settled

    def disconnected(self) -> None:
        self.service.stop_consuming(self)


class QueueService:
    def __init__(self, server: Server) -> None:
        self.server = server
        self.keyspace = server.keyspace
        self.clock = Clock()
        self._timer: asyncio.TimerHandle | None = None
        self._timer_due = 0
        self.to_serve: set[Queue] = set()  # queues whose push consumers may take more
        self.consuming = 0  # push consumers connected (a cheap test on the XADD path)
        # The queues that subscribe to a source: forward copies into them after each
        # commit. It may hold a queue that no longer subscribes (forward drops it).
        self.subscribing: set[Queue] = set()

    # -- finding queues ---------------------------------------------------------------

    def queues(self) -> Iterator[Queue]:
        """Every available queue. An unavailable one (its state log could not be
        replayed: narad/keyspace.py) is never served, timed, fed nor copied from."""
        for stream in self.keyspace.streams.values():
            if stream.queue is not None and stream.fault is None:
                yield stream.queue

    def get(self, db: int, key: bytes) -> Queue | None:
        stream = self.keyspace.get(db, key)
        return None if stream is None else stream.queue

    def require(self, client: Client, key: bytes) -> Queue:
        queue = self.get(client.db, key)
        if queue is None:
            raise no_queue(key)
        return queue

    # -- lifecycle --------------------------------------------------------------------

    def opened(self) -> None:
        """After the keyspace opened: settings into the logs, subscription positions
        recovered, timers armed."""
        for queue in list(self.queues()):
            if queue.secret is None:  # made before receipts were signed
                queue.stream.log_op(["q.secret", new_secret()])
            self.apply_settings(queue)
            for sub in list(queue.subs.values()):
                self.recover_subscription(queue, sub.source)
        self.subscribing = {q for q in self.queues() if q.subs}
        self.tick()

    def apply_settings(self, queue: Queue) -> None:
        """The settings that live in the data log's config (retention)."""
        data = queue.stream.data
        base = self.keyspace.log_config()
        s = queue.settings
        data.config = data.config._replace(
            retention_ms=s.retention or base.retention_ms,
            retention_bytes=s.maxbytes or base.retention_bytes,
        )

    def dropped(self, stream: Stream) -> None:
        """A queue's key went away: its push consumers stop, its subscribers stop
        copying from it (at the next forward)."""
        queue = stream.queue
        if queue is None:
            return
        for consumer in list(queue.consumers):
            consumer.client.push_handler = None
            self.stop_consuming(consumer, release=False)
        self.to_serve.discard(queue)
        self.subscribing.discard(queue)
        self.server.barrier.schedule()

    @property
    def subscribed(self) -> bool:
        return bool(self.subscribing)

    # -- delivering -------------------------------------------------------------------

    def deliver_raw(self, queue: Queue, count: int, visibility: int) -> list[Delivered]:
        """Deliver up to `count` visible messages with deadline now + `visibility`,
        each as its record, receipt and receive count."""
        now = self.clock.now_ms()
        self._expire(queue, now)
        offsets, cursor = queue.choose(count)
        if not offsets:
            if cursor != queue.cursor:  # it scanned past delayed or in-flight messages
                queue.stream.log_op(["q.seek", cursor])
            return []
        delivery = queue.deliveries + 1
        deadline = now + visibility
        stream = queue.stream
        stream.log_op(["q.deliver", delivery, deadline, now, cursor, offsets])
        self.arm(deadline)
        tracked, key = queue.tracked, queue.mac_key
        assert key is not None, "a queue opened by the server has its secret"
        return [
            (rec, receipt(key, rec.offset, delivery), receives_of(tracked[rec.offset]))
            for rec in read_records(stream, offsets)
        ]

    def ack(self, queue: Queue, receipts: list[bytes]) -> int:
        """Q.ACK: all receipts or none. Receipts of messages no longer tracked
        (acked before, dead-lettered, trimmed) are not counted."""
        acked: dict[int, None] = {}  # once each, in receipt order
        for raw in receipts:
            offset, value = self._resolve(queue, raw)
            if value is not None:
                acked[offset] = None
        offsets = list(acked)
        if offsets:
            queue.stream.log_op(["q.ack", offsets])
            self._settled(queue, offsets)
        return len(offsets)

    def nack(self, queue: Queue, raw: bytes, delay: int) -> None:
        offset, _ = self._resolve(queue, raw, in_flight=True)
        if delay:
            queue.stream.log_op(["q.nack", self.clock.now_ms() + delay, [offset]])
            self.arm(self.clock.now_ms() + delay)
        else:
            self._release(queue, [offset])
        self._settled(queue, [offset])

    def _release(self, queue: Queue, offsets: list[int]) -> None:
        """In-flight messages given back: visible again now, or dead-lettered when
        they were delivered MAXRECEIVES times (a failed receive, as an expiry)."""
        dead = [o for o in offsets if queue._dead_on_visible(unpack(queue.tracked[o]))]
        if dead:
            self.dead_letter(queue, dead)
        gone = set(dead)
        rest = [o for o in offsets if o not in gone]
        if rest:
            queue.stream.log_op(["q.nack", 0, rest])
            self.wake(queue)

    def touch(self, queue: Queue, raw: bytes, ms: int) -> None:
        offset, _ = self._resolve(queue, raw, in_flight=True)
        deadline = self.clock.now_ms() + ms
        queue.stream.log_op(["q.touch", offset, deadline])
        self.arm(deadline)

    def _resolve(
        self, queue: Queue, raw: bytes, in_flight: bool = False
    ) -> tuple[int, int | None]:
        """The offset a receipt names and its tracked value (None: no longer tracked).
        Errors: `invalid receipt` for anything this queue did not sign (malformed,
        forged, another queue's, a message ID); STALE for an older delivery, and with
        `in_flight` for a message not in flight under this delivery."""
        assert queue.mac_key is not None, "a queue opened by the server has its secret"
        parsed = parse_receipt(queue.mac_key, raw)
        if parsed is None:
            raise CommandError(
                f"invalid receipt '{raw.decode('utf-8', 'replace')}': "
                f"not a receipt of queue '{queue.stream.key.decode('utf-8', 'replace')}'"
            )
        offset, delivery = parsed
        value = queue.current(offset, delivery)
        if value == STALE:
            raise stale(raw, "the message was delivered again since")
        if in_flight:
            if value is None:
                raise stale(raw, "the message is no longer in flight")
            t = unpack(value)
            if t.state != IN_FLIGHT or t.due <= self.clock.now_ms():
                raise stale(raw, "its visibility deadline passed")
        return offset, value

    def _settled(self, queue: Queue, offsets: list[int]) -> None:
        """Messages left their push consumer's prefetch window."""
        if not queue.holder:
            return
        for offset in offsets:
            consumer = queue.holder.pop(offset, None)
            if consumer is not None:
                consumer.held.discard(offset)
                self.to_serve.add(queue)
                self.server.barrier.schedule()

    # -- time ---------------------------------------------------------------------------

    def arm(self, due: int) -> None:
        """Make sure the timer fires by `due` (clock ms)."""
        loop = self.server.loop
        if loop is None or self.clock.frozen_ms is not None:
            return  # a frozen clock only moves by DEBUG CLOCK, which ticks
        if self._timer is not None and self._timer_due <= due:
            return
        if self._timer is not None:
            self._timer.cancel()
        delay = max(0, due - self.clock.now_ms()) / 1000
        self._timer_due = due
        self._timer = loop.call_later(delay, self.tick)

    def tick(self) -> None:
        """Deadlines and delays due now take effect in every queue."""
        self._timer = None
        self.server.barrier.settle()
        now = self.clock.now_ms()
        earliest = None
        for queue in list(self.queues()):
            self._expire(queue, now)
            queue.dedup_purge(now)
            due = queue.next_due()
            if due is not None and (earliest is None or due < earliest):
                earliest = due
        if earliest is not None:
            self.arm(earliest)
        self.server.barrier.schedule()

    def _expire(self, queue: Queue, now: int) -> None:
        due = queue.next_due()
        if due is None or due > now:
            return
        visible, dead = queue.expire(now)
        if dead:
            self.dead_letter(queue, dead)
            self._settled(queue, dead)
        if visible:
            self._settled(queue, visible)
            self.wake(queue)

    def wake(self, queue: Queue) -> None:
        """Visible messages appeared: blocked Q.POP clients and push consumers."""
        stream = queue.stream
        self.server.signal_key(stream.db, stream.key)
        if queue.consumers:
            self.to_serve.add(queue)
            self.server.barrier.schedule()

    def written(self, stream: Stream) -> None:
        """An entry was appended to `stream` (XADD, Q.PUSH, a copy)."""
        queue = stream.queue
        if queue is not None and queue.consumers:
            self.to_serve.add(queue)

    # -- dead letters -----------------------------------------------------------------

    def dead_letter(self, queue: Queue, offsets: list[int]) -> None:
        """Dead-letter messages of `queue`: appended to its DLQ, or dropped (and
        counted in `dropped`) when it has none, the DLQ is gone, or the DLQ's schema
        refuses the letter."""
        stream = queue.stream
        dlq = self._dlq(queue)
        if dlq is None:
            if queue.settings.dlq:
                logger.warning(
                    "queue %r: dead-letter queue %r is gone or unavailable, dropping %d messages",
                    stream.key,
                    queue.settings.dlq,
                    len(offsets),
                )
            stream.log_op(["q.dead", 1, offsets])
            return
        letters, sent, refused = [], [], []
        first: tuple[bytes, PayloadError] | None = None  # the first refused: ID, why
        for rec in read_records(stream, offsets):
            t = unpack(queue.tracked[rec.offset])
            fields = without(decode_fields(rec.payload), ORIGIN_FIELDS)
            fields += [
                b"origin", stream.key,
                b"origin_id", ids.fmt(record_id(rec)),
                b"origin_receives", b"%d" % t.receives,
                b"first_received_at", b"%d" % t.first_ms,
            ]  # fmt: skip
            refusal = self.schema_refusal(dlq.stream, fields)
            if refusal is None:
                letters.append(fields)
                sent.append(rec.offset)
            else:
                refused.append(rec.offset)
                first = first or (ids.fmt(record_id(rec)), refusal)
        if letters:
            self.append(dlq.stream, letters)
            stream.log_op(["q.dead", 0, sent])
        if first is not None:
            _log_refusal("dead letter", dlq.stream, stream, len(refused), *first)
            stream.log_op(["q.dead", 1, refused])

    def _dlq(self, queue: Queue) -> Queue | None:
        """The queue's dead-letter queue, if it has one that still exists and is
        available, its schema state usable (else it takes no letters: they are
        dropped, as for a DLQ that is gone)."""
        if not queue.settings.dlq:
            return None
        stream = self.keyspace.dbs[queue.stream.db].get(queue.settings.dlq)
        dlq = None if stream is None else stream.queue
        if dlq is None or dlq is queue or self.schema_faulted(dlq.stream):
            return None
        return dlq

    def schema_faulted(self, stream: Stream) -> bool:
        """Whether `stream`'s schema state is unusable (a metadata op of it faulted:
        narad/schema/keyspace.py): the server appends nothing to it on its own, as for
        an unavailable stream, until Q.SCHEMA DROP or a repair."""
        return stream.uid in self.keyspace.schemas.faults

    def schema_refusal(self, stream: Stream, fields: list[bytes]) -> PayloadError | None:
        """Why `stream`'s schema refuses an entry the server appends on its own (a
        fan-out copy, a dead letter, a redriven message); None: accepted, or no schema.
        A stream whose schema faulted raises the fault's error (callers skip such a
        stream first: `schema_faulted`).

        The entry is judged as its producer's entry was, by the produce path's own
        validator (narad.schema.registry.Active): the fields the server adds
        (SOURCE_FIELDS, ORIGIN_FIELDS) are set aside; what remains is judged as a
        Q.PUSH payload when it is a lone `payload` field, else as XADD judges an entry.
        """
        active = self.keyspace.validators.get(stream.uid)
        if active is None:
            return None
        if isinstance(active, Unavailable):
            raise active.fault.error(stream.key)
        own = without(fields, SOURCE_FIELDS + ORIGIN_FIELDS)
        try:
            if len(own) == 2 and own[0] == b"payload":
                active.check_payload(own[1])
            else:
                active.check_fields(own)
        except PayloadError as refusal:
            return refusal
        return None

    def redrive(self, dlq: Queue, to: Queue | None, count: int) -> int:
        """Move up to `count` visible dead letters back to their origin (or `to`),
        oldest first, stopping before the first one that cannot move (its origin is
        not a queue, or the target's schema refuses it): that one's error is raised
        when it is the first, else the number moved before it is returned."""
        self._expire(dlq, self.clock.now_ms())
        offsets, cursor = dlq.choose(count)
        try:
            moves = self._redrive_moves(dlq, to, offsets)
        except CommandError:
            dlq.unchoose(offsets)  # the chosen stay ready, as if never chosen
            raise
        if len(moves) < len(offsets):
            dlq.unchoose(offsets)
            # The same choice, cut before the one that cannot move (nothing was logged).
            return self.redrive(dlq, to, len(moves))
        for target, fields in moves:
            self.append(target.stream, [fields])
        if offsets or cursor != dlq.cursor:
            dlq.stream.log_op(["q.take", cursor, offsets])
        return len(offsets)

    def _redrive_moves(
        self, dlq: Queue, to: Queue | None, offsets: list[int]
    ) -> list[tuple[Queue, list[bytes]]]:
        """Where each chosen dead letter goes and what it carries, up to the first
        that cannot move; that one's error is raised when it is the first (also a
        target whose state or schema is unavailable: its fault's error)."""
        records = read_records(dlq.stream, offsets)
        moves: list[tuple[Queue, list[bytes]]] = []
        for rec in records:
            fields = decode_fields(rec.payload)
            target = to
            if target is None:
                origin = field_value(fields, b"origin")
                target = None if origin is None else self.get(dlq.stream.db, origin)
            problem: CommandError | None = None
            if target is None:
                shown = (field_value(fields, b"origin") or b"").decode("utf-8", "replace")
                problem = CommandError(
                    f"message {ids.fmt(record_id(rec)).decode()} came from "
                    f"'{shown}', which is not a queue now: name one with TO",
                    "NOQUEUE",
                )
            else:
                problem = self.schema_refusal(target.stream, fields)
            if problem is not None:
                if not moves:
                    raise problem
                return moves
            assert target is not None
            moves.append((target, without(fields, ORIGIN_FIELDS)))
        return moves

    def append(self, stream: Stream, entries: list[list[bytes]]) -> list[int]:
        """Append entries with automatic IDs, all or none; their IDs. WATCHers,
        blocked readers and push consumers of the stream are told once."""
        if stream.last_id > ids.ID_MAX - len(entries):
            raise CommandError(IDS_EXHAUSTED)
        sids = []
        for fields in entries:
            sid = ids.next_auto(stream.last_id)
            assert sid is not None
            stream.add(sid, fields)
            sids.append(sid)
        self.server.key_written(stream.db, stream.key)
        return sids

    # -- fan-out ------------------------------------------------------------------------

    def copies_due(self, written: Collection[Log]) -> bool:
        """Whether a commit that wrote `written` committed records that a subscriber
        copies (forward runs again for them)."""
        sources = {uid for queue in self.subscribing for uid in queue.subs}
        return any(
            (stream := self.keyspace.streams.get(uid)) is not None and stream.data in written
            for uid in sources
        )

    def forward(self) -> None:
        """Copy what sources committed since the last call into their subscribers."""
        if not self.subscribed:
            return
        more = False
        for queue in list(self.subscribing):
            if not queue.subs or queue.stream.queue is not queue:
                self.subscribing.discard(queue)
                continue
            for sub in list(queue.subs.values()):
                source = self.keyspace.streams.get(sub.source)
                if source is None:  # the source was deleted: the subscription ends
                    queue.stream.log_op(["q.unsub", sub.source])
                    continue
                if source.fault is not None or self.schema_faulted(queue.stream):
                    continue  # unavailable: copying waits for its repair (or schema drop)
                end = source.data.committed_end
                start = max(sub.next, source.start)
                if start >= end:
                    continue
                records = source.data.read(start, count_max=min(end - start, FORWARD_BATCH))
                stream = queue.stream
                copies: list[list[bytes]] = []
                refused: list[tuple[list[bytes], PayloadError]] = []
                for rec in records:
                    if rec.offset not in source.deleted:
                        fields = without(decode_fields(rec.payload), SOURCE_FIELDS)
                        fields += [b"source", source.key, b"source_id", ids.fmt(record_id(rec))]
                        refusal = self.schema_refusal(stream, fields)
                        if refusal is None:
                            copies.append(fields)
                        else:
                            refused.append((fields, refusal))
                if records:
                    if copies:
                        self.append(stream, copies)
                    if refused:
                        self._refused_copies(queue, source, refused)
                    copied = records[-1].offset + 1
                    stream.log_op(["q.subpos", sub.source, copied, stream.data.next_offset])
                    more = more or copied < end
        if more:
            self.server.barrier.schedule()

    def _refused_copies(
        self, queue: Queue, source: Stream, refused: list[tuple[list[bytes], PayloadError]]
    ) -> None:
        """Fan-out copies the subscriber's schema refused: never appended to it, but
        sent to its DLQ (with the refusal in `schema_error`; not dead letters: not
        counted in `dead_lettered`) when the DLQ takes them, else
        dropped (also when copying flows from the DLQ into the subscriber); counted in
        `schema_rejected` either way. The caller then logs the
        subscription's position past them, in the same commit."""
        stream = queue.stream
        fields, refusal = refused[0]
        first_id = field_value(fields, b"source_id") or b""
        _log_refusal("fan-out copy", stream, source, len(refused), first_id, refusal)
        dlq = self._dlq(queue)
        if dlq is not None and self.reaches(dlq.stream, stream):
            dlq = None  # its letters would be copied back here, refused again, forever
        if dlq is not None:
            letters = []
            for fields, refusal in refused:
                letter = [*fields, b"origin", stream.key, b"schema_error", str(refusal).encode()]
                if self.schema_refusal(dlq.stream, letter) is None:
                    letters.append(letter)
            if letters:
                self.append(dlq.stream, letters)
        stream.log_op(["q.rejected", len(refused)])

    def recover_subscription(self, queue: Queue, source_uid: int) -> None:
        """Find where copying from the source resumes: after the last copy this
        queue holds. The logged position is a hint, trusted only if the data log
        still reaches the offset it was logged at (then every copy before is there)."""
        stream = queue.stream
        sub = queue.subs[source_uid]
        source = self.keyspace.streams.get(source_uid)
        if source is None:
            stream.log_op(["q.unsub", source_uid])
            return
        if source.fault is not None:  # unavailable: recovered at the start after its repair
            return
        data = stream.data
        found: int | None = None
        if data.next_offset >= sub.hint_data_offset:
            found = _last_copy(stream, source, sub.hint_data_offset)
            position = sub.next if found is None else found
        else:
            found = _last_copy_backward(stream, source)
            position = sub.initial if found is None else found
        stream.log_op(["q.subpos", source_uid, position, data.next_offset])

    def subscribers(self, stream: Stream) -> list[Queue]:
        """The queues that subscribe to `stream`, unavailable ones too: a cycle through
        one would copy without end once it is repaired."""
        return [
            s.queue for s in self.keyspace.streams.values()
            if s.queue is not None and stream.uid in s.queue.subs
        ]

    def reaches(self, start: Stream, target: Stream) -> bool:
        """Does copying flow from `start` to `target` through subscriptions?"""
        seen: set[int] = set()
        todo = [start]
        while todo:
            stream = todo.pop()
            if stream is target:
                return True
            if stream.uid in seen:
                continue
            seen.add(stream.uid)
            todo.extend(q.stream for q in self.subscribers(stream))
        return False

    # -- push mode ------------------------------------------------------------------------

    def start_consuming(
        self, client: Client, queue: Queue, prefetch: int, visibility: int
    ) -> PushConsumer:
        consumer = PushConsumer(self, client, queue, prefetch, visibility)
        queue.consumers.append(consumer)
        self.consuming += 1
        self.to_serve.add(queue)
        self.server.barrier.schedule()
        return consumer

    def stop_consuming(self, consumer: PushConsumer, release: bool = True) -> None:
        """The consumer is gone: what it holds becomes visible at once."""
        queue = consumer.queue
        if consumer not in queue.consumers:
            return
        queue.consumers.remove(consumer)
        self.consuming -= 1
        held = sorted(consumer.held)
        consumer.held.clear()
        for offset in held:
            queue.holder.pop(offset, None)
        if not release or queue.stream.queue is not queue:
            return
        live = []
        for offset in held:
            value = queue.tracked.get(offset)
            if value is not None and unpack(value).state == IN_FLIGHT:
                live.append(offset)
        self._release(queue, live)
        self.server.barrier.schedule()

    def serve(self) -> None:
        """Push frames to consumers with room in their prefetch window. A consumer is
        given at most PREFETCH messages per call (one loop iteration): with VISIBILITY 0
        a delivery is due again at once, and serving it again in the same call would
        never end; the rest waits for the next iteration."""
        if self.subscribed:
            self.forward()
        given: dict[PushConsumer, int] = {}
        again: set[Queue] = set()
        while self.to_serve:
            queue = self.to_serve.pop()
            if queue.stream.queue is not queue:
                continue
            progress = True
            while progress:
                progress = False
                for consumer in list(queue.consumers):
                    room = consumer.prefetch - len(consumer.held)
                    quota = consumer.prefetch - given.get(consumer, 0)
                    if room <= 0 or consumer.client.closing:
                        continue
                    if quota <= 0:
                        again.add(queue)
                        continue
                    delivered = self.deliver_raw(
                        queue, min(room, quota, PUSH_BATCH), consumer.visibility
                    )
                    if not delivered:
                        break
                    given[consumer] = given.get(consumer, 0) + len(delivered)
                    self._push(consumer, delivered)
                    progress = True
        if again:
            self.to_serve |= again
            self.server.barrier.schedule()

    def _push(self, consumer: PushConsumer, delivered: list[Delivered]) -> None:
        queue = consumer.queue
        name = queue.stream.key
        for d in delivered:
            offset = d[0].offset
            consumer.held.add(offset)
            queue.holder[offset] = consumer
            consumer.client.push(Push([b"message", name, message(*d)]))


# -- helpers ------------------------------------------------------------------------------


def _log_refusal(
    what: str,
    target: Stream,
    source: Stream,
    count: int,
    first_id: bytes,
    refusal: PayloadError,
) -> None:
    """One line for `count` entries of `source` a schema kept out of `target`; the
    first one's ID there and its refusal."""
    logger.warning(
        "schema refused %s: target=%r from=%r count=%d first_id=%s error=%r",
        what,
        target.key,
        source.key,
        count,
        first_id.decode("ascii", "replace"),
        str(refusal),
    )


def stale(raw: bytes, why: str) -> CommandError:
    return CommandError(f"receipt {raw.decode('utf-8', 'replace')}: {why}", "STALE")


def message(rec: Any, receipt_: bytes, receives: int) -> Message:
    """The map Q.POP and push frames carry: id, receipt, payload, receives,
    pushed_at, then the entry's other fields."""
    fields = decode_fields(rec.payload)
    msg: Message = {b"id": ids.fmt(record_id(rec)), b"receipt": receipt_}
    rest: Message = {}
    for i in range(0, len(fields) - 1, 2):
        rest[fields[i]] = fields[i + 1]
    if b"payload" in rest:
        msg[b"payload"] = rest.pop(b"payload")
    msg[b"receives"] = receives
    # An entry ID's milliseconds are an unsigned 64-bit number (an XADD with an
    # explicit ID may pass 2^63 - 1, where RESP integers end).
    msg[b"pushed_at"] = rec.id_ms if rec.id_ms <= INT64_MAX else BigNumber(rec.id_ms)
    msg.update(rest)
    return msg


# The frame of `message` for the commonest entry, a lone payload field; the first
# argument is the map's head (RESP3) or the flat array's (RESP2).
_PAYLOAD_ONLY = (
    b"%b$2\r\nid\r\n$%d\r\n%b\r\n$7\r\nreceipt\r\n$%d\r\n%b\r\n"
    b"$7\r\npayload\r\n$%d\r\n%b\r\n$8\r\nreceives\r\n:%d\r\n$9\r\npushed_at\r\n:%d\r\n"
)


def messages_reply(protocol: int, delivered: list[Delivered]) -> Encoded:
    """The list of `message` maps of `delivered`, framed for `protocol`: the bytes
    encoding that list gives (tests compare), without building the maps for the
    entries that hold only a payload."""
    out = bytearray(b"*%d\r\n" % len(delivered))
    head = b"%5\r\n" if protocol == 3 else b"*10\r\n"
    for rec, receipt_, receives in delivered:
        fields = decode_fields(rec.payload)
        if len(fields) == 2 and fields[0] == b"payload" and rec.id_ms <= INT64_MAX:
            sid = b"%d-%d" % (rec.id_ms, rec.id_seq)
            payload = fields[1]
            out += _PAYLOAD_ONLY % (
                head, len(sid), sid, len(receipt_), receipt_,
                len(payload), payload, receives, rec.id_ms,
            )  # fmt: skip
        else:
            encode_into(out, message(rec, receipt_, receives), protocol)
    return Encoded(bytes(out))


def field_value(fields: list[bytes], name: bytes) -> bytes | None:
    for i in range(0, len(fields) - 1, 2):
        if fields[i] == name:
            return fields[i + 1]
    return None


def without(fields: list[bytes], names: tuple[bytes, ...]) -> list[bytes]:
    out: list[bytes] = []
    for i in range(0, len(fields) - 1, 2):
        if fields[i] not in names:
            out += (fields[i], fields[i + 1])
    return out


def _copy_position(source: Stream, payload: bytes) -> int | None:
    """The source offset after the entry a copy was made of, if it is a copy (an
    entry whose payload does not decode is none: recovery never stops on it)."""
    try:
        fields = decode_fields(payload)
    except ValueError:
        return None
    raw = field_value(fields, b"source_id")
    if raw is None or field_value(fields, b"source") != source.key:
        return None
    try:
        sid = ids.parse(raw, strict=True)
    except CommandError:
        return None
    return source.data.offset_of_id(*ids.split(sid)) + 1


def _last_copy(stream: Stream, source: Stream, offset: int) -> int | None:
    found = None
    data = stream.data
    offset = max(offset, data.start_offset)
    while batch := data.read(offset, count_max=1024):
        for rec in batch:
            if rec.flags & FLAG_ENTRY:
                position = _copy_position(source, rec.payload)
                if position is not None:
                    found = position
        offset = batch[-1].offset + 1
    return found


def _last_copy_backward(stream: Stream, source: Stream) -> int | None:
    data = stream.data
    offset = data.next_offset - 1
    while offset >= data.start_offset:
        batch = data.read_reverse(offset, count_max=1024)
        if not batch:
            break
        for rec in batch:
            position = _copy_position(source, rec.payload)
            if position is not None:
                return position
        offset = batch[-1].offset - 1
    return None


def settings_reply(settings: Settings) -> dict[bytes, Any]:
    return {name.encode(): getattr(settings, name) for name in Settings.NAMES}
