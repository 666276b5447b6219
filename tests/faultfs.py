"""A model of what a power cut leaves of the files under one folder, for crash tests.

While a `FaultFS(root)` is active it stands in front of the `os` functions (and the
built-in `open`) that create, write, sync, rename and delete files, for every path
under `root`. Each call is made for real first, so the code under test reads back
what it wrote; when it succeeds, the model notes what the call changed. Paths outside
`root` pass straight through. `cut(dest, rng)` then writes, into the folder `dest`,
one file tree that the machine could hold after losing power at this instant; the
test opens `dest` with the real code and checks what survived. `counters` count the
intercepted calls by kind (to assert, say, that a commit issued one fsync), and
`on_call` runs after each of them, so a test can cut inside an operation.

The rules the model follows (those of POSIX without the kindnesses some filesystems
add; the model is as mean as a crash is allowed to be):

- A file's content is durable as of its last fsync or fdatasync: both make the
  whole content, length included, durable. A file never synced has empty durable
  content. The writes since (write, pwrite, the writes of a file object from `open`),
  truncations (ftruncate, truncate, opening with O_TRUNC) and reservations
  (posix_fallocate, which only grows the length) are kept in order. A cut keeps a
  random prefix of them, possibly none, applied in order to the durable content; the
  last write kept may be torn, keeping only a random prefix of its bytes. A
  truncation or reservation is applied whole or not at all. So a cut never keeps a
  later write without every earlier one.
- A folder's entries (names of files and folders in it) are durable as of its last
  fsync (os.open of the folder, then os.fsync of that descriptor). Creating a file,
  making a folder (an entry of its parent), renaming and unlinking change the
  folder's current entries only; a cut restores each folder's durable entries. So a
  file created since its folder's last fsync is missing from the cut, whatever was
  synced into it; a rename or unlink not followed by an fsync of the folder is undone
  (the old names point at the old files, with their own content). An fsync of a file
  never makes its name durable, nor does an fsync of a folder make its own entry in
  its parent durable.
- Files are cut independently of each other: a cut may keep a later write to one
  file and lose an earlier write to another, as disks reorder them.
- Files and folders present under `root` when the FaultFS starts are durable as
  they are; `root` itself always survives.
- A file keeps its content under every name a cut gives it: a rename of an entry
  whose old name is durable in another folder, cut before only one folder is synced,
  leaves the file under both names (as copies in `dest`).

One FaultFS may be active at a time. Not modelled: reads (nothing to lose),
descriptors opened before the FaultFS starts (their writes are not seen: open the
code under test inside it), writev and pwritev, links and symlinks, and metadata
other than names and lengths.

The model covers every file and folder under `root`: a call that succeeds on a path
the model does not know (something made under `root` behind its back) raises
FaultFSError, as does a file object opened with its own `opener`.
"""

from __future__ import annotations

import builtins
import dataclasses
import io
import os
import random
import threading
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any, NamedTuple

# A cut keeps none of a file's unsynced changes with this probability; otherwise it
# keeps a prefix of one to all of them, drawn uniformly, and tears the last one kept
# (if a write) with TORN_PROBABILITY, at a byte drawn uniformly.
KEEP_NONE_PROBABILITY = 0.2
TORN_PROBABILITY = 0.5

StrPath = str | os.PathLike[str]


class FaultFSError(Exception):
    """The model and the files under its root disagree, or a call it cannot model."""


class _Write(NamedTuple):
    position: int
    data: bytes


class _Truncate(NamedTuple):
    length: int


class _Extend(NamedTuple):
    length: int  # the file is at least this long afterwards (zero bytes added)


_Change = _Write | _Truncate | _Extend


def _apply(content: bytearray, change: _Change) -> None:
    if isinstance(change, _Write):
        if not change.data:
            return
        if change.position > len(content):
            content.extend(bytes(change.position - len(content)))
        content[change.position : change.position + len(change.data)] = change.data
    elif isinstance(change, _Truncate):
        if change.length < len(content):
            del content[change.length :]
        else:
            content.extend(bytes(change.length - len(content)))
    elif change.length > len(content):
        content.extend(bytes(change.length - len(content)))


