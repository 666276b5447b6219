"""A failover, run by the sentinel elected for its epoch (or asked by SENTINEL
FAILOVER): promote the data node that holds every committed write, and point the
others at it. The steps, with Redis Sentinel's event names (docs/failover.md):

1. Election (`+try-failover`, `+elected-leader`): a new epoch, this sentinel's vote,
   and the votes of `quorum` and of a majority of all known sentinels, asked at
   once. SENTINEL FAILOVER asks for none, as in Redis; the data nodes' promises
   below keep two failovers of one epoch from both promoting.
2. Fencing (`+failover-state-select-slave`): FENCE <epoch> to every data node at
   once. A node that answers has promised, durably, to take no commit of a leader
   below the epoch, and says what its journal holds (epoch, position). With answers
   from a majority of the data nodes, every committed write is held by one of them
   (a commit is on the leader and `min-replicas-to-ack` replicas, a majority when
   that setting is at least floor(N/2)); the node with the highest (epoch, position)
   among them holds them all. Without a majority nothing is promoted (`-failover-
   abort-no-majority`): unavailable rather than losing a committed write. A node
   copying its logs, or of another history, does not count. For SENTINEL FAILOVER
   with the leader reachable, the leader is drained first (FENCE ... DRAIN: writes
   refused), and the chosen replica is waited for until it holds the leader's last
   commit, so that nothing at all is cut.
3. Promotion (`+selected-slave`, `+promoted-slave`): PROMOTE <epoch> makes that node
   the leader of exactly this epoch; the group's leader switches to it at once
   (`+switch-master`, which clients follow).
4. The other nodes are told REPLICAOF it, `parallel-syncs` at a time
   (`+slave-reconf-sent`, `+slave-reconf-done`); an old leader that comes back later
   is told so when it does (narad/sentinel/sentinel.py). `+failover-end`.

A step that fails or outlasts `failover-timeout` ends the failover
(`-failover-abort-...`); a later one starts in a new epoch.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from dataclasses import dataclass

import anyio
import anyio.abc

from narad.sentinel.link import LinkDown, Refused
from narad.sentinel.sentinel import Sentinel
from narad.sentinel.state import Failover, Group, Node, Peer
from narad.sentinel.watch import parse_info

logger = logging.getLogger("narad.sentinel")

ELECTION_TIMEOUT_S = 1.0
FENCE_TIMEOUT_S = 1.0
# Once a majority of the data nodes answered FENCE, the others get this much longer.
STRAGGLERS_S = 0.1
POLL_S = 0.01
# The replicas' reconfiguration ends this long before `failover-timeout` at the latest
# (the rest is left to the periodic check that points stray nodes at the leader).
RECONF_MARGIN_S = 0.1


class Abort(Exception):
    """The failover stops: the event's kind (after "-failover-abort-") and why."""


@dataclass
class Answer:
    node: Node
    epoch: int
    position: int
    history: str
    copying: bool

    @property
    def key(self) -> tuple[int, int]:
        return (self.epoch, self.position)


def start(sentinel: Sentinel, group: Group, forced: bool) -> None:
    """Begin a failover of `group` in a new epoch, as a task of the sentinel."""
    epoch = sentinel.new_epoch(group)
    group.failover = Failover(epoch, forced)
    failover = group.failover
    sentinel.spawn(lambda: _run(sentinel, group, failover))


async def _run(sentinel: Sentinel, group: Group, failover: Failover) -> None:
    outcome = "abort-error"  # as its event names it, without the sign (/metrics)
    try:
        with anyio.fail_after(group.failover_timeout_s):
            outcome = await _steps(sentinel, group, failover)
    except Abort as exc:
        await _undrain(sentinel, group, failover)
        kind, _, why = str(exc).partition(" ")
        outcome = f"abort-{kind}"
        sentinel.event(f"-failover-abort-{kind}", sentinel.describe(group))
        if why:
            logger.warning("event=failover_aborted group=%s reason=%r", group.name, why)
        if kind in ("no-majority", "no-good-slave"):
            group.stuck = why
    except TimeoutError:
        await _undrain(sentinel, group, failover)
        outcome = "abort-timeout"
        sentinel.event("-failover-abort-timeout", sentinel.describe(group))
    except Exception:
        logger.exception("event=failover_failed group=%s", group.name)
        sentinel.event("-failover-abort-error", sentinel.describe(group))
    finally:
        group.failovers[outcome] = group.failovers.get(outcome, 0) + 1
        group.last_failover_end = time.time()
        group.failover = None
        for node in group.nodes.values():
            node.flags.clear()


