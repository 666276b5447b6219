"""The Q.* commands: SQS-style queues on streams (docs/queues.md).

Every handler checks all of its arguments before it changes anything, so a refused
command appends nothing. The state changes themselves are ops logged on the queue's
stream (narad/queues/queue.py); time passing, dead letters, fan-out and push mode
are the server's part (narad/queues/service.py).
"""

from __future__ import annotations

import time
from collections import deque
from typing import TYPE_CHECKING, Any

from narad import glob
from narad.acl.user import READ, WRITE
from narad.commands.args import INT64_MAX, parse_int, parse_timeout_ms
from narad.commands.schema import check_payloads
from narad.commands.table import COMMANDS, command, finds_keys
from narad.errors import CommandError, no_queue, syntax, wrong_arity
from narad.held_back import can_hold
from narad.keywatch import Block
from narad.log.format import entry_too_large
from narad.queues.queue import (
    MAX_RECEIVES,
    MAX_VISIBILITY_MS,
    MAX_WAIT_MS,
    Queue,
    Settings,
    new_secret,
)
from narad.queues.replies import message, messages_reply, settings_reply
from narad.resp import NULL_ARRAY, SimpleString
from narad.streams import ids
from narad.streams.ids import pack_id

if TYPE_CHECKING:
    from narad.node import Session
    from narad.streams.stream import Stream

OK = SimpleString("OK")
MAX_POP_COUNT = 10_000

# The range of every number option (docs/queues.md lists them). Each bound keeps what
# is derived from the value inside the field it is packed into (narad/queues/queue.py):
# a deadline or due time is now + at most MAX_WAIT_MS, below 2^44.
RANGES: dict[str, tuple[int, int]] = {
    "visibility": (0, MAX_VISIBILITY_MS),  # also Q.TOUCH's ms
    "maxreceives": (0, MAX_RECEIVES),
    "delay": (0, MAX_WAIT_MS),  # the setting, Q.PUSH DELAY and Q.NACK DELAY
    "retention": (0, INT64_MAX),
    "maxbytes": (0, INT64_MAX),
    "dedupwindow": (0, MAX_WAIT_MS),
    "count": (1, MAX_POP_COUNT),  # Q.POP
    "prefetch": (1, MAX_POP_COUNT),
    "redrive count": (1, INT64_MAX),
    "time": (0, INT64_MAX),  # Q.SEEK TIME
}


def _ranged(arg: bytes, name: str) -> int:
    """An integer in RANGES[name], with Redis's errors: `value is not an integer or
    out of range` past a signed 64-bit integer, else Redis's range text."""
    low, high = RANGES[name]
    value = parse_int(arg)
    if not low <= value <= high:
        raise CommandError(f"value is out of range, value must between {low} and {high}")
    return value


def _block_ms(arg: bytes) -> int:
    """A BLOCK timeout (0: forever) with Redis's texts: as Redis, a timeout whose end
    (now + ms) is past a signed 64-bit integer is out of range."""
    value = parse_timeout_ms(arg)
    if value > INT64_MAX - time.time_ns() // 1_000_000:
        raise CommandError("timeout is out of range")
    return value


def _options(args: list[bytes], start: int = 2) -> list[tuple[bytes, bytes]]:
    """`NAME value` pairs from args[start:], names lower-cased; an odd count is a
    syntax error."""
    if (len(args) - start) % 2:
        raise syntax()
    return [(args[i].lower(), args[i + 1]) for i in range(start, len(args), 2)]


# -- settings ----------------------------------------------------------------------------


