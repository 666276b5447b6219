"""Memory: the server's private memory does not grow with the data it holds (entries
live in the log on disk; memory holds only the index), and one pipelined burst of big
replies cannot grow it past the output buffer limit."""

from __future__ import annotations

from pathlib import Path

from tests.server.raw import Raw, encode
from tests.servers import NaradProcess, wait_until

ENTRIES = 300_000
BATCH = 10_000
PAYLOAD = b"p" * 100


def _status_kb(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(f"{field} missing from /proc/{pid}/status")


def _add(conn: Raw, key: str, count: int) -> None:
    """`count` XADDs of a 100-byte value, pipelined BATCH at a time."""
    request = encode(["XADD", key, "*", "v", PAYLOAD]) * BATCH
    for _ in range(count // BATCH):
        conn.send(request)
        for _ in range(BATCH):
            reply = conn.read()
            assert isinstance(reply, bytes), reply


def test_rss_does_not_grow_with_entries(tmp_path: Path) -> None:
    server = NaradProcess(tmp_path / "n").start()
    try:
        assert server.proc is not None
        pid = server.proc.pid
        with Raw(server.port) as conn:
            # Warm up: the first batch pays for one-time allocations (buffers, caches).
            _add(conn, "mem", BATCH)
            before = _status_kb(pid, "RssAnon")
            _add(conn, "mem", ENTRIES)
            after = _status_kb(pid, "RssAnon")
            assert conn.call("XLEN", "mem") == ENTRIES + BATCH
            # The data is all there, read back from the log.
            first = conn.call("XRANGE", "mem", "-", "+", "COUNT", "1")
            last = conn.call("XREVRANGE", "mem", "+", "-", "COUNT", "1")
            assert first[0][1] == last[0][1] == [b"v", PAYLOAD]
        per_entry = (after - before) * 1024 / ENTRIES
        # Keeping the payloads in memory would cost well over 100 bytes per entry
        # (Redis: about 115); the index alone costs a few bytes.
        assert per_entry < 40, f"{per_entry:.1f} bytes of RssAnon per entry"
    finally:
        server.stop()


def test_one_burst_cannot_exceed_the_output_limit(tmp_path: Path) -> None:
    server = NaradProcess(tmp_path / "n").start()
    try:
        assert server.proc is not None
        pid = server.proc.pid
        with Raw(server.port) as admin, Raw(server.port) as greedy:
            admin.call("CONFIG", "SET", "client-output-buffer-limit", "normal 1mb 0 0")
            value = b"v" * 1000
            admin.send(
                b"".join(encode(["XADD", "big", f"{i + 1}-0", "f", value]) for i in range(2000))
            )
            for _ in range(2000):
                admin.read()
            before = _status_kb(pid, "VmRSS")
            greedy_id = greedy.call("CLIENT", "ID")
            # 300 XRANGEs of ~2 MB each in one small send: 600 MB if all are encoded.
            greedy.send(encode(["XRANGE", "big", "-", "+"]) * 300)
            wait_until(lambda: f"id={greedy_id} ".encode() not in admin.call("CLIENT", "LIST"))
            peak = _status_kb(pid, "VmHWM")
            assert admin.call("PING") == b"PONG"
        assert peak - before < 200_000, f"peak RSS grew by {(peak - before) // 1024} MB"
    finally:
        server.stop()


def test_in_flight_messages_cost_about_200_bytes(tmp_path: Path) -> None:
    """docs/queues.md: only in-flight, delayed and dedup state is in memory, about
    200 bytes per message; acked messages leave nothing behind."""
    count = 200_000
    server = NaradProcess(tmp_path / "n", ["--fsync", "no"]).start()
    try:
        assert server.proc is not None
        pid = server.proc.pid
        with Raw(server.port) as conn:
            conn.call("Q.CREATE", "inflight", "VISIBILITY", 3_600_000)
            push = encode(["Q.PUSH", "inflight", *[PAYLOAD] * 1000])
            for _ in range(count // 1000):
                conn.send(push)
                assert len(conn.read()) == 1000
            conn.call("Q.POP", "inflight", "COUNT", 10_000)  # warm up
            before = _status_kb(pid, "RssAnon")
            popped = 10_000
            while popped < count:
                popped += len(conn.call("Q.POP", "inflight", "COUNT", 10_000))
            after = _status_kb(pid, "RssAnon")
            stats = conn.call("Q.STATS", "inflight")
            assert stats[stats.index(b"in_flight") + 1] == count
        per_message = (after - before) * 1024 / (count - 10_000)
        assert per_message < 250, f"{per_message:.0f} bytes of RssAnon per in-flight message"
    finally:
        server.stop()
