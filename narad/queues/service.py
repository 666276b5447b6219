"""The server side of queues: what happens because time passes or data is
committed, not because a command asked. Owned by the server, on the event loop.

QueueService is the one object the server and the Q.* commands hold; its parts, one
module each:

- delivering, receipts and the timer: narad/queues/delivery.py;
- dead letters and redriving: narad/queues/dead_letters.py;
- fan-out copies: narad/queues/fanout.py;
- push consumers (Q.CONSUME): narad/queues/push.py;
- what the server appends on its own, judged by the target's schema:
  narad/queues/appends.py.

It reaches what the server owns only through the keyspace (narad/keyspace.py) and
the narrow interfaces of narad/events.py: KeyEvents, Commits, Timers.

Every change to queue state goes through `Stream.log_op`, so replies and push frames
leave only after the commit that makes their ops durable.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from narad.clock import Clock
from narad.errors import no_queue
from narad.queues.dead_letters import DeadLetters
from narad.queues.delivery import JUMP_LOGGED_MS, Delivery
from narad.queues.fanout import FanOut
from narad.queues.push import PushServing
from narad.queues.queue import new_secret

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from narad.events import Commits, KeyEvents, Timers
    from narad.keyspace import Keyspace
    from narad.queues.queue import Queue
    from narad.streams.stream import Stream

logger = logging.getLogger("narad.queues")


class QueueService(Delivery, DeadLetters, FanOut, PushServing):
    def __init__(
        self, keyspace: Keyspace, events: KeyEvents, commits: Commits, timers: Timers
    ) -> None:
        self.keyspace = keyspace
        self.events = events
        self.commits = commits
        self.timers = timers
        self.clock = Clock()
        self._timer: asyncio.TimerHandle | None = None
        self._timer_due = 0
        self.to_serve: set[Queue] = set()
        self.consuming = 0
        self.subscribing: set[Queue] = set()

    # -- finding queues ---------------------------------------------------------------

    def queues(self) -> Iterator[Queue]:
        """Every available queue. An unavailable one (its state log could not be
        replayed: narad/keyspace.py) is never served, timed, fed nor copied from."""
        for stream in self.keyspace.streams.values():
            if stream.queue is not None and stream.fault is None:
                yield stream.queue

    def get(self, db: int, key: bytes) -> Queue | None:
        stream = self.keyspace.get(db, key)
        return None if stream is None else stream.queue

    def require(self, db: int, key: bytes) -> Queue:
        queue = self.get(db, key)
        if queue is None:
            raise no_queue(key)
        return queue

    # -- lifecycle --------------------------------------------------------------------

    def opened(self) -> None:
        """The node begins to lead (start, promotion): the clock reads the wall clock
        (the deadlines in the state were timed by another process, or by a lead of this
        one that ended), settings go into the logs, subscription positions are
        recovered, timers armed."""
        moved = self.clock.anchor()
        if not -JUMP_LOGGED_MS < moved < JUMP_LOGGED_MS:
            logger.warning("event=queue_clock_anchored moved_ms=%d", moved)
        for queue in list(self.queues()):
            if queue.secret is None:  # made before receipts were signed
                queue.stream.log_op(["q.secret", new_secret()])
            self.apply_settings(queue)
            for sub in list(queue.subs.values()):
                self.recover_subscription(queue, sub.source)
        self.subscribing = {q for q in self.queues() if q.subs}
        self.tick()

    def apply_settings(self, queue: Queue) -> None:
        """The settings that live in the data log's config (retention). A queue's
        retention by age is its own, else the server's `queue-retention`; either way
        it deletes acked messages only (Keyspace.maintain)."""
        data = queue.stream.data
        base = self.keyspace.log_config()
        s = queue.settings
        data.config = data.config._replace(
            retention_ms=s.retention or int(self.keyspace.config["queue-retention"]),  # type: ignore[call-overload]
            retention_bytes=s.maxbytes or base.retention_bytes,
        )

    def dropped(self, stream: Stream) -> None:
        """A queue's key went away: its push consumers stop, its subscribers stop
        copying from it (at the next forward)."""
        queue = stream.queue
        if queue is None:
            return
        for consumer in list(queue.consumers):
            consumer.session.push_handler = None
            self.stop_consuming(consumer, release=False)
        self.to_serve.discard(queue)
        self.subscribing.discard(queue)
        self.commits.schedule()


class RunningLoop:
    """Timers on the event loop that runs the call: the server's, once it serves."""

    def call_later(self, delay: float, callback: Callable[[], object]) -> asyncio.TimerHandle:
        return asyncio.get_running_loop().call_later(delay, callback)
