"""What watches the commands a node runs: the slow log (SLOWLOG) and the sessions
in MONITOR. The dispatcher (narad/dispatch.py) feeds both after every call.

Owned by the event loop thread.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass
from typing import Any, Protocol

from narad.config import Config
from narad.resp import SimpleString


@dataclass
class SlowEntry:
    id: int
    at_s: int
    usec: int
    argv: list[bytes]
    addr: str
    name: str


class Observed(Protocol):
    """A session as the observers see it (narad/node.py's Session)."""

    db: int
    name: str

    @property
    def addr(self) -> str: ...

    def reply(self, value: Any) -> None: ...


class Observers:
    """The slow log and the MONITOR sessions of one node."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.slowlog: deque[SlowEntry] = deque()
        self.slowlog_next_id = 0
        # Sessions in MONITOR, in the order they asked (changed in place: the dispatcher
        # holds the list).
        self.monitors: list[Any] = []
        self.slowlog_threshold_us = int(config["slowlog-log-slower-than"])  # type: ignore[call-overload]
        config.on_change("slowlog-log-slower-than", self._set_slowlog_threshold)

    def _set_slowlog_threshold(self, value: object) -> None:
        self.slowlog_threshold_us = int(value)  # type: ignore[call-overload]

    def forget(self, session: object) -> None:
        """`session` is gone or reset: it monitors nothing any more."""
        if session in self.monitors:
            self.monitors.remove(session)

    def slowlog_add(self, session: Observed, argv: list[bytes], usec: int) -> None:
        shown = [
            a if len(a) <= 128 else a[:128] + b"... (%d more bytes)" % (len(a) - 128)
            for a in argv[:32]
        ]
        if len(argv) > 32:
            shown[-1] = b"... (%d more arguments)" % (len(argv) - 31)
        self.slowlog.appendleft(
            SlowEntry(
                self.slowlog_next_id, int(time.time()), usec, shown, session.addr, session.name
            )
        )
        self.slowlog_next_id += 1
        limit = int(self.config["slowlog-max-len"])  # type: ignore[call-overload]
        while len(self.slowlog) > limit:
            self.slowlog.pop()

    def feed_monitors(self, session: Observed, argv: list[bytes]) -> None:
        """MONITOR lines, as Redis 7.0 feeds them: after the command ran (so in its
        db after SELECT, queued commands before their EXEC), passwords redacted,
        admin commands not shown (the dispatcher leaves those out)."""
        now = time.time()
        args = " ".join('"' + _monitor_escape(a) + '"' for a in _redacted(argv))
        line = SimpleString(f"{now:.6f} [{session.db} {session.addr}] {args}")
        for monitor in self.monitors:
            if monitor is not session:
                monitor.reply(line)


def _redacted(argv: list[bytes]) -> list[bytes]:
    """`argv` as MONITOR may show it: AUTH's and HELLO AUTH's credentials hidden."""
    name = argv[0].lower()
    if name == b"auth":
        return [argv[0]] + [b"(redacted)"] * (len(argv) - 1)
    if name == b"hello":
        shown = list(argv)
        for i, arg in enumerate(argv):
            if arg.lower() == b"auth":
                shown[i + 1 : i + 3] = [b"(redacted)"] * len(shown[i + 1 : i + 3])
        return shown
    return argv


def _monitor_escape(arg: bytes) -> str:
    out = []
    for byte in arg:
        ch = chr(byte)
        if ch in '\\"':
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\r":
            out.append("\\r")
        elif ch == "\t":
            out.append("\\t")
        elif 32 <= byte < 127:
            out.append(ch)
        else:
            out.append(f"\\x{byte:02x}")
    return "".join(out)
