"""The `narad` command line: one subcommand per tool.

Owns: parsing arguments, and turning what the tools return into lines on stdout
(progress and errors on stderr) and an exit code: 0 success, 1 problems found or the
command failed, 2 usage errors (argparse's own code) and nothing to work on.

Never: holds logic that a server or a test would need (that lives in the modules the
subcommands call), or opens a log through Log.open: `check` and `dump` read the files
as they are on disk, since recovery would change them.

A subcommand is a function that adds its parser to the subparsers and binds its runner
with `set_defaults(run=...)`; every one is listed in SUBCOMMANDS. A runner that needs
heavy modules (a server, an event loop) imports them itself, so that no subcommand
pays for another's imports.
"""

from __future__ import annotations

import argparse
import bisect
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, TypeAlias

import narad
from narad import serve
from narad.log.format import FLAG_ENTRY, Record, decode_fields
from narad.log.segment import zero_tail
from narad.progress import Progress

if TYPE_CHECKING:
    from narad.log.check import CheckReport, Problem, SegmentFile

    Subparsers: TypeAlias = argparse._SubParsersAction[argparse.ArgumentParser]
Runner = Callable[[argparse.Namespace], int]

# `dump --payload` prints at most this many bytes of a payload or of one field.
SHOWN_BYTES_MAX = 256
# `dump --payload` prints at most this many field/value pairs of an entry.
SHOWN_PAIRS_MAX = 32


def main(argv: list[str] | None = None) -> int:
    """Run the command line `argv` (default: sys.argv[1:]) and return its exit code."""
    args = build_parser().parse_args(argv)
    run: Runner = args.run
    try:
        code = run(args)
        sys.stdout.flush()
    except BrokenPipeError:
        # The reader left (`narad dump ... | head`); Python would complain at exit
        # when flushing stdout again, so point it at /dev/null.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1
    return code


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="narad", description="Narad: a message queue with durable logs."
    )
    parser.add_argument("--version", action="version", version=f"narad {narad.__version__}")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add in SUBCOMMANDS:
        add(subparsers)
    return parser


def _usage_error(command: str, message: str) -> int:
    print(f"narad {command}: error: {message}", file=sys.stderr)
    return 2


def _natural(text: str) -> int:
    """argparse type: an integer >= 0."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}")
    return value


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


# -- narad check ---------------------------------------------------------------------


def _add_check(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "check",
        help="verify log folders, and repair what can be repaired without loss",
        description=(
            "Read every record of every segment and check it (CRC, dense offsets, "
            "stream IDs and timestamps in order), compare every index with a rebuild, "
            "and check the checkpoints; in a data dir, hold the journal against every log "
            "(its checkpoint, each commit since it, each log's end and record bytes), and "
            "replay the metadata log and every stream's state log as a server would and "
            "report each op that cannot be applied, and each stream log that makes its key "
            "unavailable at start. A check may run beside a server (read-only); "
            "--repair takes the data dir's lock and is refused while a server holds it. "
            "Exit code: 0 clean (or everything repaired), 1 problems remain (or the "
            "data dir is in use), 2 nothing to check or a usage error."
        ),
    )
    parser.add_argument(
        "dir", type=Path, metavar="DIR", help="a log folder, or a data dir: every log under it"
    )
    parser.add_argument(
        "--repair",
        action="store_true",
        help="truncate a torn tail of a last segment and rewrite bad indexes; "
        "remove metadata ops that cannot be applied; truncate a stream's state log at "
        "its op that cannot be applied; recover the data dir when the journal ends in a "
        "torn commit or a log holds records past it; cut a stream's log that makes its key "
        "unavailable before its first missing or unreadable record, keeping what the "
        "journal holds after it (the records dropped are lost); other corruption is never "
        "repaired",
    )
    parser.set_defaults(run=_run_check)


def _run_check(args: argparse.Namespace) -> int:
    from narad.log.check import check_logs, find_logs, scan_bytes

    root: Path = args.dir
    if not root.is_dir():
        return _usage_error("check", f"{root} is not a directory")
    folders = find_logs(root)
    if not folders:
        return _usage_error("check", f"nothing to check: no Narad logs at or under {root}")
    locks = _check_locks(folders, args.repair)
    if locks is None:
        return 1
    try:
        with Progress(scan_bytes(folders), label="checking") as bar:
            report = check_logs(folders, args.repair, bar)
        report.problems += _journal_problems(root, args.repair and report.clean)
        report.problems += _key_problems(root, report, args.repair)
        sound = args.repair and report.clean
        report.problems += _replay_problems(root, sound)
    finally:
        for fd in locks:
            os.close(fd)
    for problem in report.problems:
        print(problem_line(problem))
    print(summary_line(report))
    if not args.repair:
        _note_journal(root)
    return 0 if report.clean else 1


def _note_journal(root: Path) -> None:
    """Say on stderr how far data dir `root`'s journal runs past its checkpoint, and
    who will write those records into the keys' logs."""
    from narad.dump import is_data_dir, journal_summary, open_walk
    from narad.log.lock import holder

    if not is_data_dir(root):
        return
    summary = journal_summary(open_walk(root))
    if summary is None:
        return
    if holder(root) is not None:
        then = "the running server writes them behind the journal, and checkpoints"
    else:
        then = "the next start replays them (recovery), as narad dump shows them"
    print(f"narad check: note: {summary}; {then}", file=sys.stderr)


