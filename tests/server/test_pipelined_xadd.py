"""Pipelined XADDs: a run of `XADD key * ...` to one key read in one go takes the
server's batched path (one ID reading, one log append, one reply write). Everything
a client can observe must be what running them one by one gives: replies, entries,
order against the other commands of the pipeline, statistics, SLOWLOG, MONITOR,
WATCH, MULTI, CLIENT REPLY, and the output buffer limit."""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.servers import NaradProcess

from .raw import Raw, encode

ID = re.compile(rb"^(\d+)-(\d+)$")
EXHAUSTED = "The stream has exhausted the last possible ID, unable to add more items"


def pipeline(raw: Raw, commands: list[list[Any]]) -> list[Any]:
    raw.send(b"".join(encode(c) for c in commands))
    return [raw.read() for _ in commands]


def as_id(reply: Any) -> tuple[int, int]:
    assert isinstance(reply, bytes), reply
    found = ID.match(reply)
    assert found, reply
    return int(found[1]), int(found[2])


def test_runs_answer_as_one_by_one(shared_narad: NaradProcess) -> None:
    with Raw(shared_narad.port) as raw:
        assert as_id(raw.call("XADD", "pipe", "*", "a", "0"))  # the stream exists
        commands: list[list[Any]] = []
        for i in range(1, 41):
            commands.append(["XADD", "pipe", "*", "n", str(i), "pad", "x" * (i % 7)])
            if i % 10 == 0:
                commands.append(["XLEN", "pipe"])  # ends a run: sees what came before
            if i == 15:
                commands.append(["xadd", "pipe", "*", "lower", "case"])  # another spelling
            if i == 25:
                commands.append(["XADD", "other", "*", "k", "v"])  # another key
            if i == 30:
                commands.append(["XADD", "pipe", "*", "odd"])  # wrong arity, in a run
            if i == 35:
                commands.append(["XADD", "pipe", "MAXLEN", "1000", "*", "t", "v"])
        replies = pipeline(raw, commands)
        ids = []
        added = 1
        for command, reply in zip(commands, replies, strict=True):
            if command[0] == "XLEN":
                assert reply == added
            elif command[1] == "other":
                assert as_id(reply)
            elif len(command) == 4:
                assert reply == ("error", "ERR wrong number of arguments for 'xadd' command")
            else:
                ids.append(as_id(reply))
                added += 1
        assert ids == sorted(set(ids))  # strictly increasing
        entries = raw.call("XRANGE", "pipe", "-", "+")
        assert [as_id(e[0]) for e in entries][1:] == ids
        expected = [c[3:] for c in commands if c[0].upper() == "XADD" and c[1] == "pipe"]
        expected = [c for c in expected if len(c) % 2 == 0]
        fields = [[x.decode() for x in e[1]] for e in entries][1:]
        assert fields == [c if c[0] != "1000" else c[2:] for c in expected]


def test_ids_follow_the_last_id_even_a_future_one(shared_narad: NaradProcess) -> None:
    """A stream whose last ID is ahead of the clock: a run counts on from it."""
    with Raw(shared_narad.port) as raw:
        future = 99999999999999
        assert raw.call("XADD", "future", f"{future}-5", "f", "v") == f"{future}-5".encode()
        replies = pipeline(raw, [["XADD", "future", "*", "f", str(i)] for i in range(5)])
        assert replies == [f"{future}-{6 + i}".encode() for i in range(5)]
        top = 18446744073709551615
        assert raw.call("XADD", "end", f"{top}-{top - 2}", "f", "v") == f"{top}-{top - 2}".encode()
        replies = pipeline(raw, [["XADD", "end", "*", "f", str(i)] for i in range(3)])
        assert replies == [
            f"{top}-{top - 1}".encode(),
            f"{top}-{top}".encode(),
            ("error", f"ERR {EXHAUSTED}"),
        ]


