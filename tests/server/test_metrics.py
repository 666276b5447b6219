"""/metrics on a node's metrics port: real server processes, real HTTP requests, the
scrape read by prometheus_client's own parsers (Prometheus text and OpenMetrics)."""

from __future__ import annotations

import socket
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from prometheus_client.openmetrics.parser import (
    text_string_to_metric_families as openmetrics_families,
)

from tests.replication.cluster import follow, wait_synced
from tests.server.metering import MeteredNarad, basic, samples, value
from tests.servers import NaradProcess, free_port, wait_until


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MeteredNarad]:
    server = MeteredNarad(tmp_path_factory.mktemp("metered"))
    server.start()
    yield server
    server.stop()


def _receipt(message: object) -> bytes:
    if isinstance(message, dict):
        return message[b"receipt"]  # type: ignore[no-any-return]
    assert isinstance(message, list)
    fields = dict(zip(message[::2], message[1::2], strict=True))
    return fields[b"receipt"]  # type: ignore[no-any-return]


def test_queue_figures_follow_real_work(node: MeteredNarad) -> None:
    r = node.client()
    r.execute_command("Q.CREATE", "mq-dlq")
    r.execute_command("Q.CREATE", "mq", "MAXRECEIVES", 2, "DLQ", "mq-dlq")
    r.execute_command("Q.PUSH", "mq", "a", "b", "c")
    r.execute_command("Q.PUSH", "mq", "DELAY", 3_600_000, "later")
    popped = r.execute_command("Q.POP", "mq", "COUNT", 2)
    receipts = [_receipt(m) for m in popped]
    assert r.execute_command("Q.ACK", "mq", receipts[0]) == 1
    r.execute_command("Q.NACK", "mq", receipts[1])  # b: visible again, received once
    again = r.execute_command("Q.POP", "mq")  # b again: its second receive
    second = _receipt(again[0])
    r.execute_command("Q.NACK", "mq", second)  # at MAXRECEIVES: dead-lettered
    r.execute_command("Q.CREATE", "mq-empty")
    assert r.execute_command("Q.POP", "mq-empty") == []

    m = node.scrape()
    q = {"db": "0", "queue": "mq"}
    assert value(m, "narad_queue_messages_pushed_total", **q) == 4
    assert value(m, "narad_queue_messages_delivered_total", **q) == 3
    assert value(m, "narad_queue_messages_acked_total", **q) == 1
    assert value(m, "narad_queue_messages_nacked_total", **q) == 1
    assert value(m, "narad_queue_messages_dead_lettered_total", **q, reason="maxreceives") == 1
    assert value(m, "narad_queue_messages_dead_lettered_total", **q, reason="dropped") == 0
    assert value(m, "narad_queue_messages_visible", **q) == 1  # c
    assert value(m, "narad_queue_messages_inflight", **q) == 0
    assert value(m, "narad_queue_messages_delayed", **q) == 1
    assert value(m, "narad_queue_oldest_message_age_seconds", **q) >= 0
    assert value(m, "narad_queue_messages_visible", db="0", queue="mq-dlq") == 1
    assert value(m, "narad_queue_receives_empty_total", db="0", queue="mq-empty") == 1
    assert value(m, "narad_queue_oldest_message_age_seconds", db="0", queue="mq-empty") == 0
    assert value(m, "narad_queues") >= 3


def test_an_expired_delivery_counts_as_redelivered(node: MeteredNarad) -> None:
    r = node.client()
    r.execute_command("Q.CREATE", "mq-vis")
    r.execute_command("Q.PUSH", "mq-vis", "x")
    r.execute_command("Q.POP", "mq-vis", "VISIBILITY", 0)
    q = {"db": "0", "queue": "mq-vis"}
    wait_until(lambda: value(node.scrape(), "narad_queue_messages_redelivered_total", **q) == 1)
    m = node.scrape()
    assert value(m, "narad_queue_messages_visible", **q) == 1
    assert value(m, "narad_queue_messages_inflight", **q) == 0


