"""What /metrics shows of a node, in the Prometheus text format or OpenMetrics.

A scrape reads the node's memory only, never a file: the counters the hot paths
already keep (each command's calls, errors and latency histogram in the command
table; each queue's and stream's counters), the journal's and checkpointer's
histograms, the event loop's lag, replication's positions. Nothing here runs
between scrapes.

The node-wide families are `prometheus_client` custom collectors on a private
registry, with the library's process metrics. The per-queue and per-stream families
(one series per queue or stream per family: 140,000 lines for 10,000 queues) are
written as text here instead: each queue's lines are kept from one scrape to the
next and made again only for a queue whose figures changed, so a scrape of ten
thousand idle queues costs about 100 ms of the event loop, where the library's
exposition of those lines alone takes about 0.9 s (bench/README.md, "Metrics").
`metrics-per-queue no` shows only totals over every queue and stream instead (as
RabbitMQ's aggregated endpoint does).

Names and units follow Prometheus conventions: seconds, bytes, `_total` counters.
Every family and what it counts is listed in docs/operations.md. Counters count
since this process opened the node (not durable); Prometheus reads a restart as a
counter reset.

Owned by the event loop thread.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, NamedTuple

from prometheus_client import CollectorRegistry, GCCollector, PlatformCollector, ProcessCollector
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import Collector

from narad.commands.table import all_commands
from narad.metrics import Histogram, SummedHistogram, highest

if TYPE_CHECKING:
    from narad.node import Node
    from narad.queues.queue import Queue
    from narad.streams.pel import Group
    from narad.streams.stream import Stream

# Bucket bounds (seconds) of the duration histograms: 10 us to 10 s, 1-2.5-5 steps.
DURATION_BOUNDS_S = (
    1e-05, 2.5e-05, 5e-05, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
    0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
)
# Bucket bounds of records per commit.
RECORDS_BOUNDS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096, 16384)


# -- histograms: narad/metrics.py's buckets summed into Prometheus's ----------------------


def _cuts(bounds: tuple[float, ...], scale: float) -> list[int]:
    """For each bound, how many of narad/metrics.py's buckets hold only values at
    or below it (bound * scale, in the histogram's unit)."""
    from narad.metrics import BUCKETS

    cuts = []
    index = 0
    for bound in bounds:
        limit = bound * scale
        while index < BUCKETS and highest(index) <= limit:
            index += 1
        cuts.append(index)
    return cuts


_DURATION_CUTS = _cuts(DURATION_BOUNDS_S, 1e9)
_RECORDS_CUTS = _cuts(RECORDS_BOUNDS, 1)


def _buckets(
    histogram: Histogram, bounds: tuple[float, ...], cuts: list[int]
) -> list[tuple[str, float]]:
    """Cumulative (le, count) pairs, +Inf last. A bucket of narad/metrics.py that
    straddles a bound (they are under 1.6% wide) counts above it."""
    counts = histogram.counts
    out: list[tuple[str, float]] = []
    seen = 0
    at = 0
    for bound, cut in zip(bounds, cuts, strict=True):
        seen += sum(counts[at:cut])
        at = cut
        out.append((_le(bound), seen))
    out.append(("+Inf", histogram.total))
    return out


def _le(bound: float) -> str:
    return str(int(bound)) if bound == int(bound) and bound >= 1 else repr(bound)


def _duration_family(
    name: str, doc: str, histogram: SummedHistogram
) -> HistogramMetricFamily:
    return HistogramMetricFamily(
        name, doc, buckets=_buckets(histogram, DURATION_BOUNDS_S, _DURATION_CUTS),
        sum_value=histogram.sum / 1e9,
    )


# -- the node-wide families ---------------------------------------------------------------


class NodeCollector(Collector):
    """Clients, commands, durability, replication and the event loop (module doc)."""

    def __init__(self, node: Node) -> None:
        self.node = node

    def collect(self) -> Iterator[Metric]:
        yield from self._clients()
        yield from self._commands()
        yield from self._durability()
        yield from self._replication()
        lag = self.node.stats.loop_lag
        yield _duration_family(
            "narad_event_loop_lag_seconds",
            "How late the event loop ran a 100 ms timer: what a command arriving then waited.",
            lag,
        )

    def _clients(self) -> Iterator[Metric]:
        node = self.node
        yield GaugeMetricFamily(
            "narad_connected_clients", "Client connections open.", value=len(node.sessions)
        )
        yield GaugeMetricFamily(
            "narad_blocked_clients", "Clients waiting in a blocking command.",
            value=node.blocked_sessions,
        )
        yield CounterMetricFamily(
            "narad_connections_received", "Connections accepted.",
            value=node.stats.connections_received,
        )

    def _commands(self) -> Iterator[Metric]:
        calls = CounterMetricFamily(
            "narad_commands", "Commands run, by command.", labels=["cmd"]
        )
        failed = CounterMetricFamily(
            "narad_command_errors", "Commands that ran and answered an error.", labels=["cmd"]
        )
        rejected = CounterMetricFamily(
            "narad_command_rejected",
            "Commands refused before running (arity, permissions, unknown subcommand...).",
            labels=["cmd"],
        )
        durations = HistogramMetricFamily(
            "narad_command_duration_seconds",
            "Time to run a command (pipelined runs: the run's time shared evenly), "
            "while latency-tracking is on.",
            labels=["cmd"],
        )
        for cmd in all_commands():
            if not (cmd.calls or cmd.rejected or cmd.failed):
                continue
            label = [cmd.name]
            calls.add_metric(label, cmd.calls)
            failed.add_metric(label, cmd.failed)
            rejected.add_metric(label, cmd.rejected)
            histogram = cmd.latency
            if histogram is not None and histogram.total:
                durations.add_metric(
                    label, _buckets(histogram, DURATION_BOUNDS_S, _DURATION_CUTS),
                    cmd.usec / 1e6,
                )
        yield from (calls, failed, rejected, durations)

    def _durability(self) -> Iterator[Metric]:
        keyspace = self.node.keyspace
        journal = keyspace.journal
        stats = journal.stats
        yield _duration_family(
            "narad_journal_fsync_duration_seconds", "Time each fsync of the journal took.",
            stats.fsync_ns,
        )
        yield HistogramMetricFamily(
            "narad_journal_commit_records", "Log records carried by each journal commit.",
            buckets=_buckets(stats.commit_records, RECORDS_BOUNDS, _RECORDS_CUTS),
            sum_value=stats.records,
        )
        yield CounterMetricFamily(
            "narad_journal_bytes_written", "Bytes written to the journal.", value=stats.bytes
        )
        yield GaugeMetricFamily(
            "narad_journal_bytes", "Bytes the journal holds on disk (retained).",
            value=journal.log.size_bytes,
        )
        yield CounterMetricFamily(
            "narad_journal_fsyncs", "fsyncs of the journal.", value=stats.fsyncs
        )
        yield _duration_family(
            "narad_checkpoint_duration_seconds",
            "Time each checkpoint took (its fsyncs of the logs included).",
            keyspace.checkpointer.stats.durations,
        )
        failures = int(journal.write_error is not None or journal.log.failure is not None)
        for stream in keyspace.streams.values():
            failures += (stream.data.failure is not None) + (stream.state.failure is not None)
        yield GaugeMetricFamily(
            "narad_log_failures",
            "Logs refusing writes after an I/O error (the journal's write error included).",
            value=failures,
        )
        yield GaugeMetricFamily(
            "narad_keys_unavailable", "Keys out of service: their state could not be replayed.",
            value=len(keyspace.unavailable),
        )

    def _replication(self) -> Iterator[Metric]:
        node = self.node
        replication = node.replication
        journal = node.keyspace.journal
        follower = replication.follower
        role = GaugeMetricFamily(
            "narad_replication_role", "1 for the role this node has.", labels=["role"]
        )
        role.add_metric(["leader"], int(follower is None))
        role.add_metric(["replica"], int(follower is not None))
        yield role
        yield GaugeMetricFamily(
            "narad_replication_offset", "The journal position this node holds.",
            value=journal.position,
        )
        yield GaugeMetricFamily(
            "narad_epoch", "The leader epoch of this node's journal.", value=journal.epoch
        )
        yield GaugeMetricFamily(
            "narad_fenced",
            "1 while this leader refuses writes: a newer epoch exists or it drains.",
            value=int(replication.fenced),
        )
        up = GaugeMetricFamily(
            "narad_replica_link_up",
            "On a replica: 1 while its link to the leader is up. On a leader: 1 per "
            "replica connected.",
            labels=["replica"],
        )
        lag_bytes = GaugeMetricFamily(
            "narad_replica_lag_bytes", "Journal bytes a replica has not acknowledged.",
            labels=["replica"],
        )
        lag_seconds = GaugeMetricFamily(
            "narad_replica_lag_seconds", "Seconds since a replica last acknowledged.",
            labels=["replica"],
        )
        now = time.monotonic()
        if follower is not None:
            up.add_metric([""], int(follower.state == "connected"))
        for link in replication.leader.links.values():
            name = [link.name]
            up.add_metric(name, 1)
            lag_bytes.add_metric(name, max(0, journal.position - link.acked))
            lag_seconds.add_metric(name, max(0.0, now - link.last_ack_s))
        yield from (up, lag_bytes, lag_seconds)


# -- the per-queue and per-stream families, written as text -------------------------------


class Family(NamedTuple):
    name: str  # without `_total`
    kind: str  # gauge or counter
    doc: str

    def sample(self) -> str:
        return self.name + "_total" if self.kind == "counter" else self.name

    def header(self, openmetrics: bool) -> str:
        shown = self.name if openmetrics or self.kind != "counter" else self.name + "_total"
        return f"# HELP {shown} {self.doc}\n# TYPE {shown} {self.kind}\n"


QUEUE_FAMILIES = (
    Family("narad_queue_messages_visible", "gauge", "Messages that may be delivered now."),
    Family("narad_queue_messages_inflight", "gauge",
           "Messages delivered and not yet acked, under a visibility deadline."),
    Family("narad_queue_messages_delayed", "gauge", "Messages invisible until a due time."),
    Family("narad_queue_oldest_message_age_seconds", "gauge",
           "Age of the oldest visible message (an upper bound, read from memory)."),
    Family("narad_queue_messages_pushed", "counter", "Messages ever added to the queue."),
    Family("narad_queue_messages_delivered", "counter",
           "Deliveries: messages handed to consumers, each delivery counted."),
    Family("narad_queue_messages_acked", "counter", "Messages acked by consumers."),
    Family("narad_queue_messages_nacked", "counter",
           "Messages given back: Q.NACK, or their push consumer's disconnect."),
    Family("narad_queue_messages_redelivered", "counter",
           "Deliveries whose visibility deadline passed: the message is visible again."),
    Family("narad_queue_messages_dead_lettered", "counter",
           "Messages that reached MAXRECEIVES: reason maxreceives went to the DLQ, "
           "reason dropped had no DLQ that would take it."),
    Family("narad_queue_receives_empty", "counter",
           "Q.POP calls that found nothing visible when they ran."),
    Family("narad_queue_schema_rejected", "counter",
           "Fan-out copies the queue's schema refused."),
    Family("narad_queue_consumers", "gauge", "Push consumers and blocked Q.POP clients."),
)
SUBSCRIPTION_LAG = Family(
    "narad_subscription_lag_messages", "gauge",
    "Messages of a source stream a subscribed queue has not copied yet.",
)
STREAM_FAMILIES = (
    Family("narad_stream_length", "gauge", "Entries in a stream (queues excluded)."),
    Family("narad_stream_entries_added", "counter", "Entries ever added to a stream."),
)
GROUP_FAMILIES = (
    Family("narad_stream_group_lag", "gauge",
           "Entries a consumer group has not read yet (absent when it cannot be told "
           "from memory, as XINFO's nil lag)."),
    Family("narad_stream_group_messages_pending", "gauge",
           "Entries delivered to a group and not yet acked (its PEL)."),
    Family("narad_stream_group_consumers", "gauge", "Consumers of a group."),
)
TOTAL_FAMILIES = (
    Family("narad_queues", "gauge", "Queues."),
    Family("narad_streams", "gauge", "Streams, queues excluded."),
)


def escape(value: str) -> str:
    """A label value in the text format (and OpenMetrics)."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def key_label(key: bytes) -> str:
    return escape(key.decode("utf-8", "backslashreplace"))


def _number(value: int | float) -> str:
    return str(value) if isinstance(value, int) else f"{value:.3f}"


class QueueFigures(NamedTuple):
    visible: int
    inflight: int
    delayed: int
    oldest_age_s: float
    pushed: int
    delivered: int
    acked: int
    nacked: int
    redelivered: int
    dead_lettered: int
    dropped: int
    receives_empty: int
    schema_rejected: int
    consumers: int


AGE = 3  # QueueFigures' field, and QUEUE_FAMILIES' family, that changes with time alone
DEAD_LETTERED = 9  # the family with two series per queue (`reason`)


def signature(queue: Queue, consumers: int) -> tuple[int, ...]:
    """What a queue's figures depend on, but its oldest message's age: equal
    signatures, equal figures. Every change of a queue's state is an op in its
    state log (narad/queues/queue.py) but three: `expire` (which pops its timer
    heap and fills `ready`), retention and XDEL moving the stream's start and
    deleted set, and the counters no op keeps."""
    stream = queue.stream
    return (
        stream.state.next_offset, stream.data.next_offset, stream.start, len(stream.deleted),
        len(queue.timers), len(queue.ready), queue.receives_empty, consumers,
    )


def queue_figures(queue: Queue, consumers: int) -> QueueFigures:
    """One queue's figures, from memory; the age is left at 0 (it is worked out at
    each scrape from Queue.oldest_visible_id_ms, kept)."""
    counts = queue.counts()
    return QueueFigures(
        counts["visible"], counts["in_flight"], counts["delayed"], 0.0,
        queue.stream.entries_added, queue.delivered, queue.acked, queue.nacked, queue.expired,
        queue.dead_lettered, queue.dropped, queue.receives_empty, queue.schema_rejected,
        consumers,
    )


def oldest_age_s(id_ms: int | None, now_ms: int) -> float:
    """The age, on the queue clock, of a message whose ID time is `id_ms`."""
    return 0.0 if id_ms is None else max(0, now_ms - id_ms) / 1000


def group_lag(stream: Stream, group: Group) -> int | None:
    """XINFO's lag when memory tells it (no deletion after the group's cursor
    could be in the way), else None."""
    added = stream.entries_added
    if not added or group.last_id >= stream.last_id:
        return 0
    if group.last_id == 0:  # before every entry: all it holds are unread
        return stream.length
    if group.entries_read is not None and stream.max_deleted_id < group.last_id:
        return added - group.entries_read
    return None


class Kept(NamedTuple):
    """A queue's figures and lines as of the last scrape (see KeyFamilies)."""

    signature: tuple[int, ...]
    figures: QueueFigures  # its age is 0: it is worked out at each scrape
    oldest_id_ms: int | None
    lines: list[str]  # per family; the age family's is the line without its value
    label: str


