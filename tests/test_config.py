"""narad/config/: the settings table, config files, CONFIG GET / SET / REWRITE.

Error texts are compared with a real redis-server 7.0 where both have the setting
(skipped when redis-server is not installed).
"""

from __future__ import annotations

import fnmatch
import os
import stat
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from hypothesis import given
from hypothesis import strategies as st

from narad.config import Config, ConfigError
from narad.config.example import render_example_config
from narad.config.kinds import BadValue, BufferLimit, OutputBufferLimits
from narad.config.lexer import quote, split_args
from narad.config.numbers import GB, KB, LLONG_MAX, MB, format_memory, parse_memory
from narad.config.rewrite import REWRITE_MARK
from narad.config.settings import SETTINGS, Setting, lookup
from narad.glob import match_text as glob_match
from tests.servers import RedisProcess, have_redis_server

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "conf" / "narad.conf"

needs_redis = pytest.mark.skipif(not have_redis_server(), reason="redis-server is not installed")


def write_conf(tmp_path: Path, text: str, name: str = "narad.conf") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def load_error(tmp_path: Path, text: str) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        Config.load(write_conf(tmp_path, text))
    return info.value


def set_error(config: Config, *pairs: tuple[str, str]) -> str:
    with pytest.raises(ConfigError) as info:
        config.set(pairs)
    return str(info.value)


# -- Defaults and the table -------------------------------------------------------------


def test_defaults() -> None:
    config = Config.load()
    assert config.path is None
    assert config["port"] == 6379
    assert config["bind"] == "127.0.0.1"
    assert config["protected-mode"] is True
    assert config["requirepass"] == ""
    assert config["maxclients"] == 10000
    assert config["timeout"] == 0
    assert config["tcp-keepalive"] == 300
    assert config["databases"] == 16
    assert config["dir"] == "./narad-data"
    assert config["loglevel"] == "notice"
    assert config["logfile"] == ""
    assert config["daemonize"] is False
    assert config["pidfile"] == ""
    assert config["enable-debug-command"] == "no"
    assert config["proto-max-bulk-len"] == 512 * MB
    assert config["client-query-buffer-limit"] == GB
    assert config["fsync"] == "always"
    assert config["appendonly"] is True
    assert config["save"] == ""
    assert config["segment-bytes"] == 64 * MB
    assert config["segment-ms"] == 604800000
    assert config["retention-ms"] == 0
    assert config["retention-bytes"] == 0
    assert config["stream-node-max-entries"] == 100
    assert config["stream-node-max-bytes"] == 4096
    assert config["slowlog-log-slower-than"] == 10000
    assert config["slowlog-max-len"] == 128
    assert config["latency-tracking"] is True
    assert config["latency-tracking-info-percentiles"] == (50.0, 99.0, 99.9)
    assert config["min-replicas-to-ack"] == 0
    assert config["replica-read-only"] is True


def test_default_output_buffer_limits() -> None:
    limits = Config()["client-output-buffer-limit"]
    assert limits == OutputBufferLimits(
        normal=BufferLimit(GB, 0, 0),
        replica=BufferLimit(256 * MB, 64 * MB, 60),
        pubsub=BufferLimit(32 * MB, 8 * MB, 60),
    )
    assert isinstance(limits, OutputBufferLimits)
    assert limits.normal_hard_bytes == GB


def test_names_and_aliases_are_unique_and_lower_case() -> None:
    names = [name for s in SETTINGS for name in s.names()]
    assert len(names) == len(set(names))
    assert all(name == name.lower() for name in names)
    assert [s.name for s in Config().settings()] == [s.name for s in SETTINGS]


def test_aliases_read_the_same_value() -> None:
    config = Config()
    assert config["appendfsync"] == config["fsync"] == config["FSYNC"]
    assert config["slave-read-only"] is config["replica-read-only"]
    assert lookup("AppendFsync") is lookup("fsync")


def test_unknown_name_is_a_key_error() -> None:
    with pytest.raises(KeyError):
        Config()["maxmemory"]


def test_immutable_settings() -> None:
    fixed = {s.name for s in SETTINGS if not s.mutable}
    assert fixed == {
        "databases", "dir", "logfile", "daemonize", "pidfile", "enable-debug-command", "replicaof",
        "aclfile", "metrics-port", "metrics-bind",
    }


@pytest.mark.parametrize("setting", SETTINGS, ids=lambda s: s.name)
def test_every_default_survives_its_file_form(setting: Setting, tmp_path: Path) -> None:
    lines = "".join(f"{setting.name} {args}\n" for args in setting.kind.write(setting.default))
    assert Config.load(write_conf(tmp_path, lines))[setting.name] == setting.default


def test_sensitive_marks_the_password() -> None:
    assert [s.name for s in SETTINGS if s.sensitive] == [
        "requirepass", "tls-key-file-pass", "tls-client-key-file-pass", "masterauth",
    ]


# -- Memory sizes and integers ----------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "count"),
    [
        ("0", 0), ("123", 123), ("5b", 5), ("1k", 1000), ("1kb", 1024), ("1K", 1000),
        ("64KB", 64 * KB), ("2m", 2_000_000), ("512mb", 512 * MB), ("3g", 3_000_000_000),
        ("1gb", GB), ("1Gb", GB), ("007", 7),
    ],
)
def test_parse_memory(text: str, count: int) -> None:
    assert parse_memory(text) == count


@pytest.mark.parametrize("text", ["", "kb", "-1", "+1", " 1", "1 ", "1.5mb", "1tb", "1 mb", "1kbb"])
def test_parse_memory_refuses(text: str) -> None:
    with pytest.raises(ValueError, match="argument must be a memory value"):
        parse_memory(text)


def test_format_memory() -> None:
    assert format_memory(0) == "0"
    assert format_memory(1000) == "1000"
    assert format_memory(4096) == "4kb"
    assert format_memory(64 * MB) == "64mb"
    assert format_memory(3 * GB) == "3gb"
    assert format_memory(GB + KB) == f"{(GB + KB) // KB}kb"


