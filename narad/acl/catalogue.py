"""The commands as ACL rules see them: each command's full name, its categories and
its subcommands. The command table (narad/commands/table.py) registers every command
here as it registers it there; rules are parsed against this catalogue, so a rule
naming a command or category Narad does not have is refused.

Categories are Redis 7.0's (in its order, which ACL CAT keeps) and Narad's own after
them: `queue` (the Q.* commands), `schema` (Q.SCHEMA), `replication` (what a replica
and a failover send a leader: PSYNC, REPLCONF, FENCE, PROMOTE, REPLICAOF, SLAVEOF)
and `sentinel` (what a sentinel sends a data node).
"""

from __future__ import annotations

from dataclasses import dataclass, field

REDIS_CATEGORIES = (
    "keyspace", "read", "write", "set", "sortedset", "list", "hash", "string", "bitmap",
    "hyperloglog", "geo", "stream", "pubsub", "admin", "fast", "slow", "blocking",
    "dangerous", "connection", "transaction", "scripting",
)
NARAD_CATEGORIES = ("queue", "schema", "replication", "sentinel")
CATEGORIES = REDIS_CATEGORIES + NARAD_CATEGORIES


@dataclass
class Entry:
    """One command or subcommand. `name` is the full lower-case name ("config|get")."""

    name: str
    categories: frozenset[str]
    no_auth: bool  # always allowed, as Redis allows AUTH, HELLO, ... to every user
    parent: Entry | None = None
    subcommands: dict[str, Entry] = field(default_factory=dict)


# Lower-case full name -> entry, in registration order (commands and subcommands).
ENTRIES: dict[str, Entry] = {}


def register(name: str, categories: tuple[str, ...], no_auth: bool) -> Entry:
    """Add (or replace) the command `name` ("parent|sub" for a subcommand);
    `categories` as the table writes them ("@read") or bare."""
    cats = frozenset(c.lstrip("@") for c in categories)
    unknown = cats - set(CATEGORIES)
    assert not unknown, f"{name}: unknown ACL categories {sorted(unknown)}"
    parent_name, _, sub = name.rpartition("|")
    parent = ENTRIES.get(parent_name) if parent_name else None
    old = ENTRIES.get(name)
    entry = Entry(name, cats, no_auth, parent, old.subcommands if old else {})
    ENTRIES[name] = entry
    if parent is not None:
        parent.subcommands[sub] = entry
    for child in entry.subcommands.values():
        child.parent = entry
    return entry


def lookup(name: str) -> Entry | None:
    return ENTRIES.get(name.lower())


def in_category(category: str) -> list[Entry]:
    """The commands and subcommands of `category` (bare name), in table order."""
    return [e for e in ENTRIES.values() if category in e.categories]