def test_push_consumers_are_counted(node: MeteredNarad) -> None:
    r = node.client()
    r.execute_command("Q.CREATE", "mq-push")
    consumer = node.client(protocol=3)
    consumer.execute_command("Q.CONSUME", "mq-push")
    q = {"db": "0", "queue": "mq-push"}
    assert value(node.scrape(), "narad_queue_consumers", **q) == 1
    consumer.close()
    wait_until(lambda: value(node.scrape(), "narad_queue_consumers", **q) == 0)


def test_stream_and_group_figures(node: MeteredNarad) -> None:
    r = node.client()
    for i in range(3):
        r.xadd("ms", {"n": i})
    r.xgroup_create("ms", "g", id="0")
    r.xreadgroup("g", "c1", {"ms": ">"}, count=2)
    m = node.scrape()
    s = {"db": "0", "stream": "ms"}
    assert value(m, "narad_stream_length", **s) == 3
    assert value(m, "narad_stream_entries_added_total", **s) == 3
    assert value(m, "narad_stream_group_lag", **s, group="g") == 1
    assert value(m, "narad_stream_group_messages_pending", **s, group="g") == 2
    assert value(m, "narad_stream_group_consumers", **s, group="g") == 1
    # No queue shows up among the streams.
    assert ("narad_stream_length", (("db", "0"), ("stream", "mq"))) not in m


def test_subscription_lag(node: MeteredNarad) -> None:
    r = node.client()
    r.execute_command("Q.CREATE", "mq-copy")
    r.xadd("msrc", {"n": 0})
    r.execute_command("Q.SUBSCRIBE", "mq-copy", "msrc", "FROM", "EARLIEST")
    r.xadd("msrc", {"n": 1})
    labels = {"db": "0", "source": "msrc", "queue": "mq-copy"}
    wait_until(lambda: value(node.scrape(), "narad_subscription_lag_messages", **labels) == 0)
    assert value(node.scrape(), "narad_queue_messages_pushed_total", db="0", queue="mq-copy") == 2


def test_commands_durability_and_loop_figures(node: MeteredNarad) -> None:
    r = node.client()
    before = node.scrape()
    calls = value(before, "narad_commands_total", cmd="xadd") if (
        ("narad_commands_total", (("cmd", "xadd"),)) in before
    ) else 0
    for i in range(5):
        r.xadd("mcmd", {"n": i})
    with pytest.raises(redis.ResponseError):
        r.execute_command("XADD", "mcmd", "1-1", "f", "v")  # smaller than the last ID
    m = node.scrape()
    assert value(m, "narad_commands_total", cmd="xadd") >= calls + 5
    assert value(m, "narad_command_errors_total", cmd="xadd") >= 1
    assert value(m, "narad_command_duration_seconds_count", cmd="xadd") >= 5
    assert value(m, "narad_command_duration_seconds_bucket", cmd="xadd", le="+Inf") >= 5
    assert value(m, "narad_journal_fsync_duration_seconds_count") >= 1
    assert value(m, "narad_journal_fsync_duration_seconds_sum") > 0
    assert value(m, "narad_journal_commit_records_count") >= 5
    assert value(m, "narad_journal_bytes_written_total") > 0
    assert value(m, "narad_journal_bytes") > 0
    assert value(m, "narad_log_failures") == 0
    assert value(m, "narad_connected_clients") >= 1
    assert value(m, "narad_event_loop_lag_seconds_count") > 0
    assert value(m, "narad_replication_role", role="leader") == 1
    assert value(m, "narad_replication_role", role="replica") == 0
    assert value(m, "narad_fenced") == 0
    assert value(m, "narad_epoch") >= 0
    assert value(m, "process_resident_memory_bytes") > 0
    # Buckets are cumulative and end with +Inf = count.
    buckets = sorted(
        (float(dict(labels)["le"]), v) for (name, labels), v in m.items()
        if name == "narad_journal_fsync_duration_seconds_bucket"
    )
    counts = [v for _, v in buckets]
    assert counts == sorted(counts)
    assert counts[-1] == value(m, "narad_journal_fsync_duration_seconds_count")