@given(st.integers(min_value=0, max_value=LLONG_MAX))
def test_format_memory_parses_back(count: int) -> None:
    assert parse_memory(format_memory(count)) == count


# -- Splitting and quoting --------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "args"),
    [
        ("port 6379", ["port", "6379"]),
        ("  port\t\t6379  ", ["port", "6379"]),
        ("", []),
        ("   ", []),
        ('requirepass "a b"', ["requirepass", "a b"]),
        ('requirepass ""', ["requirepass", ""]),
        ("requirepass ''", ["requirepass", ""]),
        (r'x "\n\r\t\b\a\"\\\q"', ["x", '\n\r\t\b\a"\\q']),
        (r'x "\x41\x7a\x4"', ["x", "Azx4"]),
        (r'x "\xc3\xa9"', ["x", "é"]),
        (r"x 'it\'s' 'a\nb'", ["x", "it's", "a\\nb"]),
        ('x a"b c"', ["x", "ab c"]),
        ("x a'b'c", None),
        ('x "a"b', None),
        ('x "abc', None),
        ("x 'abc", None),
        ('x "a"\t"b"', ["x", "a", "b"]),
        ("x \\\\", ["x", "\\\\"]),
        ("x # not a comment", ["x", "#", "not", "a", "comment"]),
    ],
)
def test_split_args(line: str, args: list[str] | None) -> None:
    assert split_args(line) == args


def test_split_args_keeps_bytes_that_are_not_utf8() -> None:
    (arg,) = split_args(r'"\xff\x00"') or [""]
    assert arg.encode("utf-8", "surrogateescape") == b"\xff\x00"


def test_quote() -> None:
    assert quote("") == '""'
    assert quote("plain") == '"plain"'
    assert quote('a "b"\n\\') == r'"a \"b\"\n\\"'
    assert quote("é\x01") == r'"\xc3\xa9\x01"'


@given(st.binary())
def test_quote_splits_back(data: bytes) -> None:
    text = data.decode("utf-8", "surrogateescape")
    assert split_args(quote(text)) == [text]
    assert split_args(f"name {quote(text)} {quote(text)}") == ["name", text, text]


# -- Globs ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pattern", "name", "matches"),
    [
        ("*", "port", True),
        ("max*", "maxclients", True),
        ("max*", "xmaxclients", False),
        ("?ort", "port", True),
        ("?ort", "sport", False),
        ("[pq]ort", "port", True),
        ("[pq]ort", "sort", False),
        ("[^s]ort", "port", True),
        ("[^s]ort", "sort", False),
        ("[a-q]ort", "port", True),
        ("[q-a]ort", "port", True),
        ("[r-z]ort", "port", False),
        ("PORT", "port", True),
        ("P[O]rT", "port", True),
        ("[A-Z]ort", "port", True),
        ("\\port", "port", True),
        ("p\\*rt", "port", False),
        ("p\\*rt", "p*rt", True),
        ("[\\]]", "]", True),
        ("[\\P]ort", "port", False),
        ("p[o", "po", True),
        ("p[o", "port", False),
        ("*-*-*", "slowlog-log-slower-than", True),
        ("*read-only", "replica-read-only", True),
        ("port*", "port", True),
        ("port?", "port", False),
        ("*a*a*a*a*a*a*a*a*a*a*b", "a" * 40, False),
    ],
)
def test_glob_match(pattern: str, name: str, matches: bool) -> None:
    assert glob_match(pattern, name) is matches


@given(st.text("ab*?", max_size=8), st.text("abAB", min_size=1, max_size=8))
def test_glob_agrees_with_fnmatch_on_stars_and_marks(pattern: str, name: str) -> None:
    assert glob_match(pattern, name) == fnmatch.fnmatchcase(name.lower(), pattern)


# -- Config files -----------------------------------------------------------------------


def test_load_file(tmp_path: Path) -> None:
    path = write_conf(
        tmp_path,
        "# a comment\n"
        "\n"
        "   # an indented comment\n"
        "PORT 7000\r\n"
        "\tbind 127.0.0.1 ::1\n"
        'requirepass "se cret\\n"\n'
        "proto-max-bulk-len 2mb\n"
        "appendfsync everysec\n"
        "Protected-Mode NO\n"
        "loglevel WARNING\n"
        "client-output-buffer-limit pubsub 64mb 16mb 30\n"
        "port 7001\n",
    )
    config = Config.load(path)
    assert config.path == path.absolute()
    assert config["port"] == 7001
    assert config["bind"] == "127.0.0.1 ::1"
    assert config["requirepass"] == "se cret\n"
    assert config["proto-max-bulk-len"] == 2 * MB
    assert config["fsync"] == "everysec"
    assert config["protected-mode"] is False
    assert config["loglevel"] == "warning"
    limits = config["client-output-buffer-limit"]
    assert isinstance(limits, OutputBufferLimits)
    assert limits.pubsub == BufferLimit(64 * MB, 16 * MB, 30)
    assert limits.normal == BufferLimit(GB, 0, 0)


