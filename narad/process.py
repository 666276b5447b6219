"""Process plumbing that `narad server` (narad/serve.py) and `narad sentinel`
(narad/sentinel/serve.py) share: the log's handler (its lines are narad/logs.py's),
and the choice of event loop. It imports only narad/logs.py: both use it, so the
sentinel's process needs nothing of narad/serve.py.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from narad.logs import LOG_LEVELS, LineFormatter

if TYPE_CHECKING:
    import asyncio  # not loaded at start: `narad check` and `narad dump` start fast

def log_level(name: object) -> int:
    """The logging level a `loglevel` value names; warnings for a name it does not know."""
    return LOG_LEVELS.get(str(name), logging.WARNING)


def log_to(logfile: str, log_format: str = "text") -> logging.Logger:
    """Send the "narad" logger's records, one line each (`log_format` text or json,
    narad/logs.py), to `logfile` (empty: standard error) and nowhere else it sent
    them before; the logger."""
    handler: logging.Handler = logging.FileHandler(logfile) if logfile else logging.StreamHandler()
    handler.setFormatter(LineFormatter(json_lines=log_format == "json"))
    root = logging.getLogger("narad")
    for old in root.handlers:
        old.close()
    root.handlers[:] = [handler]
    return root


def loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's event loop where it is installed, else asyncio's own."""
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop
