"""Process plumbing that `narad server` (narad/serve.py) and `narad sentinel`
(narad/sentinel/serve.py) share: the `loglevel` names, the log's handler and line
format, and the choice of event loop. It imports no other narad module: both use it,
so the sentinel's process needs nothing of narad/serve.py.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import asyncio  # not loaded at start: `narad check` and `narad dump` start fast

# `loglevel`'s values (redis.conf's names), as logging levels.
LOG_LEVELS = {
    "debug": logging.DEBUG,
    "verbose": logging.INFO,
    "notice": logging.WARNING,
    "warning": logging.WARNING,
    "nothing": logging.CRITICAL + 1,
}

LOG_FORMAT = "ts=%(asctime)s level=%(levelname)s logger=%(name)s msg=%(message)r"


def log_level(name: object) -> int:
    """The logging level a `loglevel` value names; warnings for a name it does not know."""
    return LOG_LEVELS.get(str(name), logging.WARNING)


def log_to(logfile: str) -> logging.Logger:
    """Send the "narad" logger's records, one structured line each, to `logfile` (empty:
    standard error) and nowhere else it sent them before; the logger."""
    handler: logging.Handler = logging.FileHandler(logfile) if logfile else logging.StreamHandler()
    handler.setFormatter(logging.Formatter(LOG_FORMAT))
    root = logging.getLogger("narad")
    root.handlers[:] = [handler]
    return root


def loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's event loop where it is installed, else asyncio's own."""
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop
