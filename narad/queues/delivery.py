"""Delivering queue messages, and what time does to them. Part of the queue service
(narad/queues/service.py), on the event loop.

- Delivering (Q.POP, push consumers): choose visible messages, log one deliver op,
  read the records; each message goes out with a receipt that names its delivery.
  Q.ACK, Q.NACK and Q.TOUCH name a delivery by its receipt: one of an older delivery
  of the message is refused (STALE).
- The timer: one loop timer (Timers) at the earliest deadline or delay of any queue;
  when it fires, due messages become visible (or are dead-lettered) and waiters are
  woken. A frozen clock arms no timer: it moves only by DEBUG CLOCK, which ticks.
  The clock moves with elapsed time, not with the wall clock (narad/clock.py): a step
  of the wall clock is only logged.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from narad.errors import CommandError
from narad.log import Record
from narad.queues.queue import (
    IN_FLIGHT,
    STALE,
    parse_receipt,
    read_records,
    receipt,
    receives_of,
    unpack,
)

if TYPE_CHECKING:
    import asyncio
    from collections.abc import Iterator

    from narad.clock import Clock
    from narad.events import Commits, KeyEvents, Timers
    from narad.queues.queue import Queue

Delivered = tuple[Record, bytes, int]  # a delivered message: record, receipt, receives

# A step of the wall clock at least this large is logged (event=wall_clock_jump).
JUMP_LOGGED_MS = 1000

logger = logging.getLogger("narad.queues")


class Delivery:
    """The queue service's delivering and its timer."""

    clock: Clock
    events: KeyEvents
    commits: Commits
    timers: Timers
    to_serve: set[Queue]
    _timer: asyncio.TimerHandle | None
    _timer_due: int

    if TYPE_CHECKING:  # the service's other parts

        def queues(self) -> Iterator[Queue]: ...
        def dead_letter(self, queue: Queue, offsets: list[int]) -> None: ...
        def _settled(self, queue: Queue, offsets: list[int]) -> None: ...

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

    def peek(self, queue: Queue, count: int) -> list[tuple[Record, int]]:
        """Up to `count` messages Q.POP would deliver next (visible now, as the timer
        last left them), each as its record and receive count so far; nothing is
        delivered and no op is logged."""
        offsets, _ = queue.choose(count)
        queue.unchoose(offsets)
        tracked = queue.tracked
        return [
            (rec, receives_of(tracked[rec.offset]) if rec.offset in tracked else 0)
            for rec in read_records(queue.stream, offsets)
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

    def _resolve(self, queue: Queue, raw: bytes, in_flight: bool = False) -> tuple[int, int | None]:
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

    # -- time ---------------------------------------------------------------------------

    def arm(self, due: int) -> None:
        """Make sure the timer fires by `due` (clock ms)."""
        if self.clock.frozen_ms is not None:
            return  # a frozen clock only moves by DEBUG CLOCK, which ticks
        if self._timer is not None and self._timer_due <= due:
            return
        if self._timer is not None:
            self._timer.cancel()
        delay = max(0, due - self.clock.now_ms()) / 1000
        self._timer_due = due
        self._timer = self.timers.call_later(delay, self.tick)

    def tick(self) -> None:
        """Deadlines and delays due now take effect in every queue."""
        self._timer = None
        self.commits.apply_held_back()
        clock = self.clock
        jump = clock.wall_jump_ms(JUMP_LOGGED_MS)
        if jump:
            logger.warning(
                "event=wall_clock_jump jump_ms=%d queue_clock_skew_ms=%d", jump, clock.skew_ms()
            )
        now = clock.now_ms()
        earliest = None
        for queue in list(self.queues()):
            self._expire(queue, now)
            queue.dedup_purge(now)
            due = queue.next_due()
            if due is not None and (earliest is None or due < earliest):
                earliest = due
        if earliest is not None:
            self.arm(earliest)
        self.commits.schedule()

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
        self.events.wake(stream.db, stream.key)
        if queue.consumers:
            self.to_serve.add(queue)
            self.commits.schedule()


def stale(raw: bytes, why: str) -> CommandError:
    return CommandError(f"receipt {raw.decode('utf-8', 'replace')}: {why}", "STALE")