class KeyFamilies:
    """The per-queue and per-stream families as text (module doc). `kept` holds
    each queue's figures and lines from the last scrape: a queue whose signature did
    not change costs a tuple comparison and its age line."""

    def __init__(self, node: Node) -> None:
        self.node = node
        self.kept: dict[Queue, Kept] = {}

    def queues(self, all_queues: list[Queue]) -> list[tuple[Kept, float]]:
        """Every queue's kept figures and lines, made afresh where they changed, and
        its oldest age in seconds now."""
        node = self.node
        now_ms = node.queues.clock.now_ms()
        waiters = node.keys.waiters
        kept = self.kept
        fresh: dict[Queue, Kept] = {}
        out: list[tuple[Kept, float]] = []
        for queue in all_queues:
            stream = queue.stream
            consumers = len(queue.consumers)
            if waiters:
                consumers += len(waiters.get((stream.db, stream.key), ()))
            sig = signature(queue, consumers)
            known = kept.get(queue)
            if known is None or known.signature != sig:
                figures = queue_figures(queue, consumers)
                label = f'db="{stream.db}",queue="{key_label(stream.key)}"'
                lines = _queue_lines(label, figures)
                known = Kept(sig, figures, queue.oldest_visible_id_ms(), lines, label)
            fresh[queue] = known
            out.append((known, oldest_age_s(known.oldest_id_ms, now_ms)))
        self.kept = fresh  # dropped queues leave with the old dict
        return out

    def render(self, openmetrics: bool) -> str:
        node = self.node
        per_key = bool(node.config["metrics-per-queue"])
        all_queues = list(node.queues.queues())
        queues = self.queues(all_queues)
        streams = [s for s in node.keyspace.streams.values() if s.queue is None]
        out = [self._totals(len(queues), len(streams), openmetrics)]
        if per_key:
            out.append(self._per_queue(queues, openmetrics))
        else:
            out.append(self._queue_totals(queues, openmetrics))
        out.append(self._subscriptions(all_queues, openmetrics, per_key))
        with_groups = [q.stream for q in all_queues if q.stream.groups]
        out.append(self._streams(streams + with_groups, openmetrics, per_key))
        return "".join(out)

    @staticmethod
    def _totals(queues: int, streams: int, openmetrics: bool) -> str:
        counts = (queues, streams)
        return "".join(
            f"{family.header(openmetrics)}{family.name} {n}\n"
            for family, n in zip(TOTAL_FAMILIES, counts, strict=True)
        )

    @staticmethod
    def _per_queue(queues: list[tuple[Kept, float]], openmetrics: bool) -> str:
        parts: list[str] = []
        rows = [kept.lines for kept, _ in queues]
        for i, family in enumerate(QUEUE_FAMILIES):
            parts.append(family.header(openmetrics))
            if i == AGE:
                parts.append("".join([f"{kept.lines[AGE]}{age:.3f}\n" for kept, age in queues]))
            else:
                parts.append("".join([row[i] for row in rows]))
        return "".join(parts)

    @staticmethod
    def _queue_totals(queues: list[tuple[Kept, float]], openmetrics: bool) -> str:
        figures = [kept.figures for kept, _ in queues]
        sums: list[float] = (
            [sum(column) for column in zip(*figures, strict=True)] if figures else [0] * 14
        )
        sums[AGE] = max((age for _, age in queues), default=0.0)  # the oldest of all
        values = _per_family([int(v) if i != AGE else v for i, v in enumerate(sums)])
        parts = []
        for family, value in zip(QUEUE_FAMILIES, values, strict=True):
            parts.append(family.header(openmetrics))
            sample = family.sample()
            if isinstance(value, tuple):
                parts.append(f'{sample}{{reason="maxreceives"}} {value[0]}\n')
                parts.append(f'{sample}{{reason="dropped"}} {value[1]}\n')
            else:
                parts.append(f"{sample} {_number(value)}\n")
        return "".join(parts)

    def _subscriptions(self, queues: list[Queue], openmetrics: bool, per_key: bool) -> str:
        keyspace = self.node.keyspace
        lines = []
        total = 0
        for queue in queues:
            if not queue.subs:
                continue
            for sub in queue.subs.values():
                source = keyspace.streams.get(sub.source)
                if source is None:
                    continue
                lag = max(0, source.data.next_offset - sub.next)
                total += lag
                if per_key:
                    lines.append(
                        f'{SUBSCRIPTION_LAG.name}{{db="{queue.stream.db}",'
                        f'source="{key_label(source.key)}",queue="{key_label(queue.stream.key)}"}}'
                        f" {lag}\n"
                    )
        if not per_key:
            lines.append(f"{SUBSCRIPTION_LAG.name} {total}\n")
        return SUBSCRIPTION_LAG.header(openmetrics) + "".join(lines)

    def _streams(self, streams: list[Stream], openmetrics: bool, per_key: bool) -> str:
        columns: list[list[str]] = [[] for _ in STREAM_FAMILIES + GROUP_FAMILIES]
        sums = [0] * 5
        for stream in streams:
            label = f'db="{stream.db}",stream="{key_label(stream.key)}"'
            if stream.queue is None:
                figures = (stream.length, stream.entries_added)
                for i, value in enumerate(figures):
                    sums[i] += value
                    if per_key:
                        columns[i].append(f"{STREAM_FAMILIES[i].sample()}{{{label}}} {value}\n")
            for group in stream.groups.values():
                values = (group_lag(stream, group), len(group.pel), len(group.consumers))
                group_label = f'{label},group="{key_label(group.name)}"'
                for j, known in enumerate(values):
                    if known is None:
                        continue
                    sums[2 + j] += known
                    if per_key:
                        family = GROUP_FAMILIES[j]
                        columns[2 + j].append(f"{family.sample()}{{{group_label}}} {known}\n")
        parts = []
        for i, family in enumerate(STREAM_FAMILIES + GROUP_FAMILIES):
            parts.append(family.header(openmetrics))
            if per_key:
                parts.extend(columns[i])
            else:
                parts.append(f"{family.sample()} {sums[i]}\n")
        return "".join(parts)


