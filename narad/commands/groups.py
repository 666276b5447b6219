"""Consumer group commands: XGROUP, XREADGROUP, XACK, XPENDING, XCLAIM, XAUTOCLAIM and
XINFO (STREAM included, since it shows groups), with Redis 7.0's replies and texts.

Each handler parses its arguments in the order Redis does (so the same bad command
gets the same first error), reads the keyspace, and changes group state only through
narad/streams/groups.py, one op per stream and call. Times come from
`groups.now_ms()` alone. After a change the key is touched (WATCH); XGROUP DESTROY
also signals the key, so that XREADGROUP calls blocked on the group fail with
NOGROUP as in Redis.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from narad.acl.user import READ, WRITE
from narad.commands.args import INT64_MAX, parse_int, parse_timeout_ms, text
from narad.commands.frames import entries_reply
from narad.commands.streams import (
    BLOCKED_COUNT_DEFAULT,
    ReadBudget,
    ReadLimits,
    changed,
    check_read_limits,
    parse_delete_args,
    parse_read_limit,
    stream_keys_at_end,
    written,
)
from narad.commands.table import command, container, finds_keys
from narad.errors import CommandError, syntax
from narad.keywatch import Block
from narad.resp import Encoded, NullArray, SimpleString
from narad.streams import groups, ids, references
from narad.streams.groups import ClaimOptions, Counters
from narad.streams.pel import Consumer, Group
from narad.streams.stream import Entry, Stream

if TYPE_CHECKING:
    from narad.node import Session

OK = SimpleString("OK")
AUTOCLAIM_COUNT_MAX = ((1 << 63) - 1) // 16


# -- helpers -------------------------------------------------------------------------------


def _stream(session: Session, key: bytes) -> Stream | None:
    return session.node.keyspace.get(session.db, key)


def _entry(entry: Entry) -> list[Any]:
    return [ids.fmt(entry[0]), entry[1]]


def _nogroup(message: str) -> CommandError:
    return CommandError(message, "NOGROUP")


def _subcommand_syntax(args: list[bytes], parent: str) -> CommandError:
    return CommandError(
        f"unknown subcommand or wrong number of arguments for '{text(args[1][:128])}'. "
        f"Try {parent} HELP."
    )


def _help(parent: str, lines: list[str]) -> list[SimpleString]:
    head = f"{parent} <subcommand> [<arg> [value] [opt] ...]. Subcommands are:"
    return [SimpleString(s) for s in [head, *lines, "HELP", "    Prints this help."]]


def _interval(arg: bytes, low: bool) -> int:
    """An XPENDING / XAUTOCLAIM bound, `(` making it exclusive (Redis's
    streamParseIntervalIDOrReply followed by the increment or decrement)."""
    if len(arg) > 1 and arg[:1] == b"(":
        sid = ids.parse(arg[1:], 0 if low else ids.U64_MAX, strict=True)
        if low:
            if sid == ids.ID_MAX:
                raise CommandError("invalid start ID for the interval")
            return sid + 1
        if sid == 0:
            raise CommandError("invalid end ID for the interval")
        return sid - 1
    return ids.parse(arg, 0 if low else ids.U64_MAX)


def _multi_reply(session: Session, served: list[tuple[bytes, Any]]) -> Any:
    """XREADGROUP's outer reply: an array of [key, entries] pairs, a map in RESP3."""
    if session.protocol >= 3:
        return dict(served)
    return [[key, entries] for key, entries in served]


# -- XGROUP ----------------------------------------------------------------------------------

container("xgroup", "stream", "A container for consumer groups commands", "5.0.0")

XGROUP_HELP = [
    "CREATE <key> <groupname> <id|$> [option]",
    "    Create a new consumer group. Options are:",
    "    * MKSTREAM",
    "      Create the empty stream if it does not exist.",
    "    * ENTRIESREAD entries_read",
    "      Set the group's entries_read counter (internal use).",
    "CREATECONSUMER <key> <groupname> <consumer>",
    "    Create a new consumer in the specified group.",
    "DELCONSUMER <key> <groupname> <consumer>",
    "    Remove the specified consumer.",
    "DESTROY <key> <groupname>",
    "    Remove the specified group.",
    "SETID <key> <groupname> <id|$> [ENTRIESREAD entries_read]",
    "    Set the current group ID and entries_read counter.",
]


@dataclass
class XGroupArgs:
    """What every XGROUP subcommand (but HELP) resolves before it acts."""

    key: bytes
    name: bytes
    stream: Stream | None
    group: Group | None
    mkstream: bool = False
    entries_read: int | None = None  # None: ENTRIESREAD not given, or -1


