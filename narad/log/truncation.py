"""Truncation: a node's history cut back to an earlier position.

A node that follows a new leader must hold no commit the new leader does not: it cuts
its journal back to where its last epoch ended on the leader (Journal.epoch_end, asked
of the leader), and every log back to where the journal then says it ends. Truncation
runs on a data dir that no server has open; opening the keyspace afterwards replays
and settles it as after a crash (narad/log/recovery.py), so every log ends exactly
where the remaining journal says.

Crash-safe at every step:
- Truncating to a position at or after the checkpoint only cuts the journal: a crash
  midway leaves a journal that still ends at or after the position (segments go newest
  first, their record lowered first: narad/log/journal.py), and the next open cuts
  every log back to the journal that is left.
- Truncating to a position before the checkpoint first replaces the checkpoint by one
  at the position, whose ends are each log's end there (each log's first offset in the
  commits after it, or its end at the old checkpoint when they do not touch it): every
  log is durable at least that far, since it was durable to the old checkpoint. Then
  the journal is cut. A crash between the two leaves the whole history, checkpointed
  earlier: truncating again finishes the job.

What it cannot undo: start moves that became durable at a checkpoint after the
position (retention and compaction already deleted those records; each log's start is
then its end at most). A position before the journal's first retained commit is
refused: the node then needs the logs copied from its leader.
"""

from __future__ import annotations

import logging
from pathlib import Path

from narad.log import checkpointer
from narad.log.checkpointer import Checkpoint
from narad.log.journal import Journal, commits
from narad.log.log import FsyncPolicy
from narad.log.opening import LogCorrupted

logger = logging.getLogger("narad.log")


def truncate(root: Path, position: int) -> int:
    """Cut data dir `root`'s history back to its first `position` commits; how many
    commits were removed."""
    journal = Journal(root, FsyncPolicy.NO)
    try:
        end = journal.position
        if position >= end:
            return 0
        start = journal.log.start_offset
        if position < start:
            raise LogCorrupted(
                f"{journal.path} holds commits from position {start} on: truncating it to "
                f"position {position} needs the logs copied from the leader"
            )
        at = checkpointer.read(journal.path)
        if at is None:
            raise LogCorrupted(
                f"{journal.path}: the checkpoint is missing or damaged (run narad check)"
            )
        if position < at.position:
            checkpointer.write(journal.path, Checkpoint(position, _ends_at(journal, at, position)))
        journal.truncate(position)
        logger.warning(
            "%s: truncated the journal from position %d to %d (%d commits removed)",
            journal.path, end, position, end - position,
        )
        return end - position
    finally:
        journal.close()


def _ends_at(journal: Journal, at: Checkpoint, position: int) -> dict[int, int]:
    """Each log's end at `position`, an earlier one than checkpoint `at`'s."""
    ends = dict(at.ends)
    seen: set[int] = set()
    for _, changes, _ in commits(journal.log, position):
        for change in changes:
            if change[0] == "rec" and change[1] not in seen:
                seen.add(change[1])
                ends[change[1]] = change[2]
    return ends
