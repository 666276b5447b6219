"""Child process of test_crash.py: appends forever with fsync always, printing the
highest durable offset after every group commit. Usage: crash_writer.py LOG_DIR SEED"""

from __future__ import annotations

import random
import sys

from narad.log.log import Log, LogConfig


def payload(offset: int) -> bytes:
    """The payload of record `offset`, so the parent can check it without a copy."""
    return b"%012d|" % offset * (1 + offset % 37)


def main() -> None:
    folder, seed = sys.argv[1], int(sys.argv[2])
    rng = random.Random(seed)
    log = Log.open(folder, LogConfig(segment_bytes=64 * 1024))
    while True:
        for _ in range(rng.randint(1, 50)):
            offset = log.next_offset
            log.append(payload(offset), offset + 1, 0)
        log.write()
        log.sync()
        sys.stdout.write(f"{log.durable_end - 1}\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