def _xgroup_args(session: Session, args: list[bytes]) -> XGroupArgs:
    """Options, then the key (which must exist unless MKSTREAM), then the group
    (which must exist for SETID, CREATECONSUMER and DELCONSUMER), as Redis checks."""
    sub = args[1].lower()
    out = XGroupArgs(args[2], args[3], None, None)
    i = 5
    while i < len(args):
        opt = args[i].lower()
        if sub == b"create" and opt == b"mkstream":
            out.mkstream = True
            i += 1
        elif sub in (b"create", b"setid") and opt == b"entriesread" and i + 1 < len(args):
            out.entries_read = _entries_read(args[i + 1])
            i += 2
        else:
            raise _subcommand_syntax(args, "XGROUP")
    out.stream = _stream(session, out.key)
    if out.mkstream:
        return out
    if out.stream is None:
        raise CommandError(
            "The XGROUP subcommand requires the key to exist. Note that for CREATE you "
            "may want to use the MKSTREAM option to create an empty stream automatically."
        )
    out.group = out.stream.groups.get(out.name)
    if out.group is None and sub in (b"setid", b"createconsumer", b"delconsumer"):
        raise _nogroup(f"No such consumer group '{text(out.name)}' for key name '{text(out.key)}'")
    return out


def _entries_read(arg: bytes) -> int | None:
    value = parse_int(arg)
    if value < 0 and value != -1:
        raise CommandError("value for ENTRIESREAD must be positive or -1")
    return None if value == -1 else value


@command("create", -5, "write denyoom", (2, 2, 1), "stream", since="5.0.0", parent="xgroup")
def xgroup_create(session: Session, args: list[bytes]) -> Any:
    """Create a consumer group.

    XGROUP CREATE key group id|$ [MKSTREAM] [ENTRIESREAD n] -> OK. The ID is strict
    (no `-` / `+`); `$` is the stream's last ID (0-0 for a stream MKSTREAM creates).
    Errors: the key must exist without MKSTREAM; BUSYGROUP if the group exists.
    """
    xa = _xgroup_args(session, args)
    if len(args) > 8:
        raise _subcommand_syntax(args, "XGROUP")
    if args[4] == b"$":
        last_id = xa.stream.last_id if xa.stream is not None else 0
    else:
        last_id = ids.parse(args[4], strict=True)
    stream = xa.stream
    made = stream is None  # MKSTREAM: a new stream has no group to be busy
    if stream is None:
        stream = session.node.keyspace.create_stream(session.db, xa.key)
    if not groups.create_group(stream, xa.name, last_id, xa.entries_read):
        raise CommandError("Consumer Group name already exists", "BUSYGROUP")
    # A new key wakes blocked readers as any new key does; `written` also does what
    # `changed` does, so one of the two.
    (written if made else changed)(session, xa.key)
    return OK


@command("setid", -5, "write", (2, 2, 1), "stream", since="5.0.0", parent="xgroup")
def xgroup_setid(session: Session, args: list[bytes]) -> Any:
    """Set a consumer group to an arbitrary last delivered ID value.

    XGROUP SETID key group id|$ [ENTRIESREAD n] -> OK. `-` and `+` are accepted; the
    read counter becomes n, or unknown without ENTRIESREAD.
    """
    xa = _xgroup_args(session, args)
    if len(args) not in (5, 7):
        raise _subcommand_syntax(args, "XGROUP")
    assert xa.stream is not None and xa.group is not None
    last_id = xa.stream.last_id if args[4] == b"$" else ids.parse(args[4])
    groups.set_group_id(xa.stream, xa.group, last_id, xa.entries_read)
    changed(session, xa.key)
    return OK


@command(
    "destroy",
    4,
    "write",
    (2, 2, 1),
    "stream",
    since="5.0.0",
    parent="xgroup",
    complexity="O(N) where N is the number of entries in the group's pending entries list (PEL).",
)
def xgroup_destroy(session: Session, args: list[bytes]) -> Any:
    """Destroy a consumer group.

    XGROUP DESTROY key group -> 1, or 0 if there was no such group. Clients blocked
    in XREADGROUP on it get NOGROUP.
    """
    xa = _xgroup_args(session, args)
    assert xa.stream is not None
    if not groups.destroy_group(xa.stream, xa.name):
        return 0
    changed(session, xa.key)
    session.node.keys.wake(session.db, xa.key)
    return 1


@command("createconsumer", 5, "write denyoom", (2, 2, 1), "stream", since="6.2.0", parent="xgroup")
def xgroup_createconsumer(session: Session, args: list[bytes]) -> Any:
    """Create a consumer in a consumer group.

    XGROUP CREATECONSUMER key group consumer -> 1 if created, 0 if it existed.
    """
    xa = _xgroup_args(session, args)
    assert xa.stream is not None and xa.group is not None
    if not groups.create_consumer(xa.stream, xa.group, args[4], groups.now_ms()):
        return 0
    changed(session, xa.key)
    return 1


@command("delconsumer", 5, "write", (2, 2, 1), "stream", since="5.0.0", parent="xgroup")
def xgroup_delconsumer(session: Session, args: list[bytes]) -> Any:
    """Delete a consumer from a consumer group.

    XGROUP DELCONSUMER key group consumer -> the number of entries it had pending
    (they are dropped from the group's PEL); 0 for an unknown consumer.
    """
    xa = _xgroup_args(session, args)
    assert xa.stream is not None and xa.group is not None
    if args[4] not in xa.group.consumers:
        return 0
    pending = groups.delete_consumer(xa.stream, xa.group, args[4])
    changed(session, xa.key)
    return pending


