"""Real Narad processes as a leader and its replicas, for the replication tests.

`Group` starts the nodes on free loopback ports (each in its own folder), points the
replicas at the leader with REPLICAOF, and waits until they hold the leader's
journal. `digests` reads a stopped node's logs from their files, so that the tests
can check that every node holds the same records at the same offsets.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import redis

from narad.log.check import folder_records
from tests.servers import NaradProcess, wait_until


def offset(node: NaradProcess) -> int:
    return int(node.client().info("replication")["master_repl_offset"])


def wait_synced(leader: NaradProcess, replicas: list[NaradProcess], timeout: float = 20) -> int:
    """Wait until every replica's link is up and it holds the leader's position;
    that position. (An empty leader's position is a new replica's before its link is
    up: the position alone would pass at once.)"""
    def holds(replica: NaradProcess, target: int) -> bool:
        info = replica.client().info("replication")
        return info.get("master_link_status") == "up" and int(info["master_repl_offset"]) == target

    def synced() -> list[int]:
        target = offset(leader)
        return [target] if all(holds(r, target) for r in replicas) else []

    found: list[int] = wait_until(synced, timeout=timeout)
    return found[0]


def follow(replica: NaradProcess, leader: NaradProcess) -> None:
    assert replica.client().replicaof(leader.host, leader.port)


def digests(node: NaradProcess) -> dict[str, dict[int, str]]:
    """Every log of a (stopped) node's data dir: folder -> {offset: hash of payload}."""
    root = node.folder / "data"
    out: dict[str, dict[int, str]] = {}
    folders = [root / "journal", root / "meta"]
    streams = root / "streams"
    if streams.is_dir():
        for uid in sorted(streams.iterdir()):
            folders += [uid / "data", uid / "state"]
    for folder in folders:
        if folder.is_dir():
            out[str(folder.relative_to(root))] = {
                at: hashlib.blake2b(payload, digest_size=12).hexdigest()
                for at, payload in folder_records(folder)
            }
    return out


def assert_same_logs(nodes: list[NaradProcess]) -> None:
    """Every log that two stopped nodes both hold has the same record at each offset
    both hold (a start that moved further on one node is not a difference)."""
    first, *others = [digests(node) for node in nodes]
    for node, other in zip(nodes[1:], others, strict=True):
        assert first.keys() == other.keys(), (sorted(first), sorted(other))
        for folder, records in first.items():
            theirs = other[folder]
            both = records.keys() & theirs.keys()
            assert {k: records[k] for k in both} == {k: theirs[k] for k in both}, folder
            if records and theirs:  # the same end
                ends = (folder, nodes[0].folder.name, max(records), node.folder.name, max(theirs))
                assert max(records) == max(theirs), ends


# Makes a node from its folder and settings: NaradProcess, or tests/tls.py's
# TLSNaradProcess with its certificates bound.
NodeMaker = Callable[[Path, list[str]], NaradProcess]


@contextmanager
def group(tmp_path: Path, replicas: int, extra: list[str] | None = None,
          replica_extra: list[str] | None = None,
          make: NodeMaker = NaradProcess) -> Iterator[list[NaradProcess]]:
    """A leader and `replicas` replicas following it, synced; stopped after."""
    nodes = [make(tmp_path / "n0", extra or [])]
    nodes += [
        make(tmp_path / f"n{i}", (extra or []) + (replica_extra or []))
        for i in range(1, replicas + 1)
    ]
    try:
        for node in nodes:
            node.start()
        for node in nodes[1:]:
            follow(node, nodes[0])
        wait_synced(nodes[0], nodes[1:])
        yield nodes
    finally:
        for node in nodes:
            if node.proc is not None:
                node.stop()


def leader_of(nodes: list[NaradProcess]) -> redis.Redis:
    return nodes[0].client()


# -- a workload of every kind of change, and what a client reads of it ------------------

SCHEMA = json.dumps({"type": "object", "required": ["n"]})


def write_everything(r: redis.Redis, tag: str) -> None:
    """Streams, groups and their deliveries and acks, a queue with deliveries, a
    schema, renames and deletes: every kind of change a commit can carry."""
    for i in range(20):
        r.xadd(f"s-{tag}", {"i": i})
    r.xgroup_create(f"s-{tag}", "g", id="0")
    got = r.xreadgroup("g", "c1", {f"s-{tag}": ">"}, count=5)
    r.xack(f"s-{tag}", "g", *[mid for mid, _ in got[0][1][:3]])
    r.xtrim(f"s-{tag}", maxlen=15)
    r.execute_command("Q.CREATE", f"q-{tag}", "VISIBILITY", 30000)
    for i in range(10):
        r.execute_command("Q.PUSH", f"q-{tag}", json.dumps({"n": i}))
    popped = r.execute_command("Q.POP", f"q-{tag}", "COUNT", 4)
    r.execute_command("Q.ACK", f"q-{tag}", popped[0][b"receipt"])
    r.execute_command("Q.SCHEMA", "SET", f"q-{tag}", SCHEMA)
    r.execute_command("Q.CREATE", f"sub-{tag}", "MAXRECEIVES", 3)
    r.execute_command("Q.SUBSCRIBE", f"sub-{tag}", f"q-{tag}", "FROM", "EARLIEST")
    r.execute_command("Q.PUSH", f"q-{tag}", json.dumps({"n": 99}))  # copied by fan-out
    wait_until(lambda: queue_stats(r, f"sub-{tag}")[b"pushed"] == 11)
    r.xadd(f"tmp-{tag}", {"x": 1})
    r.rename(f"tmp-{tag}", f"renamed-{tag}")
    r.xadd(f"gone-{tag}", {"x": 1})
    r.delete(f"gone-{tag}")


def state_of(r: redis.Redis, tag: str) -> list[object]:
    """What a client reads of that state."""
    return [
        r.xrange(f"s-{tag}"),
        r.xinfo_groups(f"s-{tag}"),
        r.xpending(f"s-{tag}", "g"),
        r.xlen(f"s-{tag}"),
        queue_stats(r, f"q-{tag}"),
        queue_stats(r, f"sub-{tag}"),
        r.xrange(f"sub-{tag}"),
        r.execute_command("Q.SCHEMA", "GET", f"q-{tag}"),
        r.exists(f"renamed-{tag}", f"tmp-{tag}", f"gone-{tag}"),
        sorted(r.keys("*")),
    ]


def queue_stats(r: redis.Redis, queue: str) -> dict[bytes, object]:
    """Q.STATS but for the age of the oldest message, which grows as it is read."""
    stats = dict(r.execute_command("Q.STATS", queue))
    del stats[b"oldest_visible_age_ms"]
    return stats