class _File:
    """One file (an inode): `durable` survives a cut; `changes` since, in order, may
    survive as a prefix. `current` is the content the real file has now."""

    def __init__(self, durable: bytes = b"") -> None:
        self.durable = durable
        self.changes: list[_Change] = []
        self.current = bytearray(durable)

    def change(self, change: _Change) -> None:
        self.changes.append(change)
        _apply(self.current, change)

    def sync(self) -> None:
        self.durable = bytes(self.current)
        self.changes.clear()

    def after_cut(self, rng: random.Random) -> bytes:
        content = bytearray(self.durable)
        if not self.changes or rng.random() < KEEP_NONE_PROBABILITY:
            return bytes(content)
        kept = rng.randint(1, len(self.changes))
        for change in self.changes[: kept - 1]:
            _apply(content, change)
        last = self.changes[kept - 1]
        if isinstance(last, _Write) and rng.random() < TORN_PROBABILITY:
            last = _Write(last.position, last.data[: rng.randint(0, len(last.data))])
        _apply(content, last)
        return bytes(content)


class _Folder:
    """One folder: its `entries` now, and the `durable` ones as of its last fsync."""

    def __init__(self) -> None:
        self.entries: dict[str, _File | _Folder] = {}
        self.durable: dict[str, _File | _Folder] = {}

    def sync(self) -> None:
        self.durable = dict(self.entries)


@dataclasses.dataclass
class Counters:
    """Intercepted calls on paths under the root, by kind. `calls` counts them all
    (opens and closes too); `unlinks` includes removed folders; `fsyncs` counts
    fsync and fdatasync of files, `dir_fsyncs` those of folders."""

    calls: int = 0
    creates: int = 0
    writes: int = 0
    truncates: int = 0
    reserves: int = 0
    fsyncs: int = 0
    dir_fsyncs: int = 0
    renames: int = 0
    unlinks: int = 0
    mkdirs: int = 0

    def copy(self) -> Counters:
        return dataclasses.replace(self)

    def __sub__(self, other: Counters) -> Counters:
        return Counters(
            **{
                field.name: getattr(self, field.name) - getattr(other, field.name)
                for field in dataclasses.fields(self)
            }
        )


# The functions a FaultFS replaces while active: (module, name).
_PATCHED = [
    (os, "open"),
    (os, "close"),
    (os, "write"),
    (os, "pwrite"),
    (os, "fsync"),
    (os, "fdatasync"),
    (os, "ftruncate"),
    (os, "truncate"),
    (os, "posix_fallocate"),
    (os, "replace"),
    (os, "rename"),
    (os, "unlink"),
    (os, "remove"),
    (os, "mkdir"),
    (os, "rmdir"),
    (io, "open"),
    (builtins, "open"),
]

# The real functions, taken when this module is imported (before any patching).
_real_open = os.open
_real_close = os.close
_real_write = os.write
_real_pwrite = os.pwrite
_real_fsync = os.fsync
_real_fdatasync = os.fdatasync
_real_ftruncate = os.ftruncate
_real_truncate = os.truncate
_real_fallocate = os.posix_fallocate
_real_replace = os.replace
_real_rename = os.rename
_real_unlink = os.unlink
_real_mkdir = os.mkdir
_real_rmdir = os.rmdir
_real_io_open = io.open

_WRITE_ACCESS = (os.O_WRONLY, os.O_RDWR)


class _RecordingFile(io.FileIO):
    """The raw file under a file object that `open` gives for writing under the
    root: its writes and truncations reach the model as they reach the file."""

    def __init__(self, fs: FaultFS, file: StrPath, mode: str) -> None:
        self._fs = fs
        super().__init__(file, mode, closefd=True, opener=self._open)

    def _open(self, path: str, flags: int) -> int:
        return self._fs._open(path, flags, 0o666)  # io.FileIO's own creation mode

    def write(self, data: Any) -> int:
        done = super().write(data)
        if done:
            fd = self.fileno()
            self._fs._note_write(fd, self.tell() - done, bytes(memoryview(data)[:done]))
        return done or 0

    def truncate(self, size: int | None = None) -> int:
        length = super().truncate(size)
        self._fs._note_file(self.fileno(), _Truncate(length), "truncate")
        return length

    def close(self) -> None:
        if not self.closed:
            self._fs._forget_fd(self.fileno())
        super().close()