def test_openmetrics_when_asked(node: MeteredNarad) -> None:
    node.client().execute_command("Q.CREATE", "mq-om")
    status, headers, body = node.get(
        "/metrics", {"Accept": "application/openmetrics-text; version=1.0.0; charset=utf-8"}
    )
    assert status == 200
    assert headers["Content-Type"].startswith("application/openmetrics-text")
    text = body.decode()
    assert text.endswith("# EOF\n")
    families = {f.name: f for f in openmetrics_families(text)}
    assert families["narad_queue_messages_pushed"].type == "counter"
    assert any(
        s.labels == {"db": "0", "queue": "mq-om"}
        for s in families["narad_queue_messages_pushed"].samples
    )
    status, headers, _ = node.get("/metrics")
    assert headers["Content-Type"].startswith("text/plain; version=0.0.4")


def test_totals_only_with_metrics_per_queue_no(node: MeteredNarad) -> None:
    r = node.client()
    r.execute_command("Q.CREATE", "mq-total")
    r.execute_command("Q.PUSH", "mq-total", "x")
    per_queue = node.scrape()
    visible_sum = sum(
        v for (name, labels), v in per_queue.items() if name == "narad_queue_messages_visible"
    )
    r.config_set("metrics-per-queue", "no")
    try:
        m = node.scrape()
    finally:
        r.config_set("metrics-per-queue", "yes")
    assert not any(dict(labels).get("queue") for _, labels in m)
    assert not any(dict(labels).get("stream") for _, labels in m)
    assert value(m, "narad_queue_messages_visible") == visible_sum
    assert value(m, "narad_queue_messages_dead_lettered_total", reason="maxreceives") >= 0


@pytest.mark.parametrize(
    ("request_bytes", "status"),
    [
        (b"GARBAGE\r\n\r\n", 400),
        (b"GET /metrics HTTP/2.0\r\n\r\n", 505),
        (b"GET /metrics HTTP/1.1\r\nno colon here\r\n\r\n", 400),
        (b"GET /nowhere HTTP/1.1\r\nHost: x\r\n\r\n", 404),
        (b"POST /metrics HTTP/1.1\r\nContent-Length: 2\r\n\r\nhi", 405),
        (b"DELETE / HTTP/1.1\r\n\r\n", 405),
        (b"GET /metrics HTTP/1.1\r\nX-Big: " + b"x" * 20000 + b"\r\n\r\n", 431),
        (b"GET /metrics HTTP/1.1\r\n" + b"X-A: b\r\n" * 100 + b"\r\n", 431),
    ],
)
def test_bad_requests_are_answered_and_the_node_serves_on(
    node: MeteredNarad, request_bytes: bytes, status: int
) -> None:
    answer = node.raw(request_bytes)
    assert answer.startswith(f"HTTP/1.1 {status} ".encode()), answer[:200]
    assert node.client().ping()
    assert node.get("/metrics")[0] == 200


def test_a_head_that_never_ends_is_cut_off(node: MeteredNarad) -> None:
    with socket.create_connection((node.host, node.metrics_port), timeout=15) as sock:
        sock.sendall(b"GET /metrics HTTP/1.1\r\n" + b"X: y\r\n" * 50)
        for _ in range(30):
            sock.sendall(b"X-More: " + b"z" * 500 + b"\r\n")
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 431 ")
    assert node.client().ping()


def test_head_request(node: MeteredNarad) -> None:
    answer = node.raw(b"HEAD /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 ")
    assert b"Content-Length: " in head and body == b""


