"""`narad dump DIR` on a data dir: every key's entries and state ops, decoded.

Owns: reading a data dir's keys from its files as they are (read-only, never through
Log.open, whose recovery would change them): the names from the metadata log and the
journal's metadata records past its end (as recovery would make them), each key's
entries (ID and fields) from its data log, and its state ops, told in words. What the
journal holds for a key beyond the key's own logs (committed, not yet checkpointed
into them: a running server's write-behind, or what a crash left for recovery) is
read from the journal and shown after the log's own, under a heading that says so.

Never: writes to the data dir, or decides anything a server relies on. narad/cli.py
owns the command line; this module returns lines and counts.

A line is `ID field=value ...` for an entry (values as in the logs: bare, or quoted
when they hold a space, quote, `=` or control character; bytes that are not UTF-8 as
\\xNN), `offset N: <what the op did>` for a state op, and `# ...` for a heading.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from narad.check_journal import (
    JournalWalk,
    log_end,
    logical_start,
    metadata_records,
    records_from,
    run_records,
    walk_journal,
)
from narad.log.format import FLAG_ENTRY, Record, decode_fields
from narad.log.journal import JOURNAL_FOLDER, KIND_DATA, KIND_STATE, BadCommit, log_key
from narad.logs import quote

ID_BITS = 64
SEQ_MASK = (1 << ID_BITS) - 1
ID_BYTES = 16  # an ID in a state op: 16 bytes, big-endian (docs/log-format.md)


def is_data_dir(root: Path) -> bool:
    return (root / "meta").is_dir() or (root / JOURNAL_FOLDER).is_dir()


@dataclass(frozen=True)
class Key:
    """A key of the data dir: its database, name and stream uid (its folder's name)."""

    db: int
    name: bytes
    uid: int


def keys(root: Path, walk: JournalWalk) -> list[Key]:
    """Every key of data dir `root`, by database then name, as recovery names them."""
    from narad.metalog import DATABASES_ANY, MetaState
    from narad.schema.keyspace import StreamSchemas

    state = MetaState(StreamSchemas(), DATABASES_ANY)
    state.replay(metadata_records(root, walk))
    found = [Key(db, name, uid) for uid, (db, name) in state.names.items()]
    return sorted(found, key=lambda k: (k.db, k.name))


def parse_id(text: str) -> int:
    """`ms-seq`, or `ms` (seq 0), or `-` (the first ID) as one int; ValueError else."""
    if text == "-":
        return 0
    ms, dash, seq = text.partition("-")
    if not ms.isdigit() or (dash and not seq.isdigit()) or int(ms) > SEQ_MASK:
        raise ValueError(f"not an entry ID: {text!r} (give ms-seq, ms or -)")
    if dash and int(seq) > SEQ_MASK:
        raise ValueError(f"not an entry ID: {text!r} (give ms-seq, ms or -)")
    return (int(ms) << ID_BITS) | int(seq or 0)


def id_text(sid: int) -> str:
    return f"{sid >> ID_BITS}-{sid & SEQ_MASK}"


# -- reading a key -------------------------------------------------------------------------


@dataclass
class KeyRecords:
    """Where a key's records are read from: its log folder and the journal."""

    folder: Path
    runs: list[Any]  # the journal's runs of this log (check_journal.Run)

    def own(self, progress: Callable[[int], None]) -> Iterator[Record]:
        """The log's own records, from its logical start."""
        if not self.folder.is_dir():
            return
        for _, rec in records_from(self.folder, logical_start(self.folder)):
            progress(rec.size)
            yield rec

    def journal_only(self) -> list[Record]:
        """The journal's records of this log past the log's end: committed, not yet
        (or, after a crash, never) written into the log."""
        end = log_end(self.folder) if self.folder.is_dir() else 0
        found: list[Record] = []
        for run in self.runs:
            if run.end <= end:
                continue
            try:
                records = run_records(run)
            except BadCommit:
                break
            found += [rec for rec in records if rec.offset >= end]
            end = max(end, run.end)
        return found


def key_records(root: Path, walk: JournalWalk, key: Key, kind: int) -> KeyRecords:
    folder = root / "streams" / str(key.uid) / ("data" if kind == KIND_DATA else "state")
    return KeyRecords(folder, walk.runs.get(log_key(key.uid, kind), []))


def entry_line(rec: Record, deleted: bool = False) -> str:
    """`ID field=value ...` (`(deleted)` after an entry XDEL removed)."""
    sid = (rec.id_ms << ID_BITS) | rec.id_seq
    if not rec.flags & FLAG_ENTRY:
        return f"{id_text(sid)} payload={quote(rec.payload)}"
    try:
        fields = decode_fields(rec.payload)
    except ValueError as exc:
        return f"{id_text(sid)} payload={quote(rec.payload)} (not a field list: {exc})"
    pairs = " ".join(
        f"{quote(f)}={quote(v)}" for f, v in zip(fields[::2], fields[1::2], strict=False)
    )
    return f"{id_text(sid)} {pairs}" + (" (deleted)" if deleted else "")


def deleted_offsets(records: Iterator[Record] | list[Record]) -> set[int]:
    """The data offsets XDEL removed, from a key's state ops."""
    import msgpack

    found: set[int] = set()
    for rec in records:
        try:
            op = msgpack.unpackb(rec.payload, raw=True, strict_map_key=False)
        except Exception:
            continue
        if isinstance(op, list) and op and op[0] == b"del" and isinstance(op[1], list):
            found.update(o for o in op[1] if isinstance(o, int))
    return found


# -- state ops in words ---------------------------------------------------------------------


def when(ms: object) -> str:
    """A wall-clock time in ms as ISO 8601 UTC."""
    if not isinstance(ms, int) or ms <= 0:
        return "now"
    seconds, millis = divmod(ms, 1000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{millis:03d}Z"


def _ids(blob: object) -> list[str]:
    if not isinstance(blob, bytes) or len(blob) % ID_BYTES:
        return []
    starts = range(0, len(blob), ID_BYTES)
    return [id_text(int.from_bytes(blob[i : i + ID_BYTES], "big")) for i in starts]


def _count(items: object, word: str) -> str:
    n = len(items) if isinstance(items, (list, bytes)) else 0
    if n == 1:
        return f"1 {word}"
    return f"{n} {word[:-1]}ies" if word.endswith("y") else f"{n} {word}s"


def _offsets(items: object, ids: dict[int, str]) -> str:
    """Offsets, with the entry ID of each this dump read: `3 (1-3), 4 (1-4)`."""
    if not isinstance(items, list):
        return "?"
    shown = [f"{o} ({ids[o]})" if o in ids else str(o) for o in items[:8]]
    more = f", ... (+{len(items) - 8})" if len(items) > 8 else ""
    return ", ".join(shown) + more


SETTING_NAMES = ("visibility", "maxreceives", "dlq", "delay", "retention", "maxbytes",
                 "dedupwindow")


def _settings(values: object) -> str:
    if not isinstance(values, list):
        return "?"
    return " ".join(f"{n}={quote(v)}" for n, v in zip(SETTING_NAMES, values, strict=False))


def _t(value: object) -> str:
    return quote(value) if isinstance(value, bytes) else str(value)


def op_words(op: list[Any], ids: dict[int, str]) -> str:
    """What one state op did, in words (the name as stored when it is not known)."""
    name = op[0].decode("ascii", "replace") if isinstance(op[0], bytes) else str(op[0])
    base = name.split("/")[0]
    a = [*op[1:], None, None, None, None, None, None]
    told = _WORDS.get(base)
    if told is None:
        return f"op {name} {a[: len(op) - 1]!s}"
    return told(a, ids)


_WORDS: dict[str, Callable[[list[Any], dict[int, str]], str]] = {
    "trim": lambda a, ids: f"trimmed: entries before offset {a[0]} removed",
    "del": lambda a, ids: f"deleted {_count(a[0], 'entry')}: offsets {_offsets(a[0], ids)}",
    "setid": lambda a, ids: f"last ID set to {' '.join(_ids(a[0]))}",
    "gcreate": lambda a, ids: f"group {_t(a[0])} created, last delivered ID {' '.join(_ids(a[1]))}",
    "gdestroy": lambda a, ids: f"group {_t(a[0])} destroyed",
    "gsetid": lambda a, ids: f"group {_t(a[0])} set to last delivered ID {' '.join(_ids(a[1]))}",
    "gconsumer": lambda a, ids: f"group {_t(a[0])}: consumer {_t(a[1])} created",
    "gdelconsumer": lambda a, ids: f"group {_t(a[0])}: consumer {_t(a[1])} deleted",
    "gdeliver": lambda a, ids: (
        f"group {_t(a[0])}: delivered {_count(_ids(a[5]), 'entry')} to consumer {_t(a[1])}"
        f" at {when(a[2])}, last delivered ID {' '.join(_ids(a[3]))}"
        + (f": {', '.join(_ids(a[5])[:8])}" if _ids(a[5]) else " (NOACK)")
    ),
    "ghistory": lambda a, ids: (
        f"group {_t(a[0])}: consumer {_t(a[1])} read {_count(_ids(a[3]), 'pending entry')}"
        " of its history again"
    ),
    "gack": lambda a, ids: (
        f"group {_t(a[0])}: acked {_count(_ids(a[1]), 'entry')}: {', '.join(_ids(a[1])[:8])}"
    ),
    "gclaim": lambda a, ids: f"group {_t(a[0])}: entries claimed by consumer {_t(a[1])}",
    "q.create": lambda a, ids: f"queue created: {_settings(a[0])}",
    "q.config": lambda a, ids: f"queue settings changed: {_settings(a[0])}",
    "q.secret": lambda a, ids: "receipt secret set",
    "q.deliver": lambda a, ids: (
        f"delivered {_count(a[4], 'message')} as delivery {a[0]} at {when(a[2])}, in flight"
        f" until {when(a[1])}: offsets {_offsets(a[4], ids)}; cursor at offset {a[3]}"
    ),
    "q.ack": lambda a, ids: f"acked {_count(a[0], 'message')}: offsets {_offsets(a[0], ids)}",
    "q.nack": lambda a, ids: (
        f"nacked {_count(a[1], 'message')}, visible again at {when(a[0])}: offsets"
        f" {_offsets(a[1], ids)}"
    ),
    "q.touch": lambda a, ids: (
        f"message at offset {_offsets([a[0]], ids)} in flight until {when(a[1])}"
    ),
    "q.delay": lambda a, ids: (
        f"{_count(a[1], 'message')} delayed until {when(a[0])}: offsets {_offsets(a[1], ids)}"
    ),
    "q.dedup": lambda a, ids: (
        f"dedup key {_t(a[0])} names {' '.join(_ids(a[1]))} until {when(a[2])}"
    ),
    "q.dead": lambda a, ids: (
        f"{_count(a[1], 'message')} dead-lettered"
        + (" and sent to the dead-letter queue" if a[0] == 0 else " and dropped (no"
           " dead-letter queue took them)")
        + f": offsets {_offsets(a[1], ids)}"
    ),
    "q.take": lambda a, ids: (
        f"redrive took {_count(a[1], 'dead letter')}: offsets {_offsets(a[1], ids)};"
        f" cursor at offset {a[0]}"
    ),
    "q.seek": lambda a, ids: f"cursor moved to offset {a[0]}",
    "q.sub": lambda a, ids: (
        f"subscribed to stream uid {a[0]} from its offset {a[1]} (own next offset {a[2]})"
    ),
    "q.subpos": lambda a, ids: (
        f"copied from stream uid {a[0]} up to its offset {a[1]} (own next offset {a[2]})"
    ),
    "q.unsub": lambda a, ids: f"unsubscribed from stream uid {a[0]}",
    "q.rejected": lambda a, ids: f"{a[0]} copied messages refused by the schema",
}


def op_line(rec: Record, ids: dict[int, str]) -> str:
    """`offset N: <words>`, or the bytes when the op does not decode."""
    import msgpack

    try:
        op = msgpack.unpackb(rec.payload, raw=True, strict_map_key=False)
    except Exception as exc:
        return f"offset {rec.offset}: not an op ({exc}): {quote(rec.payload)}"
    if not (isinstance(op, list) and op):
        return f"offset {rec.offset}: not an op: {quote(rec.payload)}"
    try:
        words = op_words(op, ids)
    except (IndexError, TypeError, ValueError, AttributeError):
        words = f"op {quote(op[0])} (unexpected arguments)"
    return f"offset {rec.offset}: {words}"


# -- a data dir ------------------------------------------------------------------------------


@dataclass
class Request:
    """What `narad dump DIR` is asked for."""

    root: Path
    key: bytes | None = None  # None: every key
    db: int | None = None  # None with no key: every database
    from_id: int = 0  # the first entry ID shown
    count: int | None = None  # at most this many entries (and ops) per key


def dump_bytes(root: Path, chosen: list[Key]) -> int:
    """The bytes `dump` reads of the keys' logs, for its progress bar."""
    total = 0
    for key in chosen:
        for kind in ("data", "state"):
            folder = root / "streams" / str(key.uid) / kind
            if folder.is_dir():
                total += sum(p.stat().st_size for p in folder.glob("*.log"))
    return total


def dump_key(
    root: Path, walk: JournalWalk, key: Key, request: Request, progress: Callable[[int], None]
) -> Iterator[str]:
    """The lines of one key: a heading, its entries, its state ops."""
    data = key_records(root, walk, key, KIND_DATA)
    state = key_records(root, walk, key, KIND_STATE)
    state_journal = state.journal_only()
    deleted = deleted_offsets(state.own(lambda n: None)) | deleted_offsets(state_journal)
    yield f"# db {key.db} key {quote(key.name)} (streams/{key.uid})"
    ids: dict[int, str] = {}
    left = request.count
    for part, records in (("", data.own(progress)), ("journal", iter(data.journal_only()))):
        heading = part == "journal"
        for rec in records:
            if heading:
                yield (f"# entries committed in the journal, not yet in {data.folder.name}/"
                       f" (a running server's write-behind, or what recovery replays):")
                heading = False
            sid = (rec.id_ms << ID_BITS) | rec.id_seq
            ids[rec.offset] = id_text(sid)
            if sid < request.from_id or left == 0:
                continue
            yield entry_line(rec, rec.offset in deleted)
            if left is not None:
                left -= 1
    yield from _state_lines(state, state_journal, ids, request.count, progress)


def _state_lines(
    state: KeyRecords,
    journal: list[Record],
    ids: dict[int, str],
    count: int | None,
    progress: Callable[[int], None],
) -> Iterator[str]:
    left = count
    heading = "# state ops:"
    for rec in state.own(progress):
        if left == 0:
            break
        if heading:
            yield heading
            heading = ""
        yield "  " + op_line(rec, ids)
        left = None if left is None else left - 1
    if journal and left != 0:
        yield "# state ops committed in the journal, not yet in state/:"
        for rec in journal[: left if left is not None else len(journal)]:
            yield "  " + op_line(rec, ids)


def journal_summary(walk: JournalWalk) -> str | None:
    """How far the journal runs past its checkpoint, in words (None: not at all)."""
    if walk.at is None or walk.end <= walk.at.position:
        return None
    behind = walk.end - walk.at.position
    commits = "1 commit" if behind == 1 else f"{behind} commits"
    return (
        f"the journal holds {commits} past its checkpoint (positions {walk.at.position + 1}"
        f"..{walk.end}): their records may not be in the keys' logs yet"
    )


def open_walk(root: Path, progress: Callable[[int], None] | None = None) -> JournalWalk:
    """The journal of `root` from its checkpoint on (empty when it has none)."""
    if not (root / JOURNAL_FOLDER).is_dir():
        return JournalWalk(root / JOURNAL_FOLDER)

    class _Sink:
        def advance(self, n: int) -> None:
            if progress is not None:
                progress(n)

    return walk_journal(root, _Sink())
