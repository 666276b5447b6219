"""One client that asks for much and reads nothing holds neither the event loop nor the
server's memory (issue 28, class 5; narad/client.py's module doc): its commands stop
while its output waits, and a long XRANGE is answered a part at a time.

Each test prints the worst round trip of a bystander's PING meanwhile; no time is
asserted (bench/bystander.py measures it against Redis). What is asserted: the
bystander is answered throughout, the server's memory grows by far less than the
replies asked for, and the greedy client, once it reads, gets every reply whole."""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path

import hiredis

from narad.resp.encoder import encode_request
from tests.servers import NaradProcess

ENTRY = b"x" * 1000


def rss_mb(server: NaradProcess) -> float:
    assert server.proc is not None
    with open(f"/proc/{server.proc.pid}/status") as f:
        kb = next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
    return kb / 1024


class Bystander(threading.Thread):
    """PINGs every 10 ms; notes the worst round trip and the server's peak RSS."""

    def __init__(self, server: NaradProcess) -> None:
        super().__init__(daemon=True)
        self.server = server
        self.worst_ms = 0.0
        self.pings = 0
        self.peak_mb = 0.0
        self.done = threading.Event()

    def run(self) -> None:
        with socket.create_connection(("127.0.0.1", self.server.port), timeout=30) as conn:
            while not self.done.is_set():
                start = time.perf_counter()
                conn.sendall(b"PING\r\n")
                assert conn.recv(16) == b"+PONG\r\n"
                self.worst_ms = max(self.worst_ms, (time.perf_counter() - start) * 1000)
                self.pings += 1
                self.peak_mb = max(self.peak_mb, rss_mb(self.server))
                time.sleep(0.01)


def greedy(server: NaradProcess) -> socket.socket:
    conn = socket.socket()
    conn.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    conn.connect(("127.0.0.1", server.port))
    return conn


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


def fill(server: NaradProcess, entries: int) -> None:
    client = server.client(socket_timeout=None)
    for start in range(0, entries, 1000):
        pipe = client.pipeline(transaction=False)
        for _ in range(min(1000, entries - start)):
            pipe.xadd("s", {"f": ENTRY})
        pipe.execute()


def test_unread_pipelined_replies_stay_on_the_client_s_side(tmp_path: Path) -> None:
    """1,000 pipelined XRANGE COUNT 100 of 1 KB entries: 100 MB of replies asked for."""
    server = NaradProcess(tmp_path, ["--fsync", "everysec"]).start()
    conn = greedy(server)
    try:
        fill(server, 1000)
        base = rss_mb(server)
        bystander = Bystander(server)
        bystander.start()
        conn.sendall(encode_request([b"XRANGE", b"s", b"-", b"+", b"COUNT", b"100"]) * 1000)
        time.sleep(2)
        bystander.done.set()
        bystander.join(timeout=30)
        grew = bystander.peak_mb - base
        print(f"bystander worst PING {bystander.worst_ms:.0f} ms over {bystander.pings}; "
              f"RSS grew {grew:.0f} MB for 100 MB of replies")
        assert bystander.pings > 50
        assert grew < 50
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
        fill(server, 20_000)
        client = server.client()
        client.xdel("s", client.xrange("s", count=3)[1][0])  # a deleted entry is skipped
        base = rss_mb(server)
        bystander = Bystander(server)
        bystander.start()
        for conn in conns:
            conn.sendall(encode_request([b"XRANGE", b"s", b"-", b"+"]))
        time.sleep(1)
        client.xadd("s", {"f": b"after"})  # written while the replies are unread
        client.xtrim("s", maxlen=10, approximate=False)
        time.sleep(1)
        bystander.done.set()
        bystander.join(timeout=30)
        grew = bystander.peak_mb - base
        print(f"bystander worst PING {bystander.worst_ms:.0f} ms over {bystander.pings}; "
              f"RSS grew {grew:.0f} MB for 60 MB of replies")
        assert bystander.pings > 50
        assert grew < 40
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
