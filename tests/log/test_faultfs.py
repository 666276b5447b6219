"""Power cuts, as tests/faultfs.py models them, through the real log.

First the model's own rules, on plain files and on narad's segments and checkpoints;
then many seeded random cuts, at any intercepted call of a random workload, after
each of which the real `Log.open` must recover every record that was durable.
"""

from __future__ import annotations

import itertools
import os
import random
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import pytest

from narad.log import checkpoint
from narad.log.check import Kind, check_log
from narad.log.checkpoint import fsync_dir
from narad.log.log import Log, LogConfig
from narad.log.segment import Segment, segment_name
from tests.faultfs import Counters, FaultFS

CUTS = 200
SMALL = LogConfig(segment_bytes=2048)


class Cuts:
    """Fresh folders (outside the FaultFS root) to write cuts into."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._numbers = itertools.count()

    def take(self, fs: FaultFS, rng: random.Random) -> Path:
        dest = self.folder / str(next(self._numbers))
        fs.cut(dest, rng)
        return dest


@pytest.fixture
def fs(tmp_path: Path) -> Iterator[FaultFS]:
    with FaultFS(tmp_path / "root") as active:
        yield active


@pytest.fixture
def cuts(tmp_path: Path) -> Cuts:
    return Cuts(tmp_path / "cuts")


def write_durably(path: Path, data: bytes) -> None:
    """Create `path` with `data`, the file and its folder entry fsynced."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    fsync_dir(path.parent)


def payloads(log: Log) -> list[bytes]:
    return [r.payload for r in log.read(0)]


# -- the model ---------------------------------------------------------------------------


def test_paths_outside_the_root_pass_through_and_exit_restores_os(tmp_path: Path) -> None:
    real_pwrite = os.pwrite
    outside = tmp_path / "outside"
    with FaultFS(tmp_path / "root") as fs:
        assert os.pwrite is not real_pwrite
        fd = os.open(outside, os.O_RDWR | os.O_CREAT, 0o644)
        os.pwrite(fd, b"not modelled", 0)
        os.fsync(fd)
        os.close(fd)
        outside.with_name("outside.txt").write_text("nor this")
        assert fs.counters == Counters()
    assert os.pwrite is real_pwrite
    assert outside.read_bytes() == b"not modelled"


def test_a_synced_record_survives_every_cut_and_a_later_one_only_whole(
    fs: FaultFS, cuts: Cuts
) -> None:
    log = Log.open(fs.root, SMALL)
    log.append(b"durable", 1)
    log.write()
    log.sync()
    log.append(b"written, not synced", 2)
    log.write()
    rng = random.Random(1)
    seen = set()
    for _ in range(50):
        opened = Log.open(cuts.take(fs, rng), SMALL)
        kept = payloads(opened)
        opened.close()
        assert kept in ([b"durable"], [b"durable", b"written, not synced"])
        seen.add(len(kept))
    log.close()
    assert seen == {1, 2}, "a cut may keep or lose what was not synced"


def leading(data: bytes, byte: bytes) -> int:
    return len(data) - len(data.lstrip(byte))


def test_unsynced_writes_survive_as_a_prefix_torn_only_at_the_last(
    fs: FaultFS, cuts: Cuts
) -> None:
    path = fs.root / "f"
    write_durably(path, b"d" * 40)
    fd = os.open(path, os.O_WRONLY)
    os.pwrite(fd, b"1" * 10, 20)
    os.pwrite(fd, b"2" * 10, 0)
    os.pwrite(fd, b"3" * 10, 40)  # past the durable end
    os.close(fd)
    rng = random.Random(2)
    outcomes = set()
    for _ in range(CUTS):
        data = (cuts.take(fs, rng) / "f").read_bytes()
        ones, twos, threes = leading(data[20:30], b"1"), leading(data[:10], b"2"), len(data) - 40
        # Each write kept is a prefix of its bytes, the durable ones after it.
        assert data[20 + ones : 30] == b"d" * (10 - ones)
        assert data[twos:20] == b"d" * (20 - twos) and data[30:40] == b"d" * 10
        assert threes >= 0 and data[40:] == b"3" * threes
        # A write is kept only if every earlier one is kept whole.
        if twos:
            assert ones == 10
        if threes:
            assert (ones, twos) == (10, 10)
        outcomes.add((ones, twos, threes))
    assert (0, 0, 0) in outcomes and (10, 10, 10) in outcomes
    assert any(0 < n < 10 for outcome in outcomes for n in outcome), "no write was torn"


