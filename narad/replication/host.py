"""What replication asks of the node it runs in: the small interface narad/node.py's
Node meets, so that replication never imports the layers above it. (What it asks of
a replica's connection is narad/replication/leader.py's Peer.)

Owned by the event loop thread.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from narad.barrier import CommitBarrier
from narad.config import Config
from narad.errors import CommandError
from narad.keyspace import Keyspace
from narad.keywatch import KeyWatch
from narad.tls import Contexts

if TYPE_CHECKING:
    from narad.queues.service import QueueService


class Host(Protocol):
    """The node, as replication uses it."""

    config: Config
    keyspace: Keyspace
    barrier: CommitBarrier
    keys: KeyWatch  # WAIT and WAITAOF block on ACKS_KEY (narad/replication/role.py)
    queues: QueueService
    # What every write is answered with, unrun, while set (READONLY, NOREPLICAS).
    refusal: CommandError | None
    tcp_port: int  # the port the node listens on (what a replica announces)
    tls_port: int  # its TLS port (0: none), announced instead with tls-replication
    tls: Contexts | None  # the TLS contexts in force (narad/tls.py)

    def reopen_keyspace(self, truncate_to: int | None = None) -> None:
        """Reopen the keyspace: on its history cut back to `truncate_to` commits, or
        on a complete full copy."""

    def commit_failed(self, why: str, clients_closed: int) -> None:
        """The node cannot go on committing: it stops."""

    def close_sessions(self, but: object = None) -> int:
        """Close every client connection but `but`; how many were closed."""
