"""`narad dump` on a data dir made by a real Keyspace (each key's entries, and what
only the journal holds, with --key, --db, --from, --count) and on its log folders
(the journal's commits with their changes, state and metadata ops decoded), through
the real command line. tests/server/test_dump_live.py dumps a running server's."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from narad.log import format
from narad.log import journal as journal_module
from tests.journaled import crash, open_store

# A record line as narad dump prints it, then what follows it on the line.
RECORD = re.compile(r"^offset: (\d+) position: \d+ segment: \d{20}\.log .* crc-ok ?(.*)$")


def narad_dump(*args: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "narad", "dump", *map(str, args)],
        capture_output=True, text=True, timeout=60,
    )


def narad_check(*args: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "narad", "check", *map(str, args)],
        capture_output=True, text=True, timeout=60,
    )


def tails(stdout: str) -> list[str]:
    """What each line holds after the record fields (indented lines whole)."""
    found = []
    for line in stdout.splitlines():
        m = RECORD.match(line)
        found.append(line if m is None else m.group(2))
    return found


def data_log_bytes(root: Path, uid: int) -> list[int]:
    path = sorted((root / "streams" / str(uid) / "data").glob("*.log"))[0]
    return [r.size for r in format.pure_scan(path.read_bytes(), 0, 0, 1 << 30)[0]]


def test_dump_of_the_journal_names_each_commits_changes(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    stream = store.create_stream(0, b"s")
    stream.add(1, [b"n", b"1"])
    stream.add(2, [b"n", b"2"])
    store.journal.commit()
    store.journal.move_start(stream.data, 1)
    store.journal.commit()
    store.journal.begin_epoch(2)
    store.journal.commit()
    store.close()
    sizes = data_log_bytes(tmp_path, 1)
    meta = sorted((tmp_path / "meta").glob("*.log"))[0].stat().st_size
    run = narad_dump(tmp_path / "journal")
    assert run.returncode == 0, run.stderr
    assert tails(run.stdout) == [
        f"position 1: rec meta 0..0 (1 record, {meta} bytes), "
        f"rec streams/1/data 0..1 (2 records, {sum(sizes)} bytes)",
        "position 2: start streams/1/data 1",
        "position 3: epoch 2",
    ]
    run = narad_dump(tmp_path / "journal", "--payload", "--count", 1)
    assert run.returncode == 0, run.stderr
    assert tails(run.stdout)[1:] == [
        "  meta offset: 0 op: ['create', 1, 0, 's']",
        "  streams/1/data offset: 0 fields: b'n'=b'1'",
        "  streams/1/data offset: 1 fields: b'n'=b'2'",
    ]


def test_dump_of_a_commit_split_over_records(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(journal_module, "PART_BYTES", 1024)
    store = open_store(tmp_path)
    stream = store.create_stream(0, b"s")
    store.journal.commit()
    for sid in range(1, 21):
        stream.add(sid, [b"pad", b"x" * 100])
    store.journal.commit()
    store.close()
    shown = tails(narad_dump(tmp_path / "journal").stdout)
    parts = shown[1:]
    assert len(parts) > 2
    assert all(p.startswith("part (continues): rec streams/1/data ") for p in parts[:-1])
    assert parts[-1].startswith(f"position {len(shown)}: rec streams/1/data ")
    counts = [int(n) for p in parts for n in re.findall(r"\((\d+) records?,", p)]
    assert sum(counts) == 20


def test_dump_payload_of_state_and_metadata_logs_decodes_their_ops(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    stream = store.create_stream(0, b"s")
    stream.add(1, [b"n", b"1"])
    stream.log_op(["trim", 1])
    store.close()
    run = narad_dump(tmp_path / "streams" / "1" / "state", "--payload")
    assert run.returncode == 0, run.stderr
    assert tails(run.stdout) == ["op: ['trim', 1]"]
    run = narad_dump(tmp_path / "meta", "--payload")
    assert tails(run.stdout) == ["op: ['create', 1, 0, 's']"]
    run = narad_dump(tmp_path / "streams" / "1" / "data", "--payload")
    assert tails(run.stdout) == ["fields: b'n'=b'1'"]


JOURNAL_HEADING = "# entries committed in the journal, not yet in data/"


def test_dump_of_a_data_dir_reads_the_journal_past_each_log(tmp_path: Path) -> None:
    """What a crash leaves in the journal alone is shown under its own headings, as
    recovery would replay it; --key, --db and --from pick, --count bounds."""
    store = open_store(tmp_path)
    store.create_stream(0, b"a").add(1, [b"n", b"1"])
    store.create_stream(3, b"b").add(7, [b"k", b"two words"])
    store.close()
    store = open_store(tmp_path)
    late = store.create_stream(0, b"late")  # after the checkpoint: the journal alone
    late.add(5, [b"n", b"5"])
    late.log_op(["trim", 0])
    store.get(0, b"a").add(2, [b"n", b"2"])
    store.journal.commit()
    crash(store)
    run = narad_dump(tmp_path)
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == [
        "# db 0 key a (streams/1)",
        "0-1 n=1",
        JOURNAL_HEADING + " (a running server's write-behind, or what recovery replays):",
        "0-2 n=2",
        "# db 0 key late (streams/3)",
        JOURNAL_HEADING + " (a running server's write-behind, or what recovery replays):",
        "0-5 n=5",
        "# state ops committed in the journal, not yet in state/:",
        "  offset 0: trimmed: entries before offset 0 removed",
        "# db 3 key b (streams/2)",
        '0-7 k="two words"',
    ]
    assert "the journal holds" in run.stderr and "in use" not in run.stderr
    run = narad_dump(tmp_path, "--key", "b", "--db", 3)
    assert run.stdout.splitlines() == ["# db 3 key b (streams/2)", '0-7 k="two words"']
    run = narad_dump(tmp_path, "--key", "a", "--from", "0-2")
    assert [line for line in run.stdout.splitlines() if not line.startswith("#")] == ["0-2 n=2"]
    run = narad_dump(tmp_path, "--key", "a", "--count", 1)
    assert [line for line in run.stdout.splitlines() if not line.startswith("#")] == ["0-1 n=1"]
    run = narad_dump(tmp_path, "--key", "b")
    assert (run.returncode, run.stdout) == (1, "")
    assert run.stderr.endswith(f"narad dump: no key b in db 0 of {tmp_path}\n")
    for bad in (["--from", "x"], ["--from", "1-"], ["--count", "-1"]):
        assert narad_dump(tmp_path, *bad).returncode == 2, bad
    run = narad_dump(tmp_path / "streams", "--key", "a")
    assert run.returncode == 2 and "is not a data dir" in run.stderr
    run = narad_dump(tmp_path / "streams" / "1" / "data", "--from", "x")
    assert run.returncode == 2 and "an offset, for a log folder" in run.stderr
    run = narad_check(tmp_path)
    assert "the next start replays them" in run.stderr