def test_credentials_while_clients_must_log_in(tmp_path: Path) -> None:
    server = MeteredNarad(tmp_path / "pw", ["--requirepass", "s3cret"]).start()
    try:
        status, headers, _ = server.get()
        assert status == 401
        assert headers["WWW-Authenticate"].startswith("Basic")
        assert server.get(headers=basic("default", "wrong"))[0] == 401
        assert server.get(headers=basic("default", "s3cret"))[0] == 200
        r = server.client(password="s3cret")
        r.execute_command("ACL", "SETUSER", "reader", "on", ">rpw", "+info")
        r.execute_command("ACL", "SETUSER", "pusher", "on", ">ppw", "+q.push", "~*")
        assert server.get(headers=basic("reader", "rpw"))[0] == 200
        status, _, body = server.get(headers=basic("pusher", "ppw"))
        assert status == 403 and b"info" in body
        r.config_set("metrics-auth", "none")
        assert server.get()[0] == 200
    finally:
        server.stop()


def test_a_replica_and_its_leader(tmp_path: Path) -> None:
    leader = MeteredNarad(tmp_path / "leader").start()
    replica = MeteredNarad(tmp_path / "replica").start()
    try:
        follow(replica, leader)
        r = leader.client()
        r.execute_command("Q.CREATE", "rq")
        r.execute_command("Q.PUSH", "rq", "x", "y")
        position = wait_synced(leader, [replica])
        name = f"{replica.host}:{replica.port}"

        def acked() -> bool:
            return value(leader.scrape(), "narad_replica_lag_bytes", replica=name) == 0

        wait_until(acked)
        m = leader.scrape()
        assert value(m, "narad_replica_link_up", replica=name) == 1
        assert value(m, "narad_replica_lag_seconds", replica=name) >= 0
        assert value(m, "narad_replication_offset") == position
        s = replica.scrape()
        assert value(s, "narad_replication_role", role="replica") == 1
        assert value(s, "narad_replica_link_up", replica="") == 1
        assert value(s, "narad_replication_offset") == position
        assert value(s, "narad_queue_messages_visible", db="0", queue="rq") == 2
        replica.kill()
        wait_until(lambda: ("narad_replica_link_up", (("replica", name),)) not in leader.scrape())
    finally:
        replica.kill()
        leader.stop()


def test_auto_port_is_the_client_port_plus_2000(tmp_path: Path) -> None:
    server = NaradProcess(tmp_path / "auto", ["--metrics-port", "auto"])
    server.start()
    try:
        url = f"http://{server.host}:{server.port + 2000}/metrics"
        with urllib.request.urlopen(url, timeout=30) as response:
            assert b"narad_connected_clients" in response.read()
        assert server.client().config_get("metrics-port") == {"metrics-port": "auto"}
    finally:
        server.stop()


def test_a_metrics_port_in_use_stops_the_start(tmp_path: Path) -> None:
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    try:
        done = subprocess.run(
            [sys.executable, "-m", "narad", "server", "--port", str(free_port()),
             "--metrics-port", str(port), "--dir", str(tmp_path / "data")],
            capture_output=True, text=True, timeout=60, cwd=tmp_path,
        )
    finally:
        taken.close()
    assert done.returncode == 1
    assert f"cannot listen for metrics on 127.0.0.1 port {port}" in done.stderr


def test_metrics_off_with_port_0(tmp_path: Path) -> None:
    server = NaradProcess(tmp_path / "off").start()  # tests' nodes run with metrics-port 0
    try:
        assert server.client().config_get("metrics-port") == {"metrics-port": "0"}
        assert "metrics and dashboard on" not in server.log()
    finally:
        server.stop()


def test_label_values_are_escaped(node: MeteredNarad) -> None:
    r = node.client()
    odd = 'we"ird\\name\nq'
    r.execute_command("Q.CREATE", odd)
    m = samples(node.get()[2].decode())
    assert value(m, "narad_queue_messages_visible", db="0", queue=odd) == 0