def _check_locks(folders: list[Path], repair: bool) -> list[int] | None:
    """The data dir locks `check` holds while it runs: with `repair`, every data dir
    the logs belong to, so that no server opens them meanwhile (None, after saying
    why, when one is in use); a plain check reads alongside a running server and
    takes none, with a note, since a write in progress may look like a torn tail."""
    from narad.log.lock import FolderBusy, holder, lock_folder, lock_folders

    taken: list[int] = []
    for folder in lock_folders(folders):
        if not repair:
            pid = holder(folder)
            if pid is not None:
                print(
                    f"narad check: note: {folder} is in use by process {pid}: checking "
                    "read-only; a record being written may show as a torn tail",
                    file=sys.stderr,
                )
            continue
        try:
            taken.append(lock_folder(folder))
        except (FolderBusy, OSError) as exc:
            advice = "; stop it first" if isinstance(exc, FolderBusy) else ""
            print(f"narad check: --repair refused: {exc}{advice}", file=sys.stderr)
            for fd in taken:
                os.close(fd)
            return None
    return taken


def _journal_problems(root: Path, repair: bool) -> list[Problem]:
    """The data dir's journal against its logs (narad/check_journal.py). With
    `repair` (only when the logs themselves are sound), problems that are all of the
    kinds recovery mends (a torn commit, records past the journal's end) are mended
    by recovering and checkpointing the data dir, then checked again."""
    from narad.check_journal import check_journal, journal_scan_bytes
    from narad.log.journal import JOURNAL_FOLDER

    if not (root / JOURNAL_FOLDER).is_dir():
        return []
    from narad.log.check import Kind, Problem

    try:
        with Progress(journal_scan_bytes(root), label="checking the journal") as bar:
            problems = check_journal(root, bar)
    except OSError as exc:
        what = f"cannot read the journal or a log: {exc}"
        return [Problem(Kind.IO_ERROR, root / JOURNAL_FOLDER, None, what)]
    if repair and problems and all(p.repairable for p in problems):
        from narad.log.log import LogFailed
        from narad.log.opening import LogCorrupted
        from narad.repair import checkpoint_at_end

        try:
            checkpoint_at_end(root)
        except (LogCorrupted, LogFailed, OSError) as exc:
            print(f"narad check: recovering {root} failed: {exc}", file=sys.stderr)
            return problems
        if not check_journal(root):
            for problem in problems:
                problem.repaired = True
    return problems


def _key_problems(root: Path, report: CheckReport, repair: bool) -> list[Problem]:
    """The stream logs that make their keys unavailable at start (narad/repair.py's
    check_keys), whose other problems become repairable. With `repair`, when every
    problem left is repairable, those logs are cut and the data dir recovered
    (repair_keys), then the logs, the journal and the keys are checked again: when
    all is clean, every problem found so far counts as repaired."""
    from narad.check_journal import check_journal
    from narad.log.check import check_logs, find_logs
    from narad.log.log import LogFailed
    from narad.log.opening import LogCorrupted
    from narad.machines import stream_machines
    from narad.repair import check_keys, repair_keys

    found = check_keys(root, report.problems)
    if not (repair and found and all(p.repairable for p in report.remaining)):
        return found
    try:
        repair_keys(root, stream_machines())
    except (LogCorrupted, LogFailed, OSError) as exc:
        print(f"narad check: repairing the keys of {root} failed: {exc}", file=sys.stderr)
        return found
    again = check_logs(find_logs(root)).problems + check_journal(root)
    if not again and not check_keys(root, again):
        for problem in [*report.problems, *found]:
            problem.repaired = True
        report.unlisted = 0  # they lay in the logs just found clean
    return found