@command(
    "help",
    2,
    "loading stale",
    group="stream",
    since="5.0.0",
    parent="xgroup",
    summary="Show helpful text about the different subcommands",
)
def xgroup_help(session: Session, args: list[bytes]) -> Any:
    """Show helpful text about the different subcommands."""
    return _help("XGROUP", XGROUP_HELP)


# -- XREADGROUP ------------------------------------------------------------------------------


@dataclass
class ReadGroupArgs:
    group: bytes = b""
    consumer: bytes = b""
    count: int = 0
    block_ms: int | None = None
    noack: bool = False
    keys: list[bytes] = field(default_factory=list)
    id_args: list[bytes] = field(default_factory=list)
    limits: ReadLimits = field(default_factory=ReadLimits)  # MAXCOUNT, MAXSIZE
    claim_ms: int | None = None  # CLAIM min-idle-time


@dataclass
class Target:
    """One stream of an XREADGROUP call; `after` is None for `>`."""

    key: bytes
    stream: Stream
    group: Group
    after: int | None


def _parse_readgroup(args: list[bytes]) -> ReadGroupArgs:
    out = ReadGroupArgs()
    found_group = False
    i = 1
    while i < len(args):
        more = len(args) - i - 1
        opt = args[i].lower()
        if opt == b"block" and more:
            i += 1
            out.block_ms = _block_timeout(args[i])
        elif opt == b"count" and more:
            i += 1
            out.count = max(parse_int(args[i]), 0)
        elif opt in (b"maxcount", b"maxsize") and more:
            i += 1
            parse_read_limit(out.limits, opt, args[i])
        elif opt == b"claim" and more:
            i += 1
            out.claim_ms = parse_int(args[i], "min-idle-time is not an integer")
            if out.claim_ms < 0:
                raise CommandError("min-idle-time must be a positive integer")
        elif opt == b"streams" and more:
            rest = args[i + 1 :]
            if len(rest) % 2:
                raise CommandError(
                    "Unbalanced XREAD list of streams: for each stream key an ID or "
                    "'$' must be specified."
                )
            half = len(rest) // 2
            out.keys, out.id_args = rest[:half], rest[half:]
            break
        elif opt == b"group" and more >= 2:
            out.group, out.consumer, found_group = args[i + 1], args[i + 2], True
            i += 2
        elif opt == b"noack":
            out.noack = True
        else:
            raise syntax()
        i += 1
    if not out.keys:
        raise syntax()
    if not found_group:
        raise CommandError("Missing GROUP option for XREADGROUP")
    check_read_limits(out.limits, out.count)
    return out


def _block_timeout(arg: bytes) -> int:
    value = parse_timeout_ms(arg)
    if value > INT64_MAX - groups.now_ms():
        raise CommandError("timeout is out of range")
    return value


def _targets(session: Session, req: ReadGroupArgs) -> list[Target]:
    """Resolve each key's stream and group and its ID, key by key as Redis does."""
    out: list[Target] = []
    for key, arg in zip(req.keys, req.id_args, strict=True):
        stream = _stream(session, key)
        group = stream.groups.get(req.group) if stream is not None else None
        if stream is None or group is None:
            raise _nogroup(
                f"No such key '{text(key)}' or consumer group '{text(req.group)}' in "
                "XREADGROUP with GROUP option"
            )
        if arg == b"$":
            raise CommandError(
                "The $ ID is meaningless in the context of XREADGROUP: you want to read "
                "the history of this consumer by specifying a proper ID, or use the > ID "
                "to get new messages. The $ ID would just return an empty result set."
            )
        after = None if arg == b">" else ids.parse(arg, strict=True)
        out.append(Target(key, stream, group, None if after == ids.ID_MAX else after))
    return out


def _serve_now(session: Session, req: ReadGroupArgs, targets: list[Target]) -> Any:
    """What XREADGROUP answers without waiting; None when nothing can be served."""
    served: list[tuple[bytes, Any]] = []
    budget = req.limits.budget()
    for t in targets:
        if t.after is not None:
            served.append((t.key, _history(session, req, t, budget)))
        elif budget.spent:
            continue
        elif req.claim_ms is not None:
            claimed = _deliver_claiming(session, req, t.key, t.stream, t.group, budget)
            if claimed is not None:
                served.append((t.key, claimed))
        elif t.stream.length and _last_live_id(t.stream) > t.group.last_id:
            count = budget.count(req.count)
            served.append((t.key, _deliver(session, req, t.key, t.stream, t.group, count, budget)))
    return _multi_reply(session, served) if served else None


def _last_live_id(stream: Stream) -> int:
    """The ID of the stream's last live entry (0 if none), read from the log only
    when the last record appended has been deleted or trimmed."""
    offset = stream.data.next_offset - 1
    if offset >= stream.start and offset not in stream.deleted:
        return stream.added_id
    last = stream.last_entry()
    return last[0] if last is not None else 0


