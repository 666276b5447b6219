"""Segments hold at most a bounded number of files open (narad/log/files.py): a node
with more segments than it may open keeps working, and loses nothing, as files are
closed and opened again behind the logs."""

from __future__ import annotations

import os
import resource
import socket
import subprocess
from pathlib import Path

import pytest
import redis

from narad.config import Config
from narad.keyspace import Keyspace
from narad.log.files import OPEN_FILES, RESERVED
from tests.servers import NaradProcess, wait_until


def test_a_store_with_more_logs_than_open_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(OPEN_FILES, "limit", 8)
    OPEN_FILES.refit()
    store = Keyspace(Config.load(None, [("dir", str(tmp_path))]))
    store.open()
    streams = [store.create_stream(0, b"s%d" % i) for i in range(40)]
    for round_ in range(3):
        for i, stream in enumerate(streams):
            stream.add(stream.last_id + 1, [b"n", b"%d-%d" % (round_, i)])
        store.journal.commit()
        store.checkpointer.run_now()  # every log fsynced, through files opened again
    assert len(OPEN_FILES) <= 8 and OPEN_FILES.opens > 40
    assert all(len(s.range(0, 1 << 128)) == 3 for s in streams)
    store.close()
    store = Keyspace(Config.load(None, [("dir", str(tmp_path))]))
    store.open()
    for i in range(40):
        stream = store.get(0, b"s%d" % i)
        assert stream is not None
        assert [f[1] for _, f in stream.range(0, 1 << 128)] == [b"%d-%d" % (r, i) for r in range(3)]
    store.close()


def _low_limit() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))


def test_a_server_under_a_low_open_files_limit_serves_more_streams(tmp_path: Path) -> None:
    """256 descriptors for the process, 300 streams of two logs each: without the
    bound, creating the streams runs out of descriptors."""
    server = NaradProcess(tmp_path)
    server.folder.mkdir(parents=True, exist_ok=True)
    with open(server.log_path, "ab") as log:
        server.proc = subprocess.Popen(
            server.command(), stdout=log, stderr=log, preexec_fn=_low_limit,
            env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])},
        )
    try:
        wait_until(server._answers, timeout=20)
        r = server.client()
        pipe = r.pipeline(transaction=False)
        for i in range(300):
            pipe.xadd(f"s{i}", {"n": str(i)})
        pipe.execute()
        assert all(r.xlen(f"s{i}") == 1 for i in range(300))
        assert r.xrange("s299")[0][1] == {b"n": b"299"}
    finally:
        assert server.stop() == 0, server.log()


class LimitedNarad(NaradProcess):
    """A server whose process may open `OPEN_FILES_LIMIT` files (ulimit -n)."""

    def command(self) -> list[str]:
        return ["prlimit", f"--nofile={OPEN_FILES_LIMIT}:{OPEN_FILES_LIMIT}", *super().command()]


OPEN_FILES_LIMIT = 512


def test_clients_and_segments_share_the_open_files_limit(tmp_path: Path) -> None:
    """maxclients is lowered at start to what the limit holds beside a reserve and the
    segments' least; with every client connected, 300 streams (600 logs) still write,
    checkpoint and start again, and one client more is refused as Redis refuses it."""
    server = LimitedNarad(tmp_path, ["--checkpoint-bytes", "1mb"]).start()
    idle: list[socket.socket] = []
    try:
        # Creating 600 logs takes seconds on a slow disk: no timeout, so that no
        # retry of the pipeline adds its entries twice.
        r = server.client(socket_timeout=None)
        maxclients = int(r.config_get("maxclients")["maxclients"])
        assert maxclients < OPEN_FILES_LIMIT - RESERVED
        assert "event=maxclients_lowered requested=10000" in server.log()
        with pytest.raises(redis.ResponseError, match=f"try with {maxclients}$"):
            r.config_set("maxclients", str(maxclients + 1))

        for _ in range(maxclients - 1):  # `r` is one
            conn = socket.create_connection(("127.0.0.1", server.port), timeout=10)
            idle.append(conn)
            conn.sendall(b"PING\r\n")
            assert conn.recv(16) == b"+PONG\r\n"
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as one_more:
            assert one_more.recv(64) == b"-ERR max number of clients reached\r\n"

        before = r.info("narad")["checkpoints"]
        payload = "x" * 4000
        for round_ in range(3):
            pipe = r.pipeline(transaction=False)
            for i in range(300):
                pipe.xadd(f"s{i}", {"n": f"{round_}", "p": payload})
            pipe.execute()
        # Checkpoints run on their own thread, each once 1 MB of journal is written.
        wait_until(lambda: r.info("narad")["checkpoints"] - before >= 2)
        print(f"maxclients {maxclients} of {OPEN_FILES_LIMIT} descriptors; "
              f"checkpoints during the writes: {r.info('narad')['checkpoints'] - before}")
        assert "failed" not in server.log() and "Too many open files" not in server.log()
        for conn in idle:
            conn.close()
        idle.clear()

        server.restart()
        r = server.client()
        for i in range(300):
            assert [f[b"n"] for _, f in r.xrange(f"s{i}")] == [b"0", b"1", b"2"]
    finally:
        for conn in idle:
            conn.close()
        assert server.stop() == 0, server.log()
