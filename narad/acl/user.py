"""An ACL user: whether it is on, its passwords (SHA-256, hex), what commands it may
run, which keys it may read or write and which channels it may use; the rules of
ACL SETUSER that change it, and the description ACL LIST and ACL GETUSER show.

Rules and descriptions follow Redis 7.2's acl.c (the one Narad's error texts follow
too): a rule is applied to a staged copy and every rule of one SETUSER must pass
before any applies (`Users.set_user`); the command rules are kept in the order given,
a later rule for the same command or category replacing an earlier one, so that the
description replays to the same permissions. Selectors, `(...)`, are not supported.

Invariant: `unrestricted` is true exactly when the user may run every command on
every key and channel (`+@all ~* &*`, or `allcommands allkeys allchannels`): then
the dispatcher skips the permission check (narad/dispatch.py).
"""

from __future__ import annotations

import hashlib
import hmac

from narad import glob
from narad.acl import catalogue
from narad.acl.catalogue import CATEGORIES, Entry

READ = 1
WRITE = 2
ALL = READ | WRITE

HASH_HEX_LEN = 64


class RuleError(Exception):
    """A rule refused; the text is Redis's (ACLSetUserStringError)."""

    def __init__(self, rule: bytes, reason: str) -> None:
        super().__init__(reason)
        self.rule = rule
        self.reason = reason


SYNTAX = "Syntax error"
UNKNOWN = "Unknown command or category name in ACL"
AFTER_ALLKEYS = (
    "Adding a pattern after the * pattern (or the 'allkeys' flag) is not valid and does "
    "not have any effect. Try 'resetkeys' to start with an empty list of patterns"
)
AFTER_ALLCHANNELS = (
    "Adding a pattern after the * pattern (or the 'allchannels' flag) is not valid and "
    "does not have any effect. Try 'resetchannels' to start with an empty list of channels"
)
NO_SUCH_PASSWORD = "The password you are trying to remove from the user does not exist"
BAD_HASH = (
    "The password hash must be exactly 64 characters and contain only lowercase "
    "hexadecimal characters"
)
FIRSTARG_OF_SUB = "Allowing first-arg of a subcommand is not supported"


def hash_password(password: bytes) -> str:
    return hashlib.sha256(password).hexdigest()


def _valid_hash(text: bytes) -> bool:
    return len(text) == HASH_HEX_LEN and all(c in b"0123456789abcdef" for c in text)


def has_spaces(text: bytes) -> bool:
    return any(c in b" \t\r\n\0" for c in text)


