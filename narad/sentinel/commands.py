"""The commands a sentinel answers, with Redis Sentinel 7.0's replies and error texts:
SENTINEL and its subcommands, PING, INFO, ROLE, HELLO, AUTH, CLIENT, PUBLISH (hello
messages only), SHUTDOWN, COMMAND, QUIT, RESET. (P)SUBSCRIBE and (P)UNSUBSCRIBE are
the connection's own (narad/sentinel/connection.py), which runs the rest from COMMANDS.

A handler takes the connection and the arguments (args[0] is the command's name)
and returns the reply value, or raises CommandError; nothing it refuses changes
anything.
"""

from __future__ import annotations

import logging
import os
import resource
import time
from typing import TYPE_CHECKING, Any

from narad.commands import handshake
from narad.commands.handshake import REDIS_VERSION, validate_name
from narad.errors import (
    CommandError,
    not_integer,
    unknown_subcommand,
)
from narad.glob import match_text
from narad.process import log_level
from narad.resp import NULL_ARRAY, SimpleString
from narad.sentinel import config as sentinel_config
from narad.sentinel import failover
from narad.sentinel.config import MasterConfig
from narad.sentinel.state import Group, master_entry, replica_entry, sentinel_entry

if TYPE_CHECKING:
    from narad.sentinel.connection import Connection, Handler

OK = SimpleString("OK")

NO_SUCH_MASTER = "No such master with that name"

SENTINEL_HELP = [
    "CKQUORUM <master-name>",
    "    Check if the current Sentinel configuration is able to reach the quorum",
    "    needed to failover a master and the majority needed to authorize the",
    "    failover; Narad also checks min-replicas-to-ack on the leader.",
    "CONFIG SET <param> <value>",
    "    Set a global Sentinel configuration parameter.",
    "CONFIG GET <param>",
    "    Get global Sentinel configuration parameter.",
    "DEBUG",
    "    Show the configurable time parameters and their values (milliseconds).",
    "GET-MASTER-ADDR-BY-NAME <master-name>",
    "    Return the ip and port number of the master with that name.",
    "FAILOVER <master-name>",
    "    Manually failover a master node without asking for agreement from other",
    "    Sentinels; the master, if reachable, is drained first.",
    "FLUSHCONFIG",
    "    Force Sentinel to rewrite its configuration on disk, including the current",
    "    Sentinel state.",
    "INFO-CACHE <master-name>",
    "    Return last cached INFO output from masters and all its replicas.",
    "IS-MASTER-DOWN-BY-ADDR <ip> <port> <current-epoch> <runid>",
    "    Check if the master specified by ip:port is down from current Sentinel's",
    "    point of view.",
    "MASTER <master-name>",
    "    Show the state and info of the specified master.",
    "MASTERS",
    "    Show a list of monitored masters and their state.",
    "MONITOR <name> <ip> <port> <quorum>",
    "    Start monitoring a new master with the specified name, ip, port and quorum.",
    "MYID",
    "    Return the ID of the Sentinel instance.",
    "PENDING-SCRIPTS",
    "    Get pending scripts information.",
    "REMOVE <master-name>",
    "    Remove master from Sentinel's monitor list.",
    "REPLICAS <master-name>",
    "    Show a list of replicas for this master and their state.",
    "RESET <pattern>",
    "    Reset masters for specific master name matching this pattern.",
    "SENTINELS <master-name>",
    "    Show a list of Sentinel instances for this master and their state.",
    "SET <master-name> <option> <value> [<option> <value> ...]",
    "    Set configuration parameters for certain masters.",
    "SIMULATE-FAILURE [CRASH-AFTER-ELECTION] [CRASH-AFTER-PROMOTION] [HELP]",
    "    Simulate a Sentinel crash.",
]


def _int(arg: bytes, message: str | None = None) -> int:
    try:
        return int(arg)
    except ValueError:
        raise (CommandError(message) if message else not_integer()) from None


def _group(conn: Connection, name: bytes) -> Group:
    group = conn.sentinel.groups.get(name.decode("utf-8", "replace"))
    if group is None:
        raise CommandError(NO_SUCH_MASTER)
    return group


def _arity(sub: str) -> CommandError:
    return CommandError(f"wrong number of arguments for 'sentinel|{sub}' command")


