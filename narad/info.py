"""INFO: Redis's sections and field names, plus a `narad` section.

Field meanings follow Redis where the field exists there, and every field is measured
as Redis measures it (rates and latency percentiles: narad/metrics.py) or states what
is so in Narad (no replicas, no expiry, no pub/sub: their counts are 0); a Redis
field Narad cannot measure is left out, not faked (docs/info.md lists the fields).
Settings are shown as in effect, never as merely asked for. Durability fields use the
contract words of docs/durability.md: under `fsync always` an acked write is durable;
under `everysec` and `no` it is only appended (aof_* fields say which policy runs).
"""

from __future__ import annotations

import asyncio
import os
import resource
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import narad
from narad.commands.handshake import REDIS_VERSION
from narad.commands.table import all_commands
from narad.config.numbers import format_percentile

if TYPE_CHECKING:
    from narad.node import Node
    from narad.queues.queue import Queue

DEFAULT_SECTIONS = (
    "server",
    "clients",
    "memory",
    "persistence",
    "stats",
    "replication",
    "cpu",
    "modules",
    "errorstats",
    "cluster",
    "keyspace",
    "narad",
)
# INFO ALL / EVERYTHING: Redis's order (commandstats and latencystats among the
# defaults), then Narad's own sections. `queues` (one line per queue) is left out of
# the default, as Redis leaves out the sections that grow with what the node holds
# (commandstats, latencystats), and is in ALL and EVERYTHING, as those are.
ALL_SECTIONS = (
    "server", "clients", "memory", "persistence", "stats", "replication", "cpu", "modules",
    "commandstats", "errorstats", "latencystats", "cluster", "keyspace", "narad", "queues",
)


def render(node: Node, wanted: list[str]) -> str:
    names = [w.lower() for w in wanted] or ["default"]
    chosen: list[str] = []
    for name in names:
        if name == "default":
            chosen += DEFAULT_SECTIONS
        elif name in ("all", "everything"):
            chosen += ALL_SECTIONS
        else:
            chosen.append(name)
    parts = []
    for name in dict.fromkeys(chosen):
        fields = SECTIONS.get(name)
        if fields is None:
            continue
        lines = [f"{k}:{v}" for k, v in fields(node)]
        title = "CPU" if name == "cpu" else name.capitalize()
        parts.append(f"# {title}\r\n" + "".join(line + "\r\n" for line in lines))
    return "\r\n".join(parts)


Fields = list[tuple[str, object]]


