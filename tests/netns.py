"""Real network partitions between real processes on one machine, for tests.

`Network(n)` builds, in the root namespace, a bridge with an address, and n network
namespaces, each joined to the bridge by a veth pair and given an address of its own
in a private /24 picked for this network alone:

    root namespace (the test, its clients)   10.231.<k>.254 on bridge nrd<k>br
      |-- veth nrd<k>v0 <-> eth0 in narad-t<pid>-<k>-0   10.231.<k>.1
      |-- veth nrd<k>v1 <-> eth0 in narad-t<pid>-<k>-1   10.231.<k>.2
      ...

The root namespace reaches every node's address, and the nodes reach each other
through the bridge. Nothing is routed beyond that /24: the namespaces have no default
route, and the root only gains the route to the bridge's subnet.

Partitions drop packets and send nothing back, as a pulled cable does: a connect times
out, and an open connection stalls until its own timeouts or keepalives give up; no RST
and no ICMP error is sent. They are made with tc, the one packet filter this machine
has (no iptables, no nft, and no tc drop action): every veth end carries an HTB root
qdisc whose unclassified traffic goes out untouched, and one class whose leaf is a
`blackhole` qdisc, which drops whatever it is given while telling the sender it was
sent. A cut is a u32 filter that sends the packets it matches to that class. Filters
act on a device's egress, so each cut filters both ends:

- `isolate(i)`: all IPv4 leaving node i (its eth0) and all IPv4 sent towards it (the
  bridge side of its veth, which carries the root's and the other nodes' packets).
- `cut(i, j)`: at node i's eth0, IPv4 to node j; at node j's eth0, IPv4 to node i.
- `heal()`: every filter removed; connections stalled by a cut carry on.

ARP is never filtered, so a cut never turns into "host unreachable" errors.

Names carry the owner's PID (namespaces by name, links by their alias), and the subnet
index k is chosen under a machine-wide lock among those no live network holds, so
parallel runs never clash. `cleanup_stale()` removes whatever a run that died left
behind; `Network` calls it before it builds, and removes all it built on exit, however
the test ends. Processes started in a namespace are stopped by their PIDs.

Tests that need the harness call `require()` first: without root, `ip` or `tc` it
skips the test, saying why.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

PREFIX = "narad-t"
SUBNET_BASE = "10.231"
BRIDGE_HOST = 254
MAX_NODES = 200  # node addresses are .1 to .200; .254 is the bridge
COMMAND_TIMEOUT_S = 10.0
LOCK_PATH = Path(tempfile.gettempdir()) / "narad-netns.lock"

# Node namespaces are <PREFIX><pid>-<k>-<i>; probes of unavailable() <PREFIX><pid>-probe.
_NETNS_RE = re.compile(rf"^{re.escape(PREFIX)}(\d+)-")
_LINK_RE = re.compile(r"^nrd(\d+)(?:br|v\d+)$")
_ALIAS_RE = re.compile(rf"^{re.escape(PREFIX)}(\d+)-(\d+)$")

# The HTB class whose leaf is the blackhole: packets a filter sends there are dropped.
DROP_CLASS = "1:2"


class Unavailable(RuntimeError):
    """Network namespaces cannot be used here; the message says why."""


def unavailable() -> str | None:
    """Why the harness cannot run here, or None when it can."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            return f"`{tool}` is not installed"
    probe = f"{PREFIX}{os.getpid()}-probe"
    made = subprocess.run(
        ["ip", "netns", "add", probe], capture_output=True, timeout=COMMAND_TIMEOUT_S
    )
    if made.returncode != 0:
        return f"`ip netns add` failed: {made.stderr.decode(errors='replace').strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True, timeout=COMMAND_TIMEOUT_S)
    return None


def require() -> None:
    """Skip the calling test when network namespaces are unavailable."""
    import pytest

    reason = unavailable()
    if reason is not None:
        pytest.skip(f"network namespaces unavailable: {reason}")


def run(argv: list[str], check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run one ip/tc command; on failure (when `check`) raise with its stderr."""
    done = subprocess.run(argv, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S)
    if check and done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed: {done.stderr.strip()}")
    return done


def _alive(pid: int) -> bool:
    """Whether `pid` runs; a zombie does not (its parent reaps it, not us)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def _namespaces() -> list[str]:
    out = run(["ip", "netns", "list"]).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def _links() -> list[dict[str, Any]]:
    """The root namespace's links, as `ip -j link show` gives them."""
    return list(json.loads(run(["ip", "-j", "link", "show"]).stdout or "[]"))


def _kill_pids_in(namespace: str) -> None:
    """SIGKILL every process left in `namespace`, by PID, and wait (bounded) for them
    to go, so that deleting the namespace frees its devices."""
    done = run(["ip", "netns", "pids", namespace], check=False)
    pids = [int(p) for p in done.stdout.split() if p.isdigit() and int(p) != os.getpid()]
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 5
    for pid in pids:
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.02)


