"""Connection commands: PING, ECHO, HELLO, AUTH, QUIT, RESET and CLIENT ..."""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from narad.commands.args import parse_int
from narad.commands.table import command, container, help_reply
from narad.errors import WRONGPASS, CommandError, syntax, unknown_subcommand
from narad.resp import SimpleString, Verbatim

if TYPE_CHECKING:
    from narad.client import Client

OK = SimpleString("OK")
REDIS_VERSION = "7.0.15"  # the Redis whose commands Narad answers as


@command("ping", -1, "fast", group="connection")
def ping(client: Client, args: list[bytes]) -> Any:
    """Returns the server's liveliness response."""
    if len(args) > 2:
        raise CommandError("wrong number of arguments for 'ping' command")
    if client.push_handler is not None and client.protocol == 2:
        return [b"pong", args[1] if len(args) == 2 else b""]
    return args[1] if len(args) == 2 else SimpleString("PONG")


@command("echo", 2, "fast loading stale", group="connection")
def echo(client: Client, args: list[bytes]) -> Any:
    """Returns the given string."""
    return args[1]


def check_password(client: Client, user: bytes, password: bytes) -> None:
    required = str(client.server.config["requirepass"]).encode()
    if user != b"default":
        raise WRONGPASS
    import hmac  # with hashlib ~1.5 ms to load: at the first password, not at start

    # Without requirepass the default user is `nopass`, as in Redis: any password works.
    if required and not hmac.compare_digest(password, required):
        raise WRONGPASS


HELLO_NOAUTH = CommandError(
    "HELLO must be called with the client already authenticated, otherwise the "
    "HELLO AUTH <user> <pass> option can be used to authenticate the "
    "client and select the RESP protocol version at the same time",
    "NOAUTH",
)


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
            _redact(args, (i + 1, i + 2))
            i += 3
        elif opt == b"setname" and i + 1 < len(args):
            name = validate_name(args[i + 1])
            i += 2
        else:
            raise CommandError(f"Syntax error in HELLO option '{args[i].decode(errors='replace')}'")
    return protocol, auth, name


def _redact(args: list[bytes], positions: Iterable[int]) -> None:
    """Passwords never reach the slow log (which records `args` after the call)."""
    for i in positions:
        args[i] = b"(redacted)"


@command(
    "auth", -2, "noauth noscript loading stale fast no_auth allow_busy", group="connection"
)
def auth(client: Client, args: list[bytes]) -> Any:
    """Authenticates the connection."""
    if len(args) > 3:
        raise syntax()
    user, password = (b"default", args[1]) if len(args) == 2 else (args[1], args[2])
    _redact(args, range(1, len(args)))
    if len(args) == 2 and not client.server.config["requirepass"]:
        raise CommandError(
            "AUTH <password> called without any password configured for the default user. "
            "Are you sure your configuration is correct?"
        )
    check_password(client, user, password)
    client.authenticated = True
    return OK


@command(
    "hello", -1, "noauth noscript loading stale fast no_auth allow_busy", group="connection",
    since="6.0.0",
)
def hello(client: Client, args: list[bytes]) -> Any:
    """Handshakes with the Redis server."""
    protocol, auth, name = parse_hello(args, client.protocol)
    if auth is not None:
        check_password(client, *auth)
        client.authenticated = True
    if not client.authenticated:
        raise HELLO_NOAUTH
    if name is not None:
        client.name = name.decode()
    client.protocol = protocol
    return {
        "server": "redis",
        "version": REDIS_VERSION,
        "proto": protocol,
        "id": client.id,
        "mode": "standalone",
        "role": "replica" if client.server.replication.is_replica else "master",
        "modules": [],
    }


@command(
    "quit", -1, "noauth noscript loading stale fast no_auth allow_busy", group="connection"
)
def quit_(client: Client, args: list[bytes]) -> Any:
    """Closes the connection."""
    client.close_after_reply()
    return OK


@command(
    "reset", 1, "noauth noscript loading stale fast no_auth allow_busy", group="connection",
    since="6.2.0",
)
def reset(client: Client, args: list[bytes]) -> Any:
    """Resets the connection."""
    client.reset()
    return SimpleString("RESET")


# -- CLIENT -------------------------------------------------------------------------------

container("client", "connection", "A container for client connection commands.", "2.4.0")


def validate_name(name: bytes) -> bytes:
    if any(ch <= 32 or ch > 126 for ch in name):
        raise CommandError("Client names cannot contain spaces, newlines or special characters.")
    return name


@command("id", 2, "noscript loading stale", group="connection", parent="client", since="5.0.0")
def client_id(client: Client, args: list[bytes]) -> Any:
    """Returns the unique client ID of the connection."""
    return client.id


@command("setname", 3, "noscript loading stale", group="connection", parent="client")
def client_setname(client: Client, args: list[bytes]) -> Any:
    """Sets the connection name."""
    client.name = validate_name(args[2]).decode()
    return OK


@command("getname", 2, "noscript loading stale", group="connection", parent="client")
def client_getname(client: Client, args: list[bytes]) -> Any:
    """Returns the name of the connection."""
    return client.name.encode() if client.name else None


