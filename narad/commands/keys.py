"""Keyspace commands: DEL, UNLINK, EXISTS, TYPE, KEYS, SCAN, RENAME, RENAMENX, DBSIZE,
FLUSHDB, FLUSHALL, SELECT, SWAPDB. Every key is a stream (a queue is a stream too)."""

from __future__ import annotations

import fnmatch
import heapq
import re
from collections.abc import Collection
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from narad.commands.args import parse_int
from narad.commands.table import command
from narad.errors import CommandError, syntax
from narad.resp import SimpleString

if TYPE_CHECKING:
    from narad.client import Client

OK = SimpleString("OK")


def _delete(client: Client, keys: list[bytes]) -> int:
    keyspace = client.server.keyspace
    removed = 0
    for key in keys:
        if keyspace.delete(client.db, key):
            removed += 1
    return removed


@command("del", -2, "write", (1, -1, 1), "generic", complexity="O(N)", categories="@keyspace")
def del_(client: Client, args: list[bytes]) -> Any:
    """Deletes one or more keys."""
    return _delete(client, args[1:])


@command(
    "unlink", -2, "write fast", (1, -1, 1), "generic", since="4.0.0", complexity="O(1)",
    categories="@keyspace",
)
def unlink(client: Client, args: list[bytes]) -> Any:
    """Asynchronously deletes one or more keys."""
    return _delete(client, args[1:])


@command("exists", -2, "readonly fast", (1, -1, 1), "generic", categories="@keyspace")
def exists(client: Client, args: list[bytes]) -> Any:
    """Determines whether one or more keys exist."""
    keyspace = client.server.keyspace
    return sum(1 for key in args[1:] if keyspace.get(client.db, key) is not None)


@command("type", 2, "readonly fast", (1, 1, 1), "generic", categories="@keyspace")
def type_(client: Client, args: list[bytes]) -> Any:
    """Determines the type of value stored at a key."""
    found = client.server.keyspace.get(client.db, args[1]) is not None
    return SimpleString("stream" if found else "none")


@lru_cache(maxsize=256)
def glob_regex(pattern: bytes) -> re.Pattern[bytes] | None:
    """A regex equal to Redis's glob for patterns of literals, `*` and `?` only (the
    common case, matched in C); None for patterns with `[` or `\\`, which take
    `stringmatch`, the line-by-line port of Redis's matcher. fnmatch's translation
    puts each `*` segment in an atomic group, so matching stays linear however many
    stars a pattern has (no catastrophic backtracking)."""
    if b"[" in pattern or b"\\" in pattern:
        return None
    return re.compile(fnmatch.translate(pattern.decode("latin-1")).encode("latin-1"))


def stringmatch(pattern: bytes, string: bytes) -> bool:
    """Redis 7.0's stringmatchlen (util.c), case-sensitive, with its edge cases: an
    unclosed `[` class ends at the pattern's end, `[z-a]` is the range a-z, `\\`
    escapes inside and outside classes, and an empty string matches only an empty
    pattern."""
    return _match(pattern, 0, string, 0, [False], 0)


# Like Redis 7.2 (whose limit is 1000), a pattern that nests `*` deeper than this
# matches nothing, so that no pattern can exhaust the interpreter's stack.
MAX_STAR_NESTING = 300


def _match(p: bytes, pi: int, s: bytes, si: int, skip_longer: list[bool], depth: int) -> bool:
    if depth > MAX_STAR_NESTING:
        return False
    plen, slen = len(p), len(s)
    while pi < plen and si < slen:
        ch = p[pi]
        if ch == 42:  # *
            while pi + 1 < plen and p[pi + 1] == 42:
                pi += 1
            if pi + 1 == plen:
                return True
            while si < slen:
                if _match(p, pi + 1, s, si, skip_longer, depth + 1):
                    return True
                if skip_longer[0]:
                    return False
                si += 1
            skip_longer[0] = True
            return False
        if ch == 63:  # ?
            si += 1
        elif ch == 91:  # [
            pi += 1
            negate = pi < plen and p[pi] == 94  # ^
            if negate:
                pi += 1
            matched = False
            c = s[si]
            while True:
                if pi < plen and p[pi] == 92 and plen - pi >= 2:  # \ escape
                    pi += 1
                    if p[pi] == c:
                        matched = True
                elif pi < plen and p[pi] == 93:  # ]
                    break
                elif pi >= plen:  # unclosed: the class ends with the pattern
                    pi -= 1
                    break
                elif plen - pi >= 3 and p[pi + 1] == 45:  # a-z, compared as C's signed chars
                    start, end = sorted((_signed(p[pi]), _signed(p[pi + 2])))
                    pi += 2
                    if start <= _signed(c) <= end:
                        matched = True
                elif p[pi] == c:
                    matched = True
                pi += 1
            if negate:
                matched = not matched
            if not matched:
                return False
            si += 1
        else:
            if ch == 92 and plen - pi >= 2:  # \ escape
                pi += 1
            if p[pi] != s[si]:
                return False
            si += 1
        pi += 1
        if si == slen:
            while pi < plen and p[pi] == 42:
                pi += 1
            break
    return pi >= plen and si == slen