def test_load_relative_path_is_kept_absolute(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_conf(tmp_path, "port 7000\n")
    monkeypatch.chdir(tmp_path)
    config = Config.load("narad.conf")
    assert config.path == tmp_path / "narad.conf"


def test_save_lines_add_up(tmp_path: Path) -> None:
    config = Config.load(write_conf(tmp_path, "save 900 1\nsave 300 10\nsave '60 10000'\n"))
    assert config["save"] == "900 1 300 10 60 10000"
    config = Config.load(write_conf(tmp_path, 'save 900 1\nsave ""\n'))
    assert config["save"] == ""


def test_multi_argument_setting_given_one_argument_is_split_again(tmp_path: Path) -> None:
    text = 'bind "127.0.0.1 ::1"\nclient-output-buffer-limit "normal 1mb 2mb 3"\n'
    config = Config.load(write_conf(tmp_path, text))
    assert config["bind"] == "127.0.0.1 ::1"
    assert config.show("client-output-buffer-limit").startswith("normal 1048576 2097152 3 ")


def test_empty_bind_means_no_address(tmp_path: Path) -> None:
    assert Config.load(write_conf(tmp_path, 'bind ""\n'))["bind"] == ""


def test_load_error_names_file_and_line(tmp_path: Path) -> None:
    error = load_error(tmp_path, "# comment\nport 7000\nfoo bar\n")
    assert error.line == 3
    assert error.path == str(tmp_path / "narad.conf")
    assert error.reason == "Bad directive or wrong number of arguments"
    assert str(error) == (
        f"Reading the configuration file {tmp_path / 'narad.conf'}, at line 3\n"
        ">>> 'foo bar'\n"
        "Bad directive or wrong number of arguments"
    )


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ("foo bar", "Bad directive or wrong number of arguments"),
        ("port", "wrong number of arguments"),
        ("port 1 2", "wrong number of arguments"),
        ("port 7000 # the port", "wrong number of arguments"),
        ("port abc", "argument couldn't be parsed into an integer"),
        ("port 70000", "argument must be between 0 and 65535 inclusive"),
        ('port "12', "Unbalanced quotes in configuration line"),
        ('bind "a"b', "Unbalanced quotes in configuration line"),
        ("maxclients 0", "argument must be between 1 and 4294967295 inclusive"),
        ("protected-mode maybe", "argument must be 'yes' or 'no'"),
        (
            "loglevel loud",
            "argument(s) must be one of the following: debug, verbose, notice, warning, nothing",
        ),
        ("proto-max-bulk-len 1zb", "argument must be a memory value"),
        ("save 1 2 3", "Invalid save parameters"),
        ("save 0 1", "Invalid save parameters"),
        (
            "client-output-buffer-limit normal 1",
            "Wrong number of arguments in buffer limit configuration.",
        ),
        (
            "client-output-buffer-limit master 1 2 3",
            "Invalid client class specified in buffer limit configuration.",
        ),
        ("appendonly no", "argument must be 'yes' (Narad always writes its log)"),
        ("daemonize yes", "argument must be 'no' (Narad does not daemonize)"),
        ("include other.conf", "include is not supported: keep all settings in one file"),
        ("rename-command DEBUG nodebug", "Bad directive or wrong number of arguments"),
        ("bind" + " 10.0.0.1" * 17, "Too many bind addresses specified."),
    ],
)
def test_load_errors(tmp_path: Path, line: str, reason: str) -> None:
    error = load_error(tmp_path, f"port 7000\n{line}\n")
    assert (error.line, error.reason) == (2, reason)
    assert f">>> '{line}'" in str(error)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        Config.load(tmp_path / "nope.conf")
    assert str(info.value) == (
        f"can't open config file '{tmp_path / 'nope.conf'}': No such file or directory"
    )


# -- Overrides --------------------------------------------------------------------------


def test_overrides_come_after_the_file(tmp_path: Path) -> None:
    path = write_conf(tmp_path, "port 7000\nsave 900 1\ntimeout 5\n")
    config = Config.load(
        path, [("port", "7001"), ("--save", ""), ("bind", "127.0.0.1 ::1"), ("requirepass", "a b")]
    )
    assert config["port"] == 7001
    assert config["save"] == ""
    assert config["bind"] == "127.0.0.1 ::1"
    assert config["requirepass"] == "a b"
    assert config["timeout"] == 5


def test_overrides_without_a_file() -> None:
    config = Config.load(None, [("segment-bytes", "1mb"), ("fsync", "everysec")])
    assert config.path is None
    assert config["segment-bytes"] == MB
    assert config["appendfsync"] == "everysec"


def test_override_errors() -> None:
    with pytest.raises(ConfigError) as info:
        Config.load(None, [("port", "x")])
    assert str(info.value) == (
        "Reading the command line, at option --port\n"
        ">>> 'port x'\n"
        "argument couldn't be parsed into an integer"
    )
    with pytest.raises(ConfigError, match="Bad directive"):
        Config.load(None, [("--maxmemory", "1gb")])


def test_overrides_of_several_words_read_as_file_lines() -> None:
    config = Config.load(
        None,
        [
            ("--bind", ["127.0.0.1", "::1"]),
            ("--save", ["900", "1"]),
            ("--save", ["300 10"]),  # a later one adds, as a later line of a file does
            ("--client-output-buffer-limit", ["pubsub", "1mb", "1mb", "5"]),
            ("--requirepass", ["a b"]),
        ],
    )
    assert config["bind"] == "127.0.0.1 ::1"
    assert config["save"] == "900 1 300 10"
    assert config.show("client-output-buffer-limit").endswith(" pubsub 1048576 1048576 5")
    assert config["requirepass"] == "a b"
    with pytest.raises(ConfigError) as info:
        Config.load(None, [("--port", ["1", "2"])])
    assert str(info.value) == (
        "Reading the command line, at option --port\n>>> 'port 1 2'\nwrong number of arguments"
    )


# -- CONFIG GET -------------------------------------------------------------------------


