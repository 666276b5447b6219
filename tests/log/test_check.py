"""narad check on real log folders, damaged with ordinary file operations."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from narad.log import checkpoint, format
from narad.log.check import (
    CHUNK_BYTES,
    PROBLEMS_PER_SEGMENT_MAX,
    CheckReport,
    Kind,
    Problem,
    check_data_dir,
    check_log,
    find_logs,
    scan_bytes,
)
from narad.log.format import FLAG_ENTRY, Record
from narad.log.index import ENTRY_BYTES
from narad.log.log import Log, LogConfig
from narad.log.opening import EPOCHS_CHECKPOINT, START_CHECKPOINT
from narad.log.segment import segment_name

SMALL = LogConfig(segment_bytes=8192)
T0 = 1_700_000_000_000
# With 100-byte payloads a record is 146 bytes: 56 records per 8 KiB segment, and
# index entries for the records at bytes 0 and 4234 (the 30th) of each segment.
PER_SEGMENT = 56


def payload(i: int, size: int = 100) -> bytes:
    return (b"%08d" % i) * (size // 8) + b"." * (size % 8)


def build(folder: Path, count: int = 200, size: int = 100, config: LogConfig = SMALL) -> Path:
    log = Log.open(folder, config, clock=lambda: T0)
    for i in range(count):
        log.append(payload(i, size), T0 + i, 0, FLAG_ENTRY)
    log.write()
    log.sync()
    log.close()
    return folder


def segments(folder: Path) -> list[Path]:
    return sorted(folder.glob("*.log"))


def records(path: Path) -> list[Record]:
    return format.pure_scan(path.read_bytes(), 0, 0, 1 << 30)[0]


def flip(path: Path, position: int, mask: int = 0x04) -> None:
    with path.open("r+b") as f:
        f.seek(position)
        byte = f.read(1)[0]
        f.seek(position)
        f.write(bytes([byte ^ mask]))


def kinds(report: CheckReport) -> list[Kind]:
    return [p.kind for p in report.problems]


def only(report: CheckReport, kind: Kind) -> Problem:
    found = [p for p in report.problems if p.kind == kind]
    assert len(found) == 1, report.problems
    return found[0]


def write_raw_segment(folder: Path, rows: list[tuple[int, int, int]]) -> Path:
    """A segment of records (offset, timestamp, id_ms) written without the Log, which
    would refuse such records; named after the first offset."""
    folder.mkdir(parents=True, exist_ok=True)
    buf = bytearray()
    for offset, ts, id_ms in rows:
        format.encode_into(buf, offset, ts, 0, FLAG_ENTRY, id_ms, 0, b"payload")
    path = folder / segment_name(rows[0][0])
    path.write_bytes(bytes(buf))
    return path


def read_all(folder: Path) -> list[Record]:
    log = Log.open(folder, SMALL)
    try:
        return log.read(0)
    finally:
        log.close()


class Recorder:
    def __init__(self) -> None:
        self.steps: list[int] = []

    def advance(self, n: int) -> None:
        assert n > 0
        self.steps.append(n)


# -- clean logs ----------------------------------------------------------------------


def test_clean_log_passes(tmp_path: Path) -> None:
    folder = build(tmp_path / "log")
    report = check_log(folder)
    assert report.problems == [] and report.clean
    assert report.logs == 1
    assert report.segments == len(segments(folder)) == 4
    assert report.records == 200
    assert report.scanned_bytes == sum(p.stat().st_size for p in segments(folder))


def test_empty_log_is_clean(tmp_path: Path) -> None:
    Log.open(tmp_path / "log", SMALL).close()
    report = check_log(tmp_path / "log")
    assert report.clean and report.segments == 1 and report.records == 0


def test_check_without_repair_writes_nothing(tmp_path: Path) -> None:
    folder = build(tmp_path / "log")
    last = segments(folder)[-1]
    os.truncate(last, last.stat().st_size - 7)
    (folder / segment_name(PER_SEGMENT)).with_suffix(".index").unlink()
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    assert not check_log(folder).clean
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before


# -- torn tails ----------------------------------------------------------------------


@pytest.mark.parametrize("cut", [1, 3, 4, 20, 45, 46, 47, 100, -1])
def test_torn_tail_is_repairable(tmp_path: Path, cut: int) -> None:
    folder = build(tmp_path / "log")
    last = segments(folder)[-1]
    rec = records(last)[-1]
    assert rec.offset == 199
    keep = rec.position + (cut if cut >= 0 else rec.size + cut)
    os.truncate(last, keep)

    report = check_log(folder)
    torn = only(report, Kind.TORN_TAIL)
    assert kinds(report) == [Kind.TORN_TAIL]
    assert torn.path == last and torn.position == rec.position
    assert torn.size_bytes == keep - rec.position
    assert torn.repairable and not torn.repaired and not report.clean
    assert report.records == 199

    report = check_log(folder, repair=True)
    assert only(report, Kind.TORN_TAIL).repaired and report.clean
    assert last.stat().st_size == rec.position
    assert check_log(folder).problems == []
    assert [r.offset for r in read_all(folder)] == list(range(199))
    assert check_log(folder).problems == []


def test_garbage_after_the_last_record_is_a_torn_tail(tmp_path: Path) -> None:
    folder = build(tmp_path / "log")
    last = segments(folder)[-1]
    size = last.stat().st_size
    tail = random.Random(7).randbytes(500)
    with last.open("ab") as f:
        f.write(tail)
    torn = only(check_log(folder), Kind.TORN_TAIL)
    assert torn.position == size and torn.size_bytes == len(tail)
    assert check_log(folder, repair=True).clean
    assert last.stat().st_size == size
    assert len(read_all(folder)) == 200


def test_zeros_after_the_last_record_are_reserved_space(tmp_path: Path) -> None:
    """The active segment is grown ahead of its writes with zero bytes (docs/log-
    format.md): not a problem there, corruption in a sealed segment."""
    folder = build(tmp_path / "log")
    first, last = segments(folder)[0], segments(folder)[-1]
    with last.open("ab") as f:
        f.write(b"\x00" * 300)
    assert check_log(folder).problems == []
    assert len(read_all(folder)) == 200
    with last.open("r+b") as f:  # one non-zero byte among them: a torn tail again
        f.seek(-7, os.SEEK_END)
        f.write(b"\x01")
    assert only(check_log(folder), Kind.TORN_TAIL)
    os.truncate(last, last.stat().st_size - 300)
    with first.open("ab") as f:
        f.write(b"\x00" * 300)
    assert only(check_log(folder), Kind.CORRUPT)


def test_torn_record_named_by_the_active_index(tmp_path: Path) -> None:
    # 30 records in the last segment: the last one starts at byte 4234 and is indexed.
    folder = build(tmp_path / "log", count=3 * PER_SEGMENT + 30)
    last = segments(folder)[-1]
    rec = records(last)[-1]
    assert rec.position == 4234
    os.truncate(last, rec.position + 10)
    report = check_log(folder)
    assert sorted(k.value for k in kinds(report)) == ["index", "torn-tail"]
    assert all(p.repairable for p in report.problems)
    report = check_log(folder, repair=True)
    assert report.clean and all(p.repaired for p in report.problems)
    repaired = last.with_suffix(".index").read_bytes()
    assert len(repaired) == ENTRY_BYTES
    read_all(folder)  # recovery rewrites the active index: the same bytes
    assert last.with_suffix(".index").read_bytes() == repaired
    assert check_log(folder).problems == []


def test_cut_sealed_segment_is_corruption(tmp_path: Path) -> None:
    folder = build(tmp_path / "log")
    sealed = segments(folder)[1]
    rec = records(sealed)[-1]
    os.truncate(sealed, rec.position + 30)
    report = check_log(folder, repair=True)
    bad = only(report, Kind.CORRUPT)
    assert bad.path == sealed and bad.position == rec.position and bad.size_bytes == 30
    assert not bad.repairable and not bad.repaired and not report.clean
    # The next segment starts where the lost record would have ended.
    gap = only(report, Kind.OFFSETS)
    assert gap.path == segments(folder)[2] and f"offset {rec.offset} missing" in gap.what
    assert Kind.TORN_TAIL not in kinds(report)
    assert sealed.stat().st_size == rec.position + 30


# -- corruption ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("at", "mask"),
    [
        (60, 0x04),  # payload
        (5, 0x01),  # crc
        (12, 0x10),  # epoch
        (0, 0x40),  # length: points into the next record
        (3, 0x80),  # length: beyond RECORD_BYTES_MAX
    ],
)
def test_flipped_bit_in_a_sealed_segment(tmp_path: Path, at: int, mask: int) -> None:
    folder = build(tmp_path / "log")
    sealed = segments(folder)[1]
    rec = records(sealed)[20]
    flip(sealed, rec.position + at, mask)
    before = sealed.read_bytes()
    for repair in (False, True):
        report = check_log(folder, repair=repair)
        bad = only(report, Kind.CORRUPT)
        assert kinds(report) == [Kind.CORRUPT]
        assert bad.path == sealed and bad.position == rec.position
        assert bad.size_bytes == rec.size
        assert f"resume at byte {rec.position + rec.size} with offset {rec.offset + 1}" in bad.what
        assert f"offset {rec.offset} lost" in bad.what
        assert not bad.repairable and not bad.repaired and not report.clean
        assert report.records == 199
        assert sealed.read_bytes() == before


def test_corruption_in_the_middle_of_the_last_segment(tmp_path: Path) -> None:
    folder = build(tmp_path / "log")
    last = segments(folder)[-1]
    size = last.stat().st_size
    rec = records(last)[10]
    flip(last, rec.position + 50)
    report = check_log(folder, repair=True)
    bad = only(report, Kind.CORRUPT)
    assert kinds(report) == [Kind.CORRUPT]
    assert bad.path == last and bad.position == rec.position and not bad.repaired
    assert last.stat().st_size == size


@pytest.mark.parametrize(
    "junk",
    [
        b"\x00" * 10,
        b"\x01" * (3 * CHUNK_BYTES // 2),  # every byte looks like a version field
        b"\x01\x00\x00\x00\x00\x00\x00\x00" * 1000,
        random.Random(5).randbytes(CHUNK_BYTES + 99),
    ],
    ids=["zeros", "ones", "fake-versions", "random"],
)
def test_inserted_bytes_lose_no_offset(tmp_path: Path, junk: bytes) -> None:
    folder = build(tmp_path / "log")
    sealed = segments(folder)[0]
    rec = records(sealed)[5]
    data = sealed.read_bytes()
    sealed.write_bytes(data[: rec.position] + junk + data[rec.position :])
    report = check_log(folder)
    bad = only(report, Kind.CORRUPT)
    assert bad.position == rec.position and bad.size_bytes == len(junk)
    assert "no offset lost" in bad.what
    assert kinds(report) == [Kind.CORRUPT] and report.records == 200


def test_large_records_are_read_whole(tmp_path: Path) -> None:
    big = CHUNK_BYTES + CHUNK_BYTES // 2
    config = LogConfig(segment_bytes=64 << 20)
    log = Log.open(tmp_path / "log", config, clock=lambda: T0)
    for i in range(3):
        log.append(payload(i, big if i == 1 else 100), T0 + i, 0, FLAG_ENTRY)
    log.close()
    report = check_log(tmp_path / "log")
    assert report.clean and report.records == 3
    last = segments(tmp_path / "log")[-1]
    rec = records(last)[-1]
    os.truncate(last, rec.position)
    os.truncate(last, rec.position - 1000)  # cuts the large record
    torn = only(check_log(tmp_path / "log"), Kind.TORN_TAIL)
    assert torn.position == records(last)[0].position + records(last)[0].size


# -- offsets and order ---------------------------------------------------------------


def test_zero_length_middle_segment(tmp_path: Path) -> None:
    folder = build(tmp_path / "log")
    middle = segments(folder)[1]
    os.truncate(middle, 0)
    report = check_log(folder, repair=True)
    assert only(report, Kind.EMPTY_SEGMENT).path == middle
    gap = only(report, Kind.OFFSETS)
    assert gap.path == segments(folder)[2]
    assert f"offsets {PER_SEGMENT}..{2 * PER_SEGMENT - 1} missing" in gap.what
    assert sorted(k.value for k in kinds(report)) == ["empty-segment", "offsets"]
    assert not any(p.repairable for p in report.problems) and not report.clean


def test_zero_length_last_segment_is_fine(tmp_path: Path) -> None:
    folder = build(tmp_path / "log", count=PER_SEGMENT)
    log = Log.open(folder, SMALL)
    log.roll()
    log.close()
    assert segments(folder)[-1].stat().st_size == 0
    assert check_log(folder).problems == []


def test_renamed_segment_leaves_a_gap(tmp_path: Path) -> None:
    folder = build(tmp_path / "log")
    old = segments(folder)[2]
    base = 2 * PER_SEGMENT
    new = folder / segment_name(base + 5)
    old.rename(new)
    old.with_suffix(".index").rename(new.with_suffix(".index"))
    report = check_log(folder, repair=True)
    assert kinds(report) == [Kind.OFFSETS, Kind.OFFSETS]
    missing, named = report.problems
    assert missing.path == new and f"offsets {base}..{base + 4} missing" in missing.what
    assert named.path == new and named.position == 0
    assert f"record has offset {base}, expected {base + 5}" in named.what
    assert not report.clean and new.stat().st_size > 0


def test_deleted_middle_segment_leaves_a_gap(tmp_path: Path) -> None:
    folder = build(tmp_path / "log")
    segments(folder)[1].unlink()
    report = check_log(folder)
    assert kinds(report) == [Kind.OFFSETS]
    assert f"offsets {PER_SEGMENT}..{2 * PER_SEGMENT - 1} missing" in report.problems[0].what


def test_offsets_inside_a_segment_must_be_dense(tmp_path: Path) -> None:
    path = write_raw_segment(tmp_path / "log", [(0, T0, 1), (1, T0, 2), (5, T0, 3), (6, T0, 4)])
    report = check_log(tmp_path / "log")
    bad = only(report, Kind.OFFSETS)
    assert bad.path == path and bad.position == records(path)[2].position
    assert "record has offset 5, expected 2" in bad.what


def test_ids_and_timestamps_may_not_go_back(tmp_path: Path) -> None:
    path = write_raw_segment(
        tmp_path / "log", [(0, T0, 5), (1, T0 + 1, 4), (2, T0, 6), (3, T0 + 2, 6)]
    )
    report = check_log(tmp_path / "log")
    assert kinds(report) == [Kind.ORDER, Kind.ORDER]
    by_id, by_time = report.problems
    positions = [r.position for r in records(path)]
    assert by_id.position == positions[1] and "stream ID 4-0 of offset 1" in by_id.what
    assert by_time.position == positions[2] and f"timestamp {T0} of offset 2" in by_time.what


def test_problems_listed_per_segment_are_bounded(tmp_path: Path) -> None:
    rows = [(i, T0, 100 - i) for i in range(60)]
    write_raw_segment(tmp_path / "log", rows)
    report = check_log(tmp_path / "log")
    assert len(report.problems) == PROBLEMS_PER_SEGMENT_MAX
    assert report.unlisted == 59 - PROBLEMS_PER_SEGMENT_MAX
    assert not report.clean


# -- indexes -------------------------------------------------------------------------


def _delete(path: Path) -> None:
    path.unlink()


def _truncate(path: Path) -> None:
    os.truncate(path, ENTRY_BYTES)


def _garbage(path: Path) -> None:
    path.write_bytes(random.Random(3).randbytes(path.stat().st_size))


def _odd_size(path: Path) -> None:
    with path.open("ab") as f:
        f.write(b"12345")


def _extra_entry(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data + data[-ENTRY_BYTES:])


def _wrong_position(path: Path) -> None:
    flip(path, ENTRY_BYTES + 8, 0x01)  # second entry's position, off by one


@pytest.mark.parametrize(
    "damage", [_delete, _truncate, _garbage, _odd_size, _extra_entry, _wrong_position]
)
def test_bad_sealed_index_is_rebuilt(tmp_path: Path, damage: object) -> None:
    folder = build(tmp_path / "log")
    index = segments(folder)[1].with_suffix(".index")
    built_by_log = index.read_bytes()
    assert len(built_by_log) == 2 * ENTRY_BYTES
    assert callable(damage)
    damage(index)
    report = check_log(folder)
    bad = only(report, Kind.INDEX)
    assert kinds(report) == [Kind.INDEX]
    assert bad.path == index and bad.repairable and not bad.repaired
    report = check_log(folder, repair=True)
    assert only(report, Kind.INDEX).repaired and report.clean
    assert index.read_bytes() == built_by_log
    assert check_log(folder).problems == []


def test_repaired_indexes_equal_those_log_rebuilds(tmp_path: Path) -> None:
    folder = build(tmp_path / "log")
    for path in folder.glob("*.index"):
        path.unlink()
    check_log(folder, repair=True)
    repaired = {p.name: p.read_bytes() for p in folder.glob("*.index")}
    for path in folder.glob("*.index"):
        path.unlink()
    read_all(folder)  # Log.open rebuilds every index
    by_log = {p.name: p.read_bytes() for p in folder.glob("*.index")}
    # The active segment's missing index is no problem: only the sealed ones come back.
    assert len(repaired) == 3 and len(by_log) == 4
    assert {name: by_log[name] for name in repaired} == repaired
    assert check_log(folder).problems == []


def test_active_index_may_be_a_prefix(tmp_path: Path) -> None:
    folder = build(tmp_path / "log")
    index = segments(folder)[-1].with_suffix(".index")
    os.truncate(index, ENTRY_BYTES)
    assert check_log(folder).problems == []
    index.unlink()
    assert check_log(folder).problems == []


def test_active_index_must_match_where_present(tmp_path: Path) -> None:
    folder = build(tmp_path / "log")
    index = segments(folder)[-1].with_suffix(".index")
    built_by_log = index.read_bytes()
    _wrong_position(index)
    bad = only(check_log(folder), Kind.INDEX)
    assert bad.position == ENTRY_BYTES and "entry 1" in bad.what
    assert check_log(folder, repair=True).clean
    assert index.read_bytes() == built_by_log


def test_index_of_a_corrupt_segment_is_left_alone(tmp_path: Path) -> None:
    folder = build(tmp_path / "log")
    sealed = segments(folder)[1]
    sealed.with_suffix(".index").unlink()
    flip(sealed, records(sealed)[3].position + 60)
    report = check_log(folder, repair=True)
    assert kinds(report) == [Kind.CORRUPT]
    assert not sealed.with_suffix(".index").exists()


# -- checkpoints ---------------------------------------------------------------------


def test_valid_checkpoints(tmp_path: Path) -> None:
    folder = build(tmp_path / "log")
    log = Log.open(folder, SMALL)
    log.begin_epoch(2)
    log.append(b"x", T0 + 500, 0)
    log.begin_epoch(5)
    log.set_start(30)
    log.close()
    assert (folder / START_CHECKPOINT).exists() and (folder / EPOCHS_CHECKPOINT).exists()
    assert check_log(folder).problems == []


def test_damaged_checkpoint(tmp_path: Path) -> None:
    folder = build(tmp_path / "log")
    path = folder / START_CHECKPOINT
    checkpoint.write(path, ["start 30"])
    flip(path, 7)
    bad = only(check_log(folder, repair=True), Kind.CHECKPOINT)
    assert bad.path == path and "damaged" in bad.what and not bad.repairable


@pytest.mark.parametrize(
    ("name", "lines"),
    [
        (START_CHECKPOINT, ["begin 30"]),
        (START_CHECKPOINT, ["start 30", "start 40"]),
        (START_CHECKPOINT, ["start -1"]),
        (EPOCHS_CHECKPOINT, ["1 0", "3 10", "2 20"]),
        (EPOCHS_CHECKPOINT, ["1 10", "2 5"]),
        (EPOCHS_CHECKPOINT, ["1 0 7"]),
    ],
)
def test_malformed_checkpoint(tmp_path: Path, name: str, lines: list[str]) -> None:
    folder = build(tmp_path / "log")
    checkpoint.write(folder / name, lines)
    report = check_log(folder)
    assert kinds(report) == [Kind.CHECKPOINT]
    assert report.problems[0].path == folder / name


# -- data dirs and progress ----------------------------------------------------------


def test_data_dir_with_many_logs(tmp_path: Path) -> None:
    data = tmp_path / "data"
    build(data / "a", count=10)
    build(data / "b" / "c" / "deep", count=100)
    (data / "not-a-log").mkdir()
    (data / "not-a-log" / "notes.txt").write_text("hello")
    (data / "b" / "c" / "deep" / "sub").mkdir()
    assert find_logs(data) == [data / "a", data / "b" / "c" / "deep"]
    assert find_logs(data / "a") == [data / "a"]
    last = segments(data / "a")[-1]
    os.truncate(last, last.stat().st_size - 1)
    report = check_data_dir(data)
    assert report.logs == 2 and report.records == 109
    assert only(report, Kind.TORN_TAIL).path.parent == data / "a"
    assert check_data_dir(data, repair=True).clean
    assert check_data_dir(data).problems == []


@pytest.mark.parametrize("damaged", [False, True])
def test_progress_is_exact(tmp_path: Path, damaged: bool) -> None:
    data = tmp_path / "data"
    build(data / "a")
    build(data / "b", count=30)
    if damaged:
        last = segments(data / "a")[-1]
        os.truncate(last, last.stat().st_size - 3)
        flip(segments(data / "a")[1], 500)
        segments(data / "b")[0].with_suffix(".index").unlink()
    total = scan_bytes(find_logs(data))
    recorder = Recorder()
    report = check_data_dir(data, repair=True, progress=recorder)
    assert sum(recorder.steps) == total == report.scanned_bytes
