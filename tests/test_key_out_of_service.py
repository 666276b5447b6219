"""A key whose log is damaged or missing is unavailable alone: the node starts, every
other key serves all its acked data, commands on that key answer an error naming it
and its log, INFO and the log say so, no checkpoint frees the journal meanwhile, and
`narad check --repair` brings back what it can (docs/durability.md, "A key whose log
cannot be used"). And a key that cannot be created (its folder cannot be made)
answers IOERR naming the path and changes nothing.

Real servers, real files deleted or written by hand, real kill -9, real `narad check`."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from narad.log.segment import segment_name
from tests.servers import NaradProcess

# Small data segments, so that a stream of a hundred entries spans several; no
# checkpoint on the clock, so that the journal a run writes is all there at kill -9.
SETTINGS = ["--segment-bytes", "4kb", "--checkpoint-seconds", "3600"]
ENTRIES = 100


def narad_check(data: Path, *options: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "narad", "check", str(data), *options],
                          capture_output=True, text=True, timeout=120)


def fill(r: redis.Redis) -> dict[str, list[bytes]]:
    """Streams a, b, c and queue q, created in that order (uids 1 to 4); the IDs
    each write was acked with."""
    acked: dict[str, list[bytes]] = {}
    for key in ("a", "b", "c"):
        acked[key] = [r.xadd(key, {"n": str(i), "pad": "x" * 100}) for i in range(ENTRIES)]
    r.execute_command("Q.CREATE", "q")
    acked["q"] = [r.execute_command("Q.PUSH", "q", f"m{i}" + "y" * 100)
                  for i in range(ENTRIES)]
    return acked


def ids(r: redis.Redis, key: str) -> list[bytes]:
    return [entry_id for entry_id, _ in r.xrange(key)]


def segments(data: Path, uid: int, log: str = "data") -> list[Path]:
    return sorted((data / "streams" / str(uid) / log).glob("*.log"))


def info(r: redis.Redis) -> dict[str, object]:
    return r.info("narad")  # type: ignore[no-any-return]


def assert_others_serve(r: redis.Redis, acked: dict[str, list[bytes]], damaged: str) -> None:
    for key in ("a", "b", "c", "q"):
        if key != damaged:
            assert ids(r, key) == acked[key], key
    written = "c" if damaged == "a" else "a"
    acked[written].append(r.xadd(written, {"after": "1"}))  # the node takes writes


@pytest.fixture
def server(tmp_path: Path) -> Iterator[NaradProcess]:
    process = NaradProcess(tmp_path / "narad", SETTINGS)
    process.start()
    yield process
    process.stop()


def test_a_missing_segment_makes_its_key_alone_unavailable_until_repaired(
        server: NaradProcess) -> None:
    data = server.folder / "data"
    r = server.client()
    acked = fill(r)
    server.stop()  # a checkpoint: the journal holds nothing of b's records after it
    b = segments(data, 2)
    assert len(b) > 3
    b[1].unlink()
    lost = b[2].name  # the first record dropped is this segment's first
    kept = int(b[1].name.removesuffix(".log"))  # the records before the missing segment

    server.start()
    r = server.client()
    assert_others_serve(r, acked, "b")
    why = (f"^key 'b' is unavailable: its log streams/2/data cannot be used: "
           f"streams/2/data/{b[0].name} ends at offset {kept} but the next segment starts "
           f"at {int(lost.removesuffix('.log'))} \\(run narad check --repair with the server "
           "stopped, or delete the key\\)$")
    for command in (("XLEN", "b"), ("XRANGE", "b", "-", "+"), ("XADD", "b", "*", "f", "v"),
                    ("EXISTS", "b"), ("TYPE", "b")):
        with pytest.raises(redis.ResponseError, match=why):
            r.execute_command(*command)
    assert sorted(r.keys()) == [b"a", b"b", b"c", b"q"]  # it is still there
    narad = info(r)
    assert narad["unavailable_keys"] == 1 and narad["checkpoints_held"] == 1
    lines = [line for line in server.log().splitlines() if "event=key_unavailable" in line]
    assert len(lines) == 1 and "stream_uid=2 key=b " in lines[0], server.log()
    assert "event=checkpoints_held" in server.log()
    server.stop()

    run = narad_check(data)
    assert run.returncode == 1, run.stdout + run.stderr
    assert f"{data / 'streams' / '2' / 'data'}: key: key 'b' (db 0) is unavailable" in run.stdout
    assert f"keeps the log's records before offset {kept}" in run.stdout
    assert "not repairable" not in run.stdout, run.stdout
    run = narad_check(data, "--repair")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "[repaired]" in run.stdout and "clean now" in run.stdout, run.stdout
    run = narad_check(data)
    assert run.returncode == 0 and run.stdout.rstrip().endswith(": clean"), run.stdout

    server.start()
    r = server.client()
    assert ids(r, "b") == acked["b"][:kept]  # the records before the gap, as acked
    assert_others_serve(r, acked, "b")
    r.xadd("b", {"after": "repair"})
    narad = info(r)
    assert narad["unavailable_keys"] == 0 and narad["checkpoints_held"] == 0
    server.restart()
    assert server.client().xlen("b") == kept + 1


def test_a_segment_deleted_under_a_running_server_is_brought_back_from_the_journal(
        server: NaradProcess) -> None:
    """The records the journal still holds (all of this run's, no checkpoint having
    freed any) survive both the start that found the key's log damaged and a repair."""
    data = server.folder / "data"
    r = server.client()
    acked = fill(r)
    q = segments(data, 4)
    assert len(q) > 3
    q[1].unlink()  # under the running server, as a mistaken clean-up would
    acked["c"].append(r.xadd("c", {"after": "the deletion"}))
    server.kill()

    server.start()
    r = server.client()
    assert_others_serve(r, acked, "q")
    with pytest.raises(redis.ResponseError, match=r"^key 'q' is unavailable: its log "
                       r"streams/4/data cannot be used: "):
        r.execute_command("Q.POP", "q")
    server.restart()  # no checkpoint freed the journal: this start finds the same
    r = server.client()
    assert info(r)["checkpoints_held"] == 1
    with pytest.raises(redis.ResponseError, match=r"^key 'q' is unavailable"):
        r.execute_command("Q.STATS", "q")
    server.stop()

    run = narad_check(data, "--repair")
    assert run.returncode == 0, run.stdout + run.stderr
    server.start()
    r = server.client()
    assert ids(r, "q") == acked["q"]  # every acked message: the journal held them
    popped = r.execute_command("Q.POP", "q", "COUNT", ENTRIES)
    assert [m[b"payload"][:3] for m in popped][:3] == [b"m0y", b"m1y", b"m2y"]
    assert len(popped) == ENTRIES
    assert_others_serve(r, acked, "q")
    print(f"journal kept whole across the damaged start: {ENTRIES} of {ENTRIES} messages back")


