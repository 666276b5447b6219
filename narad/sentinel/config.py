"""sentinel.conf, in Redis Sentinel's syntax: loading it (with Redis's error texts),
rewriting it with the sentinel's state, SENTINEL SET and SENTINEL CONFIG GET|SET, and
conf/sentinel.conf rendered from the table of directives (`DIRECTIVES`), which also
holds every default, so that the example and the defaults cannot drift.

The file: top-level lines (`port`, `bind`, `metrics-port`, `dir`, `logfile`, `loglevel`,
`requirepass`, `protected-mode`, `daemonize no`), and `sentinel ...` lines: the
global ones (`myid`, `current-epoch`, `announce-ip`, ...) and, after `sentinel monitor
<name> <host> <port> <quorum>`, the per-group ones (`down-after-milliseconds <name>
<ms>`, ...). Splitting and quoting are redis.conf's (narad/config/lexer.py).

A rewrite keeps every line that is not a `sentinel` line where it was (comments
too, with top-level values updated) and writes all the state as one block where the
first `sentinel` line was: myid, the global options that differ from their default,
current-epoch, then each group in file order with its options that differ, its
epochs and what was discovered (`known-replica`, `known-sentinel`). The file is
replaced atomically (narad/config/rewrite.py); loading the rewritten file gives the
same SentinelConfig.
"""

from __future__ import annotations

import dataclasses
import re
import textwrap
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from narad.config import ConfigError
from narad.config.lexer import bare_or_quoted, split_args
from narad.config.rewrite import read_lines, replace_file
from narad.glob import match_text
from narad.tls import AUTH_CLIENTS, TLSSettings

__all__ = ["ConfigError", "MasterConfig", "SentinelConfig", "load", "render", "rewrite"]

LOG_LEVELS = ("debug", "verbose", "notice", "warning", "nothing")
_RUN_ID = re.compile(r"[0-9a-f]{40}")


class Directive(NamedTuple):
    """One directive: `words` as written before its value (for a group's, before the
    name), its default as shown in conf/sentinel.conf, and a one-line doc."""

    words: str
    default: str
    doc: str
    per_group: bool = False


