"""The node's users (`Users`): the default user, SETUSER's all-or-nothing change,
DELUSER, log-in, and what `requirepass` does to the default user.

As in Redis: the default user always exists and cannot be deleted; every new
connection starts as it, logged in if it is on and `nopass`; `requirepass` sets its
one password (empty: `nopass`); a user name holds no spaces or NUL bytes. Callers
close the connections of users deleted or replaced (narad/commands/acl.py): this
module owns no sessions.
"""

from __future__ import annotations

from collections.abc import Iterable

from narad.acl.user import RuleError, User, default_user, has_spaces


class SetUserError(Exception):
    """ACL SETUSER refused; `str()` is Redis's whole error text."""


def setuser_error(error: RuleError) -> SetUserError:
    shown = error.rule.decode("utf-8", "surrogateescape")
    return SetUserError(f"Error in ACL SETUSER modifier '{shown}': {error.reason}")


class Users:
    """Every user by name; `default` is always there and is always the same object."""

    def __init__(self) -> None:
        self.default = default_user()
        self.by_name: dict[str, User] = {"default": self.default}

    def get(self, name: bytes | str) -> User | None:
        if isinstance(name, bytes):
            name = name.decode("utf-8", "surrogateescape")
        return self.by_name.get(name)

    def names(self) -> list[str]:
        """Sorted as Redis's radix tree lists them: by bytes."""
        return sorted(self.by_name, key=lambda n: n.encode("utf-8", "surrogateescape"))

    def authenticate(self, name: bytes, password: bytes) -> User | None:
        """The user these credentials log in as, or None (unknown, off, or a wrong
        password)."""
        user = self.get(name)
        if user is None or not user.enabled or not user.check_password(password):
            return None
        return user

    def set_user(self, name: bytes, rules: Iterable[bytes]) -> User:
        """ACL SETUSER: create `name` if new, then apply `rules` all or none; the
        user. Raises SetUserError."""
        if has_spaces(name):
            raise SetUserError("Usernames can't contain spaces or null characters")
        text = name.decode("utf-8", "surrogateescape")
        existing = self.by_name.get(text)
        staged = existing.copy() if existing is not None else User(text)
        try:
            for rule in rules:
                staged.apply(rule)
        except RuleError as exc:
            raise setuser_error(exc) from None
        if existing is None:
            self.by_name[text] = staged
            return staged
        existing.replace_with(staged)
        return existing

    def delete(self, names: list[bytes]) -> list[User]:
        """ACL DELUSER: the users deleted (unknown names are skipped). Raises
        SetUserError, deleting none, if `default` is among them."""
        if any(n == b"default" for n in names):
            raise SetUserError("The 'default' user cannot be removed")
        gone = []
        for name in names:
            user = self.by_name.pop(name.decode("utf-8", "surrogateescape"), None)
            if user is not None:
                gone.append(user)
        return gone

    def replace_all(self, users: dict[str, User]) -> list[User]:
        """ACL LOAD and start: these users in place of all; the default user object
        stays and takes the rules of the new `default` (or the built-in ones if
        none). Returns the users replaced, whose connections must close."""
        new_default = users.pop("default", None) or default_user()
        self.default.replace_with(new_default)
        old = [u for n, u in self.by_name.items() if n != "default"]
        self.by_name = {"default": self.default, **users}
        return old

    def set_requirepass(self, password: str) -> None:
        """`requirepass`: the default user's only password (empty: nopass)."""
        self.default.apply(b"resetpass")
        if password:
            self.default.apply(b">" + password.encode("utf-8", "surrogateescape"))
        else:
            self.default.apply(b"nopass")

    def default_logs_in(self) -> bool:
        """Whether a new connection is logged in as the default user without AUTH."""
        return self.default.enabled and self.default.nopass
