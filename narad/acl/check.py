"""The permission check: may a user run this command with these arguments? The
dispatcher (narad/dispatch.py) asks it once per command of a session whose user is
not unrestricted, before the command runs and again at EXEC for each queued command;
ACL DRYRUN asks it too.

The order is Redis's: the command (or subcommand), then every key the command
touches with the access it needs (narad/commands/table.py's `Command.keys_of`), then
channels (Narad has no channel commands, so none are checked).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

from narad.acl.catalogue import Entry
from narad.acl.user import User
from narad.errors import CommandError

# A key position of None stands for "any key": the command may touch keys its
# arguments do not name (Q.REDRIVE without TO writes to each letter's origin), so
# the access must be granted on every key, as Redis asks of SORT ... BY.
KeyAccess = tuple[int | None, int]


class Denied(NamedTuple):
    reason: str  # "command", "key" or "channel" (ACL LOG's words)
    position: int | None  # the argv index of the key refused; None: the command, or any key

    def object(self, entry: Entry, argv: list[bytes]) -> bytes:
        """What ACL LOG names: the command's full name, or the key."""
        if self.reason == "command":
            return entry.name.encode()
        return b"*" if self.position is None else argv[self.position]

    def error(self, user: User, entry: Entry) -> CommandError:
        """The refusal as Redis 7.2 answers it."""
        if self.reason == "command":
            text = f"User {user.name} has no permissions to run the '{entry.name}' command"
        elif self.reason == "key":
            text = "No permissions to access a key"
        else:
            text = "No permissions to access a channel"
        return CommandError(text, "NOPERM")

    def exec_error(self) -> CommandError:
        """The refusal of a queued command at EXEC, as Redis answers it."""
        why = {
            "command": "no permission to execute the command or subcommand",
            "key": "no permission to touch the specified keys",
        }.get(self.reason, "no permission to access one of the channels used as arguments")
        return CommandError(
            "ACLs rules changed between the moment the transaction was accumulated and "
            f"the EXEC call. This command is no longer allowed for the following reason: {why}",
            "NOPERM",
        )

    def dryrun_text(self, user: User, entry: Entry, argv: list[bytes]) -> bytes:
        """ACL DRYRUN's answer for a refusal."""
        if self.reason == "command":
            return f"User {user.name} has no permissions to run the '{entry.name}' command".encode()
        kind = "key" if self.reason == "key" else "channel"
        return (
            f"User {user.name} has no permissions to access the '".encode()
            + self.object(entry, argv)
            + f"' {kind}".encode()
        )


def check(user: User, entry: Entry, argv: list[bytes], keys: Iterable[KeyAccess]) -> Denied | None:
    """None if `user` may run `argv` (whose command is `entry`, touching `keys`),
    else why not."""
    if not user.allcommands and not entry.no_auth:
        first_arg = argv[1] if len(argv) > 1 and entry.parent is None else None
        if not user.can_run(entry, first_arg):
            return Denied("command", None)
    if not user.allkeys:
        for position, access in keys:
            if position is None:
                if not user.may_access_all(access):
                    return Denied("key", None)
            elif not user.may_access(argv[position], access):
                return Denied("key", position)
    return None