def test_a_segment_created_without_a_folder_fsync_is_lost(fs: FaultFS, cuts: Cuts) -> None:
    log = Log.open(fs.root, SMALL)  # creates segment 0 and fsyncs the folder
    log.close()
    seg = Segment(fs.root, 5, create=True)
    os.pwrite(seg.fd, b"synced, but not its name", 0)
    os.fdatasync(seg.fd)
    rng = random.Random(3)
    for _ in range(20):
        assert sorted(p.name for p in cuts.take(fs, rng).iterdir()) == [segment_name(0)]
    fsync_dir(fs.root)
    for _ in range(20):
        dest = cuts.take(fs, rng)
        assert (dest / segment_name(5)).read_bytes() == b"synced, but not its name"
    seg.close()


def test_a_rename_or_unlink_is_undone_without_a_folder_fsync(fs: FaultFS, cuts: Cuts) -> None:
    old, new = fs.root / "a", fs.root / "b"
    write_durably(old, b"old")
    write_durably(new, b"new")
    rng = random.Random(4)
    os.replace(new, old)
    dest = cuts.take(fs, rng)
    assert (dest / "a").read_bytes() == b"old" and (dest / "b").read_bytes() == b"new"
    fsync_dir(fs.root)
    dest = cuts.take(fs, rng)
    assert (dest / "a").read_bytes() == b"new" and not (dest / "b").exists()
    old.unlink()
    assert (cuts.take(fs, rng) / "a").read_bytes() == b"new"
    fsync_dir(fs.root)
    assert list(cuts.take(fs, rng).iterdir()) == []


def test_a_new_folder_is_an_entry_of_its_parent(fs: FaultFS, cuts: Cuts) -> None:
    sub = fs.root / "sub"
    sub.mkdir()
    write_durably(sub / "f", b"in sub")  # fsyncs sub, not the root
    rng = random.Random(5)
    assert list(cuts.take(fs, rng).iterdir()) == []
    fsync_dir(fs.root)
    assert (cuts.take(fs, rng) / "sub" / "f").read_bytes() == b"in sub"


def test_a_removed_folder_comes_back_without_a_parent_fsync(fs: FaultFS, cuts: Cuts) -> None:
    # How narad/keyspace.py removes a stream's folder: shutil.rmtree, by descriptors.
    gone = fs.root / "gone"
    gone.mkdir()
    write_durably(gone / "f", b"kept")
    fsync_dir(fs.root)
    shutil.rmtree(gone)
    rng = random.Random(10)
    assert (cuts.take(fs, rng) / "gone" / "f").read_bytes() == b"kept"
    fsync_dir(fs.root)
    assert list(cuts.take(fs, rng).iterdir()) == []
    assert (fs.counters.unlinks, fs.counters.mkdirs) == (2, 1)


def test_a_rewrite_through_open_is_old_empty_or_a_prefix_of_the_new(
    fs: FaultFS, cuts: Cuts
) -> None:
    # How an index file is rewritten (SparseIndex.write_all): truncated, then written.
    path = fs.root / "i"
    write_durably(path, b"old content")
    path.write_bytes(b"new content, longer")
    rng = random.Random(11)
    outcomes = {(cuts.take(fs, rng) / "i").read_bytes() for _ in range(100)}
    new = b"new content, longer"
    assert all(data in (b"old content", new[: len(data)]) for data in outcomes), outcomes
    assert {b"old content", b"", new} <= outcomes
    assert any(0 < len(data) < len(new) for data in outcomes if data != b"old content")


