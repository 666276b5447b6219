"""A committed metadata op that replay cannot apply never stops a node: the server
starts, the key it concerns refuses writes with a clear error, the other keys work,
one log line names the op's log and offset, `narad check` reports it and `--repair`
removes it. Refused Q.SCHEMA commands append nothing (checked across a restart).

Damage is written into a real data dir with the project's own log writer, as a bug
that logged an unusable op would have written it."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import msgpack
import pytest
import redis

from narad.keyspace import log_records
from narad.log import FLAG_ENTRY, Log, LogConfig
from narad.metalog import DATABASES_ANY, MetaState
from narad.schema.keyspace import StreamSchemas
from tests import journaled
from tests.servers import NaradProcess, wait_until

DOC = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}


def narad_check(data: Path, *options: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "narad", "check", str(data), *options],
                          capture_output=True, text=True, timeout=120)


def meta_state(data: Path) -> MetaState:
    """What the data dir's metadata log says (the server must be stopped)."""
    meta = Log.open(data / "meta", LogConfig())
    try:
        state = MetaState(StreamSchemas(), DATABASES_ANY)
        state.replay(log_records(meta))
        return state
    finally:
        meta.close()


def append_meta_op(data: Path, op: list[object]) -> int:
    """Append `op` to the metadata log as the server writes ops; returns its offset."""
    return journaled.append_payloads(data, "meta", msgpack.packb(op, use_bin_type=False))


def append_bad_schema(data: Path, uid: int) -> int:
    """Log for stream `uid` a schema version 2 that is not JSON, as a bug would, and
    return its offset."""
    return append_meta_op(data, ["schema.set", b"%d" % uid, 2, "{not json", None, "BACKWARD"])


def uid_of(data: Path, key: bytes) -> int:
    return next(uid for uid, (_, name) in meta_state(data).names.items() if name == key)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[NaradProcess]:
    process = NaradProcess(tmp_path / "narad")
    process.start()
    yield process
    process.stop()


def test_lone_surrogate_schema_is_refused_and_appends_nothing(server: NaradProcess) -> None:
    r = server.client(decode_responses=True)
    r.execute_command("Q.CREATE", "k")
    with pytest.raises(redis.ResponseError, match=r"invalid schema.*lone surrogate"):
        r.execute_command("Q.SCHEMA", "SET", "k", '{"\\ud800": 1}')
    with pytest.raises(redis.ResponseError, match=r"^FIELD name is not UTF-8 text$"):
        r.execute_command("Q.SCHEMA", "SET", "k", '{"type":"object"}', "FIELD", b"\xff")
    with pytest.raises(redis.ResponseError, match="lone surrogate"):
        r.execute_command("Q.SCHEMA", "CHECK", "k", '{"const": "\\udc00"}')
    assert r.ping()  # the connection lived through every refusal
    server.restart()
    r = server.client(decode_responses=True)
    assert r.execute_command("Q.SCHEMA", "VERSIONS", "k") == []
    assert r.execute_command("Q.SCHEMA", "SET", "k", json.dumps(DOC)) == 1


def test_unapplicable_schema_op_is_reported_and_repaired(server: NaradProcess) -> None:
    data = server.folder / "data"
    r = server.client(decode_responses=True)
    for key in ("k", "other"):
        r.execute_command("Q.CREATE", key)
        assert r.execute_command("Q.SCHEMA", "SET", key, json.dumps(DOC)) == 1
    server.stop()
    uid = uid_of(data, b"k")
    bad = append_bad_schema(data, uid)

    server.start()  # the node starts on its own data
    r = server.client(decode_responses=True)
    unavailable = f"key 'k' is unavailable: its metadata op at meta offset {bad} cannot be applied"
    with pytest.raises(redis.ResponseError, match=unavailable):
        r.execute_command("Q.PUSH", "k", '{"n": 1}')
    with pytest.raises(redis.ResponseError, match=unavailable):
        r.execute_command("Q.SCHEMA", "SET", "k", json.dumps({"type": "object"}))
    assert r.execute_command("Q.SCHEMA", "VERSIONS", "k") == [1]
    r.execute_command("Q.PUSH", "other", '{"n": 1}')
    with pytest.raises(redis.ResponseError, match=r"^SCHEMA"):
        r.execute_command("Q.PUSH", "other", '{"n": "x"}')
    lines = [line for line in server.log().splitlines() if "metadata op cannot be applied" in line]
    assert len(lines) == 1, server.log()
    assert f"log={data / 'meta'} offset={bad} stream_uid={uid} " in lines[0]
    server.stop()

    run = narad_check(data)
    assert run.returncode == 1, run.stdout + run.stderr
    assert f"meta-op: op at offset {bad} (stream uid {uid}) cannot be applied" in run.stdout
    assert "[repairable with --repair]" in run.stdout
    run = narad_check(data, "--repair")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "[repaired]" in run.stdout
    run = narad_check(data)
    assert run.returncode == 0 and run.stdout.rstrip().endswith(": clean"), run.stdout

    server.start()
    r = server.client(decode_responses=True)
    assert r.execute_command("Q.SCHEMA", "VERSIONS", "k") == [1]  # what applied is kept
    r.execute_command("Q.PUSH", "k", '{"n": 1}')
    with pytest.raises(redis.ResponseError, match=r"^SCHEMA"):
        r.execute_command("Q.PUSH", "k", '{"n": "x"}')
    assert r.execute_command("Q.SCHEMA", "SET", "k", json.dumps({**DOC, "title": "t"})) == 2
    assert server.log().count("metadata op cannot be applied") == 1  # the first start's


