"""Keyspace commands: DEL, UNLINK, EXISTS, TYPE, KEYS, SCAN, RENAME, RENAMENX, DBSIZE,
FLUSHDB, FLUSHALL, SELECT, SWAPDB. Every key is a stream (a queue is a stream too)."""

from __future__ import annotations

import heapq
from collections.abc import Collection
from typing import TYPE_CHECKING, Any

from narad import glob
from narad.acl.user import READ, WRITE
from narad.commands.args import parse_int
from narad.commands.table import command, finds_keys
from narad.errors import CommandError, syntax
from narad.resp import SimpleString

if TYPE_CHECKING:
    from narad.node import Session

OK = SimpleString("OK")


def _delete(session: Session, keys: list[bytes]) -> int:
    keyspace = session.node.keyspace
    removed = 0
    for key in keys:
        if keyspace.delete(session.db, key):
            removed += 1
    return removed


@command("del", -2, "write", (1, -1, 1), "generic", complexity="O(N)", categories="@keyspace")
def del_(session: Session, args: list[bytes]) -> Any:
    """Deletes one or more keys."""
    return _delete(session, args[1:])


@command(
    "unlink", -2, "write fast", (1, -1, 1), "generic", since="4.0.0", complexity="O(1)",
    categories="@keyspace",
)
def unlink(session: Session, args: list[bytes]) -> Any:
    """Asynchronously deletes one or more keys."""
    return _delete(session, args[1:])


@command("exists", -2, "readonly fast", (1, -1, 1), "generic", categories="@keyspace")
def exists(session: Session, args: list[bytes]) -> Any:
    """Determines whether one or more keys exist."""
    keyspace = session.node.keyspace
    return sum(1 for key in args[1:] if keyspace.get(session.db, key) is not None)


@command("type", 2, "readonly fast", (1, 1, 1), "generic", categories="@keyspace")
def type_(session: Session, args: list[bytes]) -> Any:
    """Determines the type of value stored at a key."""
    found = session.node.keyspace.get(session.db, args[1]) is not None
    return SimpleString("stream" if found else "none")


@command(
    "keys", 2, "readonly", (0, 0, 0), "generic", complexity="O(N)",
    categories="@keyspace @dangerous",
)
def keys(session: Session, args: list[bytes]) -> Any:
    """Returns all key names that match a pattern."""
    return [k for k in session.node.keyspace.names(session.db) if glob.match(args[1], k)]


@command(
    "scan", -2, "readonly", (0, 0, 0), "generic", since="2.8.0", complexity="O(N)",
    categories="@keyspace",
)
def scan(session: Session, args: list[bytes]) -> Any:
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
    following, chunk = scan_positions(session.node.keyspace.names(session.db), cursor, count)
    if kind not in (None, b"stream"):
        chunk = []
    return [b"%d" % following, [k for k in chunk if glob.match(pattern, k)]]


_POSITION_MASK = (1 << 63) - 1


def _position(key: bytes) -> int:
    """A key's fixed place in the scan order, 1 .. 2**63: its hash, which Python
    caches on the key object. Positions do not move when other keys come and go."""
    return (hash(key) & _POSITION_MASK) + 1


def scan_positions(keys: Collection[bytes], cursor: int, count: int) -> tuple[int, list[bytes]]:
    """One SCAN step over `keys`: about `count` keys at positions >= `cursor`, in
    position order, and the next cursor (0 at the end). Because a key's position is
    fixed, a key present during a whole iteration is returned at least once however
    the keyspace changes meanwhile, as Redis's SCAN promises; keys sharing a position
    are always returned together."""
    ahead = [(pos, key) for key in keys if (pos := _position(key)) >= cursor]
    if len(ahead) <= count:
        return 0, [key for _, key in ahead]
    ahead = heapq.nsmallest(count + 1, ahead)
    following = ahead[count][0]
    chunk = [key for pos, key in ahead if pos < following]
    if not chunk:  # count + 1 keys at one position: take that whole run
        chunk = [key for key in keys if _position(key) == following]
        following += 1
    return following, chunk


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