def test_a_checkpoint_is_old_or_new_at_every_cut(fs: FaultFS, cuts: Cuts) -> None:
    path = fs.root / "x.checkpoint"
    rng = random.Random(6)
    read_back: list[list[str] | None] = []

    def cut_three_times(_call: str, _number: int) -> None:
        for _ in range(3):
            read_back.append(checkpoint.read(cuts.take(fs, rng) / path.name))

    fs.on_call = cut_three_times
    checkpoint.write(path, ["first"])
    assert read_back and all(lines in (None, ["first"]) for lines in read_back)
    assert read_back[0] is None and read_back[-1] == ["first"]
    read_back.clear()
    checkpoint.write(path, ["second", "longer"])
    fs.on_call = None
    assert all(lines in (["first"], ["second", "longer"]) for lines in read_back)
    assert read_back[0] == ["first"] and read_back[-1] == ["second", "longer"]


def test_counters_show_one_fsync_per_commit(fs: FaultFS) -> None:
    log = Log.open(fs.root, SMALL)
    log.append(b"one", 1)
    log.append(b"two", 2)
    before = fs.counters.copy()
    log.write()
    log.sync()
    commit = fs.counters - before
    assert (commit.writes, commit.fsyncs, commit.dir_fsyncs) == (1, 1, 0)
    before = fs.counters.copy()
    assert not log.sync()
    assert fs.counters.calls == before.calls, "a sync with nothing new touches nothing"
    log.roll()
    roll = fs.counters - before
    assert (roll.fsyncs, roll.dir_fsyncs) == (1, 1)
    before = fs.counters.copy()
    log.set_start(1)
    start = fs.counters - before
    assert (start.fsyncs, start.renames, start.dir_fsyncs) == (1, 1, 1)
    log.close()


def test_a_new_log_folder_survives_a_cut_after_its_first_sync(fs: FaultFS, cuts: Cuts) -> None:
    log = Log.open(fs.root / "stream" / "data", SMALL)
    log.append(b"acknowledged", 1)
    log.write()
    log.sync()
    opened = Log.open(cuts.take(fs, random.Random(7)) / "stream" / "data", SMALL)
    assert payloads(opened) == [b"acknowledged"]
    opened.close()
    log.close()


def test_a_log_cut_right_after_a_roll_can_roll_again(fs: FaultFS, cuts: Cuts) -> None:
    # narad/repair.py's _compact rolls, then syncs a snapshot into the new segment; a
    # cut between the two leaves an empty active segment, and the compaction at the
    # next start rolls first.
    log = Log.open(fs.root, SMALL)
    log.append(b"op", 1)
    log.roll()
    opened = Log.open(cuts.take(fs, random.Random(8)), SMALL)
    assert opened.active.empty
    try:
        opened.roll()
    finally:
        opened.close()
        log.close()


def test_records_appended_after_a_cut_below_a_start_past_the_durable_end_survive(
    fs: FaultFS, cuts: Cuts
) -> None:
    log = Log.open(fs.root, SMALL)
    log.append(b"durable", 1)
    log.write()
    log.sync()
    log.append(b"buffered", 2)
    log.append(b"buffered too", 3)
    log.set_start(3)  # the start checkpoint is durable; the two records are not
    dest = cuts.take(fs, random.Random(9))
    log.close()
    opened = Log.open(dest, SMALL)
    assert (opened.start_offset, opened.next_offset) == (1, 1)
    opened.append(b"after the cut", 4)
    opened.write()
    opened.sync()
    opened.close()
    opened = Log.open(dest, SMALL)
    try:
        assert payloads(opened) == [b"after the cut"]
    finally:
        opened.close()


# -- random cuts of a random workload ----------------------------------------------------------


class Cut(NamedTuple):
    dest: Path
    call: str  # the intercepted call the cut followed
    durable: int  # every offset below this was durable
    start_low: int  # the logical start a recovery may give: at least this...
    start_high: int  # ... and at most this
    expected: list[bytes]  # the payload appended last at each offset


