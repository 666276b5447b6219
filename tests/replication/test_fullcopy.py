"""A replica that cannot follow from its own position gets a full copy of the logs,
then follows the journal: from behind the kept journal, from another history, after
a kill -9 in the middle of the copy, and after a crash in the middle of installing
it. A replica that is only slow keeps its place in the journal instead."""

from __future__ import annotations

import shutil
import signal
from collections.abc import Iterator
from contextlib import contextmanager

from narad.log import checkpoint
from narad.log.install import COMPLETE, INCOMING
from tests.replication.cluster import (
    assert_same_logs,
    follow,
    group,
    state_of,
    wait_synced,
    write_everything,
)
from tests.servers import NaradProcess, wait_until

# Small journal segments and no backlog: the leader's journal soon starts past 0.
SHORT_JOURNAL = [
    "--journal-segment-bytes", "1mb", "--checkpoint-bytes", "1mb", "--repl-backlog-size", "0",
]


def _fill(node: NaradProcess, megabytes: int, streams: int = 20, size: int = 1000) -> None:
    """About `megabytes` of XADD over `streams` streams, pipelined."""
    r = node.client()
    pipe = r.pipeline(transaction=False)
    for i in range(megabytes * 1024 * 1024 // size):
        pipe.xadd(f"bulk{i % streams}", {"v": b"x" * size})
        if i % 500 == 499:
            pipe.execute()
    pipe.execute()


def _journal_start(node: NaradProcess) -> int:
    return int(node.client().info("replication")["repl_backlog_first_byte_offset"])


def _copies(node: NaradProcess) -> int:
    return node.log().count("event=full_copy_received")


@contextmanager
def stopped(node: NaradProcess) -> Iterator[None]:
    """`node` SIGSTOPped for the block, then SIGCONTed (also when the block fails)."""
    assert node.proc is not None
    node.proc.send_signal(signal.SIGSTOP)
    try:
        yield
    finally:
        node.proc.send_signal(signal.SIGCONT)


def _stop_all(nodes: list[NaradProcess]) -> None:
    for node in nodes:
        if node.proc is not None and node.proc.poll() is None:
            node.proc.send_signal(signal.SIGCONT)
            node.stop()


def test_a_replica_behind_the_kept_journal_or_of_another_history_gets_a_full_copy(tmp_path):
    leader = NaradProcess(tmp_path / "leader", SHORT_JOURNAL).start()
    empty = NaradProcess(tmp_path / "empty").start()
    other = NaradProcess(tmp_path / "other").start()  # a leader of its own history
    nodes = [leader, empty, other]
    try:
        r = leader.client()
        write_everything(r, "before")
        _fill(leader, 4)
        wait_until(lambda: _journal_start(leader) > 0, timeout=20)
        other.client().xadd("own", {"mine": 1})
        other.client().xadd("before-only-here", {"x": 1})
        for replica in (empty, other):
            follow(replica, leader)
        wait_synced(leader, [empty, other], timeout=60)
        want = state_of(r, "before")
        for replica in (empty, other):
            assert _copies(replica) == 1
            rr = replica.client()
            assert state_of(rr, "before") == want
            assert rr.exists("own", "before-only-here") == 0  # its own history is gone
            assert rr.xlen("bulk3") == r.xlen("bulk3")
        write_everything(r, "live")  # then the journal, from where the copy stands
        wait_synced(leader, [empty, other])
        for replica in (empty, other):
            assert state_of(replica.client(), "live") == state_of(r, "live")
            assert _copies(replica) == 1
    finally:
        _stop_all(nodes)
    assert_same_logs(nodes)


def test_a_replica_killed_during_its_full_copy_starts_on_its_old_data_and_copies_again(
    tmp_path,
):
    leader = NaradProcess(tmp_path / "leader", SHORT_JOURNAL).start()
    replica = NaradProcess(tmp_path / "replica").start()
    nodes = [leader, replica]
    incoming = replica.folder / "data" / INCOMING
    try:
        _fill(leader, 60, streams=200, size=4000)
        wait_until(lambda: _journal_start(leader) > 0, timeout=20)
        replica.client().xadd("own", {"mine": 1})
        follow(replica, leader)
        _wait_copying(replica)
        replica.kill()
        assert incoming.is_dir() and not (incoming / COMPLETE).exists(), "copy finished"
        replica.start()
        # What it held before is still there and readable, the half copy is gone...
        assert replica.client().xlen("own") == 1
        assert "event=incomplete_copy_deleted" in replica.log()
        # ...and it follows its leader again, with a copy made from the start.
        wait_synced(leader, [replica], timeout=90)
        assert _copies(replica) == 1
        assert replica.client().exists("own") == 0
        assert replica.client().xlen("bulk7") == leader.client().xlen("bulk7")
    finally:
        _stop_all(nodes)
    assert_same_logs(nodes)


def _wait_copying(replica: NaradProcess) -> None:
    """Until `replica` is receiving a full copy into its incoming/."""
    incoming = replica.folder / "data" / INCOMING

    def copying() -> bool:
        if not (incoming / "streams").is_dir():  # first: the copy has begun...
            return False
        info = replica.client().info("replication")  # ...and INFO sees it, or its end
        if info["master_sync_in_progress"] != 1:
            return False
        assert info["master_sync_total_bytes"] > 0 and info["master_link_status"] == "down"
        return True

    wait_until(copying, timeout=20, interval=0.005)


def test_a_full_copy_stays_whole_while_the_leader_trims_deletes_and_checkpoints(tmp_path):
    leader = NaradProcess(tmp_path / "leader", [*SHORT_JOURNAL, "--segment-bytes", "256kb"])
    leader.start()
    replica = NaradProcess(tmp_path / "replica").start()
    nodes = [leader, replica]
    try:
        _fill(leader, 60, streams=100, size=4000)
        wait_until(lambda: _journal_start(leader) > 0, timeout=20)
        follow(replica, leader)
        _wait_copying(replica)
        r = leader.client()
        with stopped(replica):  # the copy waits half way
            for i in range(0, 100, 2):
                r.xtrim(f"bulk{i}", maxlen=5)  # starts move past what the copy names
            r.delete(*[f"bulk{i}" for i in range(1, 100, 4)])
            _fill(leader, 4, streams=10)  # checkpoints, which would delete segments
        wait_synced(leader, [replica], timeout=90)
        assert _copies(replica) == 1
        assert "event=full_copy_failed" not in leader.log()
        rr = replica.client()
        assert sorted(rr.keys("*")) == sorted(r.keys("*"))
        for i in range(100):
            assert rr.xrange(f"bulk{i}", count=3) == r.xrange(f"bulk{i}", count=3)
            assert rr.xlen(f"bulk{i}") == r.xlen(f"bulk{i}")
    finally:
        _stop_all(nodes)
    assert_same_logs(nodes)


def test_an_install_a_crash_stopped_half_way_goes_on_at_the_next_start(tmp_path):
    # Two data dirs on real files: `new`'s data, copied into `old`'s incoming/ and
    # marked complete, with the journal moved in already, as a crash would leave them.
    new = NaradProcess(tmp_path / "new").start()
    old = NaradProcess(tmp_path / "old").start()
    try:
        write_everything(new.client(), "copied")
        want = state_of(new.client(), "copied")
        history = new.client().info("replication")["master_replid"]
        old.client().xadd("old-key", {"x": 1})
    finally:
        new.stop()
        old.stop()
    incoming = old.folder / "data" / INCOMING
    incoming.mkdir()
    for name in ("meta", "streams"):
        shutil.copytree(new.folder / "data" / name, incoming / name)
    shutil.rmtree(old.folder / "data" / "journal")
    shutil.copytree(new.folder / "data" / "journal", old.folder / "data" / "journal")
    checkpoint.write(incoming / COMPLETE, ["complete"])
    old.start()
    try:
        assert not incoming.exists()
        assert state_of(old.client(), "copied") == want
        assert old.client().exists("old-key") == 0
        assert old.client().info("replication")["master_replid"] == history
    finally:
        old.stop()


def test_an_incomplete_copy_is_deleted_at_start_and_the_data_stays(tmp_path):
    node = NaradProcess(tmp_path / "node").start()
    try:
        write_everything(node.client(), "kept")
        want = state_of(node.client(), "kept")
    finally:
        node.stop()
    incoming = node.folder / "data" / INCOMING
    shutil.copytree(node.folder / "data" / "streams", incoming / "streams")
    node.start()
    try:
        assert not incoming.exists()
        assert state_of(node.client(), "kept") == want
    finally:
        node.stop()


def test_a_stopped_replica_keeps_its_place_in_the_journal_while_connected(tmp_path):
    with group(tmp_path, 1, SHORT_JOURNAL) as nodes:
        leader, replica = nodes
        with stopped(replica):
            # More than the socket buffers hold: most of it stays in the journal,
            # which checkpoints then keep for the replica, past the backlog of 0 bytes.
            _fill(leader, 40)
            wait_until(lambda: _journal_start(leader) > 0, timeout=20)  # checkpoints ran
            assert leader.client().info("replication")["connected_slaves"] == 1
        wait_synced(leader, [replica], timeout=30)
        assert _copies(replica) == 0  # it went on with the journal
    assert_same_logs(nodes)


def test_a_replica_silent_for_repl_timeout_is_dropped_and_comes_back(tmp_path):
    with group(tmp_path, 1, ["--repl-timeout", "2"]) as nodes:
        leader, replica = nodes

        def slaves() -> int:
            return int(leader.client().info("replication")["connected_slaves"])

        with stopped(replica):
            wait_until(lambda: slaves() == 0, timeout=10)
            assert "event=replica_timed_out" in leader.log()
            leader.client().xadd("after", {"x": 1})
        wait_until(lambda: slaves() == 1, timeout=10)
        wait_synced(leader, [replica])
        assert replica.client().xlen("after") == 1
    assert_same_logs(nodes)
