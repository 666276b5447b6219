"""ACL and its subcommands: users and permissions (narad/acl/, docs/security.md),
answered as Redis 7.2 answers them."""

from __future__ import annotations

import logging
import secrets
from typing import TYPE_CHECKING, Any

from narad.acl import catalogue
from narad.acl.catalogue import CATEGORIES
from narad.acl.check import check
from narad.acl.files import AclFileError, load_acl_file, save_acl_file
from narad.acl.users import SetUserError
from narad.commands.args import parse_int
from narad.commands.handshake import redact
from narad.commands.table import COMMANDS, Command, ListSet, command, container, help_reply
from narad.errors import CommandError, wrong_arity
from narad.resp import SimpleString

if TYPE_CHECKING:
    from narad.node import Session

logger = logging.getLogger("narad.server")

OK = SimpleString("OK")
GENPASS_MAX_BITS = 4096
NO_ACL_FILE = (
    "This Redis instance is not configured to use an ACL file. You may want to specify "
    "users via the ACL SETUSER command and then issue a CONFIG REWRITE (assuming you have "
    "a Redis configuration file set) in order to store users in the Redis configuration."
)

container("acl", "server", "A container for Access List Control commands.", "6.0.0")

ADMIN = "admin noscript loading stale"


@command("setuser", -3, ADMIN, group="server", parent="acl", since="6.0.0", complexity="O(N)")
def acl_setuser(session: Session, args: list[bytes]) -> Any:
    """Creates and modifies an ACL user and its rules."""
    name, rules = args[2], args[3:]
    redact(args, range(2, len(args)))  # rules hold passwords
    try:
        session.node.acl.users.set_user(name, rules)
    except SetUserError as exc:
        raise CommandError(str(exc)) from None
    session.node.users_changed([])
    return OK


@command("deluser", -3, ADMIN, group="server", parent="acl", since="6.0.0", complexity="O(1)")
def acl_deluser(session: Session, args: list[bytes]) -> Any:
    """Deletes ACL users, and terminates their connections."""
    try:
        gone = session.node.acl.users.delete(args[2:])
    except SetUserError as exc:
        raise CommandError(str(exc)) from None
    session.node.users_changed(gone, session)
    return len(gone)


@command("getuser", 3, ADMIN, group="server", parent="acl", since="6.0.0", complexity="O(N)")
def acl_getuser(session: Session, args: list[bytes]) -> Any:
    """Lists the ACL rules of a user."""
    user = session.node.acl.users.get(args[2])
    if user is None:
        return None
    return {
        b"flags": ListSet([f.encode() for f in user.flags()]),
        b"passwords": [p.encode() for p in user.passwords],
        b"commands": user.describe_commands().encode(),
        b"keys": user.describe_keys().encode("utf-8", "surrogateescape"),
        b"channels": user.describe_channels().encode("utf-8", "surrogateescape"),
        b"selectors": [],
    }


@command("list", 2, ADMIN, group="server", parent="acl", since="6.0.0", complexity="O(N)")
def acl_list(session: Session, args: list[bytes]) -> Any:
    """Dumps the effective rules in ACL file format."""
    users = session.node.acl.users
    return [
        f"user {name} {users.by_name[name].describe()}".encode("utf-8", "surrogateescape")
        for name in users.names()
    ]


@command("users", 2, ADMIN, group="server", parent="acl", since="6.0.0", complexity="O(N)")
def acl_users(session: Session, args: list[bytes]) -> Any:
    """Lists all ACL users."""
    return [n.encode("utf-8", "surrogateescape") for n in session.node.acl.users.names()]


@command("whoami", 2, "noscript loading stale", group="server", parent="acl", since="6.0.0")
def acl_whoami(session: Session, args: list[bytes]) -> Any:
    """Returns the authenticated username of the current connection."""
    return session.user.name.encode("utf-8", "surrogateescape")


@command("cat", -2, "noscript loading stale", group="server", parent="acl", since="6.0.0")
def acl_cat(session: Session, args: list[bytes]) -> Any:
    """Lists the ACL categories, or the commands inside a category."""
    if len(args) > 3:
        raise wrong_arity("acl|cat")
    if len(args) == 2:
        return [c.encode() for c in CATEGORIES]
    name = args[2].decode("utf-8", "replace").lower()
    if name not in CATEGORIES:
        raise CommandError(f"Unknown category '{args[2][:128].decode('utf-8', 'replace')}'")
    return [e.name.encode() for e in catalogue.in_category(name)]


