"""`narad server`: load the configuration, open the keyspace, serve until told to stop.

Everything here is process plumbing (the command line's flags, logging as the config
sets it, the pidfile, the open files limit, exit codes); the server itself is
narad/server.py. What `narad sentinel` shares of it (log levels and format, the
event loop) is narad/process.py.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
import textwrap
from collections.abc import Sequence
from typing import TYPE_CHECKING

from narad.config.kinds import BoolKind, EnumKind, IntKind, MemoryKind, StringKind
from narad.config.lexer import bare_or_quoted
from narad.config.settings import SETTINGS, Setting
from narad.process import log_level, log_to, loop_factory

if TYPE_CHECKING:
    from narad.config import Config


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The config file, and one `--name` flag per setting of the table (its aliases
    too), grouped by section: a setting added to the table is a flag at once. A
    setting of several arguments takes every word after its flag, so the config file
    goes before the flags."""
    parser.usage = "%(prog)s [-h] [FILE] [--config FILE] [--<setting> ARG ...]"
    parser.formatter_class = _HelpFormatter
    parser.add_argument(
        "config_file", nargs="?", metavar="FILE", help="a narad.conf (redis.conf syntax)"
    )
    parser.add_argument(
        "--config",
        dest="config_flag",
        metavar="FILE",
        help="a narad.conf (same as the positional)",
    )
    parser.add_argument(
        "--sentinel", action="store_true",
        help="run a sentinel instead, with FILE as its sentinel.conf (as narad sentinel FILE)",
    )
    parser.set_defaults(overrides=[])
    parser.add_argument(
        "--user", action=Override, dest="overrides", nargs="+", metavar="NAME RULE",
        help="an ACL user, as a `user` line of the config file (docs/security.md); "
        "repeat it for several users",
    )
    groups: dict[str, argparse._ArgumentGroup] = {}
    for setting in SETTINGS:
        group = groups.get(setting.section)
        if group is None:
            group = groups[setting.section] = parser.add_argument_group(
                f"{setting.section} settings"
            )
        group.add_argument(
            *(f"--{name}" for name in setting.names()),
            action=Override,
            dest="overrides",
            nargs="+" if setting.kind.multi_arg else None,
            metavar=_metavar(setting),
            help=f"{setting.doc} (default: {default_text(setting)})".replace("%", "%%"),
        )


def _metavar(setting: Setting) -> str:
    kind = setting.kind
    if kind.multi_arg:
        return "ARG"
    if isinstance(kind, BoolKind):
        return "yes|no"
    if isinstance(kind, EnumKind):
        return "|".join(kind.choices)
    if isinstance(kind, MemoryKind):
        return "SIZE"
    if isinstance(kind, IntKind):
        return "N"
    return setting.name.upper()


def default_text(setting: Setting) -> str:
    """The default as --help shows it: the flag's arguments, quoted as in a config file."""
    if isinstance(setting.kind, StringKind):
        return bare_or_quoted(str(setting.default))
    return " ".join(setting.kind.write(setting.default))


class _HelpFormatter(argparse.HelpFormatter):
    """Wraps help text between words only, so that names like soft-seconds stay whole."""

    def _split_lines(self, text: str, width: int) -> list[str]:
        return textwrap.wrap(" ".join(text.split()), width, break_on_hyphens=False)