# -- SENTINEL subcommands: (arity as Redis's table has it, handler) ----------------------


def _masters(conn: Connection, args: list[bytes]) -> Any:
    now = time.monotonic()
    return [master_entry(group, now) for group in conn.sentinel.groups.values()]


def _master(conn: Connection, args: list[bytes]) -> Any:
    return master_entry(_group(conn, args[2]), time.monotonic())


def _replicas(conn: Connection, args: list[bytes]) -> Any:
    group = _group(conn, args[2])
    now = time.monotonic()
    return [replica_entry(group, node, now) for node in group.replicas()]


def _sentinels(conn: Connection, args: list[bytes]) -> Any:
    group = _group(conn, args[2])
    now = time.monotonic()
    return [sentinel_entry(group, peer, now) for peer in group.peers.values()]


def _myid(conn: Connection, args: list[bytes]) -> Any:
    return conn.sentinel.my_id.encode()


def _get_master_addr(conn: Connection, args: list[bytes]) -> Any:
    group = conn.sentinel.groups.get(args[2].decode("utf-8", "replace"))
    if group is None:
        return NULL_ARRAY
    return [group.config.host.encode(), b"%d" % group.config.port]


def _is_master_down(conn: Connection, args: list[bytes]) -> Any:
    port = _int(args[3])
    epoch = _int(args[4])
    sentinel = conn.sentinel
    ip = args[2].decode("utf-8", "replace")
    group = next(
        (g for g in sentinel.groups.values() if (g.config.host, g.config.port) == (ip, port)),
        None,
    )
    down = 0
    leader, leader_epoch = "*", 0
    if group is not None:
        node = group.leader
        down = int(node is not None and bool(node.sdown_since_s))
        if args[5] != b"*":
            voted, leader_epoch = sentinel.vote(group, epoch, args[5].decode("utf-8", "replace"))
            leader = voted or "*"
    return [down, leader.encode(), leader_epoch]


def _reset(conn: Connection, args: list[bytes]) -> Any:
    pattern = args[2].decode("utf-8", "replace")
    sentinel = conn.sentinel
    matched = [g for name, g in sentinel.groups.items() if match_text(pattern, name)]
    for group in matched:
        sentinel.reset(group)
    return len(matched)


def _failover(conn: Connection, args: list[bytes]) -> Any:
    group = _group(conn, args[2])
    if group.failover is not None:
        raise CommandError("Failover already in progress", "INPROG")
    if not any(not n.sdown_since_s and n.priority for n in group.replicas()):
        raise CommandError("No suitable replica to promote", "NOGOODSLAVE")
    failover.start(conn.sentinel, group, forced=True)
    return OK


def _monitor(conn: Connection, args: list[bytes]) -> Any:
    quorum = _int(args[5], "Invalid quorum")
    port = _int(args[4], "Invalid port")
    if quorum <= 0:
        raise CommandError("Quorum must be 1 or greater.")
    host = args[3].decode("utf-8", "replace")
    if not _valid_host(host, conn.sentinel.config.resolve_hostnames):
        raise CommandError("Invalid IP address or hostname specified")
    name = args[2].decode("utf-8", "replace")
    if name in conn.sentinel.groups:
        raise CommandError("Duplicated master name")
    if not 0 < port < 65536:
        raise CommandError("Invalid port number")
    conn.sentinel.monitor(MasterConfig(name, host, port, quorum))
    return OK


def _valid_host(host: str, resolve: bool) -> bool:
    import ipaddress
    import socket

    try:
        ipaddress.ip_address(host)
        return True
    except ValueError:
        pass
    if not resolve:
        return False
    try:
        socket.getaddrinfo(host, None)
    except OSError:
        return False
    return True


def _remove(conn: Connection, args: list[bytes]) -> Any:
    conn.sentinel.remove(_group(conn, args[2]))
    return OK