class Workload:
    """A log under a FaultFS, driven at random, and what a cut at any call may keep.

    `payloads[o]` is the payload last appended at offset o (a truncation drops the
    offsets it removes once it returns). `truncating` is the target of a truncation
    under way, `reopened_at` the durable end while the log is closed and reopened.
    """

    def __init__(self, fs: FaultFS, cuts: Cuts, seed: int) -> None:
        self.fs = fs
        self.cuts = cuts
        self.rng = random.Random(seed)
        self.log = Log.open(fs.root, SMALL)
        self.payloads: list[bytes] = []
        self.start_low = self.start_high = 0
        self.truncating: int | None = None
        self.reopened_at: int | None = None
        self.next_id = 1
        self.taken: list[Cut] = []

    def durable_floor(self) -> int:
        if self.reopened_at is not None:
            return self.reopened_at
        floor = self.log.durable_end
        return floor if self.truncating is None else min(floor, self.truncating)

    def maybe_cut(self, call: str, _number: int) -> None:
        if len(self.taken) >= CUTS or self.rng.random() >= 0.15:
            return
        dest = self.cuts.take(self.fs, self.rng)
        self.taken.append(
            Cut(
                dest,
                call,
                self.durable_floor(),
                self.start_low,
                self.start_high,
                list(self.payloads),
            )
        )

    def step(self) -> None:
        rng, log = self.rng, self.log
        choice = rng.choices(
            ["append", "write", "sync", "roll", "start", "retain", "truncate", "reopen"],
            [40, 10, 10, 2, 2, 2, 2, 1],
        )[0]
        if choice == "append":
            offset = log.next_offset
            payload = b"%d:%d:" % (offset, self.next_id) + rng.randbytes(rng.randint(0, 300))
            log.append(payload, self.next_id)
            self.next_id += 1
            assert len(self.payloads) == offset
            self.payloads.append(payload)
        elif choice == "write":
            log.write()
        elif choice == "sync":
            log.write()
            log.sync()
        elif choice == "roll" and not log.active.empty:  # see the test of rolling twice
            log.roll()
        elif choice == "start":
            # Up to the durable end, as narad's compactions do: see the test of a
            # start past it.
            target = rng.randint(log.start_offset, log.durable_end)
            self.start_high = max(self.start_high, target)
            log.set_start(target)
            self.start_low = log.start_offset
        elif choice == "retain":
            log.apply_retention()
        elif choice == "truncate" and log.next_offset > log.start_offset:
            target = rng.randint(log.start_offset, log.next_offset - 1)
            self.truncating = target
            log.truncate(target)
            self.truncating = None
            del self.payloads[target:]
        elif choice == "reopen":
            log.close()
            self.reopened_at = log.durable_end
            self.log = Log.open(self.fs.root, SMALL)
            self.reopened_at = None


# What `narad check` may find in what a crash leaves: a torn tail, and indexes (a
# cache, never fsynced) that differ from a rebuild.
CRASH_PROBLEMS = {Kind.TORN_TAIL, Kind.INDEX}


def check_recovery(cut: Cut) -> None:
    where = f"cut in {cut.dest} after {cut.call}"
    problems = check_log(cut.dest).problems
    assert {p.kind for p in problems} <= CRASH_PROBLEMS, (where, problems)
    log = Log.open(cut.dest, SMALL)
    try:
        start, end = log.start_offset, log.next_offset
        assert min(cut.start_low, end) <= start <= cut.start_high, where
        assert cut.durable <= end <= len(cut.expected), where
        records = log.read(0)
        assert [r.offset for r in records] == list(range(start, end)), where
        assert [r.payload for r in records] == cut.expected[start:end], where
        log.append(b"after recovery", 1 << 40)
        log.write()
        log.sync()
    finally:
        log.close()
    log = Log.open(cut.dest, SMALL)
    try:
        assert log.next_offset == end + 1, where
        assert log.read(end)[0].payload == b"after recovery", where
    finally:
        log.close()


def test_random_cuts_keep_every_durable_record(fs: FaultFS, cuts: Cuts) -> None:
    work = Workload(fs, cuts, seed=20261201)
    fs.on_call = work.maybe_cut
    for _ in range(20_000):
        if len(work.taken) >= CUTS:
            break
        work.step()
    fs.on_call = None
    work.log.close()
    assert len(work.taken) == CUTS
    for cut in work.taken:
        check_recovery(cut)
    calls = {cut.call for cut in work.taken}
    assert {"pwrite", "fdatasync", "replace", "unlink"} <= calls, calls
    assert max(cut.durable for cut in work.taken) > 0