def test_garbage_metadata_record_keeps_every_stream(server: NaradProcess) -> None:
    data = server.folder / "data"
    r = server.client()
    r.xadd("s", {"f": "v"})
    server.stop()
    bad = append_meta_op(data, ["rename", 99, "not-a-db", b"x"])
    append_meta_op(data, ["create", 7])  # too short: not a create op

    server.start()
    r = server.client()
    assert r.xlen("s") == 1  # nothing was removed as an orphan
    r.xadd("s", {"f": "w"})
    assert f"offset={bad} stream_uid=None" in server.log()
    server.stop()
    run = narad_check(data)
    assert run.returncode == 1 and run.stdout.count("meta-op:") == 2, run.stdout
    assert narad_check(data, "--repair").returncode == 0
    server.start()
    assert server.client().xlen("s") == 2
    assert server.log().count("metadata op cannot be applied") == 2  # the first start's


def test_stored_version_with_a_refused_pattern_starts_and_answers_why(
        server: NaradProcess) -> None:
    """A version stored before its pattern was refused (a backreference is not in the
    linear-time subset): the node starts, produce names the version and the construct, and
    Q.SCHEMA DROP resets the key, across a restart too."""
    data = server.folder / "data"
    r = server.client(decode_responses=True)
    r.execute_command("Q.CREATE", "k")
    server.stop()
    uid = uid_of(data, b"k")
    text = json.dumps({"type": "string", "pattern": "^(1)\\1*$"})
    at = append_meta_op(data, ["schema.set", b"%d" % uid, 1, text, None, "BACKWARD"])

    server.start()
    r = server.client(decode_responses=True)
    with pytest.raises(redis.ResponseError) as caught:
        r.execute_command("Q.PUSH", "k", '"12"')
    assert f"meta offset {at} cannot be applied: schema version 1 cannot be used" in str(
        caught.value)
    assert "backreference or octal escape '\\1'" in str(caught.value)
    assert r.execute_command("Q.SCHEMA", "GET", "k")["schema"] == text
    assert r.execute_command("Q.SCHEMA", "DROP", "k") == 1
    r.execute_command("Q.PUSH", "k", '"12"')
    server.restart()
    r = server.client(decode_responses=True)
    r.execute_command("Q.PUSH", "k", '"x"')
    assert r.execute_command("Q.SCHEMA", "VERSIONS", "k") == []


# -- state logs: a stream's consumer groups and a queue's state -------------------------


def append_state_ops(data: Path, key: bytes, *payloads: bytes) -> int:
    """Append records to `key`'s state log as the server writes its ops (a payload
    is a packed op, or any bytes); returns the first one's offset."""
    return journaled.append_payloads(data, f"streams/{uid_of(data, key)}/state", *payloads)


def op(*fields: object) -> bytes:
    return msgpack.packb(list(fields), use_bin_type=True)


def state_fault_lines(server: NaradProcess) -> list[str]:
    return [line for line in server.log_path.read_text(errors="replace").splitlines()
            if "state op cannot be applied" in line]


def check_reports_and_repairs(data: Path, offset: int, why: str) -> None:
    run = narad_check(data)
    assert run.returncode == 1, run.stdout + run.stderr
    assert f"state-op: op at offset {offset} cannot be applied: {why}" in run.stdout, run.stdout
    assert "[repairable with --repair]" in run.stdout
    run = narad_check(data, "--repair")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "state-op:" in run.stdout and "[repaired]" in run.stdout
    run = narad_check(data)
    assert run.returncode == 0 and run.stdout.rstrip().endswith(": clean"), run.stdout


