"""A bystander client, and a greedy one, for measuring what one client's load costs the
others: tests/server/test_greedy_clients.py asserts with them, bench/bystander.py
compares Narad with Redis with them."""

from __future__ import annotations

import socket
import threading
import time

from tests.servers import ServerProcess


def rss_mb(server: ServerProcess) -> float:
    assert server.proc is not None
    with open(f"/proc/{server.proc.pid}/status") as f:
        kb = next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
    return kb / 1024


class Bystander:
    """While open, PINGs every 10 ms on its own connection, noting each round trip and
    the server's peak RSS."""

    def __init__(self, server: ServerProcess) -> None:
        self.server = server
        self.latencies_ms: list[float] = []
        self.peak_mb = 0.0
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Bystander:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join(timeout=60)

    def _run(self) -> None:
        with socket.create_connection(("127.0.0.1", self.server.port), timeout=60) as conn:
            while not self._done.is_set():
                start = time.perf_counter()
                conn.sendall(b"PING\r\n")
                if conn.recv(16) != b"+PONG\r\n":
                    raise RuntimeError("the bystander's PING got no PONG")
                self.latencies_ms.append((time.perf_counter() - start) * 1000)
                self.peak_mb = max(self.peak_mb, rss_mb(self.server))
                time.sleep(0.01)

    @property
    def worst_ms(self) -> float:
        return max(self.latencies_ms, default=0.0)

    @property
    def p99_ms(self) -> float:
        ms = sorted(self.latencies_ms)
        return ms[min(len(ms) - 1, int(len(ms) * 0.99))] if ms else 0.0


def greedy(server: ServerProcess) -> socket.socket:
    """A connection whose receive buffer stays small, so that replies it does not read
    pile up on the server's side."""
    conn = socket.socket()
    conn.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    conn.connect(("127.0.0.1", server.port))
    return conn


def fill(server: ServerProcess, entries: int, value: bytes) -> None:
    """XADD `entries` entries of field f = `value` to stream `s`, pipelined."""
    client = server.client(socket_timeout=None)
    for start in range(0, entries, 1000):
        pipe = client.pipeline(transaction=False)
        for _ in range(min(1000, entries - start)):
            pipe.xadd("s", {"f": value})
        pipe.execute()
