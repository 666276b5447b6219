"""Stream commands without consumer groups: XADD, XRANGE, XREVRANGE, XLEN, XDEL,
XTRIM, XREAD, XSETID, with Redis 7.0's replies and error texts.

Consumer group commands (XGROUP, XREADGROUP, XACK, XPENDING, XCLAIM, XAUTOCLAIM,
XINFO) live in narad/commands/groups.py.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from narad.acl.user import READ
from narad.commands.args import parse_int, parse_timeout_ms
from narad.commands.schema import check_entry
from narad.commands.table import COMMANDS, command, finds_keys
from narad.errors import IDS_EXHAUSTED, CommandError, syntax, wrong_arity
from narad.held_back import can_hold
from narad.keywatch import Block
from narad.log.format import entry_too_large
from narad.node import Streamed
from narad.resp import NullArray
from narad.streams import ids, references
from narad.streams.stream import Entry, Stream

if TYPE_CHECKING:
    from narad.node import Session

# An XRANGE or XREVRANGE of more entries than this is answered this many at a time
# (Streamed), other clients' commands running in between.
PART_ENTRIES = 1000


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def entry_reply(entry: Entry) -> list[Any]:
    sid, fields = entry
    return [ids.fmt(sid), fields]



def get_stream(session: Session, key: bytes) -> Stream | None:
    return session.node.keyspace.get(session.db, key)


def written(session: Session, key: bytes) -> None:
    """After entries were added to `key`, or the key was made: WATCH and blocked
    readers learn of it."""
    session.node.written(session.db, key)


def changed(session: Session, key: bytes) -> None:
    """After any other write to `key` (trims, deletes, XSETID, consumer groups):
    transactions WATCHing it abort and, as in Redis 7.0, no blocked reader is woken
    (XGROUP DESTROY wakes its group's readers itself)."""
    session.node.keys.spoil(session.db, key)


# KEEPREF | DELREF | ACKED, as XADD, XTRIM, XDELEX and XACKDEL take them.
STRATEGIES = {name.encode(): name for name in references.STRATEGIES}


# -- XADD / XTRIM ------------------------------------------------------------------------


@dataclass
class TrimArgs:
    maxlen: int | None = None
    minid: int | None = None
    approx: bool = False
    limit: int = 0
    nomkstream: bool = False
    explicit_id: int | None = None  # XADD's ID unless `*`: full or with `-*` (seq_given)
    seq_given: bool = True
    strategy: str = references.KEEPREF  # what trimming does with groups' references


def parse_trim_args(session: Session, args: list[bytes], xadd: bool) -> tuple[TrimArgs, int]:
    """Options from args[2] on; returns them and the index where XADD's ID is."""
    opts = TrimArgs()
    limit_given = False
    i = 2
    while i < len(args):
        more = len(args) - 1 - i
        opt = args[i].lower()
        if xadd and args[i] == b"*":
            break
        if opt in (b"maxlen", b"minid") and more:
            if opts.maxlen is not None or opts.minid is not None:
                raise CommandError(
                    "syntax error, MAXLEN and MINID options at the same time are not compatible"
                )
            opts.approx = False
            if more >= 2 and args[i + 1] in (b"~", b"="):
                opts.approx = args[i + 1] == b"~"
                i += 1
            if opt == b"maxlen":
                opts.maxlen = parse_int(args[i + 1])
                if opts.maxlen < 0:
                    raise CommandError("The MAXLEN argument must be >= 0.")
            else:
                opts.minid = ids.parse(args[i + 1], strict=True)
            i += 2
        elif opt == b"limit" and more:
            opts.limit = parse_int(args[i + 1])
            if opts.limit < 0:
                raise CommandError("The LIMIT argument must be >= 0.")
            limit_given = True
            i += 2
        elif xadd and opt == b"nomkstream":
            opts.nomkstream = True
            i += 1
        elif opt in STRATEGIES:
            opts.strategy = STRATEGIES[opt]
            i += 1
        elif xadd:  # the ID, checked here as Redis does, before the rest
            opts.explicit_id, opts.seq_given = ids.parse_for_add(args[i])
            break
        else:
            raise syntax()
    strategy = opts.maxlen is not None or opts.minid is not None
    if opts.limit and not strategy:
        raise CommandError(
            "syntax error, LIMIT cannot be used without specifying a trimming strategy"
        )
    if not xadd and not strategy:
        raise CommandError("syntax error, XTRIM must be called with a trimming strategy")
    if limit_given and not opts.approx:
        raise CommandError("syntax error, LIMIT cannot be used without the special ~ option")
    if opts.approx and not limit_given:
        node = int(session.node.config["stream-node-max-entries"])  # type: ignore[call-overload]
        opts.limit = min(max(100 * node, 0) or 10000, 1_000_000)
    return opts, i


@command(
    "xadd",
    -5,
    "write denyoom fast",
    (1, 1, 1),
    "stream",
    since="5.0.0",
    complexity="O(1) when adding a new entry, O(N) when trimming",
)
def xadd(session: Session, args: list[bytes]) -> Any:
    """Appends a new message to a stream. Creates the key if it doesn't exist."""
    if args[2] == b"*" and len(args) & 1:
        # The hot path, `XADD key * field value ...` on an existing stream: the same
        # steps as below with every option absent.
        keyspace = session.node.keyspace
        stream = keyspace.dbs[session.db].get(args[1])
        if stream is not None and stream.last_id != ids.ID_MAX:
            if keyspace.validators:  # a schema somewhere: one dict lookup for this key
                check_entry(session, stream, args[3:])
            try:
                sid = stream.add_auto((args,), 3)
            except ValueError as exc:  # over the log's record limit: nothing added
                raise CommandError(str(exc)) from None
            session.node.written(session.db, args[1])
            return b"%d-%d" % (sid >> 64, sid & ids.SEQ_MASK)
    if args[2] == b"*":
        opts, idpos = NO_TRIM, 2
    else:
        opts, idpos = parse_trim_args(session, args, xadd=True)
    fields = args[idpos + 1 :]
    if idpos >= len(args) or len(fields) < 2 or len(fields) % 2:
        raise wrong_arity("xadd")
    explicit, seq_given = opts.explicit_id, opts.seq_given
    if seq_given and explicit == 0:
        raise CommandError("The ID specified in XADD must be greater than 0-0")
    if (refusal := entry_too_large(fields)) is not None:  # before the key is made
        raise CommandError(refusal)
    keyspace = session.node.keyspace
    key = args[1]
    stream = keyspace.get(session.db, key)
    if stream is None:
        if opts.nomkstream:
            return None
        stream = keyspace.create_stream(session.db, key)
    last = stream.last_id
    if last == ids.ID_MAX:
        raise CommandError(IDS_EXHAUSTED)
    new_id = None if explicit is None else _explicit_id(last, explicit, seq_given)
    if explicit is not None and (new_id is None or new_id <= last):
        raise CommandError(
            "The ID specified in XADD is equal or smaller than the target stream top item"
        )
    if keyspace.validators:
        check_entry(session, stream, fields)
    if new_id is None:
        new_id = stream.add_auto((fields,))
    else:
        stream.add(new_id, fields)
    written(session, key)
    if opts.maxlen is not None or opts.minid is not None:
        references.trim(stream, opts.maxlen, opts.minid, opts.approx, opts.limit, opts.strategy)
    return ids.fmt(new_id)


NO_TRIM = TrimArgs()
# Entries a blocked XREAD or XREADGROUP gets at most when it gave no COUNT (as Redis).
BLOCKED_COUNT_DEFAULT = 1000


def xadd_run(
    session: Session, argv: list[bytes], queued: deque[list[bytes]]
) -> list[list[bytes]] | None:
    """Pipelined `XADD key * field value ...` on an existing stream: `argv` and the
    XADDs queued right after it to the same key in the same form, held back with
    the like entries of other clients to that stream and added with them in one
    call to the log (narad/held_back.py); the same entries, IDs and replies as
    running them one by one within one millisecond. Returns the argvs taken; None
    (nothing done) for any other form, which the general handler answers."""
    key = argv[1]
    if argv[2] != b"*" or not len(argv) & 1:
        return None
    keyspace = session.node.keyspace
    stream = keyspace.dbs[session.db].get(key)
    if stream is None or not can_hold(keyspace, stream):
        return None
    run = [argv]
    name = argv[0]
    for more in queued:
        if (
            more[0] != name
            or more[1] != key
            or more[2] != b"*"
            or not len(more) & 1
            or len(more) < 5
        ):
            break
        run.append(more)
    session.node.hold_back(session, XADD, stream, run)
    return run


XADD = COMMANDS[b"xadd"]
XADD.run = xadd_run


def _explicit_id(last: int, explicit: int, seq_given: bool) -> int | None:
    """The ID an explicit `ms-seq` or `ms-*` gives after `last`; None when none fits."""
    if seq_given:
        return explicit
    ms, _ = ids.split(explicit)
    last_ms, last_seq = ids.split(last)
    if ms == last_ms:
        return None if last_seq == ids.U64_MAX else last + 1
    return explicit


@command("xtrim", -4, "write", (1, 1, 1), "stream", since="5.0.0", complexity="O(N)")
def xtrim(session: Session, args: list[bytes]) -> Any:
    """Deletes messages from the beginning of a stream."""
    opts, i = parse_trim_args(session, args, xadd=False)
    if i < len(args):
        raise syntax()
    stream = get_stream(session, args[1])
    if stream is None:
        return 0
    state_end = stream.state.next_offset
    removed = references.trim(
        stream, opts.maxlen, opts.minid, opts.approx, opts.limit, opts.strategy
    )
    if stream.state.next_offset != state_end:  # entries or references went
        changed(session, args[1])
    return removed


# -- reading ------------------------------------------------------------------------------


def parse_count(args: list[bytes], i: int) -> int:
    count = parse_int(args[i])
    return max(count, 0)


def _range(session: Session, args: list[bytes], reverse: bool) -> Any:
    high_arg, low_arg = (args[2], args[3]) if reverse else (args[3], args[2])
    low = ids.parse_range_bound(low_arg, low=True)
    high = ids.parse_range_bound(high_arg, low=False)
    if low_arg[:1] == b"(" and low is None:
        raise CommandError("invalid start ID for the interval")
    if high_arg[:1] == b"(" and high is None:
        raise CommandError("invalid end ID for the interval")
    count: int | None = None  # not given: all
    for i in range(4, len(args), 2):  # as in Redis, a repeated COUNT overrides
        if args[i].lower() != b"count" or i + 1 == len(args):
            raise syntax()
        count = max(parse_int(args[i + 1]), 0)
    stream = get_stream(session, args[1])
    if stream is None:
        return []
    if count == 0:  # after the key's lookup, as in Redis
        return NullArray()
    if low is None or high is None or low > high:
        return []
    count = count or 0  # 0: all, for range and revrange
    if (not count or count > PART_ENTRIES) and not session.in_exec:
        # Perhaps too long to encode in one turn of the event loop (narad/node.py).
        length, parts = stream.range_parts(low, high, count, reverse, PART_ENTRIES)
        if length > PART_ENTRIES:
            return Streamed(length, ([entry_reply(e) for e in part] for part in parts))
        return [entry_reply(e) for part in parts for e in part]
    found = stream.revrange(high, low, count) if reverse else stream.range(low, high, count)
    return [entry_reply(e) for e in found]


@command("xrange", -4, "readonly", (1, 1, 1), "stream", since="5.0.0", complexity="O(N)")
def xrange(session: Session, args: list[bytes]) -> Any:
    """Returns the messages from a stream within a range of IDs."""
    return _range(session, args, reverse=False)


@command("xrevrange", -4, "readonly", (1, 1, 1), "stream", since="5.0.0", complexity="O(N)")
def xrevrange(session: Session, args: list[bytes]) -> Any:
    """Returns the messages from a stream within a range of IDs in reverse order."""
    return _range(session, args, reverse=True)


@command("xlen", 2, "readonly fast", (1, 1, 1), "stream", since="5.0.0")
def xlen(session: Session, args: list[bytes]) -> Any:
    """Return the number of messages in a stream."""
    stream = get_stream(session, args[1])
    return stream.length if stream is not None else 0


@command("xdel", -3, "write fast", (1, 1, 1), "stream", since="5.0.0", complexity="O(1) per ID")
def xdel(session: Session, args: list[bytes]) -> Any:
    """Returns the number of messages after removing them from a stream."""
    stream = get_stream(session, args[1])
    if stream is None:  # as in Redis, the IDs are not even parsed then
        return 0
    sids = [ids.parse(a, strict=True) for a in args[2:]]
    removed = stream.delete(sids)
    if removed:
        changed(session, args[1])
    return removed


def parse_delete_args(args: list[bytes], i: int) -> tuple[str, list[int]]:
    """XDELEX's and XACKDEL's `[KEEPREF | DELREF | ACKED] IDS numids id...` from
    args[i] on, as Redis reads them: the strategy at most once (KEEPREF by default),
    the IDS block anywhere, and every ID strict. Returns (strategy, IDs)."""
    strategy: str | None = None
    id_args: list[bytes] | None = None
    while i < len(args):
        opt = args[i].lower()
        if strategy is None and opt in STRATEGIES:
            strategy = STRATEGIES[opt]
            i += 1
        elif opt == b"ids" and i + 1 < len(args):
            count = parse_int(args[i + 1], "Number of IDs must be a positive integer")
            if count < 1:
                raise CommandError("Number of IDs must be a positive integer")
            if count > len(args) - i - 2:
                raise CommandError("The `numids` parameter must match the number of arguments")
            id_args = args[i + 2 : i + 2 + count]
            i += 2 + count
        else:
            raise syntax()
    if id_args is None:
        raise syntax()
    return strategy or references.KEEPREF, ids.parse_all_strict(id_args)


@command(
    "xdelex",
    -5,
    "write fast",
    (1, 1, 1),
    "stream",
    since="8.2.0",
    complexity="O(1) for each single item to delete in the stream, regardless of the stream size.",
)
def xdelex(session: Session, args: list[bytes]) -> Any:
    """Deletes one or multiple entries from the stream.

    XDELEX key [KEEPREF | DELREF | ACKED] IDS numids id... -> one integer per ID:
    1 deleted, -1 no such entry (or no such key), 2 kept because a consumer group
    still refers to it (ACKED). DELREF also drops every group's PEL reference to
    the IDs (narad/streams/references.py).
    """
    strategy, sids = parse_delete_args(args, 2)
    stream = get_stream(session, args[1])
    if stream is None:
        return [references.NOT_FOUND] * len(sids)
    state_end = stream.state.next_offset
    out = references.delete_entries(stream, sids, strategy)
    if stream.state.next_offset != state_end:
        changed(session, args[1])
    return out


@command("xsetid", -3, "write denyoom fast", (1, 1, 1), "stream", since="5.0.0")
def xsetid(session: Session, args: list[bytes]) -> Any:
    """An internal command for replicating stream values."""
    sid = ids.parse(args[2], strict=True)
    entries_added: int | None = None
    max_deleted: int | None = None
    i = 3
    while i < len(args):
        opt = args[i].lower()
        if opt == b"entriesadded" and i + 1 < len(args):
            entries_added = parse_int(args[i + 1])
            if entries_added < 0:
                raise CommandError("entries_added must be positive")
        elif opt == b"maxdeletedid" and i + 1 < len(args):
            max_deleted = ids.parse(args[i + 1], strict=True)
            if sid < max_deleted:
                raise CommandError(
                    "The ID specified in XSETID is smaller than the provided max_deleted_entry_id"
                )
        else:
            raise syntax()
        i += 2
    stream = get_stream(session, args[1])
    if stream is None:
        raise CommandError("no such key")
    last = stream.last_entry()
    if stream.length and last is not None and sid < last[0]:
        raise CommandError("The ID specified in XSETID is smaller than the target stream top item")
    if entries_added is not None and stream.length > entries_added:
        raise CommandError(
            "The entries_added specified in XSETID is smaller than the target stream length"
        )
    if sid < stream.added_id:
        # Redis lets an ID go back below entries it deleted; here the data log's IDs
        # only increase (docs/streams.md, "Deliberate differences").
        raise CommandError(
            "The ID specified in XSETID is smaller than the ID of an entry the stream held"
        )
    # As in Redis, MAXDELETEDID 0-0 leaves the stream's max deleted ID as it is.
    stream.set_id(sid, entries_added, max_deleted or None)
    changed(session, args[1])
    from narad.resp import SimpleString

    return SimpleString("OK")


# -- XREAD ------------------------------------------------------------------------------


@command(
    "xread",
    -4,
    "readonly blocking movablekeys",
    (0, 0, 0),
    "stream",
    since="5.0.0",
    complexity="O(N) per stream",
)
def xread(session: Session, args: list[bytes]) -> Any:
    """Return never seen elements in multiple streams, with IDs greater than the ones
    reported by the caller for each stream. Can block."""
    count, block_ms, keys, id_args, limits = parse_read_args(args)
    starts: list[int] = []
    for key, arg in zip(keys, id_args, strict=True):
        if arg == b"$":
            stream = get_stream(session, key)
            starts.append(stream.last_id if stream is not None else 0)
        else:
            starts.append(ids.parse(arg))

    reply = _read_streams(session, keys, starts, count, limits.budget())
    if reply is not None or block_ms is None or session.in_exec:
        return reply if reply is not None else NullArray()

    def retry(key: bytes) -> Any:
        # As Redis 7.0 serves a blocked XREAD: the key signaled alone (even when
        # others of its keys have new entries too), once its stream's last ID passed
        # the one waited after, with at most COUNT entries (default
        # BLOCKED_COUNT_DEFAULT) and maybe none (when those after it were deleted
        # or trimmed). A key given twice waits after its first ID.
        stream = get_stream(session, key)
        start = starts[keys.index(key)]
        if stream is None or stream.last_id <= start:
            return None
        budget = limits.budget()
        found = _read_streams(session, [key], [start], count or BLOCKED_COUNT_DEFAULT, budget)
        return found if found is not None else _streams_reply(session, {key: []})

    return Block([(session.db, k) for k in keys], block_ms, retry, NullArray())


def _read_streams(
    session: Session, keys: list[bytes], starts: list[int], count: int, budget: ReadBudget
) -> Any:
    out: dict[bytes, Any] = {}
    for key, after in zip(keys, starts, strict=True):
        stream = get_stream(session, key)
        if stream is None or after == ids.ID_MAX or budget.spent:
            continue
        found = stream.range(after + 1, ids.ID_MAX, budget.count(count))
        found = found[: budget.fit([(sid, fields_size(fields)) for sid, fields in found])]
        if found:
            out[key] = [entry_reply(e) for e in found]
    return _streams_reply(session, out) if out else None


def fields_size(fields: list[bytes] | None) -> int:
    """The bytes of an entry's fields and values (0 for a deleted one)."""
    return sum(map(len, fields)) if fields is not None else 0


@dataclass
class ReadLimits:
    """XREAD's and XREADGROUP's MAXCOUNT and MAXSIZE (Redis 8.10): bounds of the
    whole reply, across its streams (0: none)."""

    max_count: int = 0
    max_size: int = 0

    def budget(self) -> ReadBudget:
        return ReadBudget(self.max_count, self.max_size)


class ReadBudget:
    """What one read may still answer under its ReadLimits. An entry's size is its
    ID's text and its fields' and values' bytes; an entry that would take the reply
    past MAXSIZE is left out, unless it is the first of the reply (at least one
    entry is always answered)."""

    __slots__ = ("entries_left", "served", "size_left", "spent")

    def __init__(self, max_count: int, max_size: int) -> None:
        self.entries_left = max_count or None
        self.size_left = max_size or None
        self.served = 0
        self.spent = False  # a bound was reached: later streams get nothing

    def count(self, count: int) -> int:
        """The COUNT to read a stream with (0: all), within MAXCOUNT."""
        left = self.entries_left
        if left is None:
            return count
        return min(count, left) if count else left

    def fit(self, sizes: list[tuple[int, int]]) -> int:
        """How many of these entries, (ID, fields' size) in reply order, the reply
        takes; they are counted as served."""
        taken = 0
        for sid, size in sizes:
            if self.size_left is not None:
                size += len(ids.fmt(sid))
                if self.served and size > self.size_left:
                    self.spent = True
                    break
                self.size_left -= size
            self.served += 1
            taken += 1
        if self.entries_left is not None:
            self.entries_left -= taken
            if self.entries_left <= 0:
                self.spent = True
        return taken


def _streams_reply(session: Session, found: dict[bytes, Any]) -> Any:
    """XREAD's reply: stream key -> entries, a map in RESP3."""
    if session.protocol >= 3:
        return found
    return [[k, v] for k, v in found.items()]


def parse_read_args(
    args: list[bytes],
) -> tuple[int, int | None, list[bytes], list[bytes], ReadLimits]:
    """XREAD's COUNT / MAXCOUNT / MAXSIZE / BLOCK / STREAMS, checked in order as Redis
    does. Returns (count, block_ms or None, keys, ids, limits)."""
    count, block_ms = 0, None
    limits = ReadLimits()
    i = 1
    while i < len(args):
        opt = args[i].lower()
        more = len(args) - 1 - i
        if opt == b"count" and more:
            count = max(parse_int(args[i + 1]), 0)
            i += 2
        elif opt in (b"maxcount", b"maxsize") and more:
            parse_read_limit(limits, opt, args[i + 1])
            i += 2
        elif opt == b"block" and more:
            block_ms = parse_timeout_ms(args[i + 1])
            i += 2
        elif opt == b"streams" and more:
            rest = args[i + 1 :]
            if len(rest) % 2:
                raise CommandError(
                    "Unbalanced XREAD list of streams: for each stream key an ID or '$' "
                    "must be specified."
                )
            check_read_limits(limits, count)
            half = len(rest) // 2
            return count, block_ms, rest[:half], rest[half:], limits
        elif opt == b"group" and more >= 2:
            raise CommandError(
                "The GROUP option is only supported by XREADGROUP. You called XREAD instead."
            )
        elif opt == b"noack":
            raise CommandError(
                "The NOACK option is only supported by XREADGROUP. You called XREAD instead."
            )
        elif opt == b"claim":
            raise CommandError(
                "The CLAIM option is only supported by XREADGROUP. You called XREAD instead."
            )
        else:
            raise syntax()
    raise syntax()


def parse_read_limit(limits: ReadLimits, opt: bytes, arg: bytes) -> None:
    """MAXCOUNT n or MAXSIZE bytes: a positive integer."""
    name = opt.decode().upper()
    value = parse_int(arg, f"{name} must be > 0")
    if value <= 0:
        raise CommandError(f"{name} must be > 0")
    if opt == b"maxcount":
        limits.max_count = value
    else:
        limits.max_size = value


def check_read_limits(limits: ReadLimits, count: int) -> None:
    """MAXCOUNT bounds the whole reply, COUNT each stream: MAXCOUNT may not be less."""
    if limits.max_count and count and limits.max_count < count:
        raise CommandError("MAXCOUNT must be greater than or equal to COUNT")


def _xread_keys(argv: list[bytes]) -> list[tuple[int | None, int]]:
    """XREAD's keys as its own parser finds them (none if it refuses the arguments)."""
    try:
        keys = parse_read_args(argv)[2]
    except CommandError:
        return []
    return stream_keys_at_end(argv, len(keys), READ)


def stream_keys_at_end(argv: list[bytes], count: int, access: int) -> list[tuple[int | None, int]]:
    """The `count` keys of STREAMS key... id...: the first half of argv's tail."""
    start = len(argv) - 2 * count
    return [(i, access) for i in range(start, start + count)]


finds_keys("xread", _xread_keys)