def _parse_settings(session: Session, key: bytes, base: Settings, pairs: list[bytes]) -> Settings:
    """name value pairs (Q.CREATE options, Q.CONFIG SET) applied over `base`."""
    if len(pairs) % 2:
        raise syntax()
    values: dict[str, Any] = {}
    for i in range(0, len(pairs), 2):
        name = pairs[i].decode("utf-8", "replace").lower()
        raw = pairs[i + 1]
        if name in RANGES and name in Settings.NAMES:
            values[name] = _ranged(raw, name)
        elif name == "dlq":
            if raw:
                target = session.node.queues.get(session.db, raw)
                if target is None:
                    raise no_queue(raw)
                if raw == key:
                    raise CommandError("a queue cannot be its own dead-letter queue")
            values[name] = raw
        else:
            shown = pairs[i].decode("utf-8", "replace")
            raise CommandError(f"unknown queue setting '{shown}'")
    return Settings(**{**{n: getattr(base, n) for n in Settings.NAMES}, **values})


@command(
    "q.create",
    -2,
    "write denyoom",
    (1, 1, 1),
    "stream",
    summary="Creates a queue, or checks that it exists with these settings.",
    since="1.0.0",
)
def q_create(session: Session, args: list[bytes]) -> Any:
    """With NX (last): 1 if the queue was made, 0 if a queue of that name exists,
    whatever its settings, which stay as they are."""
    key = args[1]
    keyspace = session.node.keyspace
    ensure = len(args) % 2 == 1 and args[-1].lower() == b"nx"
    options = args[2:-1] if ensure else args[2:]
    settings = _parse_settings(session, key, Settings(), options)
    stream = keyspace.get(session.db, key)
    if stream is not None and stream.queue is not None:
        if ensure:
            return 0
        differences = stream.queue.settings.differences(settings)
        if differences:
            have = stream.queue.settings
            shown = ", ".join(
                f"{name} is {_show(getattr(have, name))} (asked {_show(getattr(settings, name))})"
                for name in differences
            )
            raise CommandError(f"queue '{_text(key)}' exists with other settings: {shown}")
        return OK
    if stream is None:
        stream = keyspace.create_stream(session.db, key)
    stream.log_op(["q.create", settings.to_list(), new_secret()])
    assert stream.queue is not None
    session.node.queues.apply_settings(stream.queue)
    session.node.written(session.db, key)
    return 1 if ensure else OK


def _show(value: Any) -> str:
    return f"'{_text(value)}'" if isinstance(value, bytes) else str(value)


def _text(raw: bytes) -> str:
    return raw.decode("utf-8", "replace")


@command("q.drop", -2, "write", (1, 1, 1), "stream", summary="Deletes a queue and its messages.")
def q_drop(session: Session, args: list[bytes]) -> Any:
    """Refused while another queue uses this one as its DLQ or copies from it (a
    subscription), naming them, unless FORCE: then their dead letters are dropped
    and counted, and their copying stops."""
    if len(args) > 3 or (len(args) == 3 and args[2].lower() != b"force"):
        raise syntax()
    keyspace = session.node.keyspace
    stream = keyspace.find(session.db, args[1])  # an unavailable queue too: dropping repairs it
    if stream is None or stream.queue is None:
        return 0
    if len(args) == 2:
        _refuse_if_used(session, stream)
    keyspace.delete(session.db, args[1])
    return 1


def _refuse_if_used(session: Session, stream: Stream) -> None:
    dead_letters, copies = [], []
    for other in session.node.queues.queues():
        if other.stream is stream or other.stream.db != stream.db:
            continue
        if other.settings.dlq == stream.key:
            dead_letters.append(f"'{_text(other.stream.key)}'")
        if any(sub.source == stream.uid for sub in other.subs.values()):
            copies.append(f"'{_text(other.stream.key)}'")
    uses = []
    if dead_letters:
        uses.append(f"the DLQ of {', '.join(sorted(dead_letters))}")
    if copies:
        uses.append(f"the source of {', '.join(sorted(copies))} (Q.SUBSCRIBE)")
    if uses:
        raise CommandError(
            f"queue '{_text(stream.key)}' is {' and '.join(uses)}: change those first, "
            "or Q.DROP it FORCE"
        )


