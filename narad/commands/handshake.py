"""A connection's handshake, as the data node and the sentinel both answer it: AUTH's
and HELLO's arguments, the password check, and HELLO's reply (one parser, one
check, one reply for both; narad/commands/connection.py and
narad/sentinel/commands.py only say which password applies and what the node is).

Who may log in is the caller's `Login`: the data node's users (narad/acl/, through
narad/commands/connection.py), or the sentinel's one `requirepass` for the default
user (`RequirePass`): without one, the default user is `nopass` and any password
works; with one, only it does, compared in constant time.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol

from narad.commands.args import parse_int
from narad.errors import WRONGPASS, CommandError, syntax

REDIS_VERSION = "7.0.15"  # the Redis whose commands Narad answers as

HELLO_NOAUTH = CommandError(
    "HELLO must be called with the client already authenticated, otherwise the "
    "HELLO AUTH <user> <pass> option can be used to authenticate the "
    "client and select the RESP protocol version at the same time",
    "NOAUTH",
)
NO_PASSWORD_SET = CommandError(
    "AUTH <password> called without any password configured for the default user. "
    "Are you sure your configuration is correct?"
)


class Greeted(Protocol):
    """A connection's state as the handshake changes it (a data node's Session, a
    sentinel's Connection)."""

    id: int
    name: str
    protocol: int
    authenticated: bool


def validate_name(name: bytes) -> bytes:
    if any(ch <= 32 or ch > 126 for ch in name):
        raise CommandError("Client names cannot contain spaces, newlines or special characters.")
    return name


def redact(args: list[bytes], positions: Iterable[int]) -> None:
    """Passwords never reach the slow log (which records `args` after the call)."""
    for i in positions:
        args[i] = b"(redacted)"


class Login(Protocol):
    """Who may log in, as AUTH and HELLO AUTH ask it."""

    def default_has_password(self) -> bool:
        """Whether the default user needs a password (AUTH <password> is refused
        while it does not)."""

    def log_in(self, conn: Greeted, user: bytes, password: bytes, command: bytes) -> bool:
        """Log `conn` in as `user` if `password` is right and the user may log in;
        whether it did. `command` is the command's name as given (for a log)."""


class RequirePass:
    """One `requirepass` for the default user, the only user (the sentinel's)."""

    def __init__(self, required: str) -> None:
        self.required = required

    def default_has_password(self) -> bool:
        return bool(self.required)

    def log_in(self, conn: Greeted, user: bytes, password: bytes, command: bytes) -> bool:
        if user != b"default":
            return False
        import hmac  # with hashlib ~1.5 ms to load: at the first password, not at start

        if self.required and not hmac.compare_digest(password, self.required.encode()):
            return False
        conn.authenticated = True
        return True


def _login(login: Login | str) -> Login:
    return RequirePass(login) if isinstance(login, str) else login


def auth(conn: Greeted, args: list[bytes], login: Login | str) -> None:
    """AUTH [user] password: log `conn` in, or raise."""
    if len(args) > 3:
        raise syntax()
    login = _login(login)
    user, password = (b"default", args[1]) if len(args) == 2 else (args[1], args[2])
    command = args[0]
    redact(args, range(1, len(args)))
    if len(args) == 2 and not login.default_has_password():
        raise NO_PASSWORD_SET
    if not login.log_in(conn, user, password, command):
        raise WRONGPASS


def parse_hello(
    args: list[bytes], protocol: int
) -> tuple[int, tuple[bytes, bytes] | None, bytes | None]:
    """HELLO's arguments: the protocol asked for (else `protocol`), AUTH's user and
    password if given (redacted in `args`), SETNAME's name if given."""
    i = 1
    if len(args) > 1:
        try:
            protocol = parse_int(args[1])
        except CommandError:
            raise CommandError("Protocol version is not an integer or out of range") from None
        if protocol not in (2, 3):
            raise CommandError("unsupported protocol version", "NOPROTO")
        i = 2
    auth: tuple[bytes, bytes] | None = None
    name: bytes | None = None
    while i < len(args):
        opt = args[i].lower()
        if opt == b"auth" and i + 2 < len(args):
            auth = (args[i + 1], args[i + 2])
            redact(args, (i + 1, i + 2))
            i += 3
        elif opt == b"setname" and i + 1 < len(args):
            name = validate_name(args[i + 1])
            i += 2
        else:
            raise CommandError(f"Syntax error in HELLO option '{args[i].decode(errors='replace')}'")
    return protocol, auth, name


def hello(
    conn: Greeted, args: list[bytes], login: Login | str, mode: str, role: str
) -> dict[str, Any]:
    """HELLO [protover [AUTH user pass] [SETNAME name]]: switch `conn`'s protocol,
    log it in and name it as asked; the reply map (`mode` and `role` say what the
    node is)."""
    command = args[0]
    protocol, credentials, name = parse_hello(args, conn.protocol)
    if credentials is not None and not _login(login).log_in(conn, *credentials, command):
        raise WRONGPASS
    if not conn.authenticated:
        raise HELLO_NOAUTH
    if name is not None:
        conn.name = name.decode()
    conn.protocol = protocol
    return {
        "server": "redis",
        "version": REDIS_VERSION,
        "proto": protocol,
        "id": conn.id,
        "mode": mode,
        "role": role,
        "modules": [],
    }
