"""Hostile input over the whole command table, through a real server.

For every command (and subcommand) in narad/commands/table.py, hypothesis draws
arguments a hostile or broken client would send: wrong arity, numbers at and past
their bounds, bytes that are not UTF-8, JSON text with lone surrogates, very long
values, option names of other commands, and real option names with bad values. Each
example runs on a fresh connection. After it:

- the server answers PING on a new connection, and a connection opened at the start
  still has its name and database and answers PING;
- a command answered with an error appended nothing: every file under the data dir
  has the size it had before (the server runs with `fsync always`, so a reply leaves
  only after what it reports is on disk, and the queue clock is frozen, so no timer
  writes behind the examples' backs).

The same draws run again as a restricted user (`~hostile:* +@all -@dangerous`, with
keys outside its pattern among the atoms): every key outside the pattern, in every
database, is as it was after each example, and every refusal of a permission is a
NOPERM error in Redis's words, never an internal error.

At the end the data dir survives kill -9 and a clean stop, `narad check` calls it
clean, and every schema and setting the examples got accepted is still in force after
the restarts (settings through CONFIG REWRITE, as a restart forgets CONFIG SET).

The examples are derandomized and fixed in number, so a CI failure reruns as it was.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import narad.commands  # noqa: F401 - fills the command table
from narad.commands.table import Command, all_commands
from narad.config.settings import SETTINGS
from tests.examples import examples
from tests.server.raw import Raw
from tests.servers import ROOT, NaradProcess, wait_until

EXAMPLES = examples(40)  # per command
RESTRICTED_EXAMPLES = examples(12)  # per command, as the restricted user
REPLY_WAIT_S = 1.0  # past this a command counts as blocked (BLOCK, WAIT, CLIENT REPLY OFF)

# Commands left out, each because it ends or changes the server, or another client,
# by design; every other command and subcommand of the table is drawn.
EXCLUDED = {
    "shutdown": "stops the server",
    "quit": "ends the connection by design",
    "reset": "resets the connection by design",
    "monitor": "turns the connection into a MONITOR feed",
    "q.consume": "turns the connection into a push-mode consumer",
    "client|kill": "closes other connections, the bystander among them",
    "debug": "DEBUG SLEEP holds the server; DEBUG CLOCK moves the frozen queue clock",
    "replicaof": "makes the node a replica, which closes every other connection",
    "slaveof": "makes the node a replica, which closes every other connection",
    "psync": "turns the connection into a replica's link",
    "wait": "blocks until replicas acknowledge (there are none here), as in Redis",
    "waitaof": "blocks until replicas acknowledge (there are none here), as in Redis",
}
# Settings CONFIG SET must not change here: where the server listens or keeps its data,
# who may connect, what holds the comparison honest (fsync always; retention, segment
# rolls and idle timeouts change files or connections behind the examples' backs), and
# the limits the examples' long values rely on.
CONFIG_SET_EXCLUDED = {
    b"port", b"bind", b"dir", b"requirepass", b"protected-mode", b"maxclients",
    b"timeout", b"fsync", b"appendfsync", b"retention-ms", b"retention-bytes",
    b"segment-ms", b"segment-bytes", b"client-output-buffer-limit",
    b"client-query-buffer-limit", b"proto-max-bulk-len", b"shutdown-timeout",
    b"loglevel", b"logfile", b"enable-debug-command", b"min-replicas-to-ack",
}


STREAM, QUEUE, SCHEMA_QUEUE = b"hostile:stream", b"hostile:queue", b"hostile:schema"
GROUP = b"hostile-group"

NUMBERS = [
    b"0", b"-1", b"1", b"9223372036854775807", b"9223372036854775808",
    b"18446744073709551616", b"-9223372036854775809", b"1e400", b"nan", b"+inf", b"-inf",
    b"0x10", b" 1", b"1 ", b"1.5", b"-0", b"007", b"9007199254740993", b"",
]
IDS = [b"0-0", b"0-1", b"$", b">", b"*", b"+", b"-", b"18446744073709551615-18446744073709551615",
       b"1-18446744073709551616", b"0-*"]
BAD_TEXT = [b"\xff\xfe", b"\xc3", b"a\x00b", b"\r\n", b"\xed\xa0\x80"]
JSON_TEXT = [
    b'{"\\ud800": 1}',
    b'{"type":"object","properties":{"\\udfff":{"type":"string"}}}',
    b'{"type":"object"}',
    b'{"type":"string","maxLength":9223372036854775808}',
    b'{"type":"object","required":["a"],"properties":{"a":{"type":"integer"}}}',
    b"{",
    b"[]",
    b'"\\ud800"',
]
# Option words of the commands, each tried in every command's arguments.
OPTIONS = [
    b"BLOCK", b"COUNT", b"STREAMS", b"NOACK", b"MAXLEN", b"MINID", b"LIMIT", b"NOMKSTREAM",
    b"ID", b"MKSTREAM", b"ENTRIESREAD", b"IDLE", b"TIME", b"RETRYCOUNT", b"FORCE", b"JUSTID",
    b"LASTID", b"FULL", b"DELAY", b"DEDUP", b"DEDUPWINDOW", b"VISIBILITY", b"MAXRECEIVES",
    b"DLQ", b"RETENTION", b"MAXBYTES", b"PREFETCH", b"FROM", b"EARLIEST", b"LATEST", b"TO",
    b"COMPAT", b"FIELD", b"MATCH", b"TYPE", b"GET", b"SET", b"~", b"=", b"GROUP", b"AUTH",
    b"SETNAME", b"ON", b"OFF", b"SKIP", b"ASYNC", b"SYNC", b"NONE", b"BACKWARD", b"FORWARD",
    b"WITHSCORES", b"ALL",
]
KEYS = [STREAM, QUEUE, SCHEMA_QUEUE, b"hostile:new", b"../escape", b"", b"x" * 600]
# Keys outside the restricted user's pattern, which its examples must leave as they are.
OUTSIDE_STREAM, OUTSIDE_QUEUE = b"other:stream", b"other:queue"
RESTRICTED = [b"on", b">hostile-pw", b"~hostile:*", b"+@all", b"-@dangerous"]
NOPERM_TEXTS = {
    "NOPERM No permissions to access a key", "NOPERM No permissions to access a channel"
}

LONG = b"v" * (1 << 20)

ATOMS = st.one_of(
    st.sampled_from(NUMBERS),
    st.sampled_from(IDS),
    st.sampled_from(BAD_TEXT),
    st.sampled_from(JSON_TEXT),
    st.sampled_from(OPTIONS),
    st.sampled_from(OPTIONS).map(bytes.lower),
    st.sampled_from(KEYS),
    st.sampled_from([OUTSIDE_STREAM, OUTSIDE_QUEUE]),
    st.binary(max_size=12),
    st.just(LONG),
)


def drawable() -> list[Command]:
    return sorted(
        (c for c in all_commands() if c.handler is not None and c.name not in EXCLUDED),
        key=lambda c: c.name,
    )


COMMANDS_DRAWN = {cmd.name: cmd for cmd in drawable()}


def argv_head(cmd: Command) -> list[bytes]:
    return [part.encode() for part in cmd.name.split("|")]


VALUES = st.one_of(
    st.sampled_from(JSON_TEXT), st.sampled_from([*IDS, *BAD_TEXT, b"payload", b"f", LONG])
)
OPTION_PAIRS = st.lists(st.tuples(st.sampled_from(OPTIONS), st.sampled_from(NUMBERS)), max_size=3)
SETTING_NAMES = sorted(
    n.encode() for s in SETTINGS for n in s.names() if n.encode() not in CONFIG_SET_EXCLUDED
)
SETTING_VALUES = [b"yes", b"no", b"1mb", b"100", b"normal 0 0 0", b"900 1", b"local", b"\xff"]
KNOWN_KEYS = st.sampled_from([STREAM, QUEUE, SCHEMA_QUEUE, OUTSIDE_STREAM, OUTSIDE_QUEUE])


@st.composite
def hostile_call(draw: st.DrawFn, cmd: Command) -> list[bytes]:
    head = argv_head(cmd)
    if cmd.name == "config|set" and draw(st.booleans()):  # real settings, bad values too
        setting = draw(st.sampled_from(SETTING_NAMES))
        return [*head, setting, draw(st.sampled_from([*NUMBERS, *SETTING_VALUES]))]
    shape = draw(st.sampled_from(["atoms", "key value", "key value options", "key options value"]))
    if shape == "atoms":  # any arity, right or wrong, of anything
        least = abs(cmd.arity) - len(head)  # arguments after the name (and subcommand)
        exact = cmd.arity >= 0
        count = draw(
            st.one_of(
                st.just(max(least, 0)),
                st.integers(0, max(least + 6, 6)),
                st.just(max(least - 1, 0)),
                st.just(least + 1) if exact else st.integers(least, least + 12),
            )
        )
        args = draw(st.lists(ATOMS, min_size=count, max_size=count))
        if args and draw(st.booleans()):  # keys the server holds, where keys go
            args[0] = draw(KNOWN_KEYS)
        return head + args
    # Shaped like a real call: a key the server holds, then a value (a schema, an ID,
    # a payload) and options with numbers at and past their bounds, in either order.
    key, value = draw(KNOWN_KEYS), draw(VALUES)
    options = [part for pair in draw(OPTION_PAIRS) for part in pair]
    if shape == "key value":
        options = []
    tail = [value, *options] if shape != "key options value" else [*options, value]
    return [*head, key, *tail]


def written_bytes(path: Path) -> int:
    """Bytes of `path` up to its last non-zero byte: log files are reserved ahead of
    writes (zero-filled), so this, not the file size, moves when a record is added."""
    with path.open("rb") as file:
        end = file.seek(0, os.SEEK_END)
        while end > 0:
            start = max(0, end - 65536)
            file.seek(start)
            kept = file.read(end - start).rstrip(b"\0")
            if kept:
                return start + len(kept)
            end = start
    return 0


def data_sizes(data_dir: Path) -> dict[str, int]:
    """The written bytes of every file of the data dir's journal, and the names of
    every other file: every durable change is a commit in the journal, and the
    streams' logs are written behind it whenever a read wants them in their files
    (narad/log/journal.py), so their sizes change with what was committed before."""
    sizes = {}
    for folder, _, files in os.walk(data_dir):
        for name in files:
            path = Path(folder, name)
            try:
                name = str(path.relative_to(data_dir))
                # journal/checkpoint records where a checkpoint got to: one begun by an
                # earlier commit (ensure_keys') may write it on its own thread at any time.
                journaled = name.startswith("journal/") and name != "journal/checkpoint"
                sizes[name] = written_bytes(path) if journaled else 0
            except FileNotFoundError:  # a dropped key's folder, going as we look
                continue
    return sizes


def is_error(reply: Any) -> bool:
    return isinstance(reply, tuple) and reply[:1] == ("error",)


def call_raw(port: int, argv: list[bytes], user: list[bytes] | None = None) -> tuple[bool, Any]:
    """Send `argv` on a new connection (logged in as `user`: name, password):
    (answered, reply); (False, None) when not answered within REPLY_WAIT_S (a blocking
    command, CLIENT REPLY OFF). No command drawn closes its connection by design, so a
    close is a failure."""
    with Raw(port, timeout=30) as raw:
        if user is not None:
            assert raw.call("AUTH", *user) == b"OK"
        raw.send_command(*argv)
        raw.sock.settimeout(REPLY_WAIT_S)
        try:
            return True, raw.read()
        except TimeoutError:
            return False, None
        except ConnectionError:
            raise AssertionError(f"the server closed the connection: {argv[:6]!r}") from None


class Run:
    """The server, its bystander connection, and what the examples got accepted."""

    def __init__(self, folder: Path) -> None:
        self.conf = folder / "narad.conf"
        folder.mkdir(parents=True, exist_ok=True)
        self.conf.write_text("fsync always\nenable-debug-command yes\n")
        self.server = NaradProcess(folder, [str(self.conf)])
        self.data_dir = folder / "data"
        self.schemas: set[bytes] = set()  # keys with an accepted Q.SCHEMA SET
        self.settings: set[bytes] = set()  # settings with an accepted CONFIG SET
        self.noperm = 0  # the restricted user's examples refused with NOPERM

    def start(self) -> None:
        self.server.start()
        self.admin = Raw(self.server.port)
        assert self.admin.call("DEBUG", "CLOCK", "FREEZE") is not None  # no queue timers
        self.bystander = Raw(self.server.port)
        assert self.bystander.call("CLIENT", "SETNAME", "bystander") == b"OK"
        assert self.bystander.call("SELECT", "3") == b"OK"

    def close_connections(self) -> None:
        self.admin.close()
        self.bystander.close()

    def ensure_keys(self) -> None:
        """The keys the examples aim at exist again (a FLUSHALL or DEL may have gone)."""
        admin = self.admin
        admin.call("SELECT", "0")
        if not admin.call("EXISTS", STREAM):
            admin.call("XADD", STREAM, "*", "f", "v")
            admin.call("XGROUP", "CREATE", STREAM, GROUP, "0")
        if not admin.call("EXISTS", QUEUE):
            admin.call("Q.CREATE", QUEUE)
            admin.call("Q.PUSH", QUEUE, "one", "two")
        if not admin.call("EXISTS", SCHEMA_QUEUE):
            admin.call("Q.CREATE", SCHEMA_QUEUE)
            admin.call("Q.SCHEMA", "SET", SCHEMA_QUEUE, '{"type":"object"}')
        if not admin.call("EXISTS", OUTSIDE_STREAM):
            admin.call("XADD", OUTSIDE_STREAM, "*", "f", "v")
            admin.call("XGROUP", "CREATE", OUTSIDE_STREAM, GROUP, "0")
        if not admin.call("EXISTS", OUTSIDE_QUEUE):
            admin.call("Q.CREATE", OUTSIDE_QUEUE)
            admin.call("Q.PUSH", OUTSIDE_QUEUE, "one", "two")
        if admin.call("ACL", "GETUSER", "hostile") is None:
            assert admin.call("ACL", "SETUSER", "hostile", *RESTRICTED) == b"OK"

    def outside(self) -> dict[tuple[int, bytes], Any]:
        """Every key outside the restricted user's pattern, in every database, with
        what can change of it: its entries, IDs, groups and queue counts."""
        found: dict[tuple[int, bytes], Any] = {}
        admin = self.admin
        for db in range(16):
            admin.call("SELECT", db)
            for key in admin.call("KEYS", "*"):
                if key.startswith(b"hostile:"):
                    continue
                stream = admin.call("XINFO", "STREAM", key)
                groups = admin.call("XINFO", "GROUPS", key)
                queue = admin.call("Q.STATS", key)
                found[db, key] = (stream, groups, None if is_error(queue) else queue)
        admin.call("SELECT", 0)
        return found
    def only_known_clients(self) -> bool:
        listing = self.admin.call("CLIENT", "LIST")
        return isinstance(listing, bytes) and listing.count(b"\n") <= 2

    def check_undisturbed(self, argv: list[bytes]) -> None:
        with Raw(self.server.port) as probe:
            assert probe.call("PING") == b"PONG", argv
        info = self.bystander.call("CLIENT", "INFO")
        assert isinstance(info, bytes) and b" name=bystander " in info and b" db=3 " in info
        assert self.bystander.call("PING") == b"PONG"

    def example(self, argv: list[bytes]) -> None:
        wait_until(self.only_known_clients)  # the previous example's connection is gone
        self.ensure_keys()
        before = data_sizes(self.data_dir)
        answered, reply = call_raw(self.server.port, argv)
        self.check_undisturbed(argv)
        if answered and is_error(reply):
            assert data_sizes(self.data_dir) == before, (argv[:6], reply)
        elif answered:
            self.note_accepted(argv)

    def restricted_example(self, argv: list[bytes]) -> None:
        """`argv` as the restricted user: nothing outside its pattern changes, and a
        refusal of a key is NOPERM in Redis's words."""
        wait_until(self.only_known_clients)
        self.ensure_keys()
        before = self.outside()
        answered, reply = call_raw(self.server.port, argv, [b"hostile", b"hostile-pw"])
        self.check_undisturbed(argv)
        assert self.outside() == before, argv[:6]
        if answered and is_error(reply):
            text = reply[1]
            assert not text.startswith("ERR internal error"), (argv[:6], text)
            if text.startswith("NOPERM"):
                self.noperm += 1
                refused_command = text.startswith("NOPERM User hostile has no permissions to run")
                assert text in NOPERM_TEXTS or refused_command, (argv[:6], text)

    def note_accepted(self, argv: list[bytes]) -> None:
        name = [a.lower() for a in argv[:2]]
        if name == [b"q.schema", b"set"] and len(argv) > 2:
            self.schemas.add(argv[2])
        if name == [b"config", b"set"]:
            self.settings.update(a.lower() for a in argv[2::2])

    def state(self) -> dict[str, Any]:
        """What the accepted schemas and settings say now."""
        with Raw(self.server.port) as raw:
            found: dict[str, Any] = {}
            for key in sorted(self.schemas):
                found[f"schema {key!r}"] = raw.call("Q.SCHEMA", "GET", key)
            for name in sorted(self.settings):
                found[f"setting {name!r}"] = raw.call("CONFIG", "GET", name)
            return found


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    run = Run(tmp_path_factory.mktemp("hostile"))
    run.start()
    yield run
    run.close_connections()
    run.server.stop()


