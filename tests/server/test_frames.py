"""Stream entries framed from their payloads: the compiled twin and the pure
function give the same bytes and errors, and the frame is what the generic
encoder makes of [[id, [field, value, ...]], ...] in both protocols."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from narad._speedups import load
from narad.commands import frames
from narad.log.format import pure_encode_fields
from narad.resp import encode

TWIN = load("resp")
IMPLS = [pytest.param(frames.pure_entries_frame, id="pure")]
if TWIN is not None:
    IMPLS.append(pytest.param(TWIN.entries_frame, id="cython"))

entries_st = st.lists(
    st.tuples(
        st.one_of(st.integers(0, (1 << 128) - 1), st.sampled_from([0, (1 << 128) - 1])),
        st.lists(st.binary(max_size=30), max_size=8),
    ),
    max_size=10,
)


@pytest.mark.parametrize("entries_frame", IMPLS)
@given(entries=entries_st)
def test_frame_is_the_generic_encoding(entries_frame, entries) -> None:  # type: ignore[no-untyped-def]
    raw = [(sid, pure_encode_fields(fields)) for sid, fields in entries]
    value = [[b"%d-%d" % (sid >> 64, sid & (2**64 - 1)), fields] for sid, fields in entries]
    frame = entries_frame(raw)
    assert frame == encode(value, 2) == encode(value, 3)
    assert encode([b"k", frames.entries_reply(raw)], 3) == encode([b"k", value], 3)


@pytest.mark.parametrize("entries_frame", IMPLS)
@pytest.mark.parametrize(
    ("payload", "message"),
    [
        (b"", "entry payload is truncated"),
        (b"\x01\x00\x00\x00", "entry payload is truncated"),
        (b"\x01\x00\x00\x00\x05\x00\x00\x00ab", "entry payload is truncated"),
        (b"\x00\x00\x00\x00x", "entry payload has trailing bytes"),
    ],
)
def test_malformed_payloads_are_refused(entries_frame, payload: bytes, message: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError, match=message):
        entries_frame([(1, pure_encode_fields([b"f", b"v"])), (2, payload)])