def test_unapplicable_queue_op_leaves_the_queue_unavailable_until_repaired(
        server: NaradProcess) -> None:
    data = server.folder / "data"
    r = server.client()
    for key in ("q", "other"):
        r.execute_command("Q.CREATE", key)
        r.execute_command("Q.PUSH", key, "m1")
        r.execute_command("Q.PUSH", key, "m2")
    popped = r.execute_command("Q.POP", "q")
    assert r.execute_command("Q.ACK", "q", popped[0][b"receipt"]) == 1
    server.stop()
    uid = uid_of(data, b"q")
    # A wrong shape (the offsets are not a list), then an op it would have allowed.
    bad = append_state_ops(data, b"q", op("q.ack", 5), op("q.take", 2, [1]))

    server.start()  # the node starts on its own data
    r = server.client()
    why = "q.ack op: 'int' object is not iterable"
    unavailable = (f"^key 'q' is unavailable: its state op at streams/{uid}/state offset {bad} "
                   f"cannot be applied: {why} \\(run narad check --repair with the server "
                   "stopped, or delete the key\\)$")
    for command in (("Q.PUSH", "q", "m3"), ("Q.POP", "q"), ("Q.STATS", "q"), ("XLEN", "q"),
                    ("XRANGE", "q", "-", "+"), ("EXISTS", "q"), ("Q.CONFIG", "q", "GET")):
        with pytest.raises(redis.ResponseError, match=unavailable):
            r.execute_command(*command)
    assert r.execute_command("Q.POP", "other")[0][b"payload"] == b"m1"
    assert r.dbsize() == 2 and sorted(r.keys()) == [b"other", b"q"]  # it is still there
    lines = state_fault_lines(server)
    assert len(lines) == 1, server.log()
    assert f"log={data / 'streams' / str(uid) / 'state'} offset={bad} stream_uid={uid} " \
        in lines[0]
    server.stop()

    check_reports_and_repairs(data, bad, why)
    server.start()
    r = server.client()
    assert r.execute_command("Q.STATS", "q")[b"acked"] == 1  # as its ops left it before the bad one
    message = r.execute_command("Q.POP", "q")
    assert message[0][b"payload"] == b"m2"  # the q.take after it was not applied
    r.execute_command("Q.PUSH", "q", "m3")
    assert len(state_fault_lines(server)) == 1  # the first start's


def test_a_repaired_queue_refuses_the_receipts_from_before_the_repair(
        server: NaradProcess) -> None:
    """The cut renumbers the deliveries after it, so the repair gives the queue a new
    receipt secret: no receipt handed out before it can ack what is delivered after."""
    data = server.folder / "data"
    r = server.client()
    r.execute_command("Q.CREATE", "q")
    r.execute_command("Q.PUSH", "q", "m1")
    [before] = r.execute_command("Q.POP", "q")
    server.stop()
    bad = append_state_ops(data, b"q", op("q.ack", 5))
    check_reports_and_repairs(data, bad, "q.ack op: 'int' object is not iterable")
    server.start()
    r = server.client()
    receipt = before[b"receipt"]
    with pytest.raises(redis.ResponseError, match=r"^invalid receipt '"):
        r.execute_command("Q.ACK", "q", receipt)
    assert r.execute_command("Q.STATS", "q")[b"in_flight"] == 1  # nothing was acked
    server.stop()
    server.start()  # the new secret is durable
    with pytest.raises(redis.ResponseError, match=r"^invalid receipt '"):
        server.client().execute_command("Q.ACK", "q", receipt)