def _signed(byte: int) -> int:
    return byte - 256 if byte > 127 else byte


def glob_match(pattern: bytes, name: bytes) -> bool:
    if pattern == b"*":
        return True
    if not name:
        return not pattern
    regex = glob_regex(pattern)
    if regex is not None:
        return regex.match(name) is not None
    return stringmatch(pattern, name)


@command(
    "keys", 2, "readonly", (0, 0, 0), "generic", complexity="O(N)",
    categories="@keyspace @dangerous",
)
def keys(client: Client, args: list[bytes]) -> Any:
    """Returns all key names that match a pattern."""
    return [k for k in client.server.keyspace.names(client.db) if glob_match(args[1], k)]


@command(
    "scan", -2, "readonly", (0, 0, 0), "generic", since="2.8.0", complexity="O(N)",
    categories="@keyspace",
)
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
    following, chunk = scan_positions(client.server.keyspace.names(client.db), cursor, count)
    if kind not in (None, b"stream"):
        chunk = []
    return [b"%d" % following, [k for k in chunk if glob_match(pattern, k)]]


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
def rename(client: Client, args: list[bytes]) -> Any:
    """Renames a key and overwrites the destination."""
    _rename(client, args[1], args[2], nx=False)
    return OK


@command(
    "renamenx", 3, "write fast", (1, 2, 1), "generic", complexity="O(1)", categories="@keyspace"
)
def renamenx(client: Client, args: list[bytes]) -> Any:
    """Renames a key only when the target key name doesn't exist."""
    return 1 if _rename(client, args[1], args[2], nx=True) else 0


def _rename(client: Client, src: bytes, dst: bytes, nx: bool) -> bool:
    keyspace = client.server.keyspace
    if keyspace.get(client.db, src) is None:
        raise CommandError("no such key")
    if nx and keyspace.get(client.db, dst) is not None:
        return False
    keyspace.rename(client.db, src, dst)
    return True


@command("dbsize", 1, "readonly fast", group="server", categories="@keyspace")
def dbsize(client: Client, args: list[bytes]) -> Any:
    """Returns the number of keys in the database."""
    return len(client.server.keyspace.names(client.db))


def _flush_args(args: list[bytes]) -> None:
    if len(args) > 2 or (len(args) == 2 and args[1].lower() not in (b"async", b"sync")):
        raise syntax()


@command(
    "flushdb", -1, "write", group="server", complexity="O(N)", categories="@keyspace @dangerous"
)
def flushdb(client: Client, args: list[bytes]) -> Any:
    """Remove all keys from the current database."""
    _flush_args(args)
    client.server.keyspace.flushdb(client.db)
    return OK


@command(
    "flushall", -1, "write", group="server", complexity="O(N)", categories="@keyspace @dangerous"
)
def flushall(client: Client, args: list[bytes]) -> Any:
    """Removes all keys from all databases."""
    _flush_args(args)
    for db in range(len(client.server.keyspace.dbs)):
        client.server.keyspace.flushdb(db)
    return OK


def db_index(client: Client, arg: bytes) -> int:
    index = parse_int(arg)
    if not 0 <= index < len(client.server.keyspace.dbs):
        raise CommandError("DB index is out of range")
    return index


@command("select", 2, "loading stale fast", group="connection", since="1.0.0")
def select(client: Client, args: list[bytes]) -> Any:
    """Changes the selected database."""
    client.db = db_index(client, args[1])
    return OK


@command(
    "swapdb", 3, "write fast", group="server", since="4.0.0", complexity="O(N)",
    categories="@keyspace @dangerous",
)
def swapdb(client: Client, args: list[bytes]) -> Any:
    """Swaps two Redis databases."""
    a = parse_int(args[1], "invalid first DB index")
    b = parse_int(args[2], "invalid second DB index")
    databases = len(client.server.keyspace.dbs)
    if not (0 <= a < databases and 0 <= b < databases):
        raise CommandError("DB index is out of range")
    if a != b:
        client.server.keyspace.swapdb(a, b)
        _swapped(client, a, b)
    return OK


def _swapped(client: Client, a: int, b: int) -> None:
    """After SWAPDB a b, as Redis: WATCHed keys that exist in either database are
    spoiled, and readers blocked in either get another look."""
    server = client.server
    dbs = server.keyspace.dbs
    for db, key in list(server.watchers):
        if db in (a, b) and (key in dbs[a] or key in dbs[b]):
            server.key_touched(db, key)
    for db, key in list(server.waiters):
        if db in (a, b):
            server.signal_key(db, key)
