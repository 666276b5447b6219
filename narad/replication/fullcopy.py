"""The full copy: a replica that cannot follow the leader's journal from its own
position (behind what the leader keeps of it, or holding another history) gets the
leader's logs as they were at one position, and follows the journal from there.

Leader (`CopyOut`): the copy stands for position P, taken between two commits, where
every log has an end (its committed end) and a start. For each log it sends the
records start .. end-1, read from the files a chunk at a time while the replica's
socket has room (narad/replication/leader.py pumps it), then where the journal's
epochs began, and then the journal from P as to any replica. While a copy is read,
checkpoints delete no log segment and no deleted stream's folder, and keep the
journal from P (Checkpointer's `kept`), so every record the copy names stays
readable, below a start moved since included.

Replica (`CopyIn`): the records arrive CRC-checked (`format.scan`) and go, byte for
byte, into new logs in `<dir>/incoming/`, beside the data this node goes on serving.
At the end the copy gets a journal that starts at P with a checkpoint there, every
file is fsynced, and the copy replaces the node's data, crash-safe
(narad/log/install.py); the keyspace reopens on it, and the journal's commits from P
on are applied as they come. A copy that breaks off is thrown away, and the next
link starts another.

The copy's logs hold the same records at the same offsets as the leader's (their
segments may roll elsewhere), so every node's logs stay identical.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import anyio

from narad.keyspace import STATE_SEGMENT_BYTES
from narad.log import Log, LogFailed, format, install
from narad.log.journal import KIND_DATA, Journal, describe_key
from narad.logs import NOTICE
from narad.replication import wire
from narad.replication.wire import LinkError

if TYPE_CHECKING:
    from asyncio import WriteTransport

    from narad.keyspace import Keyspace

logger = logging.getLogger("narad.replication")

CHUNK_BYTES = 1 << 20
# A log being received is written to its file once it buffers this much.
WRITE_BYTES = 4 << 20
PROGRESS_S = 5.0


@dataclass(eq=False)
class CopyOut:
    """The leader's side of one full copy (see the module doc)."""

    position: int
    logs: list[tuple[int, Log, int, int]]  # (key, log, start, end), as at `position`
    epochs: list[tuple[int, int]]  # (epoch, first position) of the journal
    bytes_total: int  # about how many bytes the logs' records take
    bytes_sent: int = 0
    began_s: float = field(default_factory=time.monotonic)
    _at: int = 0  # the log being sent: logs[_at]
    _offset: int = -1  # the next offset of it to send (-1: its copy-log is not sent)

    @classmethod
    def of(cls, journal: Journal) -> CopyOut:
        """A copy of every log as at the journal's position (between two commits)."""
        assert not journal.pending, "a copy is taken between commits"
        logs = [
            (key, log, log.start_offset, log.committed_end) for key, log in journal.logs.items()
        ]
        logs.sort(key=lambda taken: taken[0])  # the metadata log (key 0) first
        size = sum(log.size_bytes for _, log, _, _ in logs)
        epochs = [(e, first) for e, first in journal.log.epochs if first <= journal.position]
        return cls(journal.position, logs, epochs, size)

    def send(self, transport: WriteTransport, paused: Callable[[], bool]) -> bool:
        """Write the copy's next messages while `paused()` is false; whether the
        copy was sent whole (copy-end included). Raises LinkError when a log no
        longer holds a record the copy names (the link must close)."""
        while not paused():
            if self._at == len(self.logs):
                transport.write(wire.copy_end(self.position, self.epochs))
                logger.log(
                    NOTICE,
                    "event=full_copy_sent position=%d logs=%d bytes=%d seconds=%.1f",
                    self.position, len(self.logs), self.bytes_sent,
                    time.monotonic() - self.began_s,
                )
                return True
            key, log, start, end = self.logs[self._at]
            if self._offset < 0:
                transport.write(wire.copy_log(key, start, end))
                self._offset = start
                continue
            if self._offset >= end:
                self._at += 1
                self._offset = -1
                continue
            count = 0
            if not log.closed:
                count, frames = log.read_frames(self._offset, CHUNK_BYTES, end)
            if not count:
                raise LinkError(
                    f"{describe_key(key)} no longer holds offset {self._offset}, which the "
                    f"copy at position {self.position} names"
                )
            transport.writelines(wire.copy_records(key, self._offset, frames))
            self._offset += count
            self.bytes_sent += len(frames)
        return False


