"""Narad's settings in effect (`Config`): loading the config file and command-line
flags, CONFIG GET, CONFIG SET and CONFIG REWRITE, with the exact error texts of Redis
7.0 for all of these (`ConfigError`).

The config file is in redis.conf syntax: one `name arg ...` per line, `#` comments at
the start of a line, arguments split and quoted as redis-server splits them. CONFIG GET
takes Redis's glob, case-insensitive; CONFIG SET takes several pairs, all or nothing;
CONFIG REWRITE keeps comments and line order and writes atomically.

It never opens sockets and never changes the process (no chdir, no daemonizing): a
setting's effect belongs to whoever reads it, told of runtime changes by `on_change`.
File I/O happens only in `Config.load` and `Config.rewrite`.

Values are text (`str`); bytes a client or a file gives that are not UTF-8 are
carried as surrogate escapes, so they encode back to the same bytes.

The package's other modules:

- settings.py: the table of settings and lookup by name;
- kinds.py: how each kind of value parses, shows and writes (BadValue);
- lexer.py: redis.conf's argument splitting and quoting;
- numbers.py: integers, byte counts and percentiles as Redis reads and writes them;
- rewrite.py: CONFIG REWRITE's new file text and the crash-safe replace;
- example.py: conf/narad.conf, rendered from the table.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import NamedTuple

from narad.config.kinds import BadValue
from narad.config.lexer import bare_or_quoted, split_args
from narad.config.rewrite import read_lines, replace_file, rewritten
from narad.config.settings import SETTINGS, Setting, lookup
from narad.glob import match_text

# A command-line flag's name and its arguments: one string, or the words after the flag.
Override = tuple[str, str | Sequence[str]]


class ConfigError(Exception):
    """A configuration refused: a bad config file line, CONFIG SET, or CONFIG REWRITE.

    `str(error)` is the whole error text *without* an error code; the server answers
    it as `ERR <text>`. `reason` is the last part alone (e.g. "argument must be 'yes'
    or 'no'"); for a file line, `path` and `line` say where it is.
    """

    def __init__(
        self,
        message: str,
        reason: str | None = None,
        path: str | None = None,
        line: int | None = None,
    ) -> None:
        super().__init__(message)
        self.reason = message if reason is None else reason
        self.path = path
        self.line = line


class _Where(NamedTuple):
    """Where a setting line came from, for error texts."""

    heading: str  # "Reading the configuration file conf/narad.conf, at line 3"
    text: str  # the line itself
    path: str | None = None
    line: int | None = None

    def error(self, reason: str) -> ConfigError:
        return ConfigError(
            f"{self.heading}\n>>> '{self.text}'\n{reason}", reason, self.path, self.line
        )


class Config:
    """The settings in effect: defaults, then the config file, then overrides, then
    CONFIG SET. Owned by the server's event loop thread; not thread-safe.

    `path` is the absolute path of the file it was loaded from (None: no file), the
    file CONFIG REWRITE writes.
    """

    def __init__(self, path: Path | None = None) -> None:
        self.path = path
        self._values: dict[str, object] = {s.name: s.default for s in SETTINGS}
        self._callbacks: dict[str, list[Callable[[object], None]]] = {}
        # The `user <name> <rule> ...` lines, each its words after `user`: not a
        # setting (CONFIG GET does not show them) but the users the node starts with
        # (narad/acl/). `users_for_rewrite`, set by the node, gives the `user` lines
        # CONFIG REWRITE writes (None: drop them, an ACL file holds the users).
        self.user_lines: list[list[str]] = []
        self.users_for_rewrite: Callable[[], list[str] | None] = lambda: []

    # -- loading ------------------------------------------------------------------------

    @classmethod
    def load(
        cls, path: str | Path | None = None, overrides: Sequence[Override] = ()
    ) -> Config:
        """Defaults, then the file at `path` (redis.conf syntax), then `overrides`:
        (name, arguments) pairs from command-line flags, in command-line order (a
        leading "--" is allowed). The arguments are one string, or a list of them as
        the words after a flag; either way they are read as a config-file line's
        arguments are, so the overrides act as lines appended to the file: the first
        of a setting replaces what the file set, and later ones of an accumulating
        setting (`save`) add to it.

        Raises ConfigError naming the file and line (or the flag) for an unknown
        name, a wrong number of arguments, a bad value, bad quoting or `include`.
        """
        config = cls(Path(path).absolute() if path is not None else None)
        if path is not None:
            config._load_file(str(path))
        seen: set[str] = set()
        for name, value in overrides:
            config._load_override(name, [value] if isinstance(value, str) else value, seen)
        return config

    def _load_file(self, shown: str) -> None:
        assert self.path is not None
        try:
            text = self.path.read_bytes().decode("utf-8", "surrogateescape")
        except OSError as exc:
            raise ConfigError(f"can't open config file '{shown}': {exc.strerror}") from None
        seen: set[str] = set()
        for number, raw in enumerate(text.split("\n"), 1):
            line = raw.strip(" \t\r\n")
            if line and not line.startswith("#"):
                where = _Where(
                    f"Reading the configuration file {shown}, at line {number}",
                    line,
                    shown,
                    number,
                )
                self._load_line(line, where, seen)

    def _load_line(self, line: str, where: _Where, seen: set[str]) -> None:
        args = split_args(line)
        if args is None:
            raise where.error("Unbalanced quotes in configuration line")
        if not args:
            return
        setting = lookup(args[0])
        if setting is None and args[0].lower() == "user" and len(args) >= 2:
            if any(words[0] == args[1] for words in self.user_lines):
                raise where.error(
                    f"Error in user declaration '{args[1]}': Duplicate user found. A user "
                    "can only be defined once in config files"
                )
            self.user_lines.append(args[1:])
            return
        if setting is None:
            if args[0].lower() == "include":
                raise where.error("include is not supported: keep all settings in one file")
            raise where.error("Bad directive or wrong number of arguments")
        self._load_arguments(setting, args[1:], where, seen)

    def _load_arguments(
        self, setting: Setting, args: list[str], where: _Where, seen: set[str]
    ) -> None:
        """Set `setting` from the arguments of one line (or flag); `seen` holds the
        settings earlier lines of the same source set."""
        values = self._file_arguments(setting, args, where)
        value = self._parse(setting, values, where)
        if setting.kind.accumulates and setting.name in seen and value:
            value = f"{self._values[setting.name]} {value}".strip()
        seen.add(setting.name)
        self._values[setting.name] = value

    @staticmethod
    def _file_arguments(setting: Setting, values: list[str], where: _Where) -> list[str]:
        """A multi-argument setting given one non-empty argument is split again, so
        that `--save "900 1"` and `save "900 1"` work as in Redis."""
        if not setting.kind.multi_arg:
            if len(values) != 1:
                raise where.error("wrong number of arguments")
            return values
        if len(values) == 1 and values[0]:
            again = split_args(values[0])
            if again is None:
                raise where.error("Unbalanced quotes in configuration line")
            return again
        return values

    def _parse(self, setting: Setting, values: Sequence[str], where: _Where) -> object:
        try:
            return setting.kind.parse(values, self._values[setting.name])
        except BadValue as exc:
            raise where.error(str(exc)) from None

    def _load_override(self, name: str, args: Sequence[str], seen: set[str]) -> None:
        flag = name if name.startswith("--") else f"--{name}"
        bare = flag[2:]
        line = " ".join([bare, *(bare_or_quoted(arg) for arg in args)])
        where = _Where(f"Reading the command line, at option {flag}", line)
        if bare.lower() == "user":  # `--user NAME RULE...` is a `user` line, as in Redis
            self._load_line(line, where, seen)
            return
        setting = lookup(bare)
        if setting is None:
            raise where.error("Bad directive or wrong number of arguments")
        self._load_arguments(setting, list(args), where, seen)

    # -- reading ------------------------------------------------------------------------

    def __getitem__(self, name: str) -> object:
        """The typed value of a setting (any name or alias): bool, int, str, or
        OutputBufferLimits. Raises KeyError for an unknown name."""
        setting = lookup(name)
        if setting is None:
            raise KeyError(name)
        return self._values[setting.name]

    def show(self, name: str) -> str:
        """A setting's value as CONFIG GET renders it."""
        setting = lookup(name)
        if setting is None:
            raise KeyError(name)
        return setting.kind.show(self._values[setting.name])

    def settings(self) -> list[Setting]:
        return list(SETTINGS)

    def get(self, patterns: Sequence[str]) -> list[tuple[str, str]]:
        """CONFIG GET pattern [pattern ...]: (name, value) pairs, each name once.

        A pattern without * ? or [ is a name looked up as is (any case) and answered
        under the spelling given; other patterns are Redis globs, case-insensitive,
        matched against every name and alias, answered in table order. An alias is a
        name of its own: `*fsync` answers both fsync and appendfsync.
        """
        found: dict[str, tuple[str, str]] = {}
        for pattern in patterns:
            for shown, setting in self._matches(pattern):
                if shown.lower() not in found:
                    value = setting.kind.show(self._values[setting.name])
                    found[shown.lower()] = (shown, value)
        return list(found.values())

    @staticmethod
    def _matches(pattern: str) -> Iterable[tuple[str, Setting]]:
        if not any(ch in pattern for ch in "*?["):
            setting = lookup(pattern)
            return [(pattern, setting)] if setting is not None else []
        return [(name, s) for s in SETTINGS for name in s.names() if match_text(pattern, name)]

    # -- CONFIG SET ---------------------------------------------------------------------

    def set(self, pairs: Sequence[tuple[str, str]]) -> None:
        """CONFIG SET name value [name value ...]: all pairs or none.

        Checks every name first: the first unknown, immutable or repeated one (an
        alias of an earlier name counts as a repeat) is refused. Then every value is
        parsed against a copy; the first bad one is refused and nothing changes.
        A multi-argument setting's value is split at single spaces, as Redis does.
        Then the new values are applied: callbacks run in the order of the pairs.
        A callback that cannot apply its value (it raises BadValue: a port that
        cannot be bound) makes the whole set fail, as Redis's does: the old values
        come back and the callbacks that already ran are run again with them, so what
        is in effect and what CONFIG GET and REWRITE see stay the same. The caller
        checks the command's arity (an odd argument count is Redis's "syntax error").
        """
        chosen = self._check_names(pairs)
        values = dict(self._values)
        for (name, text), setting in zip(pairs, chosen, strict=True):
            args = _set_arguments(setting, text)
            try:
                values[setting.name] = setting.kind.parse(args, values[setting.name])
            except BadValue as exc:
                raise _set_error(name.lower(), str(exc)) from None
        old, self._values = self._values, values
        applied: list[Setting] = []
        try:
            for setting in chosen:
                applied.append(setting)
                self._apply(setting)
        except BadValue as exc:
            self._values = old
            for setting in applied:
                with contextlib.suppress(BadValue):
                    self._apply(setting)
            raise _set_error(applied[-1].name, str(exc)) from None

    def put(self, name: str, text: str) -> None:
        """Set `name` from the server's own commands (REPLICAOF sets replicaof, which
        CONFIG SET may not), parsed as CONFIG SET parses it; no callback runs."""
        setting = lookup(name)
        if setting is None:
            raise KeyError(name)
        args = _set_arguments(setting, text)
        try:
            self._values[setting.name] = setting.kind.parse(args, self._values[setting.name])
        except BadValue as exc:
            raise _set_error(name.lower(), str(exc)) from None

    def _apply(self, setting: Setting) -> None:
        for callback in self._callbacks.get(setting.name, []):
            callback(self._values[setting.name])

    @staticmethod
    def _check_names(pairs: Sequence[tuple[str, str]]) -> list[Setting]:
        chosen: list[Setting] = []
        for name, _ in pairs:
            setting = lookup(name)
            if setting is None:
                raise ConfigError(
                    f"Unknown option or number of arguments for CONFIG SET - '{name}'"
                )
            if not setting.mutable:
                raise _set_error(name, "can't set immutable config")
            if any(s is setting for s in chosen):
                raise _set_error(name, "duplicate parameter")
            chosen.append(setting)
        return chosen

    def on_change(self, name: str, callback: Callable[[object], None]) -> None:
        """Call `callback(new typed value)` after each CONFIG SET of the setting
        `name` (any name or alias), even if the value is the same. The callback puts
        the value in effect, or raises BadValue with the reason it cannot (see `set`).
        Every mutable setting has one, except those read afresh wherever they are
        used (tests/test_config.py keeps the list, READ_WHERE_USED)."""
        setting = lookup(name)
        if setting is None:
            raise KeyError(name)
        self._callbacks.setdefault(setting.name, []).append(callback)

    # -- CONFIG REWRITE -----------------------------------------------------------------

    def rewrite(self) -> None:
        """CONFIG REWRITE: write the values in effect into `path`, keeping its comments
        and line order, and replace the old file atomically (narad/config/rewrite.py)."""
        if self.path is None:
            raise ConfigError("The server is running without a config file")
        try:
            old = read_lines(self.path)
            replace_file(self.path, rewritten(old, self._values, self.users_for_rewrite()))
        except OSError as exc:
            raise ConfigError(f"Rewriting config file: {exc.strerror or exc}") from None


def _set_arguments(setting: Setting, text: str) -> list[str]:
    if not setting.kind.multi_arg:
        return [text]
    return text.split(" ") if text else []


def _set_error(name: str, reason: str) -> ConfigError:
    message = f"CONFIG SET failed (possibly related to argument '{name}') - {reason}"
    return ConfigError(message, reason)
