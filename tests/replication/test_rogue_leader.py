"""A leader that sends what a replica cannot read (a rogue, or a newer version during an
upgrade): the replica refuses the batch before it appends or acknowledges anything,
stops following that leader, says why in INFO and its log, and its data dir starts
again (issue 28, class 2). A leader that announces a message larger than one journal
record is refused the same way, before the replica buffers it (issue 28, class 9).

The leader here is a few lines of this test on a loopback socket: it answers the
handshake as a Narad leader does (docs/replication.md) and then pushes journal frames
that pass their CRC but hold no commit, or a `journal` message that announces 4 GiB
of frames and streams HUGE_SENT_BYTES of them."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import hiredis

from narad.log import format
from narad.log.journal import PART_BYTES
from narad.replication import wire
from tests.replication.cluster import group, offset, wait_synced
from tests.servers import NaradProcess, wait_until

HUGE_SENT_BYTES = 96 * 1024 * 1024


def no_commit(conn: socket.socket, position: int) -> None:
    """One `journal` message of CRC-valid frames whose payload is no commit."""
    frames = bytearray()
    format.encode_into(frames, position, int(time.time() * 1000), 0, 0, 0, 0,
                       b"not a commit of any journal version")
    conn.sendall(b"".join(wire.journal_frames(position, frames)))


class HugeMessage:
    """A `journal` message that announces 4 GiB of frames, then as much of them as
    the replica takes, up to HUGE_SENT_BYTES; `sent` counts them, `done` is set
    once the sending ends (all sent, or the replica closed the link)."""

    def __init__(self) -> None:
        self.sent = 0
        self.done = threading.Event()

    def __call__(self, conn: socket.socket, position: int) -> None:
        conn.settimeout(10)
        chunk = b"\0" * (1 << 20)
        try:
            conn.sendall(b"*3\r\n$7\r\njournal\r\n$%d\r\n%d\r\n$%d\r\n"
                         % (len(b"%d" % position), position, 4 << 30))
            while self.sent < HUGE_SENT_BYTES:
                conn.sendall(chunk)
                self.sent += len(chunk)
        except OSError:
            pass
        finally:
            self.done.set()


class RogueLeader:
    """Accepts replicas on a loopback port, answers their handshake with CONTINUE,
    then calls `push(connection, position)` (by default one `journal` message of
    CRC-valid frames whose payload is no commit). Records every connection and the
    acks each sent."""

    def __init__(self, push: Callable[[socket.socket, int], None] = no_commit) -> None:
        self.push = push
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
            self.push(conn, position)
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


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for process {pid}")


def test_a_message_larger_than_a_record_is_refused_before_it_is_buffered(
    tmp_path: Path,
) -> None:
    push = HugeMessage()
    leader = RogueLeader(push)
    replica = NaradProcess(tmp_path / "replica").start()
    try:
        client = replica.client()
        client.xadd("own", {"a": "1"})
        before = client.info("replication")["master_repl_offset"]
        assert replica.proc is not None
        rss_before = rss_bytes(replica.proc.pid)
        client.replicaof("127.0.0.1", leader.port)
        assert push.done.wait(30)
        time.sleep(0.2)  # the replica's last read of what was sent
        rss_after = rss_bytes(replica.proc.pid)
        print(
            f"leader sent {push.sent >> 20} MiB of a 4 GiB message; replica RSS "
            f"{rss_before >> 20} MiB before, {rss_after >> 20} MiB after"
        )
        assert rss_after - rss_before < HUGE_SENT_BYTES // 4
        info = wait_until(
            lambda: (i := client.info("replication")).get("narad_leader_refused") and i,
            timeout=15,
        )
        assert "invalid bulk length" in info["narad_leader_refused"]
        assert info["master_link_status"] == "down"
        assert info["slave_repl_offset"] == before
        assert leader.connections == 1  # it stopped following: no retry
        assert "event=leader_refused" in replica.log()
        assert client.ping()
        assert client.xlen("own") == 1
    finally:
        replica.stop()
        leader.close()


def test_a_commit_of_several_records_still_reaches_a_replica(tmp_path: Path) -> None:
    """The bound refuses no true leader: a commit larger than a journal record goes
    out as messages of at most one record each, and the replica takes it whole."""
    value = b"v" * (PART_BYTES // 2)
    with group(tmp_path, 1) as (leader, replica):
        before = offset(leader)
        pipe = leader.client().pipeline(transaction=True)  # MULTI: one commit
        for i in range(3):
            pipe.xadd("big", {"i": i, "v": value})
        pipe.execute()
        assert wait_synced(leader, [replica]) - before >= 2  # journal records
        entries = replica.client().xrange("big")
        assert [e[1][b"i"] for e in entries] == [b"0", b"1", b"2"]
        assert all(e[1][b"v"] == value for e in entries)
        assert "narad_leader_refused" not in replica.client().info("replication")
