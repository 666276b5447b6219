"""The sentinel's links: one task per data node and one per other sentinel, each a
loop of requests on its own link, never more than one in flight.

- A data node gets PING every ping period (a tenth of `down-after-milliseconds`, at
  most a second: a node is marked down within a period of the limit), INFO every
  INFO_S (every ping period while its group is failing over or its leader is down),
  and every HELLO_S a CLIENT LIST, whose `sentinel:<id>:<port>:<ip>` client names are
  the other sentinels watching it (each sentinel names its links so), and from the
  leader's INFO the replicas.
- Another sentinel gets PING as a data node does, Redis Sentinel's hello message
  every HELLO_S (PUBLISH __sentinel__:hello: this sentinel's epoch and the leader it
  knows, with that leader's config epoch), and, while this sentinel sees the leader
  down, SENTINEL IS-MASTER-DOWN-BY-ADDR every ASK_S.
"""

from __future__ import annotations

import contextlib
import time

import anyio

from narad.sentinel.link import LinkDown, Refused
from narad.sentinel.sentinel import HELLO_CHANNEL, Sentinel
from narad.sentinel.state import Group, Node, Peer

INFO_S = 1.0
HELLO_S = 1.0
ASK_S = 0.05
# Replies to PING that say the node is alive though not serving (Redis's list).
VALID_ERRORS = (b"LOADING", b"MASTERDOWN")


def ping_period(group: Group) -> float:
    return min(1.0, max(0.02, group.down_after_s / 10))


def _busy(group: Group) -> bool:
    leader = group.leader
    return group.failover is not None or leader is None or bool(leader.sdown_since_s)


async def run(sentinel: Sentinel, group: Group, item: Node | Peer) -> None:
    """The loop on the link to `item`, a data node or another sentinel, until cancelled
    (the sentinel runs it as a task: narad/sentinel/sentinel.py's Watch)."""
    if isinstance(item, Node):
        await node(sentinel, group, item)
    else:
        await peer(sentinel, group, item)


async def node(sentinel: Sentinel, group: Group, node: Node) -> None:
    next_hello = 0.0
    while True:
        await _ping(node, group)
        now = time.monotonic()
        info_every = ping_period(group) if _busy(group) else INFO_S
        if node.link.connected and now - node.info_s >= info_every:
            with contextlib.suppress(LinkDown, Refused):
                take_info(sentinel, group, node, await node.link.call(
                    "INFO", timeout_s=group.down_after_s))
        if node.link.connected and now >= next_hello:
            with contextlib.suppress(LinkDown, Refused):
                await _find_peers(sentinel, group, node)
            next_hello = now + HELLO_S
        await anyio.sleep(ping_period(group))


async def _ping(item: Node | Peer, group: Group) -> None:
    now = time.monotonic()
    if not item.ping_sent_s:
        item.ping_sent_s = now
    try:
        reply = await item.link.call("PING", timeout_s=group.down_after_s)
    except LinkDown:
        return
    except Refused as exc:
        reply = str(exc).encode()
    now = time.monotonic()
    if isinstance(item, Node):
        item.last_reply_s = now
    if reply == b"PONG" or (isinstance(reply, bytes) and reply.startswith(VALID_ERRORS)):
        item.last_ok_s = now
        item.ping_sent_s = 0.0


def parse_info(reply: object) -> dict[str, str]:
    """The fields of an INFO reply."""
    info: dict[str, str] = {}
    if isinstance(reply, bytes):
        for line in reply.decode("utf-8", "replace").splitlines():
            key, sep, value = line.partition(":")
            if sep and not line.startswith("#"):
                info[key] = value
    return info


def take_info(sentinel: Sentinel, group: Group, node: Node, reply: object) -> None:
    """What a data node's INFO says: its role, position and epochs; from the leader,
    its replicas."""
    if not isinstance(reply, bytes):
        return
    info = parse_info(reply)
    now = time.monotonic()
    role = info.get("role", "")
    if role != node.role:
        node.role_s = now
    node.info, node.info_text, node.info_s, node.role = info, reply, now, role
    if node is group.leader and role == "master":
        group.history = info.get("master_replid", group.history)
        for key, value in info.items():
            if key.startswith("slave") and key[5:].isdigit():
                fields = dict(part.partition("=")[::2] for part in value.split(","))
                if fields.get("ip") and fields.get("port", "").isdigit():
                    sentinel.add_node(group, fields["ip"], int(fields["port"]))


async def _find_peers(sentinel: Sentinel, group: Group, node: Node) -> None:
    """Learn the other sentinels that watch `node` from its clients' names."""
    link = node.link
    name = sentinel.hello_name(link.local_ip)
    if link.name != name:
        await link.rename(name, timeout_s=group.down_after_s)
    listing = await link.call("CLIENT", "LIST", timeout_s=group.down_after_s)
    if not isinstance(listing, bytes):
        return
    # With `auth-user` set, sentinels log in to the nodes as that user: a connection
    # of another user naming itself so is not one.
    user = group.config.auth_user
    for line in listing.decode("utf-8", "replace").splitlines():
        parts = line.split(" ")
        if user and f"user={user}" not in parts:
            continue
        for part in parts:
            if part.startswith("name=sentinel:"):
                words = part[5:].split(":", 3)
                if len(words) == 4 and words[2].isdigit() and words[3]:
                    sentinel.claim_peer(group, words[3], int(words[2]), words[1])


async def peer(sentinel: Sentinel, group: Group, peer: Peer) -> None:
    next_hello = 0.0
    told_epoch = -1  # the config epoch the last hello carried
    while True:
        await _ping(peer, group)
        now = time.monotonic()
        leader = group.leader
        try:
            if peer.link.connected and leader is not None and leader.sdown_since_s:
                config = group.config
                reply = await peer.link.call(
                    "SENTINEL", "IS-MASTER-DOWN-BY-ADDR", config.host, config.port,
                    sentinel.config.current_epoch, "*", timeout_s=group.down_after_s,
                )
                if isinstance(reply, list) and len(reply) == 3:
                    peer.master_down_s = time.monotonic() if reply[0] == 1 else 0.0
            else:
                peer.master_down_s = 0.0
            # At once when the leader changed, so that the others follow quickly.
            switched = group.config.config_epoch != told_epoch
            if peer.link.connected and (now >= next_hello or switched):
                hello = sentinel.hello(group, peer.link.local_ip)
                await peer.link.call(
                    "PUBLISH", HELLO_CHANNEL, hello, timeout_s=group.down_after_s
                )
                next_hello = now + HELLO_S
                told_epoch = group.config.config_epoch
        except (LinkDown, Refused):
            pass
        down = leader is not None and leader.sdown_since_s
        await anyio.sleep(ASK_S if down else ping_period(group))