@pytest.mark.parametrize("name", sorted(COMMANDS_DRAWN))
@settings(
    max_examples=EXAMPLES,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=list(HealthCheck),
)
@given(data=st.data())
def test_hostile_input(run: Run, name: str, data: st.DataObject) -> None:
    argv = data.draw(hostile_call(COMMANDS_DRAWN[name]))
    if name == "config|set":
        assume(not any(a.lower() in CONFIG_SET_EXCLUDED for a in argv[2:]))
    run.example(argv)


@pytest.mark.parametrize("name", sorted(COMMANDS_DRAWN))
@settings(
    max_examples=RESTRICTED_EXAMPLES,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=list(HealthCheck),
)
@given(data=st.data())
def test_hostile_input_as_a_restricted_user(run: Run, name: str, data: st.DataObject) -> None:
    argv = data.draw(hostile_call(COMMANDS_DRAWN[name]))
    if name == "config|set":
        assume(not any(a.lower() in CONFIG_SET_EXCLUDED for a in argv[2:]))
    run.restricted_example(argv)


def test_the_restricted_user_was_refused(run: Run) -> None:
    """Runs after the restricted examples: they met refusals, so they tried keys
    and commands outside the user's rules."""
    assert run.noperm > 100


SCHEMAS = [
    *JSON_TEXT,
    b'{"type":"object","properties":{"n":{"type":"number","minimum":-1e308}}}',
    b'{"type":"object","additionalProperties":false}',
    b'{"type":"object","properties":{"a":{"type":"string","maxLength":1}}}',
    b'{"type":"object","properties":{"a":{"type":"string","pattern":"^a$"}}}',
    b'{"$ref":"http://example.com/schema"}',
    b"true",
    b"false",
]
SCHEMA_OPTIONS = [b"COMPAT", b"FIELD", b"NONE", b"BACKWARD", b"FORWARD", b"FULL", b"payload"]


