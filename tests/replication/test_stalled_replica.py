"""A replica that acknowledges but never reads its socket: the leader drops its link once
the output it holds for it passes `client-output-buffer-limit replica`, and the
journal it pinned is freed at the next checkpoint (issue 28, class 4).

The replica here is a few lines of this test: it speaks the handshake of
docs/replication.md, then acks the position it holds once a second, as a live replica
would, while its receive buffer stays full."""

from __future__ import annotations

import socket
import time
from pathlib import Path

from narad.resp.encoder import encode_request
from tests.servers import NaradProcess, wait_until

HARD_LIMIT = 4 << 20
WRITTEN = 24 << 20  # journal written while the replica does not read


def test_a_replica_that_never_reads_is_dropped_and_frees_the_journal(tmp_path: Path) -> None:
    leader = NaradProcess(
        tmp_path / "leader",
        [
            "--journal-segment-bytes", "1mb",
            "--checkpoint-bytes", "1mb",
            "--repl-backlog-size", "1mb",
            "--client-output-buffer-limit", "replica", str(HARD_LIMIT), "0", "0",
        ],
    ).start()
    stalled = socket.socket()
    try:
        client = leader.client()
        client.xadd("s", {"f": "v"})
        replication = client.info("replication")
        history, position = replication["master_replid"], replication["master_repl_offset"]

        # A receive buffer of a few KiB, set before connecting, so the leader's output
        # piles up on its side instead of in this process's kernel buffer.
        stalled.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        stalled.connect(("127.0.0.1", leader.port))
        for request in (
            [b"REPLCONF", b"listening-port", b"1"],
            [b"REPLCONF", b"capa", b"narad"],
            [b"PSYNC", history.encode(), b"%d" % position, b"0"],
        ):
            stalled.sendall(encode_request(request))
        time.sleep(0.3)
        first = stalled.recv(256)  # the handshake's answers; never read again
        assert b"+CONTINUE" in first, first
        wait_until(lambda: client.info("replication")["connected_slaves"] == 1, timeout=5)

        payload = b"x" * 4000
        written = 0
        dropped_at = None
        while written < WRITTEN:
            pipe = client.pipeline(transaction=False)
            for _ in range(64):
                pipe.xadd("s", {"f": payload})
            pipe.execute()
            written += 64 * len(payload)
            now = client.info("replication")
            try:  # ack what it holds, as a live replica does once a second
                offset = b"%d" % position
                stalled.sendall(encode_request([b"REPLCONF", b"ACK", offset, b"FACK", offset]))
            except OSError:
                pass  # the leader closed the link
            if dropped_at is None and now["connected_slaves"] == 0:
                dropped_at = written

        if dropped_at is None:  # the limit is checked ten times a second
            wait_until(lambda: client.info("replication")["connected_slaves"] == 0, timeout=5)
            dropped_at = written
        assert "event=replica_output_limit" in leader.log_path.read_text()
        print(f"link dropped after {dropped_at >> 20} MiB written "
              f"(hard limit {HARD_LIMIT >> 20} MiB)")

        # Nothing pins the journal any more: the next checkpoints free it down to
        # about the backlog, whatever was written while the replica stalled.
        client.xadd("s", {"f": "after"})

        def journal_bytes() -> int:
            return sum(f.stat().st_size for f in (tmp_path / "leader" / "data").rglob("*")
                       if f.is_file() and "journal" in f.parts)

        wait_until(lambda: client.info("replication")["repl_backlog_histlen"] < 8 << 20)
        print(f"journal on disk after the drop: {journal_bytes() >> 10} KiB of "
              f"{WRITTEN >> 20} MiB written")
        assert client.xlen("s") == 2 + written // len(payload)
    finally:
        stalled.close()
        leader.stop()


def test_a_silent_replica_with_unread_output_is_dropped_at_repl_timeout(tmp_path: Path) -> None:
    """No output limit, and no acks: `repl-timeout` drops it, unread output or not."""
    leader = NaradProcess(
        tmp_path / "leader",
        ["--repl-timeout", "1", "--client-output-buffer-limit", "replica", "0", "0", "0"],
    ).start()
    silent = socket.socket()
    try:
        client = leader.client()
        client.xadd("s", {"f": "v"})
        replication = client.info("replication")
        silent.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        silent.connect(("127.0.0.1", leader.port))
        silent.sendall(encode_request([
            b"PSYNC", replication["master_replid"].encode(),
            b"%d" % replication["master_repl_offset"], b"0",
        ]))
        wait_until(lambda: client.info("replication")["connected_slaves"] == 1, timeout=5)
        pipe = client.pipeline(transaction=False)
        for _ in range(2000):
            pipe.xadd("s", {"f": b"x" * 4000})
        pipe.execute()
        wait_until(lambda: client.info("replication")["connected_slaves"] == 0, timeout=10)
        assert "event=replica_timed_out" in leader.log_path.read_text()
    finally:
        silent.close()
        leader.stop()
