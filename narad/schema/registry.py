"""The schema registry: per key (queue or stream), its schema versions, compatibility
mode and FIELD, as a state machine over ops.

Rules:

- Every change is one op, a msgpack-able list, applied by `Registry.apply`; replaying
  the same ops in the same order rebuilds the same state. `apply` trusts its op (the
  checks ran in `propose*` before the op was logged, the schema compiled by the
  engine that judges): it asserts consistency and never raises a command error. A
  replayed op that still fails (damage, a bug) raises, and keyspace.py turns that
  into a fault of its key; it never stops a start. Nothing else mutates the state.
- `propose*` checks a command against the current state and returns the op to log, or
  None when nothing would change; it raises the command's error (errors.py) and never
  changes state. The server logs the op, then applies it.
- Versions count from 1 per key; each keeps its schema text exactly as given and its
  parsed form. A key's compatibility mode defaults to BACKWARD. A key can hold a mode
  and no version (set by COMPAT before the first SET). Dropping a key forgets all of
  it; a later SET starts again at version 1.
- FIELD is kept per version and inherited by a SET that does not name one; naming a
  different FIELD than the latest version's is refused (drop the schema first).
- Setting the same schema text and FIELD as the latest version adds no version (a
  retried SET is harmless); a COMPAT option given with it still changes the mode.
- Keys are bytes; texts and names are str; versions are ints.

Ops (fields after the name):

    schema.set     key, version, schema_text, field|None, mode
                   appends `version` (== count + 1) and sets the key's mode
    schema.compat  key, mode
    schema.drop    key

It never touches logs or sockets, and compiles a validator only when asked for one.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

from narad.schema import payload, validate
from narad.schema._document import Schema
from narad.schema.errors import IncompatibleError, PayloadError, SchemaError, field_changed
from narad.schema.modes import DEFAULT_MODE, Mode, parse_mode
from narad.schema.validate import Validator

if TYPE_CHECKING:
    from narad.schema.compat import Reason

Op = list[Any]
SET, COMPAT, DROP = "schema.set", "schema.compat", "schema.drop"


@dataclass
class Version:
    """One schema version of a key: immutable once applied."""

    number: int  # from 1
    text: str  # the schema JSON text exactly as given
    schema: Schema  # its parsed form
    field: str | None  # XADD: the field holding the JSON document, or None
    _validator: Validator | None = dataclasses.field(
        default=None, init=False, repr=False, compare=False
    )

    @property
    def validator(self) -> Validator:
        """The compiled validator, built on first use and kept."""
        if self._validator is None:
            self._validator = validate.compile(self.schema)
        return self._validator


@dataclass
class Subject:
    """Everything the registry keeps for one key."""

    mode: Mode = DEFAULT_MODE
    versions: list[Version] = dataclasses.field(default_factory=list)  # versions[i].number == i + 1


class Active(NamedTuple):
    """The latest version of a key, as produce-time validation needs it."""

    validator: Validator
    version: int
    field: str | None

    def check_payload(self, data: bytes) -> None:
        """Q.PUSH: raise PayloadError (`SCHEMA ...`) unless `data` is accepted."""
        self._raise(payload.validate_payload(self.validator, data))

    def check_fields(self, fields: list[bytes]) -> None:
        """XADD: raise PayloadError unless the entry's field/value pairs are accepted."""
        self._raise(payload.validate_fields(self.validator, fields, self.field))

    def _raise(self, violation: validate.Violation | None) -> None:
        if violation is not None:
            raise PayloadError(violation[0], violation[1], self.version)


