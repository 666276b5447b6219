"""A minimal RESP client on a plain socket, for exact replies and error texts.

redis-py maps some error replies to exception classes and reshapes others; these
tests want the bytes' meaning as the server sent it: errors come back as
("error", text), everything else as hiredis parses it.
"""

from __future__ import annotations

import socket
from collections.abc import Sequence
from typing import Any

import hiredis


def encode(args: Sequence[Any]) -> bytes:
    out = [b"*%d\r\n" % len(args)]
    for arg in args:
        data = arg if isinstance(arg, bytes) else str(arg).encode()
        out.append(b"$%d\r\n%b\r\n" % (len(data), data))
    return b"".join(out)


def _plain(value: Any) -> Any:
    if isinstance(value, hiredis.ReplyError):
        return ("error", str(value))
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {_plain(k): _plain(v) for k, v in value.items()}
    return value


def read_exactly(sock: socket.socket, size: int) -> bytes:
    """Up to `size` bytes from `sock`: fewer only if the server closes first."""
    data = b""
    while len(data) < size:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    return data


class Raw:
    """One connection; `call` sends a command and returns its reply."""

    def __init__(self, port: int, timeout: float = 10.0) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.reader = hiredis.Reader()

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> Raw:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def send_command(self, *args: Any) -> None:
        self.sock.sendall(encode(args))

    def read(self) -> Any:
        """The next reply; raises ConnectionError when the server closed first."""
        while True:
            value = self.reader.gets()
            if value is not False:
                return _plain(value)
            data = self.sock.recv(65536)
            if not data:
                raise ConnectionError("closed by the server")
            self.reader.feed(data)

    def call(self, *args: Any) -> Any:
        self.send_command(*args)
        return self.read()

    def read_all_until_closed(self) -> bytes:
        """Every byte the server sends until it closes the connection."""
        chunks = []
        while True:
            try:
                data = self.sock.recv(65536)
            except ConnectionResetError:
                break
            if not data:
                break
            chunks.append(data)
        return b"".join(chunks)


def _without_ids(args: Sequence[Any], reply: Any) -> Any:
    """HELLO's reply carries the connection id, which differs between two servers."""
    if str(args[0]).upper() != "HELLO":
        return reply
    if isinstance(reply, dict):
        return {k: v for k, v in reply.items() if k != b"id"}
    if isinstance(reply, list):
        pairs = [(reply[i], reply[i + 1]) for i in range(0, len(reply) - 1, 2)]
        return [x for k, v in pairs if k != b"id" for x in (k, v)]
    return reply


def call_both(narad_port: int, redis_port: int, script: Sequence[Sequence[Any]]) -> list[Any]:
    """Run `script` on one raw connection to each server; the (command, narad, redis)
    triples whose replies differ (HELLO's connection id aside)."""
    diffs = []
    with Raw(narad_port) as mine, Raw(redis_port) as theirs:
        for args in script:
            a, b = _without_ids(args, mine.call(*args)), _without_ids(args, theirs.call(*args))
            if a != b:
                diffs.append((list(args), a, b))
    return diffs
