"""A worker process for the SIGTERM test: `python -m tests.client.worker_proc URL QUEUE`.

Its handler records each job's start and end in the stream `<QUEUE>:log` and takes
0.5 s; on SIGTERM `worker` drains, and the process prints its counters as JSON."""

from __future__ import annotations

import json
import sys
import time

import redis

from narad.client import Job, connect, worker


def main() -> None:
    url, name = sys.argv[1], sys.argv[2]
    client = connect(url)
    log = client.redis

    def handle(job: Job) -> None:
        log.xadd(f"{name}:log", {"start": job.id})
        time.sleep(0.5)
        log.xadd(f"{name}:log", {"end": job.id})

    consumer = worker(client.queue(name), handle, concurrency=2, batch=2)
    print(json.dumps(consumer.snapshot()), flush=True)


if __name__ == "__main__":
    try:
        main()
    except redis.RedisError as exc:
        print(f"failed: {exc}", file=sys.stderr)
        sys.exit(1)
