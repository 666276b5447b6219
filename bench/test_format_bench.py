"""Hot record-framing functions, pure Python against the compiled twin.

python -m pytest bench/test_format_bench.py --benchmark-only
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from narad._speedups import load
from narad.log import format

TWIN = load("_format")
PAYLOAD = format.pure_encode_fields([b"field", b"x" * 100])
IMPLS = {"pure": (format.pure_encode_into, format.pure_scan)}
if TWIN is not None:
    IMPLS["cython"] = (TWIN.encode_into, TWIN.scan)


def encode_batch(encode_into: Callable[..., None]) -> bytearray:
    buf = bytearray()
    for i in range(1000):
        encode_into(buf, i, 1_700_000_000_000, 0, format.FLAG_ENTRY, 1_700_000_000_000, i, PAYLOAD)
    return buf


@pytest.mark.parametrize("impl", sorted(IMPLS))
def test_encode_1000_records(benchmark, impl: str) -> None:  # type: ignore[no-untyped-def]
    encode_into, _ = IMPLS[impl]
    buf = benchmark(encode_batch, encode_into)
    assert len(buf) == 1000 * (format.HEADER_BYTES + len(PAYLOAD))


@pytest.mark.parametrize("impl", sorted(IMPLS))
def test_scan_1000_records(benchmark, impl: str) -> None:  # type: ignore[no-untyped-def]
    _, scan = IMPLS[impl]
    data = bytes(encode_batch(format.pure_encode_into))
    records, end, status, _ = benchmark(scan, data, 0, 0, 1 << 30)
    assert len(records) == 1000 and end == len(data) and status == format.SCAN_OK
