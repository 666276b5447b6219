"""Epoch changes in the journal, and a node's history cut back to an earlier position
(narad/log/truncation.py): before and after the checkpoint, interrupted, refused."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from narad.keyspace import Keyspace
from narad.log import Log, LogCorrupted
from narad.log.journal import Journal, commits
from narad.log.truncation import truncate
from tests.journaled import add, crash, entries, open_store, small_journal_segments


def narad_check(folder: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "narad", "check", str(folder)],
        capture_output=True, text=True, timeout=120,
    )


def two_epochs(folder: Path) -> tuple[Keyspace, int]:
    """Epoch 0: stream s with 5 entries. Epoch 1: 4 more in s, a trim of s, and a new
    stream t with 2 entries. The open store, and the position where epoch 0 ended."""
    store = open_store(folder)
    add(store.create_stream(0, b"s"), 5)
    store.journal.commit()
    store.journal.begin_epoch(1)
    s = store.get(0, b"s")
    assert s is not None
    add(s, 4)
    s.log_op(["trim", 3])
    add(store.create_stream(0, b"t"), 2)
    store.journal.commit()
    epoch, end = store.journal.epoch_end(0)
    assert epoch == 0
    return store, end


def test_an_epoch_begins_with_a_commit_that_says_so(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    journal = store.journal
    before = journal.position
    journal.begin_epoch(3)
    assert journal.commit()  # nothing else to carry: the epoch change alone
    with pytest.raises(ValueError, match="not above"):
        journal.begin_epoch(3)
    crash(store)  # no checkpoint: the journal keeps the commit
    log = Log.open(tmp_path / "journal")
    try:
        records = log.read(before)
        assert [(r.offset, r.epoch) for r in records] == [(before, 3)]
        assert [changes for _, changes, _ in commits(log, before)] == [[["epoch", 3]]]
    finally:
        log.close()
    store = open_store(tmp_path)
    assert store.journal.epoch == 3
    assert store.journal.epoch_end(2) == (0, before)
    assert store.journal.epoch_end(3) == (3, store.journal.position)
    store.close()


def test_truncating_before_the_checkpoint(tmp_path: Path) -> None:
    store, end = two_epochs(tmp_path)
    store.close()  # a checkpoint at the journal's end, past the truncation point
    assert truncate(tmp_path, end) == 1
    store = open_store(tmp_path)
    assert entries(store, b"s") == [1, 2, 3, 4, 5]
    assert store.get(0, b"t") is None
    assert (store.journal.position, store.journal.epoch) == (end, 0)
    store.close()
    assert sorted(p.name for p in (tmp_path / "streams").iterdir()) == ["1"]
    done = narad_check(tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr


def test_truncating_after_a_crash(tmp_path: Path) -> None:
    store, end = two_epochs(tmp_path)
    store.journal.write_behind()  # the logs hold records of the commit to be removed
    crash(store)  # the checkpoint is the one taken at open, before the truncation point
    assert truncate(tmp_path, end) == 1
    store = open_store(tmp_path)
    assert entries(store, b"s") == [1, 2, 3, 4, 5]
    assert store.get(0, b"t") is None
    store.close()
    done = narad_check(tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr


def test_an_interrupted_truncation_keeps_the_whole_history_until_repeated(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, end = two_epochs(tmp_path)
    store.close()

    def power_cut(self: Journal, position: int) -> None:
        raise OSError("power cut")

    with monkeypatch.context() as patch:
        patch.setattr(Journal, "truncate", power_cut)
        with pytest.raises(OSError, match="power cut"):
            truncate(tmp_path, end)  # the earlier checkpoint is written, nothing cut
    store = open_store(tmp_path)
    assert entries(store, b"s") == [4, 5, 6, 7, 8, 9]  # the trim of epoch 1 kept
    assert entries(store, b"t") == [1, 2]
    store.close()
    assert truncate(tmp_path, end) == 1
    store = open_store(tmp_path)
    assert entries(store, b"s") == [1, 2, 3, 4, 5]
    store.close()


def test_truncating_past_the_retained_journal_is_refused(tmp_path: Path) -> None:
    store = small_journal_segments(tmp_path)
    store.close()  # the checkpoint deletes the journal segments before it
    with pytest.raises(LogCorrupted, match="needs the logs copied from the leader"):
        truncate(tmp_path, 1)
    store = open_store(tmp_path)
    assert len(entries(store, b"s")) == 40
    store.close()
