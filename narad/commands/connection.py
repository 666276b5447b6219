"""Connection commands: PING, ECHO, HELLO, AUTH, QUIT, RESET and CLIENT ..."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from narad.commands import handshake
from narad.commands.args import parse_int
from narad.commands.handshake import validate_name
from narad.commands.table import command, container, help_reply
from narad.errors import CommandError, syntax, unknown_subcommand
from narad.resp import SimpleString, Verbatim

if TYPE_CHECKING:
    from narad.node import Session

OK = SimpleString("OK")


@command("ping", -1, "fast", group="connection")
def ping(session: Session, args: list[bytes]) -> Any:
    """Returns the server's liveliness response."""
    if len(args) > 2:
        raise CommandError("wrong number of arguments for 'ping' command")
    if session.push_handler is not None and session.protocol == 2:
        return [b"pong", args[1] if len(args) == 2 else b""]
    return args[1] if len(args) == 2 else SimpleString("PONG")


@command("echo", 2, "fast loading stale", group="connection")
def echo(session: Session, args: list[bytes]) -> Any:
    """Returns the given string."""
    return args[1]


@command(
    "auth", -2, "noauth noscript loading stale fast no_auth allow_busy", group="connection"
)
def auth(session: Session, args: list[bytes]) -> Any:
    """Authenticates the connection."""
    handshake.auth(session, args, NodeLogin(session))
    return OK


