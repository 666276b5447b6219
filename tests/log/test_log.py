"""The segment log on real files: every edge of docs/log-format.md."""

from __future__ import annotations

import bisect
import itertools
import os
from pathlib import Path

import pytest

from narad.log import format
from narad.log.index import ENTRY_BYTES, INTERVAL_BYTES, SparseIndex
from narad.log.log import FsyncPolicy, Log, LogConfig, LogFailed
from narad.log.opening import LogCorrupted
from narad.log.segment import CorruptSegment, segment_name

SMALL = LogConfig(segment_bytes=8192)


class Clock:
    def __init__(self, now: int = 1_000_000) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


def payload(i: int, size: int = 100) -> bytes:
    return (b"%08d" % i) * (size // 8)


def fill(log: Log, count: int, size: int = 100, start_id: int = 1) -> None:
    for _i in range(count):
        n = log.next_offset
        log.append(payload(n, size), start_id + n, 0, format.FLAG_ENTRY)
    log.write()
    log.sync()


def offsets(records: list[format.Record]) -> list[int]:
    return [r.offset for r in records]


def reopen(log: Log, config: LogConfig = SMALL) -> Log:
    log.close()
    return Log.open(log.path, config)


def test_empty_log(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "l", SMALL)
    assert log.next_offset == 0 and log.written_end == 0 and log.durable_end == 0
    assert log.read(0) == [] and log.read_reverse(10) == []
    assert log.offset_of_id(0, 0) == 0
    assert [p.name for p in (tmp_path / "l").glob("*.log")] == [segment_name(0)]
    log = reopen(log)
    assert log.next_offset == 0 and log.read(0) == []
    log.close()


def test_a_read_writes_what_is_buffered_first(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "l", SMALL)
    assert log.append(b"a", 1, 0) == 0
    assert log.append(b"b", 1, 1) == 1
    assert log.next_offset == 2 and log.written_end == 0
    assert log.read(0, end=log.written_end) == []  # the file alone holds nothing yet
    assert [r.payload for r in log.read(0)] == [b"a", b"b"]
    assert log.written_end == 2 and log.durable_end == 0
    assert log.sync() is True and log.durable_end == 2
    assert log.sync() is False
    log.close()


def test_ids_and_epochs_may_not_go_back(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "l", SMALL)
    log.append(b"a", 5, 5)
    with pytest.raises(ValueError):
        log.append(b"b", 5, 4)
    log.append(b"c", 5, 5)  # equal IDs are allowed (records that are not entries)
    log.begin_epoch(3)
    with pytest.raises(ValueError):
        log.append(b"d", 6, 0, epoch=2)
    log.close()


def test_record_that_exactly_fills_a_segment_then_rolls(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "l", SMALL)
    exact = SMALL.segment_bytes - format.HEADER_BYTES
    log.append(b"x" * exact, 1, 0)
    log.write()
    assert log.active.size == SMALL.segment_bytes and len(log.segments) == 1
    log.append(b"y", 2, 0)
    assert len(log.segments) == 2 and log.active.base_offset == 1
    log.write()
    log.sync()
    log = reopen(log)
    assert [len(r.payload) for r in log.read(0)] == [exact, 1]
    log.close()


def test_oversized_record_gets_its_own_segment(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "l", SMALL)
    log.append(b"a", 1, 0)
    log.append(b"b" * 20000, 2, 0)
    log.append(b"c", 3, 0)
    log.write()
    assert [s.base_offset for s in log.segments] == [0, 1, 2]
    assert [len(r.payload) for r in log.read(0)] == [1, 20000, 1]
    log.close()


def test_roll_by_age(tmp_path: Path) -> None:
    clock = Clock()
    log = Log.open(tmp_path / "l", LogConfig(segment_ms=1000), clock)
    log.append(b"a", 1, 0)
    clock.now += 999
    log.append(b"b", 2, 0)
    assert len(log.segments) == 1
    clock.now += 1
    log.append(b"c", 3, 0)
    assert [s.base_offset for s in log.segments] == [0, 2]
    log.close()


def test_reads_across_segments_forward_and_backward(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "l", SMALL)
    fill(log, 500)
    assert len(log.segments) > 5
    assert offsets(log.read(0)) == list(range(500))
    assert offsets(log.read(123, count_max=5)) == [123, 124, 125, 126, 127]
    assert offsets(log.read(498, count_max=5)) == [498, 499]
    assert offsets(log.read(10, end=13)) == [10, 11, 12]
    assert offsets(log.read_reverse(499)) == list(range(499, -1, -1))
    assert offsets(log.read_reverse(10**9, count_max=3)) == [499, 498, 497]
    assert offsets(log.read_reverse(250, count_max=3)) == [250, 249, 248]
    assert offsets(log.read_reverse(250, end=249))[:2] == [248, 247]
    # A byte bound returns at least one record and never more than the bound after it.
    one = log.read(0, 1)[0].size
    assert offsets(log.read(7, bytes_max=3 * one)) == [7, 8, 9]
    assert offsets(log.read(7, bytes_max=1)) == [7]
    assert offsets(log.read_reverse(7, bytes_max=2 * one)) == [7, 6]
    for r in log.read(0):
        assert r.payload == payload(r.offset) and (r.id_ms, r.id_seq) == (r.offset + 1, 0)
    log.close()


def test_offset_of_id(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "l", SMALL)
    for i in range(300):
        log.append(b"v", 10 * (i + 1), 0)  # IDs 10-0, 20-0, ...
    log.write()
    assert log.offset_of_id(0, 0) == 0
    assert log.offset_of_id(10, 0) == 0
    assert log.offset_of_id(10, 0, after=True) == 1
    assert log.offset_of_id(15, 0) == 1
    assert log.offset_of_id(2000, 0) == 199
    assert log.offset_of_id(2000, 1) == 200
    assert log.offset_of_id(3000, 0) == 299
    assert log.offset_of_id(3000, 0, after=True) == 300
    assert log.offset_of_id(10**12, 0) == 300
    log.close()


def test_torn_tail_cut_at_every_byte_of_the_last_record(tmp_path: Path) -> None:
    src = tmp_path / "src"
    log = Log.open(src, SMALL)
    fill(log, 30)
    last = log.read_reverse(10**9, 1)[0]
    seg = log.active.path
    log.close()
    full = seg.read_bytes()
    assert last.position + last.size == len(full)
    for cut in range(last.position, len(full)):
        seg.write_bytes(full[:cut])
        log = Log.open(src, SMALL)
        assert log.next_offset == 29, cut
        assert offsets(log.read(0)) == list(range(29))
        assert log.active.size == last.position
        assert seg.stat().st_size == last.position
        # Appending after recovery continues the dense offsets.
        log.append(b"again", 1000, 0)
        log.write()
        log.close()
        log = Log.open(src, SMALL)
        assert offsets(log.read(0)) == list(range(30))
        log.close()


def test_flipped_bit_in_active_segment_tail_ends_the_log_there(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "l", LogConfig())
    fill(log, 50)  # about 7 KiB: index entries for records 0 and 28
    assert offsets([log.read(i, 1)[0] for i in range(50)]) == list(range(50))
    last_indexed = log.active.index.entry(len(log.active.index) - 1)[0]
    assert 0 < last_indexed < 40
    early, late = log.read(10, 1)[0], log.read(40, 1)[0]
    path = log.active.path
    log.close()
    data = bytearray(path.read_bytes())
    data[late.position + format.HEADER_BYTES + 3] ^= 0x10
    data[early.position + format.HEADER_BYTES + 3] ^= 0x10
    path.write_bytes(bytes(data))
    # Recovery scans only the tail after the last index entry: the bad record 40 ends
    # the log there. Record 10 lies before it and is caught when read instead.
    log = Log.open(tmp_path / "l", LogConfig())
    assert log.next_offset == 40
    assert path.stat().st_size == late.position
    assert offsets(log.read(last_indexed)) == list(range(last_indexed, 40))
    with pytest.raises(CorruptSegment):
        log.read(0)
    log.close()


def test_flipped_bit_in_sealed_segment_is_reported_not_returned(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "l", SMALL)
    fill(log, 200)
    victim = log.read(5, 1)[0]
    first = log.segments[0].path
    log.close()
    data = bytearray(first.read_bytes())
    data[victim.position + format.HEADER_BYTES] ^= 0x01
    first.write_bytes(bytes(data))
    log = Log.open(tmp_path / "l", SMALL)  # opening only checks the index tail
    assert offsets(log.read(0, count_max=5)) == [0, 1, 2, 3, 4]
    with pytest.raises(CorruptSegment) as err:
        log.read(0, count_max=10)
    assert err.value.path == first and err.value.position == victim.position
    assert str(victim.position) in str(err.value)
    with pytest.raises(CorruptSegment):
        log.read_reverse(7)
    log.read(0, count_max=5)  # ends right before the damaged record: the entry read's start
    with pytest.raises(CorruptSegment) as err:
        log.read_entries(5, 3, format.U64_MAX << 64 | format.U64_MAX, set())
    assert err.value.path == first and err.value.position == victim.position
    assert offsets(log.read(150, count_max=2)) == [150, 151]  # other segments still readable
    log.close()


def test_missing_short_and_wrong_indexes_are_rebuilt(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "l", SMALL)
    fill(log, 300, size=400)
    assert len(log.segments) >= 4
    expected = {s.index_path: s.index_path.read_bytes() for s in log.segments[:-1]}
    sealed = [s.index_path for s in log.segments[:-1]]
    log.close()
    assert all(len(data) >= 2 * ENTRY_BYTES for data in expected.values())
    sealed[0].unlink()  # missing
    sealed[1].write_bytes(expected[sealed[1]][:-5])  # short, not a multiple of 32
    broken = bytearray(expected[sealed[2]])
    broken[-ENTRY_BYTES + 8 : -ENTRY_BYTES + 16] = (10**9).to_bytes(8, "little")
    sealed[2].write_bytes(bytes(broken))  # last entry points past the end
    wrong = bytearray(expected[sealed[3]])
    wrong[-ENTRY_BYTES : -ENTRY_BYTES + 8] = (10**6).to_bytes(8, "little")
    sealed[3].write_bytes(bytes(wrong))  # names an offset that is not there
    log = Log.open(tmp_path / "l", SMALL)
    for path, data in expected.items():
        assert path.read_bytes() == data
    assert offsets(log.read(0)) == list(range(300))
    log.close()


def test_index_is_sparse(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "l", LogConfig())
    fill(log, 2000)
    index = SparseIndex.load(log.active.index_path)
    assert index is not None
    positions = [index.entry(i)[1] for i in range(len(index))]
    assert positions[0] == 0
    assert all(
        INTERVAL_BYTES <= b - a < INTERVAL_BYTES + 200 for a, b in itertools.pairwise(positions)
    )
    log.close()


def test_active_index_past_the_end_is_ignored(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "l", LogConfig())
    fill(log, 2000)
    path = log.active.index_path
    log.close()
    garbage = SparseIndex(path.read_bytes())
    garbage.add(5000, 10**9, 10**9, 0)
    path.write_bytes(bytes(garbage._data))
    log = Log.open(tmp_path / "l", LogConfig())
    assert log.next_offset == 2000 and offsets(log.read(1990)) == list(range(1990, 2000))
    log.close()


def test_zero_length_active_segment(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "l", SMALL)
    fill(log, 100)
    log.roll()
    assert log.active.size == 0
    log = reopen(log)
    assert log.next_offset == 100 and log.last_id == (100, 0)
    fill(log, 1)
    assert offsets(log.read(98)) == [98, 99, 100]
    log.close()


def test_zero_length_middle_segment_refuses_to_open(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "l", SMALL)
    fill(log, 200)
    middle = log.segments[1].path
    log.close()
    middle.write_bytes(b"")
    with pytest.raises(LogCorrupted, match="empty segment"):
        Log.open(tmp_path / "l", SMALL)


def test_gap_between_segments_refuses_to_open(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "l", SMALL)
    fill(log, 200)
    middle = log.segments[1]
    log.close()
    middle.path.unlink()
    middle.index_path.unlink()
    with pytest.raises(LogCorrupted, match="ends at offset"):
        Log.open(tmp_path / "l", SMALL)


def test_retention_by_bytes_deletes_whole_sealed_segments_oldest_first(tmp_path: Path) -> None:
    config = LogConfig(segment_bytes=8192, retention_bytes=20000)
    log = Log.open(tmp_path / "l", config)
    fill(log, 400)
    before = [s.base_offset for s in log.segments]
    deleted = log.apply_retention()
    after = [s.base_offset for s in log.segments]
    assert deleted > 0 and after == before[deleted:]
    assert log.size_bytes >= 20000 and log.size_bytes - log.segments[0].size < 20000
    assert log.start_offset == after[0]
    assert offsets(log.read(0))[0] == after[0]
    log = reopen(log, config)
    assert log.start_offset == after[0] and offsets(log.read(0))[-1] == 399
    log.close()


def test_retention_by_age_keeps_the_active_segment(tmp_path: Path) -> None:
    clock = Clock()
    config = LogConfig(segment_bytes=8192, retention_ms=10_000)
    log = Log.open(tmp_path / "l", config, clock)
    fill(log, 150)
    clock.now += 5000
    fill(log, 150)
    assert log.apply_retention() == 0
    clock.now += 6000  # the first batch is now 11 s old, the second 6 s
    deleted = log.apply_retention()
    assert deleted > 0
    assert all(s.last_timestamp_ms >= clock.now - 10_000 for s in log.segments[:-1])
    clock.now += 100_000
    log.apply_retention()
    assert len(log.segments) == 1 and log.next_offset == 300
    log.close()


def test_logical_start_is_a_crash_safe_checkpoint(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "l", SMALL)
    fill(log, 300)
    log.set_start(150)
    assert offsets(log.read(0, 2)) == [150, 151]
    assert offsets(log.read_reverse(151)) == [151, 150]
    log.set_start(100)  # never backwards
    assert log.start_offset == 150
    dropped = log.apply_retention()
    assert dropped > 0 and log.segments[0].base_offset <= 150
    log = reopen(log)
    assert log.start_offset == 150 and offsets(log.read(0, 1)) == [150]
    (tmp_path / "l" / "start.checkpoint").write_text("start 999\ncrc 1\n")  # damaged
    log = reopen(log)
    assert log.start_offset == log.segments[0].base_offset
    log.close()


def test_truncate_within_and_across_segments(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "l", SMALL)
    fill(log, 300)
    log.truncate(250)
    assert log.next_offset == 250 and log.last_id == (250, 0)
    assert offsets(log.read_reverse(10**9, 1)) == [249]
    fill(log, 10)
    assert offsets(log.read(245)) == list(range(245, 260))
    log.truncate(42)
    assert log.next_offset == 42 and log.durable_end == 42
    assert all(s.base_offset < 42 for s in log.segments)
    log = reopen(log)
    assert offsets(log.read(0)) == list(range(42))
    log.truncate(0)
    assert log.next_offset == 0 and log.read(0) == []
    fill(log, 3)
    log = reopen(log)
    assert offsets(log.read(0)) == [0, 1, 2]
    log.close()


def test_reads_that_follow_on_match_fresh_reads(tmp_path: Path) -> None:
    """A read starting where the last one ended begins at the position it remembered
    (across segments, after retention, and after a truncation rewrote the tail with
    records of other sizes): always the records a reopened log returns."""
    log = Log.open(tmp_path / "l", SMALL)
    fill(log, 300)
    offset, seen = 0, []
    while batch := log.read(offset, count_max=7):
        seen += batch
        offset = batch[-1].offset + 1
    assert offsets(seen) == list(range(300))
    log.read(240, count_max=5)  # remembers 245
    log.truncate(243)
    for i in range(10):
        log.append(payload(i, size=37), 1000 + i, 0, format.FLAG_ENTRY)
    log.write()
    after = log.read(245, count_max=3)
    assert offsets(after) == [245, 246, 247]
    assert [r.payload for r in after] == [payload(i, size=37) for i in (2, 3, 4)]
    log.set_start(100)
    log.apply_retention()
    assert offsets(log.read(100, count_max=2)) == [100, 101]
    followed = log.read(102)
    log = reopen(log)
    assert followed == log.read(102)
    log.close()


def test_read_with_buffer_sees_buffered_records_as_written_ones(tmp_path: Path) -> None:
    """Records buffered and not yet written read back from the write buffer exactly as
    the file gives them once written, positions included: alone, after written ones,
    and far into the buffer (which is written first). Reads that follow on from them
    match fresh reads too."""
    log = Log.open(tmp_path / "l", LogConfig(segment_bytes=1 << 20))
    fill(log, 20)
    for i in range(20, 200):
        log.append(payload(i), 1 + i, 0, format.FLAG_ENTRY)
    cases = [(15, 10), (20, 5), (25, 3), (24, 1), (60, 5), (84, 200)]
    buffered = [log.read_with_buffer(offset, count) for offset, count in cases]
    assert log.written_end == 20  # none of these wrote the buffer
    far = log.read_with_buffer(150, 3)
    assert log.written_end == 200 and offsets(far) == [150, 151, 152]
    followed = log.read(153, count_max=2)
    log = reopen(log)
    assert buffered == [log.read(offset, count_max=count) for offset, count in cases]
    assert followed == log.read(153, count_max=2)
    assert offsets(buffered[0]) == list(range(15, 25))
    log.close()


def test_the_active_segment_reserves_space_ahead_of_writes(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The active file grows in steps ahead of its records (so an fsync need not
    write a new length); sealing, closing and recovery cut it back to its records."""
    log = Log.open(tmp_path / "l", SMALL)
    fill(log, 10)
    active = log.active
    reserved = active.path.read_bytes()[active.size :]
    assert reserved and reserved.count(0) == len(reserved)
    fill(log, 200)  # rolls several times
    assert all(seg.path.stat().st_size == seg.size for seg in log.segments[:-1])
    # A crash: the log is not closed. Recovery releases the space without a warning.
    with caplog.at_level("WARNING", logger="narad.log"):
        crashed = Log.open(tmp_path / "l", SMALL)
    assert caplog.records == []
    assert crashed.active.path.stat().st_size == crashed.active.size
    assert offsets(crashed.read(0)) == list(range(210))
    fill(crashed, 3)
    crashed.close()
    assert crashed.active.path.stat().st_size == crashed.active.size
    log = Log.open(tmp_path / "l", SMALL)
    assert offsets(log.read(0)) == list(range(213))
    log.close()


def test_truncate_discards_buffered_records(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "l", SMALL)
    fill(log, 10)
    log.append(b"unwritten", 100, 0)
    log.truncate(5)
    assert log.next_offset == 5
    log = reopen(log)
    assert offsets(log.read(0)) == [0, 1, 2, 3, 4]
    log.close()


def test_epochs_checkpoint_and_truncation(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "l", SMALL)
    fill(log, 10)
    log.begin_epoch(1)
    fill(log, 10)
    log.append(b"x", 100, 0, epoch=4)
    log.write()
    assert log.epochs == [(1, 10), (4, 20)]
    assert [r.epoch for r in log.read(0)] == [0] * 10 + [1] * 10 + [4]
    assert log.epoch_end(0) == (-1, 0)
    assert log.epoch_end(1) == (1, 20)
    assert log.epoch_end(3) == (1, 20)
    assert log.epoch_end(4) == (4, 21)
    log = reopen(log)
    assert log.epochs == [(1, 10), (4, 20)] and log.epoch == 4
    log.truncate(15)
    assert log.epochs == [(1, 10)]
    log = reopen(log)
    assert log.epochs == [(1, 10)] and log.epoch == 1
    log.close()


def test_write_error_fails_the_log_for_good(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "l", SMALL)
    fill(log, 3)
    log.append(b"doomed", 10, 0)
    os.close(log.active.fd)  # the next write meets EBADF from the kernel
    with pytest.raises(LogFailed, match="write failed"):
        log.write()
    assert log.failure is not None
    with pytest.raises(LogFailed):
        log.append(b"more", 11, 0)
    with pytest.raises(LogFailed):
        log.sync()
    log.active.fd = -1
    log.close()
    log = Log.open(tmp_path / "l", SMALL)
    assert offsets(log.read(0)) == [0, 1, 2]
    log.close()


def test_fsync_error_fails_the_log(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "l", SMALL)
    log.append(b"a", 1, 0)
    log.write()
    os.close(log.active.fd)
    with pytest.raises(LogFailed, match="fsync failed"):
        log.sync()
    assert log.durable_end == 0
    with pytest.raises(LogFailed):
        log.write()
    log.active.fd = -1
    log.close()


def test_reopen_everysec_and_no_policies(tmp_path: Path) -> None:
    for policy in (FsyncPolicy.EVERYSEC, FsyncPolicy.NO):
        config = LogConfig(segment_bytes=8192, fsync=policy)
        log = Log.open(tmp_path / policy.value, config)
        fill(log, 100)
        log = reopen(log, config)
        assert offsets(log.read(0)) == list(range(100))
        log.close()


def test_misnamed_last_segment_is_refused_without_truncating(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "l", SMALL)
    fill(log, 200)
    last = log.active
    base = last.base_offset
    log.close()
    size = last.path.stat().st_size
    renamed = last.path.with_name(segment_name(base + 5))
    last.path.rename(renamed)
    last.index_path.rename(renamed.with_suffix(".index"))
    with pytest.raises(LogCorrupted):
        Log.open(tmp_path / "l", SMALL)
    assert renamed.stat().st_size == size


def test_recovery_of_a_record_larger_than_the_scan_chunk(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "l", LogConfig())
    log.append(b"x" * (5 << 20), 1, 0)
    log.append(b"y", 2, 0)
    log.close()
    log = Log.open(tmp_path / "l", LogConfig())
    assert [len(r.payload) for r in log.read(0)] == [5 << 20, 1]
    log.close()


def test_stale_middle_index_entry_is_rebuilt_on_read(tmp_path: Path) -> None:
    config = LogConfig(segment_bytes=64 << 10)
    log = Log.open(tmp_path / "l", config)
    fill(log, 1000)
    first = log.segments[0]
    assert len(first.index) > 4
    log.close()
    data = bytearray(first.index_path.read_bytes())
    entry = 2 * ENTRY_BYTES
    position = int.from_bytes(data[entry + 8 : entry + 16], "little")
    data[entry + 8 : entry + 16] = (position + 1).to_bytes(8, "little")
    first.index_path.write_bytes(bytes(data))
    log = Log.open(tmp_path / "l", config)
    target = SparseIndex(bytes(data)).entry(2)[0]
    assert offsets(log.read(target, count_max=3)) == [target, target + 1, target + 2]
    assert offsets(log.read_reverse(target + 1, count_max=3)) == [target + 1, target, target - 1]
    assert SparseIndex.load(first.index_path).entry(2)[1] == position  # type: ignore[union-attr]
    log.close()


def test_begin_epoch_twice_without_records_keeps_offsets_increasing(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "l", SMALL)
    log.begin_epoch(2)
    log.begin_epoch(5)
    assert log.epochs == [(5, 0)]
    log.close()


def entries_of(log: Log) -> list[tuple[int, int, int, int, bytes]]:
    log.write()
    return [
        (r.offset, r.id_ms, r.id_seq, r.timestamp_ms, r.payload)
        for r in log.read(log.start_offset, count_max=1 << 20, bytes_max=1 << 30)
    ]


@pytest.mark.parametrize("segment_bytes", [600, 4096, 1 << 20])
@pytest.mark.parametrize("runs", [[1], [3, 1, 5], [40, 2, 17, 1, 60]])
def test_append_entries_is_append_per_entry(
    tmp_path: Path, segment_bytes: int, runs: list[int]
) -> None:
    """Runs of entries in one call: the same records, segments, index and IDs as
    one append per entry at the same clock reading, rolls in the middle included."""
    config = LogConfig(segment_bytes=segment_bytes)
    one = Log.open(tmp_path / "one", config, clock=Clock())
    many = Log.open(tmp_path / "many", config, clock=Clock())
    sid = (5 << 64) | (2**64 - 4)  # the sequence carries into the milliseconds
    n = 0
    for count in runs:
        argvs = [[b"XADD", b"k", b"*", b"f", b"%d" % (n + i) * 7, b"g", b""] for i in range(count)]
        assert many.append_entries(argvs, 3, sid >> 64, sid & (2**64 - 1), format.FLAG_ENTRY) == n
        for i, argv in enumerate(argvs):
            s = sid + i
            payload = format.encode_fields(argv[3:])
            one.append(payload, s >> 64, s & (2**64 - 1), format.FLAG_ENTRY)
        sid, n = sid + count, n + count
        assert many.next_offset == one.next_offset == n
        assert many.last_id == one.last_id
        assert many.last_timestamp_ms == one.last_timestamp_ms
    assert entries_of(many) == entries_of(one)
    assert [s.base_offset for s in many.segments] == [s.base_offset for s in one.segments]
    for a, b in zip(many.segments, one.segments, strict=True):
        assert a.index._data == b.index._data
        assert a.path.read_bytes() == b.path.read_bytes()
    with pytest.raises(ValueError, match="below the log's last"):
        many.append_entries([[b"f", b"v"]], 0, 5, 0, format.FLAG_ENTRY)
    assert many.next_offset == n
    many.close()
    reopened = Log.open(tmp_path / "many", config)
    assert reopened.next_offset == n and reopened.last_id == one.last_id
    reopened.close()
    one.close()


def test_append_entries_takes_the_callers_clock_reading(tmp_path: Path) -> None:
    """A given `timestamp_ms` stamps the run's records instead of the log's clock, and
    never moves the log's timestamps back (as `append` with one)."""
    log = Log.open(tmp_path / "l", SMALL, clock=Clock(1_000_000))
    log.append_entries([[b"f", b"v"]], 0, 1, 0, format.FLAG_ENTRY, timestamp_ms=2_000_000)
    log.append_entries([[b"f", b"v"]] * 2, 0, 2, 0, format.FLAG_ENTRY, timestamp_ms=1_500_000)
    log.append_entries([[b"f", b"v"]], 0, 3, 0, format.FLAG_ENTRY)
    assert [r[3] for r in entries_of(log)] == [2_000_000] * 4
    assert log.last_id == (3, 0) and log.last_timestamp_ms == 2_000_000
    log.close()


def test_append_entries_on_a_failed_log_raises(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "l", SMALL)
    log.failure = "broken"
    with pytest.raises(LogFailed):
        log.append_entries([[b"f", b"v"]], 0, 1, 0, format.FLAG_ENTRY)
    assert log.next_offset == 0


@pytest.mark.parametrize("segment_bytes", [700, 8192, 1 << 20])
def test_read_in_batches_is_read_record_by_record(tmp_path: Path, segment_bytes: int) -> None:
    """Unbounded-bytes reads take the batched path; bounded ones the per-record one:
    the same records for every start, count and end."""
    log = Log.open(tmp_path / "l", LogConfig(segment_bytes=segment_bytes))
    for i in range(300):
        log.append(payload(i, 8 + i % 90), 1 + i, 0, format.FLAG_ENTRY)
        if i % 37 == 0:
            log.write()
    log.set_start(13)
    for offset in (0, 13, 14, 100, 150, 299, 300):
        for count in (0, 1, 2, 7, 64, 1000):
            for end in (None, 150, 151, 299):
                fast = log.read(offset, count_max=count, end=end)
                slow = log.read(offset, count_max=count, bytes_max=(1 << 62) - 1, end=end)
                assert fast == slow, (offset, count, end)
    log.close()


@pytest.mark.parametrize("segment_bytes", [700, 8192, 1 << 20])
def test_read_entries_goes_on_where_the_last_read_ended(tmp_path: Path, segment_bytes: int) -> None:
    """`read_entries` gives what `read` gives, filtered and cut as it says, within the
    segment the last read ended in; it leaves the hint right for the next read, and
    does nothing when the hint names another offset."""
    log = Log.open(tmp_path / "l", LogConfig(segment_bytes=segment_bytes))
    for i in range(300):
        log.append(payload(i, 8 + i % 90), 1 + i // 3, i % 3, format.FLAG_ENTRY)
        if i % 37 == 0:
            log.write()
    log.write()
    log.set_start(13)
    every = log.read(13)
    assert log.read_entries(50, 5, format.U64_MAX, set()) is None  # no read ended at 49
    for offset in (14, 15, 100, 151, 299, 300):
        for count in (1, 2, 7, 64, 1000):
            for high_at, deleted in ((1000, set()), (1000, {offset, offset + 2}), (130, {140})):
                log.read(offset - 1, count_max=1)  # a read that ends right before `offset`
                seg = log.segments[bisect.bisect_right(log._bases, offset) - 1]
                high = (1 + high_at // 3) << 64 | high_at % 3
                got = log.read_entries(offset, count, high, deleted)
                assert got is not None
                entries, after, above = got
                expected, taken, stopped = [], None, False
                for rec in every:
                    if rec.offset < offset or rec.offset >= seg.next_offset:
                        continue
                    if len(expected) == count:
                        break
                    sid = rec.id_ms << 64 | rec.id_seq
                    if sid > high:
                        stopped = True
                        break
                    taken = (sid, rec.offset + 1)
                    if rec.offset not in deleted:
                        expected.append((sid, rec.payload))
                assert (entries, after, above) == (expected, taken, stopped), (offset, count)
                if after is not None:  # the next read starts where this one stopped
                    follow = log.read(after[1], count_max=3)
                    assert follow == [r for r in every if r.offset >= after[1]][:3]
    log.close()