def test_get_renders_like_redis() -> None:
    config = Config()
    assert dict(config.get(["*"])) == {
        "port": "6379",
        "bind": "127.0.0.1",
        "protected-mode": "yes",
        "requirepass": "",
        "aclfile": "",
        "acllog-max-len": "128",
        "maxclients": "10000",
        "timeout": "0",
        "tcp-keepalive": "300",
        "tls-port": "0",
        "tls-cert-file": "",
        "tls-key-file": "",
        "tls-key-file-pass": "",
        "tls-client-cert-file": "",
        "tls-client-key-file": "",
        "tls-client-key-file-pass": "",
        "tls-ca-cert-file": "",
        "tls-ca-cert-dir": "",
        "tls-auth-clients": "yes",
        "tls-replication": "no",
        "tls-protocols": "",
        "tls-ciphers": "",
        "tls-ciphersuites": "",
        "tls-prefer-server-ciphers": "no",
        "databases": "16",
        "dir": "./narad-data",
        "loglevel": "notice",
        "logfile": "",
        "log-format": "text",
        "daemonize": "no",
        "pidfile": "",
        "enable-debug-command": "no",
        "shutdown-timeout": "10",
        "proto-max-bulk-len": "536870912",
        "client-query-buffer-limit": "1073741824",
        "client-output-buffer-limit":
            "normal 1073741824 0 0 slave 268435456 67108864 60 pubsub 33554432 8388608 60",
        "fsync": "always",
        "appendfsync": "always",
        "appendonly": "yes",
        "save": "",
        "journal-segment-bytes": "67108864",
        "segment-bytes": "67108864",
        "segment-ms": "604800000",
        "retention-ms": "0",
        "retention-bytes": "0",
        "queue-retention": "604800000",
        "checkpoint-bytes": "134217728",
        "checkpoint-seconds": "60",
        "stream-node-max-entries": "100",
        "stream-node-max-bytes": "4096",
        "slowlog-log-slower-than": "10000",
        "slowlog-max-len": "128",
        "latency-tracking": "yes",
        "latency-tracking-info-percentiles": "50 99 99.9",
        "replicaof": "",
        "slaveof": "",
        "masterauth": "",
        "masteruser": "",
        "replica-announce-ip": "",
        "slave-announce-ip": "",
        "replica-announce-port": "0",
        "slave-announce-port": "0",
        "replica-priority": "100",
        "slave-priority": "100",
        "replica-read-only": "yes",
        "slave-read-only": "yes",
        "min-replicas-to-ack": "0",
        "min-replicas-timeout": "10000",
        "min-replicas-max-lag": "10",
        "min-slaves-max-lag": "10",
        "repl-backlog-size": "268435456",
        "repl-timeout": "60",
        "repl-ping-replica-period": "1",
        "repl-ping-slave-period": "1",
        "metrics-port": "auto",
        "metrics-bind": "",
        "metrics-per-queue": "yes",
        "metrics-auth": "users",
    }


@pytest.mark.parametrize(
    ("patterns", "names"),
    [
        (["max*"], ["maxclients"]),
        (["?ort"], ["port"]),
        (["[pq]ort"], ["port"]),
        (["PORT"], ["PORT"]),
        (["P?RT"], ["port"]),
        (["port", "PORT", "p*t"], ["port"]),
        (["nothing-like-this"], []),
        (["\\port"], []),
        (["fsync"], ["fsync"]),
        (["appendfsync"], ["appendfsync"]),
        (["*fsync"], ["fsync", "appendfsync"]),
        (["*read-only"], ["replica-read-only", "slave-read-only"]),
        (["timeout", "max*", "timeout"], ["timeout", "maxclients"]),
        (
            ["slowlog-*", "*-max-len"],
            ["slowlog-log-slower-than", "slowlog-max-len", "acllog-max-len"],
        ),
        (["stream-node-max-*"], ["stream-node-max-entries", "stream-node-max-bytes"]),
    ],
)
def test_get_patterns(patterns: list[str], names: list[str]) -> None:
    assert [name for name, _ in Config().get(patterns)] == names


# -- CONFIG SET -------------------------------------------------------------------------


def test_set_each_kind() -> None:
    config = Config()
    config.set([
        ("port", "7000"),
        ("protected-mode", "NO"),
        ("proto-max-bulk-len", "2mb"),
        ("loglevel", "Warning"),
        ("requirepass", "two words"),
        ("bind", "127.0.0.1 ::1"),
        ("save", "900 1 300 10"),
        ("client-output-buffer-limit", "normal 1mb 2mb 3 slave 4mb 5mb 6"),
    ])
    assert config["port"] == 7000
    assert config["protected-mode"] is False
    assert config["proto-max-bulk-len"] == 2 * MB
    assert config["loglevel"] == "warning"
    assert config["requirepass"] == "two words"
    assert config["bind"] == "127.0.0.1 ::1"
    assert config["save"] == "900 1 300 10"
    assert config.show("client-output-buffer-limit") == (
        "normal 1048576 2097152 3 slave 4194304 5242880 6 pubsub 33554432 8388608 60"
    )


def test_set_through_an_alias() -> None:
    config = Config()
    config.set([("APPENDFSYNC", "no"), ("slave-read-only", "yes")])
    assert config["fsync"] == "no"
    assert config["replica-read-only"] is True


def test_set_empty_multi_argument_values() -> None:
    config = Config()
    config.set([("save", "900 1")])
    config.set([("save", ""), ("bind", ""), ("client-output-buffer-limit", "")])
    assert config["save"] == ""
    assert config["bind"] == ""
    assert config["client-output-buffer-limit"] == Config()["client-output-buffer-limit"]


def test_set_bind_drops_empty_pieces() -> None:
    config = Config()
    config.set([("bind", "127.0.0.1  ::1")])
    assert config["bind"] == "127.0.0.1 ::1"


def test_set_appendonly_yes_is_accepted() -> None:
    config = Config()
    config.set([("appendonly", "yes")])
    assert config["appendonly"] is True