async def _steps(sentinel: Sentinel, group: Group, failover: Failover) -> str:
    """The failover, step by step; how it ended: `end` or `end-for-timeout`."""
    epoch = failover.epoch
    if not failover.forced:
        await _elect(sentinel, group, epoch)
        sentinel.event("+elected-leader", sentinel.describe(group))
        _simulated_crash(sentinel, "crash-after-election")
    failover.state = "select_slave"
    sentinel.event("+failover-state-select-slave", sentinel.describe(group))
    answers = await _fence(sentinel, group, failover)
    chosen = _choose(group, answers)
    failover.promoted = chosen.name
    sentinel.event("+selected-slave", sentinel.describe(group, chosen))
    failover.state = "send_slaveof_noone"
    sentinel.event("+failover-state-send-slaveof-noone", sentinel.describe(group, chosen))
    failover.promote_sent = True
    try:
        await chosen.link.call("PROMOTE", epoch, timeout_s=FENCE_TIMEOUT_S)
    except (LinkDown, Refused) as exc:
        raise Abort(f"slave-timeout PROMOTE of {chosen.name} failed: {exc}") from None
    chosen.flags.add("promoted")
    sentinel.event("+promoted-slave", sentinel.describe(group, chosen))
    group.stuck = ""
    _simulated_crash(sentinel, "crash-after-promotion")
    failover.state = "reconf_slaves"
    sentinel.event("+failover-state-reconf-slaves", sentinel.describe(group))
    sentinel.switch_leader(group, chosen.host, chosen.port, epoch)
    left = failover.started_s + group.failover_timeout_s - time.monotonic()
    with anyio.move_on_after(max(0.0, left - RECONF_MARGIN_S)) as scope:
        await _reconfigure(sentinel, group, chosen)
    kind = "+failover-end-for-timeout" if scope.cancelled_caught else "+failover-end"
    sentinel.event(kind, sentinel.describe(group))
    return kind.removeprefix("+failover-")


async def _undrain(sentinel: Sentinel, group: Group, failover: Failover) -> None:
    """A switchover that ends before any PROMOTE was sent gives the drained leader back
    its writes: it leads on, in the epoch it promised (no other node can lead in it).
    Once a PROMOTE was sent, its outcome may be unknown: the drained leader then
    refuses writes (INFO narad_fenced) until a later failover."""
    drained = failover.drained
    if drained is None or failover.promote_sent:
        return  # a PROMOTE may have made another node the leader of this epoch
    with contextlib.suppress(LinkDown, Refused):
        await drained.link.call("PROMOTE", failover.epoch, timeout_s=FENCE_TIMEOUT_S)
        sentinel.switch_leader(group, drained.host, drained.port, failover.epoch)


def _simulated_crash(sentinel: Sentinel, when: str) -> None:
    if when in sentinel.simulated_failures:
        logger.warning("event=simulated_crash when=%s", when)
        os._exit(99)


