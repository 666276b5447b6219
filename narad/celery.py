"""A kombu transport on Narad's queues, for Celery (docs/clients.md, "Celery").

Registering: importing this module adds the `narad` transport to kombu's aliases, so
that broker URLs `narad://host:port[/db]`, `narad+tls://...` and
`narad+sentinel://s1:26379,s2:26379/group` select it. Put `import narad.celery` in
the module that makes the Celery app (the worker imports it through `-A`), or set
`broker_transport = "narad.celery:Transport"` with a `narad://` URL.

How kombu's operations map onto Q.* (each kombu queue is a Narad queue of the same
name, created on declare with the visibility asked for):

- publish: Q.PUSH with a DEDUP key (the message's publish tag), retried across
  failover by the client (narad/client/connect.py), so a publish is stored once.
  A message with an ETA or countdown in its headers is pushed with DELAY: the
  server holds it until it is due, the worker does not.
- consume: Q.POP COUNT n VISIBILITY v, n no more than the channel's prefetch room;
  each delivery's receipt is its delivery tag. While a message is unacked (waiting
  in the worker, or running with acks_late) a lease renewer Q.TOUCHes it before its
  deadline, so a task longer than the visibility timeout is not redelivered.
- ack: Q.ACK, batched: the worker hands the receipt over and goes on, and one
  thread sends every receipt waiting in one Q.ACK (narad/client/acks.py). reject
  with requeue: Q.NACK (a failed receive: MAXRECEIVES and the
  DLQ apply). reject without requeue: Q.ACK (the message is dropped, as AMQP drops
  it without a dead-letter exchange).
- a channel closing with unacked messages (warm shutdown) releases them with
  Q.TOUCH 0: visible again at once. A worker killed with -9 releases nothing: its
  messages come back when their visibility deadline passes.
- purge: Q.SEEK LATEST, then the messages still visible (visible again after a
  delivery) are popped and acked. Delayed messages are kept.
- fanout (Celery's broadcast: `inspect`, `control`, mingle, gossip): a plain
  stream per exchange (`_kombu.fanout.<exchange>`, capped near 10,000 entries); a
  bound queue reads it from the moment of binding (at most once: no acks).
- bindings are kept in a stream per exchange (`_kombu.binding.<exchange>`) so that
  a process can route to queues another process declared (control replies); a
  channel deleting a queue deletes the bindings it stored for it.

Transport options (`broker_transport_options`): `visibility_timeout` (s, default
30), `polling_interval` (s between polls of empty queues, default 0.05),
`retry_s` (the client's failover retry budget, default 30).
"""

from __future__ import annotations

import contextlib
import re
import time
import uuid
from datetime import UTC, datetime
from queue import Empty
from typing import Any

import redis
from kombu.transport import TRANSPORT_ALIASES, virtual
from kombu.utils.json import dumps, loads

from narad.client import NaradError, StaleReceipt, connect
from narad.client.acks import AckBatcher
from narad.client.leases import Leases
from narad.client.messages import text

FANOUT_PREFIX = "_kombu.fanout."
BINDING_PREFIX = "_kombu.binding."
FANOUT_MAXLEN = 10_000
BINDINGS_CACHE_S = 1.0


def delay_ms_of(message: dict[str, Any], now: datetime | None = None) -> int:
    """How long the server should hold `message`: until its ETA (Celery's message
    protocol 2 keeps it in headers['eta'], ISO 8601; naive means UTC), else 0."""
    eta = (message.get("headers") or {}).get("eta")
    if not eta:
        return 0
    try:
        due = datetime.fromisoformat(str(eta))
    except ValueError:
        return 0
    if due.tzinfo is None:
        due = due.replace(tzinfo=UTC)
    now = now or datetime.now(UTC)
    return max(0, int((due - now).total_seconds() * 1000))


