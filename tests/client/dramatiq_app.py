"""The Dramatiq app of the Dramatiq tests and benchmark, on NaradBroker.

Environment and the `runs` stream as tests/client/celery_app.py; visibility 1 s."""

from __future__ import annotations

import os
import time

import dramatiq
import redis

from narad.dramatiq import NaradBroker

broker = NaradBroker(url=os.environ.get("NARAD_BROKER", "narad://127.0.0.1:6379"),
                     visibility_ms=int(float(os.environ.get("NARAD_VIS", "1")) * 1000))
dramatiq.set_broker(broker)
_record_url = os.environ.get("NARAD_RECORD")
_record = redis.Redis.from_url(_record_url) if _record_url else None


def _note(n: int, what: str) -> None:
    if _record is not None:
        _record.xadd("runs", {"n": n, "what": what, "group": os.getpgrp(),
                              "at": repr(time.time())})


@dramatiq.actor(max_retries=1, min_backoff=50, max_backoff=100)
def job(n: int, seconds: float = 0.0, fail: bool = False) -> None:
    _note(n, "start")
    if seconds:
        time.sleep(seconds)
    if fail:
        raise RuntimeError(f"task {n} fails")
    _note(n, "end")


@dramatiq.actor
def noop() -> None:
    """The benchmark's task: nothing."""
