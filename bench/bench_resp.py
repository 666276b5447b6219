"""RESP hot paths: request parsing (both parsers) and reply encoding.

python -m pytest bench/bench_resp.py --benchmark-only
Each parse round is 10,000 pipelined XADD-like commands, so commands/s is
10,000 / mean.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from narad.resp import (
    OK,
    HiredisRequestParser,
    PurePythonRequestParser,
    encode_into,
    encode_request,
)

COMMANDS = 10_000
XADDS = [
    [b"XADD", b"orders", b"*", b"customer", b"c-%d" % i, b"payload", b"x" * 64]
    for i in range(COMMANDS)
]
PIPELINE = b"".join(map(encode_request, XADDS))
READS = [PIPELINE[i : i + 65536] for i in range(0, len(PIPELINE), 65536)]
PARSERS = {"pure": PurePythonRequestParser, "hiredis": HiredisRequestParser}


def parse(parser_class: type[PurePythonRequestParser], reads: list[bytes]) -> int:
    parser = parser_class()
    count = 0
    for data in reads:
        parser.feed(data)
        count += len(parser.commands())
    return count


@pytest.mark.parametrize("impl", sorted(PARSERS))
@pytest.mark.parametrize("reads", ["one-buffer", "64KiB-reads"])
def test_parse_10k_xadd(benchmark, impl: str, reads: str) -> None:  # type: ignore[no-untyped-def]
    chunks = [PIPELINE] if reads == "one-buffer" else READS
    assert benchmark(parse, PARSERS[impl], chunks) == COMMANDS


@pytest.mark.parametrize("impl", sorted(PARSERS))
def test_parse_10k_single_command_reads(benchmark, impl: str) -> None:  # type: ignore[no-untyped-def]
    """One command per read, as from a client that waits for each reply."""
    one = encode_request([b"XADD", b"orders", b"*", b"customer", b"c-1"])
    assert benchmark(parse, PARSERS[impl], [one] * COMMANDS) == COMMANDS


ENTRY = [b"1700000000000-0", [b"customer", b"c-1", b"payload", b"x" * 64]]
REPLIES: dict[str, object] = {
    "ok": OK,
    "integer": 42,
    "bulk": b"1700000000000-0",
    "xrange-100": [ENTRY] * 100,
    "map": {b"visible": 10, b"in_flight": 2, b"pushed": 1000, b"first_id": b"1-0"},
}


def encode_many(value: object, protocol: int) -> bytearray:
    buf = bytearray()
    for _ in range(1000):
        encode_into(buf, value, protocol)  # type: ignore[arg-type]
    return buf


@pytest.mark.parametrize("protocol", [2, 3])
@pytest.mark.parametrize("reply", sorted(REPLIES))
def test_encode_1000_replies(benchmark, reply: str, protocol: int) -> None:  # type: ignore[no-untyped-def]
    run: Callable[[object, int], bytearray] = encode_many
    assert benchmark(run, REPLIES[reply], protocol)