class QoS(virtual.QoS):
    """Acks and rejects go to the server; unacked messages at close are released."""

    channel: Channel

    def ack(self, delivery_tag: str) -> None:
        self.channel.settle(delivery_tag, "ack")
        super().ack(delivery_tag)

    def reject(self, delivery_tag: str, requeue: bool = False) -> None:
        self.channel.settle(delivery_tag, "nack" if requeue else "ack")
        self._quick_ack(delivery_tag)

    def restore_unacked(self) -> list[Any]:
        self._flush()
        errors = []
        while self._delivered:
            tag, message = self._delivered.popitem()
            try:
                self.channel.settle(tag, "release")
            except Exception as exc:
                errors.append((exc, message))
        return errors

    def restore_visible(self, *args: Any, **kwargs: Any) -> None:
        """The server's deadlines bring unacked messages back by themselves."""


class Channel(virtual.Channel):
    QoS = QoS
    supports_fanout = True
    do_restore = True
    from_transport_options = (  # type: ignore[assignment]
        *virtual.Channel.from_transport_options, "visibility_timeout",
    )
    visibility_timeout: float = 30.0

    def __init__(self, connection: Transport, **kwargs: Any) -> None:
        super().__init__(connection, **kwargs)
        self.transport: Transport = connection
        self.client = connection.narad
        self.leases = connection.leases
        self._buffers: dict[str, list[dict[str, Any]]] = {}
        self._known_queues: set[str] = set()
        self._fanout_reads: dict[str, list[str]] = {}  # queue -> [stream, last ID]
        self._bindings_cache: dict[str, tuple[float, list[tuple[str, str, str]]]] = {}
        # queue -> (binding stream, entry ID) of the bindings this channel stored
        self._stored_by_queue: dict[str, list[tuple[str, str]]] = {}

    @property
    def visibility_ms(self) -> int:
        return int(float(self.visibility_timeout) * 1000)

    # ---- queues -------------------------------------------------------------------

    def _new_queue(self, queue: str, **kwargs: Any) -> None:
        if queue in self._known_queues:
            return
        # NX: a queue that exists (maybe tuned by its operator) is used as it is.
        self.client.execute("Q.CREATE", queue, "VISIBILITY", self.visibility_ms, "NX")
        self._known_queues.add(queue)

    def _has_queue(self, queue: str, **kwargs: Any) -> bool:
        try:
            self.client.execute("Q.CONFIG", queue, "GET")
        except NaradError:
            return False
        return True

    def _delete(self, queue: str, *args: Any, **kwargs: Any) -> None:
        for stream, entry_id in self._stored_by_queue.pop(queue, []):
            self.client.execute("XDEL", stream, entry_id)
        self._bindings_cache.clear()
        self._known_queues.discard(queue)
        self._buffers.pop(queue, None)
        self._fanout_reads.pop(queue, None)
        self.client.execute("Q.DROP", queue)

    def _size(self, queue: str) -> int:
        try:
            stats = self.client.queue(queue).stats()
        except NaradError:
            return 0
        return stats.visible + stats.delayed

    def _purge(self, queue: str) -> int:
        q = self.client.queue(queue)
        try:
            count = q.stats().visible
        except NaradError:
            return 0
        self._buffers.pop(queue, None)
        q.seek("LATEST")
        while got := q.pop(1000):
            q.ack(*got)
        return count

    # ---- publishing -----------------------------------------------------------------

    def _put(self, queue: str, message: dict[str, Any], **kwargs: Any) -> None:
        """Q.PUSH, delayed to the ETA, keyed by the publish's delivery tag."""
        self._new_queue(queue)
        args: list[Any] = ["Q.PUSH", queue]
        delay = delay_ms_of(message)
        if delay:
            args += ["DELAY", delay]
        key = message.get("properties", {}).get("delivery_tag") or uuid.uuid4().hex
        args += ["DEDUP", f"kombu:{queue}:{key}", dumps(message)]
        self.client.execute(*args)

    def _put_fanout(self, exchange: str, message: dict[str, Any], routing_key: str,
                    **kwargs: Any) -> None:
        self.client.execute("XADD", FANOUT_PREFIX + exchange, "MAXLEN", "~", FANOUT_MAXLEN,
                            "*", "message", dumps(message))

    def _queue_bind(self, exchange: str, routing_key: str, pattern: str, queue: str) -> None:
        if self.typeof(exchange).type == "fanout":
            stream = FANOUT_PREFIX + exchange
            last = self.client.execute("XREVRANGE", stream, "+", "-", "COUNT", 1)
            self._fanout_reads[queue] = [stream, text(last[0][0]) if last else "0-0"]
            return
        stream = BINDING_PREFIX + exchange
        entry = [routing_key or "", pattern or "", queue]
        if tuple(entry) not in self._stored_bindings(exchange, fresh=True):
            entry_id = self.client.execute("XADD", stream, "*", "routing_key", entry[0],
                                           "pattern", entry[1], "queue", entry[2])
            self._stored_by_queue.setdefault(queue, []).append((stream, text(entry_id)))
            self._bindings_cache.pop(exchange, None)

    def get_table(self, exchange: str) -> list[Any]:
        """This process's bindings of `exchange`, and those others stored."""
        local = list(super().get_table(exchange))
        if self.typeof(exchange).type == "fanout":
            return local
        stored = [b for b in self._stored_bindings(exchange) if b not in local]
        return local + stored

    def _lookup(self, exchange: str, routing_key: str, default: Any = None) -> Any:
        """As kombu's, but a miss reads the stored bindings again before it counts:
        another process may have bound a queue since they were cached."""
        found = super()._lookup(exchange, routing_key, default)
        if not found and exchange in self._bindings_cache:
            del self._bindings_cache[exchange]
            found = super()._lookup(exchange, routing_key, default)
        return found

    def _stored_bindings(self, exchange: str, fresh: bool = False) -> list[tuple[str, str, str]]:
        cached = self._bindings_cache.get(exchange)
        if cached and not fresh and time.monotonic() - cached[0] < BINDINGS_CACHE_S:
            return cached[1]
        found = []
        for _, fields in self.client.execute("XRANGE", BINDING_PREFIX + exchange, "-", "+"):
            got = {text(k): text(v) for k, v in _field_pairs(fields)}
            found.append((got["routing_key"], got["pattern"], got["queue"]))
        self._bindings_cache[exchange] = (time.monotonic(), found)
        return found

    # ---- consuming ------------------------------------------------------------------

    def _get(self, queue: str, timeout: float | None = None) -> dict[str, Any]:
        if queue in self._fanout_reads:
            return self._get_fanout(queue)
        buffer = self._buffers.get(queue)
        if not buffer:
            buffer = self._buffers[queue] = self._pop(queue)
            if not buffer:
                raise Empty()
        return buffer.pop(0)

    def _pop(self, queue: str) -> list[dict[str, Any]]:
        room = self.qos.can_consume_max_estimate()
        count = max(1, min(room if room is not None else 10, 100))
        try:
            got = self.client.queue(queue).pop(count, visibility_ms=self.visibility_ms)
        except NaradError:
            return []
        out = []
        for message in got:
            payload = loads(message.payload)
            props = payload.setdefault("properties", {})
            props["delivery_tag"] = message.receipt
            props.setdefault("delivery_info", {})["queue"] = queue
            payload["redelivered"] = message.receives > 1
            self.leases.hold(queue, message.receipt, self.visibility_ms)
            out.append(payload)
        return out

    def _get_fanout(self, queue: str) -> dict[str, Any]:
        stream, last = self._fanout_reads[queue]
        reply = self.client.execute("XREAD", "COUNT", 1, "STREAMS", stream, last)
        entries = _stream_entries(reply, stream)
        if not entries:
            raise Empty()
        entry_id, fields = entries[0]
        self._fanout_reads[queue][1] = text(entry_id)
        got = {text(k): v for k, v in _field_pairs(fields)}
        payload: dict[str, Any] = loads(got["message"])
        payload.setdefault("properties", {})["delivery_tag"] = "fanout-" + uuid.uuid4().hex
        return payload

    def settle(self, delivery_tag: str, how: str) -> None:
        """ack, nack (visible again, a failed receive) or release (visible again)
        one delivery; a fanout copy or an unknown tag has nothing to settle. An ack
        goes to the transport's AckBatcher and returns at once; its lease is renewed
        until the ack is answered."""
        if how == "ack":
            queue_name = self.leases.queue_of(delivery_tag)
            if queue_name is not None:
                leases = self.leases
                self.transport.acks.ack(queue_name, delivery_tag,
                                        done=lambda error: leases.release(delivery_tag))
            return
        held = self.leases.release(delivery_tag)
        if held is None:
            return
        queue, _ = held
        try:
            if how == "nack":
                self.client.execute("Q.NACK", queue, delivery_tag)
            else:
                self.client.execute("Q.TOUCH", queue, delivery_tag, 0)
        except StaleReceipt:
            pass  # the delivery ended already; the message is someone else's now

    def close(self) -> None:
        for queue, buffer in self._buffers.items():
            for payload in buffer:
                tag = payload["properties"]["delivery_tag"]
                with contextlib.suppress(redis.RedisError):
                    self.settle(tag, "release")
            buffer.clear()
            del queue
        super().close()


