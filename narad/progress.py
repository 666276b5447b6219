"""A one-line progress bar on stderr for command-line tools.

Owns: one line of the terminal, redrawn in place: bar, percentage, bytes done of the
total, rate and ETA. Draws only when its stream is a terminal, so output that is piped,
redirected or captured stays clean. Never writes to stdout, and never costs the work it
measures more than a clock read per `advance`: it redraws at most every REDRAW_S.
"""

from __future__ import annotations

import shutil
import sys
import time
from collections.abc import Callable
from types import TracebackType
from typing import TextIO

# Seconds between redraws, at least.
REDRAW_S = 0.1
BAR_WIDTH = 12  # characters of the bar itself
_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")


def human_bytes(n: float) -> str:
    """`n` bytes in the largest binary unit that keeps it at least 1, e.g. '1.5 MiB'."""
    unit = 0
    while n >= 1024 and unit < len(_UNITS) - 1:
        n /= 1024
        unit += 1
    return f"{int(n)} B" if unit == 0 else f"{n:.1f} {_UNITS[unit]}"


def human_duration(seconds: float) -> str:
    """'m:ss' below an hour, 'h:mm:ss' from there."""
    whole = int(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


class Progress:
    """Progress towards `total` bytes, known up front. Owned by one thread.

    Use as a context manager; the line is erased on exit so that what the tool prints
    next starts on a clean line.
    """

    def __init__(
        self,
        total: int,
        label: str = "",
        stream: TextIO | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.total = max(total, 0)  # bytes expected
        self.done = 0  # bytes reported through `advance`
        self.label = label
        self._stream = sys.stderr if stream is None else stream
        self._clock = clock
        self._enabled = self._stream.isatty()
        self._started = clock()  # when counting began, for the rate
        self._drawn_at: float | None = None  # when the line was last drawn

    def __enter__(self) -> Progress:
        self._started = self._clock()
        self._draw(self._started)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._drawn_at is not None:
            self._stream.write("\r\x1b[K")
            self._stream.flush()
            self._drawn_at = None

    def advance(self, n: int) -> None:
        self.done += n
        if not self._enabled:
            return
        now = self._clock()
        if self._drawn_at is None or now - self._drawn_at >= REDRAW_S:
            self._draw(now)

    def render(self, now: float) -> str:
        """The line as it would be drawn at time `now` (clock seconds)."""
        fraction = min(self.done / self.total, 1.0) if self.total else 1.0
        filled = int(fraction * BAR_WIDTH)
        bar = "#" * filled + "." * (BAR_WIDTH - filled)
        elapsed = now - self._started
        rate = self.done / elapsed if elapsed > 0 else 0.0
        left = max(self.total - self.done, 0)
        eta = human_duration(left / rate) if rate > 0 else "-:--"
        label = f"{self.label} " if self.label else ""
        return (
            f"{label}[{bar}] {fraction * 100:5.1f}% "
            f"{human_bytes(self.done)} / {human_bytes(self.total)} "
            f"{human_bytes(rate)}/s ETA {eta}"
        )

    def _draw(self, now: float) -> None:
        if not self._enabled:
            return
        width = shutil.get_terminal_size((80, 24)).columns - 1
        self._stream.write("\r" + self.render(now)[:width] + "\x1b[K")
        self._stream.flush()
        self._drawn_at = now
