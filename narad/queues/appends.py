"""What the server appends to streams on its own account, not a producer's: fan-out
copies (narad/queues/fanout.py), dead letters and redriven messages
(narad/queues/dead_letters.py); and `append`, the one way these and Q.PUSH add
entries.

- Schemas: what the server appends on its own is judged by the target's schema first
  (`schema_refusal`), with the produce path's validator; docs/queues.md says what a
  refused entry becomes.
- SOURCE_FIELDS (on a copy) and ORIGIN_FIELDS (on a dead letter) are the server's own
  fields: set aside when an entry is judged, dropped when the server sets them anew
  and when it redrives a dead letter.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from narad.errors import IDS_EXHAUSTED, CommandError
from narad.schema.errors import PayloadError
from narad.schema.keyspace import Unavailable
from narad.streams import ids

if TYPE_CHECKING:
    from collections.abc import Callable

    from narad.events import KeyEvents
    from narad.keyspace import Keyspace
    from narad.streams.stream import Stream

logger = logging.getLogger("narad.queues")

SOURCE_FIELDS = (b"source", b"source_id")
ORIGIN_FIELDS = (
    b"origin", b"origin_id", b"origin_receives", b"first_received_at", b"schema_error",
)  # fmt: skip


class ServerAppends:
    """The queue service's appends: their schema judgement and the append itself."""

    keyspace: Keyspace
    events: KeyEvents

    written: Callable[[Stream], None]  # its push consumers are told (narad/queues/push.py)

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

    def append(self, stream: Stream, entries: list[list[bytes]]) -> list[int]:
        """Append entries with automatic IDs, all or none; their IDs. WATCHers,
        blocked readers and push consumers of the stream are told once."""
        try:
            first = stream.add_auto(entries)
        except ids.IdsExhausted:
            raise CommandError(IDS_EXHAUSTED) from None
        sids = [first + i for i in range(len(entries))]
        self.events.written(stream.db, stream.key)
        self.written(stream)
        return sids


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


def log_refusal(
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
        "event=schema_refused what=%s target=%s from=%s count=%d first_id=%s error=%s",
        what,
        target.key,
        source.key,
        count,
        first_id.decode("ascii", "replace"),
        str(refusal),
    )
