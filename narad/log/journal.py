"""The node's journal: one write-ahead history of every commit (docs/design.md).

Every durable change of every log of the node (stream data, stream state, metadata)
is part of one commit, and a commit is one record of the journal, a log of its own in
`<dir>/journal/` (the segment and record machinery of narad/log, unchanged). The
journal's record offset is the node's position: a commit's position is its offset plus
one, so position N means "the first N commits" (INFO `master_repl_offset`).

A commit record (docs/log-format.md, "The journal") carries, for each log it touched,
the exact bytes of the records that log gets, and each start move; it is made durable
by one write and, under `fsync always`, one fsync, however many logs it carried. The
logs themselves are written behind the journal, with no fsync on the commit path: a
log keeps its journaled records in memory until a read needs them in the file, its
buffer grows past `BEHIND_LOG_BYTES`, all logs together hold more than
`BEHIND_BYTES_MAX`, or a checkpoint comes. Reads see every committed record either way
(a log writes its buffer before it reads its files: narad/log/reading.py).

A checkpoint (narad/log/checkpointer.py) fsyncs every log the commits since the last
one touched and records the journal position up to which every log is durable, with
each log's end there; journal segments wholly before it are deleted, and start moves
become durable (start.checkpoint, then the segments below go). Recovery
(narad/log/recovery.py) replays the journal from the last checkpoint.

What a commit promises, by policy (docs/design.md, "committed"):
- always: the commit record is durable when `commit` returns.
- everysec / no: it is appended (in the file, maybe only in the page cache); under
  everysec a background thread fsyncs the journal about once a second.

The write error state (docs/durability.md): a write of the journal or of a log, or
the reservation of HEADROOM_BYTES past the journal's end, that meets a transient error
(no room, no descriptor: narad/log/log.py's WriteError) puts the journal in it, with
`write_error` saying why; the node refuses writes while it lasts. A commit whose own
write failed so stays *unfinished*: taken from the logs, not in the journal (none of
its parts that did not reach the file), never acknowledged; `end` is the position it
will end at. No later commit is made before it, and `commit` tries it again, with
what else failed, every RETRY_S; once everything succeeds the state is over. The
headroom is there so that the state begins before a commit fails: the commits that
come while the node stops taking writes (those of the iteration under way, the
server's own) find room.

Owned by the event loop thread, but for `Log.sync` of the journal (the everysec thread)
and of the logs (the checkpoint thread), which Log allows.
"""

from __future__ import annotations

import asyncio
import logging
import os
import struct
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgpack

from narad.log import checkpoint, format
from narad.log.log import FsyncPolicy, Log, LogConfig, LogFailed, WriteError
from narad.log.opening import LogCorrupted
from narad.log.segment import segment_name
from narad.metrics import Histogram, SummedHistogram

logger = logging.getLogger("narad.log")

JOURNAL_FOLDER = "journal"
# `<dir>/journal/newest`: the base offset of the newest segment the journal made,
# written (crash-safe) at each roll, so that a newest segment deleted by hand is a
# refusal to start rather than commits silently lost.
NEWEST_FILE = "newest"
# `<dir>/journal/history`: the id of the history this journal holds (40 hex digits,
# INFO `master_replid`): made when the journal is, taken from the leader by a replica
# whose journal is empty, so that nodes with one id hold prefixes of one history.
HISTORY_FILE = "history"
JOURNAL_VERSION = 1
SEGMENT_BYTES = 64 * 1024 * 1024
# A commit larger than this is split into several records (FLAG_CONTINUES), at record
# boundaries of the logs it carries.
PART_BYTES = 16 * 1024 * 1024
# Flag of a journal record whose commit goes on in the next record.
FLAG_CONTINUES = 0x02
EVERYSEC_INTERVAL_S = 1.0
# Room kept reserved past the journal's end (see the module doc), and how often a
# journal in its write error state tries again.
HEADROOM_BYTES = 256 * 1024
RETRY_S = 1.0
# Journaled records a log holds in memory before it writes them to its file, and what
# all logs together may hold before every one is written.
BEHIND_LOG_BYTES = 256 * 1024
BEHIND_BYTES_MAX = 64 * 1024 * 1024