class User:
    """One user (module doc). Sessions hold the object itself: a change made by
    SETUSER is copied into it (`replace_with`), so they see it at once."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.enabled = False
        self.nopass = False
        self.sanitize = "sanitize-payload"  # or "skip-sanitize-payload"
        self.passwords: list[str] = []  # SHA-256 hex digests, in the order added
        # Commands: `future` is +@all's "and any command added later" (only +@all
        # and -@all change it); `allcommands` that no command was taken away since.
        self.future = False
        self.allcommands = False
        self.allowed: set[str] = set()  # full names of commands allowed
        self.firstargs: dict[str, list[bytes]] = {}  # command -> first args allowed
        self.command_rules: list[str] = []  # "+name", "-@cat", in order, lower case
        self.allkeys = False
        self.patterns: list[tuple[bytes, int]] = []  # (glob, READ|WRITE), in order
        self.allchannels = False
        self.channels: list[bytes] = []
        self.unrestricted = False

    # -- checks -------------------------------------------------------------------------

    def check_password(self, password: bytes) -> bool:
        """Whether `password` logs this user in (the user must also be on)."""
        if self.nopass:
            return True
        given = hash_password(password)
        ok = False
        for stored in self.passwords:  # every one compared: no early exit
            ok |= hmac.compare_digest(given, stored)
        return ok

    def can_run(self, entry: Entry, first_arg: bytes | None = None) -> bool:
        """Whether the user may run the command `entry` (a subcommand's own entry),
        with `first_arg` its first argument for +cmd|arg rules."""
        if self.allcommands or entry.no_auth or entry.name in self.allowed:
            return True
        allowed = self.firstargs.get(entry.name)
        return allowed is not None and first_arg is not None and first_arg.lower() in allowed

    def allows_command(self, name: str) -> bool:
        """Whether the user may run the command `name` ("config|get"), whatever its
        arguments; False for a command Narad does not have."""
        entry = catalogue.lookup(name)
        return entry is not None and self.can_run(entry)

    def allows_category(self, category: str) -> bool:
        """Whether the user may run every command of `category` ("replication" or
        "@replication"): what another part asks before trusting a connection with a
        role (a replica link counting toward the quorum asks it of @replication)."""
        entries = catalogue.in_category(category.lstrip("@").lower())
        return bool(entries) and all(self.can_run(e) for e in entries)

    def may_access(self, key: bytes, access: int) -> bool:
        """Whether a pattern grants `access` (READ, WRITE, both, or 0: any pattern
        that matches) on `key`."""
        if self.allkeys:
            return True
        for pattern, flags in self.patterns:
            if flags & access == access and glob.match(pattern, key):
                return True
        return False

    def may_access_all(self, access: int) -> bool:
        """Whether `access` is granted on every key (allkeys, or a `*` pattern)."""
        return self.allkeys or any(
            p == b"*" and flags & access == access for p, flags in self.patterns
        )

    def may_use_channel(self, channel: bytes) -> bool:
        return self.allchannels or any(glob.match(p, channel) for p in self.channels)

    # -- rules --------------------------------------------------------------------------

    def apply(self, rule: bytes) -> None:
        """Apply one rule, or raise RuleError having changed nothing."""
        if not rule:
            return
        word = rule.lower()
        if word == b"on":
            self.enabled = True
        elif word == b"off":
            self.enabled = False
        elif word in (b"sanitize-payload", b"skip-sanitize-payload"):
            self.sanitize = word.decode()
        elif word == b"nopass":
            self.nopass = True
            self.passwords.clear()
        elif word == b"resetpass":
            self.nopass = False
            self.passwords.clear()
        elif rule[:1] in (b">", b"#"):
            digest = self._digest(rule)
            if digest not in self.passwords:
                self.passwords.append(digest)
            self.nopass = False
        elif rule[:1] in (b"<", b"!"):
            digest = self._digest(rule)
            if digest not in self.passwords:
                raise RuleError(rule, NO_SUCH_PASSWORD)
            self.passwords.remove(digest)
        elif word == b"reset":
            for step in (b"resetpass", b"resetkeys", b"resetchannels", b"off",
                         b"sanitize-payload", b"-@all"):
                self.apply(step)
        elif rule[:1] == b"(" or word == b"clearselectors":
            raise RuleError(rule, SYNTAX)  # selectors: not supported
        else:
            self._apply_selector_rule(rule, word)
        self._settle()

    def _digest(self, rule: bytes) -> str:
        if rule[:1] in (b">", b"<"):
            return hash_password(rule[1:])
        if not _valid_hash(rule[1:]):
            raise RuleError(rule, BAD_HASH)
        return rule[1:].decode()

    def _apply_selector_rule(self, rule: bytes, word: bytes) -> None:
        if word in (b"allkeys", b"~*"):
            self.allkeys = True
            self.patterns.clear()
        elif word == b"resetkeys":
            self.allkeys = False
            self.patterns.clear()
        elif word in (b"allchannels", b"&*"):
            self.allchannels = True
            self.channels.clear()
        elif word == b"resetchannels":
            self.allchannels = False
            self.channels.clear()
        elif word in (b"allcommands", b"+@all"):
            self.future = self.allcommands = True
            self.allowed = {e.name for e in catalogue.ENTRIES.values()}
            self.firstargs.clear()
            self.command_rules.clear()
        elif word in (b"nocommands", b"-@all"):
            self.future = self.allcommands = False
            self.allowed = set()
            self.firstargs.clear()
            self.command_rules.clear()
        elif rule[:1] in (b"~", b"%"):
            self._add_pattern(rule)
        elif rule[:1] == b"&":
            if self.allchannels:
                raise RuleError(rule, AFTER_ALLCHANNELS)
            if has_spaces(rule[1:]):
                raise RuleError(rule, SYNTAX)
            if rule[1:] not in self.channels:
                self.channels.append(rule[1:])
        elif rule[:2] in (b"+@", b"-@"):
            self._category(rule, rule[:1] == b"+")
        elif rule[:1] == b"+":
            self._allow(rule)
        elif rule[:1] == b"-":
            entry = catalogue.lookup(rule[1:].decode("utf-8", "replace"))
            if entry is None:
                raise RuleError(rule, UNKNOWN)
            self._change(entry, False)
            self._note_rule(entry.name, False)
        else:
            raise RuleError(rule, SYNTAX)

    def _add_pattern(self, rule: bytes) -> None:
        if self.allkeys:
            raise RuleError(rule, AFTER_ALLKEYS)
        flags, offset = ALL, 1
        if rule[:1] == b"%":
            flags = 0
            for offset in range(1, len(rule) + 1):
                ch = rule[offset : offset + 1].upper()
                if ch == b"R" and not flags & READ:
                    flags |= READ
                elif ch == b"W" and not flags & WRITE:
                    flags |= WRITE
                elif ch == b"~":
                    offset += 1
                    break
                else:
                    raise RuleError(rule, SYNTAX)
            else:
                raise RuleError(rule, SYNTAX)
        pattern = rule[offset:]
        if has_spaces(pattern):
            raise RuleError(rule, SYNTAX)
        for i, (existing, had) in enumerate(self.patterns):
            if existing == pattern:
                self.patterns[i] = (pattern, had | flags)
                return
        self.patterns.append((pattern, flags))

    def _category(self, rule: bytes, allow: bool) -> None:
        name = rule[2:].decode("utf-8", "replace").lower()
        if name not in CATEGORIES:
            raise RuleError(rule, UNKNOWN)
        for entry in catalogue.in_category(name):
            self._change(entry, allow)
        self._note_rule("@" + name, allow)

    def _allow(self, rule: bytes) -> None:
        text = rule[1:].decode("utf-8", "replace")
        if "|" not in text:
            entry = catalogue.lookup(text)
            if entry is None:
                raise RuleError(rule, UNKNOWN)
            self._change(entry, True)
            self._note_rule(entry.name, True)
            return
        head, _, sub = text.rpartition("|")
        parent = catalogue.lookup(head)
        if parent is None:
            raise RuleError(rule, UNKNOWN)
        if parent.parent is not None:
            raise RuleError(rule, FIRSTARG_OF_SUB)
        if not sub:
            raise RuleError(rule, SYNTAX)
        if parent.subcommands:
            entry = catalogue.lookup(text)
            if entry is None:
                raise RuleError(rule, UNKNOWN)
            self._change(entry, True)
        else:  # +select|0: a first argument of an otherwise refused command
            allowed = self.firstargs.setdefault(parent.name, [])
            if sub.lower().encode() not in allowed:
                allowed.append(rule[1:].rpartition(b"|")[2].lower())
        self._note_rule(text.lower(), True)

    def _change(self, entry: Entry, allow: bool) -> None:
        """Allow or refuse a command and, for a container, all its subcommands."""
        for one in (entry, *entry.subcommands.values()):
            if allow:
                self.allowed.add(one.name)
            else:
                self.allowed.discard(one.name)
                self.allcommands = False
            self.firstargs.pop(one.name, None)

    def _note_rule(self, name: str, allow: bool) -> None:
        """Keep `name`'s rule last: drop earlier rules for it (and for its
        subcommands, if it is a whole command)."""
        self.command_rules = [
            r for r in self.command_rules if r[1:] != name and not r[1:].startswith(name + "|")
        ]
        self.command_rules.append(("+" if allow else "-") + name)

    def _settle(self) -> None:
        self.unrestricted = self.allcommands and self.allkeys and self.allchannels

    # -- copies and descriptions ------------------------------------------------------

    def copy(self, name: str | None = None) -> User:
        other = User(self.name if name is None else name)
        other.replace_with(self)
        return other

    def replace_with(self, other: User) -> None:
        """Take `other`'s rules (not its name)."""
        self.enabled, self.nopass, self.sanitize = other.enabled, other.nopass, other.sanitize
        self.passwords = list(other.passwords)
        self.future, self.allcommands = other.future, other.allcommands
        self.allowed = set(other.allowed)
        self.firstargs = {k: list(v) for k, v in other.firstargs.items()}
        self.command_rules = list(other.command_rules)
        self.allkeys, self.patterns = other.allkeys, list(other.patterns)
        self.allchannels, self.channels = other.allchannels, list(other.channels)
        self._settle()

    def flags(self) -> list[str]:
        return [
            "on" if self.enabled else "off",
            *(["nopass"] if self.nopass else []),
            self.sanitize,
        ]

    def describe_commands(self) -> str:
        return " ".join(["+@all" if self.future else "-@all", *self.command_rules])

    def describe_keys(self) -> str:
        if self.allkeys:
            return "~*"
        return " ".join(_pattern_text(p, f) for p, f in self.patterns)

    def describe_channels(self) -> str:
        if self.allchannels:
            return "&*"
        return " ".join("&" + c.decode("utf-8", "surrogateescape") for c in self.channels)

    def describe(self) -> str:
        """The rules that make this user, as ACL LIST shows them after its name:
        `on nopass sanitize-payload ~* &* +@all`."""
        parts = self.flags() + ["#" + h for h in self.passwords]
        if self.allkeys:
            parts.append("~*")
        else:
            parts += [_pattern_text(p, f) for p, f in self.patterns]
        if self.allchannels:
            parts.append("&*")
        else:
            parts.append("resetchannels")
            parts += ["&" + c.decode("utf-8", "surrogateescape") for c in self.channels]
        parts.append(self.describe_commands())
        return " ".join(parts)


def _pattern_text(pattern: bytes, flags: int) -> str:
    prefix = {ALL: "~", READ: "%R~", WRITE: "%W~"}[flags]
    return prefix + pattern.decode("utf-8", "surrogateescape")


def default_user() -> User:
    """The default user as Redis makes it: `on nopass ~* &* +@all`."""
    user = User("default")
    for rule in (b"+@all", b"~*", b"&*", b"on", b"nopass"):
        user.apply(rule)
    return user
