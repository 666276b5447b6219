"""The `narad` command line, run as a real process on real log folders."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import redis

from narad import cli, serve
from narad.config import Config
from narad.config.lexer import split_args
from narad.config.settings import SETTINGS
from narad.log import format
from narad.log.check import find_logs
from narad.log.format import FLAG_ENTRY, Record, encode_fields
from narad.log.lock import lock_folder
from narad.log.log import Log, LogConfig
from narad.progress import Progress, human_bytes, human_duration
from tests.servers import NaradProcess

SMALL = LogConfig(segment_bytes=8192)
T0 = 1_700_000_000_000
PER_SEGMENT = 56  # 146-byte records (100-byte payloads) per 8 KiB segment


def build(folder: Path, count: int = 200) -> Path:
    log = Log.open(folder, SMALL, clock=lambda: T0)
    for i in range(count):
        log.append((b"%08d" % i) * 12 + b"....", T0 + i, 0, FLAG_ENTRY)
    log.close()
    return folder


def segments(folder: Path) -> list[Path]:
    return sorted(folder.glob("*.log"))


def records(path: Path) -> list[Record]:
    return format.pure_scan(path.read_bytes(), 0, 0, 1 << 30)[0]


def flip(path: Path, position: int) -> None:
    data = bytearray(path.read_bytes())
    data[position] ^= 0x04
    path.write_bytes(bytes(data))


def narad(*args: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "narad", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=60,
    )


def lines(out: str) -> list[str]:
    return out.splitlines()


# -- narad check ---------------------------------------------------------------------


def test_check_clean_log(tmp_path: Path) -> None:
    folder = build(tmp_path / "log")
    size = sum(p.stat().st_size for p in segments(folder))
    run = narad("check", folder)
    assert run.returncode == 0, run.stderr
    assert lines(run.stdout) == [f"checked 1 log, 4 segments, 200 records, {size} bytes: clean"]
    assert run.stderr == ""  # no progress bar when stderr is not a terminal


def test_check_torn_tail_then_repair(tmp_path: Path) -> None:
    folder = build(tmp_path / "log")
    last = segments(folder)[-1]
    rec = records(last)[-1]
    os.truncate(last, rec.position + 20)

    run = narad("check", folder)
    assert run.returncode == 1
    problem, summary = lines(run.stdout)
    assert problem.startswith(f"{last}:{rec.position}: torn-tail: ")
    assert problem.endswith("[repairable with --repair]")
    assert summary.endswith("1 problem, 1 repairable with --repair: NOT CLEAN")

    run = narad("check", folder, "--repair")
    assert run.returncode == 0
    problem, summary = lines(run.stdout)
    assert problem.startswith(f"{last}:{rec.position}: torn-tail: ")
    assert problem.endswith("[repaired]")
    assert summary.endswith("1 problem, 1 repaired: clean now")

    run = narad("check", folder)
    assert run.returncode == 0 and lines(run.stdout)[-1].endswith(": clean")


def test_check_corrupt_sealed_segment(tmp_path: Path) -> None:
    folder = build(tmp_path / "log")
    sealed = segments(folder)[1]
    rec = records(sealed)[20]
    flip(sealed, rec.position + 70)
    for extra in ([], ["--repair"]):
        run = narad("check", folder, *extra)
        assert run.returncode == 1
        problem, summary = lines(run.stdout)
        assert problem.startswith(f"{sealed}:{rec.position}: corrupt: CRC mismatch: ")
        assert f"{rec.size} bytes unreadable" in problem
        assert problem.endswith("[not repairable automatically]")
        assert summary.endswith("1 problem, 1 not repairable: NOT CLEAN")


def test_check_data_dir(tmp_path: Path) -> None:
    data = tmp_path / "data"
    build(data / "one", count=10)
    build(data / "streams" / "two", count=10)
    index = segments(data / "one")[0].with_suffix(".index")
    index.write_bytes(b"garbage!")
    run = narad("check", data)
    assert run.returncode == 1
    problem, summary = lines(run.stdout)
    assert problem.startswith(f"{index}:0: index: size 8 is not a multiple of 32")
    assert summary.startswith("checked 2 logs, 2 segments, 20 records")
    assert narad("check", data, "--repair").returncode == 0
    assert narad("check", data).returncode == 0


def test_check_dir_without_logs(tmp_path: Path) -> None:
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "readme.txt").write_text("not a log")
    run = narad("check", tmp_path)
    assert run.returncode == 2
    assert run.stdout == ""
    assert run.stderr == (
        f"narad check: error: nothing to check: no Narad logs at or under {tmp_path}\n"
    )


def _live_server(tmp_path: Path) -> NaradProcess:
    server = NaradProcess(tmp_path / "n").start()
    client = server.client()
    client.xadd("s", {"a": "1"})
    client.close()
    return server


def test_check_repair_refuses_a_live_server_data_dir(tmp_path: Path) -> None:
    server = _live_server(tmp_path)
    data = tmp_path / "n" / "data"
    try:
        stream_log = next(p for p in find_logs(data) if p.name == "data")
        for target in (data, stream_log, tmp_path):
            run = narad("check", target, "--repair")
            assert run.returncode == 1, run.stderr
            assert run.stdout == ""
            assert run.stderr == (
                f"narad check: --repair refused: {data} is in use by process "
                f"{server.proc.pid} (it holds {data / 'narad.lock'}); stop it first\n"  # type: ignore[union-attr]
            )
        # A plain check reads alongside it, and says so.
        run = narad("check", data)
        assert run.returncode == 0, run.stdout
        assert run.stdout.endswith(": clean\n")
        assert f"{data} is in use by process {server.proc.pid}" in run.stderr  # type: ignore[union-attr]
        assert server.client().ping()
    finally:
        server.stop()
    run = narad("check", data, "--repair")
    assert run.returncode == 0, run.stderr
    assert run.stderr == ""


def test_server_refuses_a_data_dir_under_repair(tmp_path: Path) -> None:
    server = _live_server(tmp_path)
    server.stop()
    data = tmp_path / "n" / "data"
    lock = lock_folder(data)  # what `narad check --repair` holds while it runs
    try:
        run = subprocess.run(
            [sys.executable, "-m", "narad", "server", "--port", "0", "--dir", str(data)],
            capture_output=True, text=True, timeout=60,
        )
        assert run.returncode == 1
        assert f"{data} is in use by process {os.getpid()}" in run.stderr
    finally:
        os.close(lock)


# -- narad server's flags -----------------------------------------------------------


def test_server_takes_settings_as_flags_over_the_config_file(tmp_path: Path) -> None:
    conf = tmp_path / "narad.conf"
    conf.write_text("timeout 5\nsegment-bytes 4mb\nsave 60 100\nmaxclients 50\n")
    server = NaradProcess(
        tmp_path / "n",
        [
            str(conf),  # the file first: a flag of several words takes all after it
            "--segment-bytes", "1mb",
            "--bind", "127.0.0.1",
            "--appendfsync", "everysec",
            "--timeout", "7",
            "--slowlog-log-slower-than", "-1",
            "--save", "900", "1",
            "--save", "300 10",
            "--client-output-buffer-limit", "pubsub", "1mb", "512kb", "5",
            "--latency-tracking-info-percentiles", "50 99.5",
            "--protected-mode", "no",
        ],
    ).start()
    try:
        client = server.client(decode_responses=True)
        got = client.config_get("*")
        assert got["port"] == str(server.port)
        assert got["dir"] == str(tmp_path / "n" / "data")
        assert got["segment-bytes"] == str(1 << 20)  # the flag over the file
        assert got["bind"] == "127.0.0.1"
        assert got["fsync"] == got["appendfsync"] == "everysec"
        assert got["timeout"] == "7"
        assert got["slowlog-log-slower-than"] == "-1"
        assert got["save"] == "900 1 300 10"  # replaced the file's, then added to
        assert got["client-output-buffer-limit"] == (
            f"normal {1 << 30} 0 0 slave {256 << 20} {64 << 20} 60 pubsub {1 << 20} {512 << 10} 5"
        )
        assert got["latency-tracking-info-percentiles"] == "50 99.5"
        assert got["protected-mode"] == "no"
        assert got["maxclients"] == "50"  # from the file, no flag
    finally:
        assert server.stop() == 0


@pytest.mark.parametrize(
    "words", [["127.0.0.1", "127.0.0.2"], ["127.0.0.1 127.0.0.2"]], ids=["words", "one-word"]
)
def test_server_bind_flag_takes_several_addresses(tmp_path: Path, words: list[str]) -> None:
    server = NaradProcess(tmp_path / "n", ["--bind", *words]).start()
    try:
        client = server.client(decode_responses=True)
        assert client.config_get("bind") == {"bind": "127.0.0.1 127.0.0.2"}
        other = redis.Redis(host="127.0.0.2", port=server.port)
        assert other.ping()  # listening on the second address too
        other.close()
    finally:
        assert server.stop() == 0


def test_server_help_lists_every_setting() -> None:
    run = narad("server", "--help")
    assert run.returncode == 0, run.stderr
    text = " ".join(run.stdout.split())  # argparse wraps the lines
    for setting in SETTINGS:
        for name in setting.names():
            assert re.search(rf"--{re.escape(name)}\b", text), name
        assert " ".join(setting.doc.split()) in text, setting.name
        assert f"{setting.section} settings:" in text
    assert "--port N TCP port to listen on. (default: 6379)" in text
    assert "--fsync everysec|always|no, --appendfsync everysec|always|no" in text
    assert "--bind ARG [ARG ...] Addresses to listen on, separated by spaces." in text
    assert "spaces. (default: 127.0.0.1)" in text
    assert "(default: normal 1gb 0 0 replica 256mb 64mb 60 pubsub 32mb 8mb 60)" in text
    assert '(default: "")' in text  # requirepass
    assert "(default: ./narad-data)" in text


def test_every_setting_name_is_a_flag_that_loads_its_default_as_shown() -> None:
    """Each name and alias of the table, given the default --help shows (split into
    words as a shell would split it), loads to the default."""
    parser = cli.build_parser()
    for setting in SETTINGS:
        words = split_args(serve.default_text(setting))
        assert words is not None
        for name in setting.names():
            args = parser.parse_args(["server", f"--{name}", *words])
            assert serve.overrides(args) == [(f"--{name}", words)]
            config = Config.load(None, serve.overrides(args))
            assert config[setting.name] == setting.default, name


@pytest.mark.parametrize(
    ("flag", "line", "reason"),
    [
        (["--port", "x"], "port x", "argument couldn't be parsed into an integer"),
        (["--appendfsync", "sometimes"], "appendfsync sometimes",
         "argument(s) must be one of the following: everysec, always, no"),
        (["--daemonize", "yes"], "daemonize yes",
         "argument must be 'no' (Narad does not daemonize)"),
        (["--save", "900"], "save 900", "Invalid save parameters"),
        (["--client-output-buffer-limit", "normal", "1mb", "0"],
         "client-output-buffer-limit normal 1mb 0",
         "Wrong number of arguments in buffer limit configuration."),
        (["--bind", 'a "b'], 'bind "a \\"b"', "Unbalanced quotes in configuration line"),
    ],
)
def test_server_refuses_a_bad_flag_as_a_config_file_line(
    tmp_path: Path, flag: list[str], line: str, reason: str
) -> None:
    run = narad("server", "--port", "0", "--dir", tmp_path / "data", *flag)
    assert run.returncode == 1
    assert run.stderr == (
        f"narad: Reading the command line, at option {flag[0]}\n>>> '{line}'\n{reason}\n"
    )
    assert not (tmp_path / "data").exists()
    conf = tmp_path / "narad.conf"
    conf.write_text(line + "\n")  # the same line in a config file: the same reason
    from_file = narad("server", conf, "--port", "0", "--dir", tmp_path / "data")
    assert from_file.returncode == 1
    assert from_file.stderr == (
        f"narad: Reading the configuration file {conf}, at line 1\n>>> '{line}'\n{reason}\n"
    )


@pytest.mark.parametrize(
    "args",
    [
        [],
        ["bogus"],
        ["check"],
        ["check", "/nonexistent/narad"],
        ["dump"],
        ["dump", "/nonexistent/narad"],
        ["dump", ".", "--count", "-1"],
        ["dump", ".", "--from", "x"],
    ],
)
def test_usage_errors(args: list[str]) -> None:
    run = narad(*args)
    assert run.returncode == 2
    assert run.stdout == "" and "error" in run.stderr


def test_main_in_process(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = build(tmp_path / "log", count=3)
    assert cli.main(["check", str(folder)]) == 0
    assert cli.main(["dump", str(folder), "--from", "2"]) == 0
    out = capsys.readouterr().out
    assert lines(out)[-1].startswith("offset: 2 position: 292 ")


def test_subcommands_are_registered_in_one_place() -> None:
    parser = cli.build_parser()
    names = {action.dest for action in parser._actions}
    assert "command" in names
    assert [add.__name__ for add in cli.SUBCOMMANDS] == [
        "_add_server", "_add_sentinel", "_add_check", "_add_dump",
    ]


# -- narad dump ----------------------------------------------------------------------

LINE = re.compile(
    r"offset: (\d+) position: (\d+) segment: (\d{20}\.log) epoch: (\d+) "
    r"timestamp: (\d+) id: (\d+)-(\d+) flags: 0x([0-9a-f]{2}) size: (\d+) crc-ok$"
)


def test_dump_line_format(tmp_path: Path) -> None:
    folder = build(tmp_path / "log", count=2)
    run = narad("dump", folder)
    assert run.returncode == 0
    assert lines(run.stdout) == [
        f"offset: 0 position: 0 segment: 00000000000000000000.log epoch: 0 "
        f"timestamp: {T0} id: {T0}-0 flags: 0x01 size: 146 crc-ok",
        f"offset: 1 position: 146 segment: 00000000000000000000.log epoch: 0 "
        f"timestamp: {T0} id: {T0 + 1}-0 flags: 0x01 size: 146 crc-ok",
    ]


def test_dump_everything(tmp_path: Path) -> None:
    folder = build(tmp_path / "log")
    run = narad("dump", folder)
    assert run.returncode == 0
    parsed = [LINE.match(line) for line in lines(run.stdout)]
    assert all(parsed)
    assert [int(m.group(1)) for m in parsed if m] == list(range(200))


@pytest.mark.parametrize(("start", "count"), [(50, 10), (0, 57), (55, 2), (100, 200), (56, 1)])
def test_dump_from_and_count_across_segments(tmp_path: Path, start: int, count: int) -> None:
    folder = build(tmp_path / "log")
    expected = []
    for path in segments(folder):
        expected += [(r.offset, r.position, path.name) for r in records(path)]
    run = narad("dump", folder, "--from", start, "--count", count)
    assert run.returncode == 0
    got = []
    for line in lines(run.stdout):
        m = LINE.match(line)
        assert m, line
        got.append((int(m.group(1)), int(m.group(2)), m.group(3)))
    assert got == expected[start : start + count]


def test_dump_beyond_the_end_and_count_zero(tmp_path: Path) -> None:
    folder = build(tmp_path / "log")
    assert narad("dump", folder, "--from", 200).stdout == ""
    assert narad("dump", folder, "--from", 10**9).stdout == ""
    run = narad("dump", folder, "--count", 0)
    assert run.returncode == 0 and run.stdout == ""


def test_dump_does_not_trust_the_index(tmp_path: Path) -> None:
    folder = build(tmp_path / "log")
    index = segments(folder)[1].with_suffix(".index")
    data = bytearray(index.read_bytes())
    data[40] ^= 0x01  # the second entry's position, off by one
    index.write_bytes(bytes(data))
    run = narad("dump", folder, "--from", PER_SEGMENT + 40, "--count", 2)
    assert run.returncode == 0
    offsets = [int(m.group(1)) for m in map(LINE.match, lines(run.stdout)) if m]
    assert offsets == [PER_SEGMENT + 40, PER_SEGMENT + 41]


def test_dump_payload(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "log", SMALL, clock=lambda: T0)
    log.append(encode_fields([b"k", b"v\x00\n'", b"k", b"2"]), 1, 0, FLAG_ENTRY)
    log.append(b"\xff" * 300, 1, 0, 0x02)
    log.append(b"not a field list", 1, 0, FLAG_ENTRY)
    log.close()
    run = narad("dump", tmp_path / "log", "--payload")
    assert run.returncode == 0
    entry, raw, malformed = lines(run.stdout)
    assert entry.endswith(" crc-ok fields: b'k'=b\"v\\x00\\n'\", b'k'=b'2'")
    assert " flags: 0x02 " in raw
    assert raw.endswith(" crc-ok payload: b'" + "\\xff" * 256 + "'...(+44 bytes)")
    assert malformed.endswith(
        " crc-ok payload: b'not a field list' (not a field list: entry payload is truncated)"
    )


def test_dump_stops_at_a_corrupt_record(tmp_path: Path) -> None:
    folder = build(tmp_path / "log")
    sealed = segments(folder)[1]
    rec = records(sealed)[4]
    flip(sealed, rec.position + 60)
    run = narad("dump", folder, "--from", PER_SEGMENT - 2)
    assert run.returncode == 1
    offsets = [int(m.group(1)) for m in map(LINE.match, lines(run.stdout)) if m]
    assert offsets == list(range(PER_SEGMENT - 2, rec.offset))
    assert lines(run.stderr) == [f"error: {sealed} position {rec.position}: CRC mismatch; stopping"]


def test_dump_stops_at_a_torn_tail(tmp_path: Path) -> None:
    folder = build(tmp_path / "log", count=10)
    last = segments(folder)[-1]
    rec = records(last)[-1]
    os.truncate(last, rec.position + 10)
    run = narad("dump", folder)
    assert run.returncode == 1 and len(lines(run.stdout)) == 9
    assert lines(run.stderr) == [
        f"error: {last} position {rec.position}: record header cut off by the end of the file: "
        "10 of 46 bytes; stopping"
    ]
    assert last.stat().st_size == rec.position + 10  # dump never repairs


def test_dump_reads_a_zero_tail_of_the_last_segment_as_its_end(tmp_path: Path) -> None:
    """The active segment is grown ahead of its writes with zero bytes (a running or
    crashed server leaves them): not an error there; in a sealed segment it is."""
    folder = build(tmp_path / "log")
    first, last = segments(folder)[0], segments(folder)[-1]
    with last.open("ab") as f:
        f.write(bytes(5000))
    run = narad("dump", folder)
    assert run.returncode == 0 and run.stderr == "" and len(lines(run.stdout)) == 200
    with first.open("ab") as f:
        f.write(bytes(100))
    assert narad("dump", folder).returncode == 1


# -- the progress bar ----------------------------------------------------------------


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_progress_draws_on_a_terminal() -> None:
    out, clock = Terminal(), Clock()
    with Progress(4 << 20, label="checking", stream=out, clock=clock) as bar:
        clock.now += 1.0
        bar.advance(1 << 20)
        drawn = out.getvalue().split("\r")[-1]
        assert drawn.startswith("checking [###.........]  25.0% 1.0 MiB / 4.0 MiB")
        assert "1.0 MiB/s ETA 0:03" in drawn
    assert out.getvalue().endswith("\r\x1b[K")  # the line is erased on exit


def test_progress_redraws_at_most_ten_times_a_second() -> None:
    out, clock = Terminal(), Clock()
    with Progress(1000, stream=out, clock=clock) as bar:
        for _ in range(50):
            clock.now += 0.001
            bar.advance(1)
        assert out.getvalue().count("%") == 1  # drawn on entry only
        clock.now += 0.1
        bar.advance(1)
        assert out.getvalue().count("%") == 2
    assert bar.done == 51


def test_progress_is_silent_off_a_terminal() -> None:
    out = io.StringIO()
    with Progress(10, stream=out) as bar:
        bar.advance(10)
    assert out.getvalue() == "" and bar.done == 10


def test_progress_edges() -> None:
    bar = Progress(0, stream=io.StringIO(), clock=Clock())
    assert "100.0%" in bar.render(100.0) and "ETA -:--" in bar.render(100.0)
    assert human_bytes(5) == "5 B" and human_bytes(1536) == "1.5 KiB"
    assert human_duration(59) == "0:59" and human_duration(3723) == "1:02:03"