@st.composite
def setting_or_schema(draw: st.DrawFn) -> list[bytes]:
    """CONFIG SET of a real setting, Q.SCHEMA SET of a real schema: the calls whose
    accepted results the restart test then checks."""
    if draw(st.booleans()):
        values = [*NUMBERS, *SETTING_VALUES, *BAD_TEXT]
        setting, value = draw(st.sampled_from(SETTING_NAMES)), draw(st.sampled_from(values))
        return [b"config", b"set", setting, value]
    options = draw(st.lists(st.sampled_from([*SCHEMA_OPTIONS, *BAD_TEXT]), max_size=2))
    return [b"q.schema", b"set", draw(KNOWN_KEYS), draw(st.sampled_from(SCHEMAS)), *options]


@settings(
    max_examples=examples(200),
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=list(HealthCheck),
)
@given(argv=setting_or_schema())
def test_hostile_settings_and_schemas(run: Run, argv: list[bytes]) -> None:
    run.example(argv)


def test_the_data_dir_survives_the_hostile_examples(run: Run) -> None:
    """Runs after test_hostile_input (same module, in order): kill -9 and a clean stop
    both start again with every accepted schema and setting in force, and `narad
    check` calls the data dir clean."""
    with Raw(run.server.port) as raw:
        assert raw.call("CONFIG", "REWRITE") == b"OK"
    expected = run.state()
    assert run.settings and run.schemas  # the examples got some accepted
    run.close_connections()
    run.server.kill()
    run.start()
    assert run.state() == expected
    run.close_connections()
    assert run.server.stop() == 0
    run.start()
    assert run.state() == expected
    run.close_connections()
    assert run.server.stop() == 0
    check = subprocess.run(
        [sys.executable, "-m", "narad", "check", str(run.data_dir)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        check=False,
    )
    assert check.returncode == 0, check.stdout + check.stderr
    run.start()  # the fixture stops it
