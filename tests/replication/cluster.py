"""Real Narad processes as a leader and its replicas, for the replication tests.

`Group` starts the nodes on free loopback ports (each in its own folder), points the
replicas at the leader with REPLICAOF, and waits until they hold the leader's
journal. `digests` reads a stopped node's logs from their files, so that the tests
can check that every node holds the same records at the same offsets.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import redis

from narad.log.check import folder_records
from tests.servers import NaradProcess, wait_until


def offset(node: NaradProcess) -> int:
    return int(node.client().info("replication")["master_repl_offset"])


def wait_synced(leader: NaradProcess, replicas: list[NaradProcess], timeout: float = 20) -> int:
    """Wait until every replica holds the leader's position; that position."""
    def synced() -> list[int]:
        target = offset(leader)
        return [target] if all(offset(r) == target for r in replicas) else []

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
    for other in others:
        assert first.keys() == other.keys(), (sorted(first), sorted(other))
        for folder, records in first.items():
            theirs = other[folder]
            both = records.keys() & theirs.keys()
            assert {k: records[k] for k in both} == {k: theirs[k] for k in both}, folder
            if records and theirs:  # the same end
                assert max(records) == max(theirs), folder


@contextmanager
def group(tmp_path: Path, replicas: int, extra: list[str] | None = None,
          replica_extra: list[str] | None = None) -> Iterator[list[NaradProcess]]:
    """A leader and `replicas` replicas following it, synced; stopped after."""
    nodes = [NaradProcess(tmp_path / "n0", extra)]
    nodes += [
        NaradProcess(tmp_path / f"n{i}", (extra or []) + (replica_extra or []))
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
