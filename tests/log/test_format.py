"""Record framing: the worked example of docs/log-format.md, and the pure-Python
and compiled paths giving identical bytes and identical scans."""

from __future__ import annotations

import itertools
import os
import struct
from pathlib import Path

import pytest
from crc32c import crc32c
from hypothesis import given
from hypothesis import strategies as st

from narad._speedups import load
from narad.log import format

TWIN = load("_format")
IMPLS = [
    pytest.param(
        (
            format.pure_encode_into,
            format.pure_scan,
            format.pure_encode_fields,
            format.pure_decode_fields,
        ),
        id="pure",
    )
]
if TWIN is not None:
    IMPLS.append(
        pytest.param(
            (TWIN.encode_into, TWIN.scan, TWIN.encode_fields, TWIN.decode_fields), id="cython"
        )
    )


def test_compiled_twin_is_built_when_required() -> None:
    """CI sets NARAD_REQUIRE_SPEEDUPS=1 so that the compiled path is really tested."""
    if os.environ.get("NARAD_REQUIRE_SPEEDUPS") != "1":
        pytest.skip("NARAD_REQUIRE_SPEEDUPS is not set")
    if os.environ.get("NARAD_PURE", "") not in ("", "0"):
        assert not format.SPEEDUPS
    else:
        assert TWIN is not None and format.SPEEDUPS


@pytest.mark.parametrize("impl", IMPLS)
def test_worked_example_matches_the_spec(impl) -> None:  # type: ignore[no-untyped-def]
    encode_into, scan, encode_fields, _ = impl
    payload = encode_fields([b"k", b"v"])
    assert payload.hex() == "02000000010000006b0100000076"
    buf = bytearray()
    encode_into(buf, 7, 1700000000123, 2, format.FLAG_ENTRY, 1700000000123, 0, payload)
    expected = (
        "38000000"
        "80472b8b"
        "01"
        "01"
        "02000000"
        "0700000000000000"
        "7b68e5cf8b010000"
        "7b68e5cf8b010000"
        "0000000000000000"
        "020000000100000"
        "06b0100000076"
    )
    assert buf.hex() == expected
    assert crc32c(bytes(buf[8:])) == int.from_bytes(buf[4:8], "little")
    records, end, status, _ = scan(bytes(buf), 0, 100, 10)
    assert status == format.SCAN_OK and end == 60
    assert records == [format.Record(7, 1700000000123, 2, 1, 1700000000123, 0, payload, 100)]


@pytest.mark.parametrize("impl", IMPLS)
def test_scan_reports_short_and_bad(impl) -> None:  # type: ignore[no-untyped-def]
    encode_into, scan, _, _ = impl
    buf = bytearray()
    for i in range(3):
        encode_into(buf, i, 0, 0, 0, 0, 0, b"payload-%d" % i)
    one = len(buf) // 3
    # Cut at every byte of the last record: two good records, then SHORT.
    for cut in range(2 * one + 1, 3 * one):
        records, end, status, detail = scan(bytes(buf[:cut]), 0, 0, 100)
        assert [r.offset for r in records] == [0, 1] and end == 2 * one
        assert status == format.SCAN_SHORT
        assert detail in (format.HEADER_BYTES, one)
    # A flipped payload bit in the middle record.
    bad = bytearray(buf)
    bad[one + format.HEADER_BYTES] ^= 0x01
    records, end, status, detail = scan(bytes(bad), 0, 0, 100)
    assert [r.offset for r in records] == [0] and end == one
    assert (status, detail) == (format.SCAN_BAD, "CRC mismatch")
    # A length below the minimum.
    bad = bytearray(buf)
    bad[one : one + 4] = (3).to_bytes(4, "little")
    assert scan(bytes(bad), 0, 0, 100)[2:] == (format.SCAN_BAD, "bad length 3")
    # An unknown version (CRC fixed up so that only the version is wrong).
    bad = bytearray(buf)
    bad[one + 8] = 9
    bad[one + 4 : one + 8] = crc32c(bytes(bad[one + 8 : 2 * one])).to_bytes(4, "little")
    assert scan(bytes(bad), 0, 0, 100)[2:] == (format.SCAN_BAD, "unknown format version 9")
    # count_max stops early with SCAN_OK.
    records, end, status, _ = scan(bytes(buf), 0, 0, 2)
    assert len(records) == 2 and end == 2 * one and status == format.SCAN_OK


