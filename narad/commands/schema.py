"""Q.SCHEMA: JSON Schema versions per queue or stream, and validation on produce.

    Q.SCHEMA SET key schema-json [COMPAT mode] [FIELD name]   -> the version number
    Q.SCHEMA GET key [version]        -> map: version, schema, field (null: none)
    Q.SCHEMA VERSIONS key             -> array of version numbers
    Q.SCHEMA CHECK key schema-json [COMPAT mode]   -> OK, or the INCOMPATIBLE error
    Q.SCHEMA COMPAT key [mode]        -> the mode / OK
    Q.SCHEMA DROP key                 -> 1, or 0 when the key had no schema nor mode

The key must exist (a stream or a queue: every key is a stream) or the reply is
NOQUEUE. The registry (narad/schema/registry.py) decides; this module parses
arguments, logs the registry's ops through the keyspace (keyed by the stream's uid) and
shapes replies. Every reply that follows a change leaves only after the op is
committed (the server's commit barrier).

Produce paths call `check_entry` (XADD) or `check_payloads` (Q.PUSH) before they
append anything. docs/schemas.md describes the commands for users.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from narad.commands.args import parse_int
from narad.commands.table import command, container, help_reply
from narad.errors import CommandError, no_queue, syntax
from narad.resp import SimpleString
from narad.schema.errors import IncompatibleError, PayloadError
from narad.schema.keyspace import Unavailable
from narad.schema.keyspace import key as uid_key
from narad.schema.modes import Mode, parse_mode

if TYPE_CHECKING:
    from narad.node import Session
    from narad.schema.registry import Active
    from narad.streams.stream import Stream

OK = SimpleString("OK")

container("q.schema", "stream", "A container for queue and stream schema commands.")

HELP = [
    "Q.SCHEMA <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "SET <key> <schema-json> [COMPAT <mode>] [FIELD <name>]",
    "    Add a schema version (must pass the compatibility mode); replies its number.",
    "GET <key> [<version>]",
    "    Return a version (the latest by default): version, schema and field.",
    "VERSIONS <key>",
    "    Return the version numbers.",
    "CHECK <key> <schema-json> [COMPAT <mode>]",
    "    Check whether a schema could become the next version.",
    "COMPAT <key> [<mode>]",
    "    Return or set the compatibility mode: BACKWARD (default), FORWARD, FULL,",
    "    their _TRANSITIVE variants, or NONE.",
    "DROP <key>",
    "    Remove the schema, all its versions and the mode.",
    "HELP",
    "    Prints this help.",
]


# -- produce-time validation --------------------------------------------------------------


def check_entry(session: Session, stream: Stream, fields: list[bytes]) -> None:
    """XADD: raise `SCHEMA <path>: <reason> (version N)` unless the entry's
    [field, value, ...] pairs are accepted by the stream's latest schema version (as
    an object of strings, or the FIELD's value parsed as JSON). No schema: returns."""
    active = session.node.keyspace.validators.get(stream.uid)
    if active is not None:
        _usable(active, stream).check_fields(fields)


def check_payloads(session: Session, stream: Stream, payloads: list[bytes]) -> None:
    """Q.PUSH: judge a whole batch before any of it is appended.

    Contract:
    - Each payload is parsed as UTF-8 JSON text (RFC 8259: no NaN, no trailing data)
      and validated against the stream's latest schema version. FIELD plays no part
      (it only tells XADD where the document is).
    - All or nothing: returns None when every payload is accepted (or the stream has
      no schema: one dict lookup), else raises the CommandError of the first refused
      payload, `SCHEMA <path>: <reason> (version N)`, in a batch of several
      `(version N, payload I of COUNT)`, and the caller must append none of the
      batch. Text that is not JSON is refused at path `$`.
    - Appends, logs and changes nothing; call it after the command's arguments are
      parsed and before the first append, on the event loop thread.
    """
    active = session.node.keyspace.validators.get(stream.uid)
    if active is not None:
        active = _usable(active, stream)
        if len(payloads) == 1:
            active.check_payload(payloads[0])
            return
        for index, payload in enumerate(payloads):
            try:
                active.check_payload(payload)
            except PayloadError as refused:
                raise refused.in_batch(index, len(payloads)) from None


def _usable(active: Active | Unavailable, stream: Stream) -> Active | Unavailable:
    """`active`, unless it stands for a fault: then its error, naming the key."""
    if isinstance(active, Unavailable):
        raise active.fault.error(stream.key)
    return active


# -- the subcommands ------------------------------------------------------------------------


def _stream(session: Session, key: bytes) -> Stream:
    stream = session.node.keyspace.get(session.db, key)
    if stream is None:
        raise no_queue(key)
    return stream


def _sound(session: Session, key: bytes) -> Stream:
    """The stream, for a subcommand that builds on its schema state: refused with the
    fault's error while a metadata op of it cannot be applied (keyspace.py); GET,
    VERSIONS and DROP (which resets the fault) still work."""
    stream = _stream(session, key)
    fault = session.node.keyspace.schemas.faults.get(stream.uid)
    if fault is not None:
        raise fault.error(key)
    return stream


