"""Command handlers, one module per family; importing this package fills the table."""

from narad.commands import admin, connection, groups, keys, streams, transactions  # noqa: F401
from narad.commands.table import COMMANDS, Command, command

__all__ = ["COMMANDS", "Command", "command"]