@command(
    "q.config",
    -3,
    "write",
    (1, 1, 1),
    "stream",
    summary="Reads or changes a queue's settings.",
)
def q_config(session: Session, args: list[bytes]) -> Any:
    queue = session.node.queues.require(session.db, args[1])
    sub = args[2].lower()
    if sub == b"get":
        if len(args) > 4:
            raise wrong_arity("q.config")
        reply = settings_reply(queue.settings)
        if len(args) == 4:
            name = args[3].lower()
            if name not in reply:
                raise CommandError(f"unknown queue setting '{_text(args[3])}'")
            return {name: reply[name]}
        return reply
    if sub == b"set":
        if len(args) < 5:
            raise wrong_arity("q.config")
        settings = _parse_settings(session, args[1], queue.settings, args[3:])
        if settings != queue.settings:
            queue.stream.log_op(["q.config", settings.to_list()])
            session.node.queues.apply_settings(queue)
        return OK
    raise syntax()


@command(
    "q.list",
    -1,
    "readonly",
    group="stream",
    summary="Lists the queues of the current database.",
)
def q_list(session: Session, args: list[bytes]) -> Any:
    pattern = None
    if len(args) == 3 and args[1].lower() == b"match":
        pattern = args[2]
    elif len(args) != 1:
        raise syntax()
    names = [
        key
        for key, stream in session.node.keyspace.dbs[session.db].items()
        if stream.queue is not None and (pattern is None or glob.match(pattern, key))
    ]
    return sorted(names)


# -- producing ----------------------------------------------------------------------------


@command(
    "q.push",
    -3,
    "write denyoom fast",
    (1, 1, 1),
    "stream",
    summary="Appends messages to a queue.",
)
def q_push(session: Session, args: list[bytes]) -> Any:
    service = session.node.queues
    queue = service.require(session.db, args[1])
    settings = queue.settings
    delay = settings.delay
    dedup: bytes | None = None
    i = 2
    while i + 2 < len(args):  # options come first; at least one payload follows them
        option = args[i].lower()
        if option == b"delay":
            delay = _ranged(args[i + 1], "delay")
        elif option == b"dedup":
            dedup = args[i + 1]
        else:
            break
        i += 2
    payloads = args[i:]
    now = service.clock.now_ms() if delay or dedup is not None else 0
    if dedup is not None:
        if len(payloads) != 1:
            raise CommandError("DEDUP takes exactly one payload")
        first = queue.dedup_lookup(dedup, now)
        if first is not None:
            return ids.fmt(first)
    for payload in payloads:  # all or none: refused before any is added
        if (refusal := entry_too_large((b"payload", payload))) is not None:
            raise CommandError(refusal)
    stream = queue.stream
    if session.node.keyspace.validators:
        check_payloads(session, stream, payloads)
    first_offset = stream.data.next_offset
    sids = service.append(stream, [[b"payload", payload] for payload in payloads])
    if delay:
        due = now + delay
        stream.log_op(["q.delay", due, list(range(first_offset, stream.data.next_offset))])
        service.arm(due)
    if dedup is not None:
        stream.log_op(["q.dedup", dedup, pack_id(sids[0]), now + settings.dedupwindow])
        service.arm(now + settings.dedupwindow)
    if len(sids) == 1:
        return ids.fmt(sids[0])
    return [ids.fmt(sid) for sid in sids]


def q_push_run(
    session: Session, argv: list[bytes], queued: deque[list[bytes]]
) -> list[list[bytes]] | None:
    """Pipelined `Q.PUSH queue payload` (one payload, no options): `argv` and the
    like Q.PUSHes queued right after it to the same queue, held back with the like
    entries of other clients to that queue and added with them in one call to the
    log (narad/held_back.py); the same messages, IDs and replies as `q_push`
    one by one. Returns the argvs taken; None (nothing done) for any other form, a
    queue that delays its messages or has a schema, which `q_push` answers."""
    if len(argv) != 3:
        return None
    key = argv[1]
    keyspace = session.node.keyspace
    stream = keyspace.dbs[session.db].get(key)
    if (
        stream is None
        or stream.queue is None
        or stream.queue.settings.delay
        or not can_hold(keyspace, stream)
    ):
        return None
    run = [argv]
    name = argv[0]
    for more in queued:
        if len(more) != 3 or more[0] != name or more[1] != key:
            break
        run.append(more)
    # Each message is the entry `payload <payload>`: its fields from FIELDS_FROM on.
    entries = [[b"", b"", b"", b"payload", a[2]] for a in run]
    session.node.hold_back(session, Q_PUSH, stream, entries)
    return run