# What a log key's low bits say (a key is uid << 2 | kind; the metadata log is key 0).
KIND_META = 0
KIND_DATA = 1
KIND_STATE = 2
KIND_NAMES = {KIND_META: "meta", KIND_DATA: "data", KIND_STATE: "state"}

_HEADER_LENGTH = struct.Struct("<I")

Piece = bytes | bytearray | memoryview


def read_newest(path: Path) -> int | None:
    """The first offset of the newest segment journal folder `path` recorded at its
    last roll (NEWEST_FILE), or None when there is no readable record."""
    lines = checkpoint.read(path / NEWEST_FILE)
    if lines and len(lines) == 1:
        words = lines[0].split()
        if len(words) == 2 and words[0] == "segment" and words[1].isdigit():
            return int(words[1])
    return None


def journal_config(segment_bytes: int = SEGMENT_BYTES) -> LogConfig:
    """The journal's own log: segments of `segment_bytes`, rolled by size only."""
    return LogConfig(segment_bytes=segment_bytes, segment_ms=0)


def log_key(uid: int, kind: int) -> int:
    return uid << 2 | kind


def describe_key(key: int) -> str:
    """A log key as a data-dir path: meta, streams/<uid>/data, streams/<uid>/state."""
    uid, kind = key >> 2, key & 3
    name = KIND_NAMES.get(kind, f"kind{kind}")
    return name if kind == KIND_META else f"streams/{uid}/{name}"


@dataclass
class CommitStats:
    commits: int = 0  # commits that carried something
    records: int = 0  # log records those commits carried
    fsyncs: int = 0  # fsyncs of the journal (the everysec thread's included)
    bytes: int = 0  # journal bytes those commits took
    # For /metrics (narad/collectors.py): each fsync's duration in ns (the everysec
    # thread records too: a lost increment under a race is a sample, not a count,
    # gone), and each commit's records (a count, recorded as the histogram's value).
    fsync_ns: SummedHistogram = field(default_factory=SummedHistogram)
    commit_records: Histogram = field(default_factory=Histogram)

    def synced(self, began_ns: int) -> None:
        """An fsync of the journal that began at perf_counter_ns `began_ns` ended."""
        self.fsyncs += 1
        self.fsync_ns.record(time.perf_counter_ns() - began_ns)


# -- the record format ----------------------------------------------------------------


def encode_commit(changes: list[list[Any]], body: list[Piece]) -> bytes:
    """One commit record's payload: `<u32 header length><msgpack header><body>`; the
    header is [JOURNAL_VERSION, changes], each change a list:
    ["rec", key, first offset, count, bytes] (the next `bytes` of the body are the
    framed records at offsets first .. first+count-1 of log `key`) or
    ["start", key, offset] (the log's logical start moves to offset), or
    ["epoch", epoch] (the first commit of a leader epoch: this record and every later
    one carry it in their epoch field)."""
    header = msgpack.packb([JOURNAL_VERSION, changes], use_bin_type=True)
    return b"".join([_HEADER_LENGTH.pack(len(header)), header, *body])


class BadCommit(ValueError):
    """A journal record that passed its CRC but is not a commit this code reads."""


def decode_commit(payload: bytes | memoryview) -> tuple[list[list[Any]], memoryview]:
    """(changes, body) of a commit record's payload (see `encode_commit`)."""
    view = memoryview(payload)
    if len(view) < _HEADER_LENGTH.size:
        raise BadCommit("the record is shorter than its header length field")
    (length,) = _HEADER_LENGTH.unpack_from(view)
    end = _HEADER_LENGTH.size + length
    try:
        header = msgpack.unpackb(view[_HEADER_LENGTH.size : end], raw=False)
    except Exception as exc:
        raise BadCommit(f"the header is not msgpack: {exc}") from None
    if not (isinstance(header, list) and len(header) == 2 and isinstance(header[1], list)):
        raise BadCommit("the header is not [version, changes]")
    if header[0] != JOURNAL_VERSION:
        raise BadCommit(f"journal record version {header[0]!r}; this node reads {JOURNAL_VERSION}")
    body = view[end:]
    if not _well_formed(header[1]):
        raise BadCommit(f"a malformed change among {header[1]!r:.200}")
    size = sum(c[4] for c in header[1] if c[0] == "rec")
    if size != len(body):
        raise BadCommit(f"the changes name {size} body bytes, the record holds {len(body)}")
    return header[1], body


