"""The metadata log's state machine: the keyspace's names, the next stream uid and the
schema registry, as the metadata ops make them. `MetaState.apply` is the one apply of
a metadata op: live (the keyspace applies each op it logs, then its open streams follow
the names: narad/keyspace.py), at a server's start, and in `narad check`.

The ops are listed in keyspace.py. Rules:

- Replaying never raises, so a node always starts on its own data. An op that
  cannot be applied (a record that is not an op, an unknown op, a wrong shape, a
  registry op the registry refuses, a latest schema version the engine cannot
  compile) becomes a `Fault` naming its offset, and is skipped. A schema fault makes
  its stream refuse writes with the fault's error until it is reset (keyspace.py);
  any other fault is logged and reported.
- While any fault is present, open does nothing that a repair could need undone: no
  stream folder is removed as an orphan and the log is not compacted.
- `check_metadata` replays the same way from the segment files, read-only, and
  reports each fault; `narad check --repair` then compacts the log into a snapshot
  of what applied (narad/repair.py's repair_metadata), which removes the bad ops
  durably.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import msgpack

from narad.log.check import Kind, Problem, folder_records
from narad.schema.keyspace import Fault, StreamSchemas

# `narad check` does not know the server's `databases`: any db a server could have.
DATABASES_ANY = 1 << 31


class MetaState:
    """What the metadata log says: names, next uid, schemas (given, filled in), and
    the faults that name no stream."""

    def __init__(self, schemas: StreamSchemas, databases: int) -> None:
        self.names: dict[int, tuple[int, bytes]] = {}  # uid -> (db, key)
        self.next_uid = 1
        self.ops = 0  # ops read, applied or not
        self.schemas = schemas
        self.databases = databases
        self.other_faults: list[Fault] = []

    @property
    def faults(self) -> list[Fault]:
        """Every fault, in log order."""
        return sorted([*self.other_faults, *self.schemas.faults.values()],
                      key=lambda fault: fault.offset)

    def replay(self, records: Iterable[tuple[int, bytes]]) -> None:
        """Apply (offset, payload) records, oldest first; then build the validators."""
        self.schemas.loading()
        for offset, payload in records:
            self.apply_record(offset, payload)
        self.schemas.loaded()

    def apply_record(self, offset: int, payload: bytes) -> None:
        self.ops += 1
        try:
            op = msgpack.unpackb(payload, raw=True)
            if not (isinstance(op, list) and op and isinstance(op[0], bytes)):
                raise ValueError("the record is not an op (a list that starts with its name)")
            self.apply(op, offset)
        except Exception as error:
            self.other_faults.append(Fault(offset, None, " ".join(str(error).split())[:300]))

    def snapshot_op(self, repaired: bool = False) -> list[Any]:
        live = [[uid, db, key] for uid, (db, key) in self.names.items()]
        return ["snap", self.next_uid, live, self.schemas.snapshot(repaired)]

    def apply(self, op: list[Any], offset: int) -> None:
        """Apply op `op` (decoded as `apply_record` decodes it: names and keys as
        bytes), logged at meta `offset`; raises ValueError when it cannot be applied
        (a schema op the registry refuses becomes a schema fault instead)."""
        kind, names = op[0], self.names
        if kind == b"create" or kind == b"rename":
            _, uid, db, key = op
            names[_uid(uid)] = (self._db(db), _key(key))
            self.next_uid = max(self.next_uid, uid + 1)
        elif kind == b"delete":
            names.pop(_uid(op[1]), None)
            self.schemas.forget(op[1])
        elif kind == b"swapdb":
            a, b = self._db(op[1]), self._db(op[2])
            for uid, (db, key) in list(names.items()):
                if db in (a, b):
                    names[uid] = (b if db == a else a, key)
        elif kind == b"snap":
            entries = [(_uid(uid), self._db(db), _key(key)) for uid, db, key in op[2]]
            names.clear()
            self.next_uid = _uid(op[1])
            for uid, db, key in entries:
                names[uid] = (db, key)
            self.schemas.restore(op[3] if len(op) > 3 else [], offset)
        elif kind.startswith(b"schema."):
            self.schemas.apply_at(op, offset)
        else:
            raise ValueError(f"unknown metadata op {kind!r}")

    def _db(self, db: object) -> int:
        if not (isinstance(db, int) and 0 <= db < self.databases):
            raise ValueError(f"database {db!r} is out of range (databases {self.databases})")
        return db


def _uid(uid: object) -> int:
    if not (isinstance(uid, int) and uid > 0):
        raise ValueError(f"stream uid {uid!r} is not a positive integer")
    return uid


def _key(key: object) -> bytes:
    if not isinstance(key, bytes):
        raise ValueError(f"key {key!r} is not a byte string")
    return key


# -- narad check ------------------------------------------------------------------------


def check_metadata(root: Path) -> list[Problem]:
    """Replay the metadata log of data dir `root` from its segment files (read-only;
    a damaged record ends the replay, the log check reports it) and report each op
    that cannot be applied. No metadata log: nothing to report."""
    folder = root / "meta"
    if not folder.is_dir():
        return []
    state = MetaState(StreamSchemas(), DATABASES_ANY)
    state.replay(folder_records(folder))
    return [
        Problem(Kind.META_OP, folder, None,
                f"op at offset {fault.offset}"
                + ("" if fault.uid is None else f" (stream uid {fault.uid})")
                + f" cannot be applied: {fault.what}", repairable=True)
        for fault in state.faults
    ]