class NodeLogin:
    """Log-in against the node's users (narad/acl/); a refusal is an ACL LOG entry."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.users = session.node.acl.users

    def default_has_password(self) -> bool:
        return not self.users.default.nopass

    def log_in(self, conn: object, user: bytes, password: bytes, command: bytes) -> bool:
        session = self.session
        found = self.users.authenticate(user, password)
        if found is None:
            in_multi = session.in_exec or session.multi is not None
            session.node.acl.log.add(
                "auth", "multi" if in_multi else "toplevel", command, user, session.client_info()
            )
            return False
        session.log_in(found)
        return True


@command(
    "hello", -1, "noauth noscript loading stale fast no_auth allow_busy", group="connection",
    since="6.0.0",
)
def hello(session: Session, args: list[bytes]) -> Any:
    """Handshakes with the Redis server."""
    node = session.node
    role = "replica" if node.replication.is_replica else "master"
    return handshake.hello(session, args, NodeLogin(session), "standalone", role)


@command(
    "quit", -1, "noauth noscript loading stale fast no_auth allow_busy", group="connection"
)
def quit_(session: Session, args: list[bytes]) -> Any:
    """Closes the connection."""
    session.close_after_reply()
    return OK


@command(
    "reset", 1, "noauth noscript loading stale fast no_auth allow_busy", group="connection",
    since="6.2.0",
)
def reset(session: Session, args: list[bytes]) -> Any:
    """Resets the connection."""
    session.reset()
    return SimpleString("RESET")


# -- CLIENT -------------------------------------------------------------------------------

container("client", "connection", "A container for client connection commands.", "2.4.0")


@command("id", 2, "noscript loading stale", group="connection", parent="client", since="5.0.0")
def client_id(session: Session, args: list[bytes]) -> Any:
    """Returns the unique client ID of the connection."""
    return session.id


@command("setname", 3, "noscript loading stale", group="connection", parent="client", since="2.6.9")
def client_setname(session: Session, args: list[bytes]) -> Any:
    """Sets the connection name."""
    session.name = validate_name(args[2]).decode()
    return OK


@command("getname", 2, "noscript loading stale", group="connection", parent="client", since="2.6.9")
def client_getname(session: Session, args: list[bytes]) -> Any:
    """Returns the name of the connection."""
    return session.name.encode() if session.name else None


@command("setinfo", 4, "noscript loading stale", group="connection", parent="client", since="7.2.0")
def client_setinfo(session: Session, args: list[bytes]) -> Any:
    """Sets information specific to the client or connection."""
    attr, value = args[2].lower(), args[3]
    if any(ch < 33 or ch > 126 for ch in value):
        raise CommandError(
            f"{attr.decode().upper()} cannot contain spaces, newlines or special characters."
        )
    if attr == b"lib-name":
        session.lib_name = value.decode()
    elif attr == b"lib-ver":
        session.lib_ver = value.decode()
    else:
        raise CommandError(f"Unrecognized option '{args[2].decode(errors='replace')}'")
    return OK


def client_line(c: Session, current: str | None = None) -> str:
    """One CLIENT LIST line; `current` names the command the caller is running."""
    return c.client_info(current)


@command(
    "list", -2, "admin noscript loading stale", group="connection", parent="client", since="2.4.0"
)
def client_list(session: Session, args: list[bytes]) -> Any:
    """Lists open connections."""
    clients = sorted(session.node.sessions.values(), key=lambda c: c.id)
    if len(args) >= 4 and args[2].lower() == b"id":
        wanted = {parse_int(a, "Invalid client ID") for a in args[3:]}
        clients = [c for c in clients if c.id in wanted]
    elif len(args) == 4 and args[2].lower() == b"type":
        if args[3].lower() not in (b"normal", b"master", b"replica", b"pubsub"):
            raise CommandError(f"Unknown client type '{args[3].decode(errors='replace')}'")
        clients = clients if args[3].lower() == b"normal" else []
    elif len(args) != 2:
        raise syntax()
    return Verbatim(
        "".join(client_line(c, "client|list" if c is session else None) + "\n" for c in clients)
    )


@command("info", 2, "noscript loading stale", group="connection", parent="client", since="6.2.0")
def client_info(session: Session, args: list[bytes]) -> Any:
    """Returns information about the connection."""
    return Verbatim(client_line(session, "client|info") + "\n")


@command(
    "kill", -3, "admin noscript loading stale", group="connection", parent="client", since="2.4.0",
)
def client_kill(session: Session, args: list[bytes]) -> Any:
    """Terminates open connections."""
    node = session.node
    if len(args) == 3:  # the old form: CLIENT KILL addr:port
        target = args[2].decode(errors="replace")
        for other in node.sessions.values():
            if other.addr == target:
                other.close_after_reply() if other is session else other.close()
                return OK
        raise CommandError("No such client")
    filters: list[tuple[bytes, bytes]] = []
    if len(args) % 2:
        raise syntax()
    for i in range(2, len(args), 2):
        filters.append((args[i].lower(), args[i + 1]))
    skipme = True
    victims = []
    for other in node.sessions.values():
        keep = False
        for name, value in filters:
            if name == b"id":
                wanted = parse_int(value, "client-id should be greater than 0")
                if wanted <= 0:
                    raise CommandError("client-id should be greater than 0")
                keep |= other.id != wanted
            elif name == b"addr":
                keep |= other.addr != value.decode(errors="replace")
            elif name == b"laddr":
                keep |= other.connection.laddr != value.decode(errors="replace")
            elif name == b"user":
                wanted_user = node.acl.users.get(value)
                if wanted_user is None:
                    raise CommandError(f"No such user '{value.decode(errors='replace')}'")
                keep |= other.user is not wanted_user
            elif name == b"skipme":
                if value.lower() not in (b"yes", b"no"):
                    raise syntax()
                skipme = value.lower() == b"yes"
            elif name == b"type":
                keep |= value.lower() != b"normal"
            elif name == b"maxage":
                keep |= time.time() - other.connection.created_s < parse_int(value)
            else:
                raise syntax()
        if not keep:
            victims.append(other)
    killed = 0
    for other in victims:
        if other is session and skipme:
            continue
        killed += 1
        other.close_after_reply() if other is session else other.close()
    return killed


@command("reply", 3, "noscript loading stale", group="connection", parent="client", since="3.2.0")
def client_reply(session: Session, args: list[bytes]) -> Any:
    """Instructs the server whether to reply to commands."""
    from narad.node import NO_REPLY

    mode = args[2].lower()
    if mode == b"on":
        session.reply_off = False
        return OK
    if mode == b"off":
        session.reply_off = True
        return NO_REPLY
    if mode == b"skip":
        session.skip_next = not session.reply_off
        return NO_REPLY
    raise syntax()


@command(
    "no-evict",
    3,
    "admin noscript loading stale",
    group="connection",
    parent="client",
    since="7.0.0",
)
def client_no_evict(session: Session, args: list[bytes]) -> Any:
    """Sets the client eviction mode of the connection."""
    if args[2].lower() not in (b"on", b"off"):
        raise syntax()
    return OK


@command(
    "no-touch", 3, "noscript loading stale", group="connection", parent="client", since="7.2.0"
)
def client_no_touch(session: Session, args: list[bytes]) -> Any:
    """Controls whether commands sent by the client affect the LRU/LFU of accessed keys."""
    if args[2].lower() not in (b"on", b"off"):
        raise syntax()
    return OK


@command("help", 2, "loading stale", group="connection", parent="client", since="5.0.0")
def client_help(session: Session, args: list[bytes]) -> Any:
    """Returns helpful text about the different subcommands."""
    return help_reply([
        "CLIENT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
        "ID",
        "    Return the ID of the current connection.",
        "INFO",
        "    Return information about the current client connection.",
        "KILL <ip:port> | <option> <value> [<option> <value> ...]",
        "    Kill connections: ID, ADDR, LADDR, USER, SKIPME, TYPE, MAXAGE.",
        "LIST [TYPE <type>] [ID <id> [<id> ...]]",
        "    Return information about client connections.",
        "GETNAME",
        "    Return the name of the current connection.",
        "SETNAME <name>",
        "    Assign the name <name> to the current connection.",
        "SETINFO <LIB-NAME|LIB-VER> <value>",
        "    Set client library name or version.",
        "REPLY (ON|OFF|SKIP)",
        "    Control the replies sent to the current connection.",
        "NO-EVICT (ON|OFF)",
        "    Accepted; Narad never evicts clients.",
        "HELP",
        "    Print this help.",
    ])


def unknown_client_subcommand(sub: bytes) -> CommandError:
    return unknown_subcommand(sub, "client")
