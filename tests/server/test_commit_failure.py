"""The commit barrier (narad/barrier.py) with a real server, loop and sockets. A
commit that fails (docs/durability.md): the clients whose replies waited on it
are disconnected without them, and the server stops with exit status 1 rather than
answer anything more; the next start holds every commit that finished, and nothing
of the one that failed.

The failure is a real one from the kernel: the journal's file descriptor is closed
behind its back, so its next write meets EBADF. That cannot be done to another
process, so the server runs in this one, on a real event loop and real sockets."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from narad.config import Config
from narad.keyspace import Keyspace
from tests.server.inprocess import connect, open_server, reply

XADD = b"*5\r\n$4\r\nXADD\r\n$1\r\ns\r\n$1\r\n*\r\n$1\r\nf\r\n$1\r\nv\r\n"


async def _scenario(folder: Path) -> tuple[bytes, bytes, int]:
    server = open_server(folder)
    first = await connect(server)
    await server.loop.sock_sendall(first, XADD)
    committed = await reply(first)
    journal = server.node.keyspace.journal.log
    os.close(journal.active.fd)  # the next commit's write meets EBADF
    await server.loop.sock_sendall(first, XADD)
    failed = await reply(first)
    journal.active.fd = -1  # closed above: closing it again could close a socket
    first.close()
    server.node.keyspace.close()
    return committed, failed, server.node.exit_status


def test_a_failed_commit_disconnects_its_clients_and_stops_the_server(tmp_path: Path) -> None:
    committed, failed, status = asyncio.run(_scenario(tmp_path))
    assert committed.startswith(b"$") and committed.endswith(b"-0\r\n")
    assert failed == b"<closed>"  # no reply: it would claim what the commit did not do
    assert status == 1  # the server asked itself to stop, to exit with this status
    store = Keyspace(Config.load(None, [("dir", str(tmp_path))]))
    store.open()
    stream = store.get(0, b"s")
    assert stream is not None and stream.length == 1  # only the committed entry
    store.close()


async def _held_until_released(folder: Path) -> tuple[bytes, bytes, bytes, bytes]:
    """A commit that waits on more than its own return (as replica acks will): its
    writer's reply, and a later read's that may have seen it, wait for `release`
    while the loop goes on running commands."""
    server = open_server(folder)
    writer, reader = await connect(server), await connect(server)
    barrier = server.node.barrier
    barrier.released_at_commit = lambda position: False
    await server.loop.sock_sendall(writer, XADD)
    await asyncio.sleep(0.05)  # the commit is done: the loop runs on
    await server.loop.sock_sendall(reader, b"XLEN s\r\n")
    await asyncio.sleep(0.05)
    early = await _available(writer), await _available(reader)
    barrier.release(server.node.keyspace.journal.position)
    added, length = await reply(writer), await reply(reader)
    for sock in (writer, reader):
        sock.close()
    server.node.keyspace.close()
    return *early, added, length


async def _available(sock) -> bytes:  # type: ignore[no-untyped-def]
    try:
        return sock.recv(1024)
    except BlockingIOError:
        return b""


def test_replies_wait_for_the_release_of_the_position_they_depend_on(tmp_path: Path) -> None:
    early_write, early_read, added, length = asyncio.run(_held_until_released(tmp_path))
    assert early_write == early_read == b""  # nothing left before the release
    assert added.endswith(b"-0\r\n") and length == b":1\r\n"
