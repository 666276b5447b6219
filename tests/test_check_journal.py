"""`narad check` on a data dir holds its journal against its logs
(narad/check_journal.py): data dirs made by a real Keyspace, damaged by hand, checked
by the real command line in a process of its own."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from narad.keyspace import Keyspace
from narad.log import Log, format
from narad.log import journal as journal_module
from narad.log.checkpointer import CHECKPOINT_FILE
from narad.log.format import FLAG_ENTRY, encode_fields
from narad.log.journal import FLAG_CONTINUES
from narad.streams.stream import Stream
from tests.journaled import crash, open_store, small_journal_segments


def add(stream: Stream, n: int) -> None:
    for _ in range(n):
        sid = stream.last_id + 1
        stream.add(sid, [b"n", b"%d" % sid])


def narad_check(folder: Path, *args: str) -> tuple[int, list[str]]:
    """Exit code and stdout lines of `narad check folder`."""
    done = subprocess.run(
        [sys.executable, "-m", "narad", "check", str(folder), *args],
        capture_output=True, text=True, timeout=120,
    )
    assert "Traceback" not in done.stderr, done.stderr
    return done.returncode, done.stdout.splitlines()


def kinds(lines: list[str]) -> list[str]:
    """The kind of each problem line."""
    return [line.split(": ")[1] for line in lines[:-1]]


def segment(folder: Path) -> Path:
    return sorted(folder.glob("*.log"))[-1]


def records(path: Path) -> list[format.Record]:
    return format.pure_scan(path.read_bytes(), 0, 0, 1 << 30)[0]


def data_dir(folder: Path) -> Path:
    """A data dir with one stream s (uid 1) of 5 entries, closed cleanly (a
    checkpoint at the journal's end)."""
    store = open_store(folder)
    add(store.create_stream(0, b"s"), 5)
    store.close()
    return folder


def crashed(folder: Path, behind: int = 3) -> Keyspace:
    """data_dir, reopened, `behind` more entries committed to the journal only, then
    crashed: the data log lacks what the journal holds past the checkpoint."""
    data_dir(folder)
    store = open_store(folder)
    stream = store.get(0, b"s")
    assert stream is not None
    add(stream, behind)
    store.journal.commit()
    crash(store)
    return store


def test_a_clean_data_dir_checks_clean(tmp_path: Path) -> None:
    code, out = narad_check(data_dir(tmp_path))
    assert code == 0, out
    assert out == [out[-1]] and out[-1].endswith(": clean")
    # The journal folder is checked as a log as well: journal, meta, data, state.
    assert out[-1].startswith("checked 4 logs, 4 segments")


def test_a_crashed_data_dir_checks_clean(tmp_path: Path) -> None:
    crashed(tmp_path)
    code, out = narad_check(tmp_path)
    assert code == 0, out
    assert out[-1].endswith(": clean")


def test_records_written_ahead_of_an_unfinished_commit_are_repairable(tmp_path: Path) -> None:
    data_dir(tmp_path)
    store = open_store(tmp_path)
    stream = store.get(0, b"s")
    assert stream is not None
    add(stream, 2)
    stream.data.write()  # the records reach the data log; no commit carries them
    crash(store)
    code, out = narad_check(tmp_path)
    assert code == 1
    assert kinds(out) == ["log-ahead"]
    assert out[0].startswith(f"{tmp_path / 'streams' / '1' / 'data'}: log-ahead: ")
    assert "2 records past its end in the journal (offsets 5..6" in out[0]
    assert "recovery cuts the log back to offset 5" in out[0]
    assert out[0].endswith("[repairable with --repair]")
    code, out = narad_check(tmp_path, "--repair")
    assert code == 0, out
    assert out[0].endswith("[repaired]")
    code, out = narad_check(tmp_path)
    assert code == 0, out
    store = open_store(tmp_path)
    stream = store.get(0, b"s")
    assert stream is not None and [sid for sid, _ in stream.range(0, 1 << 64)] == [1, 2, 3, 4, 5]
    store.close()


def test_a_stray_record_appended_to_a_data_log_is_reported(tmp_path: Path) -> None:
    data_dir(tmp_path)
    log = Log.open(tmp_path / "streams" / "1" / "data")
    log.append(encode_fields([b"n", b"stray"]), 99, 0, FLAG_ENTRY)
    log.close()
    code, out = narad_check(tmp_path)
    assert code == 1
    assert kinds(out) == ["log-ahead"]
    assert "1 records past its end in the journal (offsets 5..5" in out[0]


def test_a_data_log_cut_below_the_checkpoint_is_repaired_by_its_key(tmp_path: Path) -> None:
    """The records lost are lost; the key is brought back with those its log holds."""
    data_dir(tmp_path)
    path = segment(tmp_path / "streams" / "1" / "data")
    cut = records(path)[3].position  # a record boundary: the log itself stays sound
    with open(path, "r+b") as f:
        f.truncate(cut)
    code, out = narad_check(tmp_path)
    assert code == 1
    assert kinds(out) == ["log-behind", "key"]
    assert "ends at offset 3 but the journal checkpoint says it held 5 records" in out[0]
    assert "offsets 3..4 are lost" in out[0]
    assert out[0].endswith("[repairable with --repair]")
    assert "key 's' (db 0) is unavailable at start: the log lacks records" in out[1]
    code, out = narad_check(tmp_path, "--repair")
    assert code == 0 and kinds(out) == ["log-behind", "key"], out
    assert all(line.endswith("[repaired]") for line in out[:-1])
    code, out = narad_check(tmp_path)
    assert code == 0 and len(out) == 1 and out[0].endswith(": clean"), out
    store = open_store(tmp_path)
    stream = store.get(0, b"s")
    assert stream is not None and stream.length == 3
    store.close()


def test_a_missing_checkpoint_is_reported(tmp_path: Path) -> None:
    crashed(tmp_path)
    (tmp_path / "journal" / CHECKPOINT_FILE).unlink()
    code, out = narad_check(tmp_path)
    assert code == 1
    assert kinds(out) == ["checkpoint"]
    assert out[0].startswith(f"{tmp_path / 'journal' / CHECKPOINT_FILE}: checkpoint: missing")


def test_the_newest_journal_segment_deleted_by_hand_is_reported(tmp_path: Path) -> None:
    store = small_journal_segments(tmp_path)
    crash(store)
    newest = sorted((tmp_path / "journal").glob("*.log"))[-1]
    newest.unlink()
    code, out = narad_check(tmp_path)
    assert code == 1
    assert f"{newest}: offsets: missing: the journal's newest segment" in out[0]
    code, out = narad_check(tmp_path, "--repair")
    assert code == 1
    assert not newest.exists()


def test_a_damaged_checkpoint_is_reported(tmp_path: Path) -> None:
    crashed(tmp_path)
    path = tmp_path / "journal" / CHECKPOINT_FILE
    path.write_bytes(path.read_bytes().replace(b"position", b"pesition"))
    code, out = narad_check(tmp_path)
    assert code == 1
    assert kinds(out) == ["checkpoint"]
    assert "damaged (crc line missing or wrong)" in out[0]


def test_a_checkpoint_past_the_journal_end_is_reported(tmp_path: Path) -> None:
    from narad.log import checkpoint

    crashed(tmp_path)
    path = tmp_path / "journal" / CHECKPOINT_FILE
    lines = checkpoint.read(path)
    assert lines is not None
    checkpoint.write(path, ["position 99", *lines[1:]])
    code, out = narad_check(tmp_path)
    assert code == 1
    assert kinds(out) == ["checkpoint"]
    assert "position 99 lies outside the journal's retained positions" in out[0]


def test_a_flipped_byte_in_a_journal_record_after_the_checkpoint(tmp_path: Path) -> None:
    store = crashed(tmp_path)
    del store
    store = open_store(tmp_path)  # recovery, then a checkpoint; two more commits after it
    stream = store.get(0, b"s")
    assert stream is not None
    add(stream, 1)
    store.journal.commit()
    add(stream, 1)
    store.journal.commit()
    stream.data.write()  # the data log holds both commits' records
    crash(store)
    path = segment(tmp_path / "journal")
    last_two = records(path)[-2:]
    data = bytearray(path.read_bytes())
    data[last_two[0].position + format.HEADER_BYTES + 2] ^= 0x10
    path.write_bytes(bytes(data))
    code, out = narad_check(tmp_path)
    assert code == 1
    # Only the journal's own damage: with a commit unreadable, the data log's records
    # after it are not judged ahead of the journal.
    assert kinds(out) == ["corrupt"]
    assert out[0].startswith(f"{path}:{last_two[0].position}: corrupt: CRC mismatch")


def test_a_journal_record_that_is_not_a_commit(tmp_path: Path) -> None:
    crashed(tmp_path)
    journal = Log.open(tmp_path / "journal")
    journal.append(b"not a commit at all")
    journal.close()
    code, out = narad_check(tmp_path)
    assert code == 1
    assert kinds(out) == ["commit"]
    assert "is not a commit" in out[0]


def test_log_bytes_that_differ_from_the_journal_are_corrupt(tmp_path: Path) -> None:
    crashed(tmp_path)  # the journal holds offsets 5..7 of the data log; the log lacks them
    log = Log.open(tmp_path / "streams" / "1" / "data")
    for sid in (6, 7):
        log.append(encode_fields([b"n", b"other"]), sid, 0, FLAG_ENTRY)
    log.close()
    code, out = narad_check(tmp_path)
    assert code == 1
    assert kinds(out) == ["corrupt", "corrupt"]
    assert "record at offset 5 (streams/1/data) differs from the journal's bytes" in out[0]
    assert "[not repairable automatically]" in out[0]


def test_a_commit_missing_its_last_part_is_a_torn_tail(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(journal_module, "PART_BYTES", 2048)
    data_dir(tmp_path)
    store = open_store(tmp_path)
    stream = store.get(0, b"s")
    assert stream is not None
    for _ in range(40):
        stream.add(stream.last_id + 1, [b"pad", b"x" * 100])
    store.journal.commit()
    crash(store)
    path = segment(tmp_path / "journal")
    parts = records(path)
    assert parts[-2].flags & FLAG_CONTINUES and not parts[-1].flags & FLAG_CONTINUES
    with open(path, "r+b") as f:  # at a record boundary: the journal log stays sound
        f.truncate(parts[-1].position)
    first_part = next(r for r in parts if r.flags & FLAG_CONTINUES)
    code, out = narad_check(tmp_path)
    assert code == 1
    assert kinds(out) == ["torn-tail"]
    assert out[0].startswith(f"{path}:{first_part.position}: torn-tail: ")
    assert "recovery drops this commit" in out[0]
    code, out = narad_check(tmp_path, "--repair")
    assert code == 0, out
    code, out = narad_check(tmp_path)
    assert code == 0, out

