"""The server: its lifecycle (open the keyspace, listen, stop on a signal or SHUTDOWN),
the once-a-second upkeep, its statistics, the bookkeeping of WATCH and of blocked
clients (who is told when a key is written), and the commit barrier's hooks.
Connections are narad/client.py's; running a command is narad/dispatch.py's.

`Server.serve` runs on asyncio's runner with uvloop's loop where present
(narad/serve.py), and anyio's APIs work inside it for work that wants task groups.

The commit barrier (narad/barrier.py) makes replies honest about durability: every
command parsed in an event-loop iteration runs at once and encodes its reply into its
client's output buffer; at the end of the iteration the barrier serves blocked
clients whose keys changed (`before_commit`), commits everything written in the
iteration as one record of the node's journal (one write and, under `fsync always`,
one fsync, however many logs it touched: narad/log/journal.py), and only then hands
the output buffers to their transports. So no reply, to any client, leaves before the
data it reports or depends on is committed (docs/durability.md).

Deferred writes: the entry of a plain `XADD key * field value ...` or `Q.PUSH queue
payload` may be held back (`barrier.deferred`) and added together with the like
entries of other clients, one call to the log per stream (narad/commands/deferred.py).
The rule that keeps this invisible: `barrier.settle()` applies them before anything
else runs that could see or change their stream: every other command, the end of the
iteration, the once-a-second upkeep and the queues' timers. So every command still
sees the effects of all commands that arrived before it, and each client's replies
stay in order.
"""

from __future__ import annotations

import asyncio
import contextlib
import faulthandler
import logging
import os
import signal
import sys
import time
from collections import Counter, deque
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any

from narad import metrics
from narad.barrier import CommitBarrier
from narad.client import Client
from narad.commands.table import all_commands
from narad.config import Config
from narad.config.kinds import BadValue, OutputBufferLimits
from narad.dispatch import Dispatcher
from narad.keyspace import Keyspace
from narad.listen import Listeners
from narad.log import LogFailed
from narad.queues.service import QueueService, RunningLoop
from narad.replication.role import Replication

logger = logging.getLogger("narad.server")

CRON_INTERVAL_S = 1.0
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


@dataclass
class Stats:
    started_s: float = field(default_factory=time.time)
    connections_received: int = 0
    rejected_connections: int = 0
    commands_processed: int = 0
    error_replies: int = 0
    net_input_bytes: int = 0
    net_output_bytes: int = 0
    reads_processed: int = 0  # data_received calls: one per socket read, as Redis counts
    writes_processed: int = 0  # transport writes of replies
    errors: Counter[str] = field(default_factory=Counter)
    # instantaneous_*: sampled every metrics.SAMPLE_INTERVAL_S by Server._sample.
    ops_rate: metrics.Rate = field(default_factory=metrics.Rate)
    input_rate: metrics.Rate = field(default_factory=metrics.Rate)
    output_rate: metrics.Rate = field(default_factory=metrics.Rate)

    def reset(self) -> None:
        fresh = Stats(started_s=self.started_s)
        self.__dict__.update(fresh.__dict__)
        for cmd in all_commands():
            cmd.calls = cmd.usec = cmd.rejected = cmd.failed = 0
            cmd.latency = None

    def sample(self, now_s: float) -> None:
        self.ops_rate.sample(self.commands_processed, now_s)
        self.input_rate.sample(self.net_input_bytes, now_s)
        self.output_rate.sample(self.net_output_bytes, now_s)


