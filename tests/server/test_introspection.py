"""What tools that watch Redis ask a node (redis_exporter among them): INFO queues,
INFO's persistence and replication fields, LATENCY, MEMORY USAGE, SLOWLOG and XINFO on
queues; real server processes, real redis-py."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from tests.servers import NaradProcess


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NaradProcess]:
    server = NaradProcess(tmp_path_factory.mktemp("introspection"))
    server.start()
    yield server
    server.stop()


def test_info_queues_has_one_line_per_queue(node: NaradProcess) -> None:
    r = node.client()
    r.execute_command("Q.CREATE", "iq-dlq")
    r.execute_command("Q.CREATE", "iq", "MAXRECEIVES", 1, "DLQ", "iq-dlq")
    r.execute_command("Q.PUSH", "iq", "a", "b", "c")
    r.execute_command("Q.PUSH", "iq", "DELAY", 600_000, "later")
    popped = r.execute_command("Q.POP", "iq", "COUNT", 2)
    r.execute_command("Q.NACK", "iq", _receipt(popped[1]))  # dead-lettered at once
    r.execute_command("Q.CREATE", "iq:odd,name=x")
    info = r.info("queues")
    assert info["queue.iq"] == {
        "db": 0, "visible": 1, "inflight": 1, "delayed": 1,
        "oldest_age_ms": info["queue.iq"]["oldest_age_ms"], "dlq": 1, "consumers": 0,
    }
    assert info["queue.iq"]["oldest_age_ms"] >= 0
    assert info["queue.iq-dlq"]["visible"] == 1
    assert info["queue.iq\\x3aodd\\x2cname\\x3dx"]["visible"] == 0


def test_info_queues_is_in_all_and_everything_not_the_default(node: NaradProcess) -> None:
    r = node.client()
    r.execute_command("Q.CREATE", "iq-sections")
    assert "queue.iq-sections" not in r.info()
    assert "queue.iq-sections" not in r.info("default")
    assert "queue.iq-sections" in r.info("all")
    assert "queue.iq-sections" in r.info("everything")
    assert "queue.iq-sections" in r.execute_command("INFO", "default", "queues")


def test_info_fields_redis_exporter_reads(node: NaradProcess) -> None:
    info = node.client().info("all")
    for field in (
        "rdb_last_bgsave_time_sec", "aof_last_rewrite_time_sec", "aof_last_bgrewrite_status",
        "aof_enabled", "rdb_last_save_time", "loading", "role", "connected_slaves",
        "master_repl_offset", "repl_backlog_size", "uptime_in_seconds", "connected_clients",
        "used_memory", "total_commands_processed", "instantaneous_ops_per_sec",
    ):
        assert field in info, field
    assert info["rdb_last_bgsave_time_sec"] == -1


def test_latency_histogram(node: NaradProcess) -> None:
    r = node.client()
    for i in range(20):
        r.xadd("lh", {"n": i})
    both = r.execute_command("LATENCY", "HISTOGRAM", "xadd", "q.create")
    hist = _pairs(both)
    xadd = _pairs(hist[b"xadd"])
    assert xadd[b"calls"] >= 20
    buckets = list(_pairs(xadd[b"histogram_usec"]).items())
    bounds = [b for b, _ in buckets]
    counts = [c for _, c in buckets]
    assert bounds == sorted(bounds) and counts == sorted(counts)
    assert counts[-1] == xadd[b"calls"]
    assert set(hist) <= {b"xadd", b"q.create"}
    everything = _pairs(r.execute_command("LATENCY", "HISTOGRAM"))
    assert b"xadd" in everything and b"latency|histogram" in everything
    resp3 = node.client(protocol=3).execute_command("LATENCY", "HISTOGRAM", "xadd")
    assert isinstance(resp3, dict) and resp3[b"xadd"][b"calls"] >= 20


def test_latency_monitor_commands(node: NaradProcess) -> None:
    r = node.client()
    assert r.execute_command("LATENCY", "LATEST") == []
    assert r.execute_command("LATENCY", "HISTORY", "command") == []
    assert r.execute_command("LATENCY", "RESET") == 0
    with pytest.raises(redis.ResponseError, match="No samples available for event 'command'"):
        r.execute_command("LATENCY", "GRAPH", "command")
    assert b"no latency monitor" in r.execute_command("LATENCY", "DOCTOR")
    assert r.execute_command("LATENCY", "HELP")[0].startswith(b"LATENCY")
    with pytest.raises(redis.ResponseError, match="unknown subcommand"):
        r.execute_command("LATENCY", "NOPE")


def test_memory_usage(node: NaradProcess) -> None:
    r = node.client()
    r.execute_command("Q.CREATE", "mu-small")
    r.execute_command("Q.CREATE", "mu-big")
    r.execute_command("Q.PUSH", "mu-big", *[f"m{i}" for i in range(2000)])
    r.execute_command("Q.POP", "mu-big", "COUNT", 2000)
    small = r.memory_usage("mu-small")
    big = r.memory_usage("mu-big")
    assert 0 < small < big
    assert big - small >= 2000 * 50  # the in-flight messages it tracks
    r.xadd("mu-stream", {"f": "v"})
    assert r.memory_usage("mu-stream", samples=0) > 0
    assert r.memory_usage("mu-missing") is None
    with pytest.raises(redis.ResponseError, match="syntax error"):
        r.execute_command("MEMORY", "USAGE", "mu-small", "SAMPLES")
    with pytest.raises(redis.ResponseError, match="syntax error"):
        r.execute_command("MEMORY", "USAGE", "mu-small", "COUNT", "5")
    assert r.execute_command("COMMAND GETKEYS", "MEMORY", "USAGE", "mu-small") == ["mu-small"]


def test_slowlog_entries_as_redis_exporter_reads_them(node: NaradProcess) -> None:
    r = node.client()
    r.config_set("slowlog-log-slower-than", 0)
    try:
        r.client_setname("watcher")
        r.xadd("sl", {"f": "v"})
        entries = r.execute_command("SLOWLOG", "GET", "5")
    finally:
        r.config_set("slowlog-log-slower-than", 10000)
    assert entries and all(len(e) == 6 for e in entries)
    assert r.execute_command("SLOWLOG", "LEN") >= 1


def test_xinfo_on_a_queue(node: NaradProcess) -> None:
    r = node.client()
    r.execute_command("Q.CREATE", "xq")
    r.execute_command("Q.PUSH", "xq", "a", "b")
    stream = r.xinfo_stream("xq")
    assert stream["length"] == 2 and stream["entries-added"] == 2
    r.xgroup_create("xq", "g", id="0")
    r.xreadgroup("g", "c", {"xq": ">"}, count=1)
    groups = r.xinfo_groups("xq")
    assert groups[0]["name"] == b"g" and groups[0]["pending"] == 1 and groups[0]["lag"] == 1
    assert r.xinfo_consumers("xq", "g")[0]["pending"] == 1


def _receipt(message: object) -> bytes:
    fields = _pairs(message)
    return fields[b"receipt"]  # type: ignore[no-any-return]


def _pairs(reply: object) -> dict[bytes, object]:
    if isinstance(reply, dict):
        return reply
    assert isinstance(reply, list)
    return dict(zip(reply[::2], reply[1::2], strict=True))
