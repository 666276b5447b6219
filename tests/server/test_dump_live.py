"""`narad dump` and `narad check` on a real server's data dir: while it runs (a note
says so, and every acked entry is shown, from its log or from the journal), after it
stops (entries and queue and group ops in words), and the progress bar, drawn only
when stderr is a terminal."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
import time
from pathlib import Path

import redis

from tests.servers import ROOT, NaradProcess


def narad(*args: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "narad", *map(str, args)],
        capture_output=True, text=True, timeout=120, env={"PYTHONPATH": str(ROOT)},
        check=False,
    )


def _workload(client: redis.Redis) -> list[bytes]:
    ids = [client.xadd("s", {"f": "v", "n": str(i)}) for i in range(3)]
    client.xdel("s", ids[0])
    client.xgroup_create("s", "g", id="0")
    client.xreadgroup("g", "c1", {"s": ">"}, count=2)
    client.xack("s", "g", ids[1])
    client.execute_command("Q.CREATE", "dl")
    client.execute_command("Q.CREATE", "q", "MAXRECEIVES", 1, "DLQ", "dl", "VISIBILITY", 60000)
    pushed = client.execute_command("Q.PUSH", "q", "one", "two words", "three")
    popped = client.execute_command("Q.POP", "q", "COUNT", 3)
    receipts = {m[b"payload"]: m[b"receipt"] for m in popped}
    client.execute_command("Q.ACK", "q", receipts[b"one"])
    client.execute_command("Q.NACK", "q", receipts[b"three"])  # its one receive: dead-lettered
    return [*ids, *pushed]


def test_dump_and_check_of_a_running_then_stopped_server(tmp_path: Path) -> None:
    server = NaradProcess(tmp_path / "n").start()
    data = tmp_path / "n" / "data"
    try:
        with server.client(protocol=3) as client:
            ids = _workload(client)
        running = narad("dump", data)
        checked = narad("check", data)
    finally:
        server.stop()
    assert running.returncode == 0, running.stderr
    assert f"is in use by process {server.proc.pid}" in running.stderr  # type: ignore[union-attr]
    shown = {line.split()[0].encode() for line in running.stdout.splitlines() if line[0].isdigit()}
    assert set(ids) <= shown  # from each key's log, or from the journal past it
    assert checked.returncode == 0 and "in use by process" in checked.stderr
    stopped = narad("dump", data)
    assert stopped.returncode == 0 and "in use" not in stopped.stderr
    lines = stopped.stdout.splitlines()
    assert "# db 0 key s (streams/1)" in lines
    assert f"{ids[0].decode()} f=v n=0 (deleted)" in lines
    assert f"{ids[1].decode()} f=v n=1" in lines
    assert f'{ids[4].decode()} payload="two words"' in lines
    text = stopped.stdout
    for words in (
        "deleted 1 entry: offsets 0",
        "group g created, last delivered ID 0-0",
        "group g: delivered 2 entries to consumer c1 at ",
        f"group g: acked 1 entry: {ids[1].decode()}",
        "queue created: visibility=60000 maxreceives=1 dlq=dl ",
        "delivered 3 messages as delivery 1 at ",
        f"acked 1 message: offsets 0 ({ids[3].decode()})",
        "1 message dead-lettered and sent to the dead-letter queue",
    ):
        assert words in text, words
    assert "b'" not in text and "journal" not in text  # a clean stop checkpoints it all


def _under_a_terminal(args: list[str]) -> bytes:
    """What `narad` writes to a terminal (stdout and stderr both) until it exits."""
    pid, fd = pty.fork()
    if pid == 0:
        os.environ["PYTHONPATH"] = str(ROOT)
        os.execv(sys.executable, [sys.executable, "-m", "narad", *args])
    seen = b""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.1)
        if ready:
            try:
                chunk = os.read(fd, 65536)
            except OSError:
                break
            if not chunk:
                break
            seen += chunk
    os.waitpid(pid, 0)
    os.close(fd)
    return seen


def test_progress_only_on_a_terminal(tmp_path: Path) -> None:
    server = NaradProcess(tmp_path / "n").start()
    try:
        with server.client() as client:
            for i in range(200):
                client.xadd("s", {"n": str(i), "pad": "x" * 200})
    finally:
        server.stop()
    data = tmp_path / "n" / "data"
    on_terminal = _under_a_terminal(["dump", str(data), "--count", "1"])
    assert b"dumping [" in on_terminal and b"\x1b[K" in on_terminal
    piped = narad("dump", data, "--count", "1")
    assert "dumping" not in piped.stderr and "\x1b" not in piped.stderr + piped.stdout
    assert b"checking [" in _under_a_terminal(["check", str(data)])
