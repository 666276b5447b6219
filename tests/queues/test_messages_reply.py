"""Q.POP's reply framed directly from the records (messages_reply) is the frame of
the list of `message` maps, in RESP2 and RESP3, for any entry."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from narad.log import Record, encode_fields
from narad.queues.replies import message, messages_reply
from narad.resp import encode

U64 = st.integers(0, 2**64 - 1)
FIELD = st.binary(max_size=12)
# Entries as Q.PUSH writes them (a lone payload) and as fan-out, dead-lettering or
# XADD write them (other fields, payload anywhere or missing).
FIELDS = st.one_of(
    st.builds(lambda p: [b"payload", p], st.binary(max_size=40)),
    st.lists(st.tuples(FIELD, FIELD), max_size=4).map(lambda ps: [x for p in ps for x in p]),
    st.builds(
        lambda p, extra: [b"payload", p, *[x for pair in extra for x in pair]],
        st.binary(max_size=10),
        st.lists(st.tuples(FIELD, FIELD), min_size=1, max_size=3),
    ),
)
DELIVERED = st.builds(
    lambda offset, ms, seq, fields, receipt, receives: (
        Record(offset, ms, 0, 1, ms, seq, encode_fields(fields), 0),
        receipt,
        receives,
    ),
    st.integers(0, 2**40),
    U64,
    U64,
    FIELDS,
    st.binary(min_size=1, max_size=20),
    st.integers(1, 2**20 - 1),
)


@given(st.lists(DELIVERED, max_size=5), st.sampled_from([2, 3]))
def test_messages_reply_is_the_frame_of_the_maps(delivered, protocol) -> None:  # type: ignore[no-untyped-def]
    maps = [message(*d) for d in delivered]
    assert messages_reply(protocol, delivered).frame == encode(maps, protocol)
