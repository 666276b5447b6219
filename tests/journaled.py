"""Data dirs for tests, through the journal: opening a store, dropping it as kill -9
would (`crash`), and writing records into a stopped server's logs the way the server
does, through a commit of the data dir's journal, for tests that plant what a bug
could have written: a record written to a log file alone is one no commit holds, and
the next start drops it (narad/log/recovery.py)."""

from __future__ import annotations

import os
from pathlib import Path

from narad.config import Config
from narad.keyspace import Keyspace
from narad.log import FsyncPolicy, Log, LogConfig
from narad.log import journal as journal_module
from narad.log.journal import KIND_DATA, KIND_META, KIND_STATE, Journal, log_key
from narad.streams.stream import Stream

Record = tuple[bytes, int, int, int]  # payload, id_ms, id_seq, flags


def open_store(folder: Path, *settings: tuple[str, str]) -> Keyspace:
    store = Keyspace(Config.load(None, [("dir", str(folder)), *settings]))
    store.open()
    return store


def add(stream: Stream, n: int) -> list[int]:
    """Add `n` entries n=<ID> with the next IDs; their IDs."""
    first = stream.last_id + 1
    sids = [first + i for i in range(n)]
    for sid in sids:
        stream.add(sid, [b"n", b"%d" % sid])
    return sids


def entries(store: Keyspace, key: bytes) -> list[int]:
    """The IDs of `key`'s entries (none when there is no such key)."""
    stream = store.get(0, key)
    return [] if stream is None else [sid for sid, _ in stream.range(0, 1 << 128)]


def small_journal_segments(folder: Path, backlog: int = 0) -> Keyspace:
    """An open store whose journal spans several segments of 4 KiB: stream s (uid 1),
    40 entries of about 300 bytes, each added by a commit of its own; its checkpoints
    keep `backlog` bytes of journal for replicas (repl-backlog-size)."""
    store = open_store(folder, ("repl-backlog-size", str(backlog)))
    store.journal.log.config = journal_module.journal_config(4096)  # below the setting's least
    stream = store.create_stream(0, b"s")
    for _ in range(40):
        stream.add(stream.last_id + 1, [b"pad", b"x" * 300])
        store.journal.commit()
    return store


def crash(store: Keyspace) -> None:
    """Drop the store as kill -9 would: no write, no fsync, no checkpoint; what is
    in the files (page cache) stays."""
    for log in [store.journal.log, *store.journal.logs.values()]:
        for seg in log.segments:
            seg.close()
    os.close(store._lock_fd)
    store._lock_fd = -1


def append(data: Path, log_path: str, records: list[Record]) -> int:
    """Commit `records` to the log at `log_path` of data dir `data` ("meta",
    "streams/<uid>/data" or "streams/<uid>/state"); the first one's offset."""
    parts = log_path.split("/")
    key = (
        log_key(0, KIND_META)
        if parts == ["meta"]
        else log_key(int(parts[1]), {"data": KIND_DATA, "state": KIND_STATE}[parts[2]])
    )
    journal = Journal(data, FsyncPolicy.ALWAYS)
    log = Log.open(data / log_path, LogConfig())
    try:
        journal.register(key, log)
        first = log.next_offset
        for payload, id_ms, id_seq, flags in records:
            log.append(payload, id_ms, id_seq, flags)
        journal.note(log)
        journal.commit()
        return first
    finally:
        log.close()
        journal.close()


def append_payloads(data: Path, log_path: str, *payloads: bytes) -> int:
    return append(data, log_path, [(payload, 0, 0, 0) for payload in payloads])