def _options(args: list[bytes], start: int, allowed: tuple[bytes, ...]) -> dict[bytes, bytes]:
    """`NAME value` pairs from args[start] on (names any case, the last one given
    wins); anything else is a syntax error."""
    out: dict[bytes, bytes] = {}
    i = start
    while i < len(args):
        name = args[i].lower()
        if name not in allowed or i + 1 >= len(args):
            raise syntax()
        out[name] = args[i + 1]
        i += 2
    return out


def _field_name(field: bytes) -> str:
    """FIELD names an XADD field, matched as UTF-8 text (payload.py)."""
    try:
        return field.decode("utf-8")
    except UnicodeDecodeError:
        raise CommandError("FIELD name is not UTF-8 text") from None


def _mode(options: dict[bytes, bytes]) -> Mode | None:
    given = options.get(b"compat")
    return None if given is None else parse_mode(given)


@command(
    "set", -4, "write denyoom", (2, 2, 1), "stream", parent="q.schema",
    complexity="O(N) in the size of the schemas compared",
    summary="Adds a schema version to a queue or stream.",
)
def schema_set(session: Session, args: list[bytes]) -> Any:
    options = _options(args, 4, (b"compat", b"field"))
    mode = _mode(options)
    field = options.get(b"field")
    stream = _sound(session, args[2])
    keyspace = session.node.keyspace
    uid = uid_key(stream.uid)
    op = keyspace.schemas.registry.propose(
        uid, args[3], mode, None if field is None else _field_name(field)
    )
    if op is not None:
        keyspace.schema_op(op)
    latest = keyspace.schemas.registry.get(uid)
    assert latest is not None
    return latest.number


@command(
    "get", -3, "readonly", (2, 2, 1), "stream", parent="q.schema",
    summary="Returns a schema version of a queue or stream.",
)
def schema_get(session: Session, args: list[bytes]) -> Any:
    if len(args) > 4:
        raise syntax()
    number = None
    if len(args) == 4:
        number = parse_int(args[3])
        if number <= 0:
            raise CommandError("value is out of range, must be positive")
    stream = _stream(session, args[2])
    version = session.node.keyspace.schemas.registry.get(uid_key(stream.uid), number)
    if version is None:
        return None
    field = None if version.field is None else version.field.encode()
    return {b"version": version.number, b"schema": version.text.encode(), b"field": field}


@command(
    "versions", 3, "readonly", (2, 2, 1), "stream", parent="q.schema",
    complexity="O(N) where N is the number of versions",
    summary="Returns the schema version numbers of a queue or stream.",
)
def schema_versions(session: Session, args: list[bytes]) -> Any:
    stream = _stream(session, args[2])
    return session.node.keyspace.schemas.registry.versions(uid_key(stream.uid))


@command(
    "check", -4, "readonly", (2, 2, 1), "stream", parent="q.schema",
    complexity="O(N) in the size of the schemas compared",
    summary="Checks whether a schema could become the next version.",
)
def schema_check(session: Session, args: list[bytes]) -> Any:
    mode = _mode(_options(args, 4, (b"compat",)))
    stream = _sound(session, args[2])
    reasons = session.node.keyspace.schemas.registry.check(uid_key(stream.uid), args[3], mode)
    if reasons:
        raise IncompatibleError(reasons)
    return OK


@command(
    "compat", -3, "write", (2, 2, 1), "stream", parent="q.schema",
    summary="Returns or sets the compatibility mode of a queue or stream.",
)
def schema_compat(session: Session, args: list[bytes]) -> Any:
    if len(args) > 4:
        raise syntax()
    mode = parse_mode(args[3]) if len(args) == 4 else None
    stream = _stream(session, args[2]) if mode is None else _sound(session, args[2])
    keyspace = session.node.keyspace
    uid = uid_key(stream.uid)
    if mode is None:
        return keyspace.schemas.registry.mode(uid).value.encode()
    op = keyspace.schemas.registry.propose_compat(uid, mode)
    if op is not None:
        keyspace.schema_op(op)
    return OK


@command(
    "drop", 3, "write", (2, 2, 1), "stream", parent="q.schema",
    complexity="O(N) where N is the number of versions",
    summary="Removes the schema of a queue or stream.",
)
def schema_drop(session: Session, args: list[bytes]) -> Any:
    stream = _stream(session, args[2])
    keyspace = session.node.keyspace
    op = keyspace.schemas.registry.propose_drop(uid_key(stream.uid))
    if op is None:
        return 0
    keyspace.schema_op(op)
    return 1


@command(
    "help", 2, "loading stale", group="stream", parent="q.schema",
    summary="Shows helpful text about the different subcommands.",
)
def schema_help(session: Session, args: list[bytes]) -> Any:
    return help_reply(HELP)