def _field_pairs(fields: Any) -> list[tuple[Any, Any]]:
    if isinstance(fields, dict):
        return list(fields.items())
    items = list(fields)
    return [(items[i], items[i + 1]) for i in range(0, len(items) - 1, 2)]


def _stream_entries(reply: Any, stream: str) -> list[Any]:
    """XREAD's entries for one stream: redis-py gives a map under RESP3 and a list
    of [key, entries] under RESP2."""
    if not reply:
        return []
    pairs = reply.items() if isinstance(reply, dict) else reply
    for key, entries in pairs:
        if text(key) == stream:
            if entries and isinstance(entries[0], list):  # RESP3: one more level
                entries = entries[0]
            return list(entries)
    return []


class Transport(virtual.Transport):
    """kombu's virtual transport on Q.* (module docstring)."""

    Channel = Channel
    can_parse_url = True
    default_port = 6379  # type: ignore[assignment]
    polling_interval = 0.05
    driver_type = "narad"
    driver_name = "narad"
    connection_errors = (  # type: ignore[assignment]
        *virtual.Transport.connection_errors, redis.ConnectionError, redis.TimeoutError,
    )
    channel_errors = (  # type: ignore[assignment]
        *virtual.Transport.channel_errors, redis.ResponseError,
    )
    implements = virtual.Transport.implements.extend(
        asynchronous=False, exchange_type=frozenset(["direct", "topic", "fanout"]),
    )

    def __init__(self, client: Any, **kwargs: Any) -> None:
        super().__init__(client, **kwargs)
        options = client.transport_options
        retry = options.get("retry_s")
        self.narad = connect(self.url_of(client), retry_s=None if retry is None else retry)
        self.leases = Leases(self.narad)
        self.acks = AckBatcher(self.narad)

    @staticmethod
    def url_of(conninfo: Any) -> str:
        """The narad.client URL kombu's Connection stands for."""
        host = conninfo.hostname or "127.0.0.1"
        if conninfo.uri_prefix == "narad" and "://" in host:
            return "narad+" + host  # narad+sentinel://..., narad+tls://...
        if "://" in host:
            return str(host)
        auth = ""
        if conninfo.password:
            auth = f"{conninfo.userid or ''}:{conninfo.password}@"
        vhost = (conninfo.virtual_host or "/").strip("/")
        db = f"/{vhost}" if vhost.isdigit() else ""
        return f"narad://{auth}{host}:{conninfo.port or 6379}{db}"

    def as_uri(self, uri: str, include_password: bool = False, mask: str = "**") -> str:
        """The broker URL for logs and Celery's banner, its password masked.
        (kombu's own parser reads `host:port` once and cannot take the host list
        of a sentinel URL.)"""
        url = self.url_of(self.client)
        if include_password:
            return url
        return re.sub(r"(://[^:/@]*:)[^@/]*@", lambda m: f"{m.group(1)}{mask}@", url)

    def establish_connection(self) -> Transport:
        self.narad.execute("PING")
        result: Transport = super().establish_connection()
        return result

    def close_connection(self, connection: Any) -> None:
        super().close_connection(connection)
        self.acks.close()
        self.leases.close()
        self.narad.close()


def register() -> None:
    """Make `narad://` (and `narad+...://`) broker URLs select this transport."""
    TRANSPORT_ALIASES.setdefault("narad", "narad.celery:Transport")


register()
