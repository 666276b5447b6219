"""Dead letters: a message received MAXRECEIVES times leaves its queue for the queue's
dead-letter queue (DLQ), and Q.REDRIVE moves dead letters back. Part of the queue
service (narad/queues/service.py).

Dead-lettering appends the message to the DLQ with its origin, then the source logs
it as dead. A crash between the two may leave a copy in the DLQ while the source
still holds the message (dead-lettered twice later): never lost.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from narad.errors import CommandError
from narad.log import decode_fields
from narad.queues.appends import (
    ORIGIN_FIELDS,
    ServerAppends,
    field_value,
    log_refusal,
    without,
)
from narad.queues.queue import read_records, record_id, unpack
from narad.streams import ids

if TYPE_CHECKING:
    from narad.clock import Clock
    from narad.queues.queue import Queue
    from narad.schema.errors import PayloadError

logger = logging.getLogger("narad.queues")


class DeadLetters(ServerAppends):
    """The queue service's dead-lettering and redriving."""

    clock: Clock

    if TYPE_CHECKING:  # the service's other parts

        def get(self, db: int, key: bytes) -> Queue | None: ...
        def _expire(self, queue: Queue, now: int) -> None: ...

    def dead_letter(self, queue: Queue, offsets: list[int]) -> None:
        """Dead-letter messages of `queue`: appended to its DLQ, or dropped (and
        counted in `dropped`) when it has none, the DLQ is gone, or the DLQ's schema
        refuses the letter."""
        stream = queue.stream
        dlq = self._dlq(queue)
        if dlq is None:
            if queue.settings.dlq:
                logger.warning(
                    "event=dead_letters_dropped queue=%s dlq=%s count=%d: the dead-letter "
                    "queue is gone or unavailable",
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
            log_refusal("dead letter", dlq.stream, stream, len(refused), *first)
            stream.log_op(["q.dead", 1, refused])

    def _dlq(self, queue: Queue) -> Queue | None:
        """The queue's dead-letter queue, if it has one that still exists and is
        available, its schema state usable (else it takes no letters: they are
        dropped, as for a DLQ that is gone)."""
        if not queue.settings.dlq:
            return None
        stream = self.keyspace.dbs[queue.stream.db].get(queue.settings.dlq)
        dlq: Queue | None = None if stream is None else stream.queue
        if dlq is None or dlq is queue or self.schema_faulted(dlq.stream):
            return None
        return dlq

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