def _replay_problems(root: Path, repair: bool) -> list[Problem]:
    """The data dir's ops that replay cannot apply: metadata ops (narad/metalog.py)
    and state ops (narad/streams/stream.py), checked and mended by narad/repair.py.
    With `repair` (only when the logs themselves are sound), each kind is mended (the
    metadata log compacted into what applied, a state log truncated at its op), then
    checked again."""
    from narad.log.opening import LogCorrupted
    from narad.machines import stream_machines
    from narad.metalog import check_metadata
    from narad.repair import check_states, repair_metadata, repair_states

    machines = stream_machines()
    found: list[Problem] = []
    kinds: list[tuple[Callable[[Path], list[Problem]], Callable[[Path], int]]] = [
        (check_metadata, repair_metadata),
        (lambda root: check_states(root, machines), lambda root: repair_states(root, machines)),
    ]
    for check, mend in kinds:
        problems = check(root)
        if problems and repair:
            try:
                mend(root)
            except LogCorrupted as exc:  # a key's log is unavailable: nothing was changed
                print(f"narad check: repairing {root} failed: {exc}", file=sys.stderr)
                repair = False
            if repair and not check(root):
                for problem in problems:
                    problem.repaired = True
        found += problems
    return found


def problem_line(problem: Problem) -> str:
    """`<log>/<file>[:<byte>]: <kind>: <what> [<repair status>]`"""
    where = str(problem.path)
    if problem.position is not None:
        where += f":{problem.position}"
    if problem.repaired:
        status = "repaired"
    elif problem.repairable:
        status = "repairable with --repair"
    else:
        status = "not repairable automatically"
    return f"{where}: {problem.kind.value}: {problem.what} [{status}]"


def summary_line(report: CheckReport) -> str:
    checked = (
        f"checked {_plural(report.logs, 'log')}, {_plural(report.segments, 'segment')}, "
        f"{_plural(report.records, 'record')}, {_plural(report.scanned_bytes, 'byte')}"
    )
    found = len(report.problems) + report.unlisted
    if not found:
        return f"{checked}: clean"
    repaired = sum(p.repaired for p in report.problems)
    repairable = sum(p.repairable and not p.repaired for p in report.problems)
    parts = [_plural(found, "problem")]
    if repaired:
        parts.append(f"{repaired} repaired")
    if repairable:
        parts.append(f"{repairable} repairable with --repair")
    if found - repaired - repairable:
        parts.append(f"{found - repaired - repairable} not repairable")
    if report.unlisted:
        parts.append(f"{report.unlisted} not listed")
    state = "clean now" if report.clean else "NOT CLEAN"
    return f"{checked}: {', '.join(parts)}: {state}"


# -- narad dump ----------------------------------------------------------------------