SET_ERRORS = [
    ([("foo", "1")], "Unknown option or number of arguments for CONFIG SET - 'foo'"),
    (
        [("port", "6380"), ("foo", "1")],
        "Unknown option or number of arguments for CONFIG SET - 'foo'",
    ),
    (
        [("databases", "3")],
        "CONFIG SET failed (possibly related to argument 'databases') - can't set immutable config",
    ),
    (
        [("Databases", "3"), ("foo", "1")],
        "CONFIG SET failed (possibly related to argument 'Databases') - can't set immutable config",
    ),
    (
        [("daemonize", "yes")],
        "CONFIG SET failed (possibly related to argument 'daemonize') - can't set immutable config",
    ),
    (
        [("enable-debug-command", "yes")],
        "CONFIG SET failed (possibly related to argument 'enable-debug-command') - "
        "can't set immutable config",
    ),
    (
        [("logfile", "x")],
        "CONFIG SET failed (possibly related to argument 'logfile') - can't set immutable config",
    ),
    (
        [("pidfile", "x")],
        "CONFIG SET failed (possibly related to argument 'pidfile') - can't set immutable config",
    ),
    (
        [("port", "1"), ("PORT", "2")],
        "CONFIG SET failed (possibly related to argument 'PORT') - duplicate parameter",
    ),
    (
        [("port", "abc")],
        "CONFIG SET failed (possibly related to argument 'port') - "
        "argument couldn't be parsed into an integer",
    ),
    (
        [("Port", "01")],
        "CONFIG SET failed (possibly related to argument 'port') - "
        "argument couldn't be parsed into an integer",
    ),
    (
        [("port", "70000")],
        "CONFIG SET failed (possibly related to argument 'port') - "
        "argument must be between 0 and 65535 inclusive",
    ),
    (
        [("maxclients", "-1")],
        "CONFIG SET failed (possibly related to argument 'maxclients') - "
        "argument must be between 1 and 4294967295 inclusive",
    ),
    (
        [("timeout", "99999999999999999999")],
        "CONFIG SET failed (possibly related to argument 'timeout') - "
        "argument couldn't be parsed into an integer",
    ),
    (
        [("timeout", "-1")],
        "CONFIG SET failed (possibly related to argument 'timeout') - "
        "argument must be between 0 and 2147483647 inclusive",
    ),
    (
        [("tcp-keepalive", "-1")],
        "CONFIG SET failed (possibly related to argument 'tcp-keepalive') - "
        "argument must be between 0 and 2147483647 inclusive",
    ),
    (
        [("slowlog-max-len", "-1")],
        "CONFIG SET failed (possibly related to argument 'slowlog-max-len') - "
        "argument must be between 0 and 9223372036854775807 inclusive",
    ),
    (
        [("slowlog-log-slower-than", "-2")],
        "CONFIG SET failed (possibly related to argument 'slowlog-log-slower-than') - "
        "argument must be between -1 and 9223372036854775807 inclusive",
    ),
    (
        [("stream-node-max-entries", "x")],
        "CONFIG SET failed (possibly related to argument 'stream-node-max-entries') - "
        "argument couldn't be parsed into an integer",
    ),
    (
        [("stream-node-max-bytes", "-5")],
        "CONFIG SET failed (possibly related to argument 'stream-node-max-bytes') - "
        "argument must be a memory value",
    ),
    (
        [("protected-mode", "maybe")],
        "CONFIG SET failed (possibly related to argument 'protected-mode') - "
        "argument must be 'yes' or 'no'",
    ),
    (
        [("latency-tracking", "1")],
        "CONFIG SET failed (possibly related to argument 'latency-tracking') - "
        "argument must be 'yes' or 'no'",
    ),
    (
        [("latency-tracking-info-percentiles", "50 x")],
        "CONFIG SET failed (possibly related to argument 'latency-tracking-info-percentiles') - "
        "Invalid latency-tracking-info-percentiles parameters",
    ),
    (
        [("latency-tracking-info-percentiles", "100.5")],
        "CONFIG SET failed (possibly related to argument 'latency-tracking-info-percentiles') - "
        "latency-tracking-info-percentiles parameters should sit between [0.0,100.0]",
    ),
    (
        [("latency-tracking-info-percentiles", "-1")],
        "CONFIG SET failed (possibly related to argument 'latency-tracking-info-percentiles') - "
        "latency-tracking-info-percentiles parameters should sit between [0.0,100.0]",
    ),
    (
        [("replica-read-only", "maybe")],
        "CONFIG SET failed (possibly related to argument 'replica-read-only') - "
        "argument must be 'yes' or 'no'",
    ),
    (
        [("slave-read-only", "maybe")],
        "CONFIG SET failed (possibly related to argument 'slave-read-only') - "
        "argument must be 'yes' or 'no'",
    ),
    (
        [("appendfsync", "sometimes")],
        "CONFIG SET failed (possibly related to argument 'appendfsync') - "
        "argument(s) must be one of the following: everysec, always, no",
    ),
    (
        [("proto-max-bulk-len", "1zb")],
        "CONFIG SET failed (possibly related to argument 'proto-max-bulk-len') - "
        "argument must be a memory value",
    ),
    (
        [("proto-max-bulk-len", "10")],
        "CONFIG SET failed (possibly related to argument 'proto-max-bulk-len') - "
        "argument must be between 1048576 and 9223372036854775807 inclusive",
    ),
    (
        [("client-query-buffer-limit", "1k")],
        "CONFIG SET failed (possibly related to argument 'client-query-buffer-limit') - "
        "argument must be between 1048576 and 9223372036854775807 inclusive",
    ),
    (
        [("client-output-buffer-limit", "normal 1 2")],
        "CONFIG SET failed (possibly related to argument 'client-output-buffer-limit') - "
        "Wrong number of arguments in buffer limit configuration.",
    ),
    (
        [("client-output-buffer-limit", "bogus 1 2 3")],
        "CONFIG SET failed (possibly related to argument 'client-output-buffer-limit') - "
        "Invalid client class specified in buffer limit configuration.",
    ),
    (
        [("client-output-buffer-limit", "master 1mb 0 0")],
        "CONFIG SET failed (possibly related to argument 'client-output-buffer-limit') - "
        "Invalid client class specified in buffer limit configuration.",
    ),
    (
        [("client-output-buffer-limit", "normal x 2 3")],
        "CONFIG SET failed (possibly related to argument 'client-output-buffer-limit') - "
        "Error in hard, soft or soft_seconds setting in buffer limit configuration.",
    ),
    (
        [("client-output-buffer-limit", "normal 1mb 0 -1")],
        "CONFIG SET failed (possibly related to argument 'client-output-buffer-limit') - "
        "Error in hard, soft or soft_seconds setting in buffer limit configuration.",
    ),
    (
        [("save", "abc")],
        "CONFIG SET failed (possibly related to argument 'save') - Invalid save parameters",
    ),
    (
        [("save", "1 2 3")],
        "CONFIG SET failed (possibly related to argument 'save') - Invalid save parameters",
    ),
    (
        [("save", "0 1")],
        "CONFIG SET failed (possibly related to argument 'save') - Invalid save parameters",
    ),
    (
        [("save", "10 -1")],
        "CONFIG SET failed (possibly related to argument 'save') - Invalid save parameters",
    ),
]

