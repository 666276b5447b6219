"""Fan-out: a queue that subscribes to a source (a queue or a stream) gets a copy of
each of its messages. Part of the queue service (narad/queues/service.py).

After every commit, each subscription copies the source's *committed* records
(durable under `fsync always`, appended under `everysec` / `no`) that it has not
copied yet. Each copy carries `source` and `source_id` (SOURCE_FIELDS); on open the
position is recomputed from the copies themselves (see `recover_subscription`), which
makes the copy exactly-once across crashes.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from narad.errors import CommandError
from narad.log import FLAG_ENTRY, decode_fields
from narad.queues.appends import (
    SOURCE_FIELDS,
    ServerAppends,
    field_value,
    log_refusal,
    without,
)
from narad.queues.queue import record_id
from narad.streams import ids

if TYPE_CHECKING:
    from collections.abc import Collection

    from narad.events import Commits
    from narad.log import Log
    from narad.queues.queue import Queue
    from narad.schema.errors import PayloadError
    from narad.streams.stream import Stream

FORWARD_BATCH = 512  # records copied per subscription per loop iteration


def as_message(fields: list[bytes]) -> list[bytes]:
    """The fields of a copy: the source entry's when it has a `payload` (a queue's
    message), else one `payload` holding the entry's fields as a JSON object of
    strings (a plain stream's entry; bytes that are not UTF-8 read as U+FFFD, a
    repeated name keeps its last value), so that every message a subscriber delivers
    has a payload. It is the document a schema judges an XADD entry by."""
    if b"payload" in fields[0::2]:
        return fields
    document = {
        fields[i].decode("utf-8", "replace"): fields[i + 1].decode("utf-8", "replace")
        for i in range(0, len(fields) - 1, 2)
    }
    return [b"payload", json.dumps(document, ensure_ascii=False,
                                   separators=(",", ":")).encode()]


class FanOut(ServerAppends):
    """The queue service's copying from sources into their subscribers."""

    commits: Commits
    # The queues that subscribe to a source: forward copies into them after each
    # commit. It may hold a queue that no longer subscribes (forward drops it).
    subscribing: set[Queue]

    if TYPE_CHECKING:  # the service's other parts

        def _dlq(self, queue: Queue) -> Queue | None: ...

    @property
    def subscribed(self) -> bool:
        return bool(self.subscribing)

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
                        fields = as_message(without(decode_fields(rec.payload), SOURCE_FIELDS))
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
            self.commits.schedule()

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
        log_refusal("fan-out copy", stream, source, len(refused), first_id, refusal)
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
            s.queue
            for s in self.keyspace.streams.values()
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