def _add_dump(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "dump",
        help="print a data dir's entries and state ops decoded, or one log's records",
        description=(
            "With a data dir: every key (or the one --key names), one heading line "
            "'# db N key NAME (streams/UID)', then its entries 'ID field=value ...' "
            "(values quoted when they hold a space, quote, = or control character; "
            "bytes that are not UTF-8 as \\xNN; '(deleted)' after an entry XDEL "
            "removed), then its state ops 'offset N: <what it did>' in words (queue "
            "deliveries, acks, nacks, dead letters, group deliveries and acks, ...). "
            "What the journal holds beyond a key's logs (committed, not yet "
            "checkpointed into them) follows under its own heading; a note on stderr "
            "says when a running server holds the data dir. A progress bar is drawn "
            "on stderr when it is a terminal. "
            "With one log folder: its records as stored in the segment files, each line "
            "'offset: .. position: .. segment: .. epoch: .. timestamp: .. id: .. "
            "flags: .. size: .. crc-ok'; a journal folder's lines add each commit's "
            "changes; it stops with exit code 1 at the first record that fails its "
            "checks, and the logical start (start.checkpoint) is ignored."
        ),
    )
    parser.add_argument(
        "log_dir", type=Path, metavar="DIR", help="a data dir, or one log folder"
    )
    parser.add_argument(
        "--key", metavar="KEY", help="with a data dir: only this key (of --db)"
    )
    parser.add_argument(
        "--db", type=_natural, default=None, metavar="N",
        help="with a data dir: only this database (default: 0 with --key, else all)",
    )
    parser.add_argument(
        "--from",
        dest="start",
        default=None,
        metavar="FROM",
        help="with a data dir: the first entry ID shown (ms-seq, or ms); with a log "
        "folder: the first offset (default: the first)",
    )
    parser.add_argument(
        "--count", type=_natural, default=None, metavar="N",
        help="at most N entries (and N state ops) per key; with a log folder, N records",
    )
    parser.add_argument(
        "--payload",
        action="store_true",
        help="with a log folder: add the payload: field/value pairs for entries (flag "
        "0x01), ops of a state or metadata log as lists, a journal commit's records one "
        "per line, else bytes",
    )
    parser.set_defaults(run=_run_dump)


def _run_dump(args: argparse.Namespace) -> int:
    from narad.dump import is_data_dir

    folder: Path = args.log_dir
    if is_data_dir(folder):
        return _dump_data_dir(folder, args)
    if args.key is not None:
        return _usage_error("dump", f"{folder} is not a data dir (no meta or journal folder)")
    return _dump_log(folder, args)


def _dump_log(folder: Path, args: argparse.Namespace) -> int:
    """One log folder's records as stored (see the subcommand's description)."""
    from narad.log.check import SegmentFile, list_segments

    try:
        from_offset = _natural(args.start) if args.start is not None else 0
    except argparse.ArgumentTypeError as exc:
        return _usage_error("dump", f"--from: {exc} (an offset, for a log folder)")
    segments = list_segments(folder) if folder.is_dir() else []
    if not segments:
        return _usage_error("dump", f"{folder} is not a data dir or a log folder")
    show = _record_shower(folder, args.payload)
    bases = [base for base, _ in segments]
    first = max(bisect.bisect_right(bases, from_offset) - 1, 0)
    left: int | None = args.count
    for _, path in segments[first:]:
        if left == 0:
            break
        try:
            with SegmentFile(path) as f:
                left = _dump_segment(f, from_offset, left, show)
                bad = f.bad
                if bad is not None and path == segments[-1][1] and zero_tail(f.fd, bad.position):
                    bad = None  # space reserved ahead of writes: the records end here
        except OSError as exc:
            print(f"error: {path}: {exc}; stopping", file=sys.stderr)
            return 1
        if bad is not None:
            print(f"error: {path} position {bad.position}: {bad.reason}; stopping", file=sys.stderr)
            return 1
    return 0


def _dump_data_dir(root: Path, args: argparse.Namespace) -> int:
    """Every key of data dir `root` (or --key's), decoded (narad/dump.py)."""
    from narad.check_journal import journal_scan_bytes
    from narad.dump import Request, dump_bytes, dump_key, journal_summary, keys, open_walk
    from narad.dump import parse_id as parse_entry_id
    from narad.logs import quote

    try:
        from_id = parse_entry_id(args.start) if args.start is not None else 0
    except ValueError as exc:
        return _usage_error("dump", f"--from: {exc}")
    key = os.fsencode(args.key) if args.key is not None else None
    db = args.db if args.db is not None or key is None else 0
    request = Request(root, key, db, from_id, args.count)
    _note_in_use("dump", root)
    with Progress(journal_scan_bytes(root), label="reading the journal") as bar:
        walk = open_walk(root, bar.advance)
    summary = journal_summary(walk)
    chosen = [
        k for k in keys(root, walk)
        if (db is None or k.db == db) and (key is None or k.name == key)
    ]
    if key is not None and not chosen:
        print(f"narad dump: no key {quote(key)} in db {db} of {root}", file=sys.stderr)
        return 1
    if summary is not None:
        print(f"narad dump: note: {summary}; shown under their own headings", file=sys.stderr)
    write = sys.stdout.write
    with Progress(dump_bytes(root, chosen), label="dumping") as bar:
        for k in chosen:
            for line in dump_key(root, walk, k, request, bar.advance):
                write(line + "\n")
    return 0


