"""The listening sockets: `bind` addresses on `port`, changed while the server runs.

CONFIG SET port / bind move the listeners as Redis 7 does: the new sockets are bound
first, and only once all of them are bound are the old ones closed, so a failure
changes nothing (the old listeners stay) and clients already connected stay
connected whatever happens. An address already listened to on the same port keeps
its socket. Bind addresses are Redis's: `*` is every IPv4 address, `::*` every IPv6
one, and a leading `-` makes an address optional (skipped when the machine does not
have it). Addresses are numeric, or `localhost`: no other name is looked up, since a
DNS query would hold the event loop.

Owned by the event loop thread.
"""

from __future__ import annotations

import asyncio
import errno
import socket
import ssl
from collections.abc import Callable

from narad.tls import HANDSHAKE_TIMEOUT_S

BACKLOG = 511  # Redis's tcp-backlog default
# bind() errors that an optional ("-") address is skipped for.
MISSING_ADDRESS = (errno.EADDRNOTAVAIL, errno.EAFNOSUPPORT, errno.EPROTONOSUPPORT)
WILDCARDS = {"*": "0.0.0.0", "::*": "::"}


class _Listener:
    """One bound socket, served by the event loop once `create_server` has run.

    The server is given a duplicate of the socket, so that it can be replaced by
    another one on the same socket (`renew`: new TLS certificates) without the
    socket closing in between; connections waiting in the backlog meanwhile are
    accepted by the new server."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        factory: Callable[[], asyncio.Protocol],
        sock: socket.socket,
        context: ssl.SSLContext | None,
    ) -> None:
        self.sock = sock
        self.server: asyncio.AbstractServer | None = None
        self.closed = False
        self.started = loop.create_task(self._start(loop, factory, context))

    async def _start(
        self,
        loop: asyncio.AbstractEventLoop,
        factory: Callable[[], asyncio.Protocol],
        context: ssl.SSLContext | None,
    ) -> None:
        if self.closed:  # closed before it started
            return
        self.server = await loop.create_server(
            factory, sock=self.sock.dup(), backlog=BACKLOG, ssl=context,
            ssl_handshake_timeout=HANDSHAKE_TIMEOUT_S if context is not None else None,
        )
        if self.closed:  # closed while it started
            self.server.close()

    def renew(
        self,
        loop: asyncio.AbstractEventLoop,
        factory: Callable[[], asyncio.Protocol],
        context: ssl.SSLContext | None,
    ) -> _Listener:
        """Another listener on this socket, serving with `context`; this one stops
        serving but leaves the socket open."""
        fresh = _Listener(loop, factory, self.sock, context)
        self.closed = True
        if self.server is not None:
            self.server.close()
        return fresh

    def close(self) -> None:
        self.closed = True
        if self.server is not None:
            self.server.close()
        self.sock.close()


class Listeners:
    """The listening sockets of one port. With `context` (the TLS port's), each
    connection is served once its TLS handshake is done, with the server context
    `context()` gave when the listener was made or last renewed; a handshake that
    fails or stalls past HANDSHAKE_TIMEOUT_S drops that connection alone, and the
    protocol never sees it."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        factory: Callable[[], asyncio.Protocol],
        context: Callable[[], ssl.SSLContext | None] = lambda: None,
    ) -> None:
        self._loop = loop
        self._factory = factory
        self._context = context
        self._open: dict[tuple[str, int], list[_Listener]] = {}  # (address, port) ->
        self.port = 0  # the port listened on (the ephemeral one chosen for port 0)

    def listen(self, addresses: list[str], port: int) -> None:
        """Listen on every address at `port` (0: one ephemeral port for all), then
        stop listening anywhere else. Raises OSError, having changed nothing, when an
        address that is not optional cannot be bound."""
        kept: dict[tuple[str, int], list[_Listener]] = {}
        fresh: dict[tuple[str, int], list[socket.socket]] = {}
        try:
            for address in addresses:
                host = address.removeprefix("-")
                if port and (host, port) in self._open:
                    kept[(host, port)] = self._open[(host, port)]
                    continue
                try:
                    socks = _bind(WILDCARDS.get(host, host), port)
                except UnicodeError as exc:  # not a name getaddrinfo can even take
                    raise OSError(errno.EINVAL, f"bad address {host!r}") from exc
                except OSError as exc:
                    if address.startswith("-") and exc.errno in MISSING_ADDRESS:
                        continue
                    raise
                port = port or socks[0].getsockname()[1]
                fresh[(host, port)] = socks
        except BaseException:
            for socks in fresh.values():
                for sock in socks:
                    sock.close()
            raise
        for key, listeners in self._open.items():
            if key not in kept:
                for listener in listeners:
                    listener.close()
        self._open = kept
        context = self._context()
        for key, socks in fresh.items():
            self._open[key] = [
                _Listener(self._loop, self._factory, sock, context) for sock in socks
            ]
        self.port = port

    def renew(self) -> None:
        """Serve every connection accepted from now on with the context `context()`
        gives now; connections already made keep theirs."""
        context = self._context()
        self._open = {
            key: [lst.renew(self._loop, self._factory, context) for lst in group]
            for key, group in self._open.items()
        }

    async def started(self) -> None:
        """Wait until every listener accepts connections."""
        await asyncio.gather(*(lst.started for group in self._open.values() for lst in group))

    def close(self) -> None:
        for listeners in self._open.values():
            for listener in listeners:
                listener.close()
        self._open = {}


def _bind(host: str, port: int) -> list[socket.socket]:
    """Bound, listening sockets for every address `host` resolves to (as asyncio's
    create_server binds them: SO_REUSEADDR, IPv6 sockets IPv6-only)."""
    numeric = 0 if host == "localhost" else socket.AI_NUMERICHOST
    infos = socket.getaddrinfo(
        host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE | numeric
    )
    socks: list[socket.socket] = []
    try:
        for family, kind, proto, _, address in dict.fromkeys(infos):
            if port:  # port 0: the others listen on the port the first one was given
                address = (address[0], port, *address[2:])
            sock = socket.socket(family, kind, proto)
            socks.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind(address)
            sock.listen(BACKLOG)
            sock.setblocking(False)
            port = port or sock.getsockname()[1]
    except BaseException:
        for sock in socks:
            sock.close()
        raise
    return socks