Q_PUSH = COMMANDS[b"q.push"]
Q_PUSH.run = q_push_run


# -- consuming ----------------------------------------------------------------------------


@command(
    "q.pop",
    -2,
    "write blocking",
    (1, 1, 1),
    "stream",
    summary="Delivers visible messages, waiting for them with BLOCK.",
)
def q_pop(session: Session, args: list[bytes]) -> Any:
    service = session.node.queues
    queue = service.require(session.db, args[1])
    count, visibility, block = 1, queue.settings.visibility, None
    for option, value in _options(args):
        if option == b"count":
            count = _ranged(value, "count")
        elif option == b"visibility":
            visibility = _ranged(value, "visibility")
        elif option == b"block":
            block = _block_ms(value)
        else:
            raise syntax()
    delivered = service.deliver_raw(queue, count, visibility)
    if not delivered:
        queue.receives_empty += 1
    if delivered or block is None:
        return messages_reply(session.protocol, delivered)
    if session.in_exec:
        return NULL_ARRAY
    db, key = session.db, args[1]

    def retry(_: bytes) -> Any:  # one key: the queue's
        queue = service.get(db, key)
        if queue is None:
            raise no_queue(key)
        delivered = service.deliver_raw(queue, count, visibility)
        return messages_reply(session.protocol, delivered) if delivered else None

    blocked: Block = Block([(db, key)], block, retry, NULL_ARRAY, alike=(b"q.pop", db, key))
    return blocked


@command("q.ack", -3, "write fast", (1, 1, 1), "stream", summary="Acks deliveries.")
def q_ack(session: Session, args: list[bytes]) -> Any:
    service = session.node.queues
    return service.ack(service.require(session.db, args[1]), args[2:])


@command(
    "q.nack",
    -3,
    "write fast",
    (1, 1, 1),
    "stream",
    summary="Gives a delivery back: visible again now or after DELAY.",
)
def q_nack(session: Session, args: list[bytes]) -> Any:
    service = session.node.queues
    queue = service.require(session.db, args[1])
    delay = 0
    if len(args) == 5 and args[3].lower() == b"delay":
        delay = _ranged(args[4], "delay")
    elif len(args) != 3:
        raise syntax()
    service.nack(queue, args[2], delay)
    return OK


@command(
    "q.touch",
    4,
    "write fast",
    (1, 1, 1),
    "stream",
    summary="Moves a delivery's visibility deadline to now + ms.",
)
def q_touch(session: Session, args: list[bytes]) -> Any:
    service = session.node.queues
    queue = service.require(session.db, args[1])
    ms = _ranged(args[3], "visibility")
    service.touch(queue, args[2], ms)
    return OK


@command(
    "q.consume",
    -2,
    "write no_multi",
    (1, 1, 1),
    "stream",
    summary="Switches the connection to push mode on a queue.",
)
def q_consume(session: Session, args: list[bytes]) -> Any:
    service = session.node.queues
    queue = service.require(session.db, args[1])
    prefetch, visibility = 10, queue.settings.visibility
    for option, value in _options(args):
        if option == b"prefetch":
            prefetch = _ranged(value, "prefetch")
        elif option == b"visibility":
            visibility = _ranged(value, "visibility")
        else:
            raise syntax()
    if session.push_handler is not None:
        raise CommandError("this connection already consumes a queue: Q.CANCEL it first")
    session.push_handler = service.start_consuming(session, queue, prefetch, visibility)
    return OK


