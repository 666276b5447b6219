"""The election's turns, with real sentinel processes: sentinels whose wait after an
election ends at the same moment try again one after the other, in run-id order, and
the first is elected; they do not all try at once and split the vote (docs/failover.md,
"Election")."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import redis

from tests.sentinel.cluster import NAME, SentinelProcess, deployment, settings
from tests.servers import NaradProcess, wait_until

FAILOVER_TIMEOUT_S = 2.0
PHANTOM_EPOCH = 10
# The run id of a sentinel that is not there. A vote asked in its name, as a sentinel
# elected and crashed at once would have asked it, holds the sentinel that gives it
# back from a failover of its own for twice `failover-timeout`.
PHANTOM = "f" * 40


def vote_for(sentinel: SentinelProcess, leader: NaradProcess, epoch: int,
             run_id: str = PHANTOM) -> None:
    """Ask `sentinel`'s vote for `run_id` in `epoch`, as a sentinel trying a failover
    of `leader` does; it must give it."""
    reply = sentinel.client(protocol=2).execute_command(
        "SENTINEL", "IS-MASTER-DOWN-BY-ADDR", leader.host, leader.port, epoch, run_id)
    assert reply[1:] == [run_id.encode(), epoch], reply


def test_sentinels_whose_wait_ends_together_take_turns(tmp_path: Path) -> None:
    """Two sentinels give their vote to a third that is never heard of again (one
    elected and crashed at once), so both may try again only twice failover-timeout
    later. They are paused past that moment and continued together: both find at once
    that they may try. The first in run-id order tries; the other, whose turn is
    later, gives it its vote first, and the leader is promoted in the very next epoch.
    Trying at once, each votes for itself and neither is elected; and as they tried
    together, they wait together and try together again."""
    with deployment(tmp_path, sentinels=2,
                    sentinel_settings=settings(1000, int(FAILOVER_TIMEOUT_S * 1000))) as found:
        old = found.nodes[0]
        for sentinel in found.sentinels:
            # Each sentinel's own view makes the leader objectively down: it stays so
            # through the pause, with the other's answers out of date.
            sentinel.client(protocol=2).execute_command("SENTINEL", "SET", NAME, "quorum", 1)
        voted_at = time.monotonic()
        for sentinel in found.sentinels:
            vote_for(sentinel, old, PHANTOM_EPOCH)
        old.kill()
        wait_until(lambda: all("o_down" in str(s.master()["flags"]) for s in found.sentinels),
                   timeout=10)
        pids = [s.proc.pid for s in found.sentinels if s.proc is not None]
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)
        try:
            # Paused until both may try again (a moment of their state, not a bound
            # on anything measured).
            time.sleep(max(0.0, voted_at + 2 * FAILOVER_TIMEOUT_S + 0.5 - time.monotonic()))
        finally:
            for pid in pids:
                os.kill(pid, signal.SIGCONT)
        continued = time.monotonic()

        def promoted() -> list[int] | None:
            try:
                states = [s.master() for s in found.sentinels]
            except redis.RedisError:
                return None
            if any(int(str(state["port"])) == old.port for state in states):
                return None
            return [int(str(state["config-epoch"])) for state in states]

        epochs = wait_until(promoted, timeout=30, interval=0.05)
        print(f"leader switched {time.monotonic() - continued:.2f} s after the sentinels "
              f"continued, in epochs {epochs}")
        tried = [line for s in found.sentinels for line in s.log().splitlines()
                 if "try-failover" in line or "not-elected" in line]
        assert epochs == [PHANTOM_EPOCH + 1] * 2, tried