NARAD_ONLY_SET_ERRORS = [
    (
        [("min-replicas-to-ack", "1001")],
        "CONFIG SET failed (possibly related to argument 'min-replicas-to-ack') - "
        "argument must be between 0 and 1000 inclusive",
    ),
    (
        [("slave-read-only", "no")],
        "CONFIG SET failed (possibly related to argument 'slave-read-only') - "
        "argument must be 'yes' (a replica's history is its leader's)",
    ),
    (
        [("replicaof", "127.0.0.1 6379")],
        "CONFIG SET failed (possibly related to argument 'replicaof') - "
        "can't set immutable config",
    ),
    (
        [("fsync", "sometimes")],
        "CONFIG SET failed (possibly related to argument 'fsync') - "
        "argument(s) must be one of the following: everysec, always, no",
    ),
    (
        [("fsync", "no"), ("appendfsync", "always")],
        "CONFIG SET failed (possibly related to argument 'appendfsync') - duplicate parameter",
    ),
    (
        [("dir", "/tmp")],
        "CONFIG SET failed (possibly related to argument 'dir') - can't set immutable config",
    ),
    (
        [("appendonly", "no")],
        "CONFIG SET failed (possibly related to argument 'appendonly') - "
        "argument must be 'yes' (Narad always writes its log)",
    ),
    (
        [("loglevel", "loud")],
        "CONFIG SET failed (possibly related to argument 'loglevel') - "
        "argument(s) must be one of the following: debug, verbose, notice, warning, nothing",
    ),
    (
        [("segment-bytes", "100")],
        "CONFIG SET failed (possibly related to argument 'segment-bytes') - "
        "argument must be between 1024 and 9223372036854775807 inclusive",
    ),
    (
        [("retention-ms", "-1")],
        "CONFIG SET failed (possibly related to argument 'retention-ms') - "
        "argument must be between 0 and 9223372036854775807 inclusive",
    ),
]


@pytest.mark.parametrize(("pairs", "text"), SET_ERRORS + NARAD_ONLY_SET_ERRORS)
def test_set_errors(pairs: list[tuple[str, str]], text: str) -> None:
    config = Config()
    before = config.get(["*"])
    assert set_error(config, *pairs) == text
    assert config.get(["*"]) == before


def test_set_is_all_or_nothing() -> None:
    config = Config()
    before = config.get(["*"])
    error = set_error(
        config, ("port", "7000"), ("client-output-buffer-limit", "normal 1mb 0 0"),
        ("timeout", "5"), ("maxclients", "0"),
    )
    assert "argument 'maxclients'" in error
    assert config.get(["*"]) == before


def test_set_reports_the_first_problem_in_order() -> None:
    config = Config()
    assert "'foo'" in set_error(config, ("foo", "1"), ("databases", "3"))
    assert "'databases'" in set_error(config, ("databases", "3"), ("foo", "1"))
    assert "'timeout'" in set_error(config, ("timeout", "x"), ("maxclients", "0"))


def test_error_reason_is_kept_apart() -> None:
    with pytest.raises(ConfigError) as info:
        Config().set([("port", "x")])
    assert info.value.reason == "argument couldn't be parsed into an integer"


def test_on_change_is_called_after_the_change() -> None:
    config = Config()
    seen: list[tuple[str, object, object]] = []
    config.on_change("port", lambda value: seen.append(("port", value, config["port"])))
    config.on_change("appendfsync", lambda value: seen.append(("fsync", value, config["fsync"])))
    config.set([("fsync", "no"), ("port", "7000"), ("timeout", "3")])
    assert seen == [("fsync", "no", "no"), ("port", 7000, 7000)]


def test_on_change_gets_typed_values() -> None:
    config = Config()
    seen: list[object] = []
    config.on_change("client-output-buffer-limit", seen.append)
    config.on_change("protected-mode", seen.append)
    config.set([("client-output-buffer-limit", "normal 2mb 0 0"), ("protected-mode", "no")])
    limits, protected = seen
    assert isinstance(limits, OutputBufferLimits)
    assert limits.normal_hard_bytes == 2 * MB
    assert protected is False


def test_on_change_not_called_when_set_fails() -> None:
    config = Config()
    seen: list[object] = []
    config.on_change("port", seen.append)
    with pytest.raises(ConfigError):
        config.set([("port", "7000"), ("timeout", "x")])
    assert seen == []


def test_a_value_that_cannot_be_applied_undoes_the_whole_set() -> None:
    config = Config()
    seen: list[tuple[str, object]] = []
    config.on_change("timeout", lambda value: seen.append(("timeout", value)))

    def listen(value: object) -> None:
        seen.append(("port", value))
        if value == 7000:
            raise BadValue("Unable to listen on this port. Check server logs.")

    config.on_change("port", listen)
    with pytest.raises(ConfigError) as info:
        config.set([("timeout", "5"), ("PORT", "7000"), ("maxclients", "9")])
    assert str(info.value) == (
        "CONFIG SET failed (possibly related to argument 'port') - "
        "Unable to listen on this port. Check server logs."
    )
    # The old values are back, and what ran was run again with them.
    assert (config["timeout"], config["port"], config["maxclients"]) == (0, 6379, 10000)
    assert seen == [("timeout", 5), ("port", 7000), ("timeout", 0), ("port", 6379)]


