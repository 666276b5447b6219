"""The request parser with hiredis on the hot path.

Owns: the fast path for runs of complete multibulk commands. Must never: decide
anything the reference parser (`_pure_parser`) would decide differently; every
byte hiredis reads is checked to be exactly what Redis would accept, and anything
else goes back to the reference state machine.

Why a check is needed: hiredis parses replies, not requests. It also accepts
`+foo` or `:1` or nested arrays where Redis demands `$` bulk strings, has its own
limits, and says nothing of where each command ends. So hiredis only proposes
commands; `frames_end` proves them. Given the arguments hiredis returned, there
is exactly one byte string Redis reads as that command, its canonical frame
`*<n>\r\n` then `$<len>\r\n<payload>\r\n` per argument (Redis's number syntax
has one spelling per value). If buf holds exactly those frames, one after the
other, Redis reads the same commands from the same bytes, whatever hiredis did,
and the run ends at a known offset. Frames are built by hiredis.pack_command and
compared with bytes.startswith, all through C-level map/accumulate, so no Python
code runs per argument; the compiled twin `narad._speedups.resp.frames_end`
does the same comparison without building frames. If the frames do not match
(odd bytes after a payload, which Redis skips unread, or any refusal), the
commands before the first mismatch are taken and the reference machine reads
the next command, which yields Redis's exact error text when the bytes are bad.

Bounds:
- hiredis is fed SLICE_BYTES at a time (it compacts its buffer after each
  reply, so one big feed costs quadratic time), and runs are proved every
  RUN_BYTES.
- A run gives up on a command once HIREDIS_PENDING_MAX bytes have gone by
  without one completing: big commands are left to the reference machine, which
  streams big bulks without copying, so hiredis never holds more than about that
  much of a partial command.
- hiredis allocates an array of a declared count at once and touches every slot
  when freeing it, so `big_count_at` finds counts of BIG_COUNT_DIGITS digits or
  more before hiredis sees them, and they are left to the reference machine.
- After a refused run the next PURE_STEPS_AFTER_REFUSAL commands take the
  reference path, so bad input cannot make hiredis re-read a slice per command.
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import accumulate, chain
from typing import Any, Final, NamedTuple

import hiredis
from hiredis import pack_command

from narad._speedups import load
from narad.resp._pure_parser import PurePythonRequestParser

SLICE_BYTES: Final = 16 * 1024
# hiredis allocates an array of a declared count at once, and freeing it touches
# every slot: about 2 ns each, so *2000000000 would stall the loop for seconds.
# Counts of this many digits or more never reach hiredis.
BIG_COUNT_DIGITS: Final = 6
RUN_BYTES: Final = 64 * 1024  # proved per run: keeps the replies in cache
HIREDIS_PENDING_MAX: Final = 1024 * 1024
PURE_STEPS_AFTER_REFUSAL: Final = 16
_STAR: Final = ord("*")
_NULL_ARRAY: Final = b"*-1\r\n"
_BIG_COUNT: Final = b"*" + b"0" * BIG_COUNT_DIGITS
_SCAN_TABLE: Final = bytes(
    ord("0") if byte in b"0123456789" else ord("*") if byte in b"*%~>|" else ord(".")
    for byte in range(256)
)


class HiredisRequestParser(PurePythonRequestParser):
    """Sans-I/O request parser using hiredis for runs of complete commands.
    Same contract and same results as PurePythonRequestParser."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._pure_steps = 0  # commands left to the reference path after a refusal
        # True right after a run that hiredis read to the end of the buffer: what
        # is left is a partial command, so the reference machine goes next.
        self._tail_seen = False

    def feed_whole(self, data: bytes) -> list[list[bytes]] | None:
        """The usual read of a client in step with the server, whole commands and
        nothing buffered, parsed without buffering: one hiredis read and one proof
        (see the module doc), as `_take_batch` would do after `feed`."""
        if (
            self._fed
            or self._pos < len(self._buf)
            or self._args_left
            or self._failure is not None
            or self._big is not None
            or not self.authenticated
            or self._pure_steps
            or type(data) is not bytes
            or not data
            or data[0] != _STAR
            or self.held_bytes + len(data) > self.max_query_buffer
        ):
            return None
        commands = whole_commands(
            data, self.max_multibulk_len, self.max_bulk_len, self.max_inline_len
        )
        if commands is None:
            return None
        self._fed_bytes += len(data)
        self._base = self._command_start = self._fed_bytes
        self._buf, self._pos = b"", 0
        return commands

    def _take_batch(self, out: list[list[bytes]]) -> bool:
        buf, pos = self._buf, self._pos
        if pos >= len(buf) or buf[pos] != _STAR or not self.authenticated:
            return False
        if self._tail_seen:
            self._tail_seen = False
            return False
        if self._pure_steps:
            self._pure_steps -= 1
            return False
        proposed, refused, partial_tail = _hiredis_read(buf, pos)
        taken, end = self._prove(proposed, buf, pos)
        if taken < len(proposed) or (refused and not taken):
            self._pure_steps = PURE_STEPS_AFTER_REFUSAL
        if not taken:
            return False
        # Only bytes left over make a partial command: a run that ends exactly at
        # the end of the buffer leaves the next read to hiredis again.
        self._tail_seen = partial_tail and taken == len(proposed) and end < len(buf)
        out.extend(filter(None, proposed[:taken]))  # *0 and *-1 are skipped
        self._pos = end
        self._command_start = self._base + end
        return True

    def _prove(self, proposed: list[Any], buf: bytes, pos: int) -> tuple[int, int]:
        """(how many of `proposed` sit as canonical frames from buf[pos], where
        they end)."""
        limits = (self.max_multibulk_len, self.max_bulk_len, self.max_inline_len)
        end = frames_end(proposed, buf, pos, *limits)
        if end >= 0:
            return len(proposed), end
        taken, end = 0, pos
        for command in proposed:  # rare: find the first command that fails
            after = frames_end([command], buf, end, *limits)
            if after < 0:
                break
            taken, end = taken + 1, after
        return taken, end