@pytest.mark.parametrize("impl", IMPLS)
def test_decode_fields_rejects_malformed(impl) -> None:  # type: ignore[no-untyped-def]
    _, _, encode_fields, decode_fields = impl
    good = encode_fields([b"a", b"", b"ccc", b"d"])
    assert decode_fields(good) == [b"a", b"", b"ccc", b"d"]
    for bad in (b"", b"\x01", good[:-1], good + b"x", b"\x05\x00\x00\x00"):
        with pytest.raises(ValueError):
            decode_fields(bad)


record = st.tuples(
    st.integers(0, 2**64 - 1),
    st.integers(0, 2**64 - 1),
    st.integers(0, 2**32 - 1),
    st.integers(0, 255),
    st.integers(0, 2**64 - 1),
    st.integers(0, 2**64 - 1),
    st.binary(max_size=300),
)


@pytest.mark.skipif(TWIN is None, reason="compiled twin not built")
@given(st.lists(record, max_size=20), st.integers(0, 2000))
def test_twin_and_pure_agree(records, cut) -> None:  # type: ignore[no-untyped-def]
    assert TWIN is not None
    pure, fast = bytearray(), bytearray()
    for r in records:
        format.pure_encode_into(pure, *r)
        TWIN.encode_into(fast, *r)
    assert pure == fast
    data = bytes(pure[:cut])
    assert format.pure_scan(data, 0, 5, 1000) == TWIN.scan(data, 0, 5, 1000)
    garbled = bytearray(pure)
    if garbled:
        garbled[cut % len(garbled)] ^= 0x40
    assert format.pure_scan(bytes(garbled), 0, 0, 1000) == TWIN.scan(bytes(garbled), 0, 0, 1000)


@pytest.mark.skipif(TWIN is None, reason="compiled twin not built")
@given(st.lists(st.binary(max_size=50), max_size=10))
def test_fields_twin_and_pure_agree(fields) -> None:  # type: ignore[no-untyped-def]
    assert TWIN is not None
    encoded = format.pure_encode_fields(fields)
    assert TWIN.encode_fields(fields) == encoded
    assert TWIN.decode_fields(encoded) == format.pure_decode_fields(encoded) == fields


# Index entries drawn near each other so that ties and near-misses are common.
index_entry = st.tuples(*[st.sampled_from([0, 1, 2, 2**63, 2**64 - 1])] * 4)


def _ordered_by_definition(entries: list[tuple[int, int, int, int]]) -> bool:
    return all(
        b[0] > a[0] and b[1] > a[1] and (b[2], b[3]) >= (a[2], a[3])
        for a, b in itertools.pairwise(entries)
    )


@given(st.lists(index_entry, max_size=8))
def test_index_ordered_is_its_definition(entries) -> None:  # type: ignore[no-untyped-def]
    data = b"".join(struct.pack("<QQQQ", *e) for e in entries)
    expected = _ordered_by_definition(entries)
    assert format.pure_index_ordered(data) is expected
    if TWIN is not None:
        assert TWIN.index_ordered(data) is expected


