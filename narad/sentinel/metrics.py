"""A sentinel's /metrics: what it knows of each monitored group, from memory.

Per group (label `group`): the leader it names (`narad_sentinel_leader_info`, its
address in a label), the group's configuration epoch, whether this sentinel sees the
leader subjectively down (`s_down`) and the group objectively down (`o_down`),
whether a failover runs, the replicas and other sentinels it knows (and how many of
each it sees down), the failovers it ran by outcome, and when the last one ended and
when it last switched the group's leader. Node-wide: the sentinel's current epoch,
its client connections, and the library's process metrics.

Served on the sentinel's `metrics-port` (narad/sentinel/serve.py) by
narad/metrics_http.py on the sentinel's event loop; docs/operations.md lists every
family.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, ProcessCollector
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import Collector

from narad.metrics_http import Request, Response, text

if TYPE_CHECKING:
    from narad.sentinel.sentinel import Sentinel


class SentinelCollector(Collector):
    def __init__(self, sentinel: Sentinel) -> None:
        self.sentinel = sentinel

    def collect(self) -> Iterator[Metric]:
        sentinel = self.sentinel
        yield GaugeMetricFamily(
            "narad_sentinel_current_epoch", "The newest epoch this sentinel knows.",
            value=sentinel.config.current_epoch,
        )
        yield GaugeMetricFamily(
            "narad_sentinel_connected_clients", "Client connections open.",
            value=len(sentinel.connections),
        )
        groups = ["group"]
        leader = GaugeMetricFamily(
            "narad_sentinel_leader_info", "1, with the leader's address this sentinel names.",
            labels=["group", "address"],
        )
        epoch = GaugeMetricFamily(
            "narad_sentinel_epoch", "The group's configuration epoch: that of its last failover.",
            labels=groups,
        )
        s_down = GaugeMetricFamily(
            "narad_sentinel_leader_s_down", "1 while this sentinel sees the leader down.",
            labels=groups,
        )
        o_down = GaugeMetricFamily(
            "narad_sentinel_leader_o_down", "1 while a quorum of sentinels sees the leader down.",
            labels=groups,
        )
        running = GaugeMetricFamily(
            "narad_sentinel_failover_running", "1 while this sentinel runs a failover.",
            labels=groups,
        )
        replicas = GaugeMetricFamily(
            "narad_sentinel_known_replicas", "Replicas this sentinel knows of.", labels=groups
        )
        replicas_down = GaugeMetricFamily(
            "narad_sentinel_replicas_s_down", "Known replicas this sentinel sees down.",
            labels=groups,
        )
        sentinels = GaugeMetricFamily(
            "narad_sentinel_known_sentinels", "Other sentinels watching the group.", labels=groups
        )
        failovers = CounterMetricFamily(
            "narad_sentinel_failovers",
            "Failovers this sentinel ran, by outcome (end, end-for-timeout, abort-...).",
            labels=["group", "outcome"],
        )
        last_failover = GaugeMetricFamily(
            "narad_sentinel_last_failover_timestamp_seconds",
            "When the last failover this sentinel ran ended (0: none since it started).",
            labels=groups,
        )
        switches = CounterMetricFamily(
            "narad_sentinel_leader_switches",
            "Leader changes this sentinel applied: its own failovers' and others'.",
            labels=groups,
        )
        last_switch = GaugeMetricFamily(
            "narad_sentinel_last_switch_timestamp_seconds",
            "When this sentinel last changed the group's leader (0: not since it started).",
            labels=groups,
        )
        for group in sentinel.groups.values():
            name = [group.name]
            node = group.leader
            leader.add_metric([group.name, group.leader_address], 1)
            epoch.add_metric(name, group.config.config_epoch)
            s_down.add_metric(name, int(node is not None and bool(node.sdown_since_s)))
            o_down.add_metric(name, int(bool(group.odown_since_s)))
            running.add_metric(name, int(group.failover is not None))
            known = group.replicas()
            replicas.add_metric(name, len(known))
            replicas_down.add_metric(name, sum(1 for r in known if r.sdown_since_s))
            sentinels.add_metric(name, len(group.peers))
            for outcome in sorted({"end", *group.failovers}):
                failovers.add_metric([group.name, outcome], group.failovers.get(outcome, 0))
            last_failover.add_metric(name, group.last_failover_end)
            switches.add_metric(name, group.leader_switches)
            last_switch.add_metric(name, group.last_switch)
        yield from (leader, epoch, s_down, o_down, running, replicas, replicas_down, sentinels,
                    failovers, last_failover, switches, last_switch)


class SentinelSite:
    """The sentinel's metrics port: GET /metrics, nothing else."""

    def __init__(self, sentinel: Sentinel) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(SentinelCollector(sentinel))
        ProcessCollector(registry=self.registry)

    def __call__(self, request: Request) -> Response:
        if request.path != "/metrics":
            return text(404, f"no page at {request.path}: try /metrics")
        encoder, content_type = choose_encoder(request.headers.get("accept", ""))
        return Response(200, encoder(self.registry), content_type)


def metrics_port(port: int, tls_port: int, asked: int) -> int:
    """The port `metrics-port` names (`asked`, -1 for auto: port + 2000, or
    tls-port + 2000 when port is 0; off when that passes 65535)."""
    if asked >= 0:
        return asked
    base = port or tls_port
    return base + 2000 if base and base + 2000 <= 65535 else 0