def test_a_file_that_is_no_segment_in_a_queue_state_log(server: NaradProcess) -> None:
    """Garbage named like a segment in a queue's state log: the queue is unavailable
    alone; the repair drops the file and the queue is as it was."""
    data = server.folder / "data"
    r = server.client()
    acked = fill(r)
    [message] = r.execute_command("Q.POP", "q")
    assert r.execute_command("Q.ACK", "q", message[b"receipt"]) == 1
    server.stop()
    state = data / "streams" / "4" / "state"
    (state / segment_name(999)).write_bytes(os.urandom(300))

    server.start()
    r = server.client()
    assert_others_serve(r, acked, "q")
    with pytest.raises(redis.ResponseError,
                       match=r"^key 'q' is unavailable: its log streams/4/state cannot be used"):
        r.execute_command("Q.POP", "q")
    server.stop()

    run = narad_check(data, "--repair")
    assert run.returncode == 0, run.stdout + run.stderr
    assert not (state / segment_name(999)).exists()
    server.start()
    r = server.client()
    stats = r.execute_command("Q.STATS", "q")
    assert stats[b"acked"] == 1, stats
    assert r.execute_command("Q.POP", "q")[0][b"payload"].startswith(b"m1y")


def test_deleting_an_unavailable_key_frees_the_journal_again(server: NaradProcess) -> None:
    data = server.folder / "data"
    r = server.client()
    acked = fill(r)
    server.stop()
    segments(data, 1)[1].unlink()

    server.start()
    r = server.client()
    assert info(r)["checkpoints_held"] == 1
    assert r.delete("a") == 1
    assert info(r)["checkpoints_held"] == 0 and info(r)["unavailable_keys"] == 0
    assert not (data / "streams" / "1").exists()
    r.xadd("a", {"new": "1"})
    server.restart()
    r = server.client()
    assert r.xlen("a") == 1
    assert ids(r, "b") == acked["b"]
    assert narad_check(data).returncode == 0


# -- a key that cannot be created --------------------------------------------------------


def _mount_read_only(folder: Path) -> str | None:
    """Mount a read-only tmpfs over `folder` (which binds root too); why not, or None."""
    if os.geteuid() != 0:
        return "mounting a read-only tmpfs needs root"
    run = subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(folder)],
                         capture_output=True, text=True)
    return None if run.returncode == 0 else f"mount failed: {run.stderr.strip()}"


def test_a_key_whose_folder_cannot_be_made_answers_ioerr_and_changes_nothing(
        server: NaradProcess) -> None:
    r = server.client()
    r.xadd("old", {"f": "v"})
    streams = server.folder / "data" / "streams"
    refusal = _mount_read_only(streams)
    if refusal is not None:
        pytest.skip(refusal)
    try:
        for command in (("XADD", "new", "*", "f", "v"), ("Q.CREATE", "new"),
                        ("XGROUP", "CREATE", "new", "g", "$", "MKSTREAM")):
            with pytest.raises(redis.ResponseError) as caught:
                r.execute_command(*command)
            assert str(caught.value) == (f"IOERR creating key 'new' failed on {streams / '2'}: "
                                         "Read-only file system"), command
        assert r.dbsize() == 1 and r.exists("new") == 0
        assert "event=internal_error" not in server.log()
    finally:
        subprocess.run(["umount", str(streams)], check=True)
    assert r.xlen("old") == 1
    r.xadd("new", {"f": "v"})
    server.restart()
    r = server.client()
    assert sorted(r.keys()) == [b"new", b"old"] and r.xlen("new") == 1
