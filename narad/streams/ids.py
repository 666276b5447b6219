"""Stream entry IDs: `<ms>-<seq>`, both unsigned 64-bit, compared as pairs.

Inside Narad an entry ID is one int, `ms << 64 | seq`, so IDs compare, sort and hash
as plain ints and cost one object each. Parsing follows Redis 7.0's rules and texts.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

from narad._speedups import load
from narad.errors import IDS_EXHAUSTED, invalid_stream_id

U64_MAX = (1 << 64) - 1
ID_MAX = (U64_MAX << 64) | U64_MAX
SEQ_MASK = U64_MAX
ID_BYTES = 16  # an ID stored in state-log ops and snapshots: 16 bytes, big-endian


def make(ms: int, seq: int) -> int:
    return (ms << 64) | seq


def split(sid: int) -> tuple[int, int]:
    return sid >> 64, sid & SEQ_MASK


def fmt(sid: int) -> bytes:
    return b"%d-%d" % (sid >> 64, sid & SEQ_MASK)


def _u64(text: bytes) -> int | None:
    """Redis's string2ull: leading blanks and one '+' allowed, then digits, <= 2^64-1."""
    if text.isdigit():  # the usual spelling
        value = int(text)
        return value if value <= U64_MAX else None
    text = text.lstrip(b" \t\n\r\v\f")
    if text[:1] == b"+":
        text = text[1:]
    if not text or not text.isdigit():
        return None
    value = int(text)
    return value if value <= U64_MAX else None


def parse(arg: bytes, missing_seq: int = 0, strict: bool = False) -> int:
    """An ID argument: `ms-seq`, or `ms` alone with `missing_seq` as its sequence.

    `-` and `+` mean the smallest and largest IDs unless `strict` (then they are
    invalid, as for XADD, XSETID, XACK and XCLAIM).
    """
    if not strict and len(arg) == 1:
        if arg == b"-":
            return 0
        if arg == b"+":
            return ID_MAX
    ms_text, sep, seq_text = arg.partition(b"-")
    ms = _u64(ms_text)
    seq = _u64(seq_text) if sep else missing_seq
    if ms is None or seq is None:
        raise invalid_stream_id()
    return make(ms, seq)


def parse_all_strict(args: list[bytes]) -> list[int]:
    """`parse(arg, strict=True)` of each argument (XACK's IDs), the all-digit
    `ms-seq` spelling without a call per ID."""
    out = []
    for arg in args:
        ms_text, sep, seq_text = arg.partition(b"-")
        if sep and ms_text.isdigit() and seq_text.isdigit():
            ms, seq = int(ms_text), int(seq_text)
            if ms <= U64_MAX and seq <= U64_MAX:
                out.append(ms << 64 | seq)
                continue
        out.append(parse(arg, strict=True))
    return out


def pack_all(sids: Iterable[int]) -> bytes:
    """The IDs as one blob of ID_BYTES each, in order (state-log ops, snapshots)."""
    return b"".join([sid.to_bytes(ID_BYTES, "big") for sid in sids])


def unpack_all(blob: bytes) -> list[int]:
    """The IDs of a `pack_all` blob."""
    if len(blob) % ID_BYTES:
        raise ValueError("an ID blob is a whole number of IDs")
    from_bytes = int.from_bytes
    return [from_bytes(blob[i : i + ID_BYTES], "big") for i in range(0, len(blob), ID_BYTES)]


def parse_for_add(arg: bytes) -> tuple[int, bool]:
    """XADD's explicit ID: (ID, whether the sequence was given); `ms-*` leaves it open."""
    ms_text, sep, seq_text = arg.partition(b"-")
    if sep and seq_text == b"*":
        ms = _u64(ms_text)
        if ms is None:
            raise invalid_stream_id()
        return make(ms, 0), False
    return parse(arg, strict=True), True


def next_after(sid: int) -> int | None:
    """The smallest ID above `sid`, or None at the very last ID."""
    return None if sid == ID_MAX else sid + 1


class IdsExhausted(ValueError):
    """The stream's last ID leaves no room for the entries to add."""

    def __init__(self) -> None:
        super().__init__(IDS_EXHAUSTED)


def next_auto(last: int, now_ms: int | None = None) -> int | None:
    """The ID `*` gives after `last`: the current millisecond (`now_ms`, else the
    clock's) with sequence 0, or `last` + 1 within the same (or a later)
    millisecond; None at the very last ID."""
    ms = time.time_ns() // 1_000_000 if now_ms is None else now_ms
    return ms << 64 if ms > last >> 64 else next_after(last)


def parse_range_bound(arg: bytes, low: bool) -> int | None:
    """An XRANGE / XREVRANGE / XPENDING bound; `(` makes it exclusive.

    Returns the inclusive ID, or None when an exclusive bound leaves nothing.
    """
    if arg[:1] == b"(":
        if len(arg) == 1:
            raise invalid_stream_id()
        sid = parse(arg[1:], 0 if low else U64_MAX, strict=True)
        if low:
            return None if sid == ID_MAX else sid + 1
        return None if sid == 0 else sid - 1
    return parse(arg, 0 if low else U64_MAX)


# The pure-Python functions stay importable under these names for the tests that
# compare them with the compiled twin (narad/_speedups/_ids.pyx).
pure_parse_all_strict = parse_all_strict
pure_pack_all = pack_all
pure_unpack_all = unpack_all

_twin = load("_ids")
if _twin is not None:
    parse_all_strict = _twin.parse_all_strict
    pack_all = _twin.pack_all
    unpack_all = _twin.unpack_all


# -- in ops: an ID as 16 bytes, big-endian (docs/log-format.md) ---------------------


def pack_id(sid: int) -> bytes:
    return sid.to_bytes(16, "big")


def unpack_id(raw: bytes) -> int:
    return int.from_bytes(raw, "big")
