"""How many examples a property test draws: its own count, scaled by NARAD_EXAMPLES
(a factor, default 1). CI's second run, on the pure-Python path, sets it below 1: the
compiled run draws every example through the same logic, and what the pure run must
show, that the fallback answers alike, a share of the draws shows."""

from __future__ import annotations

import os

SCALE = float(os.environ.get("NARAD_EXAMPLES", "1"))


def examples(count: int) -> int:
    return max(1, round(count * SCALE))
