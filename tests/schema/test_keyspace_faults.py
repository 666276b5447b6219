"""narad/schema/keyspace.py: replayed schema ops that cannot be applied fault their
stream instead of raising; a faulted stream skips its later ops until a reset, refuses
produce with the fault's error, and a repaired snapshot keeps its usable versions."""

from __future__ import annotations

import json

import pytest

from narad.errors import CommandError
from narad.schema.keyspace import StreamSchemas, Unavailable, key
from narad.schema.registry import COMPAT, DROP, SET

GOOD = json.dumps({"type": "integer"})
GOOD_2 = json.dumps({"type": "integer", "title": "two"})
REFUSED_NOW = json.dumps({"type": "string", "pattern": "^(a)\\1$"})


def set_op(uid: int, number: int, text: str) -> list[object]:
    return [SET.encode(), key(uid), number, text, None, b"BACKWARD"]


def replay(schemas: StreamSchemas, ops: list[list[object]]) -> None:
    schemas.loading()
    for offset, op in enumerate(ops):
        schemas.apply_at(op, offset)
    schemas.loaded()


def test_a_failing_op_faults_its_stream_until_a_drop() -> None:
    schemas = StreamSchemas()
    replay(schemas, [
        set_op(1, 1, GOOD),
        set_op(2, 1, GOOD),
        set_op(1, 2, "{not json"),  # offset 2: cannot be applied
        set_op(1, 3, GOOD_2),  # skipped: stream 1's state is unknown past its fault
        [COMPAT.encode(), key(1), b"NONE"],  # skipped too
    ])
    fault = schemas.faults[1]
    assert (fault.offset, fault.uid) == (2, 1)
    assert fault.what.startswith("schema.set op: ")
    assert schemas.registry.versions(key(1)) == [1]
    assert schemas.registry.mode(key(1)).value == "BACKWARD"
    active = schemas.active[1]
    assert isinstance(active, Unavailable)
    with pytest.raises(CommandError, match="its metadata op at meta offset 2 cannot be applied"):
        active.check_payload(b"1")
    schemas.active[2].check_payload(b"1")  # the other stream is untouched

    schemas.apply_at([DROP.encode(), key(1)], 5)  # a drop resets the stream
    schemas.apply_at(set_op(1, 1, GOOD_2), 6)
    assert 1 not in schemas.faults
    assert schemas.registry.versions(key(1)) == [1]
    schemas.active[1].check_payload(b"1")


def test_an_unusable_latest_version_faults_and_the_repair_keeps_the_usable_ones() -> None:
    schemas = StreamSchemas()
    replay(schemas, [set_op(1, 1, GOOD), set_op(1, 2, REFUSED_NOW)])
    fault = schemas.faults[1]
    assert fault.offset == 1
    assert fault.what.startswith("schema version 2 cannot be used: ")
    assert "backreference" in fault.what
    with pytest.raises(CommandError, match="run narad check --repair"):
        schemas.active[1].check_fields([b"a", b"1"])

    repaired = StreamSchemas()
    replay(repaired, schemas.snapshot(repaired=True))
    assert repaired.faults == {}
    assert repaired.registry.versions(key(1)) == [1]
    repaired.active[1].check_payload(b"1")
    assert [op[2] for op in schemas.snapshot() if op[0] == SET] == [1, 2]  # as it was