# What hiredis raises for bytes it will not read as replies: malformed frames, and
# (TypeError) a map or set, `%` or `~`, with an array among its keys or members,
# which no Python dict or set can hold. No request has either.
_REFUSALS = (hiredis.ProtocolError, TypeError)


class _Run(NamedTuple):
    """What hiredis read from one run of the buffer."""

    replies: list[Any]  # in order
    refused: bool  # hiredis stopped at bytes it rejects
    partial_tail: bool  # the bytes after the last reply do not complete a command


def _hiredis_read(buf: bytes, pos: int) -> _Run:
    """Feed hiredis buf[pos:] a slice at a time, until it refuses, the buffer
    ends, RUN_BYTES have given replies, a command stays incomplete for
    HIREDIS_PENDING_MAX bytes, or a count hiredis must not see comes next."""
    reader = hiredis.Reader()
    replies: list[Any] = []
    fed = pos
    pending = 0  # bytes fed since the last complete reply
    try:
        while fed < len(buf) and pending < HIREDIS_PENDING_MAX:
            if replies and fed - pos >= RUN_BYTES:
                return _Run(replies, refused=False, partial_tail=False)
            stop = min(fed + SLICE_BYTES, len(buf))
            big = big_count_at(buf, max(pos, fed - len(_BIG_COUNT) + 1), stop)
            if big >= 0:
                stop = big
            if stop > fed:
                reader.feed(buf, fed, stop - fed)
                pending += stop - fed
                fed = stop
                while (reply := reader.gets()) is not False:
                    replies.append(reply)
                    pending = 0
            if big >= 0:
                break
    except _REFUSALS:
        return _Run(replies, refused=True, partial_tail=False)
    return _Run(replies, refused=False, partial_tail=True)


