"""Replies of stream entries framed straight from the entry payloads read from the
log, without a Python list per entry or per field: the read paths (XREADGROUP,
XRANGE, XREAD) send what they read and decode nothing else.

An entry's reply is `[id, [field, value, ...]]`, arrays of bulk strings, the same
in RESP2 and RESP3, so the frame is built once and sent as `Encoded`. The payload
layout is the entry payload of docs/log-format.md (narad.log.format.encode_fields).
`entries_frame` has a compiled twin in narad/_speedups/resp.pyx, picked at import
unless NARAD_PURE=1; both give the same bytes and the same errors.
"""

from __future__ import annotations

from collections.abc import Sequence

from narad._speedups import load
from narad.log.format import pure_decode_fields
from narad.resp import Encoded

U64_MAX = (1 << 64) - 1


def pure_entries_frame(entries: Sequence[tuple[int, bytes]]) -> bytes:
    """The array frame of `entries`, (stream ID, entry payload) pairs, each as
    [b"ms-seq", [field, value, ...]]. ValueError for a malformed payload."""
    out = bytearray(b"*%d\r\n" % len(entries))
    for sid, payload in entries:
        fields = pure_decode_fields(payload)
        text = b"%d-%d" % (sid >> 64, sid & U64_MAX)
        out += b"*2\r\n$%d\r\n%b\r\n*%d\r\n" % (len(text), text, len(fields))
        for item in fields:
            out += b"$%d\r\n%b\r\n" % (len(item), item)
    return bytes(out)


entries_frame = pure_entries_frame
_twin = load("resp")
if _twin is not None:
    entries_frame = _twin.entries_frame


def entries_reply(entries: Sequence[tuple[int, bytes]]) -> Encoded:
    return Encoded(entries_frame(entries))