# Mutable settings the server reads afresh each time it uses them, or that have no
# effect to apply (docs/settings.md); every other mutable setting must be applied by
# a callback when CONFIG SET changes it. loglevel and log-format are applied by
# narad/serve.py.
READ_WHERE_USED = {
    "protected-mode", "timeout", "tcp-keepalive", "shutdown-timeout",
    "slowlog-max-len", "latency-tracking-info-percentiles",
    "appendonly", "save", "stream-node-max-bytes", "replica-read-only",
    "checkpoint-bytes", "checkpoint-seconds", "masterauth", "masteruser",
    "replica-announce-ip", "replica-announce-port", "replica-priority", "min-replicas-timeout",
    "min-replicas-max-lag", "repl-timeout", "repl-ping-replica-period",
    "metrics-per-queue", "metrics-auth",
}


def test_every_mutable_setting_is_applied_at_runtime_or_read_where_used() -> None:
    import narad.commands  # noqa: F401 - fills the command table
    from narad.server import Server

    config = Config()
    Server(config)
    applied = set(config._callbacks) | {"loglevel", "log-format"}
    mutable = {s.name for s in SETTINGS if s.mutable}
    assert applied <= mutable
    assert mutable - applied == READ_WHERE_USED


def test_on_change_unknown_name() -> None:
    with pytest.raises(KeyError):
        Config().on_change("maxmemory", print)


# -- CONFIG REWRITE ---------------------------------------------------------------------


def test_rewrite_without_a_file() -> None:
    with pytest.raises(ConfigError) as info:
        Config().rewrite()
    assert str(info.value) == "The server is running without a config file"


ORIGINAL = """\
# My Narad
# ports and such
port 7000 \x20

# durability
appendfsync everysec


save 900 1
save 300 10
requirepass 'old'
timeout 0
"""


def test_rewrite_updates_in_place_and_keeps_comments(tmp_path: Path) -> None:
    path = write_conf(tmp_path, ORIGINAL)
    config = Config.load(path)
    config.set([
        ("port", "7001"), ("fsync", "always"), ("save", "60 5"), ("requirepass", 'new "one"'),
        ("maxclients", "50"), ("proto-max-bulk-len", "2mb"),
        ("client-output-buffer-limit", "pubsub 64mb 16mb 30"),
    ])
    config.rewrite()
    assert path.read_text() == (
        "# My Narad\n"
        "# ports and such\n"
        "port 7001\n"
        "\n"
        "# durability\n"
        "fsync always\n"
        "\n"
        "save 60 5\n"
        "\n"
        'requirepass "new \\"one\\""\n'
        "timeout 0\n"
        f"{REWRITE_MARK}\n"
        "maxclients 50\n"
        "proto-max-bulk-len 2mb\n"
        "client-output-buffer-limit pubsub 64mb 16mb 30\n"
    )
    again = Config.load(path)
    assert again.get(["*"]) == config.get(["*"])


def test_rewrite_twice_changes_nothing(tmp_path: Path) -> None:
    path = write_conf(tmp_path, ORIGINAL)
    config = Config.load(path)
    config.set([("maxclients", "50")])
    config.rewrite()
    first = path.read_text()
    config.rewrite()
    assert path.read_text() == first
    assert first.count(REWRITE_MARK) == 1


def test_rewrite_writes_values_from_overrides(tmp_path: Path) -> None:
    path = write_conf(tmp_path, "port 7000\n")
    Config.load(path, [("port", "7002"), ("bind", "127.0.0.1 ::1")]).rewrite()
    assert path.read_text() == f"port 7002\n{REWRITE_MARK}\nbind 127.0.0.1 ::1\n"


def test_rewrite_back_to_defaults(tmp_path: Path) -> None:
    path = write_conf(tmp_path, "save 900 1\nsave 300 10\ntimeout 5\n")
    config = Config.load(path)
    config.set([("save", ""), ("timeout", "0")])
    config.rewrite()
    assert path.read_text() == 'save ""\n\ntimeout 0\n'
    assert Config.load(path).get(["*"]) == Config().get(["*"])


def test_rewrite_comments_out_lines_it_does_not_know(tmp_path: Path) -> None:
    path = write_conf(tmp_path, "port 7000\n")
    config = Config.load(path)
    path.write_text("port 7000\nmaxmemory 1gb\nbind 'unbalanced\ninclude other.conf\n")
    config.rewrite()
    assert path.read_text() == (
        "port 7000\n# ??? maxmemory 1gb\n# ??? bind 'unbalanced\ninclude other.conf\n"
    )


def test_rewrite_creates_a_removed_file_and_keeps_permissions(tmp_path: Path) -> None:
    path = write_conf(tmp_path, "requirepass secret\n")
    os.chmod(path, 0o600)
    config = Config.load(path)
    config.set([("timeout", "9")])
    config.rewrite()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["narad.conf"]
    path.unlink()
    config.rewrite()
    assert Config.load(path)["timeout"] == 9
    assert Config.load(path)["requirepass"] == "secret"


def test_rewrite_keeps_bytes_that_are_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "narad.conf"
    path.write_bytes(b"# caf\xe9\nrequirepass \"\\xff\"\n")
    config = Config.load(path)
    config.set([("timeout", "1")])
    config.rewrite()
    assert path.read_bytes().startswith(b"# caf\xe9\nrequirepass \"\\xff\"\n")
    assert Config.load(path)["requirepass"] == "\udcff"


def test_rewrite_error(tmp_path: Path) -> None:
    folder = tmp_path / "gone"
    folder.mkdir()
    config = Config.load(write_conf(folder, "port 7000\n"))
    (folder / "narad.conf").unlink()
    folder.rmdir()
    with pytest.raises(ConfigError) as info:
        config.rewrite()
    assert str(info.value) == "Rewriting config file: No such file or directory"


# -- The example file -------------------------------------------------------------------


