"""The ACL log (ACL LOG): refusals and failed log-ins, newest first, at most
`acllog-max-len` entries. As Redis does, a refusal like one of the 10 newest entries
(same reason, context, object and user, within 60 s of it) counts into that entry
and moves it to the front instead of adding another.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

GROUPING_MS = 60_000
SCANNED = 10

REASONS = ("command", "key", "channel", "auth")
CONTEXTS = ("toplevel", "multi")


@dataclass
class Entry:
    count: int
    reason: str
    context: str
    object: bytes
    username: bytes
    client_info: str
    entry_id: int
    created_ms: int
    updated_ms: int


class AclLog:
    def __init__(self, max_len: int = 128) -> None:
        self.max_len = max_len
        self.entries: list[Entry] = []  # newest first
        self._next_id = 0

    def add(
        self, reason: str, context: str, obj: bytes, username: bytes, client_info: str
    ) -> None:
        now = int(time.time() * 1000)
        for i, entry in enumerate(self.entries[:SCANNED]):
            if (
                entry.reason == reason
                and entry.context == context
                and abs(now - entry.updated_ms) <= GROUPING_MS
                and entry.object == obj
                and entry.username == username
            ):
                entry.count += 1
                entry.client_info = client_info
                entry.updated_ms = now
                self.entries.insert(0, self.entries.pop(i))
                return
        self.entries.insert(
            0,
            Entry(1, reason, context, obj, username, client_info, self._next_id, now, now),
        )
        self._next_id += 1
        self.trim()

    def trim(self) -> None:
        del self.entries[max(self.max_len, 0) :]

    def reset(self) -> None:
        self.entries.clear()

    def reply(self, count: int) -> list[dict[bytes, Any]]:
        """ACL LOG [count]: the newest `count` entries as Redis 7.2 shapes them."""
        now = int(time.time() * 1000)
        return [
            {
                b"count": e.count,
                b"reason": e.reason.encode(),
                b"context": e.context.encode(),
                b"object": e.object,
                b"username": e.username,
                b"age-seconds": (now - e.updated_ms) / 1000,
                b"client-info": e.client_info.encode(),
                b"entry-id": e.entry_id,
                b"timestamp-created": e.created_ms,
                b"timestamp-last-updated": e.updated_ms,
            }
            for e in self.entries[: max(count, 0)]
        ]
