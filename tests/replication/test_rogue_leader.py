"""A leader that sends what a replica cannot read (a rogue, or a newer version during an
upgrade): the replica refuses the batch before it appends or acknowledges anything,
stops following that leader, says why in INFO and its log, and its data dir starts
again (issue 28, class 2).

The leader here is a few lines of this test on a loopback socket: it answers the
handshake as a Narad leader does (docs/replication.md) and then pushes journal frames
that pass their CRC but hold no commit."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import hiredis

from narad.log import format
from narad.replication import wire
from tests.servers import NaradProcess, wait_until


class RogueLeader:
    """Accepts replicas on a loopback port, answers their handshake with CONTINUE,
    then sends one `journal` message of CRC-valid frames whose payload is no commit.
    Records every connection and the acks each sent."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.listener.settimeout(0.2)
        self.connections = 0
        self.acked: list[int] = []  # positions of REPLCONF ACKs received
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while not self.stopped.is_set():
            try:
                conn, _ = self.listener.accept()
            except TimeoutError:
                continue
            self.connections += 1
            threading.Thread(target=self._replica, args=(conn,), daemon=True).start()

    def _replica(self, conn: socket.socket) -> None:
        reader = hiredis.Reader(encoding=None)
        conn.settimeout(0.2)
        deadline = time.monotonic() + 30
        with conn:
            while not self.stopped.is_set() and time.monotonic() < deadline:
                try:
                    data = conn.recv(65536)
                except TimeoutError:
                    continue
                except OSError:
                    return
                if not data:
                    return
                reader.feed(data)
                while (request := reader.gets()) is not False:
                    self._answer(conn, request)

    def _answer(self, conn: socket.socket, request: list[bytes]) -> None:
        name = request[0].upper()
        if name == b"PSYNC":
            history, position = request[1], int(request[2])
            conn.sendall(b"+CONTINUE %b %d 0\r\n" % (history, position))
            frames = bytearray()
            format.encode_into(frames, position, int(time.time() * 1000), 0, 0, 0, 0,
                               b"not a commit of any journal version")
            conn.sendall(b"".join(wire.journal_frames(position, frames)))
        elif name == b"REPLCONF" and request[1].upper() == b"ACK":
            self.acked.append(int(request[2]))
        else:
            conn.sendall(b"+OK\r\n")

    def close(self) -> None:
        self.stopped.set()
        self.thread.join(5)
        self.listener.close()


def test_a_record_the_replica_cannot_read_is_neither_appended_nor_acked(tmp_path: Path) -> None:
    leader = RogueLeader()
    replica = NaradProcess(tmp_path / "replica").start()
    try:
        client = replica.client()
        client.xadd("own", {"a": "1"})  # a commit of its own history, kept
        before = client.info("replication")["master_repl_offset"]
        client.replicaof("127.0.0.1", leader.port)
        info = wait_until(
            lambda: (i := client.info("replication")).get("narad_leader_refused") and i,
            timeout=15,
        )
        assert "is not a commit this node reads" in info["narad_leader_refused"]
        assert info["master_link_status"] == "down"
        assert info["slave_repl_offset"] == before  # nothing appended
        time.sleep(1.5)  # an ack a second would have come by now
        assert all(position <= before for position in leader.acked), leader.acked
        assert leader.connections == 1  # it stopped following: no retry took more
        assert client.info("replication")["slave_repl_offset"] == before
        assert "event=leader_refused" in replica.log()
        replica.kill()
        replica.start()  # the data dir starts again
        assert replica.client().xlen("own") == 1
        replica.stop()
        check = subprocess.run(
            [sys.executable, "-m", "narad", "check", str(replica.folder / "data")],
            capture_output=True, text=True, timeout=120,
        )
        assert check.returncode == 0, check.stdout + check.stderr
    finally:
        replica.stop()
        leader.close()
