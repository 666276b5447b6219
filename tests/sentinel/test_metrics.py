"""A sentinel's /metrics: real sentinels watching real nodes, scraped over HTTP and
read by prometheus_client's parser."""

from __future__ import annotations

import urllib.error
import urllib.request
from pathlib import Path

from tests.sentinel.cluster import NAME, SentinelProcess, deployment
from tests.server.metering import Samples, samples, value
from tests.servers import wait_until


def scrape(sentinel: SentinelProcess) -> Samples:
    url = f"http://{sentinel.host}:{sentinel.metrics_port}/metrics"
    with urllib.request.urlopen(url, timeout=30) as response:
        return samples(response.read().decode())


def test_a_group_as_each_sentinel_sees_it(tmp_path: Path) -> None:
    with deployment(tmp_path, sentinel_metrics=True) as found:
        leader, replicas = found.nodes[0], found.nodes[1:]
        address = f"{leader.host}:{leader.port}"
        for sentinel in found.sentinels:
            m = scrape(sentinel)
            assert value(m, "narad_sentinel_leader_info", group=NAME, address=address) == 1
            assert value(m, "narad_sentinel_known_replicas", group=NAME) == 2
            assert value(m, "narad_sentinel_known_sentinels", group=NAME) == 2
            assert value(m, "narad_sentinel_leader_s_down", group=NAME) == 0
            assert value(m, "narad_sentinel_leader_o_down", group=NAME) == 0
            assert value(m, "narad_sentinel_failovers_total", group=NAME, outcome="end") == 0
            assert value(m, "narad_sentinel_last_failover_timestamp_seconds", group=NAME) == 0
            assert value(m, "process_resident_memory_bytes") > 0

        replicas[1].kill()  # seen down after down-after-milliseconds (1 s)
        first = found.sentinels[0]
        wait_until(lambda: value(scrape(first), "narad_sentinel_replicas_s_down", group=NAME) == 1)

        client = first.client(protocol=2)
        assert client.execute_command("SENTINEL", "FAILOVER", NAME) == b"OK"
        new = f"{replicas[0].host}:{replicas[0].port}"
        wait_until(
            lambda: value(scrape(first), "narad_sentinel_failovers_total", group=NAME,
                          outcome="end") == 1,
            timeout=30,
        )
        m = scrape(first)
        assert value(m, "narad_sentinel_leader_info", group=NAME, address=new) == 1
        assert ("narad_sentinel_leader_info", (("address", address), ("group", NAME))) not in m
        assert value(m, "narad_sentinel_leader_switches_total", group=NAME) == 1
        assert value(m, "narad_sentinel_last_failover_timestamp_seconds", group=NAME) > 0
        assert value(m, "narad_sentinel_epoch", group=NAME) >= 1
        assert value(m, "narad_sentinel_failover_running", group=NAME) == 0
        # The others learn of the new leader and count the switch, not a failover.
        other = found.sentinels[1]
        wait_until(lambda: ("narad_sentinel_leader_info",
                            (("address", new), ("group", NAME))) in scrape(other), timeout=30)
        assert value(scrape(other), "narad_sentinel_failovers_total", group=NAME,
                     outcome="end") == 0


def test_unknown_path_and_openmetrics(tmp_path: Path) -> None:
    with deployment(tmp_path, replicas=1, sentinels=1, sentinel_metrics=True) as found:
        sentinel = found.sentinels[0]
        base = f"http://{sentinel.host}:{sentinel.metrics_port}"
        try:
            urllib.request.urlopen(base + "/nope", timeout=30)
            raise AssertionError("404 expected")
        except urllib.error.HTTPError as exc:
            assert exc.code == 404
        request = urllib.request.Request(
            base + "/metrics", headers={"Accept": "application/openmetrics-text; version=1.0.0"}
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            assert response.headers["Content-Type"].startswith("application/openmetrics-text")
            assert response.read().endswith(b"# EOF\n")
