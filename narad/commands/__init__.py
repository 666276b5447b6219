"""Command handlers, one module per family; importing this package fills the table."""

from narad.commands import (  # noqa: F401
    acl,
    admin,
    connection,
    debug,
    groups,
    introspection,
    keys,
    queues,
    replication,
    schema,
    streams,
    transactions,
)
from narad.commands.table import COMMANDS, Command, command

__all__ = ["COMMANDS", "Command", "command"]
