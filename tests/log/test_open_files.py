"""Segments hold at most a bounded number of files open (narad/log/files.py): a node
with more segments than it may open keeps working, and loses nothing, as files are
closed and opened again behind the logs."""

from __future__ import annotations

import os
import resource
import subprocess
from pathlib import Path

import pytest

from narad.config import Config
from narad.keyspace import Keyspace
from narad.log.files import OPEN_FILES
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
