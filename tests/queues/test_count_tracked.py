"""Q.STATS's count of tracked messages: the pure function and its compiled twin
(narad/_speedups/_queues.pyx) give the same counts."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from narad._speedups import load
from narad.queues.queue import DELAYED, IN_FLIGHT, VISIBLE, pack, pure_count_tracked

TWIN = load("_queues")
OFFSET = st.integers(0, 60)
STATE = st.sampled_from([VISIBLE, IN_FLIGHT, DELAYED])
# Packed values as the queue holds them: past 64 bits once first_ms is set.
VALUE = st.builds(
    lambda state, receives, ms: pack(state, receives, 7, ms, ms),
    STATE,
    st.integers(0, 2**20 - 1),
    st.integers(0, 2**44 - 1),
)


def test_counts_by_state_within_the_bounds() -> None:
    tracked = {
        3: pack(VISIBLE, 1, 1, 0, 0),  # below start
        5: pack(IN_FLIGHT, 1, 1, 9, 9),
        6: pack(DELAYED, 0, 0, 9, 0),
        7: pack(VISIBLE, 2, 2, 0, 1),  # deleted
        9: pack(IN_FLIGHT, 1, 3, 9, 9),
        12: pack(VISIBLE, 1, 1, 0, 0),  # at the end: not yet in the log
    }
    assert pure_count_tracked(tracked, 4, 12, {7}, 6) == (0, 2, 1, 2)


@given(st.dictionaries(OFFSET, VALUE, max_size=30), OFFSET, OFFSET, st.sets(OFFSET), OFFSET)
def test_twin_agrees(tracked, start, end, deleted, cursor) -> None:  # type: ignore[no-untyped-def]
    expected = pure_count_tracked(tracked, start, end, deleted, cursor)
    assert sum(expected[:3]) == sum(
        1 for o in tracked if start <= o < end and o not in deleted
    )
    if TWIN is not None:
        assert TWIN.count_tracked(tracked, start, end, deleted, cursor) == expected
