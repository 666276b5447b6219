"""Command handlers, one module per family; importing this package fills the table."""

from narad.commands import admin, connection, keys, streams, transactions  # noqa: F401
from narad.commands.table import COMMANDS, Command, command

try:  # consumer groups and queues register themselves when present
    from narad.commands import groups  # noqa: F401
except ImportError:  # pragma: no cover - only while a family is being built
    pass

__all__ = ["COMMANDS", "Command", "command"]
