"""Stream entry IDs: `<ms>-<seq>`, both unsigned 64-bit, compared as pairs.

Inside Narad an entry ID is one int, `ms << 64 | seq`, so IDs compare, sort and hash
as plain ints and cost one object each. Parsing follows Redis 7.0's rules and texts.
"""

from __future__ import annotations

import time

from narad.errors import invalid_stream_id

U64_MAX = (1 << 64) - 1
ID_MAX = (U64_MAX << 64) | U64_MAX
SEQ_MASK = U64_MAX


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


def next_auto(last: int) -> int | None:
    """The ID `*` gives after `last`: the current millisecond with sequence 0, or
    `last` + 1 within the same (or a later) millisecond; None at the very last ID."""
    ms = time.time_ns() // 1_000_000
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