async def _elect(sentinel: Sentinel, group: Group, epoch: int) -> None:
    peers = list(group.peers.values())
    needed = max(group.config.quorum, (len(peers) + 1) // 2 + 1)
    votes = 1  # this sentinel's own
    config = group.config

    async def ask(peer: Peer, tasks: anyio.abc.TaskGroup) -> None:
        nonlocal votes
        try:
            reply = await peer.link.call(
                "SENTINEL", "IS-MASTER-DOWN-BY-ADDR", config.host, config.port, epoch,
                sentinel.my_id, timeout_s=ELECTION_TIMEOUT_S,
            )
        except (LinkDown, Refused):
            return
        if isinstance(reply, list) and len(reply) == 3:
            leader, leader_epoch = reply[1], reply[2]
            peer.voted_leader = leader.decode() if isinstance(leader, bytes) else ""
            peer.voted_epoch = int(leader_epoch)
            if peer.voted_leader == sentinel.my_id and peer.voted_epoch == epoch:
                votes += 1
                if votes >= needed:
                    tasks.cancel_scope.cancel()

    if votes < needed:
        async with anyio.create_task_group() as tasks:
            for peer in peers:
                tasks.start_soon(ask, peer, tasks)
    if votes < needed:
        raise Abort(f"not-elected {votes} votes of the {needed} needed in epoch {epoch}")


async def _fence(sentinel: Sentinel, group: Group, failover: Failover) -> list[Answer]:
    """FENCE every data node; the answers, once a majority came (and the rest had
    STRAGGLERS_S more), or Abort."""
    epoch = failover.epoch
    nodes = list(group.nodes.values())
    majority = len(nodes) // 2 + 1
    answers: list[Answer] = []
    old = group.leader
    if failover.forced and old is not None and not old.sdown_since_s:
        failover.drained = old
        answers.append(await _drain(group, old, epoch))
    majority_in, all_in = anyio.Event(), anyio.Event()
    stale: list[str] = []
    asked = [node for node in nodes if not answers or node is not answers[0].node]
    pending = len(asked)

    async def fence(node: Node) -> None:
        nonlocal pending
        try:
            reply = await node.link.call("FENCE", epoch, timeout_s=FENCE_TIMEOUT_S)
        except LinkDown:
            reply = None
        except Refused as exc:
            reply = None
            if str(exc).startswith("STALE"):
                stale.append(f"{node.name}: {exc}")
        answer = _answer(node, reply) if reply is not None else None
        if answer is not None:
            answers.append(answer)
            if _counted(group, answers) >= majority:
                majority_in.set()
        pending -= 1
        if not pending:
            all_in.set()
            majority_in.set()

    async with anyio.create_task_group() as tasks:
        for node in asked:
            tasks.start_soon(fence, node)
        with anyio.move_on_after(FENCE_TIMEOUT_S):
            await majority_in.wait()
        with anyio.move_on_after(STRAGGLERS_S):
            await all_in.wait()
        tasks.cancel_scope.cancel()
    if stale:
        raise Abort(f"stale-epoch {'; '.join(stale)}")
    counted = _counted(group, answers)
    if counted < majority:
        raise Abort(
            f"no-majority {counted} of {len(nodes)} data nodes answered in sync, "
            f"{majority} needed: nothing promoted, so that no committed write is lost"
        )
    return answers


async def _drain(group: Group, leader: Node, epoch: int) -> Answer:
    """SENTINEL FAILOVER with the leader up: it refuses writes from now on, and the
    replica that will be chosen is waited for until it holds its last commit."""
    try:
        reply = await leader.link.call("FENCE", epoch, "DRAIN", timeout_s=FENCE_TIMEOUT_S)
    except (LinkDown, Refused) as exc:
        raise Abort(f"drain-failed {leader.name}: {exc}") from None
    answer = _answer(leader, reply)
    if answer is None:
        raise Abort(f"drain-failed {leader.name} answered {reply!r:.100}")
    candidates = [n for n in group.replicas() if not n.sdown_since_s and n.priority]
    if not candidates:
        raise Abort("no-good-slave no live replica with a priority above 0")
    target = max(candidates, key=lambda n: (n.offset, -n.priority))
    while True:
        try:
            info = await target.link.call("INFO", "replication", timeout_s=FENCE_TIMEOUT_S)
        except (LinkDown, Refused) as exc:
            raise Abort(f"slave-timeout {target.name}: {exc}") from None
        offset = parse_info(info).get("slave_repl_offset", "-1")
        if offset.isdigit() and int(offset) >= answer.position:
            return answer
        await anyio.sleep(POLL_S)


def _answer(node: Node, reply: object) -> Answer | None:
    if isinstance(reply, list):
        fields = dict(zip(reply[::2], reply[1::2], strict=False))
    else:
        return None
    try:
        return Answer(
            node, int(fields[b"epoch"]), int(fields[b"position"]),
            fields[b"history"].decode(), bool(int(fields[b"copying"])),
        )
    except (KeyError, ValueError, AttributeError):
        return None


def _counted(group: Group, answers: list[Answer]) -> int:
    return sum(1 for a in answers if _eligible(group, a))


def _eligible(group: Group, answer: Answer) -> bool:
    """An answer that says what the node holds of this group's history."""
    return not answer.copying and (not group.history or answer.history == group.history)


def _choose(group: Group, answers: list[Answer]) -> Node:
    eligible = [a for a in answers if _eligible(group, a)]
    best = max(a.key for a in eligible)
    holders = [a.node for a in eligible if a.key == best and a.node.priority]
    if not holders:
        raise Abort(
            f"no-good-slave the nodes holding epoch {best[0]} position {best[1]} all have "
            "priority 0"
        )
    old = group.leader_address
    # Another node than the old leader if one holds as much; then lowest priority.
    return min(holders, key=lambda n: (n.name == old, n.priority, n.run_id))


async def _reconfigure(sentinel: Sentinel, group: Group, leader: Node) -> None:
    """REPLICAOF the new leader to every other data node, `parallel-syncs` at a
    time; each waited for (bounded) until it follows. A node that cannot be reached
    now is pointed at the leader when it comes back."""
    limiter = anyio.CapacityLimiter(max(1, group.config.parallel_syncs))

    async def repoint(node: Node) -> None:
        async with limiter:
            try:
                await node.link.call(
                    "REPLICAOF", leader.host, leader.port, timeout_s=FENCE_TIMEOUT_S
                )
            except (LinkDown, Refused):
                return
            node.flags.add("reconf_sent")
            sentinel.event("+slave-reconf-sent", sentinel.describe(group, node))
            while True:
                try:
                    info = parse_info(
                        await node.link.call("INFO", "replication", timeout_s=1.0)
                    )
                except (LinkDown, Refused):
                    return
                if info.get("master_link_status") == "up" and info.get("master_port") == str(
                    leader.port
                ):
                    node.flags.discard("reconf_sent")
                    node.flags.add("reconf_done")
                    sentinel.event("+slave-reconf-done", sentinel.describe(group, node))
                    return
                await anyio.sleep(POLL_S * 5)

    async with anyio.create_task_group() as tasks:
        for node in group.nodes.values():
            if node is not leader:
                tasks.start_soon(repoint, node)