def test_unapplicable_group_op_leaves_the_stream_unavailable_until_repaired(
        server: NaradProcess) -> None:
    data = server.folder / "data"
    r = server.client()
    for key in ("s", "other"):
        r.xadd(key, {"f": "1"}, id="1-1")
        r.xadd(key, {"f": "2"}, id="2-1")
        r.xgroup_create(key, "g", id="0")
    r.xreadgroup("g", "c", {"s": ">"}, count=1)
    server.stop()
    uid = uid_of(data, b"s")
    bad = append_state_ops(data, b"s", op("gdestroy", b"nope"), op("gdestroy", b"g"))

    server.start()
    r = server.client()
    why = "gdestroy op: b'nope'"
    unavailable = f"^key 's' is unavailable: its state op at streams/{uid}/state offset {bad} "
    for command in (("XADD", "s", "*", "f", "3"), ("XREADGROUP", "GROUP", "g", "c", "STREAMS",
                    "s", ">"), ("XINFO", "GROUPS", "s"), ("XPENDING", "s", "g"),
                    ("XLEN", "s"), ("TYPE", "s"), ("RENAME", "s", "t")):
        with pytest.raises(redis.ResponseError, match=unavailable):
            r.execute_command(*command)
    assert r.xreadgroup("g", "c", {"other": ">"}) == [[b"other", [
        (b"1-1", {b"f": b"1"}), (b"2-1", {b"f": b"2"})]]]
    lines = state_fault_lines(server)
    assert len(lines) == 1 and f"offset={bad} stream_uid={uid} " in lines[0], server.log()
    server.stop()

    check_reports_and_repairs(data, bad, why)
    server.start()
    r = server.client()
    assert r.xpending("s", "g")["pending"] == 1  # the group as its ops left it
    assert r.xreadgroup("g", "c", {"s": ">"}) == [[b"s", [(b"2-1", {b"f": b"2"})]]]
    r.xadd("s", {"f": "3"})


def test_an_op_of_a_version_this_node_does_not_read_is_a_fault_naming_what_it_reads(
        server: NaradProcess) -> None:
    data = server.folder / "data"
    r = server.client()
    r.xadd("s", {"f": "1"}, id="1-1")
    r.xgroup_create("s", "g", id="0")
    server.stop()
    uid = uid_of(data, b"s")
    bad = append_state_ops(data, b"s", op("gack/2", b"g", [1]))
    why = "unknown state op 'gack/2' (this node reads gack)"
    server.start()
    with pytest.raises(redis.ResponseError) as raised:
        server.client().xlen("s")
    assert str(raised.value) == (
        f"key 's' is unavailable: its state op at streams/{uid}/state offset {bad} cannot be "
        f"applied: {why} (run narad check --repair with the server stopped, or delete the key)")
    server.stop()
    check_reports_and_repairs(data, bad, why)


def test_unavailable_key_can_be_deleted_and_made_again(server: NaradProcess) -> None:
    """A record that is not an op at all; DEL, Q.DROP and RENAME over it remove the
    key (its repair by the client), SWAPDB moves it, FLUSHDB reaches it too."""
    data = server.folder / "data"
    r = server.client()
    for key in ("q", "q2"):
        r.execute_command("Q.CREATE", key)
    r.xadd("s", {"f": "v"})
    r.xgroup_create("s", "g", id="0")
    r.xadd("s2", {"f": "v"})
    server.stop()
    for key in (b"q", b"q2", b"s"):
        append_state_ops(data, key, b"\xc1 not msgpack")

    server.start()
    r = server.client()
    with pytest.raises(redis.ResponseError, match="cannot be applied: the record is not msgpack"):
        r.execute_command("Q.PUSH", "q", "m")
    assert r.execute_command("Q.DROP", "q") == 1
    r.swapdb(0, 1)  # it moves with its database
    with pytest.raises(redis.ResponseError, match=r"^key 'q2' is unavailable"):
        server.client(db=1).execute_command("Q.STATS", "q2")
    assert r.dbsize() == 0 and server.client(db=1).info("keyspace")["db1"]["keys"] == 3
    r.swapdb(0, 1)
    assert r.rename("s2", "q2") and r.exists("q2") == 1  # RENAME over it deletes it
    r.execute_command("Q.CREATE", "q")
    r.execute_command("Q.PUSH", "q", "m")
    assert r.delete("s") == 1
    r.xadd("s", {"f": "w"})
    assert r.xlen("s") == 1
    r.flushdb()
    assert r.dbsize() == 0
    server.restart()
    assert server.client().dbsize() == 0
    server.stop()
    assert narad_check(data).returncode == 0