_CHANGE_SIZES = {"rec": 5, "start": 3, "epoch": 2}


def _well_formed(changes: list[Any]) -> bool:
    """Whether every change is one this code knows, with int fields."""
    sizes = _CHANGE_SIZES
    for change in changes:
        if type(change) is not list or not change or sizes.get(change[0]) != len(change):
            return False
        if change[0] == "rec":
            _, key, first, count, nbytes = change
            if not (type(key) is type(first) is type(count) is type(nbytes) is int):
                return False
            if min(first, count, nbytes) < 0:
                return False
        elif not all(type(field) is int for field in change[1:]):
            return False
    return True


def _split_records(piece: memoryview, most: int) -> Iterator[tuple[int, memoryview]]:
    """`piece` (whole framed records) cut at record boundaries into runs of about
    `most` bytes (a single larger record is a run of its own): (records, run)."""
    start = at = count = 0
    while at < len(piece):
        (length,) = _HEADER_LENGTH.unpack_from(piece, at)
        size = format.LENGTH_BYTES + length
        if count and at + size - start > most:
            yield count, piece[start:at]
            start, count = at, 0
        at += size
        count += 1
    if count:
        yield count, piece[start:at]


def split_commit(changes: list[list[Any]], body: list[Piece]) -> list[bytes]:
    """The payloads of one commit: one, or several of about PART_BYTES each when it is
    larger. Only "rec" changes are split; every other change rides in the last part."""
    total = sum(len(p) for p in body)
    if total <= PART_BYTES:
        return [encode_commit(changes, body)]
    parts: list[bytes] = []
    part_changes: list[list[Any]] = []
    part_body: list[Piece] = []
    size = 0
    rest: list[list[Any]] = []
    whole = memoryview(b"".join(body))
    at = 0
    for change in changes:
        if change[0] != "rec":
            rest.append(change)
            continue
        _, key, first, _, nbytes = change
        for count, run in _split_records(whole[at : at + nbytes], PART_BYTES):
            if size and size + len(run) > PART_BYTES:
                parts.append(encode_commit(part_changes, part_body))
                part_changes, part_body, size = [], [], 0
            part_changes.append(["rec", key, first, count, len(run)])
            part_body.append(run)
            size += len(run)
            first += count
        at += nbytes
    parts.append(encode_commit(part_changes + rest, part_body))
    return parts


@dataclass
class _Unfinished:
    """A commit taken from the logs whose journal write has not finished (see the
    module doc): its records' parts and what it gives the logs once it is made."""

    first: int  # its position: the offset of its first part
    parts: list[bytes]
    timestamp_ms: int
    carried: list[Log]
    starts: list[Log]
    records: int
    nbytes: int


# -- the journal ------------------------------------------------------------------------


