"""INFO's figures through a real server: each is measured as Redis 7.0 measures it
(and, where a redis-server is at hand, counts what Redis counts)."""

from __future__ import annotations

import threading

import redis

from tests.server.raw import Raw, encode
from tests.servers import NaradProcess, RedisProcess, wait_until


def _fields(text: bytes) -> dict[str, str]:
    lines = [line for line in text.decode().splitlines() if line and not line.startswith("#")]
    return dict(line.split(":", 1) for line in lines)


def _stats(conn: Raw) -> dict[str, str]:
    return _fields(conn.call("INFO", "stats"))


def test_instantaneous_rates_follow_the_load(narad: NaradProcess) -> None:
    stop = threading.Event()

    def load() -> None:
        with Raw(narad.port) as conn:
            batch = encode(["PING"]) * 50
            while not stop.is_set():
                conn.send(batch)
                for _ in range(50):
                    conn.read()

    worker = threading.Thread(target=load)
    worker.start()
    try:
        with Raw(narad.port) as conn:
            busy = wait_until(
                lambda: int((s := _stats(conn))["instantaneous_ops_per_sec"]) > 100 and s
            )
            assert float(busy["instantaneous_input_kbps"]) > 0
            assert float(busy["instantaneous_output_kbps"]) > 0
    finally:
        stop.set()
        worker.join()
    with Raw(narad.port) as conn:
        # Without the load the 16 samples of 100 ms empty out again (to the few INFO
        # calls a second this loop makes).
        wait_until(lambda: int(_stats(conn)["instantaneous_ops_per_sec"]) < 20, interval=0.2)


def test_reads_and_writes_processed_count_socket_io(narad: NaradProcess) -> None:
    with Raw(narad.port) as conn:
        before = _stats(conn)
        for _ in range(30):  # one read and one write each: the reply comes before the next
            assert conn.call("PING") == b"PONG"
        after = _stats(conn)
    reads = int(after["total_reads_processed"]) - int(before["total_reads_processed"])
    writes = int(after["total_writes_processed"]) - int(before["total_writes_processed"])
    assert 31 <= reads <= 32 and 31 <= writes <= 32  # the PINGs and the second INFO


def _latencystats(conn: Raw) -> dict[str, dict[str, float]]:
    out = {}
    for name, value in _fields(conn.call("INFO", "latencystats")).items():
        assert name.startswith("latency_percentiles_usec_")
        pairs = [part.split("=") for part in value.split(",")] if value else []
        out[name.removeprefix("latency_percentiles_usec_")] = {k: float(v) for k, v in pairs}
    return out


def test_latencystats_per_command_percentiles(narad: NaradProcess) -> None:
    with Raw(narad.port) as conn:
        for i in range(200):
            conn.call("XADD", "lat", "*", "i", i)
        conn.call("XLEN", "lat")
        stats = _latencystats(conn)
        assert set(stats["xadd"]) == {"p50", "p99", "p99.9"}
        assert 0 < stats["xadd"]["p50"] <= stats["xadd"]["p99"] <= stats["xadd"]["p99.9"]
        assert "xlen" in stats
        conn.call("CONFIG", "SET", "latency-tracking-info-percentiles", "12.5 100")
        assert set(_latencystats(conn)["xadd"]) == {"p12.5", "p100"}
        conn.call("CONFIG", "SET", "latency-tracking", "no")
        assert conn.call("INFO", "latencystats") == b"# Latencystats\r\n"
        conn.call("CONFIG", "SET", "latency-tracking", "yes")
        conn.call("CONFIG", "RESETSTAT")
        assert set(_latencystats(conn)) == {"config|resetstat"}


def _blocked_then_nogroup(port: int) -> dict[str, str]:
    """XREADGROUP blocked, ended by XGROUP DESTROY with NOGROUP; then one served by
    an XADD. Its commandstats line."""
    client = redis.Redis(port=port)
    client.delete("blk")
    client.xgroup_create("blk", "g", id="$", mkstream=True)
    client.execute_command("CONFIG", "RESETSTAT")
    outcomes: list[object] = []

    def read() -> None:
        reader = redis.Redis(port=port)
        try:
            outcomes.append(reader.xreadgroup("g", "c", {"blk": ">"}, block=0))
        except redis.ResponseError as exc:
            outcomes.append(str(exc).split()[0])
        reader.close()

    def destroy_and_recreate() -> None:
        client.xgroup_destroy("blk", "g")
        client.xgroup_create("blk", "g", id="0")

    for wake in (destroy_and_recreate, lambda: client.xadd("blk", {"a": 1})):
        worker = threading.Thread(target=read)
        worker.start()
        wait_until(lambda: client.info("clients")["blocked_clients"] == 1)
        wake()
        worker.join()
    assert outcomes[0] == "NOGROUP" and isinstance(outcomes[1], list)
    line = client.execute_command("INFO", "commandstats")["cmdstat_xreadgroup"]
    client.delete("blk")
    client.close()
    return {k: v for k, v in line.items() if k in ("calls", "rejected_calls", "failed_calls")}


def test_blocked_command_ended_by_an_error_counts_as_failed(
    narad: NaradProcess, redis_server: RedisProcess
) -> None:
    mine, theirs = _blocked_then_nogroup(narad.port), _blocked_then_nogroup(redis_server.port)
    assert mine == theirs == {"calls": 2, "rejected_calls": 0, "failed_calls": 1}


def test_info_stats_fields_are_those_narad_measures(narad: NaradProcess) -> None:
    with Raw(narad.port) as conn:
        info = _fields(conn.call("INFO", "everything"))
    for unmeasured in (
        "keyspace_hits", "keyspace_misses", "unexpected_error_replies",
        "client_recent_max_input_buffer", "client_recent_max_output_buffer", "hz",
    ):
        assert unmeasured not in info
