"""Keyspace commands: DEL, UNLINK, EXISTS, TYPE, KEYS, SCAN, RENAME, RENAMENX, DBSIZE,
FLUSHDB, FLUSHALL, SELECT, SWAPDB. Every key is a stream (a queue is a stream too)."""

from __future__ import annotations

import fnmatch
import re
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from narad.commands.args import parse_int
from narad.commands.table import command
from narad.errors import CommandError, syntax
from narad.resp import SimpleString

if TYPE_CHECKING:
    from narad.server import Client

OK = SimpleString("OK")


def _delete(client: Client, keys: list[bytes]) -> int:
    store = client.server.store
    removed = 0
    for key in keys:
        if store.delete(client.db, key):
            removed += 1
            client.server.signal_key(client.db, key)
    return removed


@command("del", -2, "write", (1, -1, 1), "generic", complexity="O(N)")
def del_(client: Client, args: list[bytes]) -> Any:
    """Deletes one or more keys."""
    return _delete(client, args[1:])


@command("unlink", -2, "write fast", (1, -1, 1), "generic", since="4.0.0", complexity="O(1)")
def unlink(client: Client, args: list[bytes]) -> Any:
    """Asynchronously deletes one or more keys."""
    return _delete(client, args[1:])


@command("exists", -2, "readonly fast", (1, -1, 1), "generic", since="1.0.0")
def exists(client: Client, args: list[bytes]) -> Any:
    """Determines whether one or more keys exist."""
    store = client.server.store
    return sum(1 for key in args[1:] if store.get(client.db, key) is not None)


@command("type", 2, "readonly fast", (1, 1, 1), "generic")
def type_(client: Client, args: list[bytes]) -> Any:
    """Determines the type of value stored at a key."""
    found = client.server.store.get(client.db, args[1]) is not None
    return SimpleString("stream" if found else "none")


@lru_cache(maxsize=256)
def glob_regex(pattern: bytes) -> re.Pattern[bytes]:
    """Redis's glob (stringmatchlen): * ? [abc] [^a] [a-z] and \\ escapes."""
    out = []
    i = 0
    while i < len(pattern):
        ch = pattern[i : i + 1]
        if ch == b"\\" and i + 1 < len(pattern):
            out.append(re.escape(pattern[i + 1 : i + 2]))
            i += 2
            continue
        if ch == b"*":
            out.append(b".*")
        elif ch == b"?":
            out.append(b".")
        elif ch == b"[":
            end = pattern.find(b"]", i + 1)
            if end < 0:
                out.append(re.escape(pattern[i:]))
                break
            body = pattern[i + 1 : end]
            negate = body[:1] == b"^"
            if negate:
                body = body[1:]
            out.append(b"[" + (b"^" if negate else b"") + body.replace(b"\\", b"\\\\") + b"]")
            i = end
        else:
            out.append(re.escape(ch))
        i += 1
    return re.compile(b"(?s:" + b"".join(out) + b")\\Z")


def glob_match(pattern: bytes, name: bytes) -> bool:
    if pattern == b"*":
        return True
    try:
        return glob_regex(pattern).match(name) is not None
    except re.error:
        return fnmatch.fnmatchcase(name.decode("latin-1"), pattern.decode("latin-1"))


@command("keys", 2, "readonly", (0, 0, 0), "generic", complexity="O(N)")
def keys(client: Client, args: list[bytes]) -> Any:
    """Returns all key names that match a pattern."""
    return [k for k in client.server.store.dbs[client.db] if glob_match(args[1], k)]


@command("scan", -2, "readonly", (0, 0, 0), "generic", since="2.8.0", complexity="O(N)")
def scan(client: Client, args: list[bytes]) -> Any:
    """Iterates over the key names in the database."""
    cursor = _parse_cursor(args[1])
    pattern, count, kind = b"*", 10, None
    i = 2
    while i < len(args):
        opt = args[i].lower()
        if i + 1 >= len(args):
            raise syntax()
        if opt == b"match":
            pattern = args[i + 1]
        elif opt == b"count":
            count = parse_int(args[i + 1])
            if count < 1:
                raise syntax()
        elif opt == b"type":
            kind = args[i + 1].lower()
        else:
            raise syntax()
        i += 2
    # The cursor is a position in the key order of the moment: keys present during the
    # whole scan are returned at least once, as SCAN promises.
    names = sorted(client.server.store.dbs[client.db])
    chunk = names[cursor : cursor + count]
    following = cursor + count if cursor + count < len(names) else 0
    if kind not in (None, b"stream"):
        chunk = []
    return [b"%d" % following, [k for k in chunk if glob_match(pattern, k)]]


