"""A small HTTP/1.1 server for /metrics and the dashboard, on the running event loop.

It serves GET (and HEAD) of a few fixed paths: the caller gives a `Site`, which maps
a request to a `Response`. One request per connection (`Connection: close`), no
request bodies, no keep-alive, no chunked encoding: what a Prometheus scrape and a
browser polling a page need, and nothing a hostile client can stretch.

Bounds, so that no client holds the node: the request head (request line and
headers) is at most HEAD_BYTES_MAX bytes (else 431); it must arrive within
HEAD_TIMEOUT_S of the connection (else the connection closes); the response is
written once and the connection closes when it is sent, or after WRITE_TIMEOUT_S if
the client does not read it. A malformed request line or header gets 400; another
method 405 (with `Allow`); an unknown path 404. The server never runs a thread: a
request is answered by a call on the event loop, so the site must answer quickly
(narad/collectors.py keeps a scrape of ten thousand queues to about 100 ms).

Used by the data node (narad/server.py, through narad/site.py) and by the sentinel
(narad/sentinel/metrics.py). Owned by the event loop thread.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from urllib.parse import unquote, urlsplit

from narad.listen import Listeners

logger = logging.getLogger("narad.metrics_http")

HEAD_BYTES_MAX = 8192
HEAD_TIMEOUT_S = 10.0
WRITE_TIMEOUT_S = 30.0
HEADERS_MAX = 64

REASONS = {
    200: "OK",
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    408: "Request Timeout",
    431: "Request Header Fields Too Large",
    500: "Internal Server Error",
    505: "HTTP Version Not Supported",
}


@dataclass
class Request:
    method: str  # upper case, as sent
    path: str  # the path, percent-decoded, without the query
    query: str
    headers: dict[str, str]  # lower-case names; a repeated header keeps its last value
    peer: str  # the client's address


@dataclass
class Response:
    status: int
    body: bytes = b""
    content_type: str = "text/plain; charset=utf-8"
    headers: list[tuple[str, str]] = field(default_factory=list)


Site = Callable[[Request], Response]


def text(status: int, message: str) -> Response:
    return Response(status, (message + "\n").encode())


class _Connection(asyncio.Protocol):
    """One client: read the head, answer once, close."""

    def __init__(self, site: Site, loop: asyncio.AbstractEventLoop) -> None:
        self.site = site
        self.loop = loop
        self.buffer = bytearray()
        self.transport: asyncio.Transport | None = None
        self.answered = False
        self.timer: asyncio.TimerHandle | None = None
        self.peer = ""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        peer = transport.get_extra_info("peername")
        self.peer = str(peer[0]) if isinstance(peer, tuple) else ""
        self.timer = self.loop.call_later(HEAD_TIMEOUT_S, self._too_slow)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.timer is not None:
            self.timer.cancel()
        self.transport = None

    def _too_slow(self) -> None:
        if self.transport is None:
            return
        if not self.answered:
            self._answer(text(408, "request head not received in time"), head_only=False)
        else:  # the client neither reads what it asked for nor closes
            self.transport.abort()

    def data_received(self, data: bytes) -> None:
        if self.answered:
            return  # a body or a second request: ignored, the connection closes
        self.buffer += data
        end = self.buffer.find(b"\r\n\r\n")
        if end < 0:
            if len(self.buffer) > HEAD_BYTES_MAX:
                self._answer(text(431, "request head too large"), head_only=False)
            return
        if end + 4 > HEAD_BYTES_MAX:
            self._answer(text(431, "request head too large"), head_only=False)
            return
        head = bytes(self.buffer[:end])
        request = parse_head(head, self.peer)
        if isinstance(request, Response):
            self._answer(request, head_only=False)
            return
        if request.method not in ("GET", "HEAD"):
            response = text(405, f"method {request.method} not allowed: GET or HEAD")
            response.headers.append(("Allow", "GET, HEAD"))
            self._answer(response, head_only=False)
            return
        try:
            response = self.site(request)
        except Exception:  # a bug in a page must not stop the node: log it, say 500
            logger.exception("event=metrics_request_failed path=%s", request.path)
            response = text(500, "internal error (see the server log)")
        self._answer(response, head_only=request.method == "HEAD")

    def _answer(self, response: Response, head_only: bool) -> None:
        self.answered = True
        transport = self.transport
        if transport is None:
            return
        if self.timer is not None:
            self.timer.cancel()
        lines = [
            f"HTTP/1.1 {response.status} {REASONS.get(response.status, 'Unknown')}",
            f"Content-Type: {response.content_type}",
            f"Content-Length: {len(response.body)}",
            "Connection: close",
            "Cache-Control: no-store",
            *(f"{name}: {value}" for name, value in response.headers),
        ]
        transport.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
        if not head_only:
            transport.write(response.body)
        # A lingering close: the write side ends once the response is sent, and what
        # the client still sends is read and dropped until it closes, so that the
        # client reads the answer before any reset (it may still be sending a head
        # refused as too large). WRITE_TIMEOUT_S bounds it all.
        self.timer = self.loop.call_later(WRITE_TIMEOUT_S, self._too_slow)
        if transport.can_write_eof():
            transport.write_eof()
        else:
            transport.close()

    def eof_received(self) -> bool:
        """The client closed its side: after the answer, or before its head ended
        (nothing to answer then). Either way the connection closes."""
        return False


def parse_head(head: bytes, peer: str) -> Request | Response:
    """The request a head (without its final blank line) makes, or the 400/505
    response that refuses it."""
    try:
        textual = head.decode("latin-1")
    except UnicodeDecodeError:  # latin-1 decodes every byte; kept for clarity
        return text(400, "bad request")
    request_line, *header_lines = textual.split("\r\n")
    parts = request_line.split(" ")
    if len(parts) != 3 or not parts[0].isalpha() or not parts[1].startswith("/"):
        return text(400, "bad request line")
    method, target, version = parts
    if not version.startswith("HTTP/1."):
        return text(505, "HTTP/1.x only")
    if len(header_lines) > HEADERS_MAX:
        return text(431, "too many headers")
    headers: dict[str, str] = {}
    for line in header_lines:
        name, colon, value = line.partition(":")
        if not colon or not name or name != name.strip() or any(c in name for c in " \t"):
            return text(400, "bad header line")
        headers[name.lower()] = value.strip()
    split = urlsplit(target)
    return Request(method.upper(), unquote(split.path), split.query, headers, peer)


class HttpServer:
    """Listening sockets serving `site` (module doc), bound as the node's own
    (narad/listen.py: Redis's bind addresses, `-` for an optional one)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, site: Site) -> None:
        self.listeners = Listeners(loop, lambda: _Connection(site, loop))

    @property
    def port(self) -> int:
        """The port listened on (the chosen one when asked for 0)."""
        return self.listeners.port

    async def listen(self, addresses: list[str], port: int) -> None:
        """Listen on `port` at each address (port 0: one ephemeral port for all).
        Raises OSError naming the addresses and port when they cannot be bound;
        nothing stays open then."""
        try:
            self.listeners.listen(addresses, port)
        except OSError as exc:
            raise OSError(
                exc.errno,
                f"cannot listen for metrics on {' '.join(addresses)} port {port}: "
                f"{exc.strerror or exc}",
            ) from None
        await self.listeners.started()

    def close(self) -> None:
        self.listeners.close()
