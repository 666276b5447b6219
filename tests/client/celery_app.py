"""The Celery app of the Celery tests and benchmark, on the `narad://` broker.

`NARAD_BROKER` is the broker URL, `NARAD_RECORD` the URL of the server whose stream
`runs` gets one entry when a task starts and one when it ends (task, its number,
`start`/`end`, the worker's process group). Visibility is 1 s, so a task of 2.5 s
outlives it several times over and is kept only by the lease renewer."""

from __future__ import annotations

import os
import time

import redis
from celery import Celery

import narad.celery  # noqa: F401 - registers the narad:// transport with kombu

app = Celery("narad_test", broker=os.environ.get("NARAD_BROKER", "narad://127.0.0.1:6379"))
app.conf.update(
    task_acks_late=True,
    worker_prefetch_multiplier=2,
    broker_transport_options={"visibility_timeout": float(os.environ.get("NARAD_VIS", "1"))},
    broker_connection_retry_on_startup=True,
    worker_hijack_root_logger=False,
)
_record_url = os.environ.get("NARAD_RECORD")
_record = redis.Redis.from_url(_record_url) if _record_url else None


def _note(n: int, what: str) -> None:
    if _record is not None:
        _record.xadd("runs", {"n": n, "what": what, "group": os.getpgrp(),
                              "at": repr(time.time())})


@app.task(name="job")
def job(n: int, seconds: float = 0.0) -> None:
    _note(n, "start")
    if seconds:
        time.sleep(seconds)
    _note(n, "end")


@app.task(name="flaky", bind=True, max_retries=3)
def flaky(self, n: int) -> None:  # type: ignore[no-untyped-def]
    """Fails its first run and asks to be retried in 1 s (a delayed push)."""
    _note(n, "start")
    if self.request.retries == 0:
        raise self.retry(countdown=1.0)
    _note(n, "end")


@app.task(name="noop")
def noop() -> None:
    """The benchmark's task: nothing."""