@command(
    "q.cancel",
    -1,
    "write fast",
    group="stream",
    summary="Ends push mode; messages in flight keep their deadlines.",
)
def q_cancel(session: Session, args: list[bytes]) -> Any:
    if len(args) > 2:
        raise wrong_arity("q.cancel")
    consumer = session.push_handler
    if consumer is None:
        return 0
    session.push_handler = None
    session.node.queues.stop_consuming(consumer, release=False)
    return 1


# -- fan-out, replay, dead letters ----------------------------------------------------------


def _stream(session: Session, key: bytes) -> Stream:
    stream = session.node.keyspace.get(session.db, key)
    if stream is None:
        raise no_queue(key)
    return stream


@command(
    "q.subscribe",
    -3,
    "write",
    (1, 2, 1),
    "stream",
    summary="Copies every message committed to source into queue, once, in order.",
)
def q_subscribe(session: Session, args: list[bytes]) -> Any:
    service = session.node.queues
    queue = service.require(session.db, args[1])
    source = _stream(session, args[2])
    position = source.data.next_offset
    if len(args) == 5 and args[3].lower() == b"from":
        where = args[4].lower()
        if where == b"earliest":
            position = source.start
        elif where != b"latest":
            sid = ids.parse(args[4], strict=True)
            position = max(source.start, source.data.offset_of_id(*ids.split(sid)))
    elif len(args) != 3:
        raise syntax()
    if source.uid in queue.subs:
        return OK
    if source is queue.stream or service.reaches(queue.stream, source):
        raise CommandError(
            f"subscribing '{_text(args[1])}' to '{_text(args[2])}' would make a cycle"
        )
    queue.stream.log_op(["q.sub", source.uid, position, queue.stream.data.next_offset])
    service.subscribing.add(queue)
    session.node.barrier.schedule()
    return OK


@command(
    "q.unsubscribe",
    3,
    "write",
    (1, 2, 1),
    "stream",
    summary="Stops copying from source into queue.",
)
def q_unsubscribe(session: Session, args: list[bytes]) -> Any:
    queue = session.node.queues.require(session.db, args[1])
    source = session.node.keyspace.get(session.db, args[2])
    if source is None or source.uid not in queue.subs:
        return 0
    queue.stream.log_op(["q.unsub", source.uid])
    return 1


@command(
    "q.seek",
    -3,
    "write",
    (1, 1, 1),
    "stream",
    summary="Moves a queue's cursor: replay from, or skip to, a point.",
)
def q_seek(session: Session, args: list[bytes]) -> Any:
    service = session.node.queues
    queue = service.require(session.db, args[1])
    stream = queue.stream
    where = args[2].lower()
    if len(args) == 4 and where == b"time":
        ms = _ranged(args[3], "time")
        cursor = stream.data.offset_of_id(ms, 0)
    elif len(args) != 3:
        raise syntax()
    elif where == b"earliest":
        cursor = stream.start
    elif where == b"latest":
        cursor = stream.data.next_offset
    else:
        sid = ids.parse(args[2], strict=True)
        cursor = stream.data.offset_of_id(*ids.split(sid))
    stream.log_op(["q.seek", max(cursor, stream.start)])
    service.wake(queue)
    return OK


@command(
    "q.redrive",
    -2,
    "write",
    (1, 1, 1),
    "stream",
    summary="Moves dead letters back to the queue each came from, or to TO.",
)
def q_redrive(session: Session, args: list[bytes]) -> Any:
    service = session.node.queues
    dlq = service.require(session.db, args[1])
    target: Queue | None = None
    count: int | None = None
    for option, value in _options(args):
        if option == b"to":
            target = service.require(session.db, value)
        elif option == b"count":
            count = _ranged(value, "redrive count")
        else:
            raise syntax()
    moved = 0
    while count is None or moved < count:
        batch = 1000 if count is None else min(1000, count - moved)
        try:
            done = service.redrive(dlq, target, batch)
        except CommandError:
            if moved:  # the batch that met it was left as it was: stop there
                break
            raise
        moved += done
        if done < batch:
            break
    return moved


