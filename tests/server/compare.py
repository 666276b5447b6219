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


# -- the deliberate XSETID difference (docs/streams.md) ------------------------------

XSETID_BELOW_HELD = (
    "error",
    "ERR The ID specified in XSETID is smaller than the ID of an entry the stream held",
)


def parted(mine: Any, theirs: Any) -> bool:
    """Whether the replies show the deliberate XSETID difference, alone or in EXEC's."""
    if mine == XSETID_BELOW_HELD and theirs == b"OK":
        return True
    return (
        isinstance(mine, list)
        and isinstance(theirs, list)
        and len(mine) == len(theirs)
        and any(parted(a, b) for a, b in zip(mine, theirs, strict=True))
    )


# -- numbers that depend on the clock -------------------------------------------------

RADIX = {b"radix-tree-keys", b"radix-tree-nodes"}  # Narad's stand-ins (docs/streams.md)


def mask_clock(args: Sequence[Any], reply: Any, radix: bool = False) -> Any:
    """`reply` to `args` with its clock-dependent numbers (idle and delivery times)
    replaced by "T", and with `radix` XINFO STREAM's radix tree sizes too. A map
    reply may be a dict, RESP2's flat list, or ("map", flat list)."""
    if not isinstance(reply, (list, dict)) and not _is_tagged_map(reply):
        return reply  # a plain value, or an error
    name = " ".join(a.decode() if isinstance(a, bytes) else str(a) for a in args[:2]).lower()
    if name.startswith("xpending") and len(args) > 3:
        return [[*item[:2], "T", item[3]] for item in reply]
    if name == "xinfo consumers":
        return [_mask_map(item, {b"idle"}, {}) for item in reply]
    if name == "xinfo stream":
        full = len(args) > 3
        groups = {b"groups": lambda gs: [_mask_group(g) for g in gs]} if full else {}
        return _mask_map(reply, RADIX if radix else set(), groups)
    return reply


def _is_tagged_map(value: Any) -> bool:
    return isinstance(value, tuple) and value[:1] == ("map",)


def _mask_map(m: Any, keys: set[bytes], inner: dict[bytes, Any]) -> Any:
    """A map reply with the values under `keys` replaced by "T" and those under
    `inner`'s keys passed through its functions."""
    if _is_tagged_map(m):
        return (m[0], _mask_map(m[1], keys, inner))
    if isinstance(m, dict):
        return {k: "T" if k in keys else inner[k](v) if k in inner else v for k, v in m.items()}
    if not isinstance(m, list):
        return m
    out = list(m)
    for i in range(0, len(out) - 1, 2):
        if out[i] in keys:
            out[i + 1] = "T"
        elif out[i] in inner:
            out[i + 1] = inner[out[i]](out[i + 1])
    return out


# XINFO STREAM FULL's group fields that Redis 8 added (docs/streams.md): left out of
# the comparison with redis-server 7.0.
REDIS_8_GROUP_FIELDS = {b"nacked-count"}


def _without(m: Any, keys: set[bytes]) -> Any:
    """A map reply without the entries under `keys`."""
    if _is_tagged_map(m):
        return (m[0], _without(m[1], keys))
    if isinstance(m, dict):
        return {k: v for k, v in m.items() if k not in keys}
    if not isinstance(m, list):
        return m
    out = []
    for i in range(0, len(m) - 1, 2):
        if m[i] not in keys:
            out += m[i : i + 2]
    return out


def _mask_group(group: Any) -> Any:
    return _mask_map(
        _without(group, REDIS_8_GROUP_FIELDS),
        set(),
        {
            b"pending": lambda ps: [[p[0], p[1], "T", p[3]] for p in ps],
            b"consumers": lambda cs: [_mask_consumer(c) for c in cs],
        },
    )


def _mask_consumer(consumer: Any) -> Any:
    return _mask_map(
        consumer, {b"seen-time"}, {b"pending": lambda ps: [[p[0], "T", p[2]] for p in ps]}
    )
