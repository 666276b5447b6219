"""The schema registry as the store keeps it: keyed by stream uid, with the active
validator of every stream that has a schema ready for the produce path.

Rules:

- The registry's key for a stream is its uid in decimal ASCII (`key(uid)`), never its
  name: RENAME and SWAPDB move a schema with its stream for free, and a deleted
  stream's uid is never reused, so nothing stale can reach a new key.
- `active` maps uid -> `Active` (latest version's validator, number, FIELD) for every
  uid with at least one version, and nothing else. It is the only thing XADD and
  Q.PUSH read, so a key without a schema costs one dict lookup. The dict object is
  never replaced (callers may hold it).
- While loading (between `loading()` and `loaded()`), validators are not built per
  op; `loaded()` builds each remaining stream's latest one once.

Pure state, like the registry: the store logs the ops and calls `apply`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from narad.schema.registry import Active, Op, Registry


def key(uid: int) -> bytes:
    """The registry's key for stream `uid`."""
    return b"%d" % uid


class StreamSchemas:
    def __init__(self) -> None:
        self._registry: Registry | None = None  # made by the first op (`registry`)
        self.active: dict[int, Active] = {}  # uid -> latest version's validator
        self._stale: set[int] | None = None  # uids to refresh when loading ends

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
        """Apply one registry op (logged, replayed, or from a snapshot)."""
        self.registry.apply(op)
        self._refresh(int(op[1]))

    def forget(self, uid: int) -> None:
        """Stream `uid` is deleted: its schema, versions and mode go with it. No op is
        logged for this: the stream's own delete op implies it."""
        if self._registry is None:
            return  # no schema was ever added
        from narad.schema.registry import DROP

        if self._registry.propose_drop(key(uid)) is not None:
            self.apply([DROP, key(uid)])

    def snapshot(self) -> list[Op]:
        return [] if self._registry is None else self._registry.snapshot()

    def restore(self, ops: Sequence[Sequence[Any]]) -> None:
        """Replace everything with the state `ops` (a `snapshot()`) rebuild."""
        if self._registry is None and not ops:
            return
        held = self.registry.keys()  # a list: forgetting changes the registry
        for uid in held:
            self.forget(int(uid))
        for op in ops:
            self.apply(op)

    def _refresh(self, uid: int) -> None:
        if self._stale is not None:
            self._stale.add(uid)
            return
        active = self.registry.validator(key(uid))
        if active is None:
            self.active.pop(uid, None)
        else:
            self.active[uid] = active
