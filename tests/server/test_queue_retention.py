"""A queue's retention by age (its RETENTION, else the server's `queue-retention`,
7 days by default) deletes acked messages only: sealed segments that hold a message
not yet acked stay, however old (docs/queues.md, "Retention")."""

from __future__ import annotations

from pathlib import Path

from tests.servers import NaradProcess, wait_until


def _pop_ids(client, queue: str, count: int) -> list[tuple[bytes, bytes]]:  # type: ignore[no-untyped-def]
    got = client.execute_command("Q.POP", queue, "COUNT", count, "VISIBILITY", 600_000)
    return [(m[b"id"], m[b"receipt"]) for m in got]


def test_queue_retention_keeps_what_is_not_acked(tmp_path: Path) -> None:
    server = NaradProcess(tmp_path / "narad", ["--segment-bytes", "4kb"]).start()
    try:
        client = server.client(protocol=3)
        assert client.config_get("queue-retention") == {"queue-retention": "604800000"}
        client.execute_command("Q.CREATE", "jobs", "RETENTION", 1)
        pushed = [client.execute_command("Q.PUSH", "jobs", f"{i:04d}" + "x" * 200)
                  for i in range(400)]
        # The first 200 are acked; 200..299 are in flight; 300..399 were never received.
        first = _pop_ids(client, "jobs", 300)
        assert [mid for mid, _ in first] == pushed[:300]
        assert client.execute_command("Q.ACK", "jobs", *[r for _, r in first[:200]]) == 200
        wait_until(lambda: client.xlen("jobs") < 400, timeout=10)
        wait_until(lambda: client.xlen("jobs") == len(client.xrange("jobs")), timeout=10)
        kept = [mid for mid, _ in client.xrange("jobs")]
        # Whole segments of acked messages went; nothing from the first unacked on.
        assert kept == pushed[len(pushed) - len(kept):]
        assert pushed[200] in kept and len(kept) < 400
        assert client.execute_command("Q.ACK", "jobs", *[r for _, r in first[200:]]) == 100
        assert [mid for mid, _ in _pop_ids(client, "jobs", 500)] == pushed[300:]
        server.restart()
        assert [mid for mid, _ in server.client(protocol=3).xrange("jobs")] == kept
    finally:
        server.stop()


def test_a_queue_without_acks_keeps_everything(tmp_path: Path) -> None:
    server = NaradProcess(
        tmp_path / "narad", ["--segment-bytes", "4kb", "--queue-retention", "1"]
    ).start()
    try:
        client = server.client(protocol=3)
        client.execute_command("Q.CREATE", "jobs")
        client.xadd("plain", {"f": "x" * 200})
        for _ in range(200):
            client.execute_command("Q.PUSH", "jobs", "x" * 200)
            client.xadd("plain", {"f": "x" * 200})
        # A plain stream has no retention by default (retention-ms 0); the queue's
        # messages are all unacked: after several upkeeps, nothing was deleted.
        client.config_set("retention-ms", 1)
        wait_until(lambda: client.xlen("plain") < 201, timeout=10)
        assert client.xlen("jobs") == 200
        got = client.execute_command("Q.POP", "jobs", "COUNT", 200)
        assert len(got) == 200
        assert client.execute_command("Q.ACK", "jobs", *[m[b"receipt"] for m in got]) == 200
        wait_until(lambda: client.xlen("jobs") < 200, timeout=10)
    finally:
        server.stop()