DIRECTIVES = [
    Directive("port", "26379", "The port the sentinel listens on."),
    Directive("bind", "127.0.0.1", "The addresses it listens on (several may be given)."),
    Directive("metrics-port", "auto", "The HTTP port of its /metrics (Prometheus): auto is "
              "port + 2000 (tls-port + 2000 when port is 0); 0: off. It listens at bind's "
              "addresses."),
    Directive("dir", ".", "Accepted for Redis's config: the sentinel keeps its state in this "
              "file alone."),
    Directive("logfile", '""', 'The log file; "" logs to standard error.'),
    Directive("loglevel", "notice", "debug, verbose, notice or warning: notice logs every "
              "event (+sdown, +switch-master, ...)."),
    Directive("log-format", "text", "How each log line is written: text (key=value pairs) or "
              "json (one JSON object per line, for log shippers)."),
    Directive("requirepass", '""', "The password clients (other sentinels too) must AUTH "
              'with; "" for none.'),
    Directive("tls-port", "0", "The port it listens on for TLS connections (0: none). With "
              "tls-port set, port 0 listens on no plain port."),
    Directive("tls-cert-file", '""', "The certificate (PEM) it presents to clients, and to "
              "data nodes and sentinels unless tls-client-cert-file is set."),
    Directive("tls-key-file", '""', "The private key of tls-cert-file."),
    Directive("tls-key-file-pass", '""', "The password of tls-key-file, if encrypted."),
    Directive("tls-client-cert-file", '""', "The certificate its links present "
              '("": tls-cert-file).'),
    Directive("tls-client-key-file", '""', "The private key of tls-client-cert-file."),
    Directive("tls-client-key-file-pass", '""', "The password of tls-client-key-file."),
    Directive("tls-ca-cert-file", '""', "The CA certificates clients', data nodes' and "
              "sentinels' certificates are verified against."),
    Directive("tls-ca-cert-dir", '""', "A folder of CA certificates (c_rehash names)."),
    Directive("tls-auth-clients", "yes", "Whether clients must present a certificate: yes, "
              "optional (verified if given) or no."),
    Directive("tls-replication", "no", "Whether its links to data nodes and other sentinels "
              "use TLS (as in Redis Sentinel); it then announces its tls-port."),
    Directive("tls-protocols", '""', 'The TLS versions allowed ("": TLSv1.2 TLSv1.3).'),
    Directive("tls-ciphers", '""', "The cipher list for TLSv1.2 and older (OpenSSL syntax)."),
    Directive("tls-ciphersuites", '""', "The TLSv1.3 cipher suites (OpenSSL syntax)."),
    Directive("tls-prefer-server-ciphers", "no", "Choose ciphers by this side's preference."),
    Directive("sentinel announce-ip", '""', "The address this sentinel gives others to "
              'reach it (behind NAT); "" for the one its links use.'),
    Directive("sentinel announce-port", "0", "The port it gives others; 0 for `port`."),
    Directive("sentinel resolve-hostnames", "no", "Whether hostnames are accepted where "
              "addresses are expected."),
    Directive("sentinel announce-hostnames", "no", "Whether hostnames, not addresses, are "
              "announced (kept for Redis's config; Narad announces what it is given)."),
    Directive("sentinel deny-scripts-reconfig", "yes", "Accepted for Redis's config; Narad "
              "runs no scripts."),
    Directive("sentinel sentinel-user", '""', "The user this sentinel AUTHs as with other "
              'sentinels; "" for the default user.'),
    Directive("sentinel sentinel-pass", '""', "The password it AUTHs with to other "
              'sentinels; "" for none.'),
    Directive("sentinel monitor", "mymaster 127.0.0.1 6379 2", "A group to watch: its name, "
              "its leader's address and port, and the quorum: how many sentinels must agree "
              "that the leader is down before a failover. Give one line per group.",
              per_group=True),
    Directive("sentinel down-after-milliseconds", "30000", "How long without a valid PING "
              "reply until a node is subjectively down.", per_group=True),
    Directive("sentinel failover-timeout", "180000", "How long a failover may take; a "
              "sentinel that tried one, or voted for another's, tries again only after "
              "twice this.", per_group=True),
    Directive("sentinel parallel-syncs", "1", "How many replicas are pointed at a new "
              "leader at the same time.", per_group=True),
    Directive("sentinel auth-pass", '""', "The password of the group's data nodes "
              "(their requirepass).", per_group=True),
    Directive("sentinel auth-user", '""', "The user to AUTH as on the group's data nodes.",
              per_group=True),
]
DEFAULT_PORT = 26379


@dataclass
class MasterConfig:
    name: str
    host: str
    port: int
    quorum: int
    down_after_ms: int = 30000
    failover_timeout_ms: int = 180000
    parallel_syncs: int = 1
    auth_pass: str | None = None
    auth_user: str | None = None
    config_epoch: int = 0
    leader_epoch: int = 0
    known_replicas: list[tuple[str, int]] = field(default_factory=list)
    known_sentinels: list[tuple[str, int, str]] = field(default_factory=list)  # ip, port, id


@dataclass
class SentinelConfig:
    path: Path  # absolute: the file a rewrite replaces
    port: int = DEFAULT_PORT
    bind: list[str] = field(default_factory=lambda: ["127.0.0.1"])
    dir: str = "."
    logfile: str = ""
    loglevel: str = "notice"
    log_format: str = "text"  # text or json (narad/logs.py)
    requirepass: str | None = None
    myid: str | None = None  # 40 lowercase hex digits; made at first start
    current_epoch: int = 0
    announce_ip: str | None = None
    announce_port: int = 0
    resolve_hostnames: bool = False
    announce_hostnames: bool = False
    deny_scripts_reconfig: bool = True
    sentinel_user: str | None = None
    sentinel_pass: str | None = None
    tls_port: int = 0
    metrics_port: int = -1  # -1: auto (see DIRECTIVES)
    tls: TLSSettings = field(default_factory=TLSSettings)  # the other tls-* directives
    masters: dict[str, MasterConfig] = field(default_factory=dict)  # in file order


class _Bad(Exception):
    """A line refused; the reason as Redis words it."""


# -- loading ------------------------------------------------------------------------------


