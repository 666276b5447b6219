"""A data dir received whole replaces the one in place, crash-safe.

A replica too far behind its leader gets a full copy of the leader's logs
(narad/replication/fullcopy.py). The copy is written into `<dir>/incoming/`, beside
the node's own data, which it goes on serving meanwhile. The copy holds the same
entries a data dir does (`REPLACED`: the journal, the metadata log, the streams) and
nothing else of the data dir (its lock, the replica's `replicaof` file) is touched.

Installing it:
1. every file of the copy is fsynced, then the marker `incoming/complete` is written
   (crash-safe); before it, a crash leaves the old data in force and the copy is
   deleted at the next start;
2. each replaced entry of the data dir is deleted and the copy's renamed into its
   place, one at a time, the folder fsynced after each. After a crash, the next
   start (`finish`, before anything opens) goes on from where it stopped: an entry
   still in `incoming/` has not been moved, so whatever stands at its place is old.

The journal in the copy starts at the position the copy stands for, with a
checkpoint there that names every log's end (`write_journal`), so the node opens on
it as on any data dir, replaying nothing, and follows its leader from that position.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

from narad.log import checkpoint
from narad.log.checkpointer import Checkpoint
from narad.log.checkpointer import write as write_checkpoint
from narad.log.journal import HISTORY_FILE, JOURNAL_FOLDER, NEWEST_FILE, journal_config
from narad.log.log import Log, LogConfig
from narad.log.opening import EPOCHS_CHECKPOINT, START_CHECKPOINT
from narad.logs import NOTICE

logger = logging.getLogger("narad.log")

INCOMING = "incoming"
COMPLETE = "complete"
REPLACED = (JOURNAL_FOLDER, "meta", "streams")


def incoming(root: Path) -> Path:
    return root / INCOMING


def begin(root: Path) -> Path:
    """An empty `incoming/` in data dir `root` (any earlier one deleted)."""
    path = incoming(root)
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir()
    (path / "streams").mkdir()
    checkpoint.fsync_dir(root)
    return path


def open_log(path: Path, start: int, config: LogConfig) -> Log:
    """A new log in folder `path` whose first record will be at offset `start`."""
    path.mkdir(parents=True, exist_ok=True)
    checkpoint.write(path / START_CHECKPOINT, [f"start {start}"])
    return Log.open(path, config)


def write_journal(
    path: Path, position: int, epochs: list[tuple[int, int]], history: str, ends: dict[int, int]
) -> None:
    """The journal of a copy that stands for the first `position` commits of
    `history`, where epochs began at `epochs` and the logs ended at `ends`: empty,
    starting at `position`, with a checkpoint there."""
    folder = path / JOURNAL_FOLDER
    folder.mkdir()
    lines = [f"{epoch} {first}" for epoch, first in epochs if first <= position]
    checkpoint.write(folder / EPOCHS_CHECKPOINT, lines)
    open_log(folder, position, journal_config()).close()
    checkpoint.write(folder / HISTORY_FILE, [f"history {history}"])
    checkpoint.write(folder / NEWEST_FILE, [f"segment {position}"])
    write_checkpoint(folder, Checkpoint(position, ends))


def mark_complete(path: Path) -> None:
    """Every file of the copy at `path` is durable (the caller fsynced them): from
    now on it replaces the data dir's, even across a crash."""
    for folder in (path, path / "streams", *(p for p in (path / "streams").iterdir())):
        checkpoint.fsync_dir(folder)
    checkpoint.write(path / COMPLETE, ["complete"])


def finish(root: Path) -> bool:
    """Put a complete copy in data dir `root` in place of its data (going on from
    where a crash stopped an earlier install), or delete an incomplete one; whether a
    copy was installed."""
    path = incoming(root)
    if not path.exists():
        return False
    if checkpoint.read(path / COMPLETE) is None:
        logger.warning("event=incomplete_copy_deleted path=%s", path)
        shutil.rmtree(path)
        checkpoint.fsync_dir(root)
        return False
    for name in REPLACED:
        source = path / name
        if not source.exists():
            continue  # moved already
        target = root / name
        if target.exists():
            shutil.rmtree(target)
            checkpoint.fsync_dir(root)
        source.rename(target)
        checkpoint.fsync_dir(root)
    shutil.rmtree(path)
    checkpoint.fsync_dir(root)
    logger.log(NOTICE, "event=copy_installed path=%s", root)
    return True
