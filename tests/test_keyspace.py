"""The keyspace's metadata: each op it logs is applied live by the same MetaState.apply
that replays the metadata log at start, so the live state is the replayed one."""

from __future__ import annotations

from pathlib import Path

from narad.keyspace import Keyspace
from narad.metalog import DATABASES_ANY, MetaState
from narad.schema.keyspace import StreamSchemas
from narad.streams.stream import log_records
from tests.journaled import crash, open_store


def replayed(store: Keyspace) -> MetaState:
    assert store.meta is not None
    store.meta.write()
    state = MetaState(StreamSchemas(), DATABASES_ANY)
    state.replay(log_records(store.meta))
    return state


def test_live_metadata_is_what_replay_makes(tmp_path: Path) -> None:
    store = open_store(tmp_path, ("databases", "4"))
    for key in (b"a", b"b", b"c", b"d"):
        store.create_stream(0, key)
    store.create_stream(1, b"x")
    store.rename(0, b"a", b"b")  # over an existing key: b's stream is deleted
    store.delete(0, b"c")
    store.swapdb(0, 1)
    store.journal.commit()
    live = store.meta_state
    again = replayed(store)
    assert live.names == again.names
    assert live.next_uid == again.next_uid == 6
    assert {uid: (s.db, s.key) for uid, s in store.streams.items()} == live.names
    assert live.names == {1: (1, b"b"), 4: (1, b"d"), 5: (0, b"x")}
    crash(store)
    store = open_store(tmp_path, ("databases", "4"))
    assert sorted((db, key) for db in range(4) for key in store.dbs[db]) == [
        (0, b"x"), (1, b"b"), (1, b"d")]
    assert store.create_stream(0, b"new").uid == 6
    store.close()
