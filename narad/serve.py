"""`narad server`: load the configuration, open the keyspace, serve until told to stop.

Everything here is process plumbing (logging, event loop choice, exit codes); the
server itself is narad/server.py.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import asyncio

    from narad.config import Config

# Command-line flags that map one-to-one to settings of the same name.
FLAGS = (
    "port",
    "bind",
    "dir",
    "fsync",
    "requirepass",
    "maxclients",
    "databases",
    "loglevel",
    "logfile",
    "protected-mode",
    "segment-bytes",
    "retention-ms",
    "retention-bytes",
    "checkpoint-bytes",
    "checkpoint-seconds",
    "enable-debug-command",
    "shutdown-timeout",
)
LOG_LEVELS = {
    "debug": logging.DEBUG,
    "verbose": logging.INFO,
    "notice": logging.WARNING,
    "warning": logging.WARNING,
    "nothing": logging.CRITICAL + 1,
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config_file", nargs="?", help="a narad.conf (redis.conf syntax)")
    parser.add_argument(
        "--config", dest="config_flag", help="a narad.conf (same as the positional)"
    )
    for flag in FLAGS:
        parser.add_argument(f"--{flag}", dest=flag.replace("-", "_"), metavar=flag.upper())


def overrides(args: argparse.Namespace) -> list[tuple[str, str]]:
    pairs = []
    for flag in FLAGS:
        value = getattr(args, flag.replace("-", "_"))
        if value is not None:
            pairs.append((flag, str(value)))
    return pairs


# The open files limit asked for when the hard limit is unlimited.
OPEN_FILES_MAX = 1 << 20


def setup_logging(config: Config) -> None:
    """Structured, quiet by default: `notice` shows warnings and the ready line.
    The level follows CONFIG SET loglevel; the file (`logfile`) is fixed at start."""
    logfile = str(config["logfile"])
    handler: logging.Handler = logging.FileHandler(logfile) if logfile else logging.StreamHandler()
    handler.setFormatter(
        logging.Formatter("ts=%(asctime)s level=%(levelname)s logger=%(name)s msg=%(message)r")
    )
    logging.getLogger("narad").handlers[:] = [handler]
    set_log_level(config["loglevel"])
    config.on_change("loglevel", set_log_level)


def set_log_level(name: object) -> None:
    level = LOG_LEVELS.get(str(name), logging.WARNING)
    logging.getLogger("narad").setLevel(level)
    # The server's own lifecycle lines (ready, stopped) are shown at `notice` too.
    logging.getLogger("narad.server").setLevel(min(level, logging.INFO))


def run(args: argparse.Namespace) -> int:
    # Imported here so that `narad check` and `narad dump` start fast.
    import asyncio

    import narad.commands  # noqa: F401 - fills the command table
    from narad.config import Config, ConfigError
    from narad.keyspace import DataDirBusy
    from narad.log.files import OPEN_FILES, default_limit
    from narad.server import Server

    path = args.config_flag or args.config_file
    try:
        config = Config.load(path, overrides(args))
    except ConfigError as exc:
        print(f"narad: {exc}", file=sys.stderr)
        return 1
    setup_logging(config)
    raise_open_files_limit()
    OPEN_FILES.limit = default_limit()  # from the limit as raised
    server = Server(config)
    pidfile = PidFile(str(config["pidfile"]))
    try:
        with asyncio.Runner(loop_factory=_loop_factory()) as runner:
            runner.run(server.serve(ready=lambda port: pidfile.write()))
    except DataDirBusy as exc:
        print(f"narad: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"narad: {exc}", file=sys.stderr)
        return 1
    finally:
        pidfile.remove()
    return server.exit_status


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
            logging.getLogger("narad.server").warning("cannot write pidfile: %s", exc)
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
            "open files limit stays at %d: %s", soft, exc
        )
        return
    logging.getLogger("narad.server").info("open files limit raised from %d to %d", soft, hard)


def _loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's event loop where it is installed, else asyncio's own."""
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="narad server")
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