class Journal:
    """See the module docstring."""

    def __init__(
        self, root: Path, policy: FsyncPolicy, segment_bytes: int = SEGMENT_BYTES
    ) -> None:
        self.path = root / JOURNAL_FOLDER
        self.policy = policy
        self.log = Log.open(self.path, journal_config(segment_bytes))
        try:
            self._newest = self._check_newest()
        except LogCorrupted:
            self.log.close()
            raise
        self.history = self._read_history()
        self.stats = CommitStats()
        self.logs: dict[int, Log] = {}  # key -> every open log of the node
        self._dirty: dict[Log, None] = {}  # logs with records for the next commit
        self._starts: dict[Log, int] = {}  # start moves for the next commit
        self._behind: dict[Log, None] = {}  # logs holding journaled, unwritten records
        self.behind_bytes = 0  # about what they hold (reset when all are written)
        self.touched: dict[Log, None] = {}  # logs a commit touched since the checkpoint
        self.carried: set[Log] = set()  # logs whose records the last commit carried
        # A commit since the last checkpoint moved a start: retention or compaction
        # waits for a checkpoint to delete segments, so one is due at once.
        self.starts_waiting = False
        # The write error state (module doc): why, the commit it left unfinished, the
        # logs whose writes behind failed, and when to try again.
        self.write_error: str | None = None
        self._unfinished: _Unfinished | None = None
        self._stalled: dict[Log, None] = {}
        self._retry_at = 0.0
        self.epoch = self.log.epoch  # the leader epoch commits carry
        self._epoch_begun = False  # the next commit is the first of `epoch`
        self._waiters: asyncio.Future[None] | None = None
        # (its first position, the frames) of the journal record the last commit
        # wrote, as in the file: what the leader sends its replicas from memory. A
        # commit in several records leaves it empty, so that no message to a replica
        # holds more than one record or a chunk of them (a replica refuses a larger
        # one: narad/replication/follower.py).
        self.tail: tuple[int, bytearray] = (self.position, bytearray())
        self.tail_records = 0
        # Called once a commit's records are in the journal's file, before the fsync
        # that makes them durable under `always`: the leader sends them to its
        # replicas then, so that their fsyncs run while this one does. (A replica may
        # so hold a commit this node never made durable: it was not acknowledged.)
        self.written: Callable[[], None] | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if policy is FsyncPolicy.EVERYSEC:
            self._start_everysec()

    @property
    def position(self) -> int:
        """Commits in the journal (the node's offset)."""
        return self.log.next_offset

    @property
    def end(self) -> int:
        """The position every commit made so far ends at: `position`, or further
        while a commit is unfinished (the write error state)."""
        u = self._unfinished
        return self.log.next_offset if u is None else u.first + len(u.parts)

    @property
    def unfinished(self) -> bool:
        return self._unfinished is not None

    # -- the newest segment -----------------------------------------------------------

    def _check_newest(self) -> int:
        """Refuse a journal whose newest segment, as recorded at its roll, is gone;
        record the newest segment when the record is missing or behind."""
        have = self.log.active.base_offset
        recorded = read_newest(self.path)
        if recorded is not None and recorded > have:
            raise LogCorrupted(
                f"{self.path}: journal segment {segment_name(recorded)} is missing (the "
                f"newest segment the journal made; the newest one present starts at "
                f"position {have}): commits from position {recorded} on are gone, and "
                "the logs may hold records of them. Restore the segment, or run narad "
                "check to see what is lost"
            )
        if recorded != have:
            self._record_newest(have)
        return have

    def _record_newest(self, base: int) -> None:
        checkpoint.write(self.path / NEWEST_FILE, [f"segment {base}"])
        self._newest = base

    def _read_history(self) -> str:
        lines = checkpoint.read(self.path / HISTORY_FILE)
        if lines and len(lines) == 1 and lines[0].startswith("history "):
            return lines[0].split()[1]
        history = os.urandom(20).hex()
        self.adopt_history(history)
        return history

    def adopt_history(self, history: str) -> None:
        """This journal holds (a prefix of) history `history` from now on (durably)."""
        checkpoint.write(self.path / HISTORY_FILE, [f"history {history}"])
        self.history = history

    def truncate(self, position: int) -> None:
        """Delete every commit from `position` on (durably, crash-safe: the record of
        the newest segment is lowered before any segment goes)."""
        bases = [seg.base_offset for seg in self.log.segments]
        below = [b for b in bases if b < position]
        newest = below[-1] if below else position
        if newest < self._newest:
            self._record_newest(newest)
        self.log.truncate(position)

    # -- registering logs -------------------------------------------------------------

    def register(self, key: int, log: Log) -> None:
        log.journal_key = key
        self.logs[key] = log

    def unregister(self, log: Log) -> None:
        """`log` is going away (its stream was deleted): no commit or checkpoint
        carries it from now on."""
        self.logs.pop(log.journal_key, None)
        self._dirty.pop(log, None)
        self._starts.pop(log, None)
        self._behind.pop(log, None)
        self._stalled.pop(log, None)
        self.touched.pop(log, None)

    # -- committing -------------------------------------------------------------------

    def note(self, log: Log) -> None:
        """`log` has records that the next commit must carry."""
        self._dirty[log] = None

    def move_start(self, log: Log, offset: int) -> None:
        """Move `log`'s logical start to `offset` (in memory now; the next commit
        carries it; the next checkpoint after it makes it durable)."""
        if log.move_start(offset) > log.durable_start:
            self._starts[log] = log.start_offset

    def begin_epoch(self, epoch: int) -> None:
        """Commits from now on carry leader epoch `epoch`, higher than any before; the
        next commit says so (an "epoch" change), even when it carries nothing else,
        so the epoch's start is a position every follower of this journal sees."""
        if epoch <= self.epoch:
            raise ValueError(f"epoch {epoch} is not above the journal's epoch {self.epoch}")
        if epoch > format.EPOCH_MAX:  # its records could not be written
            raise ValueError(f"epoch {epoch} is above the largest, {format.EPOCH_MAX}")
        self.epoch = epoch
        self._epoch_begun = True

    def epoch_end(self, epoch: int) -> tuple[int, int]:
        """(the largest epoch this journal holds commits of that is <= `epoch`, the
        position where it ended): where a node that followed this one in that epoch
        must truncate its own journal to (Kafka's leader-epoch truncation); (-1, the
        journal's first position) for a negative epoch. Commits before the
        first epoch change are of epoch 0."""
        found, end = self.log.epoch_end(epoch)
        if found < 0 and epoch >= 0:
            epochs = self.log.epochs
            return 0, epochs[0][1] if epochs else self.position
        return found, end

    @property
    def pending(self) -> bool:
        return bool(self._dirty or self._starts or self._epoch_begun)

    def commit(self) -> bool:
        """Make one commit of every noted log's records and start moves: one journal
        write and, under `fsync always`, one fsync. Whether a commit was made (the
        unfinished one included). Raises LogFailed when the journal cannot be written
        or fsynced; it then refuses every later commit too (narad/log/log.py), so no
        reply that waits on a commit is ever sent after a failure. Raises WriteError
        when the commit is left unfinished, or an unfinished one still is (module
        doc): the replies that wait on it wait on."""
        if self.log.failure is not None:
            # A commit that failed may have taken records that replies (or reads
            # since) depend on: from then on no commit succeeds.
            raise LogFailed(self.log.failure)
        finished = self._retry() if self.write_error is not None else False
        if not (self._dirty or self._starts or self._epoch_begun):
            return finished
        changes: list[list[Any]] = [["epoch", self.epoch]] if self._epoch_begun else []
        body: list[Piece] = []
        carried: list[Log] = []
        records = nbytes = 0
        dirty, self._dirty = self._dirty, {}
        for log in dirty:
            taken = log.take_unjournaled()
            if taken is None:
                continue
            first, count, pieces = taken
            size = sum(len(p) for p in pieces)
            changes.append(["rec", log.journal_key, first, count, size])
            body += pieces
            carried.append(log)
            records += count
            nbytes += size
        starts, self._starts = self._starts, {}
        for log, offset in starts.items():
            changes.append(["start", log.journal_key, offset])
        if not changes:
            return finished
        self._epoch_begun = False
        first, timestamp_ms = self.position, time.time_ns() // 1_000_000
        try:
            parts = split_commit(changes, body) if nbytes > PART_BYTES else [
                encode_commit(changes, body)
            ]
            self._write_commit(first, parts, timestamp_ms)
        except WriteError:
            self._unfinished = _Unfinished(
                first, parts, timestamp_ms, carried, list(starts), records, nbytes
            )
            raise
        except LogFailed:
            raise
        except Exception as exc:  # the records taken are lost: fail as an I/O error does
            self.log.failure = f"commit failed: {type(exc).__name__}: {exc}"
            raise LogFailed(self.log.failure) from exc
        self._made(carried, starts, records, nbytes)
        seg = self.log.active
        if seg.allocated - seg.size < HEADROOM_BYTES and self.write_error is None:
            why = self._headroom_refused()
            if why is not None:
                self._enter(why)
        return True

    def _write_commit(self, first: int, parts: list[bytes], timestamp_ms: int) -> None:
        """Put the commit of journal records `parts`, from position `first` on, in the
        journal: append and write what the file lacks of them and, under `always`,
        fsync. Raises WriteError (the write error state) when that meets a transient
        error: the journal then holds none of the parts that did not reach the file,
        and a later call goes on from what it does hold."""
        journal = self.log
        count = len(parts)
        try:
            if journal.written_end < first + count:  # else only the fsync failed
                for i in range(journal.next_offset - first, count):
                    flags = FLAG_CONTINUES if i + 1 < count else 0
                    journal.append(parts[i], flags=flags, timestamp_ms=timestamp_ms,
                                   epoch=self.epoch)
                if count == 1:
                    self.tail = journal.pending_frames()
                else:  # replicas get it from the file, a chunk at a time (see `tail`)
                    self.tail = (journal.next_offset, bytearray())
                self.tail_records = journal.next_offset - self.tail[0]
                journal.write()
                self.stats.bytes += sum(map(len, parts)) + format.HEADER_BYTES * count
                if journal.active.base_offset != self._newest:  # the journal rolled
                    why = self._newest_refused()
                    if why is not None:
                        self._enter(why)
                if self.written is not None:
                    self.written()
            if self.policy is FsyncPolicy.ALWAYS:
                self.sync()
        except WriteError as exc:
            journal.drop_unwritten()
            self._enter(str(exc))
            raise

    def _made(self, carried: list[Log], starts: Iterable[Log], records: int, nbytes: int) -> None:
        """A commit is in the journal as its policy holds one: its records count as
        committed in the logs it carried (see `_committed`)."""
        for log in carried:
            log.committed_end = log.journaled_end
        self._committed(carried, starts, records, nbytes)

    def _finish(self) -> None:
        """Put the unfinished commit in the journal (`_write_commit`): WriteError while
        it still cannot be."""
        u = self._unfinished
        assert u is not None
        self._write_commit(u.first, u.parts, u.timestamp_ms)
        self._unfinished = None
        self._made(u.carried, u.starts, u.records, u.nbytes)

    def _newest_refused(self) -> str | None:
        """Record the newest segment after a roll (NEWEST_FILE); why that failed, if
        it did. The commit stands then (the record only guards against a segment
        deleted by hand), and the write error state tries again."""
        base = self.log.active.base_offset
        if base != self._newest:
            try:
                self._record_newest(base)
            except OSError as exc:
                return f"recording the newest journal segment failed: {exc}"
        return None

    def _headroom_refused(self) -> str | None:
        """Keep HEADROOM_BYTES reserved past the journal's end (where the filesystem
        reserves space at all); why there is no room for it, if there is none."""
        seg = self.log.active
        if seg.allocated - seg.size >= HEADROOM_BYTES:
            return None
        try:
            seg.reserve(seg.size + HEADROOM_BYTES)
        except OSError as exc:
            return (
                f"reserving room for the journal failed on {seg.path}: "
                f"[Errno {exc.errno}] {exc.strerror}"
            )
        return None

    # -- the write error state ----------------------------------------------------------

    def _enter(self, why: str) -> None:
        """Be in the write error state (module doc) for `why`."""
        if self.write_error is None:
            logger.warning(
                "event=write_error reason=%r: writes are refused until a write succeeds "
                "again, tried every %.0f s", why, RETRY_S,
            )
            self._retry_at = time.monotonic() + RETRY_S
        self.write_error = why

    def _retry(self) -> bool:
        """In the write error state, once every RETRY_S: finish the unfinished commit,
        write the logs whose writes behind failed, record the newest segment and keep
        the headroom; the state is over once all of it succeeds. Whether it finished
        the unfinished commit; WriteError while that commit stays unfinished."""
        now = time.monotonic()
        if now < self._retry_at:
            if self._unfinished is not None:
                raise WriteError(self.write_error or "")
            return False
        self._retry_at = now + RETRY_S
        finished = self._unfinished is not None
        if finished:
            self._finish()
        why: str | None = None
        for log in list(self._stalled):
            try:
                written = log.closed or log.try_write()
            except LogFailed as exc:  # failed for good: its key answers IOERR
                logger.error("writing behind the journal failed: %s", exc)
                written = True
            if written:
                del self._stalled[log]
            elif why is None:
                why = log.write_error
        why = why or self._newest_refused() or self._headroom_refused()
        if why is None:
            logger.warning("event=write_error_over: writes are taken again")
        self.write_error = why
        return finished

    def _committed(
        self, carried: list[Log], starts: Iterable[Log], records: int, nbytes: int
    ) -> None:
        """A commit is in the journal that gave `carried` `records` records of
        `nbytes` bytes (committed in each) and moved the starts of `starts`: they wait
        for the next checkpoint, and their records are written behind."""
        self.carried = set(carried)
        for log in carried:
            self.touched[log] = None
            if log.unwritten_bytes:
                if log.unwritten_bytes > BEHIND_LOG_BYTES:
                    self.write_log(log)
                else:
                    self._behind[log] = None
        for log in starts:
            self.touched[log] = None
            self.starts_waiting = True
        self.behind_bytes += nbytes
        if self.behind_bytes > BEHIND_BYTES_MAX:
            self.write_behind()
        stats = self.stats
        stats.commits += 1
        stats.records += records
        stats.commit_records.record(records)

    # -- following a leader's journal (narad/replication/apply.py) --------------------

    def append_followed(self, parts: list[tuple[memoryview, list[format.Record]]]) -> None:
        """Append whole commits of a leader's journal, framed as the leader framed them
        (each part: frames, and the records scanned from them; the first at this
        journal's position): byte for byte the leader's records, so that a position
        names the same commits on every node. Durable under this node's policy when it
        returns, as a commit is (one write, and one fsync under `always`)."""
        if self.log.failure is not None:
            raise LogFailed(self.log.failure)
        journal = self.log
        if parts[0][1][0].offset != journal.next_offset:
            raise ValueError(
                f"the leader's records start at position {parts[0][1][0].offset}, this "
                f"journal is at {journal.next_offset}"
            )
        before = journal.size_bytes
        start = journal.next_offset
        try:
            for run, records in parts:
                journal.append_framed(run, records)
            journal.write()
        except WriteError as exc:
            journal.drop_unwritten()
            if journal.next_offset != start:  # a roll wrote part of them: a start cuts it
                self.log.failure = f"following failed: {exc}"
                raise LogFailed(self.log.failure) from exc
            self._enter(str(exc))  # the leader sends them again
            raise
        except LogFailed:
            raise
        except Exception as exc:
            self.log.failure = f"following failed: {type(exc).__name__}: {exc}"
            raise LogFailed(self.log.failure) from exc
        self.epoch = journal.epoch
        if (why := self._newest_refused()) is not None:
            self._enter(why)
        self.stats.bytes += journal.size_bytes - before
        if self.policy is FsyncPolicy.ALWAYS:
            self.sync()

    def followed(self, carried: list[Log], starts: list[Log], records: int, nbytes: int) -> None:
        """A followed commit gave `carried` its records and moved the starts of
        `starts` (in memory, Log.move_start): they count as committed, as after a
        commit of this node's own."""
        for log in carried:
            log.adopt_journaled()
        self._committed(carried, starts, records, nbytes)

    def write_log(self, log: Log) -> bool:
        """Write `log`'s journaled records to its file; whether they are all there.
        The commit stands either way (the journal holds it); a transient failure
        (WriteError) is the write error state, which writes the log again."""
        self._behind.pop(log, None)
        if log.closed:
            return True
        try:
            log.write()
        except WriteError as exc:
            self._stalled[log] = None
            self._enter(str(exc))
            return False
        except LogFailed as exc:
            logger.error("writing behind the journal failed: %s", exc)
            return False
        return True

    def write_behind(self) -> None:
        """Write every log's journaled records to its file."""
        for log in list(self._behind):
            self.write_log(log)
        self.behind_bytes = 0

    def sync(self) -> None:
        """Make every commit so far durable (each commit under `always`, SAVE, CONFIG
        SET fsync always), timing the fsync for /metrics."""
        began = time.perf_counter_ns()
        if self.log.sync():
            self.stats.synced(began)

    async def flush(self, log: Log) -> None:
        """Wait until `log`'s buffered records are committed: one commit at the end
        of the current loop iteration, shared by every task that awaits it."""
        self.note(log)
        if self._waiters is None:
            loop = asyncio.get_running_loop()
            self._waiters = loop.create_future()
            loop.call_soon(self._commit_and_wake)
        await asyncio.shield(self._waiters)

    def _commit_and_wake(self) -> None:
        waiters, self._waiters = self._waiters, None
        assert waiters is not None
        try:
            self.commit()
        except LogFailed as exc:
            waiters.set_exception(exc)
            return
        waiters.set_result(None)

    # -- the fsync policy ---------------------------------------------------------------

    def set_policy(self, policy: FsyncPolicy) -> None:
        """Commits from now on follow `policy` (CONFIG SET fsync). Entering `always`,
        what earlier commits wrote is fsynced first; when that fails, LogFailed is
        raised and the policy stays as it was."""
        if policy is self.policy:
            return
        if policy is FsyncPolicy.ALWAYS:
            self.sync()
        self._stop_everysec()
        self.policy = policy
        if policy is FsyncPolicy.EVERYSEC:
            self._start_everysec()

    def _start_everysec(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._everysec, name="narad-fsync", daemon=True)
        self._thread.start()

    def _stop_everysec(self) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None
            self._sync_quietly()

    def _everysec(self) -> None:
        while not self._stop.wait(EVERYSEC_INTERVAL_S):
            self._sync_quietly()

    def _sync_quietly(self) -> None:
        try:
            began = time.perf_counter_ns()
            if self.log.sync(own_fd=True):
                self.stats.synced(began)
        except LogFailed as exc:
            logger.error("background fsync of the journal failed: %s", exc)

    def close_threads(self) -> None:
        """Stop the everysec thread (after a last fsync)."""
        self._stop_everysec()

    def close(self) -> None:
        """Stop the everysec thread (after a last fsync) and close the journal."""
        self._stop_everysec()
        self.log.close()