class Server:
    def __init__(self, config: Config) -> None:
        self.config = config
        self.keyspace = Keyspace(config)
        self.keyspace.on_touch = self.key_written
        self.clients: dict[int, Client] = {}
        self.stats = Stats()
        self.waiters: dict[tuple[int, bytes], deque[Client]] = {}
        self.watchers: dict[tuple[int, bytes], set[Client]] = {}
        self.signaled: dict[tuple[int, bytes], None] = {}  # in the order signaled
        self.barrier = CommitBarrier(self.keyspace, self)
        self.queues = QueueService(self.keyspace, self, self.barrier, RunningLoop())
        self.keyspace.on_delete = self.queues.dropped
        self.dispatch = Dispatcher(config, self.stats, self.barrier)
        self.replication = Replication(self)
        self._next_client_id = 1
        self.loop: asyncio.AbstractEventLoop | None = None
        self.shutdown_requested: asyncio.Event | None = None
        self.exit_status = 0  # what the process exits with once stopped
        self.run_id = os.urandom(20).hex()
        self._stop_deadline_armed = False  # by the first stop signal (_stop_signal)
        self.tcp_port = 0
        self.output_limit_bytes = 0
        self._set_output_limit(config["client-output-buffer-limit"])
        config.on_change("client-output-buffer-limit", self._set_output_limit)
        self.listeners: Listeners | None = None
        config.on_change("port", self._listen_on_port)
        config.on_change("bind", self._listen_on_addresses)
        for name in (
            "fsync",
            "journal-segment-bytes",
            "segment-bytes",
            "segment-ms",
            "retention-ms",
            "retention-bytes",
            "stream-node-max-entries",
        ):
            config.on_change(name, self._apply_log_settings)
        for name in ("proto-max-bulk-len", "client-query-buffer-limit"):
            config.on_change(name, self._apply_parser_limits)

    # -- settings applied at runtime (CONFIG SET; the others are read where used) ------

    def _set_output_limit(self, value: object) -> None:
        assert isinstance(value, OutputBufferLimits)
        self.output_limit_bytes = value.normal.hard_bytes
        self.normal_output_limit = value.normal

    def _listen_on_port(self, value: object) -> None:
        self._listen("Unable to listen on this port. Check server logs.")

    def _listen_on_addresses(self, value: object) -> None:
        self._listen("Failed to bind to specified addresses.")

    def _listen(self, failure: str) -> None:
        """Listen where `port` and `bind` say now (narad/listen.py); on failure the
        old listeners stay and CONFIG SET answers Redis's `failure` text."""
        if self.listeners is None:  # not serving yet: serve() listens
            return
        port = int(self.config["port"])  # type: ignore[call-overload]
        addresses = str(self.config["bind"]).split()
        try:
            self.listeners.listen(addresses, port)
        except OSError as exc:
            logger.warning("cannot listen on %s port %d: %s", " ".join(addresses), port, exc)
            raise BadValue(failure) from None
        self.tcp_port = self.listeners.port
        logger.info("listening on %s port %d", " ".join(addresses), self.tcp_port)

    def _apply_log_settings(self, value: object) -> None:
        self.keyspace.apply_settings()
        for queue in self.queues.queues():
            self.queues.apply_settings(queue)

    def _apply_parser_limits(self, value: object) -> None:
        bulk = int(self.config["proto-max-bulk-len"])  # type: ignore[call-overload]
        query = int(self.config["client-query-buffer-limit"])  # type: ignore[call-overload]
        for client in self.clients.values():
            client.parser.max_bulk_len = bulk
            client.parser.max_query_buffer = query

    # -- around each commit (narad/barrier.py's hooks) ---------------------------------

    def before_commit(self) -> None:
        # The commit after this must run whatever happens while serving: replies of
        # every client wait on it.
        queues = self.queues
        if (queues.to_serve or queues.subscribed) and self.keyspace.leads:
            try:
                queues.serve()
            except Exception as exc:
                self.dispatch.unexpected(exc, "queue consumers", "serving")
        try:
            self.serve_signaled()
        except Exception as exc:
            self.dispatch.unexpected(exc, "blocked clients", "serving")

    def after_commit(self, committed: bool) -> None:
        keyspace = self.keyspace
        keyspace.remove_doomed()
        if keyspace.checkpoint_due():
            keyspace.checkpointer.begin(asyncio.get_running_loop())
        carried = keyspace.journal.carried
        if committed and self.queues.subscribed and self.queues.copies_due(carried):
            self.barrier.schedule()  # what became committed in a source may now be copied

    def commit_failed(self, why: str, clients_closed: int) -> None:
        """The journal refuses every commit from now on, and a reply that reads what
        the failed commit took would claim it too, so the server stops (exit status
        1); the next start recovers every commit that finished."""
        if self.exit_status == 0:
            logger.critical(
                "event=commit_failed clients_closed=%d reason=%r; stopping: the next start "
                "recovers every finished commit",
                clients_closed,
                why,
            )
            self.exit_status = 1
            self.request_shutdown()

    def reopen_keyspace(self, truncate_to: int | None = None) -> None:
        """Reopen the keyspace on a replica's data as its follower changed it
        (narad/replication/follower.py): with `truncate_to`, its history cut back to
        that many commits (a new leader lacks those after), crash-safe; else a
        complete full copy put in place of its data (`Keyspace.reopen`)."""
        self.barrier.end_of_iteration()  # replies of reads so far leave first
        self.keyspace.reopen(truncate_to)

    # -- WATCH ----------------------------------------------------------------------------

    def key_touched(self, db: int, key: bytes) -> None:
        """A command wrote `key`: transactions watching it will abort."""
        for client in self.watchers.get((db, key), ()):
            client.watch_dirty = True

    def key_written(self, db: int, key: bytes) -> None:
        """A command wrote `key`: WATCHers abort, blocked readers get another look."""
        if self.watchers:
            self.key_touched(db, key)
        if self.waiters:
            self.signal_key(db, key)
        if self.queues.consuming:
            stream = self.keyspace.get(db, key)
            if stream is not None:
                self.queues.written(stream)

    # -- blocking -------------------------------------------------------------------------

    def signal_key(self, db: int, key: bytes) -> None:
        """Something changed at `key`: blocked clients there get another look."""
        if (db, key) in self.waiters:
            self.signaled[(db, key)] = None
            self.barrier.schedule()

    def serve_signaled(self) -> None:
        """Blocked clients get another look, as Redis 7.0 serves them: key by key in
        the order the keys were signaled, on each key in the order its clients
        blocked, each client retrying for that key."""
        while self.signaled:
            signaled, self.signaled = self.signaled, {}
            found_nothing: set[Hashable] = set()
            for key in signaled:
                for client in list(self.waiters.get(key, ())):
                    block = client.blocked
                    # (A client served for an earlier key may be blocked again on others.)
                    if block is None or block.alike in found_nothing or key not in block.keys:
                        continue
                    if not client.retry_blocked(key[1]) and block.alike is not None:
                        found_nothing.add(block.alike)

    def add_waiter(self, client: Client, key: tuple[int, bytes]) -> None:
        self.waiters.setdefault(key, deque()).append(client)

    def remove_waiter(self, client: Client, key: tuple[int, bytes]) -> None:
        queue = self.waiters.get(key)
        if queue is not None:
            with contextlib.suppress(ValueError):
                queue.remove(client)
            if not queue:
                del self.waiters[key]

    @property
    def blocked_clients(self) -> int:
        return sum(1 for c in self.clients.values() if c.blocked is not None)

    # -- lifecycle ------------------------------------------------------------------------

    def _cron(self) -> None:
        """Once a second: keyspace upkeep, and idle clients past `timeout` closed."""
        assert self.loop is not None
        self._cron_handle = self.loop.call_later(CRON_INTERVAL_S, self._cron)
        try:
            self.barrier.settle()
            if self.keyspace.leads:  # a replica's every change is its leader's
                try:
                    self.keyspace.maintain()
                except LogFailed as exc:
                    logger.error("keyspace upkeep failed: %s", exc)
                self.queues.tick()
        except Exception as exc:  # the commit below still runs, and so does the next upkeep
            self.dispatch.unexpected(exc, "upkeep")
        self.barrier.schedule()  # trim ops written by retention are committed as usual
        idle_max = int(self.config["timeout"])  # type: ignore[call-overload]
        if idle_max:
            now = time.time()
            for client in list(self.clients.values()):
                if client.blocked is None and now - client.last_interaction_s > idle_max:
                    client.close()
        if self.normal_output_limit.soft_bytes:
            self._enforce_soft_output_limit()

    def _enforce_soft_output_limit(self) -> None:
        """client-output-buffer-limit's soft limit, as Redis applies it: a client
        whose pending replies stay at or past `soft_bytes` for more than
        `soft_seconds` is disconnected. Checked here, once a second."""
        _, soft_bytes, soft_seconds = self.normal_output_limit
        now = time.monotonic()
        for client in list(self.clients.values()):
            transport = client.transport
            pending = len(client.out) + (
                transport.get_write_buffer_size() if transport is not None else 0
            )
            if pending < soft_bytes:
                client.soft_limit_since = None
            elif client.soft_limit_since is None:
                client.soft_limit_since = now
            elif now - client.soft_limit_since > soft_seconds:
                client._over_output_limit()

    def _sample(self) -> None:
        """Every metrics.SAMPLE_INTERVAL_S: a sample of each instantaneous_* rate."""
        assert self.loop is not None
        self._sample_handle = self.loop.call_later(metrics.SAMPLE_INTERVAL_S, self._sample)
        self.stats.sample(time.monotonic())

    def new_client_id(self) -> int:
        cid = self._next_client_id
        self._next_client_id += 1
        return cid

    def request_shutdown(self) -> None:
        if self.shutdown_requested is not None:
            self.shutdown_requested.set()

    def _stop_signal(self, signum: int, frame: object) -> None:
        """SIGTERM or SIGINT. Python runs this in the main thread at its next check for
        signals, which comes even while a request holds the event loop in a long call
        that checks (a sleep, a regex match, a wait on I/O). It asks the loop for the
        graceful stop and arms a deadline on a thread of its own that needs no
        interpreter lock: if the stop has not finished within `shutdown-timeout`, that
        thread dumps every thread's stack to the log and exits the process with
        status 1 (what is committed stays, as after kill -9). The deadline is the
        first signal's: a later one does not move it."""
        timeout = int(self.config["shutdown-timeout"])  # type: ignore[call-overload]
        logger.warning(
            "event=stop_requested signal=%s deadline_s=%d", signal.Signals(signum).name, timeout
        )
        if not self._stop_deadline_armed:
            self._stop_deadline_armed = True
            faulthandler.dump_traceback_later(timeout, exit=True, file=_log_stream())
        assert self.loop is not None
        self.loop.call_soon_threadsafe(self.request_shutdown)

    async def serve(self, ready: Callable[[int], None] | None = None) -> None:
        """Open the keyspace, listen, and run until SIGTERM, SIGINT or SHUTDOWN."""
        self.loop = asyncio.get_running_loop()
        self.shutdown_requested = asyncio.Event()
        self.keyspace.open(self)
        if self.keyspace.leads:
            self.queues.opened()
        self.listeners = Listeners(self.loop, lambda: Client(self))
        self.listeners.listen(
            str(self.config["bind"]).split(),
            int(self.config["port"]),  # type: ignore[call-overload]
        )
        await self.listeners.started()
        port = self.tcp_port = self.listeners.port
        previous = {sig: signal.signal(sig, self._stop_signal) for sig in STOP_SIGNALS}
        self._cron_handle = self.loop.call_later(CRON_INTERVAL_S, self._cron)
        self._sample_handle = self.loop.call_later(metrics.SAMPLE_INTERVAL_S, self._sample)
        self.replication.start()
        logger.info("ready to accept connections on port %d", port)
        if ready is not None:
            ready(port)
        try:
            await self.shutdown_requested.wait()
        finally:
            self._cron_handle.cancel()
            self._sample_handle.cancel()
            self.replication.stop()
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            self.listeners.close()
            self.barrier.end_of_iteration()
            self.barrier.stop()  # nothing commits after this: the keyspace closes
            for client in list(self.clients.values()):
                client.close()
            self.keyspace.close()
            faulthandler.cancel_dump_traceback_later()  # the stop finished in time
            logger.info("stopped")


def _log_stream() -> Any:
    """The open file the server logs to, for the stack dump of a stop past its
    deadline (standard error when the log has no file of its own)."""
    for handler in logging.getLogger("narad").handlers:
        stream = getattr(handler, "stream", None)
        if stream is not None and hasattr(stream, "fileno"):
            return stream
    return sys.stderr