def _per_family(figures: QueueFigures | list[float]) -> list[int | float | tuple[int, int]]:
    """A queue's figures in QUEUE_FAMILIES order: the two dead-letter counts as one
    pair (the family with a `reason` label)."""
    values: list[int | float | tuple[int, int]] = list(figures[:DEAD_LETTERED])
    values.append((int(figures[DEAD_LETTERED]), int(figures[DEAD_LETTERED + 1])))
    values.extend(figures[DEAD_LETTERED + 2 :])
    return values


def _queue_lines(label: str, figures: QueueFigures) -> list[str]:
    """One queue's line(s) for each of QUEUE_FAMILIES; the age family's without
    its value (`_per_queue` adds it)."""
    lines = []
    for family, value in zip(QUEUE_FAMILIES, _per_family(figures), strict=True):
        sample = family.sample()
        if isinstance(value, tuple):
            lines.append(
                f'{sample}{{{label},reason="maxreceives"}} {value[0]}\n'
                f'{sample}{{{label},reason="dropped"}} {value[1]}\n'
            )
        elif family is QUEUE_FAMILIES[AGE]:
            lines.append(f"{sample}{{{label}}} ")
        else:
            lines.append(f"{sample}{{{label}}} {value}\n")
    return lines


# -- the exposition -----------------------------------------------------------------------


class Exposition:
    """A node's /metrics: the registry's families, then the per-key ones."""

    def __init__(self, node: Node) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(NodeCollector(node))
        ProcessCollector(namespace="", registry=self.registry)
        PlatformCollector(registry=self.registry)
        GCCollector(registry=self.registry)
        self.keys = KeyFamilies(node)

    def scrape(self, accept: str | None) -> tuple[bytes, str]:
        """The body and its content type, in the format `accept` asks for."""
        encoder, content_type = choose_encoder(accept or "")
        openmetrics = content_type.startswith("application/openmetrics-text")
        head = encoder(self.registry)
        body = self.keys.render(openmetrics).encode()
        if openmetrics:
            eof = b"# EOF\n"
            assert head.endswith(eof)
            return head[: -len(eof)] + body + eof, content_type
        return head + body, content_type
