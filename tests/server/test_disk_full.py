"""A node whose disk fills up (issue 28, class 7): writes are refused with MISCONF while
it is full, reads, PING and INFO are answered, every acknowledged write stays readable,
and writes are taken again, without a restart, once room is freed; a kill -9 after
loses nothing acknowledged (docs/durability.md, "The write error state").

The data dir is on a small tmpfs (tests/small_disk.py) and a filler file takes the
room left, so the kernel itself answers ENOSPC. The clients do not retry: a reply is
the server's answer to that one request."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from tests.server.raw import encode
from tests.servers import NaradProcess, wait_until
from tests.small_disk import fill, small_disk

VALUE = b"v" * 1000


def client(node: NaradProcess) -> redis.Redis:
    return node.client(retry=Retry(NoBackoff(), 0), socket_timeout=20)


def add(c: redis.Redis, key: str = "s") -> bytes | str:
    """XADD to `key`: the ID when it is taken, else the error's text."""
    try:
        return c.xadd(key, {"v": VALUE})
    except redis.ResponseError as exc:
        return str(exc)


@pytest.mark.parametrize(
    ("keys", "full"),
    [
        # One stream: its log, written behind the journal, is the first to find no
        # room, and reads take what it could not write from its buffer.
        (1, "write failed on {data}/streams/1/data/"),
        # Writes spread over many streams: no log holds enough to be written behind,
        # and the journal is the first to find no room, for the room it keeps ahead.
        (40, "reserving room for the journal failed on {data}/journal/"),
    ],
)
def test_a_full_disk_refuses_writes_serves_reads_and_takes_writes_again(
    tmp_path: Path, keys: int, full: str
) -> None:
    with small_disk(tmp_path / "disk") as disk:
        node = NaradProcess(disk / "node").start()
        try:
            c = client(node)
            names = [f"s{i}" for i in range(keys)]
            acked: dict[str, list[bytes]] = {name: [] for name in names}
            for i in range(200):
                acked[names[i % keys]].append(c.xadd(names[i % keys], {"v": VALUE}))
            fill(disk / "filler")
            error = None
            for i in range(10_000):  # the room left is used up soon
                entry = add(c, names[i % keys])
                if isinstance(entry, str):
                    error = entry
                    break
                acked[names[i % keys]].append(entry)
            print(f"{sum(map(len, acked.values()))} entries acked, then: {error}")
            assert error is not None and error.startswith("MISCONF Errors writing to disk: ")
            assert full.format(data=node.folder / "data") in error
            assert "No space left on device" in error
            assert add(c, "other") == error  # every write, to any key
            assert c.ping()
            info = c.info("persistence")
            assert info["aof_last_write_status"] == "err"
            assert "No space left on device" in info["narad_write_error"]
            for name in names:  # every acked entry, and no more
                assert [e[0] for e in c.xrange(name)] == acked[name]
                assert c.xlen(name) == len(acked[name])
                assert [e[0] for e in c.xrevrange(name, count=3)] == acked[name][:-4:-1]

            (disk / "filler").unlink()
            freed = time.monotonic()
            taken = wait_until(
                lambda: isinstance(entry := add(c, names[0]), bytes) and entry,
                timeout=10, interval=0.05,
            )
            print(f"writes taken again {time.monotonic() - freed:.2f} s after room was freed")
            acked[names[0]].append(taken)
            info = c.info("persistence")
            assert info["aof_last_write_status"] == "ok" and "narad_write_error" not in info
            for i in range(100):
                acked[names[i % keys]].append(c.xadd(names[i % keys], {"v": VALUE}))

            node.kill()
            node.start()
            c = client(node)
            for name in names:
                assert [e[0] for e in c.xrange(name)] == acked[name]
        finally:
            node.kill()


def test_a_commit_the_full_disk_refused_waits_and_is_made_once_room_is_back(
    tmp_path: Path,
) -> None:
    """A commit larger than the room the journal keeps finds the disk full at its own
    write: never acknowledged, never shown (the reads after it wait with it), made
    once room is back."""
    with small_disk(tmp_path / "disk") as disk:
        node = NaradProcess(disk / "node").start()
        try:
            c = client(node)
            acked = [c.xadd("s", {"v": VALUE}) for _ in range(100)]
            fill(disk / "filler")
            big = socket.create_connection((node.host, node.port))
            big.settimeout(0.5)
            queued = [encode(["XADD", "s", "*", "v", b"b" * (512 * 1024)]) for _ in range(4)]
            big.sendall(encode(["MULTI"]) + b"".join(queued) + encode(["EXEC"]))
            info = wait_until(
                lambda: (i := c.info("persistence")).get("narad_write_error") and i
            )
            assert "/journal/" in info["narad_write_error"]
            assert "No space left on device" in info["narad_write_error"]
            assert c.ping()
            assert str(add(c)).startswith("MISCONF")
            got = b""
            try:
                while True:
                    got += big.recv(65536)
            except TimeoutError:
                pass
            assert b"*4\r\n" not in got  # EXEC has no reply: its commit is not made

            (disk / "filler").unlink()
            big.settimeout(20)
            while got.count(b"\r\n") < 14:  # +OK, 4 +QUEUED, *4 and 4 IDs of 2 lines
                chunk = big.recv(65536)
                assert chunk, got
                got += chunk
            ids = got.split(b"*4\r\n", 1)[1].split(b"\r\n")[1::2][:4]
            print(f"EXEC answered once room was back: {ids}")
            assert len(ids) == 4
            entries = [e[0] for e in c.xrange("s")]
            assert entries == acked + ids

            node.kill()
            node.start()
            assert [e[0] for e in client(node).xrange("s")] == acked + ids
        finally:
            node.kill()
