"""A stream used on its own, without a store or a journal, for tests of its state
machines: each record noted is written and fsynced to its log at once, and each start
move made durable at once, so reopening the folder sees all of it."""

from __future__ import annotations

from pathlib import Path

from narad.log import Log, LogConfig
from narad.machines import stream_machines
from narad.streams.stream import Stream


class WriteThrough:
    """The committer (narad/streams/stream.py's Committer) of a stream on its own."""

    def note(self, log: Log) -> None:
        log.write()
        log.sync()

    def move_start(self, log: Log, offset: int) -> None:
        log.set_start(offset)
        log.apply_retention(start_only=True)


def open_stream(uid: int, folder: Path) -> Stream:
    stream = Stream(uid, folder, LogConfig(), LogConfig(), WriteThrough(), stream_machines())
    stream.load()
    return stream