def _note_in_use(command: str, root: Path) -> None:
    """Say on stderr when a server holds data dir `root`: the files lag what it holds."""
    from narad.log.lock import holder

    pid = holder(root)
    if pid is not None:
        print(
            f"narad {command}: note: {root} is in use by process {pid}: a running server "
            "holds state not yet in these files (commits it has not written, and what "
            "the journal holds past each log, shown where read)",
            file=sys.stderr,
        )


# Renders one record as its dump line(s), without the trailing newline.
Shower = Callable[[str, Record], str]


def _record_shower(folder: Path, payload: bool) -> Shower:
    """How the records of log `folder` are shown: a journal's with their commits'
    changes, a state or metadata log's payloads as ops, any other's as entries."""
    from narad.log.journal import JOURNAL_FOLDER

    if folder.resolve().name == JOURNAL_FOLDER:
        return lambda segment, rec: commit_lines(record_line(segment, rec, False), rec, payload)
    if not payload:
        return lambda segment, rec: record_line(segment, rec, False)
    if folder.resolve().name in ("state", "meta"):
        return lambda segment, rec: f"{record_line(segment, rec, False)} {op_text(rec.payload)}"
    return lambda segment, rec: record_line(segment, rec, True)


def _dump_segment(f: SegmentFile, from_offset: int, left: int | None, show: Shower) -> int | None:
    """Print the records of `f` from `from_offset` on, at most `left` (None: all);
    return how many more may be printed."""
    from narad.log.check import seek_position

    write = sys.stdout.write
    for rec in f.records(seek_position(f, from_offset)):
        if rec.offset < from_offset:
            continue
        write(show(f.path.name, rec) + "\n")
        if left is not None:
            left -= 1
            if left == 0:
                break
    return left


def record_line(segment: str, rec: Record, payload: bool) -> str:
    line = (
        f"offset: {rec.offset} position: {rec.position} segment: {segment} "
        f"epoch: {rec.epoch} timestamp: {rec.timestamp_ms} id: {rec.id_ms}-{rec.id_seq} "
        f"flags: 0x{rec.flags:02x} size: {rec.size} crc-ok"
    )
    return f"{line} {payload_text(rec)}" if payload else line


def commit_lines(line: str, rec: Record, payload: bool) -> str:
    """A journal record's line with its changes: `position <P>: <change>, ...` for
    the last (or only) part of a commit, `part (continues): ...` for an earlier one;
    with `payload`, then one indented line per log record the changes carry."""
    from narad.log import format
    from narad.log.journal import FLAG_CONTINUES, BadCommit, decode_commit, describe_key

    try:
        changes, body = decode_commit(rec.payload)
    except (BadCommit, IndexError, TypeError) as exc:
        return f"{line} not a commit: {exc}"
    shown: list[str] = []
    carried: list[str] = []
    at = 0
    for change in changes:
        kind = change[0] if change else None
        if kind == "rec" and len(change) == 5:
            _, key, first, count, size = change
            name = describe_key(key)
            shown.append(
                f"rec {name} {first}..{first + count - 1} ({_plural(count, 'record')}, "
                f"{_plural(size, 'byte')})"
            )
            if payload:
                run = format.scan(body[at : at + size], 0, 0, count)[0]
                for log_rec in run:
                    carried.append(f"  {name} offset: {log_rec.offset} "
                                   f"{_carried_text(key, log_rec)}")
            at += size
        elif kind == "start" and len(change) == 3:
            shown.append(f"start {describe_key(change[1])} {change[2]}")
        elif kind == "epoch" and len(change) == 2:
            shown.append(f"epoch {change[1]}")
        else:
            shown.append(f"unknown change {change!r}")
    where = "part (continues)" if rec.flags & FLAG_CONTINUES else f"position {rec.offset + 1}"
    return "\n".join([f"{line} {where}: {', '.join(shown)}", *carried])


def _carried_text(key: int, rec: Record) -> str:
    from narad.log.journal import KIND_DATA

    return payload_text(rec) if key & 3 == KIND_DATA else op_text(rec.payload)