def load(path: str | Path, overrides: Sequence[tuple[str, Sequence[str]]] = ()) -> SentinelConfig:
    """The config in the file at `path`, then `overrides` (command-line flags, as
    lines appended to the file). ConfigError names the line (or flag) and why."""
    shown = str(path)
    config = SentinelConfig(Path(path).absolute())
    try:
        lines = Path(path).read_bytes().decode("utf-8", "surrogateescape").split("\n")
    except OSError as exc:
        raise ConfigError(f"can't open config file '{shown}': {exc.strerror}") from None
    for number, raw in enumerate(lines, 1):
        line = raw.strip(" \t\r\n")
        if line and not line.startswith("#"):
            _load_line(config, line, f"Reading the configuration file {shown}, at line {number}",
                       shown, number)
    for name, words in overrides:
        flag = name if name.startswith("--") else f"--{name}"
        line = " ".join([flag[2:], *(bare_or_quoted(w) for w in words)])
        _load_line(config, line, f"Reading the command line, at option {flag}", None, None)
    return config


def _load_line(
    config: SentinelConfig, line: str, heading: str, path: str | None, number: int | None
) -> None:
    args = split_args(line)
    try:
        if args is None:
            raise _Bad("Unbalanced quotes in configuration line")
        if args:
            _apply(config, args)
    except _Bad as exc:
        reason = str(exc)
        raise ConfigError(f"{heading}\n>>> '{line}'\n{reason}", reason, path, number) from None


def _apply(config: SentinelConfig, args: list[str]) -> None:
    name, values = args[0].lower(), args[1:]
    if name == "sentinel":
        if not values:
            raise _Bad("Unrecognized sentinel configuration statement.")
        _apply_sentinel(config, values[0].lower(), values[1:])
        return
    if name == "bind":
        if not values:
            raise _Bad("Bad directive or wrong number of arguments")
        config.bind = values
        return
    if len(values) != 1:
        raise _Bad("Bad directive or wrong number of arguments")
    value = values[0]
    if name in _TLS:
        attr, kind = _TLS[name]
        parsed: Any = value
        if kind == "bool":
            parsed = _yes_no(value)
        elif kind == "auth" and value.lower() not in AUTH_CLIENTS:
            raise _Bad("argument(s) must be one of the following: no, yes, optional")
        elif kind == "auth":
            parsed = value.lower()
        config.tls = dataclasses.replace(config.tls, **{attr: parsed})
        return
    if name == "port":
        config.port = _port(value)
    elif name == "tls-port":
        config.tls_port = _port(value)
    elif name == "metrics-port":
        config.metrics_port = -1 if value.lower() == "auto" else _port(value)
    elif name == "dir":
        config.dir = value
    elif name == "logfile":
        config.logfile = value
    elif name == "loglevel":
        if value.lower() not in LOG_LEVELS:
            raise _Bad("argument(s) must be one of the following: " + ", ".join(LOG_LEVELS))
        config.loglevel = value.lower()
    elif name == "log-format":
        if value.lower() not in ("text", "json"):
            raise _Bad("argument(s) must be one of the following: text, json")
        config.log_format = value.lower()
    elif name == "requirepass":
        config.requirepass = value or None
    elif name == "protected-mode":
        _yes_no(value)
    elif name == "daemonize":
        if _yes_no(value):
            raise _Bad("daemonize is not supported: run the sentinel under a supervisor")
    else:
        raise _Bad("Bad directive or wrong number of arguments")


def _apply_sentinel(config: SentinelConfig, what: str, args: list[str]) -> None:
    """One `sentinel <what> ...` line."""
    glob = _GLOBAL.get(what)
    if glob is not None:
        if len(args) != 1:
            raise _Bad("Wrong number of arguments for this sentinel configuration statement.")
        glob(config, args[0])
        return
    if what == "monitor":
        if len(args) != 4:
            raise _Bad("Wrong number of arguments for this sentinel configuration statement.")
        name, host, port, quorum = args
        if _integer(quorum) <= 0:
            raise _Bad("Quorum must be 1 or greater.")
        if name in config.masters:
            raise _Bad("Duplicated master name.")
        config.masters[name] = MasterConfig(name, host, _port(port), _integer(quorum))
        return
    per_group = _PER_GROUP.get(what)
    if per_group is None:
        raise _Bad("Unrecognized sentinel configuration statement.")
    count, apply = per_group
    if len(args) != count:
        raise _Bad("Wrong number of arguments for this sentinel configuration statement.")
    master = config.masters.get(args[0])
    if master is None:
        raise _Bad("No such master with specified name.")
    apply(master, args[1:])


