"""Entry IDs: XACK's batch parser and the ID blobs of state-log ops, pure Python and
the compiled twin (narad/_speedups/_ids.pyx) giving the same answers and errors."""

from __future__ import annotations

import os

import pytest
from hypothesis import given
from hypothesis import strategies as st

from narad._speedups import load
from narad.errors import CommandError
from narad.streams import ids

TWIN = load("_ids")
PARSERS = [pytest.param(ids.pure_parse_all_strict, id="pure")]
BLOBS = [pytest.param((ids.pure_pack_all, ids.pure_unpack_all), id="pure")]
if TWIN is not None:
    PARSERS.append(pytest.param(TWIN.parse_all_strict, id="cython"))
    BLOBS.append(pytest.param((TWIN.pack_all, TWIN.unpack_all), id="cython"))

U64 = st.integers(0, ids.U64_MAX)
# Spellings near every rule: digits with leading zeros or too many, signs, blanks,
# the range markers, a missing or repeated dash, non-ASCII digits.
ID_TEXT = st.one_of(
    st.builds(lambda ms, seq: b"%d-%d" % (ms, seq), U64, U64),
    st.builds(lambda ms, seq: b"%020d-%d" % (ms, seq), U64, U64),
    st.builds(lambda ms: b"%d" % ms, st.integers(0, 2**65)),
    st.builds(lambda ms, seq: b"%d-%d" % (ms, seq), st.integers(0, 2**65), st.integers(0, 2**65)),
    st.sampled_from([b"-", b"+", b"", b"1-", b"-1", b"1--1", b"1-2-3", b" 1-2", b"+1-2", b"1-+2"]),
    st.sampled_from(["\u0661-1".encode(), b"18446744073709551616-0", b"0-18446744073709551615"]),
    st.binary(max_size=8),
)


def _outcome(parse, args):  # type: ignore[no-untyped-def]
    try:
        return parse(args)
    except CommandError as exc:
        return (exc.code, exc.message)


def test_compiled_twin_is_built_when_required() -> None:
    if os.environ.get("NARAD_REQUIRE_SPEEDUPS") != "1":
        pytest.skip("NARAD_REQUIRE_SPEEDUPS is not set")
    if os.environ.get("NARAD_PURE", "") in ("", "0"):
        assert TWIN is not None and ids.parse_all_strict is TWIN.parse_all_strict


@pytest.mark.parametrize("parse", PARSERS)
def test_parse_all_strict_reads_each_id_as_parse_does(parse) -> None:  # type: ignore[no-untyped-def]
    assert parse([b"1-2", b"0-0", b"18446744073709551615-18446744073709551615"]) == [
        ids.make(1, 2),
        0,
        ids.ID_MAX,
    ]
    assert parse([b"5"]) == [ids.make(5, 0)]
    assert parse([]) == []
    for bad in ([b"-"], [b"+"], [b"1-x"], [b"18446744073709551616-0"], [b"1-2", b"x"]):
        with pytest.raises(CommandError, match="Invalid stream ID"):
            parse(bad)


@given(st.lists(ID_TEXT, max_size=6))
def test_parse_all_strict_twin_agrees_with_parse(args) -> None:  # type: ignore[no-untyped-def]
    expected = _outcome(lambda a: [ids.parse(x, strict=True) for x in a], args)
    assert _outcome(ids.pure_parse_all_strict, args) == expected
    if TWIN is not None:
        assert _outcome(TWIN.parse_all_strict, args) == expected


@pytest.mark.parametrize("blobs", BLOBS)
def test_blobs_are_16_big_endian_bytes_per_id(blobs) -> None:  # type: ignore[no-untyped-def]
    pack_all, unpack_all = blobs
    sids = [ids.make(1, 2), 0, ids.ID_MAX]
    blob = pack_all(sids)
    assert blob == b"".join(sid.to_bytes(16, "big") for sid in sids)
    assert pack_all(iter(sids)) == blob
    assert unpack_all(blob) == sids
    assert unpack_all(bytearray(blob)) == sids
    assert pack_all([]) == b"" and unpack_all(b"") == []
    with pytest.raises(ValueError, match="whole number"):
        unpack_all(blob[:-1])
    for out_of_range in (-1, ids.ID_MAX + 1):
        with pytest.raises(OverflowError):
            pack_all([out_of_range])


@given(st.lists(st.integers(0, ids.ID_MAX), max_size=20))
def test_blob_twin_agrees(sids) -> None:  # type: ignore[no-untyped-def]
    blob = ids.pure_pack_all(sids)
    assert ids.pure_unpack_all(blob) == sids
    if TWIN is not None:
        assert TWIN.pack_all(sids) == blob
        assert TWIN.unpack_all(blob) == sids
