"""CONFIG REWRITE: the config file rewritten to hold the values in effect, and the
crash-safe replace of the old file by the new.

Comments, blank lines and line order are kept (runs of blank lines become one). A
setting's lines are replaced in place (by its main name); extra lines of it are
blanked; a setting the file lacks is appended, after a marker line, only if it differs
from its default. Lines that are not settings are kept as comments starting "# ??? ".
The new file replaces the old atomically (temp file, fsync, rename, fsync of the
folder) and keeps its permissions; a crash leaves the old or the new file whole.
Bytes that are not UTF-8 are carried as surrogate escapes and written back the same.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path

from narad.config.lexer import split_args
from narad.config.settings import SETTINGS, file_lines, lookup
from narad.log.checkpoint import fsync_dir

USER = "user"  # `user` lines: the users, not a setting (narad/acl/)
# Marks where CONFIG REWRITE starts appending settings the file did not have.
REWRITE_MARK = "# Settings below were added by CONFIG REWRITE"


def rewritten(
    old: list[str], values: Mapping[str, object], users: list[str] | None = None
) -> str:
    """The new text of the file whose lines were `old`, holding `values` (the typed
    values by main name) and the `user` lines `users` (None: none, and the old ones
    dropped, as Redis does when an ACL file holds the users)."""
    lines, slots = _index_lines(old)
    free = slots.pop(USER, [])
    for text in users or []:
        if free:
            lines[free.pop(0)] = text
        else:
            _append_marked(lines, text)
    for index in free:
        lines[index] = ""
    for setting in SETTINGS:
        free = slots.pop(setting.name, [])
        defaults = set(file_lines(setting, setting.default))
        for text in file_lines(setting, values[setting.name]):
            if free:
                lines[free.pop(0)] = text
            elif text not in defaults:
                _append_marked(lines, text)
        for index in free:
            lines[index] = ""
    return "".join(line + "\n" for line in _squeeze_blanks(lines))


def read_lines(path: Path) -> list[str]:
    """The lines of the file at `path`; none if it does not exist."""
    try:
        text = path.read_bytes().decode("utf-8", "surrogateescape")
    except FileNotFoundError:
        return []
    lines = text.split("\n")
    return lines[:-1] if lines[-1] == "" else lines


def _index_lines(old: list[str]) -> tuple[list[str], dict[str, list[int]]]:
    """The old file's lines, trimmed, and where each setting's lines are."""
    lines: list[str] = []
    slots: dict[str, list[int]] = {}
    for raw in old:
        line = raw.strip(" \t\r\n")
        args = split_args(line) if line and not line.startswith("#") else None
        setting = lookup(args[0]) if args else None
        if setting is not None:
            slots.setdefault(setting.name, []).append(len(lines))
        elif args and args[0].lower() == USER:
            slots.setdefault(USER, []).append(len(lines))
        elif line and not line.startswith("#") and not _is_include(args):
            line = f"# ??? {line}"
        lines.append(line)
    return lines, slots


def _is_include(args: list[str] | None) -> bool:
    return bool(args) and args is not None and args[0].lower() == "include"


def _append_marked(lines: list[str], text: str) -> None:
    if REWRITE_MARK not in lines:
        lines.append(REWRITE_MARK)
    lines.append(text)


def _squeeze_blanks(lines: list[str]) -> list[str]:
    out: list[str] = []
    for line in lines:
        if line or not out or out[-1]:
            out.append(line)
    return out


def replace_file(path: Path, text: str) -> None:
    """Replace `path` with `text` so that a crash leaves the old or the new file whole."""
    try:
        mode = path.stat().st_mode & 0o7777
    except FileNotFoundError:
        mode = 0o644
    fd, temp = tempfile.mkstemp(prefix=f"{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(text.encode("utf-8", "surrogateescape"))
            out.flush()
            os.fsync(out.fileno())
        os.chmod(temp, mode)
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise
    fsync_dir(path.parent)
