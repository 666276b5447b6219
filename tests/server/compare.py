"""Side-by-side checks: the same commands against Narad and redis-server 7.0."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import redis


def outcome(client: redis.Redis, args: Sequence[Any]) -> Any:
    """The reply, or ("error", text) for an error reply."""
    try:
        return client.execute_command(*args)
    except redis.ResponseError as exc:
        return ("error", str(exc))


def run_both(
    narad: redis.Redis, real: redis.Redis, script: Sequence[Sequence[Any]]
) -> list[tuple[Sequence[Any], Any, Any]]:
    """Run `script` on both; return the (command, narad, redis) triples that differ."""
    diffs = []
    for args in script:
        mine, theirs = outcome(narad, args), outcome(real, args)
        if mine != theirs:
            diffs.append((args, mine, theirs))
    return diffs