def test_example_file_is_generated_from_the_table() -> None:
    assert EXAMPLE.read_text() == render_example_config(), (
        "conf/narad.conf is out of date: write render_example_config() into it"
    )


def test_example_file_loads_as_the_defaults() -> None:
    assert Config.load(EXAMPLE).get(["*"]) == Config().get(["*"])


def test_example_file_names_every_setting() -> None:
    lines = [line for line in EXAMPLE.read_text().splitlines() if line and line[0] != "#"]
    named = {line.split()[0] for line in lines}
    assert named == {s.name for s in SETTINGS}


def test_example_file_rewrite_changes_only_the_changed_line(tmp_path: Path) -> None:
    path = write_conf(tmp_path, EXAMPLE.read_text())
    config = Config.load(path)
    config.set([("timeout", "30")])
    config.rewrite()
    assert path.read_text() == EXAMPLE.read_text().replace("\ntimeout 0\n", "\ntimeout 30\n")


# -- Side by side with redis-server 7.0 -------------------------------------------------


@pytest.fixture(scope="module")
def real_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[redis.Redis]:
    if not have_redis_server():
        pytest.skip("redis-server is not installed")
    server = RedisProcess(tmp_path_factory.mktemp("redis"))
    server.start()
    yield server.client()
    server.stop()


def redis_error(client: redis.Redis, pairs: list[tuple[str, str]]) -> str:
    (name, value), *rest = pairs
    with pytest.raises(redis.ResponseError) as info:
        client.config_set(name, value, *[part for pair in rest for part in pair])
    return str(info.value)


@pytest.mark.parametrize(("pairs", "text"), SET_ERRORS)
def test_set_errors_match_redis(
    real_redis: redis.Redis, pairs: list[tuple[str, str]], text: str
) -> None:
    assert redis_error(real_redis, pairs) == text == set_error(Config(), *pairs)


def test_rewrite_error_matches_redis(real_redis: redis.Redis) -> None:
    with pytest.raises(redis.ResponseError) as info:
        real_redis.config_rewrite()
    with pytest.raises(ConfigError) as ours:
        Config().rewrite()
    assert str(info.value) == str(ours.value)


SAME_VALUES = [
    ("proto-max-bulk-len", "2mb"),
    ("client-query-buffer-limit", "3MB"),
    ("stream-node-max-bytes", "8k"),
    ("stream-node-max-entries", "50"),
    ("client-output-buffer-limit", "normal 1mb 2mb 3 replica 4gb 5kb 6 pubsub 7 8 9"),
    ("slowlog-max-len", "64"),
    ("slowlog-log-slower-than", "-1"),
    ("timeout", "7"),
    ("tcp-keepalive", "60"),
    ("maxclients", "500"),
    ("appendfsync", "ALWAYS"),
    ("loglevel", "Warning"),
    ("save", "900 1 300 10"),
    ("latency-tracking", "no"),
    ("latency-tracking-info-percentiles", "12.50 99.990 1e1 0 100"),
]


def test_get_renders_values_as_redis_does(real_redis: redis.Redis) -> None:
    config = Config()
    for name, value in SAME_VALUES:
        real_redis.config_set(name, value)
        config.set([(name, value)])
    names = [name for name, _ in SAME_VALUES] + ["slave-read-only"]
    assert dict(config.get(names)) == real_redis.config_get(*names)


def run_redis_on(tmp_path: Path, text: str) -> str:
    """The last line redis-server prints when it refuses config file `text`."""
    path = write_conf(tmp_path, text, "redis.conf")
    done = subprocess.run(
        ["redis-server", str(path), "--port", "0"],
        capture_output=True, text=True, timeout=10, cwd=tmp_path, check=False,
    )
    assert done.returncode != 0
    return done.stderr.strip().splitlines()[-1]


REDIS_FILE_ERRORS = [
    "foo bar",
    "port",
    "port 1 2",
    "port 7000 # the port",
    "port abc",
    "port 70000",
    'port "12',
    'bind "a"b',
    "requirepass 'a'b",
    "maxclients 0",
    "protected-mode maybe",
    "proto-max-bulk-len 1zb",
    "save 1 2 3",
    'save "0 1"',
    "client-output-buffer-limit normal 1",
    "client-output-buffer-limit master 1 2 3",
    "client-output-buffer-limit normal 1 x 3",
    "appendfsync sometimes",
    "bind" + " 10.0.0.1" * 17,
]


@needs_redis
@pytest.mark.parametrize("line", REDIS_FILE_ERRORS)
def test_file_errors_match_redis(tmp_path: Path, line: str) -> None:
    text = f"# first\n{line}\n"
    assert run_redis_on(tmp_path, text) == load_error(tmp_path, text).reason


@needs_redis
def test_quoting_matches_redis(tmp_path: Path) -> None:
    cases = {
        "masterauth": r'"a b\x41\n\"\\"',
        "masteruser": r"'it\'s'",
        "replica-announce-ip": 'x"y z"',
        "ignore-warnings": r'"\xc3\xa9\t\q"',
        "bind-source-addr": r"'\n'",
    }
    socket = tmp_path / "redis.sock"
    path = write_conf(tmp_path, "".join(f"{k} {v}\n" for k, v in cases.items()), "redis.conf")
    proc = subprocess.Popen(
        ["redis-server", str(path), "--port", "0", "--unixsocket", str(socket), "--save", ""],
        cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        client = redis.Redis(unix_socket_path=str(socket))
        _wait_for(client)
        for name, quoted in cases.items():
            ((_, value),) = client.config_get(name).items()
            expected = (split_args(f"{name} {quoted}") or ["", ""])[1]
            assert value == expected.encode("utf-8", "surrogateescape").decode(), name
    finally:
        proc.terminate()
        proc.wait(10)


def _wait_for(client: redis.Redis) -> None:
    for _ in range(500):
        try:
            client.ping()
            return
        except redis.ConnectionError:
            time.sleep(0.01)
    raise TimeoutError("redis-server did not start")
