"""A stateful property test: random append / write / roll / retain / set-start /
truncate / close / reopen sequences behave exactly like a list model."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from narad.log.log import Log, LogConfig
from tests.examples import examples

CONFIG = LogConfig(segment_bytes=600)


class LogModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="narad-model-"))
        self.log = Log.open(self.dir, CONFIG)
        # The model: offset -> (id, payload) for every record in the log, and the
        # logical start. Offsets are dense from `base`.
        self.base = 0
        self.records: list[tuple[tuple[int, int], bytes]] = []
        self.start = 0
        self.written = 0  # records of self.records that are in the file
        self.next_id = (1, 0)

    def teardown(self) -> None:
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    @property
    def end(self) -> int:
        return self.base + len(self.records)

    @rule(data=st.binary(max_size=250), bump=st.integers(0, 2))
    def append(self, data: bytes, bump: int) -> None:
        ms, seq = self.next_id
        rid = (ms + bump, 0) if bump else (ms, seq)
        segments = len(self.log.segments)
        assert self.log.append(data, *rid) == self.end
        if len(self.log.segments) != segments:  # a roll writes what was buffered
            self.written = len(self.records)
        self.records.append((rid, data))
        self.next_id = (rid[0], rid[1] + 1)

    @rule()
    def write_and_sync(self) -> None:
        self.log.write()
        self.log.sync()
        self.written = len(self.records)

    @rule()
    def roll(self) -> None:
        if self.log.active.empty:
            return
        self.log.roll()
        self.written = len(self.records)

    @rule(keep=st.integers(0, 3000))
    def retain_bytes(self, keep: int) -> None:
        self.log.write()
        self.written = len(self.records)
        self.log.config = LogConfig(segment_bytes=600, retention_bytes=keep)
        self.log.apply_retention()
        self.log.config = CONFIG
        first = self.log.segments[0].base_offset
        assert first <= self.end
        self.start = max(self.start, first)

    @precondition(lambda self: self.records)
    @rule(frac=st.floats(0, 1))
    def set_start(self, frac: float) -> None:
        target = self.start + int((self.end - self.start) * frac)
        self.log.set_start(target)
        self.start = max(self.start, min(target, self.end))

    @rule(frac=st.floats(0, 1))
    def truncate(self, frac: float) -> None:
        cut = int(self.end * frac)
        self.log.truncate(cut)
        if cut < self.end:
            if cut <= self.base:
                self.base, self.records = cut, []
            else:
                del self.records[cut - self.base :]
            self.start = min(self.start, cut)
            self.written = len(self.records)
            last = self.records[-1][0] if self.records else (1, -1)
            self.next_id = (last[0], last[1] + 1)

    @rule()
    def close_and_reopen(self) -> None:
        self.log.close()  # a clean close writes and fsyncs what was buffered
        self.written = len(self.records)
        self.log = Log.open(self.dir, CONFIG)

    @invariant()
    def matches_model(self) -> None:
        log = self.log
        assert log.next_offset == self.end
        assert log.start_offset == self.start
        readable = self.base + self.written
        got = log.read(0, end=log.written_end)  # the file alone (a plain read writes first)
        want = list(range(self.start, readable))
        assert [r.offset for r in got] == want
        for r in got:
            rid, data = self.records[r.offset - self.base]
            assert ((r.id_ms, r.id_seq), r.payload) == (rid, data)
        assert [r.offset for r in log.read_reverse(10**9, end=log.written_end)] == want[::-1]
        if want and log.written_end == log.next_offset:  # offset_of_id writes first
            mid = want[len(want) // 2]
            rid = self.records[mid - self.base][0]
            assert log.offset_of_id(*rid) <= mid
            found = log.offset_of_id(*rid)
            assert found >= self.base and self.records[found - self.base][0] == rid


TestLogModel = LogModel.TestCase
TestLogModel.settings = settings(max_examples=examples(100), stateful_step_count=40, deadline=None)
