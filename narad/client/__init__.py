"""Narad's Python client, on redis-py (docs/clients.md).

    from narad.client import connect, worker

    client = connect("narad+sentinel://s1:26379,s2:26379/mymaster")
    jobs = client.queue("jobs")
    client.producer("jobs").push(b'{"task": "resize"}')
    worker(jobs, handle, concurrency=8)

`narad.client.aio` has the same surface on redis.asyncio. The client imports nothing
of the server: it speaks to one over the network only.
"""

from narad.client.connect import Client, connect, parse_url
from narad.client.consumer import Consumer, ConsumerCounters, Job, worker
from narad.client.errors import (
    IncompatibleSchema,
    InvalidReceipt,
    NaradError,
    NoQueue,
    NotEnoughReplicas,
    NotReplicated,
    QueueInUse,
    QueueUnavailable,
    RetryTimeout,
    SchemaRejected,
    SettingsConflict,
    StaleReceipt,
)
from narad.client.messages import Message, QueueSettings, QueueStats, SchemaVersion
from narad.client.producer import Producer
from narad.client.push import PushStream
from narad.client.queue import Queue

__all__ = [
    "Client",
    "Consumer",
    "ConsumerCounters",
    "IncompatibleSchema",
    "InvalidReceipt",
    "Job",
    "Message",
    "NaradError",
    "NoQueue",
    "NotEnoughReplicas",
    "NotReplicated",
    "Producer",
    "PushStream",
    "Queue",
    "QueueInUse",
    "QueueSettings",
    "QueueStats",
    "QueueUnavailable",
    "RetryTimeout",
    "SchemaRejected",
    "SchemaVersion",
    "SettingsConflict",
    "StaleReceipt",
    "connect",
    "parse_url",
    "worker",
]
