"""Soundness of narad/schema/compat.py by property tests: whenever the checker calls a
pair compatible, documents valid under the narrower schema are valid under the wider
one. Documents come from hypothesis-jsonschema (`from_schema`) and from a generic JSON
strategy filtered by the narrow schema; verdicts are jsonschema's."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from narad.schema import Mode
from narad.schema.compat import check
from narad.schema.validate import reference_validator
from tests.schema.strategies import evolutions, json_values, schemas

hypothesis_jsonschema = pytest.importorskip("hypothesis_jsonschema")

SETTINGS = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much,
                           HealthCheck.data_too_large],
)


def _documents(data: st.DataObject, schema: Any, count: int = 4) -> list[Any]:
    """Documents valid under `schema`: generated from it, plus random ones it accepts."""
    validator = reference_validator(schema)
    out = [data.draw(json_values()) for _ in range(count)]
    out = [doc for doc in out if validator.is_valid(doc)]
    try:
        strategy = hypothesis_jsonschema.from_schema(schema)
    except Exception:  # schemas hypothesis-jsonschema cannot handle: random ones only
        return out
    for _ in range(count):
        try:
            doc = data.draw(strategy)
        except Exception:
            break
        if validator.is_valid(doc):  # hypothesis-jsonschema errs on unsatisfiable schemas
            out.append(doc)
    return out


def _assert_included(data: st.DataObject, wide: Any, narrow: Any) -> None:
    accepts = reference_validator(wide)
    for doc in _documents(data, narrow):
        assert accepts.is_valid(doc), f"{doc!r} passes {narrow} but not {wide}"


@SETTINGS
@given(pair=evolutions(), data=st.data())
def test_backward_compatible_evolutions_accept_old_documents(pair: tuple[Any, Any],
                                                             data: st.DataObject) -> None:
    old, new = pair
    assume(not check([old], new, Mode.BACKWARD))
    _assert_included(data, new, old)


@SETTINGS
@given(pair=evolutions(), data=st.data())
def test_forward_compatible_evolutions_keep_new_documents_valid(pair: tuple[Any, Any],
                                                                data: st.DataObject) -> None:
    old, new = pair
    assume(not check([old], new, Mode.FORWARD))
    _assert_included(data, old, new)


@settings(SETTINGS, max_examples=100)
@given(old=schemas(), new=schemas(), data=st.data())
def test_unrelated_pairs_called_compatible_are_compatible(old: Any, new: Any,
                                                          data: st.DataObject) -> None:
    assume(not check([old], new, Mode.BACKWARD))
    _assert_included(data, new, old)


@settings(SETTINGS, max_examples=100)
@given(schema=schemas(), data=st.data())
def test_a_schema_is_compatible_with_itself(schema: Any, data: st.DataObject) -> None:
    assert check([schema], schema, Mode.FULL) == []


@settings(SETTINGS, max_examples=300)
@given(pair=evolutions())
def test_checker_answers_every_pair(pair: tuple[Any, Any]) -> None:
    """It never crashes, and every reason has a path and a message."""
    old, new = pair
    for mode in Mode:
        for reason in check([old], new, mode):
            assert reason.path.startswith("$") and reason.message


@settings(SETTINGS, max_examples=60)
@given(data=st.data())
def test_corpus_pairs_called_compatible_are_compatible(data: st.DataObject) -> None:
    """The corpus covers what the random schemas do not ($ref, prefixItems, draft-07,
    patternProperties, oneOf unions): check its compatible directions the same way."""
    from tests.schema.test_compat import CASES

    case = data.draw(st.sampled_from(CASES))
    if not check([case.old], case.new, Mode.BACKWARD):
        _assert_included(data, case.new, case.old)
    if not check([case.old], case.new, Mode.FORWARD):
        _assert_included(data, case.old, case.new)
