"""Users and permissions (ACL), Redis 6/7's, for the data node: `Acl` is the node's
users, its ACL log and the settings that shape them (`requirepass`, `aclfile`,
`user` lines of narad.conf, `acllog-max-len`). docs/security.md says what users see.

The package's modules, one job each:

- catalogue.py: the commands and categories rules are parsed against;
- user.py: one user, its rules and its description;
- users.py: the users of a node, SETUSER, DELUSER, log-in, requirepass;
- check.py: whether a user may run a command on its keys, and the refusal texts;
- log.py: the ACL log;
- files.py: the ACL file and narad.conf's `user` lines.
"""

from __future__ import annotations

from narad.acl.files import AclFileError, load_acl_file, parse_user_lines
from narad.acl.log import AclLog
from narad.acl.user import User, default_user
from narad.acl.users import Users
from narad.config import Config

__all__ = ["Acl", "AclFileError", "User"]

BOTH_SOURCES = (
    "Configuring Redis with users defined in redis.conf and at the same setting an ACL "
    "file path is invalid. This setup is very likely to lead to configuration errors and "
    "security holes, please define either an ACL file or declare users directly in your "
    "redis.conf, but not both."
)


class Acl:
    """The node's users and ACL log (module doc). Built with the node; `start` loads
    the users the configuration names, once the command table is filled."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.users = Users()
        self.log = AclLog(_int(config["acllog-max-len"]))
        self.aclfile = str(config["aclfile"])
        self.users.set_requirepass(str(config["requirepass"]))
        config.on_change("requirepass", self._set_requirepass)
        config.on_change("acllog-max-len", self._set_log_len)

    def _set_requirepass(self, value: object) -> None:
        self.users.set_requirepass(str(value))

    def _set_log_len(self, value: object) -> None:
        self.log.max_len = _int(value)
        self.log.trim()

    def start(self) -> None:
        """Load the `user` lines of narad.conf or the ACL file; both is an error, as
        in Redis. Raises AclFileError with the reason the node cannot start."""
        lines = self.config.user_lines
        if self.aclfile and lines:
            raise AclFileError(BOTH_SOURCES)
        if lines:
            loaded = parse_user_lines(lines)
            default = loaded.pop("default", None)
            if default is not None:
                self.users.default.replace_with(default)
            self.users.by_name.update(loaded)
        if self.aclfile:
            self.users.replace_all(load_acl_file(self.aclfile))

    def user_lines(self) -> list[str] | None:
        """What CONFIG REWRITE writes as `user` lines: every user, unless an ACL file
        holds them (then None: the file's `user` lines are dropped)."""
        if self.aclfile:
            return None
        as_set = default_user()
        as_set.name = "default"
        requirepass = str(self.config["requirepass"])
        if requirepass:
            as_set.apply(b"resetpass")
            as_set.apply(b">" + requirepass.encode("utf-8", "surrogateescape"))
        lines = []
        for name in self.users.names():
            description = self.users.by_name[name].describe()
            if name == "default" and description == as_set.describe():
                continue  # what requirepass alone makes: no line needed
            lines.append(f"user {name} {description}")
        return lines


def _int(value: object) -> int:
    assert isinstance(value, int)
    return value