def test_index_ordered_accepts_a_real_index() -> None:
    entries = [(i * 10, i * 4096, 1700000000000 + i // 3, i % 3) for i in range(1000)]
    data = b"".join(struct.pack("<QQQQ", *e) for e in entries)
    assert format.pure_index_ordered(data) and format.index_ordered(data)


@pytest.mark.skipif(TWIN is None, reason="compiled twin not built")
@given(st.binary(max_size=300), st.integers(min_value=0, max_value=0xFFFFFFFF))
def test_crc32c_twin_agrees_with_the_package(data, value) -> None:  # type: ignore[no-untyped-def]
    assert TWIN is not None
    assert TWIN.crc32c(data) == crc32c(data)
    assert TWIN.crc32c(data, value) == crc32c(data, value)
    assert TWIN.crc32c(bytearray(data), value) == crc32c(data, value)
    assert TWIN.crc32c(memoryview(data)[1:], value) == crc32c(data[1:], value)


ENTRY_IMPLS = [pytest.param(format.pure_encode_entries, id="pure")]
if TWIN is not None:
    ENTRY_IMPLS.append(pytest.param(TWIN.encode_entries, id="cython"))
argvs_st = st.lists(
    st.lists(st.binary(max_size=40), min_size=0, max_size=7), min_size=0, max_size=12
)


@pytest.mark.parametrize("encode_entries", ENTRY_IMPLS)
@given(
    argvs=argvs_st,
    first=st.integers(0, 3),
    offset=st.integers(0, 2**40),
    id_ms=st.integers(0, 2**64 - 2),
    id_seq=st.sampled_from([0, 1, 2**64 - 3, 2**64 - 1]),
    position=st.integers(0, 10_000),
    index_position=st.integers(-1, 10_000),
    interval=st.integers(1, 300),
)
def test_encode_entries_is_encode_into_per_entry(  # type: ignore[no-untyped-def]
    encode_entries, argvs, first, offset, id_ms, id_seq, position, index_position, interval
) -> None:
    """One call for a run of entries: the bytes of encode_into(encode_fields(...))
    per entry with consecutive IDs, and the sparse index entries due."""
    index_position = min(index_position, position)
    expected, due = bytearray(b"prefix"), []
    sid, pos, last = id_ms << 64 | id_seq, position, index_position
    for i, argv in enumerate(argvs):
        if last < 0 or pos - last >= interval:
            due.append((offset + i, pos, sid >> 64, sid & (2**64 - 1)))
            last = pos
        payload = format.pure_encode_fields(argv[first:])
        format.pure_encode_into(
            expected, offset + i, 77, 3, format.FLAG_ENTRY, sid >> 64, sid & (2**64 - 1), payload
        )
        pos += format.HEADER_BYTES + len(payload)
        sid += 1
    buf = bytearray(b"prefix")
    got = encode_entries(
        buf, argvs, first, offset, 77, 3, format.FLAG_ENTRY, id_ms, id_seq,
        position, index_position, interval,
    )  # fmt: skip
    assert buf == expected
    assert got == due


@pytest.mark.parametrize("encode_entries", ENTRY_IMPLS)
def test_encode_entries_appends_nothing_when_one_entry_is_refused(  # type: ignore[no-untyped-def]
    encode_entries, monkeypatch
) -> None:
    class Huge(bytes):
        """Claims the size of the largest record (the compiled twin sizes by len)."""

        def __len__(self) -> int:
            return 1 << 30

    monkeypatch.setattr(format, "RECORD_BYTES_MAX", 200)  # what the pure path reads
    buf = bytearray(b"kept")
    big = Huge(b"v" * 200)
    argvs = [[b"XADD", b"k", b"*", b"f", b"v"], [b"XADD", b"k", b"*", b"f", big]]
    with pytest.raises(ValueError, match="exceeds the maximum"):
        encode_entries(buf, argvs, 3, 0, 0, 0, 1, 1, 0, 0, -1, 4096)
    assert buf == b"kept"
    argvs = [[b"XADD", b"k", b"*", b"f", b"v"], [b"XADD", b"k", b"*", b"f", "text"]]
    with pytest.raises(TypeError):
        encode_entries(buf, argvs, 3, 0, 0, 0, 1, 1, 0, 0, -1, 4096)
    assert buf == b"kept"


def _entries_by_definition(data, count_max, high, deleted):  # type: ignore[no-untyped-def]
    """scan_entries spelled out from scan: the records in order, each taken (its ID
    and offset remembered) until `count_max` entries are kept or one is above `high`;
    the scan's own end, status and detail once its records run out."""
    records, end, status, detail = format.pure_scan(data, 0, 0, 1 << 30)
    entries: list[tuple[int, bytes]] = []
    last_id = next_offset = -1
    position = 0
    for rec in records:
        if len(entries) == count_max:
            return entries, position, format.SCAN_OK, 0, last_id, next_offset, False
        sid = rec.id_ms << 64 | rec.id_seq
        if sid > high:
            return entries, rec.position, format.SCAN_OK, 0, last_id, next_offset, True
        position = rec.position + rec.size
        last_id, next_offset = sid, rec.offset + 1
        if rec.offset not in deleted:
            entries.append((sid, rec.payload))
    if len(entries) == count_max and position == end:
        return entries, position, format.SCAN_OK, 0, last_id, next_offset, False
    return entries, end, status, detail, last_id, next_offset, False


SCAN_ENTRIES_IMPLS = [pytest.param(format.pure_scan_entries, id="pure")]
if TWIN is not None:
    SCAN_ENTRIES_IMPLS.append(pytest.param(TWIN.scan_entries, id="cython"))


@pytest.mark.parametrize("scan_entries", SCAN_ENTRIES_IMPLS)
@given(
    st.lists(st.tuples(st.integers(0, 3), st.binary(max_size=40)), max_size=12),
    st.integers(0, 800),
    st.integers(1, 14),
    st.integers(0, 40),
    st.sets(st.integers(0, 14), max_size=5),
    st.booleans(),
)
def test_scan_entries_is_scan_filtered(  # type: ignore[no-untyped-def]
    scan_entries, steps, cut, count_max, high_at, deleted, garble
) -> None:
    """IDs grow by 0-3 sequence numbers a record (in both halves of the 128 bits once
    they carry); offsets count up from 0. Cut and garbled buffers included."""
    data = bytearray()
    id_ms, id_seq = 7, 2**64 - 3
    for offset, (step, payload) in enumerate(steps):
        id_seq += step
        if id_seq > 2**64 - 1:
            id_ms, id_seq = id_ms + 1, id_seq - 2**64
        format.pure_encode_into(data, offset, 5, 1, 0, id_ms, id_seq, payload)
    data = data[:cut]
    if garble and data:
        data[cut * 7 % len(data)] ^= 0x10
    high = (7 << 64 | 2**64 - 3) + high_at
    expected = _entries_by_definition(bytes(data), count_max, high, deleted)
    assert scan_entries(bytes(data), 0, count_max, high, deleted) == expected


def test_journal_worked_example_matches_the_spec(tmp_path: Path) -> None:
    """docs/log-format.md, "The journal" and "The journal checkpoint": the bytes of
    the worked examples."""
    from narad.log import checkpointer
    from narad.log.journal import decode_commit, encode_commit

    buf = bytearray()
    payload = format.encode_fields([b"k", b"v"])
    format.pure_encode_into(buf, 7, 1700000000123, 2, format.FLAG_ENTRY, 1700000000123, 0,
                            payload)
    commit = encode_commit([["rec", 5, 7, 1, len(buf)]], [bytes(buf)])
    assert len(commit) == 76
    assert commit[:16].hex() == "0c000000" "92" "01" "91" "95" "a3726563" "05" "07" "01" "3c"
    assert commit[16:] == buf
    assert decode_commit(commit)[0] == [["rec", 5, 7, 1, 60]]
    start = encode_commit([["start", 5, 3]], [])
    assert start.hex() == "0c000000" "92" "01" "91" "93" "a5" "7374617274" "05" "03"
    checkpointer.write(tmp_path, checkpointer.Checkpoint(42, {0: 1, 5: 8, 6: 0}))
    written = (tmp_path / checkpointer.CHECKPOINT_FILE).read_bytes()
    assert written == b"position 42\nlog 0 1\nlog 5 8\nlog 6 0\ncrc 2126837801\n"
