"""kill -9 the server under traffic spread over many streams and queues, with
checkpoints taken while it runs, restart, and check every promise a reply made: each
commit carries many logs in one journal record, so this is where a commit that is
only half in the logs would show.

The traffic and the checks after each restart are those of tests/server/traffic.py,
with every reply durable (kill -9 loses nothing acked under any fsync policy); after a
clean stop, `narad check` finds the data dir clean.
"""

from __future__ import annotations

import random
import threading
from functools import partial
from pathlib import Path

import pytest
import redis

from tests.server.traffic import (
    Events,
    Layout,
    Promises,
    check_queues,
    check_streams,
    consumer,
    narad_check,
    producer,
    queue_worker,
    set_up,
)
from tests.servers import NaradProcess, kill_under_load

ROUNDS = 3
LAYOUT = Layout([b"s%d" % i for i in range(60)], [b"q%d" % i for i in range(8)], [])


def watcher(port: int, taken: list[int], stop: threading.Event) -> None:
    """Notes how many checkpoints the server has taken since it started."""
    client = redis.Redis(port=port, socket_timeout=5)
    try:
        while not stop.wait(0.2):
            taken.append(int(client.info("narad")["checkpoints"]))
    except (redis.ConnectionError, redis.TimeoutError):
        return


def check(server: NaradProcess, events: Events, round_: int) -> Promises:
    """Every promise so far; the Q.ACKs the check sends with the receipts of messages
    still in flight are noted, as the server goes on."""
    promised = Promises.of(list(events.items), len(events.items))
    check_streams(LAYOUT, server.client(), f"round {round_}", promised)
    check_queues(LAYOUT, server.client(protocol=3), f"round {round_}", promised)
    events.note(
        *(
            event
            for (queue, sid) in promised.popped
            if (queue, sid) not in promised.q_ack_sent
            for event in (("q-ack-sent", queue, sid, None), ("q-acked", queue, sid, None))
        )
    )
    return promised


@pytest.mark.slow
def test_kill_9_with_many_streams_keeps_every_promise(tmp_path: Path) -> None:
    rng = random.Random(1201)
    settings = ["--checkpoint-seconds", "1", "--checkpoint-bytes", "1mb"]
    server = NaradProcess(tmp_path, settings).start()
    try:
        set_up(LAYOUT, server.port)
        events = Events()
        taken: list[int] = [0]
        for round_ in range(ROUNDS):
            base, port = round_ * 10**7, server.port
            workers = [
                *(partial(producer, LAYOUT, events, base + i * 10**6, port) for i in range(2)),
                *(partial(consumer, LAYOUT, events, f"c{i}", server.port) for i in range(2)),
                partial(queue_worker, LAYOUT, events, base + 5 * 10**6, server.port),
                partial(watcher, server.port, taken),
            ]
            kill_under_load(server, workers, rng.uniform(1.0, 2.0))
            server.start()
            seen = check(server, events, round_)
        assert max(taken) >= 2  # one at start, and at least one under load
        assert sum(len(a) for a in seen.added.values()) > 200 and seen.acked and seen.q_acked
    finally:
        server.stop()
    done = narad_check(server.folder / "data")
    assert done.returncode == 0, done.stdout + done.stderr