def _history(session: Session, req: ReadGroupArgs, t: Target, budget: ReadBudget) -> list[Any]:
    """A history read: its stream is always in the reply, with no entries once the
    reply's MAXCOUNT or MAXSIZE was reached."""
    assert t.after is not None
    if budget.spent:
        return []
    found = groups.read_history(
        t.stream,
        t.group,
        req.consumer,
        t.after,
        budget.count(req.count),
        groups.now_ms(),
        budget.fit if req.limits.max_size else None,
    )
    if not req.limits.max_size:
        budget.fit([(sid, 0) for sid, _ in found])
    changed(session, t.key)
    return [[ids.fmt(sid), NullArray() if fields is None else fields] for sid, fields in found]


def _deliver(
    session: Session,
    req: ReadGroupArgs,
    key: bytes,
    stream: Stream,
    group: Group,
    count: int,
    budget: ReadBudget,
) -> Encoded:
    fit = budget.fit if req.limits.max_size else None
    found = groups.read_new_raw(
        stream, group, req.consumer, count, req.noack, groups.now_ms(), fit
    )
    if fit is None:
        budget.fit([(sid, 0) for sid, _ in found])
    changed(session, key)
    return entries_reply(found)


def _deliver_claiming(
    session: Session,
    req: ReadGroupArgs,
    key: bytes,
    stream: Stream,
    group: Group,
    budget: ReadBudget,
    count: int | None = None,
) -> list[Any] | None:
    """XREADGROUP `>` with CLAIM on one stream: claimed then new entries, each as
    [id, fields, idle ms, delivery count]; None when there was nothing to answer."""
    assert req.claim_ms is not None
    found = groups.read_claiming(
        stream,
        group,
        req.consumer,
        req.claim_ms,
        budget.count(req.count if count is None else count),
        req.noack,
        groups.now_ms(),
        budget.fit if req.limits.max_size else None,
    )
    if not req.limits.max_size:
        budget.fit([(e.sid, 0) for e in found])
    if not found:
        return None
    changed(session, key)
    return [[ids.fmt(e.sid), e.fields, e.idle_ms, e.delivery_count] for e in found]


def _wake_when_claimable(session: Session, req: ReadGroupArgs, targets: list[Target]) -> None:
    """A blocked XREADGROUP ... CLAIM: its key is woken when the first of its pending
    entries becomes claimable (the retry then serves it, or sets the next alarm)."""
    assert req.claim_ms is not None
    now = groups.now_ms()
    due = [
        (at, t.key)
        for t in targets
        if t.after is None
        and (at := groups.next_claimable_ms(t.group, req.claim_ms, now)) is not None
    ]
    if not due:
        return
    at, key = min(due)
    node, db = session.node, session.db
    delay = at - now + 1
    node.timers.call_later(delay / 1000, lambda: node.keys.wake(db, key))


def _retry_blocked(session: Session, req: ReadGroupArgs) -> Callable[[bytes], Any]:
    """What a blocked XREADGROUP tries when one of its keys is signaled: as Redis 7.0,
    that key alone is served if its stream moved past the group's cursor (even when
    others of its keys moved too), and the client fails if the key or the group is
    gone (UNBLOCKED, NOGROUP)."""

    def retry(key: bytes) -> Any:
        stream = _stream(session, key)
        if stream is None:
            raise CommandError("the stream key no longer exists", "UNBLOCKED")
        group = stream.groups.get(req.group)
        if group is None:
            raise _nogroup("the consumer group this client was blocked on no longer exists")
        if req.claim_ms is not None:
            budget = req.limits.budget()
            count = req.count or BLOCKED_COUNT_DEFAULT
            claimed = _deliver_claiming(session, req, key, stream, group, budget, count)
            if claimed is None:
                _wake_when_claimable(session, req, [Target(key, stream, group, None)])
                return None
            return _multi_reply(session, [(key, claimed)])
        if stream.last_id <= group.last_id:
            return None
        budget = req.limits.budget()
        count = budget.count(req.count or BLOCKED_COUNT_DEFAULT)
        served = _deliver(session, req, key, stream, group, count, budget)
        return _multi_reply(session, [(key, served)])

    return retry


