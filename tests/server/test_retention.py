"""Retention deletes whole sealed segments of a stream's data log, and the stream's
start, XLEN and XRANGE follow; the state log is compacted and the result survives a
restart."""

from __future__ import annotations

from pathlib import Path

from tests.servers import NaradProcess, wait_until


def test_retention_by_bytes_trims_the_stream_head(tmp_path: Path) -> None:
    server = NaradProcess(
        tmp_path / "narad", ["--segment-bytes", "4kb", "--retention-bytes", "16kb"]
    )
    server.start()
    try:
        client = server.client()
        for i in range(1, 1001):
            client.xadd("s", {"n": str(i), "pad": "x" * 100}, id=f"{i}-0")
        # The once-a-second upkeep applies retention: wait for it.
        wait_until(lambda: client.xlen("s") < 1000, timeout=10)
        length = client.xlen("s")
        entries = client.xrange("s", "-", "+")
        assert len(entries) == length
        assert entries[-1][0] == b"1000-0"
        first = int(entries[0][0].split(b"-")[0])
        assert [int(e[0].split(b"-")[0]) for e in entries] == list(range(first, 1001))
        assert 100 < length < 1000
        server.restart()
        client = server.client()
        assert client.xlen("s") == length
        assert client.xrange("s", "-", "+", count=1)[0][0] == entries[0][0]
    finally:
        server.stop()
