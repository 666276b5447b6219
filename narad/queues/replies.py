"""The frames of queue replies: the message map that Q.POP and push frames carry for
each delivered message, and a queue's settings as Q.CONFIG GET shows them.

`messages_reply` frames a whole Q.POP reply straight from the records: its bytes are
the ones encoding the list of `message` maps gives, in RESP2 and RESP3, for any entry
(tests/queues/test_messages_reply.py compares them).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from narad.log import decode_fields
from narad.queues.queue import Settings, record_id
from narad.resp import BigNumber, Encoded, encode_into
from narad.streams import ids

if TYPE_CHECKING:
    from narad.queues.delivery import Delivered

Message = dict[bytes, Any]
INT64_MAX = (1 << 63) - 1


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


def settings_reply(settings: Settings) -> dict[bytes, Any]:
    return {name.encode(): getattr(settings, name) for name in Settings.NAMES}