@command(
    "xreadgroup",
    -7,
    "write blocking movablekeys",
    (0, 0, 0),
    "stream",
    since="5.0.0",
    complexity="For each stream mentioned: O(M) with M being the number of elements returned.",
)
def xreadgroup(session: Session, args: list[bytes]) -> Any:
    """Return new entries from a stream using a consumer group, or access the history
    of the pending entries for a given consumer. Can block.

    XREADGROUP GROUP g c [COUNT n] [MAXCOUNT n] [MAXSIZE bytes] [BLOCK ms] [NOACK]
    [CLAIM min-idle-time] STREAMS key... id...
    `>` delivers entries after the group's cursor (pending for c unless NOACK); any
    other ID re-delivers c's own pending entries above it (an entry since deleted
    comes as [id, nil]). With CLAIM, `>` first claims pending entries idle that long
    (narad/streams/groups.py's read_claiming), and every entry comes as [id, fields,
    idle ms, delivery count]. Reply: [[key, [[id, fields], ...]], ...] (a map in RESP3)
    for the streams that had something; history reads always answer. Nil when
    nothing was served and BLOCK was not given (or ran out).
    """
    req = _parse_readgroup(args)
    targets = _targets(session, req)
    reply = _serve_now(session, req, targets)
    if reply is not None:
        return reply
    if req.block_ms is None or session.in_exec:
        return NullArray()
    if req.claim_ms is not None:
        _wake_when_claimable(session, req, targets)
    keys = [(session.db, key) for key in req.keys]
    return Block(keys, req.block_ms, _retry_blocked(session, req), NullArray())


# -- XACK ------------------------------------------------------------------------------------


@command(
    "xack",
    -4,
    "write fast",
    (1, 1, 1),
    "stream",
    since="5.0.0",
    complexity="O(1) for each message ID processed.",
)
def xack(session: Session, args: list[bytes]) -> Any:
    """Marks a pending message as correctly processed, removing it from the pending
    entries list of the consumer group.

    XACK key group id [id ...] -> the number of IDs that were pending. A missing key
    or group answers 0; one bad ID fails the whole call before anything is acked.
    """
    stream = _stream(session, args[1])
    group = stream.groups.get(args[2]) if stream is not None else None
    if stream is None or group is None:
        return 0
    sids = ids.parse_all_strict(args[3:])
    acked = groups.ack(stream, group, sids)
    if acked:
        changed(session, args[1])
    return acked


@command(
    "xackdel",
    -6,
    "write fast",
    (1, 1, 1),
    "stream",
    since="8.2.0",
    complexity="O(1) for each entry ID processed.",
)
def xackdel(session: Session, args: list[bytes]) -> Any:
    """Acknowledges and conditionally deletes one or multiple entries for a stream
    consumer group.

    XACKDEL key group [KEEPREF | DELREF | ACKED] IDS numids id... -> one integer per
    ID: -1 not pending in the group (or no such key or group), else acked and 1
    deleted (or gone already), or 2 kept because another group still refers to it
    (ACKED). One op for the whole call (narad/streams/references.py).
    """
    strategy, sids = parse_delete_args(args, 3)
    stream = _stream(session, args[1])
    group = stream.groups.get(args[2]) if stream is not None else None
    if stream is None or group is None:
        return [references.NOT_FOUND] * len(sids)
    state_end = stream.state.next_offset
    out = references.ack_and_delete(stream, group, sids, strategy)
    if stream.state.next_offset != state_end:
        changed(session, args[1])
    return out


@command(
    "xnack",
    -7,
    "write fast",
    (1, 1, 1),
    "stream",
    since="8.8.0",
    complexity="O(1) for each message ID processed.",
)
def xnack(session: Session, args: list[bytes]) -> Any:
    """Releases pending messages back to the group's PEL without acknowledging them,
    making them available for re-delivery.

    XNACK key group SILENT|FAIL|FATAL IDS numids id... [RETRYCOUNT n] [FORCE] -> how
    many pending entries were released (pending for nobody, claimable at once; a
    blocked XREADGROUP ... CLAIM on the key is woken). 0 for a missing key or group.
    """
    mode = args[3].lower().decode(errors="replace")
    if mode not in groups.NACK_MODES:
        raise syntax()
    sids: list[int] | None = None
    retry_count: int | None = None
    force = False
    i = 4
    while i < len(args):
        opt = args[i].lower()
        if opt == b"ids" and i + 1 < len(args) and sids is None:
            _, sids = parse_delete_args(args[: i + 2 + _numids(args, i)], i)
            i += 2 + len(sids)
        elif opt == b"retrycount" and i + 1 < len(args):
            retry_count = parse_int(args[i + 1], "Invalid RETRYCOUNT option argument for XNACK")
            if retry_count < 0:
                raise CommandError("Invalid RETRYCOUNT option argument for XNACK")
            i += 2
        elif opt == b"force":
            force = True
            i += 1
        else:
            raise syntax()
    if sids is None:
        raise syntax()
    stream = _stream(session, args[1])
    group = stream.groups.get(args[2]) if stream is not None else None
    if stream is None or group is None:
        return 0
    released = groups.nack(stream, group, sids, mode, retry_count, force)
    if released:
        changed(session, args[1])
        session.node.keys.wake(session.db, args[1])  # XREADGROUP ... CLAIM may take them
    return released


def _numids(args: list[bytes], i: int) -> int:
    """The numids of the IDS block at args[i], checked as XDELEX checks it."""
    count = parse_int(args[i + 1], "Number of IDs must be a positive integer")
    if count < 1:
        raise CommandError("Number of IDs must be a positive integer")
    if count > len(args) - i - 2:
        raise CommandError("The `numids` parameter must match the number of arguments")
    return count


# -- XPENDING --------------------------------------------------------------------------------


