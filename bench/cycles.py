"""What bench/queue_cycle.py and bench/group_cycle.py share: one client on an
in-process server, and the report of the best of three runs."""

from __future__ import annotations

import asyncio
import contextlib
import sys
import tempfile
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.server.inprocess import connect, open_server  # noqa: E402


@contextlib.asynccontextmanager
async def one_client() -> AsyncIterator[tuple[Any, Any]]:
    """A server whose store opens in a temporary folder (`fsync no`), and the
    server-side connection of one client."""
    with tempfile.TemporaryDirectory() as tmp:
        server = open_server(Path(tmp), ("appendfsync", "no"))
        ours = await connect(server)  # kept open for the run
        await asyncio.sleep(0.01)  # the connection is made
        (client,) = server.node.sessions.values()
        try:
            yield server, client
        finally:
            server.node.keyspace.close()
            ours.close()


def report(
    run: Callable[[], dict[str, float]], steps: tuple[str, ...], calls: dict[str, int], label: str
) -> None:
    """Run three times; print the best microseconds per call of each step, and the
    cycle (each step times its `calls` per cycle, default 1), as a Markdown table."""
    runs = [run() for _ in range(3)]
    best = {step: min(r[step] for r in runs) for step in steps}
    per_cycle = sum(best[step] * calls.get(step, 1) for step in steps)
    print(f"{label}; us of CPU per call, min of 3 runs")
    print("| " + " | ".join(steps) + " | cycle |")
    print("|" + "---|" * (len(steps) + 1))
    print("| " + " | ".join(f"{best[s]:.2f}" for s in steps) + f" | {per_cycle:.1f} |")


def built(module: Any) -> str:
    """Whether `module` runs compiled or as source."""
    return "source" if (module.__file__ or "").endswith(".py") else "compiled"
