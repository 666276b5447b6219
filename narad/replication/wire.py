"""The replication protocol's messages (docs/replication.md). No I/O.

The handshake is Redis's where it fits: the replica sends AUTH (with `masterauth`),
`REPLCONF listening-port <port>`, `REPLCONF ip-address <ip>` (with
`replica-announce-ip`), `REPLCONF capa narad`, then `PSYNC <history> <position>
<epoch>`: the history its journal holds, its position, and the epoch of its last
commit. The leader answers one of:

- `+CONTINUE <history> <position> <epoch>`: the journal follows from the replica's
  position (the leader's history, position and epoch);
- `+TRUNCATE <position>`: the replica holds commits the leader's history does not,
  from that position on; it cuts them (crash-safe) and asks again;
- an error: the replica cannot follow (another history, or a position the leader no
  longer holds), and says why in its log.

Then the leader pushes, as RESP arrays of bulk strings:

- `journal <position> <frames>`: whole journal records, as framed in the leader's
  journal (each CRC-checked), the first at `position`;
- `ping <position> <epoch>`: the leader's position and epoch, when idle.

The replica sends `REPLCONF ACK <position> FACK <fsynced>` after each batch it made
held as its fsync policy holds a commit, and once a second.
"""

from __future__ import annotations

from narad.resp.encoder import encode_request


def journal_frames(position: int, frames: bytes | bytearray) -> list[bytes | bytearray]:
    """The pieces of one `journal` message (written as they are: no copy of frames)."""
    digits = b"%d" % position
    head = b"*3\r\n$7\r\njournal\r\n$%d\r\n%b\r\n$%d\r\n" % (len(digits), digits, len(frames))
    return [head, frames, b"\r\n"]


def ping(position: int, epoch: int) -> bytes:
    return encode_request([b"ping", position, epoch])


def ack(position: int, fsynced: int) -> bytes:
    return encode_request([b"REPLCONF", b"ACK", position, b"FACK", fsynced])