class CopyIn:
    """The replica's side of one full copy (see the module doc)."""

    def __init__(self, keyspace: Keyspace, history: str, position: int, bytes_total: int) -> None:
        self.keyspace = keyspace
        self.history = history
        self.position = position
        self.bytes_total = bytes_total
        self.bytes_received = 0
        self.path: Path = install.begin(keyspace.root)
        self.ends: dict[int, int] = {}  # every log's end, as the leader named it
        self._log: Log | None = None
        self._key = -1
        self._began_s = self._reported_s = time.monotonic()

    async def begin_log(self, key: int, start: int, end: int) -> None:
        await self._end_log()
        if key in self.ends or key < 0 or not 0 <= start <= end:
            raise LinkError(f"copy-log {key} {start} {end} out of order")
        keyspace = self.keyspace
        config = keyspace.log_config(None if key & 3 == KIND_DATA else STATE_SEGMENT_BYTES)
        folder = self.path / describe_key(key)
        self._log = await anyio.to_thread.run_sync(install.open_log, folder, start, config)
        self._key = key
        self.ends[key] = end

    def records(self, key: int, offset: int, frames: bytes) -> None:
        log = self._log
        if log is None or key != self._key or offset != log.next_offset:
            raise LinkError(f"copy-records {key} {offset} out of order")
        records, used, status, detail = format.scan(frames, 0, 0, 1 << 30)
        if status != format.SCAN_OK or used != len(frames) or not records:
            raise LinkError(f"bad records in the copy of {describe_key(key)} at {offset}: {detail}")
        if records[0].offset != offset or records[-1].offset >= self.ends[key]:
            raise LinkError(f"records of {describe_key(key)} sent at {offset} do not fit there")
        log.append_framed(memoryview(frames), records)
        if log.unwritten_bytes >= WRITE_BYTES:
            log.write()
        self.bytes_received += len(frames)
        now = time.monotonic()
        if now - self._reported_s >= PROGRESS_S:
            self._reported_s = now
            logger.info(
                "event=full_copy_progress received_bytes=%d of_about=%d logs=%d",
                self.bytes_received, self.bytes_total, len(self.ends),
            )

    async def _end_log(self) -> None:
        log, self._log = self._log, None
        if log is None:
            return
        end = self.ends[self._key]
        if log.next_offset != end:
            log.close()
            raise LinkError(
                f"the copy of {describe_key(self._key)} ended at {log.next_offset}, not {end}"
            )
        await anyio.to_thread.run_sync(log.close)  # writes and fsyncs it
        if log.failure is not None:
            raise LogFailed(log.failure)

    async def finish(self, position: int, epochs: list[tuple[int, int]]) -> None:
        """The last log came: the copy gets its journal and becomes complete
        (durable, and installed even after a crash: narad/log/install.py)."""
        await self._end_log()
        if position != self.position:
            raise LinkError(f"copy-end {position} for a copy at {self.position}")
        await anyio.to_thread.run_sync(
            install.write_journal, self.path, position, epochs, self.history, self.ends
        )
        await anyio.to_thread.run_sync(install.mark_complete, self.path)
        logger.log(
            NOTICE,
            "event=full_copy_received position=%d logs=%d bytes=%d seconds=%.1f",
            position, len(self.ends), self.bytes_received, time.monotonic() - self._began_s,
        )

    def abandon(self) -> None:
        """The link broke off: let go of the log being written (its folder goes with
        the next copy, or at the next start)."""
        log, self._log = self._log, None
        if log is not None:
            for seg in log.segments:
                seg.close()
