"""The node's state machines, registered explicitly.

Every op of a stream's state log is applied by the handler one of these machines
registered (narad/streams/machines.py), live, at recovery and in `narad check`; the
order is the layout of a stream's snapshot op (docs/log-format.md), so a machine is
only ever added at the end. The metadata log's machine (stream names, and the schema
registry's ops keyed by stream) is narad/metalog.py's MetaState.
"""

from __future__ import annotations

from narad.queues.queue import QUEUE_MACHINE
from narad.streams.groups import GROUPS_MACHINE
from narad.streams.machines import Machines
from narad.streams.references import REFERENCES_MACHINE
from narad.streams.stream import STREAM_MACHINE


def stream_machines() -> Machines:
    """The state machines of a stream's state log: the stream's own, its consumer
    groups', its queue's, and deletions that regard the groups' references."""
    machines = Machines()
    for machine in (STREAM_MACHINE, GROUPS_MACHINE, QUEUE_MACHINE, REFERENCES_MACHINE):
        machines.register(machine)
    return machines
