"""CPU per command of one queue cycle, in process, without sockets or fsyncs.

    python bench/queue_cycle.py [--cycles 20000] [--pushes 3]
    NARAD_PURE=1 python bench/queue_cycle.py     # the same on pure Python

A server's store opens in a temporary folder (`fsync no`); one client runs, through
`Dispatcher.execute` as a connection's commands do: `--pushes` Q.PUSH of 100 bytes,
Q.POP COUNT 10 BLOCK 100 (which delivers them), Q.ACK of their receipts, the end of
the loop iteration (`CommitBarrier.end_of_iteration`: the commit's writes, the
replies' hand-off), then a Q.POP BLOCK on the empty queue (it waits) and its
release. Thread CPU time per call (user and kernel: the commit's writes are in
`flush`), minimum over 3 runs. This
isolates the interpreter's share of the queue path from the kernel's.
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

STEPS = ("push", "pop", "ack", "flush", "pop that waits", "release")


async def cycles(count: int, pushes: int) -> dict[str, float]:
    """Microseconds of thread CPU per call of each step."""
    async with one_client() as (server, client):
        execute = server.dispatch.execute
        execute(client, [b"Q.CREATE", b"q"])
        execute(client, [b"HELLO", b"3"])
        server.node.end_of_iteration()
        client.out.clear()
        replies = hiredis.Reader()
        clock = time.thread_time_ns
        spent = dict.fromkeys(STEPS, 0)
        payload = b"p" * 100
        for _ in range(count):
            t0 = clock()
            for _ in range(pushes):
                execute(client, [b"Q.PUSH", b"q", payload])
            t1 = clock()
            execute(client, [b"Q.POP", b"q", b"COUNT", b"10", b"BLOCK", b"100"])
            t2 = clock()
            replies.feed(bytes(client.out))  # the pushes' IDs, then the messages
            client.out.clear()
            while (reply := replies.gets()) is not False:
                messages = reply
            t3 = clock()
            execute(client, [b"Q.ACK", b"q", *[m[b"receipt"] for m in messages]])
            t4 = clock()
            server.node.end_of_iteration()
            client.out.clear()
            t5 = clock()
            execute(client, [b"Q.POP", b"q", b"COUNT", b"10", b"BLOCK", b"100"])
            t6 = clock()
            client.unblock()
            t7 = clock()
            for step, took in zip(
                STEPS, (t1 - t0, t2 - t1, t4 - t3, t5 - t4, t6 - t5, t7 - t6), strict=True
            ):
                spent[step] += took
    calls = {"push": count * pushes}
    return {step: spent[step] / calls.get(step, count) / 1000 for step in STEPS}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cycles", type=int, default=20_000)
    parser.add_argument("--pushes", type=int, default=3)
    args = parser.parse_args()
    import narad.queues.service

    report(
        lambda: asyncio.run(cycles(args.cycles, args.pushes)),
        STEPS,
        {"push": args.pushes},
        f"queue modules: {built(narad.queues.service)}, {args.cycles:,} cycles",
    )


if __name__ == "__main__":
    main()
