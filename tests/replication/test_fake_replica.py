"""A client that sends PSYNC and then acks positions it was never sent is not a
replica that holds them: its ack is a protocol error that drops the link, and the
writes it claimed to hold are not acknowledged as committed (issue 29: with
`min-replicas-to-ack 1` such a client made 20 of 20 writes answer OK while only the
leader held them).

The fake replica is a socket of this test that speaks the handshake of
docs/replication.md."""

from __future__ import annotations

import contextlib
import socket
from pathlib import Path

from narad.resp.encoder import encode_request
from tests.servers import NaradProcess, wait_until

WRITES = 5


def test_an_ack_past_what_was_sent_drops_the_link_and_counts_for_nothing(tmp_path: Path) -> None:
    leader = NaradProcess(
        tmp_path / "leader",
        ["--min-replicas-to-ack", "1", "--min-replicas-timeout", "500"],
    ).start()
    fake = socket.socket()
    writer = socket.socket()
    try:
        client = leader.client()
        replication = client.info("replication")
        history, position = replication["master_replid"], replication["master_repl_offset"]
        fake.connect(("127.0.0.1", leader.port))
        fake.sendall(encode_request([b"PSYNC", history.encode(), b"%d" % position, b"0"]))
        wait_until(lambda: client.info("replication")["connected_slaves"] == 1, timeout=5)

        writer.connect(("127.0.0.1", leader.port))
        writer.settimeout(10)
        answers = []
        for i in range(WRITES):
            writer.sendall(encode_request([b"XADD", b"s", b"*", b"n", b"%d" % i]))
            # The commit reaches the fake's socket; it claims far more than that.
            huge = b"%d" % (1 << 40)
            with contextlib.suppress(OSError):  # the leader dropped the link already
                fake.sendall(encode_request([b"REPLCONF", b"ACK", huge, b"FACK", huge]))
            answers.append(writer.recv(4096))

        assert all(answer.startswith((b"-NOREPL", b"-NOREPLICAS")) for answer in answers), answers
        assert client.info("replication")["connected_slaves"] == 0
        log = leader.log_path.read_text()
        assert "event=replica_protocol_error" in log and "reason=ack_past_sent" in log
    finally:
        fake.close()
        writer.close()
        leader.stop()
