"""The clock queues keep time by (deadlines, delays, dedup windows, ages): milliseconds
that read as the wall clock but move only as elapsed time does, so that no step of the
wall clock (NTP, an operator, a VM restored) passes every deadline at once or holds
them back.

It reads the wall clock once, when the node begins to lead (`anchor`: at start and at
promotion, when the queue service opens), and from then on adds elapsed time
(CLOCK_BOOTTIME: never stepped, and it counts a suspend as the time it was). Values
kept in the logs are readings of this clock; another process reads them against its
own anchor. DEBUG CLOCK may freeze it or move it forward so that tests can pass
deadlines without sleeping.

Log record timestamps and stream IDs keep the real wall clock (docs/queues.md, "Delays,
expiry and the clock").
"""

from __future__ import annotations

import time

# Elapsed time: no wall-clock step moves it. CLOCK_BOOTTIME is Linux's; elsewhere the
# monotonic clock, which stands still while the machine sleeps.
ELAPSED_CLOCK = getattr(time, "CLOCK_BOOTTIME", time.CLOCK_MONOTONIC)
_clock_gettime_ns = time.clock_gettime_ns  # bound once: `now_ms` is on every queue command


def wall_ms() -> int:
    return time.time_ns() // 1_000_000


def elapsed_ms() -> int:
    return _clock_gettime_ns(ELAPSED_CLOCK) // 1_000_000


class Clock:
    def __init__(self) -> None:
        self.frozen_ms: int | None = None  # when set, the clock stands still here
        self.base_ms = 0  # the reading minus elapsed_ms()
        self.wall_base_ms = 0  # the wall clock minus elapsed_ms() when last looked at
        self.anchor()

    def now_ms(self) -> int:
        if self.frozen_ms is not None:
            return self.frozen_ms
        return _clock_gettime_ns(ELAPSED_CLOCK) // 1_000_000 + self.base_ms

    def anchor(self) -> int:
        """Read the wall clock now, and run on from it; how far that moved the clock
        (not a frozen one, which stays where it stands). Only for when the node takes
        on queue state it did not time itself: within a lead, the clock never jumps."""
        before = self.now_ms()
        self.wall_base_ms = self.base_ms = wall_ms() - elapsed_ms()
        return self.now_ms() - before

    def wall_jump_ms(self, at_least_ms: int) -> int:
        """How far the wall clock stepped against elapsed time since this was last
        answered (0: by less than `at_least_ms` either way). The clock does not follow."""
        wall_base = wall_ms() - elapsed_ms()
        jump = wall_base - self.wall_base_ms
        if -at_least_ms < jump < at_least_ms:
            return 0
        self.wall_base_ms = wall_base
        return jump

    def skew_ms(self) -> int:
        """The reading minus the wall clock."""
        return self.now_ms() - wall_ms()

    def freeze(self, at_ms: int | None = None) -> int:
        self.frozen_ms = self.now_ms() if at_ms is None else at_ms
        return self.frozen_ms

    def advance(self, ms: int) -> int:
        if self.frozen_ms is not None:
            self.frozen_ms += ms
        else:
            self.base_ms += ms
        return self.now_ms()

    def resume(self) -> None:
        """Run again from where the clock stands, or from where it would stand had it
        not been frozen, whichever is later (it never goes back)."""
        if self.frozen_ms is not None:
            self.base_ms = max(self.base_ms, self.frozen_ms - elapsed_ms())
            self.frozen_ms = None