def _server(s: Node) -> Fields:
    import platform  # ~1.5 ms to import: left out of the server's start

    now = time.time()
    uptime = int(now - s.stats.started_s)
    return [
        ("redis_version", REDIS_VERSION),
        ("narad_version", narad.__version__),
        ("redis_git_sha1", "00000000"),
        ("redis_git_dirty", 0),
        ("redis_build_id", "0"),
        ("redis_mode", "standalone"),
        ("os", f"{platform.system()} {platform.release()} {platform.machine()}"),
        ("arch_bits", 64 if sys.maxsize > 2**32 else 32),
        ("monotonic_clock", "POSIX clock_gettime"),
        ("multiplexing_api", _multiplexing_api(s)),
        ("python_version", platform.python_version()),
        ("process_id", os.getpid()),
        ("process_supervised", "no"),
        ("run_id", s.run_id),
        ("tcp_port", s.tcp_port),
        ("server_time_usec", int(now * 1_000_000)),
        ("uptime_in_seconds", uptime),
        ("uptime_in_days", uptime // 86400),
        ("executable", os.path.abspath(sys.argv[0])),
        ("config_file", s.config.path or ""),
        ("io_threads_active", 0),
    ]


def _multiplexing_api(s: Node) -> str:
    """What the event loop waits with: asyncio's selector, or libuv's (uvloop), which
    is epoll on Linux and kqueue on the BSDs."""
    selector = getattr(asyncio.get_running_loop(), "_selector", None)
    if selector is not None:
        return type(selector).__name__.removesuffix("Selector").lower()
    return "epoll" if sys.platform.startswith("linux") else "kqueue"


def _clients(s: Node) -> Fields:
    return [
        ("connected_clients", len(s.sessions)),
        ("cluster_connections", 0),
        ("maxclients", s.config["maxclients"]),
        ("blocked_clients", s.blocked_sessions),
        ("tracking_clients", 0),
        (
            "clients_in_timeout_table",
            sum(1 for c in s.sessions.values() if c.blocked and c.blocked.timeout_ms),
        ),
    ]


def _status_kb(field: str) -> int:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def _human(n: int) -> str:
    for unit in ("B", "K", "M", "G"):
        if n < 1024 or unit == "G":
            return f"{n:.2f}{unit}" if unit != "B" else f"{n}B"
        n /= 1024  # type: ignore[assignment]
    return str(n)


def _memory(s: Node) -> Fields:
    anon = _status_kb("RssAnon") * 1024
    rss = _status_kb("VmRSS") * 1024
    peak = _status_kb("VmHWM") * 1024
    return [
        ("used_memory", anon),
        ("used_memory_human", _human(anon)),
        ("used_memory_rss", rss),
        ("used_memory_rss_human", _human(rss)),
        ("used_memory_peak", peak),
        ("used_memory_peak_human", _human(peak)),
        ("maxmemory", 0),
        ("maxmemory_human", "0B"),
        ("maxmemory_policy", "noeviction"),
        ("mem_allocator", "libc"),
    ]


def _persistence(s: Node) -> Fields:
    policy = s.keyspace.policy.value
    write_error = s.keyspace.journal.write_error  # the write error state, if in it
    failed = write_error is not None or any(
        stream.data.failure or stream.state.failure
        for db in s.keyspace.dbs
        for stream in db.values()
    )
    fields: Fields = [
        ("loading", 0),
        ("async_loading", 0),
        ("rdb_changes_since_last_save", 0),
        ("rdb_bgsave_in_progress", 0),
        ("rdb_last_save_time", s.keyspace.last_commit_s),
        ("rdb_last_bgsave_status", "ok"),
        ("aof_enabled", 1),
        ("aof_rewrite_in_progress", 0),
        ("aof_rewrite_scheduled", 0),
        ("aof_last_write_status", "err" if failed else "ok"),
        # Narad never rewrites nor snapshots (the log is the data): what Redis shows
        # for a node that never did, for tools that read them (redis_exporter).
        ("rdb_last_bgsave_time_sec", -1),
        ("rdb_current_bgsave_time_sec", -1),
        ("aof_last_rewrite_time_sec", -1),
        ("aof_current_rewrite_time_sec", -1),
        ("aof_last_bgrewrite_status", "ok"),
        ("aof_fsync_policy", policy),
        ("acked_writes_are", "durable" if policy == "always" else "appended"),
        ("load_time_seconds", f"{s.keyspace.loaded_s:.3f}"),
    ]
    if write_error is not None:  # writes are refused (MISCONF) until one succeeds
        fields.append(("narad_write_error", " ".join(write_error.split())))
    return fields


def _stats(s: Node) -> Fields:
    st = s.stats
    return [
        ("total_connections_received", st.connections_received),
        ("total_commands_processed", st.commands_processed),
        ("instantaneous_ops_per_sec", int(st.ops_rate.per_second)),
        ("total_net_input_bytes", st.net_input_bytes),
        ("total_net_output_bytes", st.net_output_bytes),
        ("instantaneous_input_kbps", f"{st.input_rate.per_second / 1024:.2f}"),
        ("instantaneous_output_kbps", f"{st.output_rate.per_second / 1024:.2f}"),
        ("rejected_connections", st.rejected_connections),
        ("expired_keys", 0),
        ("evicted_keys", 0),
        ("pubsub_channels", 0),
        ("pubsub_patterns", 0),
        ("total_error_replies", st.error_replies),
        ("total_reads_processed", st.reads_processed),
        ("total_writes_processed", st.writes_processed),
    ]


def _replication(s: Node) -> Fields:
    """Redis's fields, the journal position as the offset (docs/replication.md)."""
    config = s.config
    journal = s.keyspace.journal
    replication = s.replication
    follower = replication.follower
    fields: Fields = []
    if follower is not None:
        up = follower.state == "connected"
        now = time.monotonic()
        fields += [
            ("role", "slave"),
            ("master_host", follower.host),
            ("master_port", follower.port),
            ("master_link_status", "up" if up else "down"),
            ("master_last_io_seconds_ago", int(now - follower.last_io_s) if up else -1),
            ("master_sync_in_progress", int(follower.state == "sync")),
        ]
        copy = follower.copy
        if copy is not None:
            total, read = copy.bytes_total, copy.bytes_received
            fields += [
                ("master_sync_total_bytes", total),
                ("master_sync_read_bytes", read),
                ("master_sync_left_bytes", max(total - read, 0)),
                ("master_sync_perc", f"{100 * read / total if total else 0:.2f}"),
                ("master_sync_last_io_seconds_ago", int(now - follower.last_io_s)),
            ]
        fields += [
            ("slave_read_repl_offset", journal.position),
            ("slave_repl_offset", journal.position),
        ]
        if not up:
            fields.append(("master_link_down_since_seconds", int(now - follower.down_since_s)))
        if follower.refused:  # stopped following: what the leader sent cannot be read
            fields.append(("narad_leader_refused", " ".join(follower.refused.split())))
        fields += [
            ("slave_priority", config["replica-priority"]),
            ("slave_read_only", 1),
            ("replica_announced", 1),
        ]
    else:
        fields.append(("role", "master"))
    links = list(replication.leader.links.values())
    fields.append(("connected_slaves", len(links)))
    if follower is None:
        need = replication.leader.quorum
        if need:
            fields.append(("min_slaves_good_slaves", replication.leader.good_replicas()))
    now = time.monotonic()
    for i, link in enumerate(links):
        lag = int(now - link.last_ack_s)
        state = "online" if link.copy is None else "send_bulk"
        fields.append(
            (
                f"slave{i}",
                f"ip={link.ip},port={link.port},state={state},offset={link.acked},lag={lag}",
            )
        )
    first = journal.log.start_offset
    fields += [
        ("master_failover_state", "waiting-for-sync" if replication.draining else "no-failover"),
        ("master_replid", journal.history),
        ("master_replid2", "0" * 40),
        ("master_repl_offset", journal.position),
        ("second_repl_offset", -1),
        ("repl_backlog_active", 1),
        ("repl_backlog_size", config["repl-backlog-size"]),
        ("repl_backlog_first_byte_offset", first),
        ("repl_backlog_histlen", journal.position - first),
        ("narad_epoch", journal.epoch),
        ("narad_promised_epoch", replication.promised),
        ("narad_fenced", int(replication.fenced)),
        ("narad_min_replicas_to_ack", config["min-replicas-to-ack"]),
        ("narad_quorum_offset", replication.leader.quorum_position() if follower is None else -1),
    ]
    return fields


def _cpu(s: Node) -> Fields:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return [
        ("used_cpu_sys", f"{usage.ru_stime:.6f}"),
        ("used_cpu_user", f"{usage.ru_utime:.6f}"),
    ]


def _errorstats(s: Node) -> Fields:
    return [(f"errorstat_{code}", f"count={n}") for code, n in sorted(s.stats.errors.items())]


def _keyspace(s: Node) -> Fields:
    counts = [len(s.keyspace.names(i)) for i in range(len(s.keyspace.dbs))]  # unavailable keys too
    return [(f"db{i}", f"keys={n},expires=0,avg_ttl=0") for i, n in enumerate(counts) if n]


def _commandstats(s: Node) -> Fields:
    out: Fields = []
    for cmd in sorted(all_commands(), key=lambda c: c.name):
        if not (cmd.calls or cmd.rejected or cmd.failed):
            continue
        per = cmd.usec / cmd.calls if cmd.calls else 0.0
        out.append(
            (
                f"cmdstat_{cmd.name}",
                f"calls={cmd.calls},usec={cmd.usec},usec_per_call={per:.2f},"
                f"rejected_calls={cmd.rejected},failed_calls={cmd.failed}",
            )
        )
    return out


def _latencystats(s: Node) -> Fields:
    """Per-command percentiles, as Redis 7.0 shows them (nothing while tracking is
    off); each value is in microseconds, with three decimals."""
    if not s.config["latency-tracking"]:
        return []
    percentiles = s.config["latency-tracking-info-percentiles"]
    assert isinstance(percentiles, tuple)
    out: Fields = []
    for cmd in sorted(all_commands(), key=lambda c: c.name):
        histogram = cmd.latency
        if histogram is None or not histogram.total:
            continue
        values = histogram.percentiles(percentiles)
        shown = ",".join(
            f"p{format_percentile(p)}={ns / 1000:.3f}"
            for p, ns in zip(percentiles, values, strict=True)
        )
        out.append((f"latency_percentiles_usec_{cmd.name}", shown))
    return out


def _narad(s: Node) -> Fields:
    journal = s.keyspace.journal
    gc = journal.stats
    cp = s.keyspace.checkpointer
    streams = [stream for db in s.keyspace.dbs for stream in db.values()]
    return [
        ("narad_version", narad.__version__),
        ("fsync", s.keyspace.policy.value),
        ("group_commits", gc.commits),
        ("group_commit_records", gc.records),
        ("fsyncs", gc.fsyncs),
        ("records_per_fsync", f"{gc.records / gc.fsyncs:.2f}" if gc.fsyncs else "0.00"),
        ("fsyncs_per_commit", f"{gc.fsyncs / gc.commits:.2f}" if gc.commits else "0.00"),
        ("journal_position", journal.position),
        ("journal_bytes", journal.log.size_bytes),
        ("journal_behind_bytes", journal.behind_bytes),
        ("checkpoint_position", cp.last.position),
        ("checkpoints", cp.stats.checkpoints),
        ("checkpoint_log_fsyncs", cp.stats.log_fsyncs),
        ("checkpoint_last_seconds", f"{cp.stats.last_s:.3f}"),
        ("streams", len(streams)),
        ("unavailable_keys", len(s.keyspace.unavailable)),
        ("checkpoints_held", int(s.keyspace.logs_unavailable())),
        ("log_bytes", sum(st.data.size_bytes + st.state.size_bytes for st in streams)),
        ("data_dir", str(s.keyspace.root)),
        *_queues(s),
    ]


def _queues(s: Node) -> Fields:
    """Queue totals (docs/queues.md): tracked = in flight, delayed or visible again."""
    queues = list(s.queues.queues())
    return [
        ("queues", len(queues)),
        ("queue_tracked_messages", sum(len(q.tracked) for q in queues)),
        ("queue_dedup_keys", sum(len(q.dedup) for q in queues)),
        ("queue_push_consumers", s.queues.consuming),
        ("queue_subscriptions", sum(len(q.subs) for q in queues)),
        ("queue_clock_frozen", int(s.queues.clock.frozen_ms is not None)),
        ("queue_clock_skew_ms", s.queues.clock.skew_ms()),
    ]


def _queue_lines(s: Node) -> Fields:
    r"""INFO queues: one line per queue, as keyspace has one per database:
    `queue.<name>:db=0,visible=..,inflight=..,delayed=..,oldest_age_ms=..,dlq=..,
    consumers=..`, in database then name order (the dot keeps the field names
    apart from every other section's, which have none). `dlq` counts the messages its
    dead-letter queue holds unacked (0 without one); `oldest_age_ms` is read from
    memory, as /metrics reads it (Queue.oldest_visible_id_ms). A name is shown with
    bytes outside printable ASCII, and `:`, `,`, `=` and `\`, as \xHH."""
    service = s.queues
    now_ms = service.clock.now_ms()
    held: dict[int, int] = {}  # id(queue) -> unacked messages, for DLQs met twice

    def unacked(queue: Queue) -> int:
        known = held.get(id(queue))
        if known is None:
            known = held[id(queue)] = sum(queue.counts().values())
        return known

    fields: Fields = []
    queues = sorted(service.queues(), key=lambda q: (q.stream.db, q.stream.key))
    waiters = s.keys.waiters
    for queue in queues:
        stream = queue.stream
        counts = queue.counts()
        id_ms = queue.oldest_visible_id_ms()
        age = 0 if id_ms is None else max(0, now_ms - id_ms)
        dlq = service.get(stream.db, queue.settings.dlq) if queue.settings.dlq else None
        waiting = len(waiters.get((stream.db, stream.key), ())) if waiters else 0
        fields.append((
            f"queue.{info_name(stream.key)}",
            f"db={stream.db},visible={counts['visible']},inflight={counts['in_flight']},"
            f"delayed={counts['delayed']},oldest_age_ms={age},"
            f"dlq={0 if dlq is None else unacked(dlq)},"
            f"consumers={len(queue.consumers) + waiting}",
        ))
    return fields


_INFO_SAFE = frozenset(range(0x21, 0x7F)) - frozenset(b":,=\\")


def info_name(key: bytes) -> str:
    """A key as INFO shows it in a field name (see `_queue_lines`)."""
    if all(b in _INFO_SAFE for b in key):
        return key.decode()
    return "".join(chr(b) if b in _INFO_SAFE else f"\\x{b:02x}" for b in key)


SECTIONS: dict[str, Callable[[Node], Fields]] = {
    "server": _server,
    "clients": _clients,
    "memory": _memory,
    "persistence": _persistence,
    "stats": _stats,
    "replication": _replication,
    "cpu": _cpu,
    "modules": lambda s: [],
    "errorstats": _errorstats,
    "cluster": lambda s: [("cluster_enabled", 0)],
    "keyspace": _keyspace,
    "commandstats": _commandstats,
    "latencystats": _latencystats,
    "narad": _narad,
    "queues": _queue_lines,
}
