"""Push consumers (Q.CONSUME): connections to which a queue's messages are pushed,
each holding at most PREFETCH messages unsettled. Part of the queue service
(narad/queues/service.py).

Consumers are served at the end of each loop iteration, before the commit that their
frames wait for. A message leaves its consumer's prefetch window once settled (acked,
nacked, expired, dead-lettered); a consumer that goes away gives back what it holds,
visible again at once.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from narad.queues.queue import IN_FLIGHT, unpack
from narad.queues.replies import message
from narad.resp import Push

if TYPE_CHECKING:
    from narad.events import Commits
    from narad.queues.delivery import Delivered
    from narad.queues.queue import Queue
    from narad.streams.stream import Stream

PUSH_BATCH = 32  # messages one push consumer takes per turn, for fairness


class PushTarget(Protocol):
    """A session in push mode, as the queue service serves it (narad/node.py)."""

    push_handler: Any  # its PushConsumer while it consumes

    @property
    def closing(self) -> bool: ...

    def push(self, value: Any) -> None: ...


@dataclass(eq=False)
class PushConsumer:
    """A connection in push mode (Q.CONSUME) on one queue."""

    service: PushServing
    session: PushTarget
    queue: Queue
    prefetch: int
    visibility: int
    held: set[int] = field(default_factory=set)  # offsets pushed and not yet settled

    def disconnected(self) -> None:
        self.service.stop_consuming(self)


class PushServing:
    """The queue service's push consumers: who holds what, and serving them."""

    commits: Commits
    to_serve: set[Queue]  # queues whose push consumers may take more
    consuming: int  # push consumers connected (a cheap test on the XADD path)

    if TYPE_CHECKING:  # the service's other parts

        @property
        def subscribed(self) -> bool: ...
        def forward(self) -> None: ...
        def deliver_raw(self, queue: Queue, count: int, visibility: int) -> list[Delivered]: ...
        def _release(self, queue: Queue, offsets: list[int]) -> None: ...

    def start_consuming(
        self, session: PushTarget, queue: Queue, prefetch: int, visibility: int
    ) -> PushConsumer:
        consumer = PushConsumer(self, session, queue, prefetch, visibility)
        queue.consumers.append(consumer)
        self.consuming += 1
        self.to_serve.add(queue)
        self.commits.schedule()
        return consumer

    def stop_consuming(self, consumer: PushConsumer, release: bool = True) -> None:
        """The consumer is gone: what it holds becomes visible at once."""
        queue = consumer.queue
        if consumer not in queue.consumers:
            return
        queue.consumers.remove(consumer)
        self.consuming -= 1
        held = sorted(consumer.held)
        consumer.held.clear()
        for offset in held:
            queue.holder.pop(offset, None)
        if not release or queue.stream.queue is not queue:
            return
        live = []
        for offset in held:
            value = queue.tracked.get(offset)
            if value is not None and unpack(value).state == IN_FLIGHT:
                live.append(offset)
        self._release(queue, live)
        self.commits.schedule()

    def serve(self) -> None:
        """Push frames to consumers with room in their prefetch window. A consumer is
        given at most PREFETCH messages per call (one loop iteration): with VISIBILITY 0
        a delivery is due again at once, and serving it again in the same call would
        never end; the rest waits for the next iteration."""
        if self.subscribed:
            self.forward()
        given: dict[PushConsumer, int] = {}
        again: set[Queue] = set()
        while self.to_serve:
            queue = self.to_serve.pop()
            if queue.stream.queue is not queue:
                continue
            progress = True
            while progress:
                progress = False
                for consumer in list(queue.consumers):
                    room = consumer.prefetch - len(consumer.held)
                    quota = consumer.prefetch - given.get(consumer, 0)
                    if room <= 0 or consumer.session.closing:
                        continue
                    if quota <= 0:
                        again.add(queue)
                        continue
                    delivered = self.deliver_raw(
                        queue, min(room, quota, PUSH_BATCH), consumer.visibility
                    )
                    if not delivered:
                        break
                    given[consumer] = given.get(consumer, 0) + len(delivered)
                    self._push(consumer, delivered)
                    progress = True
        if again:
            self.to_serve |= again
            self.commits.schedule()

    def _push(self, consumer: PushConsumer, delivered: list[Delivered]) -> None:
        queue = consumer.queue
        name = queue.stream.key
        for d in delivered:
            offset = d[0].offset
            consumer.held.add(offset)
            queue.holder[offset] = consumer
            consumer.session.push(Push([b"message", name, message(*d)]))

    def _settled(self, queue: Queue, offsets: list[int]) -> None:
        """Messages left their push consumer's prefetch window."""
        if not queue.holder:
            return
        for offset in offsets:
            consumer = queue.holder.pop(offset, None)
            if consumer is not None:
                consumer.held.discard(offset)
                self.to_serve.add(queue)
                self.commits.schedule()

    def written(self, stream: Stream) -> None:
        """An entry was appended to `stream` (XADD, Q.PUSH, a copy): its push
        consumers are served at the end of the iteration."""
        queue = stream.queue
        if queue is not None and queue.consumers:
            self.to_serve.add(queue)
