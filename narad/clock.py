"""The clock queues keep time by: wall-clock milliseconds, which DEBUG CLOCK may
freeze or move forward so that tests can pass visibility deadlines without sleeping.

Only queue semantics read it (deadlines, delays, dedup windows, ages); log record
timestamps and stream IDs keep the real wall clock.
"""

from __future__ import annotations

import time


class Clock:
    def __init__(self) -> None:
        self.offset_ms = 0  # added to the wall clock
        self.frozen_ms: int | None = None  # when set, the clock stands still here

    def now_ms(self) -> int:
        if self.frozen_ms is not None:
            return self.frozen_ms
        return time.time_ns() // 1_000_000 + self.offset_ms

    def freeze(self, at_ms: int | None = None) -> int:
        self.frozen_ms = self.now_ms() if at_ms is None else at_ms
        return self.frozen_ms

    def advance(self, ms: int) -> int:
        if self.frozen_ms is not None:
            self.frozen_ms += ms
        else:
            self.offset_ms += ms
        return self.now_ms()

    def resume(self) -> None:
        """Run again from where the clock stands (it never goes back)."""
        if self.frozen_ms is not None:
            self.offset_ms = max(0, self.frozen_ms - time.time_ns() // 1_000_000)
            self.frozen_ms = None
