"""The replication protocol's messages (docs/replication.md). No I/O.

The handshake is Redis's where it fits: the replica sends AUTH (with `masterauth`),
`REPLCONF listening-port <port>`, `REPLCONF ip-address <ip>` (with
`replica-announce-ip`), `REPLCONF capa narad`, then `PSYNC <history> <position>
<epoch>`: the history its journal holds, its position, and the epoch of its last
commit. The leader answers one of:

- `+CONTINUE <history> <position> <epoch>`: the journal follows from the replica's
  position (the leader's history, position and epoch);
- `+TRUNCATE <epoch> <end>`: the replica holds commits the leader's history does
  not: the leader's epoch `epoch` (the largest at or below the replica's) ended at
  `end`; the replica cuts what it holds past that (crash-safe) and asks again;
- `+FULLCOPY <history> <position> <epoch> <bytes>`: the leader no longer holds the
  replica's position, or the replica holds another history: the leader sends a copy
  of its logs as they were at `position` (about `bytes` bytes), and then its
  journal from there (narad/replication/fullcopy.py);
- an error: the replica cannot follow, and says why in its log.

Then the leader pushes, as RESP arrays of bulk strings:

- after FULLCOPY, for each log: `copy-log <key> <start> <end>` (the log's records
  at offsets start .. end-1 follow), then `copy-records <key> <offset> <frames>`
  messages (whole records, framed as in the leader's log, each CRC-checked), the
  first at `offset`; after the last log, `copy-end <position> <epoch> <first> ...`
  (where each leader epoch of the journal began);
- `journal <position> <frames>`: whole journal records, as framed in the leader's
  journal (each CRC-checked), the first at `position`;
- `ping <position> <epoch>`: the leader's position and epoch, when idle.

The replica sends `REPLCONF ACK <position> FACK <fsynced>` after each batch it made
held as its fsync policy holds a commit, and once a second.
"""

from __future__ import annotations

from narad.resp.encoder import encode_request


class LinkError(Exception):
    """The other end refused the link or spoke out of protocol."""


def _with_frames(words: list[bytes | int], frames: bytes | bytearray) -> list[bytes | bytearray]:
    """The pieces of one message of `words` and then `frames` (written as they are:
    no copy of frames)."""
    empty_last = b"$0\r\n\r\n"
    head = encode_request([*words, b""])[: -len(empty_last)]
    return [head + b"$%d\r\n" % len(frames), frames, b"\r\n"]


def journal_frames(position: int, frames: bytes | bytearray) -> list[bytes | bytearray]:
    """The pieces of one `journal` message."""
    return _with_frames([b"journal", position], frames)


def copy_log(key: int, start: int, end: int) -> bytes:
    return encode_request([b"copy-log", key, start, end])


def copy_records(key: int, offset: int, frames: bytes | bytearray) -> list[bytes | bytearray]:
    """The pieces of one `copy-records` message."""
    return _with_frames([b"copy-records", key, offset], frames)


def copy_end(position: int, epochs: list[tuple[int, int]]) -> bytes:
    return encode_request([b"copy-end", position, *(n for pair in epochs for n in pair)])


def ping(position: int, epoch: int) -> bytes:
    return encode_request([b"ping", position, epoch])


def ack(position: int, fsynced: int) -> bytes:
    return encode_request([b"REPLCONF", b"ACK", position, b"FACK", fsynced])
