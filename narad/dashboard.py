"""The dashboard: a page served at `/` on the metrics port, and the JSON it polls.

The page (narad/dashboard.html: HTML, CSS and a compact SVG chart script in one file,
no build step, nothing fetched from elsewhere, so it works on a node with no internet)
arrives with the node's state embedded, and then asks `/api/state` every two
seconds. It keeps the last five minutes of samples in the browser and draws rates
(commands, pushes, acks), the journal's mean fsync time and each replica's lag from
the differences between samples; the node keeps nothing for it. Read-only.

`/api/state` is built from what /metrics reads (narad/collectors.py: the same kept
per-queue figures, memory only). Queue and stream names are text (UTF-8, bytes that
are not shown as \\xHH escapes); the page escapes everything it shows.
"""

from __future__ import annotations

import json
import time
from importlib import resources
from typing import TYPE_CHECKING, Any

import narad
from narad.collectors import KeyFamilies, group_lag

if TYPE_CHECKING:
    from narad.node import Node

REFRESH_MS = 2000


def text(key: bytes) -> str:
    return key.decode("utf-8", "backslashreplace")


def state(node: Node, keys: KeyFamilies) -> dict[str, Any]:
    """The node's state as the page shows it (module doc)."""
    journal = node.keyspace.journal
    replication = node.replication
    follower = replication.follower
    now = time.monotonic()
    queues = _queues(node, keys)
    return {
        "time_ms": int(time.time() * 1000),
        "refresh_ms": REFRESH_MS,
        "node": {
            "version": narad.__version__,
            "port": node.tcp_port,
            "role": "replica" if follower is not None else "leader",
            "leader": f"{follower.host}:{follower.port}" if follower is not None else "",
            "link_up": follower is not None and follower.state == "connected",
            "epoch": journal.epoch,
            "fenced": replication.fenced,
            "offset": journal.position,
            "fsync": node.keyspace.policy.value,
            "uptime_s": int(time.time() - node.stats.started_s),
            "clients": len(node.sessions),
            "commands": node.stats.commands_processed,
        },
        "fsync": {
            "count": journal.stats.fsync_ns.total,
            "sum_s": journal.stats.fsync_ns.sum / 1e9,
        },
        "replicas": [
            {
                "name": link.name,
                "offset": link.acked,
                "lag_bytes": max(0, journal.position - link.acked),
                "lag_s": round(max(0.0, now - link.last_ack_s), 3),
            }
            for link in replication.leader.links.values()
        ],
        "sentinels": _sentinels(node),
        "queues": queues,
        "streams": _streams(node),
    }


def _queues(node: Node, keys: KeyFamilies) -> list[dict[str, Any]]:
    all_queues = list(node.queues.queues())
    figures = keys.queues(all_queues)
    unacked: dict[tuple[int, bytes], int] = {}  # (db, name) -> messages not acked
    for queue, (kept, _) in zip(all_queues, figures, strict=True):
        f = kept.figures
        unacked[(queue.stream.db, queue.stream.key)] = f.visible + f.inflight + f.delayed
    out = []
    for queue, (kept, age_s) in zip(all_queues, figures, strict=True):
        f = kept.figures
        stream = queue.stream
        dlq = queue.settings.dlq
        out.append({
            "db": stream.db,
            "name": text(stream.key),
            "visible": f.visible,
            "inflight": f.inflight,
            "delayed": f.delayed,
            "oldest_age_s": age_s,
            "dlq": text(dlq),
            "dlq_depth": unacked.get((stream.db, dlq), 0) if dlq else 0,
            "pushed": f.pushed,
            "delivered": f.delivered,
            "acked": f.acked,
            "dead_lettered": f.dead_lettered + f.dropped,
            "consumers": f.consumers,
        })
    out.sort(key=lambda q: (q["db"], q["name"]))
    return out


def _streams(node: Node) -> list[dict[str, Any]]:
    out = []
    for stream in node.keyspace.streams.values():
        if stream.queue is not None or stream.fault is not None:
            continue
        out.append({
            "db": stream.db,
            "name": text(stream.key),
            "length": stream.length,
            "entries_added": stream.entries_added,
            "groups": [
                {
                    "name": text(group.name),
                    "lag": group_lag(stream, group),
                    "pending": len(group.pel),
                    "consumers": len(group.consumers),
                }
                for group in stream.groups.values()
            ],
        })
    out.sort(key=lambda s: (s["db"], s["name"]))
    return out


def _sentinels(node: Node) -> list[dict[str, str]]:
    """The sentinels connected to this node, by the client name their links carry
    (`sentinel:<id>:<port>:<ip>`, narad/sentinel/sentinel.py's hello_name)."""
    seen: dict[str, dict[str, str]] = {}
    for session in node.sessions.values():
        parts = session.name.split(":")
        if len(parts) == 4 and parts[0] == "sentinel":
            seen[parts[1]] = {"id": parts[1], "address": f"{parts[3]}:{parts[2]}"}
    return sorted(seen.values(), key=lambda s: s["address"])


def state_json(node: Node, keys: KeyFamilies) -> bytes:
    return json.dumps(state(node, keys), separators=(",", ":")).encode()


def page(node: Node, keys: KeyFamilies) -> bytes:
    """The page, with the state embedded so that it shows at once."""
    template = resources.files("narad").joinpath("dashboard.html").read_text()
    embedded = json.dumps(state(node, keys), separators=(",", ":")).replace("<", "\\u003c")
    return template.replace("/*STATE*/null", embedded, 1).encode()