def test_subscriber_entry_that_does_not_decode_does_not_stop_the_start(
        server: NaradProcess) -> None:
    """Recovering a subscription reads the subscriber's entries: one whose payload
    does not decode (its record's CRC is sound) is not a copy, not a reason to stop."""
    data = server.folder / "data"
    r = server.client()
    r.execute_command("Q.CREATE", "src")
    r.execute_command("Q.CREATE", "sub")
    r.execute_command("Q.SUBSCRIBE", "sub", "src")
    r.execute_command("Q.PUSH", "src", "m1")
    wait_until(lambda: r.xlen("sub") == 1)
    server.stop()
    folder = f"streams/{uid_of(data, b'sub')}/data"
    log = Log.open(data / folder, LogConfig())
    id_ms, id_seq = log.last_id
    log.close()
    journaled.append(data, folder, [(b"\x05", id_ms, id_seq + 1, FLAG_ENTRY)])  # 5 fields, no bytes

    server.start()
    r = server.client()
    r.execute_command("Q.PUSH", "src", "m2")
    wait_until(lambda: r.xlen("sub") == 3)  # m1's copy, the bad entry, m2's copy
    assert r.xrevrange("sub", count=1)[0][1][b"payload"] == b"m2"


def log_end(folder: Path) -> int:
    log = Log.open(folder, LogConfig())
    try:
        return log.next_offset
    finally:
        log.close()


def test_the_server_writes_nothing_to_an_unavailable_queue(tmp_path: Path) -> None:
    """Its timers do not run, a queue whose DLQ it is drops its dead letters, and a
    queue that subscribes to it keeps its subscription for after the repair."""
    server = NaradProcess(tmp_path / "narad", ["--enable-debug-command", "yes"])
    server.start()
    try:
        data = server.folder / "data"
        r = server.client()
        r.execute_command("Q.CREATE", "q")
        r.execute_command("Q.PUSH", "q", "a")
        assert r.execute_command("Q.POP", "q")  # in flight, its deadline 30 s away
        r.execute_command("Q.CREATE", "h", "MAXRECEIVES", 1, "DLQ", "q")
        r.execute_command("Q.PUSH", "h", "x")
        assert r.execute_command("Q.POP", "h")  # dead-lettered when its deadline passes
        r.execute_command("Q.CREATE", "sub")
        r.execute_command("Q.SUBSCRIBE", "sub", "q")
        server.stop()
        append_state_ops(data, b"q", op("q.nope"))
        folder = data / "streams" / str(uid_of(data, b"q"))
        ends = log_end(folder / "state"), log_end(folder / "data")

        server.start()
        r = server.client()
        r.execute_command("DEBUG", "CLOCK", "FREEZE")
        r.execute_command("DEBUG", "CLOCK", "ADVANCE", 100_000)  # every deadline passes
        assert r.execute_command("Q.STATS", "h")[b"dropped"] == 1
        assert r.execute_command("Q.STATS", "sub")[b"subscriptions"] == 1
        server.stop()
        assert (log_end(folder / "state"), log_end(folder / "data")) == ends

        check_reports_and_repairs(data, ends[0] - 1, "unknown state op 'q.nope'")
        server.start()
        r = server.client()
        r.execute_command("Q.PUSH", "q", "b")
        wait_until(lambda: r.xlen("sub") == 1)  # copying from it goes on
        assert r.execute_command("Q.STATS", "q")[b"in_flight"] == 1  # "a", as it was
    finally:
        server.stop()


def test_a_cycle_through_an_unavailable_queue_is_refused(server: NaradProcess) -> None:
    data = server.folder / "data"
    r = server.client()
    for key in ("a", "f", "b"):
        r.execute_command("Q.CREATE", key)
    r.execute_command("Q.SUBSCRIBE", "f", "a")
    r.execute_command("Q.SUBSCRIBE", "b", "f")
    server.stop()
    append_state_ops(data, b"f", op("q.nope"))
    server.start()
    r = server.client()
    with pytest.raises(redis.ResponseError, match="cycle"):  # a -> f -> b -> a
        r.execute_command("Q.SUBSCRIBE", "a", "b")
    assert r.execute_command("Q.STATS", "a")[b"subscribers"] == 1


def test_check_replays_only_the_state_logs_the_metadata_names(server: NaradProcess) -> None:
    """A stream folder no key names (left by a crash after a delete) is an orphan the
    server removes at start: its state log is not the data dir's problem."""
    data = server.folder / "data"
    server.client().xadd("s", {"f": "v"})
    server.stop()
    orphan = Log.open(data / "streams" / "999" / "state", LogConfig())
    try:
        orphan.append(op("q.nope"))
        orphan.write()
        orphan.sync()
    finally:
        orphan.close()
    run = narad_check(data)
    assert run.returncode == 0 and "state-op" not in run.stdout, run.stdout
    server.start()
    assert server.client().xlen("s") == 1
    assert not (data / "streams" / "999").exists()


