"""Figures INFO measures over time: instantaneous rates and latency percentiles.

Both are measured as Redis 7.0 measures them. A rate (instantaneous_ops_per_sec,
instantaneous_input_kbps, ...) is sampled every 100 ms: the counter's growth per
second since the previous sample; the rate shown is the mean of the last 16 samples.
A latency histogram (INFO latencystats) counts each command's durations in buckets
of bounded relative width and answers percentiles with the highest value of the
bucket that holds them, as Redis's HdrHistogram does.

Recording is on the hot path: one `Histogram.record` per command (or per pipelined
batch, with its count) is a few integer operations and one list increment.

`Stats` holds a node's counters for INFO stats (the per-command ones live on each
command: narad/commands/table.py).
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field

SAMPLE_INTERVAL_S = 0.1
SAMPLES = 16

# Bucket layout: values below 2**SUB_BITS nanoseconds are exact; above, each power of
# two is split into 2**(SUB_BITS - 1) buckets, so a bucket is less than 1/64 (1.6%)
# of its values wide (HdrHistogram's 2 significant digits in Redis: about 1%).
SUB_BITS = 7
HALF = 1 << (SUB_BITS - 1)
LONGEST_NS = 1 << 40  # about 18 minutes; longer durations count in the last bucket
BUCKETS = ((LONGEST_NS.bit_length() - SUB_BITS) << (SUB_BITS - 1)) + (1 << SUB_BITS)


class Rate:
    """One instantaneous_* figure: `sample(counter, now_s)` every SAMPLE_INTERVAL_S."""

    __slots__ = ("_last", "_next", "_samples")

    def __init__(self) -> None:
        self._samples = [0.0] * SAMPLES
        self._next = 0
        self._last: tuple[int, float] | None = None

    def sample(self, counter: int, now_s: float) -> None:
        if self._last is not None:
            count, at_s = self._last
            elapsed = now_s - at_s
            self._samples[self._next] = (counter - count) / elapsed if elapsed > 0 else 0.0
            self._next = (self._next + 1) % SAMPLES
        self._last = (counter, now_s)

    @property
    def per_second(self) -> float:
        return sum(self._samples) / SAMPLES


class Histogram:
    """Durations in nanoseconds (see the bucket layout above)."""

    __slots__ = ("counts", "total")

    def __init__(self) -> None:
        self.counts = [0] * BUCKETS
        self.total = 0

    def record(self, ns: int, count: int = 1) -> None:
        shift = ns.bit_length() - SUB_BITS
        index = ns if shift <= 0 else (shift << (SUB_BITS - 1)) + (ns >> shift)
        self.counts[index if index < BUCKETS else BUCKETS - 1] += count
        self.total += count

    def percentiles(self, wanted: tuple[float, ...]) -> list[int]:
        """For each percent in `wanted`, the highest value (ns) of the bucket holding
        that percentile, as hdr_value_at_percentile computes it; 0 when nothing was
        recorded. One pass over the buckets, however many are wanted."""
        targets = sorted((max(int(p / 100 * self.total + 0.5), 1), i) for i, p in enumerate(wanted))
        out = [0] * len(wanted)
        seen = 0
        pending = iter(targets)
        target = next(pending, None)
        for index, count in enumerate(self.counts):
            seen += count
            while target is not None and seen >= target[0]:
                out[target[1]] = _highest(index)
                target = next(pending, None)
            if target is None:
                break
        return out


class SummedHistogram(Histogram):
    """A Histogram that also keeps the sum of what it recorded (Prometheus's _sum),
    for durations off the per-command path: fsyncs, checkpoints, event-loop lag."""

    __slots__ = ("sum",)

    def __init__(self) -> None:
        super().__init__()
        self.sum = 0

    def record(self, ns: int, count: int = 1) -> None:
        super().record(ns, count)
        self.sum += ns * count


def highest(index: int) -> int:
    """The highest value bucket `index` holds."""
    return _highest(index)


def _highest(index: int) -> int:
    if index < 1 << SUB_BITS:
        return index
    shift = (index >> (SUB_BITS - 1)) - 1
    mantissa = index - (shift << (SUB_BITS - 1))
    return ((mantissa + 1) << shift) - 1


@dataclass
class Stats:
    """A node's counters, as INFO stats shows them."""

    started_s: float = field(default_factory=time.time)
    connections_received: int = 0
    rejected_connections: int = 0
    commands_processed: int = 0
    error_replies: int = 0
    net_input_bytes: int = 0
    net_output_bytes: int = 0
    reads_processed: int = 0  # data_received calls: one per socket read, as Redis counts
    writes_processed: int = 0  # transport writes of replies
    errors: Counter[str] = field(default_factory=Counter)
    # How late the 100 ms sampling timer ran, in ns: the event loop's lag.
    loop_lag: SummedHistogram = field(default_factory=lambda: SummedHistogram())
    # instantaneous_*: sampled every SAMPLE_INTERVAL_S by the server.
    ops_rate: Rate = field(default_factory=Rate)
    input_rate: Rate = field(default_factory=Rate)
    output_rate: Rate = field(default_factory=Rate)

    def reset(self) -> None:
        """CONFIG RESETSTAT: every counter back to zero (the start time stays)."""
        fresh = Stats(started_s=self.started_s)
        self.__dict__.update(fresh.__dict__)

    def sample(self, now_s: float) -> None:
        self.ops_rate.sample(self.commands_processed, now_s)
        self.input_rate.sample(self.net_input_bytes, now_s)
        self.output_rate.sample(self.net_output_bytes, now_s)