# The tls-* directives but tls-port: the TLSSettings field each sets, and its kind.
_TLS = {
    f"tls-{f.name.replace('_', '-')}": (
        f.name,
        "bool" if f.type in ("bool", bool) else "auth" if f.name == "auth_clients" else "str",
    )
    for f in dataclasses.fields(TLSSettings)
}


def _integer(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise _Bad(f"Invalid number '{text}'") from None


def _port(text: str) -> int:
    port = _integer(text)
    if not 0 <= port <= 65535:
        raise _Bad("Invalid port")
    return port


def _yes_no(text: str) -> bool:
    if text.lower() not in ("yes", "no"):
        raise _Bad("argument must be 'yes' or 'no'")
    return text.lower() == "yes"


def _myid(config: SentinelConfig, value: str) -> None:
    if not _RUN_ID.fullmatch(value):
        raise _Bad("Malformed Sentinel id in myid option.")
    config.myid = value


def _set_global(attr: str, kind: str) -> Callable[[SentinelConfig, str], None]:
    def apply(config: SentinelConfig, value: str) -> None:
        if kind == "int":
            setattr(config, attr, _integer(value))
        elif kind == "port":
            setattr(config, attr, _port(value))
        elif kind == "bool":
            setattr(config, attr, _yes_no(value))
        else:
            setattr(config, attr, value or None)
    return apply


_GLOBAL: dict[str, Callable[[SentinelConfig, str], None]] = {
    "myid": _myid,
    "current-epoch": _set_global("current_epoch", "int"),
    "announce-ip": _set_global("announce_ip", "str"),
    "announce-port": _set_global("announce_port", "port"),
    "resolve-hostnames": _set_global("resolve_hostnames", "bool"),
    "announce-hostnames": _set_global("announce_hostnames", "bool"),
    "deny-scripts-reconfig": _set_global("deny_scripts_reconfig", "bool"),
    "sentinel-user": _set_global("sentinel_user", "str"),
    "sentinel-pass": _set_global("sentinel_pass", "str"),
}


def _group_int(attr: str, least: int) -> Callable[[MasterConfig, list[str]], None]:
    def apply(master: MasterConfig, args: list[str]) -> None:
        value = _integer(args[0])
        if value < least:
            raise _Bad(f"Invalid value '{args[0]}'")
        setattr(master, attr, value)
    return apply


def _group_text(attr: str) -> Callable[[MasterConfig, list[str]], None]:
    def apply(master: MasterConfig, args: list[str]) -> None:
        setattr(master, attr, args[0] or None)
    return apply


def _known_replica(master: MasterConfig, args: list[str]) -> None:
    entry = (args[0], _port(args[1]))
    if entry not in master.known_replicas:
        master.known_replicas.append(entry)


def _known_sentinel(master: MasterConfig, args: list[str]) -> None:
    if not _RUN_ID.fullmatch(args[2]):
        raise _Bad("Malformed Sentinel id in known-sentinel option.")
    master.known_sentinels = [s for s in master.known_sentinels if s[2] != args[2]]
    master.known_sentinels.append((args[0], _port(args[1]), args[2]))


GroupApply = Callable[[MasterConfig, list[str]], None]
# By directive: how many arguments it takes, the group's name included; how it applies.
_PER_GROUP: dict[str, tuple[int, GroupApply]] = {
    "down-after-milliseconds": (2, _group_int("down_after_ms", 1)),
    "failover-timeout": (2, _group_int("failover_timeout_ms", 1)),
    "parallel-syncs": (2, _group_int("parallel_syncs", 1)),
    "config-epoch": (2, _group_int("config_epoch", 0)),
    "leader-epoch": (2, _group_int("leader_epoch", 0)),
    "auth-pass": (2, _group_text("auth_pass")),
    "auth-user": (2, _group_text("auth_user")),
    "known-replica": (3, _known_replica),
    "known-slave": (3, _known_replica),
    "known-sentinel": (4, _known_sentinel),
}


# -- writing --------------------------------------------------------------------------------


def _top_lines(config: SentinelConfig) -> dict[str, str]:
    """The top-level directives as a rewrite writes them."""
    return {
        "port": f"port {config.port}",
        "bind": "bind " + " ".join(bare_or_quoted(a) for a in config.bind),
        "dir": f"dir {bare_or_quoted(config.dir)}",
        "logfile": f"logfile {bare_or_quoted(config.logfile)}",
        "loglevel": f"loglevel {config.loglevel}",
        "log-format": f"log-format {config.log_format}",
        "requirepass": f"requirepass {bare_or_quoted(config.requirepass or '')}",
        "tls-port": f"tls-port {config.tls_port}",
        "metrics-port": "metrics-port "
        + ("auto" if config.metrics_port < 0 else str(config.metrics_port)),
        **{
            name: f"{name} {_tls_shown(getattr(config.tls, attr))}"
            for name, (attr, _) in _TLS.items()
        },
    }


def _tls_shown(value: object) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    return bare_or_quoted(str(value))


_TOP_DEFAULTS = _top_lines(SentinelConfig(Path("/")))


def _state_lines(config: SentinelConfig) -> list[str]:
    q = bare_or_quoted
    lines = [f"sentinel myid {config.myid}"] if config.myid else []
    defaults = SentinelConfig(config.path)
    for attr, words, shown in [
        ("announce_ip", "announce-ip", q(config.announce_ip or "")),
        ("announce_port", "announce-port", str(config.announce_port)),
        ("resolve_hostnames", "resolve-hostnames", _yes(config.resolve_hostnames)),
        ("announce_hostnames", "announce-hostnames", _yes(config.announce_hostnames)),
        ("deny_scripts_reconfig", "deny-scripts-reconfig", _yes(config.deny_scripts_reconfig)),
        ("sentinel_user", "sentinel-user", q(config.sentinel_user or "")),
        ("sentinel_pass", "sentinel-pass", q(config.sentinel_pass or "")),
    ]:
        if getattr(config, attr) != getattr(defaults, attr):
            lines.append(f"sentinel {words} {shown}")
    lines.append(f"sentinel current-epoch {config.current_epoch}")
    for m in config.masters.values():
        name = q(m.name)
        lines.append(f"sentinel monitor {name} {q(m.host)} {m.port} {m.quorum}")
        base = MasterConfig(m.name, m.host, m.port, m.quorum)
        for attr, words in [("down_after_ms", "down-after-milliseconds"),
                            ("failover_timeout_ms", "failover-timeout"),
                            ("parallel_syncs", "parallel-syncs")]:
            if getattr(m, attr) != getattr(base, attr):
                lines.append(f"sentinel {words} {name} {getattr(m, attr)}")
        if m.auth_pass:
            lines.append(f"sentinel auth-pass {name} {q(m.auth_pass)}")
        if m.auth_user:
            lines.append(f"sentinel auth-user {name} {q(m.auth_user)}")
        lines.append(f"sentinel config-epoch {name} {m.config_epoch}")
        lines.append(f"sentinel leader-epoch {name} {m.leader_epoch}")
        lines += [f"sentinel known-replica {name} {q(h)} {p}" for h, p in m.known_replicas]
        lines += [f"sentinel known-sentinel {name} {q(h)} {p} {r}"
                  for h, p, r in m.known_sentinels]
    return lines


def _yes(value: bool) -> str:
    return "yes" if value else "no"


def render(config: SentinelConfig) -> str:
    """The file's new text: its other lines kept in place, the state where its first
    `sentinel` line was (or at the end)."""
    top = _top_lines(config)
    out: list[str] = []
    state_at: int | None = None
    written: set[str] = set()
    for raw in read_lines(config.path):
        args = split_args(raw.strip())
        name = args[0].lower() if args else ""
        if name == "sentinel":
            if state_at is None:
                state_at = len(out)
            continue
        if name in top:
            if name not in written:
                out.append(top[name])
                written.add(name)
            continue
        out.append(raw.rstrip("\r"))
    for name, line in top.items():
        if name not in written and line != _TOP_DEFAULTS[name]:
            out.insert(state_at if state_at is not None else len(out), line)
            if state_at is not None:
                state_at += 1
    state = _state_lines(config)
    if state_at is None:
        out += state
    else:
        out[state_at:state_at] = state
    return "".join(line + "\n" for line in out)


def rewrite(config: SentinelConfig) -> None:
    """Replace the file with `render(config)`, crash-safe (fsynced before rename)."""
    replace_file(config.path, render(config))


# -- SENTINEL SET, SENTINEL CONFIG -------------------------------------------------------------


def set_master_option(master: MasterConfig, option: str, value: str) -> None:
    """One option of SENTINEL SET; ValueError with Redis's reply text (after "ERR ")."""
    name = option.lower()
    bad = ValueError(f"Invalid argument '{value}' for SENTINEL SET '{option}'")
    numeric = {"down-after-milliseconds": "down_after_ms", "failover-timeout":
               "failover_timeout_ms", "parallel-syncs": "parallel_syncs", "quorum": "quorum"}
    if name in numeric:
        try:
            number = int(value)
        except ValueError:
            raise bad from None
        if number <= 0:
            raise bad
        setattr(master, numeric[name], number)
    elif name == "auth-pass":
        master.auth_pass = value or None
    elif name == "auth-user":
        master.auth_user = value or None
    else:
        raise bad


_CONFIG = {  # SENTINEL CONFIG's parameters: attribute, kind
    "resolve-hostnames": ("resolve_hostnames", "bool"),
    "announce-hostnames": ("announce_hostnames", "bool"),
    "announce-ip": ("announce_ip", "str"),
    "announce-port": ("announce_port", "port"),
    "sentinel-user": ("sentinel_user", "str"),
    "sentinel-pass": ("sentinel_pass", "str"),
    "loglevel": ("loglevel", "level"),
}


def config_get(config: SentinelConfig, pattern: str) -> list[tuple[str, str]]:
    """SENTINEL CONFIG GET <pattern>: the parameters matching, with their values."""
    out = []
    for name, (attr, kind) in _CONFIG.items():
        if match_text(pattern, name):
            value = getattr(config, attr)
            shown = _yes(value) if kind == "bool" else "" if value is None else str(value)
            out.append((name, shown))
    return out


def config_set(config: SentinelConfig, pairs: Sequence[tuple[str, str]]) -> None:
    """SENTINEL CONFIG SET: all the pairs or none; ValueError with Redis's text."""
    changes = []
    for name, value in pairs:
        entry = _CONFIG.get(name.lower())
        if entry is None:
            raise ValueError(f"Invalid argument '{name}' to SENTINEL CONFIG SET")
        attr, kind = entry
        try:
            if kind == "bool":
                parsed: object = _yes_no(value)
            elif kind == "port":
                parsed = _port(value)
            elif kind == "level":
                if value.lower() not in LOG_LEVELS:
                    raise _Bad("bad level")
                parsed = value.lower()
            else:
                parsed = value or None
        except _Bad:
            text = f"Invalid value '{value}' to SENTINEL CONFIG SET '{name}'"
            raise ValueError(text) from None
        changes.append((attr, parsed))
    for attr, parsed in changes:
        setattr(config, attr, parsed)


# -- conf/sentinel.conf ------------------------------------------------------------------------

_EXAMPLE_HEADER = """\
# Narad sentinel configuration, in Redis Sentinel's sentinel.conf syntax.
#
# Start with: narad sentinel conf/sentinel.conf   (or: narad server FILE --sentinel)
#
# The sentinel rewrites this file to record its state: its id, its epoch and votes,
# and the replicas and sentinels it discovered (sentinel myid, current-epoch,
# config-epoch, leader-epoch, known-replica, known-sentinel). The file must be
# writable, and each sentinel needs a file of its own.
#
# Every directive below has its default, except the one group to watch. Failover,
# and what it promises under which settings: docs/failover.md.
#
# This file is generated by narad.sentinel.config.render_example().
"""


def render_example() -> str:
    """conf/sentinel.conf: every directive with its doc and default."""
    parts = [_EXAMPLE_HEADER]
    for directive in DIRECTIVES:
        lines = [f"# {text}" for text in textwrap.wrap(directive.doc, width=86)]
        if directive.per_group and directive.words != "sentinel monitor":
            lines.append(f"{directive.words} mymaster {directive.default}")
        else:
            lines.append(f"{directive.words} {directive.default}")
        parts.append("\n" + "".join(line + "\n" for line in lines))
    return "".join(parts)