@command(
    "q.peek",
    -2,
    "readonly",
    (1, 1, 1),
    "stream",
    summary="Shows the next visible messages without delivering them.",
)
def q_peek(session: Session, args: list[bytes]) -> Any:
    """What Q.POP would deliver next (up to COUNT, default 1), as its message maps
    without a receipt: nothing is delivered, counted or logged."""
    service = session.node.queues
    queue = service.require(session.db, args[1])
    count = 1
    for option, value in _options(args):
        if option == b"count":
            count = _ranged(value, "count")
        else:
            raise syntax()
    return [
        {name: value for name, value in message(rec, b"", receives).items()
         if name != b"receipt"}
        for rec, receives in service.peek(queue, count)
    ]


@command("q.stats", 2, "readonly", (1, 1, 1), "stream", summary="A queue's statistics.")
def q_stats(session: Session, args: list[bytes]) -> Any:
    service = session.node.queues
    queue = service.require(session.db, args[1])
    stream = queue.stream
    now = service.clock.now_ms()
    oldest = queue.oldest_visible()
    oldest_age = 0
    if oldest is not None:
        oldest_age = max(0, now - (stream.id_at(oldest) >> 64))
    waiting = len(session.node.keys.waiters.get((session.db, args[1]), ()))
    first = stream.first_entry()
    return {
        **{k.encode(): v for k, v in queue.counts().items()},
        b"dead_lettered": queue.dead_lettered,
        b"dropped": queue.dropped,
        b"schema_rejected": queue.schema_rejected,
        b"pushed": stream.entries_added,
        b"acked": queue.acked,
        b"oldest_visible_age_ms": oldest_age,
        b"consumers": len(queue.consumers) + waiting,
        b"subscribers": len(service.subscribers(stream)),
        b"subscriptions": len(queue.subs),
        b"log_bytes": stream.data.size_bytes,
        b"segments": len(stream.data.segments),
        b"first_id": ids.fmt(first[0]) if first else b"0-0",
        b"last_id": ids.fmt(stream.last_id),
    }


# -- the keys each Q.* command touches (narad/commands/table.py's KeyFinder) ------------
#
# A queue named as another's dead-letter queue, or as a subscription's source, is
# written later by the server on the queue's behalf (a letter dead-lettered, a message
# copied): that is authorized when it is set up, so naming it needs write access to
# both (docs/security.md).


def _dlq_keys(argv: list[bytes], start: int) -> list[tuple[int | None, int]]:
    """The DLQ values among the setting pairs from argv[start:]."""
    return [
        (i + 1, WRITE)
        for i in range(start, len(argv) - 1, 2)
        if argv[i].lower() == b"dlq" and argv[i + 1]
    ]


def _q_create_keys(argv: list[bytes]) -> list[tuple[int | None, int]]:
    return [(1, WRITE), *_dlq_keys(argv, 2)]


def _q_config_keys(argv: list[bytes]) -> list[tuple[int | None, int]]:
    sub = argv[2].lower() if len(argv) > 2 else b""
    if sub == b"get":
        return [(1, READ)]
    return [(1, WRITE), *(_dlq_keys(argv, 3) if sub == b"set" else [])]


def _q_redrive_keys(argv: list[bytes]) -> list[tuple[int | None, int]]:
    """The dead-letter queue, and TO's queue; without TO each letter goes back to the
    queue it came from, which its arguments do not name: every key must be writable."""
    found: list[tuple[int | None, int]] = [(1, WRITE)]
    for i in range(2, len(argv) - 1, 2):
        if argv[i].lower() == b"to":
            found.append((i + 1, WRITE))
    if len(found) == 1:
        found.append((None, WRITE))
    return found


finds_keys("q.create", _q_create_keys)
finds_keys("q.config", _q_config_keys)
finds_keys("q.redrive", _q_redrive_keys)
