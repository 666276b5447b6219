"""The keyspace: databases of streams, and the metadata log that names them.

On disk (under `dir`):

    meta/               the metadata log: which stream (uid) is which (db, key)
    streams/<uid>/      one stream: data/ and state/ logs (narad/streams/stream.py)
    narad.lock          held while a server uses the folder (narad/log/lock.py)

Key names never reach the file system: a stream's folder is named by its uid, a
number the metadata log assigns, so nothing a client sends can touch files outside
the data dir.

Metadata ops (msgpack lists): ["create", uid, db, key], ["delete", uid],
["rename", uid, db, key], ["swapdb", a, b],
["snap", next_uid, [[uid, db, key], ...], [schema op, ...]], and the schema registry's
ops ("schema.set", "schema.compat", "schema.drop": narad/schema/registry.py) keyed by
the stream's uid (narad/schema/keyspace.py), so a schema follows its stream through
RENAME and SWAPDB and goes with it on delete (the delete op implies it).
A stream's folder is removed only after its delete op is durable, so a crash never
leaves a key that the metadata log still names without its data. Every op is applied
by narad/metalog.py's MetaState.apply, live as it is logged and at replay (where an op
that cannot be applied never stops the node from starting); the open streams follow
the names it keeps.

A stream whose state log holds an op that cannot be applied (Stream.fault) opens
*unavailable*: it is kept in `unavailable`, not in `dbs`, so that nothing the server
does on its own (retention, compaction, queue timers and fan-out: they walk `dbs` or
skip faulted streams) writes to it, and `get` answers every command that looks the
key up with the fault's error. Only a delete (DEL, UNLINK, FLUSHDB, FLUSHALL, Q.DROP,
RENAME over it) reaches it, through `find`; the key is still listed (`names`), and
it moves with SWAPDB. A healthy key's lookup costs nothing more.

A stream whose log cannot be used at start (a LogFault: the log cannot be opened, it
lacks records the journal no longer holds, or its state log cannot be read) is
unavailable the same way, and more: its logs are closed and out of the journal, and
the stream in `streams` holds logs that were never opened, so nothing reads or writes
its files until it is deleted or `narad check --repair` mends it. The journal's
records for it are not replayed; so that none is lost, no checkpoint is taken while
such a key is there (`logs_unavailable`): the journal is kept whole from the
checkpoint in force, and every start replays it again (docs/durability.md).

A new key's folder is made before its create op is logged: a folder that cannot be
made answers IOERR naming the path and logs nothing (`create_stream`).

Owned by the event loop thread.
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgpack

from narad import errors
from narad.config import Config
from narad.config.kinds import BadValue
from narad.log import (
    CorruptSegment,
    FsyncPolicy,
    Log,
    LogConfig,
    LogCorrupted,
    LogFailed,
    install,
    truncation,
)
from narad.log import checkpointer as checkpoints
from narad.log.checkpointer import Checkpoint, Checkpointer, KeptForReplicas
from narad.log.journal import (
    KIND_DATA,
    KIND_META,
    KIND_STATE,
    Journal,
    describe_key,
    journal_config,
    log_key,
)
from narad.log.lock import FolderBusy, lock_folder
from narad.log.log import wall_clock_ms
from narad.log.recovery import Replay
from narad.logs import NOTICE
from narad.machines import stream_machines
from narad.metalog import MetaState
from narad.schema.keyspace import StreamSchemas
from narad.streams.machines import Machines
from narad.streams.stream import StateFault, Stream, log_records

logger = logging.getLogger("narad.keyspace")

META_COMPACT_OPS = 10_000
STATE_SEGMENT_BYTES = 8 * 1024 * 1024


# Another process (a server, `narad check --repair`) holds the data dir's lock.
DataDirBusy = FolderBusy


@dataclass(frozen=True)
class LogFault(StateFault):
    """A stream's log that could not be used at start (see the module doc): `log`
    names it (streams/<uid>/data, .../state, or streams/<uid> when the stream's
    logs could not be opened), `what` says why; `offset` is -1 (no op is to blame)."""

    def describe(self) -> str:
        return f"its log {self.log} cannot be used: {self.what}"


class Keyspace:
    def __init__(self, config: Config, machines: Machines | None = None) -> None:
        """A keyspace on data dir `config["dir"]`, its streams' state logs applied by
        `machines` (the node's set, narad/machines.py, when not given)."""
        self.config = config
        self.machines = machines if machines is not None else stream_machines()
        self.root = Path(str(config["dir"])).resolve()
        # Told of every key written: WATCHers and blocked sessions (narad/node.py).
        self.on_write: Callable[[int, bytes], None] = lambda db, key: None
        self.on_delete: Callable[[Stream], None] = lambda stream: None
        self._init_state()
        # Whether this node writes on its own account (compaction at open, retention,
        # the queues' timers): a leader does; a replica's every change is its leader's
        # (narad/replication/apply.py).
        self.leads = not config["replicaof"]
        # What this node's replicas still read, which checkpoints keep (set by
        # narad/replication/role.py; kept across a reopen).
        self.kept_for_replicas: KeptForReplicas = lambda: (None, False)

    def _init_state(self) -> None:
        """What an open keyspace holds, before `open` fills it."""
        config = self.config
        self.policy = FsyncPolicy(str(config["fsync"]))
        self.journal: Journal = None  # type: ignore[assignment]  # set by open
        self.checkpointer: Checkpointer = None  # type: ignore[assignment]  # set by open
        self.dbs: list[dict[bytes, Stream]] = [{} for _ in range(int(config["databases"]))]  # type: ignore[call-overload]
        self.meta: Log | None = None
        self._meta_ops = 0
        self._lock_fd = -1
        self.streams: dict[int, Stream] = {}  # uid -> stream, every open stream
        # (db, key) -> a stream whose state log replay could not apply (see above)
        self.unavailable: dict[tuple[int, bytes], Stream] = {}
        self._doomed: list[Stream] = []  # deleted streams whose folders go after the commit
        self.schemas = StreamSchemas()  # schema registry by stream uid
        self.validators = self.schemas.active  # uid -> Active: the produce path's lookup
        # The metadata log's state machine: names, next uid, schemas (narad/metalog.py).
        self.meta_state = MetaState(self.schemas, len(self.dbs))
        self.loaded_s = 0.0
        # What the last open's recovery replayed: journal commits, records the logs
        # took, and the journal position it started from.
        self.replayed = (0, 0, 0)
        self.last_commit_s = int(time.time())

    # -- opening ------------------------------------------------------------------------

    def open(self, locked: bool = False, repairing: bool = False) -> None:
        """Open the data dir: the journal, then the metadata log, then every stream's
        logs, each given by the journal what it lacks (narad/log/recovery.py), then
        the streams' state from their state logs; then a checkpoint, so that the
        next start replays nothing of this one's recovery (none while a key's log is
        unavailable). With `locked`, the caller holds the data dir's lock (narad check
        --repair). With `repairing` (narad/repair.py's repair_keys), a stream's log
        that lacks records the journal no longer holds keeps the records it holds,
        and the journal's records for it that cannot follow them are lost (logged):
        the checkpoint this open ends with no longer replays them."""
        start = time.monotonic()
        self.root.mkdir(parents=True, exist_ok=True)
        if not locked:
            self._lock()
        try:
            install.finish(self.root)  # a full copy a crash stopped half way
            self._open(repairing)
        except BaseException:
            self._release()
            raise
        self.loaded_s = time.monotonic() - start
        commits, records, since = self.replayed
        logger.log(
            NOTICE,
            "event=recovered streams=%d unavailable=%d commits_replayed=%d "
            "records_replayed=%d from_position=%d position=%d seconds=%.3f",
            sum(len(db) for db in self.dbs), len(self.unavailable), commits, records, since,
            self.journal.position, self.loaded_s,
        )

    def reopen(self, truncate_to: int | None = None) -> None:
        """Close and open again: with `truncate_to`, on the history cut back to its
        first `truncate_to` commits (narad/log/truncation.py: crash-safe); and on the
        complete full copy in `incoming/`, if there is one, in place of this data
        dir's (narad/log/install.py, as every open does)."""
        self.close()
        if truncate_to is not None:
            truncation.truncate(self.root, truncate_to)
        self._init_state()
        self.open()

    def _release(self) -> None:
        """An open that failed: let go of every file and the lock, writing nothing."""
        logs = [*self.journal.logs.values(), self.journal.log] if self.journal else []
        for log in logs:
            for seg in log.segments:
                seg.close()
        if self.journal is not None:
            self.journal.close_threads()
        self.journal = None  # type: ignore[assignment]
        self.streams.clear()
        if self._lock_fd >= 0:
            os.close(self._lock_fd)
            self._lock_fd = -1

    def _open(self, repairing: bool = False) -> None:
        segment_bytes = int(self.config["journal-segment-bytes"])  # type: ignore[call-overload]
        self.journal = journal = Journal(self.root, self.policy, segment_bytes)
        at = self._replay_from()
        replay = Replay(journal, at)
        self.meta = Log.open(self.root / "meta", self.log_config(STATE_SEGMENT_BYTES))
        journal.register(log_key(0, KIND_META), self.meta)
        replay.run({log_key(0, KIND_META): self.meta}, "metadata log")
        replay.cut_torn_commit()
        replay.cut_to_journal(0, self.meta)
        state = self.meta_state
        state.replay(log_records(self.meta))
        self._meta_ops = state.ops
        for fault in state.faults:
            logger.error(
                "metadata op cannot be applied: log=%s offset=%d stream_uid=%s reason=%s; "
                "skipped (run narad check --repair)",
                self.meta.path, fault.offset, fault.uid, fault.what,
            )
        streams_dir = self.root / "streams"
        streams_dir.mkdir(exist_ok=True)
        opened = [self._open_stream(uid, db, key) for uid, (db, key) in state.names.items()]
        streams = {key: log for key, log in journal.logs.items() if key != log_key(0, KIND_META)}
        refused: dict[int, str] = {}  # log key -> why it cannot take the journal's records
        replay.run(streams, "stream logs", refused)
        self.replayed = (replay.commits, replay.records, at.position)
        for key, log in journal.logs.items():
            if not key or key in refused:
                continue
            try:
                replay.cut_to_journal(key, log)
            except (LogCorrupted, LogFailed) as exc:
                refused[key] = str(exc)
        for key, why in refused.items():
            if repairing:
                self.journal.logs[key].adopt_journaled()
                logger.warning(
                    "event=records_lost log=%s reason=%s; the log keeps the %d records it "
                    "holds (narad check --repair)", self.root / describe_key(key), why,
                    self.journal.logs[key].next_offset,
                )
            else:
                self._out_of_service(self.streams[key >> 2], describe_key(key), why)
        for stream in opened:
            if stream.fault is None:
                try:
                    stream.load()
                except (CorruptSegment, LogFailed, OSError) as exc:
                    self._out_of_service(stream, describe_key(log_key(stream.uid, KIND_STATE)),
                                         str(exc))
            if stream.fault is None:
                self.dbs[stream.db][stream.key] = stream
                continue
            self.unavailable[stream.db, stream.key] = stream
            fault = stream.fault
            if isinstance(fault, LogFault):
                logger.error(
                    "event=key_unavailable log=%s stream_uid=%d key=%r reason=%s; the key is "
                    "unavailable until deleted or repaired (run narad check --repair)",
                    self.root / fault.log, stream.uid, stream.key, fault.what,
                )
                continue
            logger.error(
                "state op cannot be applied: log=%s offset=%d stream_uid=%d key=%r "
                "reason=%s; the key is unavailable until deleted or repaired (run narad "
                "check --repair)", self.root / fault.log, fault.offset, stream.uid,
                stream.key, fault.what,
            )
        if not state.faults:  # else a repair may need what looks orphaned or stale
            self._remove_orphans(streams_dir, set(state.names))
            if self._meta_ops > META_COMPACT_OPS and self.leads:
                self._compact_meta()
                journal.commit()
        self.checkpointer = Checkpointer(journal, at, lambda: self.kept_for_replicas())
        self.checkpointer.backlog_bytes = int(self.config["repl-backlog-size"])  # type: ignore[call-overload]
        # The checkpoint below fsyncs what the commits since the last one gave the
        # logs (replayed now, or written behind before the crash) and their start
        # moves; every other log is as the last checkpoint found it, durable.
        changed = replay.ends.keys() | replay.started
        for key, log in journal.logs.items():
            if at.trust_logs or key in changed:
                journal.touched[log] = None
        if self.logs_unavailable():
            logger.warning(
                "event=checkpoints_held position=%d: a key's log is unavailable, so no "
                "checkpoint is taken and the journal is kept whole from this position "
                "until every such key is repaired or deleted", at.position,
            )
            return
        self.checkpointer.run_now()

    def _replay_from(self) -> Checkpoint:
        """The checkpoint recovery starts from. A data dir with no journal yet (new,
        or written before the journal existed) starts from its logs as they are."""
        journal = self.journal
        path = journal.path / checkpoints.CHECKPOINT_FILE
        try:
            at = checkpoints.read(journal.path)
        except ValueError as exc:
            raise LogCorrupted(f"{path} is not a journal checkpoint: {exc}") from None
        if at is not None:
            return at
        if journal.position > journal.log.start_offset or path.exists():
            raise LogCorrupted(
                f"{path} is {'damaged' if path.exists() else 'missing'}, so the node cannot "
                "tell which of the journal's commits its logs hold durably (run narad check)"
            )
        if (self.root / "meta").is_dir():
            logger.info(
                "%s has no journal yet: its logs as they are become the first checkpoint",
                self.root,
            )
        return Checkpoint(journal.position, trust_logs=True)

    def _lock(self) -> None:
        self._lock_fd = lock_folder(self.root)

    def log_config(self, segment_bytes: int | None = None) -> LogConfig:
        c = self.config
        return LogConfig(
            segment_bytes=segment_bytes or int(c["segment-bytes"]),  # type: ignore[call-overload]
            segment_ms=int(c["segment-ms"]),  # type: ignore[call-overload]
            retention_ms=0 if segment_bytes else int(c["retention-ms"]),  # type: ignore[call-overload]
            retention_bytes=0 if segment_bytes else int(c["retention-bytes"]),  # type: ignore[call-overload]
            fsync=self.policy,
        )

    def _stream(self, uid: int, db: int, key: bytes) -> Stream:
        """Open stream `uid`'s logs (its folder made if needed) and take it into the
        keyspace and the journal; raises as Log.open does."""
        stream = Stream(
            uid,
            self.root / "streams" / str(uid),
            self.log_config(),
            self.log_config(STATE_SEGMENT_BYTES),
            self.journal,
            self.machines,
        )
        stream.node_entries = int(self.config["stream-node-max-entries"]) or 100  # type: ignore[call-overload]
        stream.db, stream.key = db, key
        self.streams[uid] = stream
        self.journal.register(log_key(uid, KIND_DATA), stream.data)
        self.journal.register(log_key(uid, KIND_STATE), stream.state)
        return stream

    def _open_stream(self, uid: int, db: int, key: bytes) -> Stream:
        """The stream the metadata log names, at start: one whose logs cannot be
        opened is a stream without logs, unavailable (see the module doc)."""
        try:
            return self._stream(uid, db, key)
        except (LogCorrupted, OSError) as exc:
            why = str(exc)
            logs = [describe_key(log_key(uid, kind)) for kind in (KIND_DATA, KIND_STATE)]
            log = next((log for log in logs if f"{self.root / log}{os.sep}" in why), None)
            stream = self._without_logs(uid, db, key)
            self._out_of_service(stream, log or f"streams/{uid}", why)
            return stream

    def _without_logs(self, uid: int, db: int, key: bytes) -> Stream:
        """Stream `uid` holding nothing, its logs never opened (`_unopened_logs`)."""
        folder = self.root / "streams" / str(uid)
        stream = Stream.__new__(Stream)
        stream.uid, stream.folder = uid, folder
        stream.journal, stream.machines = self.journal, self.machines
        stream._handlers, stream._note = self.machines.handlers, self.journal.note
        stream.data, stream.state = self._unopened_logs(folder)
        stream._init_state()
        stream.db, stream.key = db, key
        self.streams[uid] = stream
        return stream

    def _unopened_logs(self, folder: Path) -> tuple[Log, Log]:
        """A data and a state log for stream folder `folder`, made but never opened:
        they hold no segment, so nothing (closing them included) touches a file."""
        data = Log(folder / "data", self.log_config(), wall_clock_ms)
        state = Log(folder / "state", self.log_config(STATE_SEGMENT_BYTES), wall_clock_ms)
        data.closed = state.closed = True
        return data, state

    def _out_of_service(self, stream: Stream, log: str, why: str) -> None:
        """At start: `stream`'s log `log` cannot be used, for reason `why`. Its logs
        leave the journal and are closed, logs never opened take their place, and its
        fault (a LogFault) makes it unavailable."""
        if stream.fault is not None:
            return
        for opened in (stream.data, stream.state):
            self.journal.unregister(opened)
            if not opened.closed:
                opened.close()
        stream.data, stream.state = self._unopened_logs(stream.folder)
        db, key = stream.db, stream.key
        stream._init_state()  # nothing of what a replay cut short is kept
        stream.db, stream.key = db, key
        why = why.replace(f"{self.root}{os.sep}", "").removesuffix(" (run narad check)")
        what = " ".join(why.split())[:300]
        stream.fault = LogFault(-1, stream.uid, what, log)

    def logs_unavailable(self) -> bool:
        """Whether a key is unavailable because its log cannot be used: then no
        checkpoint may be taken (see the module doc)."""
        return any(isinstance(s.fault, LogFault) for s in self.unavailable.values())

    def _remove_orphans(self, streams_dir: Path, live: set[int]) -> None:
        for path in streams_dir.iterdir():
            if not (path.name.isdigit() and int(path.name) in live):
                logger.info("removing %s: no key names it", path)
                shutil.rmtree(path, ignore_errors=True)

    def _compact_meta(self) -> None:
        """Replace the metadata log's history by one snap op: the log's start moves
        past the old ops with the snap's commit, and the checkpoint after deletes
        their segments."""
        assert self.meta is not None
        live = [[s.uid, db, key] for db, keys in enumerate(self.dbs) for key, s in keys.items()]
        live += [[s.uid, db, key] for (db, key), s in self.unavailable.items()]
        self.meta.roll()
        first = self.meta.next_offset
        self._meta_op(["snap", self.meta_state.next_uid, live, self.schemas.snapshot()])
        self.journal.move_start(self.meta, first)
        self._meta_ops = 1

    def _meta_op(self, op: list[Any]) -> None:
        """Apply metadata op `op` as replay will (MetaState.apply, on the op as the
        log holds it), then append it; the caller makes the open streams follow."""
        assert self.meta is not None
        payload = msgpack.packb(op, use_bin_type=False)
        self.meta_state.apply(msgpack.unpackb(payload, raw=True), self.meta.next_offset)
        self.meta.append(payload)
        self._meta_ops += 1
        self.note(self.meta)

    # -- the keyspace ---------------------------------------------------------------------

    def get(self, db: int, key: bytes) -> Stream | None:
        """The stream at `key`, or None; an unavailable key raises its fault's error."""
        stream = self.dbs[db].get(key)
        if stream is None and self.unavailable:  # only a missing key pays for the test
            faulted = self.unavailable.get((db, key))
            if faulted is not None:
                assert faulted.fault is not None
                raise faulted.fault.error(key)
        return stream

    def find(self, db: int, key: bytes) -> Stream | None:
        """The stream at `key`, an unavailable one too: for the commands that delete."""
        stream = self.dbs[db].get(key)
        return self.unavailable.get((db, key)) if stream is None else stream

    def names(self, db: int) -> Collection[bytes]:
        """Every key of database `db`, unavailable ones too."""
        if not self.unavailable:
            return self.dbs[db]
        return [*self.dbs[db], *(key for at, key in self.unavailable if at == db)]

    def create_stream(self, db: int, key: bytes) -> Stream:
        """A new stream at `key`. Its folder and logs are made first: when they cannot
        be (an I/O error), the reply is IOERR naming the path, and nothing is logged
        nor left behind."""
        assert key not in self.dbs[db]
        uid = self.meta_state.next_uid
        folder = self.root / "streams" / str(uid)
        existed = folder.exists()
        try:
            stream = self._stream(uid, db, key)
        except OSError as exc:
            if not existed:
                shutil.rmtree(folder, ignore_errors=True)
            raise errors.io_error_on(f"creating key '{errors.clip(key)}'",
                                     exc.filename or folder, exc) from None
        self._meta_op(["create", uid, db, key])
        return self._loaded(stream)

    def _created(self, uid: int, db: int, key: bytes) -> Stream:
        return self._loaded(self._stream(uid, db, key))

    def _loaded(self, stream: Stream) -> Stream:
        stream.load()
        self.dbs[stream.db][stream.key] = stream
        return stream

    def delete(self, db: int, key: bytes) -> bool:
        stream = self.dbs[db].pop(key, None)
        if stream is None and self.unavailable:
            stream = self.unavailable.pop((db, key), None)
        if stream is None:
            return False
        self._meta_op(["delete", stream.uid])
        self._deleted(stream)
        return True

    def _deleted(self, stream: Stream) -> None:
        """`stream`, out of `dbs` (or `unavailable`), is gone: its logs leave the
        journal, its folder goes once its delete op is durable."""
        self.streams.pop(stream.uid, None)
        self.journal.unregister(stream.data)
        self.journal.unregister(stream.state)
        self.on_delete(stream)
        self._doomed.append(stream)
        self.written(stream.db, stream.key)  # its schema went with the op (MetaState.apply)

    def schema_op(self, op: list[Any]) -> None:
        """Log a schema registry op (from `Registry.propose*`, keyed by a stream's
        uid) and apply it; replies wait for its commit like every other op's."""
        self._meta_op(op)

    def rename(self, db: int, src: bytes, dst: bytes) -> None:
        stream = self.dbs[db][src]
        if src == dst:
            return
        self.delete(db, dst)
        self._meta_op(["rename", stream.uid, db, dst])
        self._renamed(stream, dst)

    def _renamed(self, stream: Stream, dst: bytes) -> None:
        """`stream` is at `dst` now (of its database, where no key is)."""
        db, src = stream.db, stream.key
        del self.dbs[db][src]
        self.dbs[db][dst] = stream
        stream.key = dst
        self.written(db, src)
        self.written(db, dst)

    def swapdb(self, a: int, b: int) -> None:
        self._meta_op(["swapdb", a, b])
        self._swapped(a, b)

    def _swapped(self, a: int, b: int) -> None:
        self.dbs[a], self.dbs[b] = self.dbs[b], self.dbs[a]
        for db in (a, b):
            for stream in self.dbs[db].values():
                stream.db = db
        if self.unavailable:
            for stream in self.unavailable.values():
                if stream.db in (a, b):
                    stream.db = b if stream.db == a else a
            self.unavailable = {(s.db, s.key): s for s in self.unavailable.values()}

    def flushdb(self, db: int) -> None:
        """Delete every key of `db`, unavailable ones too; each delete tells the key's
        WATCHers (Redis too only spoils keys that existed)."""
        for key in list(self.names(db)):
            self.delete(db, key)

    def written(self, db: int, key: bytes) -> None:
        """`key` was written: WATCHers and blocked readers there are told."""
        self.on_write(db, key)

    # -- following a leader (narad/replication/apply.py) ----------------------------------

    def follow_meta(self, offset: int, payload: bytes) -> None:
        """Apply the leader's metadata op `payload`, at meta `offset` (appended to the
        metadata log by the caller), as replay does, and make the open streams follow
        the names it keeps, as the leader's did. Raises ValueError when it cannot be
        applied (this node's history is not its leader's)."""
        op = msgpack.unpackb(payload, raw=True)
        if not (isinstance(op, list) and op and isinstance(op[0], bytes)):
            raise ValueError("the record is not an op (a list that starts with its name)")
        self.meta_state.apply(op, offset)
        self._meta_ops += 1
        kind = op[0]
        if kind == b"create":
            self._created(op[1], op[2], bytes(op[3]))
        elif kind == b"delete":
            stream = self.streams.get(op[1])
            if stream is not None:
                found = self.dbs[stream.db].pop(stream.key, None)
                if found is None:
                    self.unavailable.pop((stream.db, stream.key), None)
                self._deleted(stream)
        elif kind == b"rename":
            stream = self.streams[op[1]]
            self._renamed(stream, bytes(op[3]))
        elif kind == b"swapdb":
            self._swapped(op[1], op[2])

    # -- committing -----------------------------------------------------------------------

    def note(self, log: Log) -> None:
        self.journal.note(log)

    def commit(self) -> None:
        """Commit what was written since the last commit and make every commit so far
        durable, inline (SAVE, shutdown; the server's event loop commits at the end
        of each iteration instead)."""
        if self.journal.commit():
            self.last_commit_s = int(time.time())
        self.journal.sync()
        self.remove_doomed()

    def checkpoint_due(self) -> bool:
        if self.unavailable and self.logs_unavailable():
            return False
        c = self.config
        return self.checkpointer.due(
            int(c["checkpoint-bytes"]), int(c["checkpoint-seconds"])  # type: ignore[call-overload]
        )

    def remove_doomed(self) -> None:
        """Remove deleted streams' folders, once their delete ops are durable (and no
        checkpoint is fsyncing their logs)."""
        if not self._doomed or self.checkpointer.running or self.kept_for_replicas()[1]:
            return
        if self.journal.unfinished:  # their delete ops may be in the unfinished commit
            return
        if self.policy is not FsyncPolicy.ALWAYS:
            try:
                self.journal.sync()
            except LogFailed:  # not durable: the folders stay, for the next start
                return
        doomed, self._doomed = self._doomed, []
        for stream in doomed:
            stream.close()
            shutil.rmtree(stream.folder, ignore_errors=True)

    def apply_settings(self) -> None:
        """Put CONFIG SET's values of the settings the logs carry into every open log:
        segment and retention bounds, stream-node-max-entries and the fsync policy.
        Entering `fsync always`, everything written before is fsynced first, so that
        every record a reply or a consumer can see from now on is durable; when that
        fsync fails, the policy stays as it was and CONFIG SET answers an error."""
        for stream in self.streams.values():
            stream.data.config = self.log_config()
            stream.state.config = self.log_config(STATE_SEGMENT_BYTES)
            stream.node_entries = int(self.config["stream-node-max-entries"]) or 100  # type: ignore[call-overload]
        if self.meta is not None:
            self.meta.config = self.log_config(STATE_SEGMENT_BYTES)
        if self.journal is not None:
            segment_bytes = int(self.config["journal-segment-bytes"])  # type: ignore[call-overload]
            self.journal.log.config = journal_config(segment_bytes)
        policy = FsyncPolicy(str(self.config["fsync"]))
        if policy is self.policy:
            return
        try:
            self.journal.set_policy(policy)
        except LogFailed as exc:
            raise BadValue(f"cannot fsync what was written before: {exc}") from None
        self.policy = policy

    def maintain(self) -> None:
        """Periodic upkeep between commits: retention deletes whole sealed data
        segments (the stream's start follows, through a trim op), and state logs that
        grew past their bound are compacted into a snapshot. Unavailable streams are
        not in `dbs`: their logs stay as they are, for a repair to see."""
        for keys in self.dbs:
            for stream in keys.values():
                start = stream.data.retention_start()
                queue = stream.queue
                if start > stream.start and queue is not None:
                    # A queue's retention by age deletes acked messages only.
                    start = stream.data.retention_start(age_floor=queue.unacked_floor())
                if start > stream.start:
                    stream.log_op(["trim", start])
                    self.journal.move_start(stream.data, start)
                stream.compact_if_due()

    def close(self) -> None:
        """Commit, checkpoint (so the next open replays nothing) and close."""
        if self.journal is None:
            return
        if self.checkpointer is None:  # open failed half way
            self.journal.close()
            return
        try:
            self.commit()
            if not self.logs_unavailable():
                self.checkpointer.run_now()
            self.remove_doomed()  # those a running checkpoint held back
        except LogFailed as exc:
            logger.error("closing: %s; the next start recovers from the journal", exc)
        for stream in self.streams.values():
            stream.close()
        if self.meta is not None:
            self.meta.close()
        self.journal.close()
        if self._lock_fd >= 0:
            os.close(self._lock_fd)
            self._lock_fd = -1