def test_commandstats_and_slowlog_count_every_command(tmp_path: Any) -> None:
    server = NaradProcess(tmp_path / "narad").start()
    try:
        with Raw(server.port) as raw:
            raw.call("XADD", "s", "*", "f", "v")
            assert raw.call("CONFIG", "SET", "slowlog-log-slower-than", "0") == b"OK"
            raw.call("SLOWLOG", "RESET")
            raw.call("CONFIG", "RESETSTAT")
            commands = [["XADD", "s", "*", "n", str(i)] for i in range(12)]
            pipeline(raw, commands)
            stats = raw.call("INFO", "commandstats").decode()
            assert re.search(r"cmdstat_xadd:calls=12,", stats), stats
            log = raw.call("SLOWLOG", "GET", "100")
            args = [[a.decode() for a in entry[3]] for entry in log if entry[3][0] == b"XADD"]
            assert args == commands[::-1]  # newest first
            assert all(isinstance(entry[2], int) and entry[2] >= 0 for entry in log)
            info = raw.call("INFO", "stats").decode()
            assert re.search(r"total_commands_processed:(\d+)", info)
    finally:
        server.stop()


def test_monitor_sees_each_command(shared_narad: NaradProcess) -> None:
    with Raw(shared_narad.port) as watcher, Raw(shared_narad.port) as raw:
        raw.call("XADD", "mon", "*", "f", "v")
        assert watcher.call("MONITOR") == b"OK"
        pipeline(raw, [["XADD", "mon", "*", "n", str(i)] for i in range(4)])
        lines = [watcher.read() for _ in range(4)]
        assert [line.split(b"] ", 1)[1] for line in lines] == [
            b'"XADD" "mon" "*" "n" "%d"' % i for i in range(4)
        ]


def test_watch_multi_and_client_reply(shared_narad: NaradProcess) -> None:
    with Raw(shared_narad.port) as raw, Raw(shared_narad.port) as other:
        raw.call("XADD", "w", "*", "f", "v")
        assert raw.call("WATCH", "w") == b"OK"
        pipeline(other, [["XADD", "w", "*", "n", str(i)] for i in range(3)])
        assert pipeline(raw, [["MULTI"], ["XLEN", "w"], ["EXEC"]]) == [b"OK", b"QUEUED", None]
        replies = pipeline(
            raw, [["MULTI"]] + [["XADD", "w", "*", "n", str(i)] for i in range(3)] + [["EXEC"]]
        )
        assert replies[:4] == [b"OK", b"QUEUED", b"QUEUED", b"QUEUED"]
        assert [as_id(r) for r in replies[4]]
        assert raw.call("XLEN", "w") == 7
        raw.send(
            b"".join(
                encode(c)
                for c in [
                    ["CLIENT", "REPLY", "OFF"],
                    *[["XADD", "w", "*", "n", str(i)] for i in range(3)],
                    ["CLIENT", "REPLY", "ON"],
                    ["XLEN", "w"],
                ]
            )
        )
        assert raw.read() == b"OK"
        assert raw.read() == 10
        raw.send(
            b"".join(
                encode(c)
                for c in [
                    ["CLIENT", "REPLY", "SKIP"],
                    *[["XADD", "w", "*", "n", str(i)] for i in range(3)],
                ]
            )
        )
        assert as_id(raw.read())  # the first XADD's reply was skipped, not the others
        assert as_id(raw.read())
        assert raw.call("XLEN", "w") == 13


@pytest.mark.parametrize("protocol", [2, 3])
def test_blocked_reader_gets_the_whole_run(shared_narad: NaradProcess, protocol: int) -> None:
    key = f"blk{protocol}"
    with Raw(shared_narad.port) as reader, Raw(shared_narad.port) as writer:
        writer.call("XADD", key, "*", "f", "v")
        reader.call("HELLO", str(protocol))
        reader.send_command("XREAD", "BLOCK", "0", "STREAMS", key, "$")
        writer.call("PING")  # the reader's command has arrived before the run
        ids = pipeline(writer, [["XADD", key, "*", "n", str(i)] for i in range(5)])
        got = reader.read()
        entries = got[key.encode()] if protocol == 3 else got[0][1]
        assert [e[0] for e in entries] == ids


def test_output_limit_cuts_a_run_where_one_by_one_would(tmp_path: Any) -> None:
    server = NaradProcess(tmp_path / "narad").start()
    try:
        with Raw(server.port) as raw:
            limit = ["client-output-buffer-limit", "normal 200 0 0"]
            assert raw.call("CONFIG", "SET", *limit) == b"OK"
            raw.call("XADD", "lim", "*", "f", "v")
            raw.send(b"".join(encode(["XADD", "lim", "*", "n", str(i)]) for i in range(50)))
            data = raw.read_all_until_closed()
            assert data == b""  # nothing leaves once the limit is passed
        assert server.client().xlen("lim") < 50
    finally:
        server.stop()
