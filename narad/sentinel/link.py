"""A sentinel's connection to a data node or to another sentinel: one request at a
time, each bounded in time (the connect and its TLS handshake included), RESP2
replies decoded by hiredis. With a TLS context (`tls-replication yes`, as in Redis
Sentinel) every link speaks TLS.

A link connects when first used and again after any failure; a call that fails
(refused, reset, timed out, or the other end's error reply) raises LinkDown or
Refused, and leaves the link closed, except that an error reply leaves it open.
Calls are serialized by a lock, so several tasks may share one link; the wait for
the lock counts in the call's time.
"""

from __future__ import annotations

import ssl
from typing import Any

import anyio
import anyio.abc
import hiredis

from narad.resp.encoder import encode_request

RECEIVE_BYTES = 1 << 16
FAILURES = (
    OSError, anyio.BrokenResourceError, anyio.EndOfStream, TimeoutError,
    anyio.ClosedResourceError,
)


class LinkDown(Exception):
    """The other end could not be reached, or did not answer in time."""


class Refused(Exception):
    """The other end answered with an error reply."""


class Link:
    def __init__(
        self, host: str, port: int, name: str = "", user: str | None = None,
        password: str | None = None, tls: ssl.SSLContext | None = None,
    ) -> None:
        self.host = host
        self.tls = tls  # the client context when links are TLS ones (tls-replication)
        self.port = port
        self.name = name  # CLIENT SETNAME on connect, if any
        self.user = user
        self.password = password
        self._stream: anyio.abc.ByteStream | None = None
        self._reader = hiredis.Reader(encoding=None)
        self._lock = anyio.Lock()
        self.local_ip = ""  # this end's address, once connected

    @property
    def connected(self) -> bool:
        return self._stream is not None

    async def call(self, *args: Any, timeout_s: float) -> Any:
        """Send one request and return its reply (bytes, int, list ...); LinkDown if
        the other end is not reached or does not answer within `timeout_s`, Refused
        for an error reply."""
        deadline = anyio.current_time() + timeout_s
        acquired = False
        with anyio.move_on_after(timeout_s):  # another task's call may hold the link
            await self._lock.acquire()
            acquired = True
        if not acquired:
            raise LinkDown("busy: another request on this link did not finish in time")
        try:
            with anyio.fail_after(max(0.0, deadline - anyio.current_time())):
                if self._stream is None:
                    await self._connect()
                return await self._request(args)
        except FAILURES as exc:
            await self.close()
            raise LinkDown(f"{type(exc).__name__}: {exc}") from None
        finally:
            self._lock.release()

    async def _connect(self) -> None:
        stream: anyio.abc.ByteStream
        if self.tls is None:
            stream = await anyio.connect_tcp(self.host, self.port)
        else:  # the handshake within the call's time, as the connect is
            stream = await anyio.connect_tcp(
                self.host, self.port, ssl_context=self.tls, tls_standard_compatible=False
            )
        self._stream = stream
        self._reader = hiredis.Reader(encoding=None)
        self.local_ip = str(stream.extra(anyio.abc.SocketAttribute.local_address)[0])
        try:
            if self.password:
                await self._request(("AUTH", *([self.user] if self.user else []), self.password))
            if self.name:
                await self._request(("CLIENT", "SETNAME", self.name))
        except Refused:
            await self.close()  # not half set up: the next call starts again
            raise

    async def rename(self, name: str, timeout_s: float) -> None:
        """CLIENT SETNAME `name` now (if connected) and on every later connect."""
        self.name = name
        if self.connected:
            await self.call("CLIENT", "SETNAME", name, timeout_s=timeout_s)

    async def _request(self, args: tuple[Any, ...]) -> Any:
        stream = self._stream
        assert stream is not None
        words = [a if isinstance(a, (bytes, int)) else str(a) for a in args]
        await stream.send(encode_request(words))
        while (reply := self._reader.gets()) is False:
            self._reader.feed(await stream.receive(RECEIVE_BYTES))
        if isinstance(reply, hiredis.ReplyError):
            raise Refused(str(reply))
        return reply

    async def close(self) -> None:
        stream, self._stream = self._stream, None
        if stream is not None:
            with anyio.CancelScope(shield=True):
                await stream.aclose()
