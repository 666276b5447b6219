"""The registry of the state machines a stream's state log drives.

A stream's state log holds the ops of several state machines: the stream's own (trims,
deletions, XSETID, snapshots), its consumer groups' (narad/streams/groups.py) and, when
the stream is a queue, the queue's (narad/queues/queue.py). Each machine is registered
explicitly (narad/machines.py assembles the node's set), with its ops, its part of a
stream's snapshot, and what it does after a replay; a stream applies every op through
the registry, live and at recovery alike, and knows nothing of the machines in it.

Contracts:
- One handler per op name, the only code that applies that op, live or replayed. A
  handler reads nothing but its op and the stream's in-memory state.
- An op's name carries its version: a bare name is version 1, a later shape of the op
  is registered and written as `name/N`. A node refuses an op it has no handler for,
  naming it (the stream's fault names the log and the offset: narad/streams/stream.py).
- A snapshot op holds the stream's own fields, then each snapshotting machine's part,
  in registration order (the on-disk layout: docs/log-format.md); a machine whose part
  a snapshot lacks (written before the machine had one) restores from None.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

# A handler's first argument is the stream (narad/streams/stream.py's Stream), which
# applies ops through this registry: typed `Any` here so that this module, below the
# stream, never imports it. Each handler declares `stream: Stream` itself.
Stream = Any
OpHandler = Callable[[Stream, list[Any]], None]


def op_table() -> tuple[dict[str, OpHandler], Callable[[str], Callable[[OpHandler], OpHandler]]]:
    """A machine's op table and the decorator that fills it: `@op("name")`."""
    ops: dict[str, OpHandler] = {}

    def op(name: str) -> Callable[[OpHandler], OpHandler]:
        def register(fn: OpHandler) -> OpHandler:
            if name in ops:
                raise ValueError(f"state op {name!r} has two handlers")
            ops[name] = fn
            return fn

        return register

    return ops, op


@dataclass(frozen=True)
class Machine:
    name: str  # for errors and docs: "stream", "groups", "queue"
    ops: dict[str, OpHandler]
    # Its part of a snapshot op, and how that part (or None) is restored.
    snapshot: Callable[[Stream], Any] | None = None
    restore: Callable[[Stream, Any], None] | None = None
    # After a replay: forget what the data log lost (an unacknowledged tail).
    forget_lost_tail: Callable[[Stream], None] | None = None
    # After `narad check --repair` cut the state log: the op to append, if any.
    after_repair: Callable[[Stream], list[Any] | None] | None = None


@dataclass
class Machines:
    """The state machines of every stream of a keyspace, in registration order."""

    handlers: dict[str, OpHandler] = field(default_factory=dict)  # op name -> handler
    machines: list[Machine] = field(default_factory=list)

    def register(self, machine: Machine) -> None:
        taken = self.handlers.keys() & machine.ops.keys()
        if taken:
            raise ValueError(f"{machine.name}: state ops {sorted(taken)} are registered already")
        if (machine.snapshot is None) != (machine.restore is None):
            raise ValueError(f"{machine.name}: a snapshot part needs both snapshot and restore")
        self.handlers.update(machine.ops)
        self.machines.append(machine)

    @property
    def snapshotting(self) -> list[Machine]:
        return [m for m in self.machines if m.snapshot is not None]

    def unknown(self, name: str) -> str:
        """Why op `name` cannot be applied: no handler for it (or that version)."""
        base = name.partition("/")[0]
        versions = sorted(n for n in self.handlers if n.partition("/")[0] == base)
        if versions:
            return f"unknown state op {name!r} (this node reads {', '.join(versions)})"
        return f"unknown state op {name!r}"