@command("genpass", -2, "noscript loading stale", group="server", parent="acl", since="6.0.0")
def acl_genpass(session: Session, args: list[bytes]) -> Any:
    """Generates a pseudorandom, secure password that can be used to identify ACL users."""
    if len(args) > 3:
        raise wrong_arity("acl|genpass")
    bits = parse_int(args[2]) if len(args) == 3 else 256
    if not 0 < bits <= GENPASS_MAX_BITS:
        raise CommandError(
            "ACL GENPASS argument must be the number of bits for the output password, "
            f"a positive number up to {GENPASS_MAX_BITS}"
        )
    chars = (bits + 3) // 4
    return secrets.token_hex((chars + 1) // 2)[:chars].encode()


@command("log", -2, ADMIN, group="server", parent="acl", since="6.0.0", complexity="O(N)")
def acl_log(session: Session, args: list[bytes]) -> Any:
    """Lists recent security events generated due to ACL rules."""
    if len(args) > 3:
        raise wrong_arity("acl|log")
    log = session.node.acl.log
    count = 10
    if len(args) == 3:
        if args[2].lower() == b"reset":
            log.reset()
            return OK
        count = max(parse_int(args[2]), 0)
    return log.reply(count)


@command("save", 2, ADMIN, group="server", parent="acl", since="6.0.0", complexity="O(N)")
def acl_save(session: Session, args: list[bytes]) -> Any:
    """Saves the effective ACL rules in the configured ACL file."""
    acl = session.node.acl
    if not acl.aclfile:
        raise CommandError(NO_ACL_FILE)
    try:
        save_acl_file(acl.aclfile, acl.users)
    except OSError as exc:
        logger.warning("event=acl_save_failed file=%r error=%r", acl.aclfile, str(exc))
        raise CommandError(
            "There was an error trying to save the ACLs. Please check the server logs for "
            "more information"
        ) from None
    return OK


@command("load", 2, ADMIN, group="server", parent="acl", since="6.0.0", complexity="O(N)")
def acl_load(session: Session, args: list[bytes]) -> Any:
    """Reloads the rules from the configured ACL file; all or nothing. The connections
    of every user but default close, as in Redis."""
    acl = session.node.acl
    if not acl.aclfile:
        raise CommandError(NO_ACL_FILE)
    try:
        users = load_acl_file(acl.aclfile)
    except AclFileError as exc:
        raise CommandError(str(exc)) from None
    session.node.users_changed(acl.users.replace_all(users), session)
    return OK


@command("dryrun", -4, ADMIN, group="server", parent="acl", since="7.0.0", complexity="O(1)")
def acl_dryrun(session: Session, args: list[bytes]) -> Any:
    """Simulates the execution of a command by a user, without executing the command."""
    user = session.node.acl.users.get(args[2])
    if user is None:
        raise CommandError(f"User '{args[2].decode('utf-8', 'replace')}' not found")
    argv = args[3:]
    cmd = _lookup(argv)
    if cmd is None:
        raise CommandError(f"Command '{argv[0].decode('utf-8', 'replace')}' not found")
    if not cmd.check_arity(len(argv)):
        raise CommandError(f"wrong number of arguments for '{cmd.name}' command")
    assert cmd.acl is not None
    denied = check(user, cmd.acl, argv, cmd.keys_of(argv))
    if denied is not None:
        return denied.dryrun_text(user, cmd.acl, argv)
    return OK


def _lookup(argv: list[bytes]) -> Command | None:
    """The command argv runs, its subcommand resolved, as Redis's lookupCommand."""
    cmd = COMMANDS.get(argv[0].lower())
    if cmd is None or not cmd.subcommands or len(argv) < 2:
        return cmd
    return cmd.subcommands.get(argv[1].lower().decode("utf-8", "replace"))


@command("help", 2, "loading stale", group="server", parent="acl", since="6.0.0")
def acl_help(session: Session, args: list[bytes]) -> Any:
    """Returns helpful text about the different subcommands."""
    return help_reply([
        "ACL <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
        "CAT [<category>]",
        "    List all commands that belong to <category>, or all command categories",
        "    when no category is specified.",
        "DELUSER <username> [<username> ...]",
        "    Delete a list of users.",
        "DRYRUN <username> <command> [<arg> ...]",
        "    Returns whether the user can execute the given command without executing the command.",
        "GETUSER <username>",
        "    Get the user's details.",
        "GENPASS [<bits>]",
        "    Generate a secure 256-bit user password. The optional `bits` argument can",
        "    be used to specify a different size.",
        "LIST",
        "    Show users details in config file format.",
        "LOAD",
        "    Reload users from the ACL file.",
        "LOG [<count> | RESET]",
        "    Show the ACL log entries.",
        "SAVE",
        "    Save the current config to the ACL file.",
        "SETUSER <username> <attribute> [<attribute> ...]",
        "    Create or modify a user with the specified attributes.",
        "USERS",
        "    List all the registered usernames.",
        "WHOAMI",
        "    Return the current connection username.",
        "HELP",
        "    Print this help.",
    ])