def _parse_cursor(arg: bytes) -> int:
    """Redis's cursor parsing (strtoul): an optional sign, decimal digits, at most
    2**64 - 1; a negative cursor wraps around, an empty one is 0."""
    if not arg:
        return 0
    negative = arg[:1] == b"-"
    digits = arg[1:] if arg[:1] in b"+-" else arg
    if not digits.isdigit() or not digits.isascii():
        raise CommandError("invalid cursor")
    value = int(digits)
    if value >= 1 << 64:
        raise CommandError("invalid cursor")
    return (-value) % (1 << 64) if negative else value


@command("rename", 3, "write", (1, 2, 1), "generic", complexity="O(1)")
def rename(client: Client, args: list[bytes]) -> Any:
    """Renames a key and overwrites the destination."""
    _rename(client, args[1], args[2], nx=False)
    return OK


@command("renamenx", 3, "write fast", (1, 2, 1), "generic", complexity="O(1)")
def renamenx(client: Client, args: list[bytes]) -> Any:
    """Renames a key only when the target key name doesn't exist."""
    return 1 if _rename(client, args[1], args[2], nx=True) else 0


def _rename(client: Client, src: bytes, dst: bytes, nx: bool) -> bool:
    store = client.server.store
    if store.get(client.db, src) is None:
        raise CommandError("no such key")
    if nx and store.get(client.db, dst) is not None:
        return False
    store.rename(client.db, src, dst)
    client.server.signal_key(client.db, src)
    client.server.signal_key(client.db, dst)
    return True


@command("dbsize", 1, "readonly fast", group="server")
def dbsize(client: Client, args: list[bytes]) -> Any:
    """Returns the number of keys in the database."""
    return len(client.server.store.dbs[client.db])


def _flush_args(args: list[bytes]) -> None:
    if len(args) > 2 or (len(args) == 2 and args[1].lower() not in (b"async", b"sync")):
        raise syntax()


@command("flushdb", -1, "write", group="server", complexity="O(N)")
def flushdb(client: Client, args: list[bytes]) -> Any:
    """Remove all keys from the current database."""
    _flush_args(args)
    _flush(client, client.db)
    return OK


@command("flushall", -1, "write", group="server", complexity="O(N)")
def flushall(client: Client, args: list[bytes]) -> Any:
    """Removes all keys from all databases."""
    _flush_args(args)
    for db in range(len(client.server.store.dbs)):
        _flush(client, db)
    return OK


def _flush(client: Client, db: int) -> None:
    store = client.server.store
    for key in list(store.dbs[db]):
        store.delete(db, key)
        client.server.signal_key(db, key)
    client.server.touch_db(db)


def db_index(client: Client, arg: bytes) -> int:
    index = parse_int(arg)
    if not 0 <= index < len(client.server.store.dbs):
        raise CommandError("DB index is out of range")
    return index


@command("select", 2, "loading stale fast", group="connection", since="1.0.0")
def select(client: Client, args: list[bytes]) -> Any:
    """Changes the selected database."""
    client.db = db_index(client, args[1])
    return OK


@command("swapdb", 3, "write fast", group="server", since="4.0.0", complexity="O(N)")
def swapdb(client: Client, args: list[bytes]) -> Any:
    """Swaps two Redis databases."""
    a = parse_int(args[1], "invalid first DB index")
    b = parse_int(args[2], "invalid second DB index")
    databases = len(client.server.store.dbs)
    if not (0 <= a < databases and 0 <= b < databases):
        raise CommandError("DB index is out of range")
    if a != b:
        client.server.store.swapdb(a, b)
        client.server.touch_db(a)
        client.server.touch_db(b)
    return OK