def op_text(payload: bytes) -> str:
    """`op: [...]`: a state or metadata op decoded from msgpack, strings as text and
    bytes shown as `_shown` does; `payload: ...` when it is not msgpack."""
    import msgpack

    try:
        op = msgpack.unpackb(payload, raw=False, strict_map_key=False)
    except UnicodeDecodeError:  # the metadata log packs strings as raw bytes
        op = msgpack.unpackb(payload, raw=True, strict_map_key=False)
    except Exception as exc:
        return f"payload: {_shown(payload)} (not msgpack: {exc})"
    return f"op: {_value_text(op)}"


def _value_text(value: object) -> str:
    if isinstance(value, bytes):
        return _shown(value)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_value_text(v) for v in value) + "]"
    if isinstance(value, dict):
        pairs = (f"{_value_text(k)}: {_value_text(v)}" for k, v in value.items())
        return "{" + ", ".join(pairs) + "}"
    return repr(value)


def payload_text(rec: Record) -> str:
    """`fields: b'k'=b'v', ...` for an entry, else `payload: b'...'`; bytes are shown
    as Python bytes literals, cut to SHOWN_BYTES_MAX each."""
    if not rec.flags & FLAG_ENTRY:
        return f"payload: {_shown(rec.payload)}"
    try:
        fields = decode_fields(rec.payload)
    except ValueError as exc:
        return f"payload: {_shown(rec.payload)} (not a field list: {exc})"
    if len(fields) % 2:
        return f"payload: {_shown(rec.payload)} (not a field list: odd number of strings)"
    pairs = [f"{_shown(k)}={_shown(v)}" for k, v in zip(fields[::2], fields[1::2], strict=True)]
    more = len(pairs) - SHOWN_PAIRS_MAX
    shown = ", ".join(pairs[:SHOWN_PAIRS_MAX])
    return f"fields: {shown}" + (f", ... (+{more} pairs)" if more > 0 else "")


def _shown(data: bytes) -> str:
    if len(data) <= SHOWN_BYTES_MAX:
        return repr(data)
    return f"{data[:SHOWN_BYTES_MAX]!r}...(+{len(data) - SHOWN_BYTES_MAX} bytes)"


# -- the subcommands -----------------------------------------------------------------

def _add_server(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "server",
        help="run the server (embedded defaults: port 6379, data in ./narad-data)",
        description="Run the Narad server. Every setting is also a flag, --name value"
        " (several words for a setting of several arguments, e.g. --bind 127.0.0.1 ::1),"
        " read as a config file line is; flags override the config file's settings. Give"
        " the config file first.",
    )
    serve.add_arguments(parser)
    parser.set_defaults(run=serve.run)


def _add_sentinel(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "sentinel",
        help="run a sentinel: automatic failover of Narad leaders, as Redis Sentinel",
        description="Run a sentinel that monitors the leaders its FILE names (Redis"
        " Sentinel's sentinel.conf syntax; conf/sentinel.conf is an example) and fails"
        " them over. The sentinel rewrites FILE to record its state.",
    )
    parser.add_argument("config_file", metavar="FILE", nargs="?",
                        help="a sentinel.conf (Redis Sentinel's syntax); it is rewritten")
    parser.add_argument("--port", dest="overrides", action=serve.Override, metavar="N",
                        help="the port to listen on (default: the file's, else 26379)")
    parser.add_argument("--bind", dest="overrides", action=serve.Override, nargs="+",
                        metavar="ADDR",
                        help="the addresses to listen on (default: the file's, else 127.0.0.1)")
    parser.add_argument("--tls-port", dest="overrides", action=serve.Override, metavar="N",
                        help="the port to listen on for TLS (default: the file's, else 0:"
                        " none); the tls-* files are set in FILE")
    parser.set_defaults(overrides=[], run=_run_sentinel)


def _run_sentinel(args: argparse.Namespace) -> int:
    from narad.sentinel import serve as sentinel_serve

    return sentinel_serve.run(args)


# Every subcommand, in the order `narad --help` lists them. Add new ones here.
SUBCOMMANDS: list[Callable[[Subparsers], None]] = [
    _add_server, _add_sentinel, _add_check, _add_dump,
]