class Override(argparse.Action):
    """Keeps each setting flag, as typed, with its words, in command-line order:
    Config.load reads them as lines appended to the config file."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[object] | None,
        option_string: str | None = None,
    ) -> None:
        words = [values] if isinstance(values, str) else [str(v) for v in values or ()]
        flag = option_string or self.option_strings[0]
        # A new list each time: the default list is shared by every parse.
        setattr(namespace, self.dest, [*getattr(namespace, self.dest), (flag, words)])


def overrides(args: argparse.Namespace) -> list[tuple[str, list[str]]]:
    """The setting flags given, as typed, with their words, in command-line order."""
    return list(args.overrides)


# The open files limit asked for when the hard limit is unlimited.
OPEN_FILES_MAX = 1 << 20


def setup_logging(config: Config) -> None:
    """One line per event (narad/logs.py), at `notice` by default: the start-up
    lines, routine events and warnings. The level and the format follow CONFIG SET
    loglevel and log-format; the file (`logfile`) is fixed at start."""
    logfile = str(config["logfile"])
    log_to(logfile, str(config["log-format"]))
    set_log_level(config["loglevel"])
    config.on_change("loglevel", set_log_level)
    config.on_change("log-format", lambda value: set_log_format(logfile, value))


def set_log_format(logfile: str, name: object) -> None:
    log_to(logfile, str(name))


def set_log_level(name: object) -> None:
    logging.getLogger("narad").setLevel(log_level(name))


def run(args: argparse.Namespace) -> int:
    if args.sentinel:
        from narad.sentinel import serve as sentinel_serve

        args.config_file = args.config_flag or args.config_file
        return sentinel_serve.run(args)
    # Imported here so that `narad check` and `narad dump` start fast.
    import asyncio

    import narad.commands  # noqa: F401 - fills the command table
    from narad.acl import AclFileError
    from narad.config import Config, ConfigError
    from narad.keyspace import DataDirBusy
    from narad.log.files import OPEN_FILES, process_limit
    from narad.server import ListenError, Server

    path = args.config_flag or args.config_file
    try:
        config = Config.load(path, overrides(args))
    except ConfigError as exc:
        print(f"narad: {exc}", file=sys.stderr)
        return 1
    setup_logging(config)
    raise_open_files_limit()
    OPEN_FILES.fit(process_limit())  # the limit as raised
    if not fit_maxclients(config, OPEN_FILES.clients_max):
        return 1
    from narad.tls import TLSError

    try:
        server = Server(config)
    except TLSError as exc:
        print(f"narad: Failed to configure TLS: {exc}", file=sys.stderr)
        return 1
    except AclFileError as exc:  # the users of narad.conf or the ACL file
        print(f"narad: {exc}", file=sys.stderr)
        return 1
    pidfile = PidFile(str(config["pidfile"]))
    try:
        with asyncio.Runner(loop_factory=loop_factory()) as runner:
            runner.run(server.serve(ready=lambda port: pidfile.write()))
    except (DataDirBusy, ListenError) as exc:
        logging.getLogger("narad.server").warning("event=start_failed reason=%s", str(exc))
        print(f"narad: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        logging.getLogger("narad.server").warning("event=start_failed reason=%s", str(exc))
        print(f"narad: {exc}", file=sys.stderr)
        return 1
    finally:
        pidfile.remove()
    return server.node.exit_status


class PidFile:
    """The `pidfile` setting: the process ID, written once the server holds its data
    dir and listens (so a second server refused the data dir never overwrites the
    first one's), removed when the server stops cleanly. Empty path: no file."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.written = False

    def write(self) -> None:
        if not self.path:
            return
        try:
            with open(self.path, "w") as f:
                f.write(f"{os.getpid()}\n")
        except OSError as exc:  # as Redis: a warning, the server runs on
            logging.getLogger("narad.server").warning(
                "event=pidfile_not_written path=%s reason=%s", self.path, exc
            )
            return
        self.written = True

    def remove(self) -> None:
        if self.written:
            with contextlib.suppress(OSError):
                os.unlink(self.path)
            self.written = False


def raise_open_files_limit() -> None:
    """Lift the soft limit on open files to the hard one, as Redis does at start:
    every client holds a descriptor, and so does every segment file of every log
    (a stream of 1,000 segments holds 1,000). A limit that cannot move stays."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY:
        hard = OPEN_FILES_MAX
    if soft != resource.RLIM_INFINITY and soft >= hard:
        return
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (OSError, ValueError) as exc:
        logging.getLogger("narad.server").warning(
            "event=open_files_limit limit=%d reason=%s: not raised", soft, exc
        )
        return
    logging.getLogger("narad.server").info(
        "event=open_files_limit limit=%d was=%d: raised", hard, soft
    )


def fit_maxclients(config: Config, clients_max: int) -> bool:
    """Lower `maxclients` to the `clients_max` the descriptor budget holds
    (narad/log/files.py), and say so, as Redis does at start; False, having said why,
    when not even one client fits."""
    import resource

    limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if clients_max < 1:
        print(
            f"narad: the open files limit ({limit}) leaves no descriptor for a client; "
            "raise it (ulimit -n)",
            file=sys.stderr,
        )
        return False
    wanted = int(config["maxclients"])  # type: ignore[call-overload]
    if wanted > clients_max:
        config.put("maxclients", str(clients_max))
        logging.getLogger("narad.server").warning(
            "event=maxclients_lowered requested=%d maxclients=%d open_files_limit=%d: "
            "raise the open files limit (ulimit -n) to serve more clients",
            wanted, clients_max, limit,
        )
    return True


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="narad server")
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
