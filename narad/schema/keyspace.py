"""The schema registry as the keyspace keeps it: keyed by stream uid, with the active
validator of every stream that has a schema ready for the produce path.

Rules:

- The registry's key for a stream is its uid in decimal ASCII (`key(uid)`), never its
  name: RENAME and SWAPDB move a schema with its stream for free, and a deleted
  stream's uid is never reused, so nothing stale can reach a new key.
- `active` maps uid -> `Active` (latest version's validator, number, FIELD) for every
  uid with at least one version, or -> `Unavailable` for a faulted uid, and nothing
  else. It is the only thing XADD and Q.PUSH read, so a key without a schema costs
  one dict lookup. The dict object is never replaced (callers may hold it).
- While loading (between `loading()` and `loaded()`), validators are not built per
  op; `loaded()` builds each remaining stream's latest one once.
- Replaying never raises (`apply_at`): a logged op that cannot be applied, or a
  latest version the engine cannot compile at start, faults its uid (`faults`). A
  faulted uid skips its later ops (its state is unknown past the fault) until one
  that resets it: a schema.drop, the stream's delete, or a snapshot. Its produce
  path answers the fault's error (`Unavailable`); nothing is guessed.

Pure state, like the registry: the keyspace logs the ops and calls `apply`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from narad.errors import CommandError
from narad.schema.errors import clip

if TYPE_CHECKING:
    from narad.schema.registry import Active, Op, Registry


def key(uid: int) -> bytes:
    """The registry's key for stream `uid`."""
    return b"%d" % uid


@dataclass(frozen=True)
class Fault:
    """A metadata op that replay could not apply (or a version it could not use)."""

    offset: int  # the op's offset in the metadata log
    uid: int | None  # the stream it concerns, when the op names one
    what: str  # why, one line

    def describe(self) -> str:
        return f"its metadata op at meta offset {self.offset} cannot be applied: {self.what}"

    def remedy(self) -> str:
        """What a client can do about it, besides a repair."""
        return "Q.SCHEMA DROP the key's schema"

    def error(self, name: bytes | None = None) -> CommandError:
        """`ERR key 'name' is unavailable: ...`, naming the key when the caller knows it."""
        key = "" if name is None else f"'{clip(name.decode(errors='replace'), 64)}' "
        return CommandError(f"key {key}is unavailable: {self.describe()} (run narad check "
                            f"--repair with the server stopped, or {self.remedy()})")


class Unavailable:
    """What `active` holds for a faulted uid: every produce is refused with its error."""

    __slots__ = ("fault",)

    def __init__(self, fault: Fault) -> None:
        self.fault = fault

    def check_payload(self, data: bytes) -> None:
        raise self.fault.error()

    def check_fields(self, fields: list[bytes]) -> None:
        raise self.fault.error()


class StreamSchemas:
    def __init__(self) -> None:
        self._registry: Registry | None = None  # made by the first op (`registry`)
        self.active: dict[int, Active | Unavailable] = {}  # uid -> the produce path's check
        self.faults: dict[int, Fault] = {}  # uid -> why its schema state is unusable
        self._stale: set[int] | None = None  # uids to refresh when loading ends
        self._set_at: dict[int, int] = {}  # uid -> meta offset of its latest schema.set

    def loading(self) -> None:
        self._stale = set()

    def loaded(self) -> None:
        stale, self._stale = self._stale or set(), None
        for uid in stale:
            self._refresh(uid)

    @property
    def registry(self) -> Registry:
        """The registry, made (and the schema engine imported) on first use: a
        server whose keys have no schema never loads it."""
        if self._registry is None:
            from narad.schema.registry import Registry

            self._registry = Registry()
        return self._registry

    def apply(self, op: Sequence[Any]) -> None:
        """Apply one registry op (proposed and logged just now); a drop resets a fault."""
        from narad.schema.registry import DROP

        self.registry.apply(op)
        if op[0] == DROP:
            self.faults.pop(int(op[1]), None)
        self._refresh(int(op[1]))

    def apply_at(self, op: Sequence[Any], offset: int) -> None:
        """Apply one replayed op, logged at meta `offset`; a fault instead of raising."""
        from narad.schema.registry import DROP, SET

        try:
            uid = int(op[1])
        except Exception as error:
            raise ValueError(f"schema op without a stream uid: {error}") from None
        if uid in self.faults:
            if op[0] not in (DROP, DROP.encode()):
                return  # the key's state is unknown past its fault
            del self.faults[uid]
        try:
            self.registry.apply(op)
        except Exception as error:
            name = op[0].decode(errors="replace") if isinstance(op[0], bytes) else op[0]
            self.fault(Fault(offset, uid, f"{name} op: {_one_line(error)}"))
            return
        if op[0] in (SET, SET.encode()):
            self._set_at[uid] = offset
        self._refresh(uid)

    def fault(self, fault: Fault) -> None:
        """Mark `fault.uid` unusable until reset (see the module's rules)."""
        assert fault.uid is not None
        self.faults.setdefault(fault.uid, fault)
        self.active[fault.uid] = Unavailable(self.faults[fault.uid])

    def forget(self, uid: int) -> None:
        """Stream `uid` is deleted: its schema, versions and mode go with it. No op is
        logged for this: the stream's own delete op implies it."""
        self.faults.pop(uid, None)
        self.active.pop(uid, None)
        if self._registry is None:
            return  # no schema was ever added
        from narad.schema.registry import DROP

        if self._registry.propose_drop(key(uid)) is not None:
            self.apply([DROP, key(uid)])

    def snapshot(self, repaired: bool = False) -> list[Op]:
        """Ops that rebuild this state; `repaired`: a faulted uid keeps only its leading
        versions that the engine compiles (what `narad check --repair` writes)."""
        if self._registry is None:
            return []
        ops = self._registry.snapshot()
        if not repaired or not self.faults:
            return ops
        keep = {key(uid): self._usable_versions(uid) for uid in self.faults}
        return [op for op in ops if op[1] not in keep or op[0] != "schema.set"
                or op[2] <= keep[op[1]]]

    def restore(self, ops: Sequence[Sequence[Any]], offset: int = 0) -> None:
        """Replace everything with the state `ops` (a `snapshot()`, logged at meta
        `offset`) rebuild."""
        self.faults.clear()
        if self._registry is None and not ops:
            return
        held = self.registry.keys()  # a list: forgetting changes the registry
        for uid in held:
            self.forget(int(uid))
        for op in ops:
            self.apply_at(op, offset)

    def _usable_versions(self, uid: int) -> int:
        """How many of uid's versions, from the first, the engine compiles."""
        count = 0
        for number in self.registry.versions(key(uid)):
            version = self.registry.get(key(uid), number)
            try:
                assert version is not None
                _ = version.validator
            except Exception:
                break
            count = number
        return count

    def _refresh(self, uid: int) -> None:
        if self._stale is not None:
            self._stale.add(uid)
            return
        if uid in self.faults:
            self.active[uid] = Unavailable(self.faults[uid])
            return
        try:
            active = self.registry.validator(key(uid))
        except Exception as error:  # only at start: a new version compiled when proposed
            latest = self.registry.get(key(uid))
            number = latest.number if latest else 0
            self.fault(Fault(self._set_at.get(uid, 0), uid,
                             f"schema version {number} cannot be used: {_one_line(error)}"))
            return
        if active is None:
            self.active.pop(uid, None)
        else:
            self.active[uid] = active


def _one_line(error: BaseException) -> str:
    text = str(error) or type(error).__name__
    return " ".join(text.split())[:300]

