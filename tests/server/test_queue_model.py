"""A hypothesis state machine drives random push / pop / ack / nack / touch / clock
moves / seek against a real server and a small model of the queue contract
(docs/queues.md), with the server's queue clock frozen and moved by DEBUG CLOCK.

The model is written from the contract, not from the implementation:

- every message is untracked (never delivered since the last seek, or acked, or
  dead-lettered), delayed, in flight, or visible again after a delivery;
- visible: visible again, or untracked at or after the cursor; Q.POP hands out the
  oldest visible first and moves the cursor past what it scanned;
- a receipt is good only for the latest delivery; ACK accepts it while the message
  is tracked, NACK and TOUCH only while it is in flight;
- a message delivered MAXRECEIVES times is dropped (no DLQ) instead of becoming
  visible again;
- a subscriber holds each message of its source once, in order.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
import redis
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    rule,
    run_state_machine_as_test,
)

from tests.examples import examples
from tests.servers import NaradProcess, wait_until

MAX_RECEIVES = 3
UNTRACKED, DELAYED, IN_FLIGHT, VISIBLE = "untracked", "delayed", "in_flight", "visible"
_names = itertools.count()


@dataclass
class Message:
    id: bytes
    state: str = UNTRACKED
    receives: int = 0
    due: int = 0
    receipt: bytes = b""


@pytest.fixture(scope="module")
def server(debug_narad: NaradProcess) -> NaradProcess:
    return debug_narad


# The model freezes the queue clock a day ahead of the wall clock, so that while a
# restarted server runs on the wall clock (until the model freezes it again where it
# stood) no deadline or delay falls due.
AHEAD_MS = 24 * 3600 * 1000


class QueueModel(RuleBasedStateMachine):
    server: NaradProcess

    def __init__(self) -> None:
        super().__init__()
        self.r = redis.Redis(port=self.server.port, protocol=3)
        ahead = int(self.r.execute_command("DEBUG", "CLOCK")) + AHEAD_MS
        self.now = int(self.r.execute_command("DEBUG", "CLOCK", "FREEZE", ahead))
        n = next(_names)
        self.q, self.sub = b"model%d" % n, b"model%d-sub" % n
        self.r.execute_command("Q.CREATE", self.q, "VISIBILITY", 1000, "MAXRECEIVES", MAX_RECEIVES)
        self.r.execute_command("Q.CREATE", self.sub)
        self.r.execute_command("Q.SUBSCRIBE", self.sub, self.q, "FROM", "EARLIEST")
        self.messages: list[Message] = []
        self.cursor = 0
        self.acked = self.dropped = 0
        self.receipts: list[bytes] = []  # every receipt handed out, stale ones included

    # -- model helpers ----------------------------------------------------------------

    def visible(self) -> list[int]:
        return [
            i
            for i, m in enumerate(self.messages)
            if m.state == VISIBLE or (m.state == UNTRACKED and i >= self.cursor)
        ]

    def becomes_visible(self, i: int) -> None:
        m = self.messages[i]
        if m.receives >= MAX_RECEIVES:
            m.state, m.receives, m.receipt = UNTRACKED, 0, b""
            self.dropped += 1
        else:
            m.state = VISIBLE

    def find(self, receipt: bytes) -> Message | None:
        for m in self.messages:
            if m.receipt == receipt:
                return m
        return None

    # -- rules ------------------------------------------------------------------------

    @rule(count=st.integers(1, 3), delay=st.sampled_from([0, 0, 500]))
    def push(self, count: int, delay: int) -> None:
        args = ["DELAY", delay] if delay else []
        payloads = [b"p%d" % (len(self.messages) + k) for k in range(count)]
        reply = self.r.execute_command("Q.PUSH", self.q, *args, *payloads)
        ids = [reply] if count == 1 else reply
        for sid in ids:
            self.messages.append(
                Message(sid, DELAYED, 0, self.now + delay) if delay else Message(sid)
            )

    @rule(count=st.integers(1, 4), visibility=st.sampled_from([None, 300, 2000]))
    def pop(self, count: int, visibility: int | None) -> None:
        args = ["COUNT", count] + (["VISIBILITY", visibility] if visibility is not None else [])
        got = self.r.execute_command("Q.POP", self.q, *args)
        expected = self.visible()[:count]
        assert [m[b"id"] for m in got] == [self.messages[i].id for i in expected]
        if len(expected) < count:
            self.cursor = max(self.cursor, len(self.messages))
        elif expected:
            self.cursor = max(self.cursor, expected[-1] + 1)
        for i, reply in zip(expected, got, strict=True):
            m = self.messages[i]
            m.receives += 1
            assert reply[b"receives"] == m.receives
            m.state, m.due, m.receipt = (
                IN_FLIGHT,
                self.now + (visibility or 1000),
                reply[b"receipt"],
            )
            self.receipts.append(m.receipt)

    @rule(data=st.data())
    def ack(self, data: st.DataObject) -> None:
        if not self.receipts:
            return
        chosen = data.draw(st.lists(st.sampled_from(self.receipts), min_size=1, max_size=3))
        current = [self.find(receipt) for receipt in chosen]
        # A receipt that is not its message's latest: stale while a later delivery
        # holds the message, not counted once the message is untracked.
        if any(
            m is None and self.messages[int(rc.split(b"-")[0], 16)].state != UNTRACKED
            for m, rc in zip(current, chosen, strict=True)
        ):
            with pytest.raises(redis.ResponseError, match=r"^STALE"):
                self.r.execute_command("Q.ACK", self.q, *chosen)
            return
        acked = {m.id: m for m in current if m is not None}
        assert self.r.execute_command("Q.ACK", self.q, *chosen) == len(acked)
        for m in acked.values():
            m.state, m.receives, m.receipt = UNTRACKED, 0, b""
            self.acked += 1

    @rule(data=st.data(), delay=st.sampled_from([0, 400]), touch=st.booleans())
    def nack_or_touch(self, data: st.DataObject, delay: int, touch: bool) -> None:
        if not self.receipts:
            return
        receipt = data.draw(st.sampled_from(self.receipts))
        m = self.find(receipt)
        command = ["Q.TOUCH", self.q, receipt, 700] if touch else ["Q.NACK", self.q, receipt]
        if not touch and delay:
            command += ["DELAY", delay]
        if m is None or m.state != IN_FLIGHT:
            with pytest.raises(redis.ResponseError, match=r"^STALE"):
                self.r.execute_command(*command)
            return
        assert self.r.execute_command(*command) == b"OK"
        if touch:
            m.due = self.now + 700
        elif delay:
            m.state, m.due = DELAYED, self.now + delay
        else:
            self.becomes_visible(self.messages.index(m))

    @rule(ms=st.sampled_from([100, 300, 1000, 2500]))
    def advance(self, ms: int) -> None:
        self.now = int(self.r.execute_command("DEBUG", "CLOCK", "ADVANCE", ms))
        # Deadlines and delays due by now, in the order the server's timer takes
        # them: by due time, then offset.
        due = sorted(
            (m.due, i)
            for i, m in enumerate(self.messages)
            if m.state in (IN_FLIGHT, DELAYED) and m.due <= self.now
        )
        for _, i in due:
            self.becomes_visible(i)

    @rule(where=st.sampled_from(["EARLIEST", "LATEST"]))
    def seek(self, where: str) -> None:
        assert self.r.execute_command("Q.SEEK", self.q, where) == b"OK"
        self.cursor = 0 if where == "EARLIEST" else len(self.messages)

    # -- invariants ---------------------------------------------------------------------

    @invariant()
    def stats_agree(self) -> None:
        s = self.r.execute_command("Q.STATS", self.q)
        states = [m.state for m in self.messages]
        assert s[b"visible"] == len(self.visible())
        assert s[b"in_flight"] == states.count(IN_FLIGHT)
        assert s[b"delayed"] == states.count(DELAYED)
        assert (s[b"acked"], s[b"dropped"]) == (self.acked, self.dropped)

    def teardown(self) -> None:
        ids = [m.id for m in self.messages]
        wait_until(lambda: self.r.xlen(self.sub) == len(ids))
        assert [f[b"source_id"] for _, f in self.r.xrange(self.sub)] == ids
        self.r.close()


class CrashingQueueModel(QueueModel):
    """The same model with kill -9 and a restart as one more step: every acked push,
    ack, delivery (receipt, receive count, deadline), delay and cursor move was
    committed before its reply, so the model goes on unchanged."""

    @rule()
    def crash(self) -> None:
        self.r.close()
        self.server.kill()
        self.server.start()
        self.r = redis.Redis(port=self.server.port, protocol=3)
        assert int(self.r.execute_command("DEBUG", "CLOCK", "FREEZE", self.now)) == self.now


MODEL_SETTINGS = settings(
    max_examples=examples(40),
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


def test_queue_model(server: NaradProcess) -> None:
    QueueModel.server = server
    run_state_machine_as_test(QueueModel, settings=MODEL_SETTINGS)


@pytest.fixture(scope="module")
def small_segments(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NaradProcess]:
    """A server whose logs roll every 1 KiB, so that messages, deliveries and acks
    spread over many segment files."""
    folder = tmp_path_factory.mktemp("small-segments")
    conf = folder / "narad.conf"
    conf.write_text("segment-bytes 1kb\n")
    server = NaradProcess(folder, ["--enable-debug-command", "yes", "--config", str(conf)])
    server.start()
    yield server
    server.stop()


@pytest.mark.parametrize("which", ["server", "small_segments"])
def test_queue_model_across_kill9(which: str, request: pytest.FixtureRequest) -> None:
    CrashingQueueModel.server = request.getfixturevalue(which)
    run_state_machine_as_test(
        CrashingQueueModel, settings=settings(MODEL_SETTINGS, max_examples=examples(10))
    )
