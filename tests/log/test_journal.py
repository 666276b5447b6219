"""The node's journal (narad/log/journal.py) and recovery from it, through a real
Keyspace on real files: a commit is one journal record and one fsync however many logs
it touched; after a crash every log gets exactly what the journal holds; damage the
node cannot mend is refused, naming what is wrong."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from narad.errors import CommandError
from narad.log import Log, LogCorrupted, checkpoint
from narad.log import journal as journal_module
from narad.log.checkpointer import CHECKPOINT_FILE
from narad.log.journal import FLAG_CONTINUES, commits
from tests.journaled import add, crash, entries, open_store, small_journal_segments

ENTRY = [b"field", b"value"]




def journal_records(folder: Path) -> list[tuple[int, int, int]]:
    """(offset, position in its segment, size) of every journal record."""
    log = Log.open(folder / "journal")
    try:
        return [(r.offset, r.position, r.size) for r in log.read(0)]
    finally:
        log.close()


def test_a_commit_of_many_streams_is_one_journal_record_and_one_fsync(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    streams = [store.create_stream(0, b"s%d" % i) for i in range(50)]
    store.journal.commit()
    before = (store.journal.stats.fsyncs, store.journal.position)
    synced = {s: s.data.durable_end for s in streams}
    for stream in streams:
        add(stream, 3)
    assert store.journal.commit()
    assert (store.journal.stats.fsyncs, store.journal.position) == (before[0] + 1, before[1] + 1)
    # The logs are written behind the journal: none of them was fsynced.
    assert all(s.data.durable_end == synced[s] for s in streams)
    assert all(s.data.committed_end == 3 for s in streams)
    store.close()


def test_recovery_replays_what_the_logs_lack(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    a, b = store.create_stream(0, b"a"), store.create_stream(0, b"b")
    store.commit()
    added = {b"a": add(a, 5), b"b": add(b, 7)}
    store.journal.commit()
    # Records committed but never written to their logs' files: only the journal
    # holds them.
    assert a.data.written_end == 0
    crash(store)
    store = open_store(tmp_path)
    assert entries(store, b"a") == added[b"a"] and entries(store, b"b") == added[b"b"]
    store.close()
    store = open_store(tmp_path)  # and from the checkpoint recovery took
    assert entries(store, b"a") == added[b"a"]
    store.close()


def test_a_log_ahead_of_the_journal_is_cut_back(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    stream = store.create_stream(0, b"s")
    kept = add(stream, 4)
    store.commit()
    add(stream, 3)
    stream.data.write()  # the records reach the file before any commit carries them
    assert stream.data.written_end == 7
    crash(store)
    store = open_store(tmp_path)
    assert entries(store, b"s") == kept
    store.close()


def test_torn_journal_tail_at_every_byte_of_the_last_commit(tmp_path: Path) -> None:
    origin = tmp_path / "origin"
    store = open_store(origin)
    a, b = store.create_stream(0, b"a"), store.create_stream(0, b"b")
    kept = {b"a": add(a, 2), b"b": add(b, 2)}
    store.journal.commit()
    add(a, 2)
    add(b, 3)
    store.journal.commit()
    crash(store)
    offset, position, size = journal_records(origin)[-1]
    segment = sorted((origin / "journal").glob("*.log"))[-1]
    for cut in range(position, position + size):
        copy = tmp_path / f"cut{cut}"
        shutil.copytree(origin, copy)
        with open(copy / "journal" / segment.name, "r+b") as f:
            f.truncate(cut)
        store = open_store(copy)
        # The torn commit is gone whole, from both streams.
        assert {k: entries(store, k) for k in kept} == kept, cut
        assert store.journal.position == offset
        store.close()
        shutil.rmtree(copy)


def test_a_commit_larger_than_a_part_is_split_and_stays_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(journal_module, "PART_BYTES", 4096)
    origin = tmp_path / "origin"
    store = open_store(origin)
    streams = [store.create_stream(0, b"s%d" % i) for i in range(4)]
    store.journal.commit()
    for stream in streams:
        for sid in range(1, 60):
            stream.add(sid, [b"pad", b"x" * 100])
    store.journal.commit()
    crash(store)
    records = journal_records(origin)
    assert len(records) > 3  # the big commit took several records
    log = Log.open(origin / "journal")
    flags = [r.flags & FLAG_CONTINUES for r in log.read(0)]
    whole = list(commits(log, 0))
    log.close()
    assert flags[-1] == 0 and all(flags[1:-1])
    assert len(whole) == 2  # the streams' creation, then the big one
    # Cut inside the big commit's second part: none of it survives.
    _, position, size = records[2]
    copy = tmp_path / "cut"
    shutil.copytree(origin, copy)
    segment = sorted((copy / "journal").glob("*.log"))[-1]
    with open(segment, "r+b") as f:
        f.truncate(position + size // 2)
    store = open_store(copy)
    assert all(entries(store, b"s%d" % i) == [] for i in range(4))
    # The whole parts before the cut are gone too: a later commit never joins them.
    assert store.journal.position == records[1][0]  # where the big commit began
    stream = store.get(0, b"s0")
    assert stream is not None
    stream.add(1, [b"after", b"cut"])
    store.journal.commit()
    crash(store)
    store = open_store(copy)
    assert entries(store, b"s0") == [1]
    store.close()
    store = open_store(origin)
    assert all(entries(store, b"s%d" % i) == list(range(1, 60)) for i in range(4))
    store.close()


def test_a_log_behind_its_checkpoint_makes_its_key_unavailable(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    add(store.create_stream(0, b"s"), 10)
    add(store.create_stream(0, b"t"), 3)
    store.close()  # a checkpoint: the data logs hold their records durably
    segment = sorted((tmp_path / "streams" / "1" / "data").glob("*.log"))[0]
    with open(segment, "r+b") as f:
        f.truncate(f.seek(0, 2) // 2)
    store = open_store(tmp_path)
    with pytest.raises(CommandError, match=r"key 's' is unavailable: its log streams/1/data "
                       r"cannot be used: .*checkpoint says it held 10 records"):
        store.get(0, b"s")
    assert entries(store, b"t") == [1, 2, 3]
    assert store.logs_unavailable()  # so no checkpoint frees the journal
    store.close()


def test_a_log_behind_the_journal_takes_the_journal_records(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    stream = store.create_stream(0, b"s")
    first = add(stream, 3)
    store.commit()
    store.checkpointer.run_now()
    more = add(stream, 3)
    store.journal.commit()
    stream.data.write()
    crash(store)
    segment = sorted((tmp_path / "streams").glob("*/data/*.log"))[0]
    size = segment.stat().st_size
    with open(segment, "r+b") as f:  # the records after the checkpoint are lost
        f.truncate(size - (size - 0) // 2)
    store = open_store(tmp_path)
    assert entries(store, b"s") == first + more
    store.close()


def test_a_missing_or_damaged_checkpoint_is_refused(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    add(store.create_stream(0, b"s"), 3)
    store.journal.commit()
    crash(store)
    path = tmp_path / "journal" / CHECKPOINT_FILE
    kept = path.read_bytes()
    path.write_bytes(kept[:-3] + b"99\n")
    with pytest.raises(LogCorrupted, match="is damaged"):
        open_store(tmp_path)
    path.unlink()
    with pytest.raises(LogCorrupted, match="is missing"):
        open_store(tmp_path)
    path.write_bytes(kept)
    store = open_store(tmp_path)
    assert entries(store, b"s") == [1, 2, 3]
    store.close()


def test_a_journal_segment_deleted_by_hand_is_refused(tmp_path: Path) -> None:
    store = small_journal_segments(tmp_path)
    crash(store)
    segments = sorted((tmp_path / "journal").glob("*.log"))
    assert len(segments) > 3
    segments[0].unlink()  # the one holding the checkpoint's position
    with pytest.raises(LogCorrupted, match="journal segment is missing"):
        open_store(tmp_path)


def test_a_journal_segment_deleted_from_the_middle_is_refused(tmp_path: Path) -> None:
    store = small_journal_segments(tmp_path)
    crash(store)
    segments = sorted((tmp_path / "journal").glob("*.log"))
    segments[1].unlink()
    with pytest.raises(LogCorrupted, match="but the next segment starts at"):
        open_store(tmp_path)


def test_the_newest_journal_segment_deleted_by_hand_is_refused(tmp_path: Path) -> None:
    store = small_journal_segments(tmp_path)
    store.journal.write_behind()  # the log holds what the lost segment held
    crash(store)
    segments = sorted((tmp_path / "journal").glob("*.log"))
    data = sorted((tmp_path / "streams").glob("*/data/*.log"))
    sizes = [p.stat().st_size for p in data]
    segments[-1].unlink()
    with pytest.raises(LogCorrupted, match=f"journal segment {segments[-1].name} is missing"):
        open_store(tmp_path)
    assert [p.stat().st_size for p in data] == sizes  # nothing was cut


def test_truncating_the_journal_across_segments_opens_again(tmp_path: Path) -> None:
    store = small_journal_segments(tmp_path)
    journal = store.journal
    assert len(journal.log.segments) > 3
    second = journal.log.segments[1].base_offset
    journal.truncate(second + 1)
    assert journal.log.next_offset == second + 1
    crash(store)
    store = open_store(tmp_path)  # the record of the newest segment went down with it
    assert store.journal.position == second + 1
    store.close()


def test_a_data_dir_from_before_the_journal_is_migrated(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    stream = store.create_stream(0, b"s")
    sids = add(stream, 5)
    stream.log_op(["trim", 2])
    store.close()
    shutil.rmtree(tmp_path / "journal")  # what an older version left: logs only
    store = open_store(tmp_path)
    assert entries(store, b"s") == sids[2:]
    assert checkpoint.read(tmp_path / "journal" / CHECKPOINT_FILE) is not None
    store.close()


def test_checkpoint_keeps_the_replicas_backlog(tmp_path: Path) -> None:
    store = small_journal_segments(tmp_path, backlog=9000)
    store.checkpointer.run_now()
    kept = store.journal.log.segments
    assert sum(seg.size for seg in kept) >= 9000
    assert sum(seg.size for seg in kept[1:]) < 9000  # but no whole segment more
    assert store.journal.log.start_offset == kept[0].base_offset > 0
    store.close()


def test_checkpoint_deletes_the_journal_before_it_and_moves_starts(tmp_path: Path) -> None:
    store = small_journal_segments(tmp_path)
    assert len(store.journal.log.segments) > 3
    store.checkpointer.run_now()
    assert len(store.journal.log.segments) == 1
    assert store.checkpointer.last.position == store.journal.position
    store.close()