def _ckquorum(conn: Connection, args: list[bytes]) -> Any:
    group = _group(conn, args[2])
    now = time.monotonic()
    voters = len(group.peers) + 1
    usable = 1 + sum(1 for p in group.peers.values() if not p.sdown_since_s
                     and now - p.last_hello_s < 5 * group.down_after_s + 5)
    problems = []
    if usable < group.config.quorum:
        problems.append(
            "Not enough available Sentinels to reach the specified quorum for this master"
        )
    if usable < voters // 2 + 1:
        problems.append(
            "Not enough available Sentinels to reach the majority and authorize a failover"
        )
    if problems:
        raise CommandError(f"{usable} usable Sentinels. " + ". ".join(problems), "NOQUORUM")
    unsafe = commit_warning(group)
    if unsafe:
        raise CommandError(f"{usable} usable Sentinels. {unsafe}", "UNSAFE")
    return SimpleString(
        f"OK {usable} usable Sentinels. Quorum and failover authorization can be reached"
    )


def commit_warning(group: Group) -> str:
    """Why a failover of `group` could lose an acknowledged write, if it could: the
    leader's `min-replicas-to-ack` below floor(N/2) for N data nodes, so that a
    commit need not be on a majority of them (docs/failover.md)."""
    leader = group.leader
    if leader is None or not leader.info_s:
        return ""
    needed = len(group.nodes) // 2
    have = leader.number("narad_min_replicas_to_ack")
    if have >= needed:
        return ""
    return (
        f"min-replicas-to-ack is {have} on the master: with {len(group.nodes)} data nodes "
        f"it must be at least {needed} for a failover to keep every acknowledged write"
    )


def _set(conn: Connection, args: list[bytes]) -> Any:
    group = _group(conn, args[2])
    if len(args) % 2 != 1 or len(args) < 5:
        raise _arity("set")
    sentinel = conn.sentinel
    changed: list[tuple[str, str]] = []
    for i in range(3, len(args), 2):
        option = args[i].decode("utf-8", "replace")
        value = args[i + 1].decode("utf-8", "surrogateescape")
        try:
            sentinel_config.set_master_option(group.config, option, value)
        except ValueError as exc:
            if changed:
                sentinel.persist()
            raise CommandError(str(exc)) from None
        changed.append((option, value))
    sentinel.persist()
    for option, value in changed:
        shown = "******" if option.lower() == "auth-pass" else value
        sentinel.event("+set", sentinel.describe(group), f" {option} {shown}")
    if any(o.lower() in ("auth-pass", "auth-user") for o, _ in changed):
        for node in group.nodes.values():
            node.link.user, node.link.password = group.config.auth_user, group.config.auth_pass
    return OK


def _config(conn: Connection, args: list[bytes]) -> Any:
    sub = args[2].lower() if len(args) > 2 else b""
    config = conn.sentinel.config
    if sub == b"get" and len(args) == 4:
        pairs = sentinel_config.config_get(config, args[3].decode("utf-8", "replace"))
        return {name.encode(): value.encode() for name, value in pairs}
    if sub == b"set" and len(args) == 5:
        try:
            sentinel_config.config_set(
                config, [(args[3].decode("utf-8", "replace"),
                          args[4].decode("utf-8", "surrogateescape"))]
            )
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        logging.getLogger("narad").setLevel(log_level(config.loglevel))
        conn.sentinel.persist()
        return OK
    raise CommandError(
        "Only SENTINEL CONFIG GET <option> / SET <option> <value> are supported."
    )


def _info_cache(conn: Connection, args: list[bytes]) -> Any:
    sentinel = conn.sentinel
    names = [a.decode("utf-8", "replace") for a in args[2:]]
    groups = [g for n, g in sentinel.groups.items() if not names or n in names]
    now = time.monotonic()
    reply: list[Any] = []
    for group in groups:
        entries = []
        leader = group.leader
        for node in ([leader] if leader else []) + group.replicas():
            entries.append([int((now - node.info_s) * 1000) if node.info_s else 0,
                            node.info_text])
        reply += [group.name.encode(), entries]
    return reply


def _debug(conn: Connection, args: list[bytes]) -> Any:
    from narad.sentinel import watch

    if len(args) > 2:
        raise CommandError("Narad's sentinel time parameters are fixed")
    return {
        b"INFO-PERIOD": b"%d" % (watch.INFO_S * 1000),
        b"PUBLISH-PERIOD": b"%d" % (watch.HELLO_S * 1000),
        b"ASK-PERIOD": b"%d" % (watch.ASK_S * 1000),
        b"ELECTION-TIMEOUT": b"%d" % (failover.ELECTION_TIMEOUT_S * 1000),
        b"FENCE-TIMEOUT": b"%d" % (failover.FENCE_TIMEOUT_S * 1000),
    }


