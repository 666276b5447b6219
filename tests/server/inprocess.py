"""A server in the test's own process, on a real event loop and real sockets.

For what cannot be done to another process: a test writes several clients'
requests and only then yields to the loop, so the server reads them all in one loop
iteration (Linux reports the sockets ready in the order they were written to); or
it reaches into the server's files behind its back."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

from narad.config import Config
from narad.server import Server


def open_server(folder: Path, *settings: tuple[str, str]) -> Server:
    """A server on the running loop with its store open, listening nowhere."""
    server = Server(Config.load(None, [("dir", str(folder)), *settings]))
    server.loop = asyncio.get_running_loop()
    server.node.keyspace.open()
    return server


async def connect(server: Server) -> socket.socket:
    """A client connection to `server`; the test's end of it."""
    ours, theirs = socket.socketpair()
    ours.setblocking(False)
    assert server.loop is not None
    await server.loop.connect_accepted_socket(server.new_client, theirs)
    return ours


async def reply(sock: socket.socket) -> bytes:
    """What the server sends before it goes quiet for 0.2 s or closes."""
    loop = asyncio.get_running_loop()
    out = b""
    while True:
        try:
            chunk = await asyncio.wait_for(loop.sock_recv(sock, 4096), 0.2)
        except TimeoutError:
            return out
        if not chunk:
            return out + b"<closed>"
        out += chunk