class FaultFS:
    """See the module docstring. Use as a context manager; `counters` and `on_call`
    may be read and set while it is active, `cut` called at any moment."""

    def __init__(self, root: Path) -> None:
        root.mkdir(parents=True, exist_ok=True)
        # A path is under the root when it starts with one of these (the root as
        # given, and with symlinks resolved).
        self._prefixes = {os.path.abspath(root), os.path.realpath(root)}
        self.root = root
        self.counters = Counters()
        # Called after every intercepted call on a path under the root, once the
        # model has noted it, with the call's name and its number (counters.calls);
        # it may call `cut`.
        self.on_call: Callable[[str, int], None] | None = None
        self._top = _Folder()
        self._fds: dict[int, _File | _Folder] = {}
        self._fd_paths: dict[int, str] = {}  # absolute path of each folder fd of ours
        self._lock = threading.RLock()
        self._saved: list[tuple[Any, str, Any]] = []

    # -- activation -----------------------------------------------------------------

    def __enter__(self) -> FaultFS:
        if os.open is not _real_open:
            raise FaultFSError("another FaultFS is active")
        self._adopt(str(self.root), self._top)
        patches: dict[str, Callable[..., Any]] = {
            "open": self._open,
            "close": self._close,
            "write": self._write,
            "pwrite": self._pwrite,
            "fsync": self._fsync,
            "fdatasync": self._fdatasync,
            "ftruncate": self._ftruncate,
            "truncate": self._truncate,
            "posix_fallocate": self._fallocate,
            "replace": self._replace,
            "rename": self._rename,
            "unlink": self._unlink,
            "remove": self._unlink,
            "mkdir": self._mkdir,
            "rmdir": self._rmdir,
        }
        for module, name in _PATCHED:
            self._saved.append((module, name, getattr(module, name)))
            patch = self._file_object if module is not os else patches[name]
            setattr(module, name, patch)
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        for module, name, original in reversed(self._saved):
            setattr(module, name, original)
        self._saved.clear()

    def _adopt(self, path: str, folder: _Folder) -> None:
        """Take the tree under `path` as durable, as it is now."""
        with os.scandir(path) as entries:
            for entry in entries:
                node: _File | _Folder
                if entry.is_dir(follow_symlinks=False):
                    node = _Folder()
                    self._adopt(entry.path, node)
                elif entry.is_file(follow_symlinks=False):
                    with _real_io_open(entry.path, "rb") as f:
                        node = _File(f.read())
                else:
                    raise FaultFSError(f"{entry.path}: neither a file nor a folder")
                folder.entries[entry.name] = node
        folder.sync()

    # -- the cut --------------------------------------------------------------------

    def cut(self, dest: Path, rng: random.Random) -> None:
        """Write into `dest` (a folder outside the root, created, must not exist) a
        tree a power cut at this instant could leave of the root."""
        if self._under_root(os.fsdecode(dest)) is not None:
            raise FaultFSError(f"{dest}: a cut must be written outside {self.root}")
        with self._lock:
            dest.mkdir(parents=True)
            self._write_cut(self._top, dest, rng, {})

    def _write_cut(
        self, folder: _Folder, dest: Path, rng: random.Random, contents: dict[int, bytes]
    ) -> None:
        for name, node in folder.durable.items():
            path = dest / name
            if isinstance(node, _Folder):
                path.mkdir()
                self._write_cut(node, path, rng, contents)
            else:
                # A file reachable by two names has one content under both.
                if id(node) not in contents:
                    contents[id(node)] = node.after_cut(rng)
                path.write_bytes(contents[id(node)])

    # -- paths and descriptors ----------------------------------------------------------

    def _under_root(self, path: str) -> tuple[str, ...] | None:
        """The components of absolute `path` below the root, or None if outside."""
        path = os.path.abspath(path)
        for prefix in self._prefixes:
            if path == prefix:
                return ()
            if path.startswith(prefix + os.sep):
                return tuple(path[len(prefix) + 1 :].split(os.sep))
        return None

    def _resolve(self, path: Any, dir_fd: int | None = None) -> str | None:
        """`path` (relative to the folder `dir_fd` if given) as an absolute path, or
        None when it is a descriptor or relative to a folder not ours."""
        if isinstance(path, int):
            return None  # a descriptor: only the fd-taking calls are modelled
        text = os.fsdecode(path)
        if dir_fd is not None and not os.path.isabs(text):
            base = self._fd_paths.get(dir_fd)
            if base is None:
                return None
            text = os.path.join(base, text)
        return os.path.abspath(text)

    def _parts(self, path: Any, dir_fd: int | None = None) -> tuple[str, ...] | None:
        resolved = self._resolve(path, dir_fd)
        return None if resolved is None else self._under_root(resolved)

    def _node(self, parts: tuple[str, ...]) -> _File | _Folder:
        node: _File | _Folder = self._top
        for name in parts:
            if not isinstance(node, _Folder) or name not in node.entries:
                raise FaultFSError(f"{os.sep.join(parts)}: not in the model of {self.root}")
            node = node.entries[name]
        return node

    def _parent(self, parts: tuple[str, ...]) -> tuple[_Folder, str]:
        if not parts:
            raise FaultFSError(f"{self.root}: the root itself cannot be created or removed")
        parent = self._node(parts[:-1])
        if not isinstance(parent, _Folder):
            raise FaultFSError(f"{os.sep.join(parts[:-1])}: not a folder in the model")
        return parent, parts[-1]

    def _forget_fd(self, fd: int) -> None:
        self._fds.pop(fd, None)
        self._fd_paths.pop(fd, None)

    def _called(self, name: str, counter: str | None = None) -> None:
        counters = self.counters
        counters.calls += 1
        if counter is not None:
            setattr(counters, counter, getattr(counters, counter) + 1)
        if self.on_call is not None:
            self.on_call(name, counters.calls)

    # -- the intercepted calls ------------------------------------------------------------

    def _open(self, path: Any, flags: int, mode: int = 0o777, *, dir_fd: int | None = None) -> int:
        with self._lock:
            fd = _real_open(path, flags, mode, dir_fd=dir_fd)
            self._forget_fd(fd)  # a number reused after a close we did not see
            parts = self._parts(path, dir_fd)
            if parts is None:
                return fd
            created = False
            if parts and flags & os.O_CREAT:
                parent, name = self._parent(parts)
                if name not in parent.entries:
                    parent.entries[name] = _File()
                    created = True
            node = self._node(parts)
            self._fds[fd] = node
            if isinstance(node, _Folder):
                resolved = self._resolve(path, dir_fd)
                assert resolved is not None
                self._fd_paths[fd] = resolved
            elif flags & os.O_TRUNC and flags & os.O_ACCMODE in _WRITE_ACCESS:
                node.change(_Truncate(0))
            self._called("open", "creates" if created else None)
            return fd

    def _close(self, fd: int) -> None:
        with self._lock:
            _real_close(fd)
            if fd in self._fds:
                self._forget_fd(fd)
                self._called("close")

    def _file(self, fd: int) -> _File | None:
        node = self._fds.get(fd)
        if isinstance(node, _Folder):
            raise FaultFSError(f"descriptor {fd} is a folder: cannot write or truncate it")
        return node

    def _note_file(self, fd: int, change: _Change, name: str) -> None:
        """Record `change`, already made to the file behind `fd`, if it is ours."""
        with self._lock:
            node = self._file(fd)
            if node is None:
                return
            node.change(change)
            counter = {"truncate": "truncates", "posix_fallocate": "reserves"}.get(name, "writes")
            self._called(name, counter)

    def _note_write(self, fd: int, position: int, data: bytes) -> None:
        self._note_file(fd, _Write(position, data), "write")

    def _write(self, fd: int, data: Any) -> int:
        with self._lock:
            done = _real_write(fd, data)
            if fd in self._fds and done:
                end = os.lseek(fd, 0, os.SEEK_CUR)
                self._note_write(fd, end - done, bytes(memoryview(data)[:done]))
            return done

    def _pwrite(self, fd: int, data: Any, position: int) -> int:
        with self._lock:
            done = _real_pwrite(fd, data, position)
            if done:
                self._note_file(fd, _Write(position, bytes(memoryview(data)[:done])), "pwrite")
            return done

    def _ftruncate(self, fd: int, length: int) -> None:
        with self._lock:
            _real_ftruncate(fd, length)
            self._note_file(fd, _Truncate(length), "truncate")

    def _truncate(self, path: Any, length: int) -> None:
        with self._lock:
            _real_truncate(path, length)
            if isinstance(path, int):
                self._note_file(path, _Truncate(length), "truncate")
                return
            parts = self._parts(path)
            if parts is None:
                return
            node = self._node(parts)
            if not isinstance(node, _File):
                raise FaultFSError(f"{os.fsdecode(path)}: truncate of a folder")
            node.change(_Truncate(length))
            self._called("truncate", "truncates")

    def _fallocate(self, fd: int, offset: int, length: int) -> None:
        with self._lock:
            _real_fallocate(fd, offset, length)
            self._note_file(fd, _Extend(offset + length), "posix_fallocate")

    def _sync(self, real: Callable[[int], None], fd: int, name: str) -> None:
        with self._lock:
            real(fd)
            node = self._fds.get(fd)
            if node is None:
                return
            node.sync()
            self._called(name, "dir_fsyncs" if isinstance(node, _Folder) else "fsyncs")

    def _fsync(self, fd: Any) -> None:
        fd = fd if isinstance(fd, int) else fd.fileno()
        self._sync(_real_fsync, fd, "fsync")

    def _fdatasync(self, fd: Any) -> None:
        fd = fd if isinstance(fd, int) else fd.fileno()
        self._sync(_real_fdatasync, fd, "fdatasync")

    def _move(
        self,
        real: Callable[..., None],
        name: str,
        src: Any,
        dst: Any,
        src_dir_fd: int | None,
        dst_dir_fd: int | None,
    ) -> None:
        with self._lock:
            real(src, dst, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd)
            src_parts = self._parts(src, src_dir_fd)
            dst_parts = self._parts(dst, dst_dir_fd)
            if src_parts is None and dst_parts is None:
                return
            if src_parts is None:
                raise FaultFSError(f"{os.fsdecode(dst)}: moved in from outside the root")
            src_folder, src_name = self._parent(src_parts)
            node = src_folder.entries.pop(src_name)
            if dst_parts is not None:
                dst_folder, dst_name = self._parent(dst_parts)
                dst_folder.entries[dst_name] = node
            self._called(name, "renames")

    def _replace(
        self, src: Any, dst: Any, *, src_dir_fd: int | None = None, dst_dir_fd: int | None = None
    ) -> None:
        self._move(_real_replace, "replace", src, dst, src_dir_fd, dst_dir_fd)

    def _rename(
        self, src: Any, dst: Any, *, src_dir_fd: int | None = None, dst_dir_fd: int | None = None
    ) -> None:
        self._move(_real_rename, "rename", src, dst, src_dir_fd, dst_dir_fd)

    def _remove_entry(
        self, real: Callable[..., None], name: str, path: Any, dir_fd: int | None
    ) -> None:
        with self._lock:
            real(path, dir_fd=dir_fd)
            parts = self._parts(path, dir_fd)
            if parts is None:
                return
            folder, entry = self._parent(parts)
            if folder.entries.pop(entry, None) is None:
                raise FaultFSError(f"{os.fsdecode(path)}: not in the model of {self.root}")
            self._called(name, "unlinks")

    def _unlink(self, path: Any, *, dir_fd: int | None = None) -> None:
        self._remove_entry(_real_unlink, "unlink", path, dir_fd)

    def _rmdir(self, path: Any, *, dir_fd: int | None = None) -> None:
        self._remove_entry(_real_rmdir, "rmdir", path, dir_fd)

    def _mkdir(self, path: Any, mode: int = 0o777, *, dir_fd: int | None = None) -> None:
        with self._lock:
            _real_mkdir(path, mode, dir_fd=dir_fd)
            parts = self._parts(path, dir_fd)
            if parts is None:
                return
            folder, name = self._parent(parts)
            folder.entries[name] = _Folder()
            self._called("mkdir", "mkdirs")

    def _file_object(
        self,
        file: Any,
        mode: str = "r",
        buffering: int = -1,
        encoding: str | None = None,
        errors: str | None = None,
        newline: str | None = None,
        closefd: bool = True,
        opener: Callable[[str, int], int] | None = None,
    ) -> Any:
        """The built-in `open`: for writing under the root, a file object whose raw
        file reports to the model (opened through `_open`, as the real one would be)."""
        writing = any(c in mode for c in "wax+")
        if isinstance(file, int) or not writing or self._parts(file) is None:
            return _real_io_open(file, mode, buffering, encoding, errors, newline, closefd, opener)
        if opener is not None:
            raise FaultFSError(f"{os.fsdecode(file)}: open with an opener is not modelled")
        raw = _RecordingFile(self, file, mode.replace("b", "").replace("t", ""))
        if buffering == 0:
            if "b" not in mode:
                raw.close()
                raise ValueError("can't have unbuffered text I/O")
            return raw
        size = buffering if buffering > 1 else io.DEFAULT_BUFFER_SIZE
        buffered: io.BufferedRandom | io.BufferedWriter = (
            io.BufferedRandom(raw, size) if "+" in mode else io.BufferedWriter(raw, size)
        )
        if "b" in mode:
            return buffered
        return io.TextIOWrapper(
            buffered, encoding, errors, newline, line_buffering=buffering == 1
        )