@dataclass
class PendingArgs:
    low: int = 0
    high: int = ids.ID_MAX
    count: int = 0
    min_idle_ms: int = 0
    consumer: bytes | None = None


def _parse_pending(args: list[bytes]) -> PendingArgs:
    out = PendingArgs()
    start = 3
    if args[3].lower() == b"idle":
        out.min_idle_ms = parse_int(args[4])
        if len(args) < 8:
            raise syntax()
        start += 2
    out.count = max(parse_int(args[start + 2]), 0)
    out.low = _interval(args[start], low=True)
    out.high = _interval(args[start + 1], low=False)
    if start + 3 < len(args):
        out.consumer = args[start + 3]
    return out


@command(
    "xpending",
    -3,
    "readonly",
    (1, 1, 1),
    "stream",
    since="5.0.0",
    complexity="O(N) with N being the number of elements returned.",
)
def xpending(session: Session, args: list[bytes]) -> Any:
    """Return information and entries from a stream consumer group pending entries
    list, that are messages fetched but never acknowledged.

    XPENDING key group -> [count, first ID, last ID, [[consumer, "n"], ...]]
    (nil, nil, nil-array when nothing is pending).
    XPENDING key group [IDLE ms] start end count [consumer] ->
    [[id, consumer, idle ms, deliveries], ...]; `(` makes a bound exclusive.
    """
    if len(args) != 3 and not 6 <= len(args) <= 9:
        raise syntax()
    opts = _parse_pending(args) if len(args) >= 6 else None
    stream = _stream(session, args[1])
    group = stream.groups.get(args[2]) if stream is not None else None
    if group is None:
        raise _nogroup(f"No such key '{text(args[1])}' or consumer group '{text(args[2])}'")
    if opts is None:
        return _pending_summary(group)
    return _pending_entries(group, opts, groups.now_ms())


def _pending_summary(group: Group) -> list[Any]:
    pel = group.pel
    if not pel:
        return [0, None, None, NullArray()]
    owners = [[c.name, b"%d" % len(c.pending)] for c in group.sorted_consumers() if c.pending]
    return [len(pel), ids.fmt(pel.first()), ids.fmt(pel.last()), owners]


def _pending_entries(group: Group, opts: PendingArgs, now: int) -> list[Any]:
    consumer = None
    if opts.consumer is not None:
        consumer = group.consumers.get(opts.consumer)
        if consumer is None:
            return []
    out: list[Any] = []
    if not opts.count:
        return out
    for sid in group.pending_ids(opts.low, opts.high, consumer):
        entry = group.pel[sid]
        idle = -1 if sid in group.nacked else max(now - entry.delivery_ms, 0)
        if opts.min_idle_ms and idle < opts.min_idle_ms:
            continue
        out.append([ids.fmt(sid), entry.consumer.name, idle, entry.delivery_count])
        if len(out) == opts.count:
            break
    return out


# -- XCLAIM / XAUTOCLAIM ---------------------------------------------------------------------


def _claim_group(session: Session, args: list[bytes]) -> tuple[Stream, Group]:
    stream = _stream(session, args[1])
    group = stream.groups.get(args[2]) if stream is not None else None
    if stream is None or group is None:
        raise _nogroup(f"No such key '{text(args[1])}' or consumer group '{text(args[2])}'")
    return stream, group


def _claim_ids(args: list[bytes]) -> tuple[list[int], int]:
    """XCLAIM's IDs: from args[5] up to the first argument that is not one."""
    sids: list[int] = []
    i = 5
    while i < len(args):
        try:
            sids.append(ids.parse(args[i], strict=True))
        except CommandError:
            break
        i += 1
    return sids, i


def _claim_options(args: list[bytes], i: int, now: int) -> ClaimOptions:
    opts = ClaimOptions()
    delivery_ms: int | None = None
    while i < len(args):
        more = len(args) - 1 - i
        opt = args[i].lower()
        if opt == b"force":
            opts.force = True
        elif opt == b"justid":
            opts.justid = True
        elif opt == b"idle" and more:
            i += 1
            delivery_ms = now - parse_int(args[i], "Invalid IDLE option argument for XCLAIM")
        elif opt == b"time" and more:
            i += 1
            delivery_ms = parse_int(args[i], "Invalid TIME option argument for XCLAIM")
        elif opt == b"retrycount" and more:
            i += 1
            retry = parse_int(args[i], "Invalid RETRYCOUNT option argument for XCLAIM")
            opts.retry_count = retry if retry >= 0 else None
        elif opt == b"lastid" and more:
            i += 1
            opts.last_id = ids.parse(args[i], strict=True)
        else:
            raise CommandError(f"Unrecognized XCLAIM option '{text(args[i])}'")
        i += 1
    # A bogus time (negative or in the future) is taken as now, as Redis does.
    if delivery_ms is None or delivery_ms < 0 or delivery_ms > now:
        delivery_ms = now
    opts.delivery_ms = delivery_ms
    return opts


