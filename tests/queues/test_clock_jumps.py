"""A real server whose wall clock jumps while its elapsed time does not (libfaketime,
preloaded, reading its offset from a file the test rewrites): queue deadlines, delays
and dedup windows keep elapsed time within a process (docs/queues.md, "Delays, expiry
and the clock"), and a restart reads the wall clock again."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from tests.servers import NaradProcess

LIBFAKETIME = Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1")
HOUR_S = 3600


class JumpingNarad(NaradProcess):
    """A server whose wall clock is the real one moved by what `offset_file` says
    ("+0", "+1h", "-1h"), read again on every call; its monotonic and boot clocks are
    the real ones."""

    def __init__(self, folder: Path) -> None:
        super().__init__(folder)
        self.offset_file = folder / "faketime.rc"

    def jump(self, offset: str) -> None:
        self.offset_file.write_text(offset + "\n")

    def argv(self) -> list[str]:
        return [
            "env",
            f"LD_PRELOAD={LIBFAKETIME}",
            f"FAKETIME_TIMESTAMP_FILE={self.offset_file}",
            "FAKETIME_NO_CACHE=1",
            "FAKETIME_DONT_FAKE_MONOTONIC=1",
            *super().argv(),
        ]


@pytest.fixture
def server(tmp_path: Path) -> Iterator[JumpingNarad]:
    if not LIBFAKETIME.exists():
        pytest.skip(f"libfaketime is not installed ({LIBFAKETIME}: apt-get install faketime)")
    server = JumpingNarad(tmp_path / "narad")
    server.folder.mkdir(parents=True)
    server.jump("+0")
    server.start()
    yield server
    server.stop()


def server_time_s(r: redis.Redis) -> float:
    seconds, micros = r.time()
    return seconds + micros / 1e6


def jump(server: JumpingNarad, r: redis.Redis, offset: str, by_s: int) -> None:
    """Step the server's wall clock and see that it stepped (the test means nothing
    otherwise)."""
    before = server_time_s(r)
    server.jump(offset)
    moved = server_time_s(r) - before
    assert abs(moved - by_s) < 60, f"the server's wall clock moved {moved:.0f} s, not {by_s} s"


def test_a_forward_jump_neither_ends_visibility_nor_dedup_windows(server: JumpingNarad) -> None:
    r = server.client(protocol=3, socket_timeout=20)
    r.execute_command("Q.CREATE", "q", "DEDUPWINDOW", 300_000)
    first = r.execute_command("Q.PUSH", "q", "DEDUP", "k", "one")
    [message] = r.execute_command("Q.POP", "q", "VISIBILITY", 30_000)
    jump(server, r, "+1h", HOUR_S)

    assert r.execute_command("Q.POP", "q") == []  # still in flight: no redelivery
    assert r.execute_command("Q.PUSH", "q", "DEDUP", "k", "again") == first  # still a duplicate
    assert r.execute_command("Q.STATS", "q")[b"in_flight"] == 1
    info = r.info("narad")
    print(f"queue clock skew after the jump: {info['queue_clock_skew_ms']} ms")
    assert info["queue_clock_skew_ms"] < -(HOUR_S - 60) * 1000
    assert "event=wall_clock_jump" in wait_for_log(server, "event=wall_clock_jump")
    assert r.execute_command("Q.ACK", "q", message[b"receipt"]) == 1

    # A restart reads the wall clock again: what was due within the hour is due now.
    second = r.execute_command("Q.PUSH", "q", "DEDUP", "k2", "two")
    r.execute_command("Q.POP", "q", "VISIBILITY", 30_000)
    r.close()
    server.restart()
    r = server.client(protocol=3, socket_timeout=20)
    [again] = r.execute_command("Q.POP", "q")
    assert again[b"id"] == second and again[b"receives"] == 2
    assert r.execute_command("Q.PUSH", "q", "DEDUP", "k2", "new") != second
    r.close()


def test_a_backward_jump_holds_back_no_delay_or_deadline(server: JumpingNarad) -> None:
    r = server.client(protocol=3, socket_timeout=20)
    r.execute_command("Q.CREATE", "q")
    delayed = r.execute_command("Q.PUSH", "q", "DELAY", 1000, "delayed")
    popped = r.execute_command("Q.PUSH", "q", "popped")
    [message] = r.execute_command("Q.POP", "q", "VISIBILITY", 1000)
    assert message[b"id"] == popped
    jump(server, r, "-1h", -HOUR_S)

    started = time.monotonic()
    seen: dict[bytes, int] = {}
    while len(seen) < 2 and time.monotonic() - started < 10:
        got = r.execute_command("Q.POP", "q", "COUNT", 10, "BLOCK", 5000)
        assert got is not None, "nothing became visible within 5 s of its due time"
        seen.update((m[b"id"], m[b"receives"]) for m in got)
    print(f"both visible again {time.monotonic() - started:.2f} s after the jump")
    assert seen == {delayed: 1, popped: 2}
    r.close()


def wait_for_log(server: JumpingNarad, text: str) -> str:
    """The server's log once it holds `text` (the jump is noticed within a second)."""
    deadline = time.monotonic() + 5
    while text not in (log := server.log()) and time.monotonic() < deadline:
        time.sleep(0.05)
    return log