def _flushconfig(conn: Connection, args: list[bytes]) -> Any:
    conn.sentinel.persist()
    return OK


def _pending_scripts(conn: Connection, args: list[bytes]) -> Any:
    return []


def _simulate_failure(conn: Connection, args: list[bytes]) -> Any:
    flags = set()
    for arg in args[2:]:
        word = arg.lower()
        if word == b"help":
            return [b"crash-after-election", b"crash-after-promotion"]
        if word not in (b"crash-after-election", b"crash-after-promotion"):
            raise CommandError("Unknown failure simulation specified")
        flags.add(word.decode())
    conn.sentinel.simulated_failures = flags
    return OK


def _help(conn: Connection, args: list[bytes]) -> Any:
    lines = ["SENTINEL <subcommand> [<arg> [value] [opt] ...]. Subcommands are:"]
    lines += [*SENTINEL_HELP, "HELP", "    Print this help."]
    return [SimpleString(line) for line in lines]


SUBCOMMANDS: dict[bytes, tuple[int, Handler]] = {
    b"masters": (2, _masters),
    b"master": (3, _master),
    b"replicas": (3, _replicas),
    b"slaves": (3, _replicas),
    b"sentinels": (3, _sentinels),
    b"myid": (2, _myid),
    b"get-master-addr-by-name": (3, _get_master_addr),
    b"is-master-down-by-addr": (6, _is_master_down),
    b"reset": (3, _reset),
    b"failover": (3, _failover),
    b"monitor": (6, _monitor),
    b"remove": (3, _remove),
    b"ckquorum": (3, _ckquorum),
    b"set": (-5, _set),
    b"config": (-4, _config),
    b"info-cache": (-3, _info_cache),
    b"debug": (-2, _debug),
    b"flushconfig": (2, _flushconfig),
    b"pending-scripts": (2, _pending_scripts),
    b"simulate-failure": (-3, _simulate_failure),
    b"help": (2, _help),
}


def sentinel(conn: Connection, args: list[bytes]) -> Any:
    if len(args) < 2:
        raise CommandError("wrong number of arguments for 'sentinel' command")
    sub = args[1].lower()
    entry = SUBCOMMANDS.get(sub)
    if entry is None:
        raise unknown_subcommand(args[1], "sentinel")
    arity, handler = entry
    wrong = (arity > 0 and len(args) != arity) or (arity < 0 and len(args) < -arity)
    if wrong and sub != b"config":  # CONFIG answers its own usage text
        raise _arity(sub.decode())
    return handler(conn, args)


# -- the other commands ----------------------------------------------------------------


def ping(conn: Connection, args: list[bytes]) -> Any:
    if len(args) > 2:
        raise CommandError("wrong number of arguments for 'ping' command")
    if conn.subscribed and conn.protocol == 2:
        return [b"pong", args[1] if len(args) > 1 else b""]
    return args[1] if len(args) > 1 else SimpleString("PONG")


def role(conn: Connection, args: list[bytes]) -> Any:
    return [b"sentinel", [name.encode() for name in conn.sentinel.groups]]


def publish(conn: Connection, args: list[bytes]) -> Any:
    if len(args) != 3:
        raise CommandError("wrong number of arguments for 'publish' command")
    if args[1] != b"__sentinel__:hello":
        raise CommandError("Only HELLO messages are accepted by Sentinel instances.")
    conn.sentinel.take_hello(args[2])
    return 1