@command(
    "xclaim",
    -6,
    "write fast",
    (1, 1, 1),
    "stream",
    since="5.0.0",
    complexity="O(log N) with N being the number of messages in the PEL of the consumer group.",
)
def xclaim(session: Session, args: list[bytes]) -> Any:
    """Changes (or acquires) ownership of a message in a consumer group, as if the
    message was delivered to the specified consumer.

    XCLAIM key group consumer min-idle-time id [id ...] [IDLE ms] [TIME ms]
    [RETRYCOUNT n] [FORCE] [JUSTID] [LASTID id] -> the claimed entries as
    [[id, fields], ...], or their IDs with JUSTID. Pending entries whose stream entry
    was deleted are dropped from the PEL and not answered.
    """
    stream, group = _claim_group(session, args)
    min_idle = parse_int(args[4], "Invalid min-idle-time argument for XCLAIM")
    sids, i = _claim_ids(args)
    now = groups.now_ms()
    opts = _claim_options(args, i, now)
    opts.min_idle_ms = max(min_idle, 0)
    cursor = group.last_id
    claimed, dropped = groups.claim(stream, group, args[3], sids, opts, now)
    if claimed or dropped or group.last_id != cursor:
        changed(session, args[1])
    return _claimed_reply(stream, claimed, opts.justid)


def _claimed_reply(stream: Stream, claimed: list[int], justid: bool) -> list[Any]:
    if justid:
        return [ids.fmt(sid) for sid in claimed]
    out: list[Any] = []
    for sid in claimed:
        entry = stream.entry(sid)
        assert entry is not None, "a claimed entry exists in the stream"
        out.append(_entry(entry))
    return out


@command(
    "xautoclaim",
    -6,
    "write fast",
    (1, 1, 1),
    "stream",
    since="6.2.0",
    complexity="O(1) if COUNT is small.",
)
def xautoclaim(session: Session, args: list[bytes]) -> Any:
    """Changes (or acquires) ownership of messages in a consumer group, as if the
    messages were delivered to the specified consumer.

    XAUTOCLAIM key group consumer min-idle-time start [COUNT n] [JUSTID] ->
    [next start ID or 0-0, claimed entries (or IDs with JUSTID), IDs of pending
    entries dropped because they were deleted from the stream]. At most COUNT
    (default 100) entries are claimed or dropped, and 10 * COUNT looked at.
    """
    min_idle = parse_int(args[4], "Invalid min-idle-time argument for XAUTOCLAIM")
    start = _interval(args[5], low=True)
    count, justid = _autoclaim_options(args)
    stream, group = _claim_group(session, args)
    cursor, claimed, deleted = groups.autoclaim(
        stream, group, args[3], max(min_idle, 0), start, count, justid, groups.now_ms()
    )
    if claimed or deleted:
        changed(session, args[1])
    return [
        ids.fmt(cursor),
        _claimed_reply(stream, claimed, justid),
        [ids.fmt(sid) for sid in deleted],
    ]


def _autoclaim_options(args: list[bytes]) -> tuple[int, bool]:
    count, justid = 100, False
    i = 6
    while i < len(args):
        more = len(args) - 1 - i
        opt = args[i].lower()
        if opt == b"count" and more:
            count = parse_int(args[i + 1], "COUNT must be > 0")
            if not 1 <= count <= AUTOCLAIM_COUNT_MAX:
                raise CommandError("COUNT must be > 0")
            i += 1
        elif opt == b"justid":
            justid = True
        else:
            raise syntax()
        i += 1
    return count, justid


# -- XINFO -----------------------------------------------------------------------------------

container("xinfo", "stream", "A container for stream introspection commands", "5.0.0")

XINFO_HELP = [
    "CONSUMERS <key> <groupname>",
    "    Show consumers of <groupname>.",
    "GROUPS <key>",
    "    Show the stream consumer groups.",
    "STREAM <key> [FULL [COUNT <count>]",
    "    Show information about the stream.",
]


def _info_stream(session: Session, key: bytes) -> Stream:
    stream = _stream(session, key)
    if stream is None:
        raise CommandError("no such key")
    return stream


@command(
    "consumers",
    4,
    "readonly",
    (2, 2, 1),
    "stream",
    since="5.0.0",
    parent="xinfo",
    summary="List the consumers in a consumer group",
)
def xinfo_consumers(session: Session, args: list[bytes]) -> Any:
    """XINFO CONSUMERS key group -> [{name, pending, idle}, ...] in name order."""
    stream = _info_stream(session, args[2])
    group = stream.groups.get(args[3])
    if group is None:
        raise _nogroup(f"No such consumer group '{text(args[3])}' for key name '{text(args[2])}'")
    now = groups.now_ms()
    return [
        {"name": c.name, "pending": len(c.pending), "idle": max(now - c.seen_ms, 0)}
        for c in group.sorted_consumers()
    ]