def py_whole_commands(
    data: bytes, max_count: int, max_len: int, max_line: int
) -> list[list[bytes]] | None:
    """The commands in `data` when it holds nothing but whole commands that
    hiredis reads and `py_frames_end` proves, to its last byte; else None. The
    compiled twin parses the canonical frames itself, without hiredis; either may
    decline input the other takes (the twin: `*0`, counts of BIG_COUNT_DIGITS
    digits; this: more than SLICE_BYTES), and whenever both answer they return the
    same commands, those the reference parser reads."""
    if len(data) > SLICE_BYTES or big_count_at(data, 0, len(data)) >= 0:
        return None
    reader = hiredis.Reader()
    reader.feed(data)
    proposed = []
    try:
        while (reply := reader.gets()) is not False:
            proposed.append(reply)
    except _REFUSALS:
        return None
    if not proposed or frames_end(proposed, data, 0, max_count, max_len, max_line) != len(data):
        return None
    return list(filter(None, proposed))  # *0 and *-1 are skipped


def py_big_count_at(buf: bytes, start: int, stop: int) -> int:
    """Index of the first aggregate marker (* % ~ > |) in buf[start:stop] followed
    there by BIG_COUNT_DIGITS digits; -1 if none. A false alarm (inside a
    payload) only sends one command down the reference path."""
    start = max(start, 0)
    found = buf[start:stop].translate(_SCAN_TABLE).find(_BIG_COUNT)
    return found if found < 0 else start + found


def py_frames_end(
    commands: list[Any], buf: bytes, pos: int, max_count: int, max_len: int, max_line: int
) -> int:
    """Where the canonical frames of `commands`, laid end to end from buf[pos],
    end; -1 when buf does not hold exactly them there, or they break a limit
    (more than max_count arguments, an argument over max_len bytes, a * or $
    line over max_line bytes).

    A command is a list of bytes, as hiredis returns for `*` of `$`; None
    stands for `*-1` and is accepted only alone; any other command never
    matches. (An int or float argument, which hiredis returns for `:` or `,`,
    is framed by pack_command as digits and so never matches the bytes hiredis
    read it from; the compiled twin refuses it outright.)"""
    if None in commands:
        if commands != [None] or not buf.startswith(_NULL_ARRAY, pos) or max_line < 3:
            return -1
        return pos + len(_NULL_ARRAY)
    if set(map(type, commands)) != {list}:
        return -1
    try:
        frames = list(map(pack_command, map(tuple, commands)))
        if not frames or not _within(commands, frames, max_count, max_len, max_line):
            return -1
    except TypeError:  # not a list of bytes: hiredis read something else there
        return -1
    starts = list(accumulate(map(len, frames), initial=pos))
    if not all(map(buf.startswith, frames, starts)):
        return -1
    return starts[-1]


def _within(
    commands: list[Any], frames: list[bytes], max_count: int, max_len: int, max_line: int
) -> bool:
    """The commands keep the limits. A frame is longer than any of its
    arguments and their counts, so its size settles most cases at once."""
    largest = max(map(len, frames))
    if largest <= max_count and largest <= max_len and len(b"%d" % largest) < max_line:
        return True
    count = max(map(len, commands))
    length = max(map(len, chain.from_iterable(commands)), default=0)
    return count <= max_count and length <= max_len and len(b"%d" % max(count, length)) < max_line


_twin = load("resp")
frames_end: Callable[[list[Any], bytes, int, int, int, int], int] = (
    py_frames_end if _twin is None else _twin.frames_end
)
big_count_at: Callable[[bytes, int, int], int] = (
    py_big_count_at if _twin is None else _twin.big_count_at
)
whole_commands: Callable[[bytes, int, int, int], list[list[bytes]] | None] = (
    py_whole_commands if _twin is None else _twin.whole_commands
)
