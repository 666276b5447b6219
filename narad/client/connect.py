"""`connect(url)`: a Narad client for one server, a TLS server, or a sentinel group.

URLs (docs/clients.md, "Connecting"):

    narad://[user:password@]host[:port][/db]
    narad+tls://[user:password@]host[:port][/db]?ca=...&cert=...&key=...
    narad+sentinel://[user:password@]s1:26379,s2:26379/group[/db]
    narad+sentinel+tls://... (TLS to the sentinels and the data nodes alike)

`redis://` and `rediss://` are read as `narad://` and `narad+tls://`. Query options:
`protocol` (2 or 3, default 3), `timeout` (socket timeout, s, default 10),
`retry` (the retry budget, s, default 30), `sentinel_password`, `ca`, `cert`, `key`,
`verify` (`required` | `none`).

The retry contract: a command that met a lost connection or an answer that means
"not the leader now" (READONLY, LOADING, MASTERDOWN, TRYAGAIN, NOREPLICAS, NOREPL) is
sent again, on a fresh connection (with sentinels: to the leader they name now),
after a short backoff (20 ms doubling to 250 ms, with jitter), until it succeeds or
the retry budget has passed (then `RetryTimeout`). redis-py's own retry is turned
off so that it cannot keep dialling a dead leader with long backoffs. Only commands
that are safe to repeat are retried: a Q.PUSH only when it carries a DEDUP key.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar
from urllib.parse import parse_qs, unquote, urlsplit

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry
from redis.sentinel import Sentinel

from narad.client.consumer import Consumer, Handler
from narad.client.errors import RetryTimeout, retryable_reply, translate
from narad.client.messages import text
from narad.client.producer import Producer
from narad.client.queue import Queue

T = TypeVar("T")

DEFAULT_PORT = 6379
DEFAULT_SENTINEL_PORT = 26379
BACKOFF_FIRST_S = 0.02
BACKOFF_MAX_S = 0.25


@dataclass
class Target:
    """What a URL names: one server, or a sentinel group, and how to reach it."""

    hosts: list[tuple[str, int]]
    sentinel_group: str | None = None
    db: int = 0
    tls: bool = False
    username: str | None = None
    password: str | None = None
    sentinel_password: str | None = None
    protocol: int = 3
    timeout_s: float = 10.0
    retry_s: float = 30.0
    tls_options: dict[str, Any] = field(default_factory=dict)


SCHEMES = {
    "narad": (False, False), "redis": (False, False),
    "narad+tls": (False, True), "rediss": (False, True),
    "narad+sentinel": (True, False), "redis+sentinel": (True, False),
    "narad+sentinel+tls": (True, True),
}


def parse_url(url: str) -> Target:
    """Read a client URL (module docstring); ValueError names what is wrong."""
    parts = urlsplit(url)
    if parts.scheme not in SCHEMES:
        raise ValueError(f"unknown scheme {parts.scheme!r} in {url!r}: use one of "
                         + ", ".join(f"{s}://" for s in SCHEMES))
    sentinel, tls = SCHEMES[parts.scheme]
    userinfo, _, hostlist = parts.netloc.rpartition("@")
    username, _, password = userinfo.partition(":")
    default_port = DEFAULT_SENTINEL_PORT if sentinel else DEFAULT_PORT
    hosts = [_host_port(h, default_port) for h in hostlist.split(",") if h]
    if not hosts:
        hosts = [("127.0.0.1", default_port)]
    path = [p for p in parts.path.split("/") if p]
    group = None
    if sentinel:
        if not path:
            raise ValueError(f"{url!r}: a sentinel URL names its group: .../groupname")
        group = unquote(path.pop(0))
    if len(path) > 1 or (path and not path[0].isdigit()):
        raise ValueError(f"{url!r}: the path is the database number, e.g. /0")
    query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
    target = Target(
        hosts, group, int(path[0]) if path else 0, tls,
        unquote(username) or None, unquote(password) or None,
        query.pop("sentinel_password", None),
        int(query.pop("protocol", "3")), float(query.pop("timeout", "10")),
        float(query.pop("retry", "30")),
    )
    if target.protocol not in (2, 3):
        raise ValueError(f"{url!r}: protocol is 2 or 3")
    for name, option in (("ca", "ssl_ca_certs"), ("cert", "ssl_certfile"),
                         ("key", "ssl_keyfile"), ("verify", "ssl_cert_reqs")):
        if name in query:
            target.tls_options[option] = query.pop(name)
    if query:
        raise ValueError(f"{url!r}: unknown option(s) {', '.join(sorted(query))}")
    return target


def _host_port(text_: str, default: int) -> tuple[str, int]:
    if text_.startswith("["):  # [::1]:6379
        host, _, port = text_[1:].partition("]")
        return host, int(port.lstrip(":") or default)
    host, _, port = text_.rpartition(":") if ":" in text_ else (text_, "", "")
    return host, int(port) if port else default


def node_kwargs(t: Target, no_retry: Any) -> dict[str, Any]:
    """redis-py's arguments for a connection to a data node of `t`, sync or asyncio
    alike; `no_retry` is that flavour's Retry that never retries (the client's own
    bounded retry does)."""
    kwargs: dict[str, Any] = {
        "db": t.db, "username": t.username, "password": t.password,
        "protocol": t.protocol, "socket_timeout": t.timeout_s,
        "socket_connect_timeout": min(t.timeout_s, 2.0), "socket_keepalive": True,
        "retry": no_retry, "health_check_interval": 0,
    }
    if t.tls:
        kwargs.update({"ssl": True, **t.tls_options})
    return kwargs


def sentinel_kwargs(t: Target, no_retry: Any) -> dict[str, Any]:
    """redis-py's arguments for a connection to one of `t`'s sentinels."""
    kwargs: dict[str, Any] = {
        "socket_timeout": min(t.timeout_s, 2.0),
        "socket_connect_timeout": min(t.timeout_s, 2.0),
        "password": t.sentinel_password, "protocol": t.protocol,
        "retry": no_retry,
    }
    if t.tls:
        kwargs.update({"ssl": True, **t.tls_options})
    return kwargs


class Client:
    """A connection pool to the leader, with the bounded retry of the module
    docstring. Thread-safe as redis-py's client is; `redis` is the redis-py client
    underneath, for commands this class has no method for."""

    def __init__(self, target: Target) -> None:
        self.target = target
        self.retry_s = target.retry_s
        self.sentinel: Sentinel | None = None
        self.redis = self._make_redis()

    def _make_redis(self) -> redis.Redis:
        t = self.target
        kwargs = node_kwargs(t, Retry(NoBackoff(), 0))
        if t.sentinel_group is None:
            host, port = t.hosts[0]
            return redis.Redis(host=host, port=port, **kwargs)
        self.sentinel = Sentinel(
            t.hosts, sentinel_kwargs=sentinel_kwargs(t, Retry(NoBackoff(), 0)), **kwargs
        )
        master: redis.Redis = self.sentinel.master_for(t.sentinel_group, **kwargs)
        return master

    # ---- running commands ---------------------------------------------------------

    def execute(self, *args: Any, retry: bool = True) -> Any:
        """Run one command; with `retry`, ride through failover (module docstring)."""
        return self.call(lambda r: r.execute_command(*args), retry=retry)

    def call(self, run: Callable[[redis.Redis], T], *, retry: bool = True) -> T:
        """Run `run(redis_client)`, retried as `execute` is; error replies come back
        as narad.client.errors classes."""
        deadline = time.monotonic() + self.retry_s
        pause = BACKOFF_FIRST_S
        while True:
            try:
                return run(self.redis)
            except (redis.ConnectionError, redis.TimeoutError) as exc:
                failure: Exception = exc
            except redis.ResponseError as exc:
                if not (retry and retryable_reply(exc)):
                    raise translate(exc) from None
                failure = exc
            if not retry:
                raise failure
            if time.monotonic() + pause > deadline:
                raise RetryTimeout(
                    f"no leader answered within {self.retry_s:g} s: {failure}") from failure
            self.redis.connection_pool.disconnect()
            time.sleep(pause * random.uniform(0.5, 1.0))
            pause = min(pause * 2, BACKOFF_MAX_S)

    def leader_address(self) -> tuple[str, int] | None:
        """Where the leader is, as the sentinels name it now (None without)."""
        if self.sentinel is None or self.target.sentinel_group is None:
            return None
        address: tuple[str, int] = self.sentinel.discover_master(self.target.sentinel_group)
        return address

    def new_connection(self) -> redis.Connection:
        """A connection of its own to the leader, outside the pool (push mode)."""
        pool = self.redis.connection_pool
        conn = pool.make_connection()
        conn.connect()
        return conn  # type: ignore[return-value]

    # ---- conveniences ------------------------------------------------------------

    def queue(self, name: str) -> Queue:
        return Queue(self, name)

    def list_queues(self, match: str | None = None) -> list[str]:
        args = ["Q.LIST", *(("MATCH", match) if match else ())]
        return [text(name) for name in self.execute(*args)]

    def producer(self, queue: str) -> Producer:
        return Producer(self.queue(queue))

    def consumer(self, queue: str, handler: Handler, **options: Any) -> Consumer:
        return Consumer(self.queue(queue), handler, **options)

    def ping(self) -> bool:
        return bool(self.execute("PING"))

    def close(self) -> None:
        self.redis.close()
        self.redis.connection_pool.disconnect()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def connect(url: str = "narad://127.0.0.1:6379", *, retry_s: float | None = None) -> Client:
    """A client for `url` (module docstring). Nothing is dialled until first use."""
    target = parse_url(url)
    if retry_s is not None:
        target.retry_s = retry_s
    return Client(target)