@command(
    "groups",
    3,
    "readonly",
    (2, 2, 1),
    "stream",
    since="5.0.0",
    parent="xinfo",
    summary="List the consumer groups of a stream",
)
def xinfo_groups(session: Session, args: list[bytes]) -> Any:
    """XINFO GROUPS key -> [{name, consumers, pending, last-delivered-id,
    entries-read, lag}, ...] in name order (entries-read and lag may be nil)."""
    stream = _info_stream(session, args[2])
    if not stream.groups:
        return []
    counters = Counters.of(stream)
    return [
        {
            "name": g.name,
            "consumers": len(g.consumers),
            "pending": len(g.pel),
            "last-delivered-id": ids.fmt(g.last_id),
            "entries-read": g.entries_read,
            "lag": counters.lag(g),
        }
        for g in _sorted_groups(stream)
    ]


def _sorted_groups(stream: Stream) -> list[Group]:
    return [stream.groups[name] for name in sorted(stream.groups)]


@command(
    "stream",
    -3,
    "readonly",
    (2, 2, 1),
    "stream",
    since="5.0.0",
    parent="xinfo",
    summary="Get information about a stream",
)
def xinfo_stream(session: Session, args: list[bytes]) -> Any:
    """XINFO STREAM key [FULL [COUNT n]] -> a map of the stream's counters, group
    count and first / last entry; with FULL, its first n entries (default 10, 0: all)
    and every group with its PEL and consumers (each list cut at n)."""
    stream = _info_stream(session, args[2])
    full, count = _info_stream_options(args)
    counters = Counters.of(stream)
    keys, nodes = _node_counts(stream)
    info: dict[str, Any] = {
        "length": counters.length,
        "radix-tree-keys": keys,
        "radix-tree-nodes": nodes,
        "last-generated-id": ids.fmt(counters.last_id),
        "max-deleted-entry-id": ids.fmt(counters.max_deleted_id),
        "entries-added": counters.entries_added,
        "recorded-first-entry-id": ids.fmt(counters.first_id),
    }
    if not full:
        first, last = stream.first_entry(), stream.last_entry()
        info["groups"] = len(stream.groups)
        info["first-entry"] = _entry(first) if first is not None else None
        info["last-entry"] = _entry(last) if last is not None else None
        return info
    info["entries"] = [_entry(e) for e in stream.range(0, ids.ID_MAX, count)]
    info["groups"] = [_full_group(g, counters, count) for g in _sorted_groups(stream)]
    return info


def _info_stream_options(args: list[bytes]) -> tuple[bool, int]:
    opts = args[3:]
    if not opts:
        return False, 10
    if len(opts) not in (1, 3) or opts[0].lower() != b"full":
        raise _subcommand_syntax(args, "XINFO")
    if len(opts) == 1:
        return True, 10
    if opts[1].lower() != b"count":
        raise _subcommand_syntax(args, "XINFO")
    count = parse_int(opts[2])
    return True, 10 if count < 0 else count


def _node_counts(stream: Stream) -> tuple[int, int]:
    """Stand-ins for Redis's radix tree sizes: one key per block of
    stream-node-max-entries offsets holding live entries, plus the root node."""
    if not stream.length:
        return 0, 1
    node = max(stream.node_entries, 1)
    first = stream.start // node
    last = (stream.data.next_offset - 1) // node
    keys = last - first + 1
    return keys, keys + 1


def _full_group(group: Group, counters: Counters, count: int) -> dict[str, Any]:
    pending: list[Any] = []
    for sid, entry in group.pel.items():
        if count and len(pending) == count:
            break
        pending.append([ids.fmt(sid), entry.consumer.name, entry.delivery_ms, entry.delivery_count])
    return {
        "name": group.name,
        "last-delivered-id": ids.fmt(group.last_id),
        "entries-read": group.entries_read,
        "lag": counters.lag(group),
        "pel-count": len(group.pel),
        "nacked-count": len(group.nacked),
        "pending": pending,
        "consumers": [_full_consumer(group, c, count) for c in group.sorted_consumers()],
    }


def _full_consumer(group: Group, consumer: Consumer, count: int) -> dict[str, Any]:
    sids = group.first_owned(consumer, count, 0)
    return {
        "name": consumer.name,
        "seen-time": consumer.seen_ms,
        "pel-count": len(consumer.pending),
        "pending": [
            [ids.fmt(sid), group.pel[sid].delivery_ms, group.pel[sid].delivery_count]
            for sid in sids
        ],
    }


@command(
    "help",
    2,
    "loading stale",
    group="stream",
    since="5.0.0",
    parent="xinfo",
    summary="Show helpful text about the different subcommands",
)
def xinfo_help(session: Session, args: list[bytes]) -> Any:
    """Show helpful text about the different subcommands."""
    return _help("XINFO", XINFO_HELP)


def _xreadgroup_keys(argv: list[bytes]) -> list[tuple[int | None, int]]:
    """XREADGROUP's keys as its own parser finds them (none if it refuses them)."""
    try:
        keys = _parse_readgroup(argv).keys
    except CommandError:
        return []
    return stream_keys_at_end(argv, len(keys), READ | WRITE)


finds_keys("xreadgroup", _xreadgroup_keys)
