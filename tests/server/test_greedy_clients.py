"""One client that asks for much and reads nothing holds neither the event loop nor the
server's memory (issue 28, class 5; narad/connection.py's module doc): its commands stop
while its output waits, and a long XRANGE is answered a part at a time.

Each test prints the worst round trip of a bystander's PING meanwhile; no time is
asserted (bench/bystander.py measures it against Redis). What is asserted: the
bystander is answered throughout, the server's memory grows by far less than the
replies asked for, and the greedy client, once it reads, gets every reply whole."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from pathlib import Path

import hiredis

from narad.resp.encoder import encode_request
from tests.bystander import Bystander, fill, greedy, rss_mb
from tests.servers import NaradProcess

ENTRY = b"x" * 1000


def read_replies(conn: socket.socket, n: int) -> list[object]:
    reader = hiredis.Reader()
    replies: list[object] = []
    conn.settimeout(30)
    while len(replies) < n:
        data = conn.recv(1 << 20)
        assert data, "the connection closed"
        reader.feed(data)
        while (reply := reader.gets()) is not False:
            replies.append(reply)
    return replies


def watched(server: NaradProcess, load: Callable[[], None], asked_mb: int) -> float:
    """Run `load` under a bystander's watch for 2 s; how many MB the server grew."""
    base = rss_mb(server)
    with Bystander(server) as bystander:
        load()
    grew = bystander.peak_mb - base
    print(f"bystander worst PING {bystander.worst_ms:.0f} ms over "
          f"{len(bystander.latencies_ms)}; RSS grew {grew:.0f} MB for {asked_mb} MB of replies")
    assert len(bystander.latencies_ms) > 50
    return grew


def test_unread_pipelined_replies_stay_on_the_client_s_side(tmp_path: Path) -> None:
    """1,000 pipelined XRANGE COUNT 100 of 1 KB entries: 100 MB of replies asked for."""
    server = NaradProcess(tmp_path, ["--fsync", "everysec"]).start()
    conn = greedy(server)
    try:
        fill(server, 1000, ENTRY)

        def load() -> None:
            conn.sendall(encode_request([b"XRANGE", b"s", b"-", b"+", b"COUNT", b"100"]) * 1000)
            time.sleep(2)

        assert watched(server, load, 100) < 50
        replies = read_replies(conn, 1000)
        assert all(len(r) == 100 for r in replies)  # type: ignore[arg-type]
    finally:
        conn.close()
        server.stop()


def test_a_long_xrange_is_answered_in_parts(tmp_path: Path) -> None:
    """Three XRANGE - + of 20,000 1 KB entries, unread: 60 MB of replies."""
    server = NaradProcess(tmp_path, ["--fsync", "everysec"]).start()
    conns = [greedy(server) for _ in range(3)]
    try:
        fill(server, 20_000, ENTRY)
        client = server.client()
        client.xdel("s", client.xrange("s", count=3)[1][0])  # a deleted entry is skipped

        def load() -> None:
            for conn in conns:
                conn.sendall(encode_request([b"XRANGE", b"s", b"-", b"+"]))
            time.sleep(1)
            client.xadd("s", {"f": b"after"})  # written while the replies are unread
            client.xtrim("s", maxlen=10, approximate=False)
            time.sleep(1)

        assert watched(server, load, 60) < 40
        for conn in conns:
            (entries,) = read_replies(conn, 1)
            assert len(entries) == 19_999  # type: ignore[arg-type]
            assert entries[0][1] == [b"f", ENTRY]  # type: ignore[index]
        assert client.xlen("s") == 10
        assert client.ping()
    finally:
        for conn in conns:
            conn.close()
        server.stop()


def test_a_long_range_over_a_run_of_deleted_entries(tmp_path: Path) -> None:
    """More deleted entries in a row than a part holds: the parts skip them whole."""
    server = NaradProcess(tmp_path).start()
    try:
        fill(server, 4000, b"v")
        client = server.client()
        ids = [entry_id for entry_id, _ in client.xrange("s")]
        for start in range(1000, 3000, 500):
            client.xdel("s", *ids[start : start + 500])
        kept = ids[:1000] + ids[3000:]
        assert [entry_id for entry_id, _ in client.xrange("s")] == kept
        assert [entry_id for entry_id, _ in client.xrevrange("s")] == kept[::-1]
    finally:
        server.stop()