@command("setinfo", 4, "noscript loading stale", group="connection", parent="client", since="7.2.0")
def client_setinfo(client: Client, args: list[bytes]) -> Any:
    """Sets information specific to the client or connection."""
    attr, value = args[2].lower(), args[3]
    if any(ch < 33 or ch > 126 for ch in value):
        raise CommandError(
            f"{attr.decode().upper()} cannot contain spaces, newlines or special characters."
        )
    if attr == b"lib-name":
        client.lib_name = value.decode()
    elif attr == b"lib-ver":
        client.lib_ver = value.decode()
    else:
        raise CommandError(f"Unrecognized option '{args[2].decode(errors='replace')}'")
    return OK


def client_line(c: Client, current: str | None = None) -> str:
    """One CLIENT LIST line; `current` names the command the caller is running."""
    now = time.time()
    flags = "N"
    if c.blocked is not None:
        flags = "b"
    elif c.multi is not None:
        flags = "x"
    cmd = current or c.last_command or "NULL"
    return (
        f"id={c.id} addr={c.addr} laddr={c.laddr} fd=-1 name={c.name} "
        f"age={int(now - c.created_s)} idle={int(now - c.last_interaction_s)} flags={flags} "
        f"db={c.db} sub=0 psub=0 ssub=0 multi={len(c.multi) if c.multi is not None else -1} "
        f"qbuf=0 qbuf-free=0 argv-mem=0 multi-mem=0 rbs=0 rbp=0 obl=0 oll=0 "
        f"omem={len(c.out)} tot-mem=0 events=r cmd={cmd} user=default redir=-1 "
        f"resp={c.protocol} lib-name={c.lib_name} lib-ver={c.lib_ver}"
    )


@command(
    "list", -2, "admin noscript loading stale", group="connection", parent="client", since="2.4.0"
)
def client_list(client: Client, args: list[bytes]) -> Any:
    """Lists open connections."""
    clients = sorted(client.server.clients.values(), key=lambda c: c.id)
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
        "".join(client_line(c, "client|list" if c is client else None) + "\n" for c in clients)
    )


@command("info", 2, "noscript loading stale", group="connection", parent="client", since="6.2.0")
def client_info(client: Client, args: list[bytes]) -> Any:
    """Returns information about the connection."""
    return Verbatim(client_line(client, "client|info") + "\n")


@command("kill", -3, "admin noscript loading stale", group="connection", parent="client")
def client_kill(client: Client, args: list[bytes]) -> Any:
    """Terminates open connections."""
    server = client.server
    if len(args) == 3:  # the old form: CLIENT KILL addr:port
        target = args[2].decode(errors="replace")
        for other in server.clients.values():
            if other.addr == target:
                other.close_after_reply() if other is client else other.close()
                return OK
        raise CommandError("No such client")
    filters: list[tuple[bytes, bytes]] = []
    if len(args) % 2:
        raise syntax()
    for i in range(2, len(args), 2):
        filters.append((args[i].lower(), args[i + 1]))
    skipme = True
    victims = []
    for other in server.clients.values():
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
                keep |= other.laddr != value.decode(errors="replace")
            elif name == b"user":
                if value != b"default":
                    raise CommandError(f"No such user '{value.decode(errors='replace')}'")
            elif name == b"skipme":
                if value.lower() not in (b"yes", b"no"):
                    raise syntax()
                skipme = value.lower() == b"yes"
            elif name == b"type":
                keep |= value.lower() != b"normal"
            elif name == b"maxage":
                keep |= time.time() - other.created_s < parse_int(value)
            else:
                raise syntax()
        if not keep:
            victims.append(other)
    killed = 0
    for other in victims:
        if other is client and skipme:
            continue
        killed += 1
        other.close_after_reply() if other is client else other.close()
    return killed


@command("reply", 3, "noscript loading stale", group="connection", parent="client", since="3.2.0")
def client_reply(client: Client, args: list[bytes]) -> Any:
    """Instructs the server whether to reply to commands."""
    from narad.client import NO_REPLY

    mode = args[2].lower()
    if mode == b"on":
        client.reply_off = False
        return OK
    if mode == b"off":
        client.reply_off = True
        return NO_REPLY
    if mode == b"skip":
        client.skip_next = not client.reply_off
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
def client_no_evict(client: Client, args: list[bytes]) -> Any:
    """Sets the client eviction mode of the connection."""
    if args[2].lower() not in (b"on", b"off"):
        raise syntax()
    return OK


@command(
    "no-touch", 3, "noscript loading stale", group="connection", parent="client", since="7.2.0"
)
def client_no_touch(client: Client, args: list[bytes]) -> Any:
    """Controls whether commands sent by the client affect the LRU/LFU of accessed keys."""
    if args[2].lower() not in (b"on", b"off"):
        raise syntax()
    return OK


@command("help", 2, "loading stale", group="connection", parent="client")
def client_help(client: Client, args: list[bytes]) -> Any:
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
