"""Helpers shared by the RESP tests: run a parser over chunked input and
report what it produced, whatever the implementation."""

from __future__ import annotations

import random
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from narad.resp import (
    HiredisRequestParser,
    ProtocolError,
    PurePythonRequestParser,
    QueryBufferLimit,
)

PARSERS: list[type[PurePythonRequestParser]] = [PurePythonRequestParser]
if HiredisRequestParser is not None:
    PARSERS.append(HiredisRequestParser)

parser_classes = pytest.mark.parametrize(
    "parser_class", [pytest.param(cls, id=cls.__name__) for cls in PARSERS]
)


@dataclass
class Outcome:
    """What a parser made of some input: the commands in order, then the
    protocol error message or the query-buffer failure, if any."""

    commands: list[list[bytes]] = field(default_factory=list)
    error: str | None = None
    buffer_limit: bool = False
    held_bytes: int = 0


def run(
    parser_class: type[PurePythonRequestParser], chunks: Iterable[bytes], **limits: Any
) -> Outcome:
    """Feed `chunks` one by one, draining commands() after each, as a server does
    (which first offers each read to feed_whole)."""
    parser = parser_class(**limits)
    outcome = Outcome()
    try:
        for chunk in chunks:
            whole = parser.feed_whole(chunk)
            if whole is not None:
                outcome.commands.extend(whole)
                continue
            parser.feed(chunk)
            while batch := parser.commands():
                outcome.commands.extend(batch)
    except ProtocolError as exc:
        outcome.error = exc.message
        return outcome
    except QueryBufferLimit:
        outcome.buffer_limit = True
        return outcome
    outcome.held_bytes = parser.held_bytes
    return outcome


def splits(data: bytes) -> Iterator[list[bytes]]:
    """`data` whole, one byte at a time, cut in two at every position, and cut
    at a few random places."""
    yield [data]
    yield [data[i : i + 1] for i in range(len(data))]
    for cut in range(1, len(data)):
        yield [data[:cut], data[cut:]]
    rng = random.Random(len(data))
    for _ in range(5):
        cuts = sorted(rng.sample(range(len(data) + 1), min(len(data) + 1, 6)))
        yield [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True)]


def run_every_split(
    parser_class: type[PurePythonRequestParser], data: bytes, **limits: Any
) -> Outcome:
    """The outcome of `data`, after checking that every way of splitting it
    gives the same one."""
    whole = run(parser_class, [data], **limits)
    for chunks in splits(data):
        assert run(parser_class, chunks, **limits) == whole, chunks
    return whole