def test_a_queue_whose_schema_faulted_takes_no_letters_nor_redriven_messages(
    tmp_path: Path,
) -> None:
    """Its source drops the dead letters and keeps working; redrive to it answers the
    fault's error and leaves the DLQ's messages ready."""
    server = NaradProcess(tmp_path / "narad", ["--enable-debug-command", "yes"])
    server.start()
    try:
        data = server.folder / "data"
        r = server.client()
        for key in (b"bad", b"dlq", b"ok"):
            r.execute_command("Q.CREATE", key)
        r.execute_command("Q.SCHEMA", "SET", "bad", json.dumps(DOC))
        r.execute_command("Q.CREATE", "src", "MAXRECEIVES", 1, "DLQ", "bad")
        r.execute_command("Q.CREATE", "h", "MAXRECEIVES", 1, "DLQ", "dlq")
        r.execute_command("Q.PUSH", "src", "x")
        r.execute_command("Q.PUSH", "h", "y")
        assert r.execute_command("Q.POP", "src") and r.execute_command("Q.POP", "h")
        server.stop()
        append_bad_schema(data, uid_of(data, b"bad"))

        server.start()
        r = server.client()
        r.execute_command("DEBUG", "CLOCK", "FREEZE")
        r.execute_command("DEBUG", "CLOCK", "ADVANCE", 100_000)  # both deadlines pass
        r.execute_command("Q.PUSH", "src", "z")
        assert b"z" in repr(r.execute_command("Q.POP", "src")).encode()  # the source works
        assert r.execute_command("Q.STATS", "src")[b"dropped"] == 1
        assert r.execute_command("Q.STATS", "dlq")[b"visible"] == 1
        with pytest.raises(redis.ResponseError, match="key 'bad' is unavailable"):
            r.execute_command("Q.REDRIVE", "dlq", "TO", "bad")
        assert r.execute_command("Q.REDRIVE", "dlq", "TO", "ok") == 1  # still there
        assert r.execute_command("PING")
    finally:
        server.stop()


def test_copying_into_a_subscriber_whose_schema_faulted_waits(server: NaradProcess) -> None:
    """The other subscribers of the source keep copying; nothing fails in the loop."""
    data = server.folder / "data"
    r = server.client()
    for key in (b"src", b"bad", b"ok"):
        r.execute_command("Q.CREATE", key)
    r.execute_command("Q.SCHEMA", "SET", "bad", json.dumps(DOC))
    r.execute_command("Q.SUBSCRIBE", "bad", "src")
    r.execute_command("Q.SUBSCRIBE", "ok", "src")
    server.stop()
    append_bad_schema(data, uid_of(data, b"bad"))

    server.start()
    r = server.client()
    r.execute_command("Q.PUSH", "src", "a")
    r.execute_command("Q.PUSH", "src", "b")
    assert r.execute_command("PING")
    assert r.xlen("ok") == 2
    assert r.xlen("bad") == 0  # copying waits for Q.SCHEMA DROP or a repair
    assert "internal error" not in server.log().lower()


@pytest.mark.parametrize("kind", ["queue", "stream"])
def test_op_that_applies_but_cannot_settle_leaves_the_key_unavailable_until_repaired(
        server: NaradProcess, kind: str) -> None:
    """An op with wrong types that its handler takes without raising (a q.deliver
    whose cursor is a string, a snap whose start is one) makes the settling after
    replay raise: that faults the stream at the op, it does not stop the start."""
    data = server.folder / "data"
    r = server.client()
    if kind == "queue":
        r.execute_command("Q.CREATE", "k")
        r.execute_command("Q.PUSH", "k", "m1")
        bad_op = op("q.deliver", 9, 2**40, 1, "2", [])
    else:
        r.xadd("k", {"f": "1"}, id="1-1")
        bad_op = op("snap", "x", [], bytes(16), 0, bytes(16), [], None)
    server.stop()
    uid = uid_of(data, b"k")
    bad = append_state_ops(data, b"k", bad_op)

    server.start()
    r = server.client()
    why = "settling the replayed state on the data log: "
    with pytest.raises(redis.ResponseError, match=f"^key 'k' is unavailable: its state op at "
                       f"streams/{uid}/state offset {bad} cannot be applied: {why}"):
        r.execute_command("XLEN", "k")
    assert len(state_fault_lines(server)) == 1, server.log()
    server.stop()

    run = narad_check(data)
    assert f"state-op: op at offset {bad} cannot be applied: {why}" in run.stdout, run.stdout
    check_reports_and_repairs(data, bad, why)
    server.start()
    assert server.client().xlen("k") == 1