class Registry:
    """All keys' schemas. Owned by the task that applies the metadata log; the
    validators it hands out are immutable and may be used from anywhere."""

    def __init__(self) -> None:
        self._subjects: dict[bytes, Subject] = {}

    # -- reads ---------------------------------------------------------------

    def keys(self) -> list[bytes]:
        return list(self._subjects)

    def validator(self, key: bytes) -> Active | None:
        """The latest version's validator, number and FIELD; None without a schema."""
        subject = self._subjects.get(key)
        if subject is None or not subject.versions:
            return None
        latest = subject.versions[-1]
        return Active(latest.validator, latest.number, latest.field)

    def versions(self, key: bytes) -> list[int]:
        subject = self._subjects.get(key)
        return [v.number for v in subject.versions] if subject else []

    def get(self, key: bytes, version: int | None = None) -> Version | None:
        """A version (the latest when `version` is None); None if there is none."""
        subject = self._subjects.get(key)
        if subject is None or not subject.versions:
            return None
        if version is None:
            return subject.versions[-1]
        if 1 <= version <= len(subject.versions):
            return subject.versions[version - 1]
        return None

    def mode(self, key: bytes) -> Mode:
        subject = self._subjects.get(key)
        return subject.mode if subject else DEFAULT_MODE

    def check(self, key: bytes, text: str | bytes, mode: Mode | str | None = None) -> list[Reason]:
        """Q.SCHEMA CHECK: reasons why `text` could not become the next version (empty
        when it could); SchemaError when it is not a valid schema or the validation
        engine cannot compile it."""
        schema = validate.prepare(text).schema
        chosen = parse_mode(mode) if mode is not None else self.mode(key)
        olds = [v.schema for v in self._subject_versions(key)]
        from narad.schema import compat  # the checker loads on first use (~5 ms)

        return compat.check(olds, schema, chosen)

    # -- proposals -----------------------------------------------------------

    def propose(self, key: bytes, text: str | bytes, mode: Mode | str | None = None,
                field: str | None = None) -> Op | None:
        """Q.SCHEMA SET: the op adding `text` as the next version, or the op changing
        only the mode, or None when nothing changes. Raises SchemaError,
        IncompatibleError or a FIELD CommandError; never changes state."""
        if isinstance(text, bytes):
            text = _utf8(text)
        reasons = self.check(key, text, mode)
        if reasons:
            raise IncompatibleError(reasons)
        chosen = parse_mode(mode) if mode is not None else self.mode(key)
        latest = self.get(key)
        field = self._field(latest, field)
        if latest is not None and latest.text == text and latest.field == field:
            return self.propose_compat(key, chosen)
        number = latest.number + 1 if latest else 1
        return [SET, key, number, text, field, chosen.value]

    def propose_compat(self, key: bytes, mode: Mode | str) -> Op | None:
        """Q.SCHEMA COMPAT key mode: the op, or None when the mode is already that."""
        chosen = parse_mode(mode)
        if key in self._subjects and self._subjects[key].mode is chosen:
            return None
        return [COMPAT, key, chosen.value]

    def propose_drop(self, key: bytes) -> Op | None:
        """Q.SCHEMA DROP: the op, or None when the key has nothing (reply 0)."""
        return [DROP, key] if key in self._subjects else None

    @staticmethod
    def _field(latest: Version | None, field: str | None) -> str | None:
        if latest is None or latest.field is None:
            return field
        if field is not None and field != latest.field:
            raise field_changed(latest.field, field)
        return latest.field

    def _subject_versions(self, key: bytes) -> list[Version]:
        subject = self._subjects.get(key)
        return subject.versions if subject else []

    # -- the one mutator -----------------------------------------------------

    def apply(self, op: Sequence[Any]) -> None:
        """Apply one op (from `propose*`, the log, or a snapshot)."""
        name, key = _text(op[0]), bytes(op[1])
        if name == SET:
            self._apply_set(key, *op[2:])
        elif name == COMPAT:
            self._subjects.setdefault(key, Subject()).mode = Mode(_text(op[2]))
        elif name == DROP:
            self._subjects.pop(key, None)
        else:
            raise AssertionError(f"unknown schema op {name!r}")

    def _apply_set(self, key: bytes, number: int, text: str, field: str | None,
                   mode: str) -> None:
        subject = self._subjects.setdefault(key, Subject())
        assert number == len(subject.versions) + 1, (key, number, len(subject.versions))
        schema = json.loads(_text(text))  # checked when proposed
        subject.versions.append(Version(number, _text(text), schema,
                                        None if field is None else _text(field)))
        subject.mode = Mode(_text(mode))

    # -- compaction ------------------------------------------------------------

    def snapshot(self) -> list[Op]:
        """Ops that rebuild exactly this state from an empty registry."""
        return list(self._snapshot_ops())

    def _snapshot_ops(self) -> Iterator[Op]:
        for key, subject in self._subjects.items():
            for v in subject.versions:
                yield [SET, key, v.number, v.text, v.field, subject.mode.value]
            yield [COMPAT, key, subject.mode.value]

    @classmethod
    def from_snapshot(cls, ops: Sequence[Sequence[Any]]) -> Registry:
        registry = cls()
        for op in ops:
            registry.apply(op)
        return registry


def _text(value: str | bytes) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else value


def _utf8(data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise SchemaError("not UTF-8 text") from None
