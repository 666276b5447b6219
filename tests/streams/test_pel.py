"""The pending entries list against a sorted dict: the same contents and order
after any mix of adds, re-adds, removals and range walks."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from sortedcontainers import SortedDict  # type: ignore[import-untyped, unused-ignore]

from narad.streams.pel import Consumer, Pel, PendingEntry

ops_st = st.lists(
    st.tuples(st.sampled_from(["add", "add", "pop", "del", "range"]), st.integers(0, 300)),
    max_size=400,
)


@settings(max_examples=300, deadline=None)
@given(ops=ops_st, ascending=st.booleans())
def test_pel_behaves_as_a_sorted_dict(ops: list[tuple[str, int]], ascending: bool) -> None:
    owner = Consumer(b"c", 0)
    pel, model = Pel(), SortedDict()
    for step, (op, key) in enumerate(ops):
        key = step if ascending and op == "add" else key
        if op == "add":
            entry = PendingEntry(owner, step, 1)
            pel[key] = entry
            model[key] = entry
        elif op == "pop":
            assert pel.pop(key, None) is model.pop(key, None)
        elif op == "del":
            if key in model:
                del pel[key]
                del model[key]
        else:
            assert list(pel.irange(key, key + 50)) == list(model.irange(key, key + 50))
            assert list(pel.irange(minimum=key)) == list(model.irange(minimum=key))
        assert len(pel) == len(model)
        assert (key in pel) == (key in model)
        assert pel.get(key) is model.get(key)
    assert pel.keys() == list(model.keys())
    assert pel.values() == list(model.values())
    assert pel.items() == list(model.items())
    assert list(pel) == list(model)
    if model:
        assert pel.first() == model.peekitem(0)[0]
        assert pel.last() == model.peekitem(-1)[0]