@command("rename", 3, "write", (1, 2, 1), "generic", complexity="O(1)", categories="@keyspace")
def rename(session: Session, args: list[bytes]) -> Any:
    """Renames a key and overwrites the destination."""
    _rename(session, args[1], args[2], nx=False)
    return OK


@command(
    "renamenx", 3, "write fast", (1, 2, 1), "generic", complexity="O(1)", categories="@keyspace"
)
def renamenx(session: Session, args: list[bytes]) -> Any:
    """Renames a key only when the target key name doesn't exist."""
    return 1 if _rename(session, args[1], args[2], nx=True) else 0


def _rename(session: Session, src: bytes, dst: bytes, nx: bool) -> bool:
    keyspace = session.node.keyspace
    if keyspace.get(session.db, src) is None:
        raise CommandError("no such key")
    if nx and keyspace.get(session.db, dst) is not None:
        return False
    keyspace.rename(session.db, src, dst)
    return True


@command("dbsize", 1, "readonly fast", group="server", categories="@keyspace")
def dbsize(session: Session, args: list[bytes]) -> Any:
    """Returns the number of keys in the database."""
    return len(session.node.keyspace.names(session.db))


def _flush_args(args: list[bytes]) -> None:
    if len(args) > 2 or (len(args) == 2 and args[1].lower() not in (b"async", b"sync")):
        raise syntax()


@command(
    "flushdb", -1, "write", group="server", complexity="O(N)", categories="@keyspace @dangerous"
)
def flushdb(session: Session, args: list[bytes]) -> Any:
    """Remove all keys from the current database."""
    _flush_args(args)
    session.node.keyspace.flushdb(session.db)
    return OK


@command(
    "flushall", -1, "write", group="server", complexity="O(N)", categories="@keyspace @dangerous"
)
def flushall(session: Session, args: list[bytes]) -> Any:
    """Removes all keys from all databases."""
    _flush_args(args)
    for db in range(len(session.node.keyspace.dbs)):
        session.node.keyspace.flushdb(db)
    return OK


def db_index(session: Session, arg: bytes) -> int:
    index = parse_int(arg)
    if not 0 <= index < len(session.node.keyspace.dbs):
        raise CommandError("DB index is out of range")
    return index


@command("select", 2, "loading stale fast", group="connection", since="1.0.0")
def select(session: Session, args: list[bytes]) -> Any:
    """Changes the selected database."""
    session.db = db_index(session, args[1])
    return OK


@command(
    "swapdb", 3, "write fast", group="server", since="4.0.0", complexity="O(N)",
    categories="@keyspace @dangerous",
)
def swapdb(session: Session, args: list[bytes]) -> Any:
    """Swaps two Redis databases."""
    a = parse_int(args[1], "invalid first DB index")
    b = parse_int(args[2], "invalid second DB index")
    databases = len(session.node.keyspace.dbs)
    if not (0 <= a < databases and 0 <= b < databases):
        raise CommandError("DB index is out of range")
    if a != b:
        session.node.keyspace.swapdb(a, b)
        _swapped(session, a, b)
    return OK


def _swapped(session: Session, a: int, b: int) -> None:
    """After SWAPDB a b, as Redis: WATCHed keys that exist in either database are
    spoiled, and readers blocked in either get another look."""
    node = session.node
    dbs = node.keyspace.dbs
    for db, key in list(node.keys.watchers):
        if db in (a, b) and (key in dbs[a] or key in dbs[b]):
            node.keys.spoil(db, key)
    for db, key in list(node.keys.waiters):
        if db in (a, b):
            node.keys.wake(db, key)


def _rename_keys(argv: list[bytes]) -> list[tuple[int | None, int]]:
    """The source is read and deleted, the destination written (Redis's key specs)."""
    return [(1, READ | WRITE), (2, WRITE)]


finds_keys("rename", _rename_keys)
finds_keys("renamenx", _rename_keys)
