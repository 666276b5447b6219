"""LATENCY and MEMORY: what a node's latency and memory look like, as tools that
watch Redis ask for them (redis_exporter reads LATENCY LATEST, LATENCY HISTOGRAM and
MEMORY USAGE).

- LATENCY HISTOGRAM [command ...]: Redis 7's reply, from the per-command histograms
  INFO latencystats reads (narad/metrics.py): per command its `calls` and
  `histogram_usec`, cumulative counts at 1, 2, 4, ... microseconds (each bound shown
  as Redis shows it: the bucket's highest nanosecond / 1000), only where the count
  grows. Nothing while latency-tracking is off.
- LATENCY LATEST / HISTORY / RESET / GRAPH / DOCTOR: Narad has no latency monitor
  (Redis's latency-monitor-threshold events): LATEST and HISTORY are empty, RESET
  resets nothing (0), GRAPH has no samples, DOCTOR says so and points at what there
  is. The event loop's lag is on /metrics (docs/operations.md).
- MEMORY USAGE key [SAMPLES n]: about how many bytes of memory the key costs Narad,
  as Redis answers how many bytes of RAM a key takes: its logs' indexes and write
  buffers, its consumer groups and pending entries, and a queue's tracked messages
  and dedup keys. A stream's entries are on disk, not in memory (Q.STATS
  `log_bytes` and XINFO say how much); nil for a missing key. SAMPLES is accepted
  and ignored: nothing is sampled.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

from narad.commands.args import parse_int
from narad.commands.table import all_commands, command, container, help_reply
from narad.errors import CommandError, syntax
from narad.metrics import BUCKETS, highest
from narad.resp import Verbatim

if TYPE_CHECKING:
    from narad.metrics import Histogram
    from narad.node import Session
    from narad.streams.stream import Stream

container("latency", "server", "A container for latency diagnostics commands.", "2.8.13")


@command("histogram", -2, "admin noscript loading stale", group="server", parent="latency",
         since="7.0.0")
def latency_histogram(session: Session, args: list[bytes]) -> Any:
    """Returns the cumulative distribution of latencies of a subset or all commands."""
    wanted = {a.lower().decode(errors="replace") for a in args[2:]}
    out: dict[bytes, Any] = {}
    for cmd in sorted(all_commands(), key=lambda c: c.name):
        histogram = cmd.latency
        if histogram is None or not histogram.total or (wanted and cmd.name not in wanted):
            continue
        out[cmd.name.encode()] = {b"calls": cmd.calls, b"histogram_usec": _usec_cdf(histogram)}
    return out


def _usec_cdf(histogram: Histogram) -> dict[int, int]:
    """Cumulative counts at bounds of 1024 ns doubling, keyed by bound // 1000, where
    the count grows (Redis's hdr_iter_log from 1024 ns, base 2)."""
    out: dict[int, int] = {}
    counts = histogram.counts
    seen = previous = 0
    index = 0
    bound = 1024
    while seen < histogram.total:
        while index < BUCKETS and highest(index) < bound:
            seen += counts[index]
            index += 1
        if index >= BUCKETS:
            seen = histogram.total
        if seen > previous:
            out[(bound - 1) // 1000 or 1] = seen
            previous = seen
        bound <<= 1
    return out


@command("latest", 2, "admin noscript loading stale", group="server", parent="latency",
         since="2.8.13")
def latency_latest(session: Session, args: list[bytes]) -> Any:
    """Returns the latest latency samples for all events (none: no latency monitor)."""
    return []


@command("history", 3, "admin noscript loading stale", group="server", parent="latency",
         since="2.8.13")
def latency_history(session: Session, args: list[bytes]) -> Any:
    """Returns timestamp-latency samples for an event (none: no latency monitor)."""
    return []


@command("reset", -2, "admin noscript loading stale", group="server", parent="latency",
         since="2.8.13")
def latency_reset(session: Session, args: list[bytes]) -> Any:
    """Resets the latency data for one or more events (there is none: 0)."""
    return 0


@command("graph", 3, "admin noscript loading stale", group="server", parent="latency",
         since="2.8.13")
def latency_graph(session: Session, args: list[bytes]) -> Any:
    """Returns a latency graph for an event (none: no latency monitor)."""
    event = args[2].decode(errors="replace")
    raise CommandError(f"No samples available for event '{event}'")


@command("doctor", 2, "admin noscript loading stale", group="server", parent="latency",
         since="2.8.13")
def latency_doctor(session: Session, args: list[bytes]) -> Any:
    """Returns a human-readable latency analysis report."""
    return Verbatim(
        "Narad has no latency monitor (latency-monitor-threshold events), so there is "
        "nothing to analyze here. Per-command latency: INFO latencystats and LATENCY "
        "HISTOGRAM; the event loop's lag, fsync and checkpoint durations: /metrics on "
        "the metrics port (docs/operations.md).\n",
    )


@command("help", 2, "loading stale", group="server", parent="latency", since="2.8.13")
def latency_help(session: Session, args: list[bytes]) -> Any:
    """Returns helpful text about the different subcommands."""
    return help_reply([
        "LATENCY <subcommand> [<arg> ...]. Subcommands are:",
        "HISTOGRAM [<command> ...]",
        "    Per command: its calls, and how many took at most 1, 2, 4, ... microseconds",
        "    (every command that ran when none is named).",
        "LATEST",
        "    Latency monitor events: none (Narad has no latency monitor).",
        "HISTORY <event>",
        "    An event's samples: none.",
        "RESET [<event> ...]",
        "    Clear events: there are none (replies 0).",
        "GRAPH <event>",
        "    An event's graph: there are no samples.",
        "DOCTOR",
        "    Where Narad's latency figures are.",
        "HELP",
        "    This text.",
    ])


container("memory", "server", "A container for memory diagnostics commands.", "4.0.0")


@command("usage", -3, "readonly", (2, 2, 1), group="server", parent="memory", since="4.0.0",
         complexity="O(N) where N is the number of samples.")
def memory_usage(session: Session, args: list[bytes]) -> Any:
    """Estimates the memory usage of a key."""
    if len(args) not in (3, 5):
        raise syntax()
    if len(args) == 5:
        if args[3].lower() != b"samples":
            raise syntax()
        if parse_int(args[4]) < 0:
            raise syntax()
    stream = session.node.keyspace.get(session.db, args[2])
    return None if stream is None else memory_bytes(stream)


# Sizes of one element of the structures a key holds, about (CPython 3.11, 64-bit):
# a dict slot with its int key and value, a PendingEntry with its PEL slot and the
# consumer's set slot, a set slot with its int.
_DICT_ITEM_BYTES = 100
_PENDING_BYTES = 200
_SET_ITEM_BYTES = 60


def memory_bytes(stream: Stream) -> int:
    """About what `stream` costs in memory (module doc)."""
    total = sys.getsizeof(stream) + len(stream.key) + 1000  # its objects and logs
    total += stream.data.memory_bytes() + stream.state.memory_bytes()
    total += len(stream.deleted) * _SET_ITEM_BYTES
    for group in stream.groups.values():
        total += 500 + len(group.name) + len(group.pel) * _PENDING_BYTES
        total += sum(200 + len(c.name) for c in group.consumers.values())
    queue = stream.queue
    if queue is not None:
        total += len(queue.tracked) * _DICT_ITEM_BYTES
        total += (len(queue.ready) + len(queue.timers)) * 40
        total += sum(len(k) + _DICT_ITEM_BYTES for k in queue.dedup)
    return total


@command("doctor", 2, "", group="server", parent="memory", since="4.0.0")
def memory_doctor(session: Session, args: list[bytes]) -> Any:
    """Outputs a memory problems report."""
    return Verbatim(
        "Narad keeps entries on disk; memory holds indexes, write buffers, consumer "
        "groups and queue state. INFO memory shows the process's memory; MEMORY USAGE "
        "<key> what one key costs.\n",
    )


@command("help", 2, "loading stale", group="server", parent="memory", since="4.0.0")
def memory_help(session: Session, args: list[bytes]) -> Any:
    """Returns helpful text about the different subcommands."""
    return help_reply([
        "MEMORY <subcommand> [<arg> ...]. Subcommands are:",
        "USAGE <key> [SAMPLES <count>]",
        "    About how many bytes of memory the key costs (its entries are on disk).",
        "DOCTOR",
        "    What Narad keeps in memory, and where to look.",
        "HELP",
        "    This text.",
    ])