def commits(log: Log, position: int) -> Iterator[tuple[int, list[list[Any]], memoryview]]:
    """(position after it, changes, body) of every whole commit of journal `log` from
    `position` on; a commit whose last part is missing (a torn tail) is not yielded,
    and recovery cuts its parts off (narad/log/recovery.py). Raises BadCommit for a
    record that is not a commit."""
    def records() -> Iterator[format.Record]:
        offset = position
        while batch := log.read(offset, count_max=64):
            yield from batch
            offset = batch[-1].offset + 1

    return whole_commits(records())


def whole_commits(
    records: Iterable[format.Record],
) -> Iterator[tuple[int, list[list[Any]], memoryview]]:
    """(position after it, changes, body) of every whole commit among journal
    `records` (consecutive, from a commit's first part on); the parts of a commit
    whose last part is not among them are not yielded. Raises BadCommit for a record
    that is not a commit."""
    parts: list[tuple[list[list[Any]], memoryview]] = []
    for rec in records:
        parts.append(decode_commit(rec.payload))
        if rec.flags & FLAG_CONTINUES:
            continue
        if len(parts) == 1:
            yield rec.offset + 1, parts[0][0], parts[0][1]
        else:
            changes = [c for p in parts for c in p[0]]
            body = memoryview(b"".join(p[1] for p in parts))
            yield rec.offset + 1, changes, body
        parts = []
