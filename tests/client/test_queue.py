"""narad.client's Queue and Producer against a real server, under RESP2 and RESP3:
typed replies, one exception class per error, DEDUP-keyed pushes."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
import redis

from narad.client import (
    Client,
    IncompatibleSchema,
    InvalidReceipt,
    Message,
    NoQueue,
    QueueInUse,
    QueueSettings,
    SchemaRejected,
    SettingsConflict,
    StaleReceipt,
    connect,
    parse_url,
)
from tests.servers import NaradProcess, wait_until


@pytest.fixture(params=[2, 3], ids=["resp2", "resp3"])
def client(request: pytest.FixtureRequest, shared_narad: NaradProcess) -> Iterator[Client]:
    made = connect(f"narad://127.0.0.1:{shared_narad.port}?protocol={request.param}")
    yield made
    made.close()


def fresh(client: Client, **settings: int | str) -> str:
    name = f"q-{uuid.uuid4().hex[:8]}"
    client.queue(name).create(**settings)  # type: ignore[arg-type]
    return name


def test_pop_gives_messages_with_every_field(client: Client) -> None:
    queue = client.queue(fresh(client))
    ids = queue.push_many([b"a", "b"])
    got = queue.pop(5)
    assert [m.payload for m in got] == [b"a", b"b"]
    assert [m.id for m in got] == ids
    first = got[0]
    assert isinstance(first, Message)
    assert first.queue == queue.name and first.receives == 1
    assert first.pushed_at == int(first.id.split("-")[0])
    assert first.receipt and first.fields == {}
    assert queue.pop(5) == []
    assert queue.ack(*got) == 2


def test_settings_stats_and_list_are_dataclasses(client: Client) -> None:
    name = fresh(client, visibility_ms=1234, maxreceives=3)
    queue = client.queue(name)
    settings = queue.settings()
    assert isinstance(settings, QueueSettings)
    assert (settings.visibility, settings.maxreceives, settings.dlq) == (1234, 3, "")
    queue.configure(visibility=2000)
    assert queue.settings().visibility == 2000
    queue.push("x", delay_ms=60_000)
    queue.push("y")
    stats = queue.stats()
    assert (stats.visible, stats.delayed, stats.pushed, stats.in_flight) == (1, 1, 2, 0)
    assert stats.first_id is not None
    assert name in client.list_queues(match="q-*")


def test_nack_touch_and_stale_receipt(client: Client) -> None:
    queue = client.queue(fresh(client, visibility_ms=60_000))
    queue.push("job")
    [first] = queue.pop()
    queue.touch(first, 120_000)
    queue.nack(first)
    [second] = queue.pop()
    assert second.receives == 2 and second.id == first.id
    with pytest.raises(StaleReceipt) as caught:
        queue.ack(first)
    assert caught.value.code == "STALE"
    assert isinstance(caught.value, redis.ResponseError)  # redis-py code keeps working
    with pytest.raises(StaleReceipt):
        queue.touch(first, 1000)
    assert queue.ack(second) == 1


def test_errors_have_their_own_classes(client: Client) -> None:
    with pytest.raises(NoQueue):
        client.queue("no-such-queue-here").push("x")
    name = fresh(client, visibility_ms=1000)
    with pytest.raises(SettingsConflict):
        client.queue(name).create(visibility_ms=2000)
    client.queue(name).create(visibility_ms=1000)  # the same settings: fine
    with pytest.raises(InvalidReceipt):
        client.queue(name).ack("not-a-receipt")
    with pytest.raises(ValueError):
        client.queue(name).seek()


def test_schema_rejection_names_the_payload(client: Client) -> None:
    queue = client.queue(fresh(client))
    schema = '{"type": "object", "required": ["id"]}'
    assert queue.schema_set(schema) == 1
    got = queue.schema_get()
    assert got is not None and got.version == 1 and got.field is None
    assert queue.schema_versions() == [1]
    with pytest.raises(SchemaRejected) as caught:
        queue.push('{"name": 1}')
    assert caught.value.payload == b'{"name": 1}' and caught.value.index == 0
    assert caught.value.version == 1 and "id" in caught.value.reason
    with pytest.raises(SchemaRejected) as caught:
        client.producer(queue.name).push_many(['{"id": 1}', '{"nope": 2}'])
    assert caught.value.index == 1 and caught.value.payload == b'{"nope": 2}'
    with pytest.raises(IncompatibleSchema):
        queue.schema_set('{"type": "string"}')
    assert queue.schema_drop() is True


def test_producer_stores_a_key_once(client: Client) -> None:
    name = fresh(client)
    producer = client.producer(name)
    first = producer.push("order 7", key="order-7")
    again = producer.push("order 7", key="order-7")
    other = producer.push("order 8")
    assert first == again != other
    ids = producer.push_many(["a", "b"], keys=["ka", "kb"])
    assert producer.push_many(["a", "b"], keys=["ka", "kb"]) == ids
    assert client.queue(name).stats().pushed == 4


def test_push_stream_delivers_and_settles(client: Client) -> None:
    queue = client.queue(fresh(client))
    queue.push_many(["1", "2", "3"])
    with queue.consume(prefetch=2) as stream:
        a, b = stream.get(5), stream.get(5)
        assert a is not None and b is not None
        assert stream.get(0.2) is None  # PREFETCH 2: the third waits
        assert stream.ack(a) == 1
        c = stream.get(5)
        assert c is not None and c.payload == b"3"
        stream.nack(b)
        with pytest.raises(StaleReceipt):
            stream.touch(b, 1000)
    # closing gave back what was in flight to it (once the server saw it close)
    found: list[bytes] = []
    wait_until(lambda: found.extend(m.payload for m in queue.pop(5)) or len(found) >= 2)
    assert sorted(found) == [b"2", b"3"]


def test_redrive_and_seek(client: Client) -> None:
    dead = fresh(client)
    name = fresh(client, maxreceives=1, dlq=dead)
    queue = client.queue(name)
    queue.push("poison")
    [m] = queue.pop()
    queue.nack(m)
    assert client.queue(dead).stats().visible == 1
    assert client.queue(dead).redrive() == 1
    [back] = queue.pop()
    assert back.payload == b"poison"
    queue.ack(back)
    queue.seek("EARLIEST")
    assert [m.payload for m in queue.pop()] == [b"poison"]


@pytest.mark.parametrize(("url", "expect"), [
    ("narad://h:7000/2", {"hosts": [("h", 7000)], "db": 2, "tls": False}),
    ("narad://127.0.0.1", {"hosts": [("127.0.0.1", 6379)], "db": 0}),
    ("narad+tls://u:p@h:7000?ca=/ca.pem", {"tls": True, "username": "u", "password": "p",
                                            "tls_options": {"ssl_ca_certs": "/ca.pem"}}),
    ("narad+sentinel://a:26379,b:26380/grp/3", {
        "hosts": [("a", 26379), ("b", 26380)], "sentinel_group": "grp", "db": 3}),
    ("narad+sentinel://a,b/grp?retry=5&protocol=2", {
        "hosts": [("a", 26379), ("b", 26379)], "retry_s": 5.0, "protocol": 2}),
    ("narad://[::1]:7000", {"hosts": [("::1", 7000)]}),
])
def test_urls(url: str, expect: dict[str, object]) -> None:
    target = parse_url(url)
    for name, value in expect.items():
        assert getattr(target, name) == value


@pytest.mark.parametrize("url", [
    "amqp://h", "narad+sentinel://a:26379", "narad://h/x", "narad://h?bogus=1",
    "narad://h?protocol=4",
])
def test_bad_urls(url: str) -> None:
    with pytest.raises(ValueError):
        parse_url(url)


def test_create_if_missing_peek_and_drop_in_use(client: Client) -> None:
    name = f"q-{uuid.uuid4().hex[:8]}"
    queue = client.queue(name)
    assert queue.create(visibility_ms=1000, exist_ok=True) is True
    assert queue.create(visibility_ms=9000, exist_ok=True) is False  # left as it is
    assert queue.settings().visibility == 1000
    queue.push("look")
    [seen] = queue.peek(5)
    assert (seen.payload, seen.receipt, seen.receives) == (b"look", "", 0)
    [taken] = queue.pop()
    assert taken.id == seen.id and taken.receives == 1  # the peek delivered nothing
    user = client.queue(f"q-{uuid.uuid4().hex[:8]}")
    user.create(dlq=name)
    with pytest.raises(QueueInUse) as caught:
        queue.drop()
    assert user.name in str(caught.value)
    assert queue.drop(force=True) is True
