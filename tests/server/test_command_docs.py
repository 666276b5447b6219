"""COMMAND DOCS, INFO, GETKEYS and LIST against redis-server 7.0, and redis-cli's
hints, which it builds from COMMAND DOCS (narad/commands/arguments.py)."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import shutil
import struct
import termios
import time
from typing import Any

import pytest

from narad.commands import COMMANDS
from narad.commands.arguments import ARGUMENTS, SPECS, SpecError, parse
from narad.commands.table import all_commands, info_reply
from tests.server.raw import Raw
from tests.servers import NaradProcess, RedisProcess

# Narad's commands that Redis 7.0 lacks (7.2's, and Narad's own).
NOT_IN_REDIS_7_0 = {
    "client|setinfo", "client|no-touch", "waitaof", "fence", "promote",
    "xdelex", "xackdel", "xnack",  # Redis 8.2 and 8.8
}

# -- the specs themselves ---------------------------------------------------------------

TYPES = {"key", "string", "integer", "double", "pattern", "unix-time"}
TYPES |= {"pure-token", "block", "oneof"}
FLAG_ORDER = ("optional", "multiple", "multiple_token")
VERSION = re.compile(r"^[0-9]+\.[0-9]+\.[0-9]+$")


def test_every_command_has_its_arguments() -> None:
    answered = {cmd.name for cmd in all_commands() if cmd.handler is not None}
    assert set(SPECS) == answered


def _check_argument(arg: dict[str, Any], key_specs: int, path: str) -> None:
    """What redis-cli 7 reads of an argument (name, type, token, flags, nested
    arguments) is there and well formed."""
    where = f"{path}/{arg.get('name')}"
    assert isinstance(arg["name"], str) and arg["name"], where
    assert arg["type"] in TYPES, where
    allowed = {"name", "type", "key_spec_index", "token", "since", "deprecated_since", "flags"}
    if arg["type"] in ("block", "oneof"):
        assert arg["arguments"], where
        allowed.add("arguments")
        for inner in arg["arguments"]:
            _check_argument(inner, key_specs, where)
    assert set(arg) <= allowed, where
    if arg["type"] == "pure-token":
        assert arg["token"], where
    if arg["type"] == "key":
        assert 0 <= arg["key_spec_index"] < key_specs, where
    flags = arg.get("flags", [])
    if "flags" in arg:  # a set in Redis's order, never empty
        assert flags and flags == [f for f in FLAG_ORDER if f in flags], where
    if "multiple_token" in flags:
        assert "token" in arg, where
    for version in ("since", "deprecated_since"):
        assert version not in arg or VERSION.match(arg[version]), where


@pytest.mark.parametrize("name", sorted(SPECS))
def test_argument_structure(name: str) -> None:
    parent, _, sub = name.partition("|")
    cmd = COMMANDS[parent.encode()]
    cmd = cmd.subcommands[sub] if sub else cmd
    key_specs = len(info_reply(cmd)[8])
    for arg in ARGUMENTS[name]:
        _check_argument(arg, key_specs, name)
    keys_named = sum(1 for _ in _walk(ARGUMENTS[name]) if _["type"] == "key")
    assert bool(keys_named) == bool(cmd.keys[0] or cmd.find_keys), name


def _walk(args: list[dict[str, Any]]) -> Any:
    for arg in args:
        yield arg
        yield from _walk(arg.get("arguments", []))


@pytest.mark.parametrize(
    "line",
    [
        "key",  # no type
        "key:nosuchtype",
        "block{",  # not closed
        "block{}",  # empty
        "{key:key}",  # a block without a name
        "key:string#1",  # an index on a plain string
        "%",
    ],
)
def test_spec_mistakes_are_refused(line: str) -> None:
    with pytest.raises(SpecError):
        parse(line)


def test_spec_syntax() -> None:
    assert parse('a:key "~"=approx LIMIT=count:integer?@6.2.0 NOW?...&!7.0.0') == [
        {"name": "a", "type": "key", "key_spec_index": 0},
        {"name": "approx", "type": "pure-token", "token": "~"},
        {
            "name": "count",
            "type": "integer",
            "token": "LIMIT",
            "since": "6.2.0",
            "flags": ["optional"],
        },
        {
            "name": "now",
            "type": "pure-token",
            "token": "NOW",
            "deprecated_since": "7.0.0",
            "flags": ["optional", "multiple", "multiple_token"],
        },
    ]
    assert parse("b:key#1 x(ON | v:string)") == [
        {"name": "b", "type": "key", "key_spec_index": 1},
        {
            "name": "x",
            "type": "oneof",
            "arguments": [
                {"name": "on", "type": "pure-token", "token": "ON"},
                {"name": "v", "type": "string"},
            ],
        },
    ]


# -- side by side with redis-server ------------------------------------------------------


def _docs(port: int, names: list[str]) -> dict[str, Any]:
    """COMMAND DOCS under RESP3, subcommands flattened in, by full name."""
    with Raw(port) as conn:
        conn.call("HELLO", "3")
        reply = conn.call("COMMAND", "DOCS", *names)
    out = {}
    for name, doc in reply.items():
        out[name.decode()] = doc
        for sub, sub_doc in doc.get(b"subcommands", {}).items():
            out[sub.decode()] = sub_doc
    return out


def _shared_names(narad: NaradProcess) -> list[str]:
    with Raw(narad.port) as conn:
        names = [n.decode() for n in conn.call("COMMAND", "LIST")]
    return [n for n in names if not n.startswith("q.") and n not in NOT_IN_REDIS_7_0]


DOC_FIELDS = (b"arguments", b"doc_flags", b"deprecated_since", b"replaced_by", b"since", b"group")


def test_command_docs_as_redis(shared_narad: NaradProcess, redis_server: RedisProcess) -> None:
    names = _shared_names(shared_narad)
    tops = sorted({n.split("|")[0] for n in names})
    mine, theirs = _docs(shared_narad.port, tops), _docs(redis_server.port, tops)
    assert len(names) > 90
    for name in names:
        for field in DOC_FIELDS:
            assert _as_of_7_0(mine[name].get(field)) == theirs[name].get(field), (name, field)
    every = _docs(shared_narad.port, [])
    assert {n for n in every if n.startswith("q.")} >= {"q.push", "q.pop", "q.schema|set"}
    assert all(b"arguments" in every[name] for name in SPECS if SPECS[name])


def _as_of_7_0(value: Any) -> Any:
    """`value` (a COMMAND DOCS field) without the arguments Redis 8 added (`since`
    8.x: the Redis 8 stream options Narad also takes), to compare with Redis 7.0."""
    if not isinstance(value, list):
        return value
    return [
        {k: _as_of_7_0(v) for k, v in arg.items()} if isinstance(arg, dict) else arg
        for arg in value
        if not (isinstance(arg, dict) and arg.get(b"since", b"").startswith(b"8."))
    ]


def _raw(port: int, protocol: int, command: bytes) -> bytes:
    with Raw(port) as conn:
        conn.call("HELLO", str(protocol))
        conn.send(command + b"PING\r\n")
        data = b""
        while not data.endswith((b"+PONG\r\n", b"$4\r\nPONG\r\n")):
            data += conn.sock.recv(65536)
    return data


@pytest.mark.parametrize("protocol", [2, 3])
# Commands whose arguments Redis 8 left as 7.0 had them.
@pytest.mark.parametrize("name", [b"xautoclaim", b"xclaim", b"client|kill"])
def test_command_docs_arguments_bytes_as_redis(
    shared_narad: NaradProcess, redis_server: RedisProcess, protocol: int, name: bytes
) -> None:
    # These have no subcommands: their arguments are the reply's last field, and
    # every byte of them (flags a set of simple strings, the rest bulk strings) must
    # be Redis's.
    top = name.split(b"|")[0]
    request = b"COMMAND DOCS %b\r\n" % top
    marker = b"$9\r\narguments\r\n"
    mine = _raw(shared_narad.port, protocol, request)
    theirs = _raw(redis_server.port, protocol, request)
    start = b"$%d\r\n%b\r\n" % (len(name), name)
    mine = mine[mine.index(marker, mine.index(start)) :]
    theirs = theirs[theirs.index(marker, theirs.index(start)) :]
    if name == b"client|kill":  # the subcommands after it differ: cut before the next
        mine, theirs = mine[: mine.rindex(b"$", 0, mine.index(b"client|"))], theirs[
            : theirs.rindex(b"$", 0, theirs.index(b"client|"))
        ]
    assert mine == theirs


def _infos(port: int, names: list[str]) -> dict[str, Any]:
    with Raw(port) as conn:
        conn.call("HELLO", "3")
        reply = conn.call("COMMAND", "INFO", *names)
    out = {}
    for entry in reply:
        for item in (entry, *entry[9]):
            out[item[0].decode()] = item[:9]
    return out


def test_command_info_as_redis(shared_narad: NaradProcess, redis_server: RedisProcess) -> None:
    names = _shared_names(shared_narad)
    tops = sorted({n.split("|")[0] for n in names})
    mine, theirs = _infos(shared_narad.port, tops), _infos(redis_server.port, tops)
    for name in names:
        # Name, arity, flags, key positions, categories, tips and key specs. Redis's
        # free-text `notes` on a key spec are left out.
        specs = [{k: v for k, v in s.items() if k != b"notes"} for s in theirs[name][8]]
        assert mine[name] == [*theirs[name][:8], specs], name


# -- COMMAND GETKEYS from sample calls made from each command's arguments ----------------

SAMPLE = {"string": b"s", "integer": b"1", "double": b"1.5", "pattern": b"*", "unix-time": b"1"}


class _Sample:
    """A call of a command made from its arguments: each key a new name, recorded."""

    def __init__(self, full: bool) -> None:
        self.full = full  # give the optional arguments too, and the last alternative
        self.argv: list[bytes] = []
        self.keys: list[bytes] = []

    def add(self, args: list[dict[str, Any]]) -> None:
        for arg in args:
            flags = arg.get("flags", [])
            if "optional" in flags and not self.full:
                continue
            for i in range(2 if "multiple" in flags else 1):
                tokened = "token" in arg and arg["type"] != "pure-token"
                if tokened and (i == 0 or "multiple_token" in flags):
                    self.argv.append(arg["token"].encode())
                self.one(arg)

    def one(self, arg: dict[str, Any]) -> None:
        kind = arg["type"]
        if kind == "key":
            key = b"k%d" % len(self.keys)
            self.keys.append(key)
            self.argv.append(key)
        elif kind == "pure-token":
            self.argv.append(arg["token"].encode())
        elif kind == "block":
            self.add(arg["arguments"])
        elif kind == "oneof":
            choice = arg["arguments"][-1 if self.full else 0]
            self.add([{**choice, "flags": [f for f in choice.get("flags", []) if f != "optional"]}])
        else:
            self.argv.append(SAMPLE[kind])


def _sample(name: str, full: bool) -> _Sample:
    sample = _Sample(full)
    sample.argv = [part.encode() for part in name.split("|")]
    sample.add(ARGUMENTS[name])
    return sample


def _getkeys(conn: Raw, argv: list[bytes]) -> tuple[Any, Any]:
    return (
        conn.call("COMMAND", "GETKEYS", *argv),
        conn.call("COMMAND", "GETKEYSANDFLAGS", *argv),
    )


def test_getkeys_as_redis(shared_narad: NaradProcess, redis_server: RedisProcess) -> None:
    compared = 0
    with Raw(shared_narad.port) as mine, Raw(redis_server.port) as theirs:
        for name in _shared_names(shared_narad):
            if name not in ARGUMENTS:
                continue  # a container: COMMAND GETKEYS CLIENT is refused by arity
            for full in (False, True):
                argv = _sample(name, full).argv
                assert _getkeys(mine, argv) == _getkeys(theirs, argv), argv
                compared += 1
    assert compared > 180


def test_getkeys_of_narads_own_commands(shared_narad: NaradProcess) -> None:
    with Raw(shared_narad.port) as conn:
        for name in SPECS:
            if not name.startswith("q.") or name == "q.schema|help":
                continue
            for full in (False, True):
                sample = _sample(name, full)
                if not sample.keys:  # refused before its arity is looked at
                    keys = conn.call("COMMAND", "GETKEYS", *sample.argv, "x")
                    assert keys == ("error", "ERR The command has no key arguments"), name
                else:
                    assert conn.call("COMMAND", "GETKEYS", *sample.argv) == sample.keys


def test_command_list_filterby_as_redis(
    shared_narad: NaradProcess, redis_server: RedisProcess
) -> None:
    shared = set(_shared_names(shared_narad))
    with Raw(shared_narad.port) as mine, Raw(redis_server.port) as theirs:

        def both(*args: str) -> tuple[set[str], set[str]]:
            ours = {n.decode() for n in mine.call("COMMAND", "LIST", *args)}
            real = {n.decode() for n in theirs.call("COMMAND", "LIST", *args)}
            return ours, real & shared

        for category in theirs.call("ACL", "CAT"):
            ours, real = both("FILTERBY", "ACLCAT", category.decode())
            theirs_too = {n for n in ours if not n.startswith("q.") and n not in NOT_IN_REDIS_7_0}
            assert theirs_too == real, category
        for pattern in ("x*", "*|*", "client|*", "?et", "X*", "*a*", "[a-c]*", "nosuch"):
            ours, real = both("FILTERBY", "PATTERN", pattern)
            assert ours & shared == real, pattern
        assert both("FILTERBY", "MODULE", "x") == (set(), set())
        queue = mine.call("COMMAND", "LIST", "FILTERBY", "ACLCAT", "queue")
        assert b"q.push" in queue and b"xadd" not in queue


# -- redis-cli's hints -------------------------------------------------------------------


HINT_COLOUR = b"\x1b[0;90;49m"  # linenoise's grey, in which redis-cli draws a hint


def _typed_with_hint(port: int, typed: str) -> str:
    """What redis-cli shows in a terminal once `typed` is typed at its prompt: the
    line and its grey hint, escape codes removed (the last redraw of the line)."""
    pid, fd = pty.fork()
    if pid == 0:  # the child: redis-cli on the pty
        os.environ["TERM"] = "xterm"
        os.execvp("redis-cli", ["redis-cli", "-p", str(port)])
    # A window size spares linenoise asking the terminal for the cursor's place.
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 400, 0, 0))
    seen = b""
    try:
        seen = _read_until(fd, seen, lambda s: s.endswith(b"> "))
        os.write(fd, typed.encode())
        # The last redraw: the whole typed text, then the hint in grey, then the
        # cursor put back after the text.
        drawn = typed.encode() + HINT_COLOUR
        seen = _read_until(fd, seen, lambda s: drawn in s and s.endswith(b"C"))
    finally:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        os.close(fd)
    last = seen.decode(errors="replace").split("\r\x1b[0K")[-1]
    return re.sub(r"\x1b\[[0-9;]*[A-Za-z]|\r", "", last)


def _read_until(fd: int, seen: bytes, done: Any, timeout: float = 15.0) -> bytes:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.05)
        if ready:
            try:
                seen += os.read(fd, 65536)
            except OSError:
                return seen
        elif done(seen):
            return seen
    raise TimeoutError(repr(seen[-300:]))


@pytest.mark.skipif(shutil.which("redis-cli") is None, reason="redis-cli is not installed")
def test_redis_cli_hints(shared_narad: NaradProcess, redis_server: RedisProcess) -> None:
    for typed in ("XAUTOCLAIM ", "XGROUP CREATE ", "XPENDING "):
        mine = _typed_with_hint(shared_narad.port, typed)
        theirs = _typed_with_hint(redis_server.port, typed)
        assert mine.split("> ", 1)[1] == theirs.split("> ", 1)[1], typed
    # XADD's hint is Redis 7.0's with Redis 8.2's trimming condition.
    xadd = _typed_with_hint(shared_narad.port, "XADD ")
    assert xadd.endswith(
        "XADD key [NOMKSTREAM] [KEEPREF|DELREF|ACKED] [MAXLEN|MINID [=|~] threshold"
        " [LIMIT count]] *|id field value [field value ...]"
    )
    push = _typed_with_hint(shared_narad.port, "Q.PUSH ")
    assert push.endswith("Q.PUSH queue [DELAY ms] [DEDUP dedup-key] payload [payload ...]")
    create = _typed_with_hint(shared_narad.port, "Q.SCHEMA SET ")
    assert "key schema-json [COMPAT BACKWARD|BACKWARD_TRANSITIVE|" in create
