"""CPU per command of a consumer group's read cycle, in process, without sockets or
fsyncs.

    python bench/group_cycle.py [--cycles 2000] [--count 100]
    NARAD_PURE=1 python bench/group_cycle.py     # the same on pure Python

A server's store opens in a temporary folder (`fsync no`) holding `--cycles` x
`--count` entries of 100 bytes. One client runs, through `Dispatcher.execute` as a
connection's commands do: XREADGROUP COUNT `--count` of new entries (`>`), XACK of
their IDs, then the end of the loop iteration (`CommitBarrier.end_of_iteration`: the
commit's writes, the replies' hand-off). Thread CPU time per call, minimum over 3 runs: the work of
bench/server_vs_redis.py's consume figure without its sockets and clients.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

import hiredis

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.cycles import built, one_client, report  # noqa: E402

STEPS = ("xreadgroup", "xack", "flush")


async def cycles(count: int, per_read: int) -> dict[str, float]:
    """Microseconds of thread CPU per call of each step."""
    async with one_client() as (server, client):
        execute = server.dispatch.execute
        value = b"v" * 100
        for _ in range(count):
            for _ in range(per_read):
                execute(client, [b"XADD", b"s", b"*", b"f", value])
            server.node.end_of_iteration()
            client.out.clear()
        execute(client, [b"XGROUP", b"CREATE", b"s", b"g", b"0"])
        server.node.end_of_iteration()
        client.out.clear()
        replies = hiredis.Reader()
        clock = time.thread_time_ns
        spent = dict.fromkeys(STEPS, 0)
        read = [b"XREADGROUP", b"GROUP", b"g", b"c", b"COUNT", b"%d" % per_read, b"STREAMS"]
        for _ in range(count):
            t0 = clock()
            execute(client, [*read, b"s", b">"])
            t1 = clock()
            replies.feed(bytes(client.out))
            client.out.clear()
            ((_, entries),) = replies.gets()
            t2 = clock()
            execute(client, [b"XACK", b"s", b"g", *[entry[0] for entry in entries]])
            t3 = clock()
            server.node.end_of_iteration()
            client.out.clear()
            t4 = clock()
            for step, took in zip(STEPS, (t1 - t0, t3 - t2, t4 - t3), strict=True):
                spent[step] += took
    return {step: spent[step] / count / 1000 for step in STEPS}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cycles", type=int, default=2_000)
    parser.add_argument("--count", type=int, default=100)
    args = parser.parse_args()
    import narad.streams.groups

    report(
        lambda: asyncio.run(cycles(args.cycles, args.count)),
        STEPS,
        {},
        f"stream modules: {built(narad.streams.groups)}, {args.cycles:,} cycles",
    )


if __name__ == "__main__":
    main()
