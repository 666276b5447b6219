"""Users from text: the ACL file (ACL LOAD, ACL SAVE, `aclfile` at start) and the
`user` lines of narad.conf, with Redis's rules and error texts.

An ACL file holds one `user <name> <rule> ...` line per user, words split at single
spaces (no quoting, no comments: Redis reads it so); a file with any error changes
nothing, and the errors are reported together. `user` lines of narad.conf are read
with the config file's quoting (narad/config/), and the first bad rule stops the
start. ACL SAVE writes every user's description, sorted by name, in place of the old
file atomically (narad/config/rewrite.py's replace_file).
"""

from __future__ import annotations

from pathlib import Path

from narad.acl.user import RuleError, User, has_spaces
from narad.acl.users import Users
from narad.config.rewrite import replace_file

ACL_ERRORS_TAIL = (
    "WARNING: ACL errors detected, no change to the previously active ACL rules was performed"
)
DUPLICATE_USER = "Duplicate user found. A user can only be defined once in config files"


class AclFileError(Exception):
    """The file could not be used; `str()` is the whole error text (Redis's)."""


def parse_acl_text(text: bytes, shown: str) -> dict[str, User]:
    """The users of an ACL file's text; `shown` is its name in error texts. Raises
    AclFileError listing every error."""
    users: dict[str, User] = {}
    errors: list[str] = []
    for number, raw in enumerate(text.split(b"\n"), 1):
        line = raw.strip(b" \t\r\n")
        if not line:
            continue
        words = line.split(b" ")
        if words[0] != b"user" or len(words) < 2:
            errors.append(
                f"{shown}:{number} should start with user keyword followed by the username. "
            )
            continue
        name = words[1].decode("utf-8", "surrogateescape")
        if has_spaces(words[1]):
            errors.append(f"'{shown}:{number}: username '{name}' contains invalid characters. ")
            continue
        if name in users:
            errors.append(f"WARNING: Duplicate user '{name}' found on line {number}. ")
            continue
        user = users[name] = User(name)
        failed = False
        for word in words[2:]:
            rule = word.strip(b"\t\r\n")
            try:
                user.apply(rule)
            except RuleError as exc:
                shown_rule = rule.decode("utf-8", "surrogateescape")
                if exc.reason.startswith("Unknown command"):
                    errors.append(
                        f"{shown}:{number}: Error in applying operation '{shown_rule}': "
                        f"{exc.reason}. "
                    )
                elif not failed:
                    errors.append(f"{shown}:{number}: {exc.reason}. ")
                    failed = True
    if errors:
        raise AclFileError("".join(errors) + ACL_ERRORS_TAIL)
    return users


def load_acl_file(path: str) -> dict[str, User]:
    """The users of the ACL file at `path` (see parse_acl_text)."""
    try:
        text = Path(path).read_bytes()
    except OSError as exc:
        raise AclFileError(
            f"Error loading ACLs, opening file '{path}': {exc.strerror or exc}"
        ) from None
    return parse_acl_text(text, path)


def acl_text(users: Users) -> str:
    """What ACL SAVE writes: one `user` line per user, sorted by name."""
    lines = []
    for name in users.names():
        user = users.by_name[name]
        lines.append(f"user {name} {user.describe()}\n")
    return "".join(lines)


def save_acl_file(path: str, users: Users) -> None:
    """ACL SAVE. Raises OSError."""
    replace_file(Path(path).absolute(), acl_text(users))


def parse_user_lines(lines: list[list[str]]) -> dict[str, User]:
    """The users of narad.conf's `user` lines (each its words after `user`); a
    `default` line resets the default user first, as Redis does. Raises AclFileError
    with Redis's text for a bad line."""
    users: dict[str, User] = {}
    for words in lines:
        name = words[0]
        raw = name.encode("utf-8", "surrogateescape")
        if has_spaces(raw):
            raise AclFileError("Spaces not allowed in ACL usernames")
        if name in users:
            raise AclFileError(f"Error in user declaration '{name}': {DUPLICATE_USER}")
        user = users[name] = User(name)
        for word in words[1:]:
            rule = word.encode("utf-8", "surrogateescape")
            try:
                user.apply(rule)
            except RuleError as exc:
                raise AclFileError(
                    f"Error loading ACL rule '{word}' for the user named '{name}': {exc.reason}"
                ) from None
    return users
