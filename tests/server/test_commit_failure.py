"""A commit that fails (docs/durability.md): the clients whose replies waited on it
are disconnected without them, and the log refuses every later write with IOERR.

The failure is a real one from the kernel: the data log's file descriptor is closed
behind the log's back, so its next write meets EBADF. That cannot be done to another
process, so the server runs in this one, on a real event loop and real sockets."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from narad.log import Log, LogConfig
from tests.server.inprocess import connect, open_server, reply

XADD = b"*5\r\n$4\r\nXADD\r\n$1\r\ns\r\n$1\r\n*\r\n$1\r\nf\r\n$1\r\nv\r\n"


async def _scenario(folder: Path) -> tuple[bytes, bytes, bytes, int]:
    server = open_server(folder)
    first = await connect(server)
    await server.loop.sock_sendall(first, XADD)
    committed = await reply(first)
    data = server.store.get(0, b"s").data  # type: ignore[union-attr]
    os.close(data.active.fd)  # the next write of this log meets EBADF
    await server.loop.sock_sendall(first, XADD)
    failed = await reply(first)
    later = await connect(server)  # may get the closed descriptor's number
    await server.loop.sock_sendall(later, XADD)
    refused = await reply(later)
    data.active.fd = -1  # closed above: closing it again could close the socket
    for sock in (first, later):
        sock.close()
    server.store.close()
    reopened = Log.open(data.path, LogConfig())
    length = len(reopened.read(0))
    reopened.close()
    return committed, failed, refused, length


def test_a_failed_commit_disconnects_its_clients_and_the_log_refuses_writes(
    tmp_path: Path,
) -> None:
    committed, failed, refused, length = asyncio.run(_scenario(tmp_path))
    assert committed.startswith(b"$") and committed.endswith(b"-0\r\n")
    assert failed == b"<closed>"  # no reply: it would claim what the commit did not do
    assert refused.startswith(b"-IOERR ") and b"write failed" in refused
    assert length == 1  # only the committed entry is in the log
