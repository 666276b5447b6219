"""Recovery: the journal from the last checkpoint on, put into the logs.

After a crash each log holds a durable prefix of what the journal says it should: all
it held at the checkpoint (fsynced then), and maybe more, written behind the journal
or ahead of it (a read writes a log's records before their commit). Replay gives each
log exactly the records it lacks, in journal order, and the start moves after them; a
log that holds records the journal does not (their commit never finished) is cut back
to where the journal says it ends, so nothing the journal does not hold survives. A
log that lacks records the journal no longer holds (before the checkpoint) cannot be
mended: opening refuses, naming the log. The cost is O(journal since the checkpoint).

`take_records` (and `apply_records`) is the one way a commit's records reach a log, at
recovery and on a replica (narad/replication/apply.py).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping

from narad.log import format
from narad.log.checkpointer import Checkpoint
from narad.log.journal import BEHIND_LOG_BYTES, BadCommit, Journal, commits, describe_key
from narad.log.log import Log
from narad.log.opening import LogCorrupted

logger = logging.getLogger("narad.log")

PROGRESS_S = 5.0  # a replay logs its progress this often


def apply_records(log: Log, first: int, count: int, run: memoryview) -> int:
    """Give `log` the records of `run` (framed records at offsets first ..
    first+count-1) that it lacks; how many it took."""
    return len(take_records(log, first, count, run))


def take_records(log: Log, first: int, count: int, run: memoryview) -> list[format.Record]:
    """`apply_records`, returning the records `log` took."""
    end = first + count
    have = log.next_offset
    if have >= end:
        return []
    if have < first:
        raise LogCorrupted(
            f"{log.path} ends at offset {have} but the journal's next records for it start "
            f"at {first}: records {have}..{first - 1} are gone from the log and the journal "
            "no longer holds them (run narad check)"
        )
    records, used, _, detail = format.scan(run, 0, 0, count)
    if len(records) != count or used != len(run):
        raise BadCommit(f"a change for {log.path} holds no {count} whole records: {detail}")
    taken = records[have - first :]
    log.append_framed(run, taken)
    if log.unwritten_bytes > BEHIND_LOG_BYTES:
        log.try_write()  # else it keeps them, and the journal has them
    return taken


class Replay:
    """The journal of a node from checkpoint `at` on (see the module doc)."""

    def __init__(self, journal: Journal, at: Checkpoint) -> None:
        self.journal = journal
        self.at = at
        self.ends: dict[int, int] = {}  # log key -> its end as the journal says
        self.started: set[int] = set()  # keys of the logs whose start the journal moved
        self.records = 0  # records the logs took
        self.commits = 0
        self.end = at.position  # where the last whole commit ends
        start = journal.log.start_offset
        if at.position < start or at.position > journal.position:
            raise LogCorrupted(
                f"{journal.path}: the checkpoint is at position {at.position} but the journal "
                f"holds positions {start}..{journal.position}: a journal segment is missing "
                "(run narad check)"
            )

    def run(
        self, logs: Mapping[int, Log], what: str, refused: dict[int, str] | None = None
    ) -> None:
        """Apply every change of the journal since the checkpoint to the logs of
        `logs` (by key; a change for another key is skipped); `what` names the pass
        in the progress lines. With `refused`, a log that lacks records the journal
        no longer holds is put there (key -> why) and given nothing more, instead of
        ending the replay with LogCorrupted."""
        began = reported = time.monotonic()
        commits_seen = records = 0
        ends = self.ends
        for position, changes, body in commits(self.journal.log, self.at.position):
            at = 0
            for change in changes:
                kind = change[0]
                if kind == "rec":
                    _, key, first, count, nbytes = change
                    ends[key] = first + count
                    log = logs.get(key)
                    if log is not None and not (refused and key in refused):
                        try:
                            records += apply_records(log, first, count, body[at : at + nbytes])
                        except LogCorrupted as exc:
                            if refused is None:
                                raise
                            refused[key] = str(exc)
                    at += nbytes
                elif kind == "start":
                    self.started.add(change[1])
                    log = logs.get(change[1])
                    if log is not None and not (refused and change[1] in refused):
                        log.set_start(change[2])
                        log.apply_retention(start_only=True)
                elif kind == "epoch":
                    pass  # the journal's epochs file has it; its records carry it
                else:
                    raise BadCommit(f"unknown journal change {kind!r}")
            commits_seen += 1
            self.end = position
            if commits_seen & 1023 == 0 and time.monotonic() - reported >= PROGRESS_S:
                reported = time.monotonic()
                logger.info(
                    "recovering %s: journal position %d of %d", what, position,
                    self.journal.position,
                )
        self.records += records
        self.commits = max(self.commits, commits_seen)
        if commits_seen:
            logger.info(
                "replayed %d commits of the journal into the %s in %.3f s",
                commits_seen, what, time.monotonic() - began,
            )

    def cut_torn_commit(self) -> None:
        """Drop the parts of a commit whose last part never made it (a crash in the
        middle of a split commit): the next commit must not follow them."""
        journal = self.journal.log
        if journal.next_offset > self.end:
            logger.warning(
                "%s: dropped %d parts of a commit that never finished",
                self.journal.path, journal.next_offset - self.end,
            )
            self.journal.truncate(self.end)

    def cut_to_journal(self, key: int, log: Log) -> None:
        """Cut `log` back to where the journal says it ends, or refuse when it holds
        less than the checkpoint says it durably held."""
        end = self.ends.get(key)
        if end is None and self.at.trust_logs:
            end = log.next_offset
        elif end is None:
            end = self.at.ends.get(key, 0)
            if log.next_offset < end:
                raise LogCorrupted(
                    f"{log.path} ends at offset {log.next_offset} but the journal checkpoint "
                    f"says it held {end} records durably ({describe_key(key)}): records are "
                    "missing that the journal no longer holds (run narad check)"
                )
        if log.next_offset > end:
            logger.warning(
                "%s held %d records past its end in the journal (their commit never "
                "finished): dropped", log.path, log.next_offset - end,
            )
            log.truncate(end)
        log.adopt_journaled()