def _delete_namespace(namespace: str) -> None:
    _kill_pids_in(namespace)
    run(["ip", "netns", "del", namespace], check=False)


def cleanup_stale() -> list[str]:
    """Remove the namespaces and links of networks whose owning process is gone (the
    PID in their name or alias no longer runs), killing any process left in them.
    Networks of live processes, including parallel runs, are left alone. Returns the
    names removed."""
    with _machine_lock():
        return _cleanup_stale_locked()


def _cleanup_stale_locked() -> list[str]:
    removed = []
    for name in _namespaces():
        match = _NETNS_RE.match(name)
        if match and not _alive(int(match.group(1))):
            _delete_namespace(name)
            removed.append(name)
    for link in _links():
        name = str(link.get("ifname", "")).split("@")[0]
        if not _LINK_RE.match(name):
            continue
        alias = _ALIAS_RE.match(str(link.get("ifalias", "")))
        if alias is None or not _alive(int(alias.group(1))):
            run(["ip", "link", "del", name], check=False)
            removed.append(name)
    return removed


@contextlib.contextmanager
def _machine_lock() -> Iterator[None]:
    """Held while a network is built and while stale networks are removed, so that a
    cleanup never sees a network half made (a link not yet given its alias), and two
    networks never pick the same subnet. flock: held per open file, released if the
    holder dies."""
    with open(LOCK_PATH, "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _subnets_in_use() -> set[int]:
    used = set()
    for link in _links():
        match = _LINK_RE.match(str(link.get("ifname", "")).split("@")[0])
        if match:
            used.add(int(match.group(1)))
    for line in run(["ip", "-o", "-4", "addr", "show"]).stdout.splitlines():
        match = re.search(rf"inet {re.escape(SUBNET_BASE)}\.(\d+)\.", line)
        if match:
            used.add(int(match.group(1)))
    return used


@dataclass(frozen=True)
class Node:
    index: int
    namespace: str  # the `ip netns` name, for `ip netns exec` and ServerProcess(netns=)
    address: str  # its eth0 address, reachable from the root namespace
    host_veth: str  # the root-namespace end of its veth pair, a port of the bridge


class Network:
    """n namespaces on one bridge; see the module docstring. Use it as a context
    manager: leaving it, however the block ends, stops the processes started in the
    namespaces and removes the namespaces, veths and bridge."""

    def __init__(self, n: int = 2) -> None:
        if not 1 <= n <= MAX_NODES:
            raise ValueError(f"a network has 1 to {MAX_NODES} nodes, not {n}")
        self.n = n
        self.k: int | None = None
        self.bridge = ""
        self.bridge_address = ""
        self.nodes: list[Node] = []
        self._procs: list[subprocess.Popen[Any]] = []
        # Devices carrying filters now, as (namespace or None for the root, device).
        self._filtered: set[tuple[str | None, str]] = set()

    # -- building and removing -------------------------------------------------

    def __enter__(self) -> Network:
        reason = unavailable()
        if reason is not None:
            raise Unavailable(reason)
        try:
            self._build()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _build(self) -> None:
        pid = os.getpid()
        with _machine_lock():
            _cleanup_stale_locked()
            used = _subnets_in_use()
            # Start from a PID-dependent index, so parallel runs seldom probe the same.
            candidates = [(pid + offset) % 256 for offset in range(256)]
            free = [k for k in candidates if k not in used]
            if not free:
                raise Unavailable(f"every subnet {SUBNET_BASE}.0-255.0/24 is in use")
            self.k = free[0]
            alias = f"{PREFIX}{pid}-{self.k}"
            self.bridge = f"nrd{self.k}br"
            self.bridge_address = f"{SUBNET_BASE}.{self.k}.{BRIDGE_HOST}"
            run(["ip", "link", "add", self.bridge, "type", "bridge"])
            run(["ip", "link", "set", self.bridge, "alias", alias])
            run(["ip", "addr", "add", f"{self.bridge_address}/24", "dev", self.bridge])
            run(["ip", "link", "set", self.bridge, "up"])
            for i in range(self.n):
                self._add_node(i, alias)

    def _add_node(self, i: int, alias: str) -> None:
        node = Node(
            index=i,
            namespace=f"{PREFIX}{os.getpid()}-{self.k}-{i}",
            address=f"{SUBNET_BASE}.{self.k}.{i + 1}",
            host_veth=f"nrd{self.k}v{i}",
        )
        self.nodes.append(node)
        ns = node.namespace
        run(["ip", "netns", "add", ns])
        run(["ip", "link", "add", node.host_veth, "type", "veth", "peer", "name", "eth0",
             "netns", ns])  # fmt: skip
        run(["ip", "link", "set", node.host_veth, "alias", alias])
        run(["ip", "link", "set", node.host_veth, "master", self.bridge])
        run(["ip", "link", "set", node.host_veth, "up"])
        run(["ip", "-n", ns, "addr", "add", f"{node.address}/24", "dev", "eth0"])
        run(["ip", "-n", ns, "link", "set", "eth0", "up"])
        run(["ip", "-n", ns, "link", "set", "lo", "up"])
        self._add_drop_class(None, node.host_veth)
        self._add_drop_class(ns, "eth0")

    def close(self) -> None:
        """Stop the processes started here, then remove namespaces, veths and bridge.
        Safe to call more than once, and on a network only partly built."""
        for proc in self._procs:
            if proc.poll() is None:
                proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)
        self._procs.clear()
        for node in self.nodes:
            # A deleted namespace frees its devices later, in the background; deleting
            # the veth pair first makes it gone when close() returns.
            run(["ip", "link", "del", node.host_veth], check=False)
            _delete_namespace(node.namespace)
        self.nodes = []
        if self.bridge:
            run(["ip", "link", "del", self.bridge], check=False)
            self.bridge = ""

    # -- using it --------------------------------------------------------------

    def node(self, i: int) -> Node:
        return self.nodes[i]

    def popen(self, i: int, argv: list[str], **kwargs: Any) -> subprocess.Popen[Any]:
        """Start `argv` inside node i's namespace. `ip netns exec` execs the command
        in place, so the Popen's PID is the command's own. The network kills it on
        exit if it still runs."""
        proc = subprocess.Popen(["ip", "netns", "exec", self.nodes[i].namespace, *argv], **kwargs)
        self._procs.append(proc)
        return proc

    # -- partitions ------------------------------------------------------------

    def isolate(self, i: int) -> None:
        """Drop every IPv4 packet leaving node i or sent to it: no one, the root
        namespace included, can reach it, and it reaches no one."""
        node = self.nodes[i]
        self._drop(node.namespace, "eth0", "0.0.0.0/0")
        self._drop(None, node.host_veth, "0.0.0.0/0")

    def cut(self, i: int, j: int) -> None:
        """Drop the IPv4 packets between nodes i and j, both ways; every other path
        (the root to either, either to a third node) stays up."""
        if i == j:
            raise ValueError("a node cannot be cut from itself")
        a, b = self.nodes[i], self.nodes[j]
        self._drop(a.namespace, "eth0", f"{b.address}/32")
        self._drop(b.namespace, "eth0", f"{a.address}/32")

    def heal(self) -> None:
        """Remove every cut and isolation."""
        for namespace, device in sorted(self._filtered, key=str):
            run([*self._tc(namespace), "filter", "del", "dev", device, "parent", "1:"])
        self._filtered.clear()

    @staticmethod
    def _tc(namespace: str | None) -> list[str]:
        return ["tc"] if namespace is None else ["tc", "-n", namespace]

    def _add_drop_class(self, namespace: str | None, device: str) -> None:
        """HTB root on `device`: unclassified packets go out directly at full speed
        (`default 0`); class DROP_CLASS leads to a blackhole qdisc."""
        tc = self._tc(namespace)
        run([*tc, "qdisc", "add", "dev", device, "root", "handle", "1:", "htb", "default", "0"])
        run([*tc, "class", "add", "dev", device, "parent", "1:", "classid", DROP_CLASS, "htb",
             "rate", "1mbit"])  # fmt: skip
        run([*tc, "qdisc", "add", "dev", device, "parent", DROP_CLASS, "handle", "2:",
             "blackhole"])  # fmt: skip

    def _drop(self, namespace: str | None, device: str, destination: str) -> None:
        run([*self._tc(namespace), "filter", "add", "dev", device, "parent", "1:",
             "protocol", "ip", "prio", "1", "u32", "match", "ip", "dst", destination,
             "flowid", DROP_CLASS])  # fmt: skip
        self._filtered.add((namespace, device))
