"""Sentinels are counted only once they answer as sentinels at their own address
(docs/failover.md, "Who can do what"). Plain clients on the leader that name
themselves `sentinel:<id>:<port>:<ip>`, and a forged hello published to the
sentinels, are neither counted, nor saved to sentinel.conf, nor believed; the real
sentinels still fail the leader over (issue 29: four such clients made failover miss
its majority, "1 votes of the 3 needed")."""

from __future__ import annotations

from pathlib import Path

import redis

from tests.sentinel.cluster import NAME, deployment
from tests.servers import free_port, wait_until

FAKE_ID = "{:040x}"


def test_claimed_sentinels_that_do_not_answer_as_such_count_for_nothing(tmp_path: Path) -> None:
    with deployment(tmp_path) as found:
        old = found.nodes[0]
        real = found.sentinels[0]
        nowhere = free_port()
        # Nothing listens there; a real sentinel with another id listens there; a
        # data node, which is no sentinel, listens there; nothing again.
        claims = [(1, nowhere), (2, real.port), (3, old.port), (4, free_port())]
        fakes = []
        for n, port in claims:
            fake = old.client()
            fake.client_setname(f"sentinel:{FAKE_ID.format(n)}:{port}:127.0.0.1")
            fakes.append(fake)
        # A hello in the name of a sentinel nobody knows, announcing a newer leader.
        forged = f"127.0.0.1,{nowhere},{FAKE_ID.format(5)},999,{NAME},127.0.0.1,1,999"
        for sentinel in found.sentinels:
            sentinel.client(protocol=2).publish("__sentinel__:hello", forged)

        def refused_all(log: str) -> bool:
            return all(FAKE_ID.format(n) in log for n in (1, 2, 3, 4, 5))

        wait_until(
            lambda: all(refused_all(s.log_path.read_text()) for s in found.sentinels),
            timeout=20,
        )
        for sentinel in found.sentinels:
            state = sentinel.master()
            assert state["num-other-sentinels"] == 2, state
            assert (state["ip"], state["port"]) == (old.host, old.port), state
            conf = sentinel.conf.read_text()
            assert not any(FAKE_ID.format(n) in conf for n in range(1, 6)), conf
            assert "event=sentinel_claim_refused" in sentinel.log_path.read_text()

        # The fakes stay connected: the real sentinels still agree and fail over.
        old.kill()
        replicas = {(node.host, node.port) for node in found.nodes[1:]}

        def failed_over() -> bool:
            try:
                return tuple(found.leader_address()) in replicas
            except redis.RedisError:  # no leader to name while it fails over
                return False

        wait_until(failed_over, timeout=30)
        for fake in fakes:
            fake.close()
