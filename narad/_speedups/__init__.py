"""Optional Cython twins of hot pure-Python functions.

The pure-Python module is always the reference; a twin here must give identical
results and is picked at import time by `load`. Setting NARAD_PURE=1 in the
environment forces the pure-Python path (the test suite runs both).
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType

PURE = os.environ.get("NARAD_PURE", "") not in ("", "0")


def load(name: str) -> ModuleType | None:
    """The compiled twin `narad._speedups.<name>`, or None when absent or disabled."""
    if PURE:
        return None
    try:
        return importlib.import_module(f"narad._speedups.{name}")
    except ImportError:
        return None