def info(conn: Connection, args: list[bytes]) -> Any:
    sentinel = conn.sentinel
    wanted = {a.decode("utf-8", "replace").lower() for a in args[1:]}
    everything = not wanted or wanted & {"all", "everything", "default"}
    usage = resource.getrusage(resource.RUSAGE_SELF)
    uptime = int(time.monotonic() - sentinel.start_s)
    sections: dict[str, list[tuple[str, object]]] = {
        "server": [
            ("redis_version", REDIS_VERSION), ("redis_mode", "sentinel"),
            ("narad_version", _narad_version()), ("os", os.uname().sysname),
            ("arch_bits", 64), ("process_id", os.getpid()), ("run_id", sentinel.my_id),
            ("tcp_port", sentinel.port), ("uptime_in_seconds", uptime),
            ("uptime_in_days", uptime // 86400),
            ("config_file", str(sentinel.config.path)),
        ],
        "clients": [("connected_clients", len(sentinel.connections))],
        "cpu": [
            ("used_cpu_sys", f"{usage.ru_stime:.6f}"),
            ("used_cpu_user", f"{usage.ru_utime:.6f}"),
        ],
        "stats": [("total_connections_received", sentinel.connections_received)],
        "sentinel": _sentinel_section(conn),
    }
    parts = []
    for name, fields in sections.items():
        if everything or name in wanted:
            lines = [f"# {name.capitalize()}"] + [f"{k}:{v}" for k, v in fields]
            parts.append("\r\n".join(lines) + "\r\n")
    return "\r\n".join(parts).encode()


def _narad_version() -> str:
    import narad

    return narad.__version__


def _sentinel_section(conn: Connection) -> list[tuple[str, object]]:
    sentinel = conn.sentinel
    fields: list[tuple[str, object]] = [
        ("sentinel_masters", len(sentinel.groups)),
        ("sentinel_tilt", 0),
        ("sentinel_tilt_since_seconds", -1),
        ("sentinel_running_scripts", 0),
        ("sentinel_scripts_queue_length", 0),
        ("sentinel_simulate_failure_flags", len(sentinel.simulated_failures)),
    ]
    for i, group in enumerate(sentinel.groups.values()):
        status = "odown" if group.odown_since_s else "sdown" if (
            group.leader is not None and group.leader.sdown_since_s) else "ok"
        config = group.config
        fields.append((
            f"master{i}",
            f"name={config.name},status={status},address={config.host}:{config.port},"
            f"slaves={len(group.replicas())},sentinels={len(group.peers) + 1}",
        ))
        warning = commit_warning(group)
        if warning:
            fields.append((f"master{i}_warning", warning.replace(",", ";")))
        if group.stuck:
            fields.append((f"master{i}_failover_blocked", group.stuck.replace(",", ";")))
    return fields


def command(conn: Connection, args: list[bytes]) -> Any:
    return []  # no command table: redis-cli then offers no hints


def shutdown(conn: Connection, args: list[bytes]) -> Any:
    conn.sentinel.persist()
    conn.sentinel.stop()
    return None


def quit_(conn: Connection, args: list[bytes]) -> Any:
    conn.closing = True
    return OK


def auth(conn: Connection, args: list[bytes]) -> Any:
    if len(args) not in (2, 3):
        raise CommandError("wrong number of arguments for 'auth' command")
    handshake.auth(conn, args, conn.sentinel.config.requirepass or "")
    return OK


def hello(conn: Connection, args: list[bytes]) -> Any:
    required = conn.sentinel.config.requirepass or ""
    return handshake.hello(conn, args, required, "sentinel", "master")


def client(conn: Connection, args: list[bytes]) -> Any:
    sub = args[1].lower() if len(args) > 1 else b""
    if sub == b"setname" and len(args) == 3:
        conn.name = validate_name(args[2]).decode()
        return OK
    if sub == b"getname" and len(args) == 2:
        return conn.name.encode() if conn.name else None
    if sub == b"id" and len(args) == 2:
        return conn.id
    if sub == b"setinfo" and len(args) == 4:
        return OK
    if sub in (b"list", b"info") and len(args) == 2:
        shown = conn.sentinel.connections if sub == b"list" else [conn]
        return "".join(c.describe() + "\n" for c in shown).encode()
    if sub in (b"setname", b"getname", b"id", b"setinfo", b"list", b"info"):
        raise CommandError(f"wrong number of arguments for 'client|{sub.decode()}' command")
    if not sub:
        raise CommandError("wrong number of arguments for 'client' command")
    raise unknown_subcommand(args[1], "client")


def reset(conn: Connection, args: list[bytes]) -> Any:
    conn.reset()
    return SimpleString("RESET")


COMMANDS: dict[bytes, Handler] = {
    b"auth": auth,
    b"hello": hello,
    b"client": client,
    b"reset": reset,
    b"sentinel": sentinel,
    b"ping": ping,
    b"role": role,
    b"publish": publish,
    b"info": info,
    b"command": command,
    b"shutdown": shutdown,
    b"quit": quit_,
}
