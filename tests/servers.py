"""Real server processes for tests: Narad and, for side-by-side checks, redis-server.

Each runs on a free loopback port in its own temporary folder. `kill()` is a real
SIGKILL; `restart()` starts a new process on the same folder and port.

Given `netns` and `host`, a server runs inside that network namespace instead (started
through `ip netns exec`, which execs it in place, so `proc.pid` is still the server's)
and listens on `host`, an address of the namespace that the test reaches; see
tests/netns.py. Everything else, ports and folders included, stays as it is.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import redis

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_until(condition, timeout: float = 10.0, interval: float = 0.02):  # type: ignore[no-untyped-def]
    """Poll `condition` until it returns something true, or fail at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"condition not met within {timeout} s")
        time.sleep(interval)


def kill_under_load(
    server: ServerProcess, workers: list[Callable[[threading.Event], None]], seconds: float
) -> None:
    """Run each worker in a thread (it loops until the event is set or its connection
    breaks), kill -9 the server after `seconds`, then stop and join the workers."""
    stop = threading.Event()
    threads = [threading.Thread(target=work, args=(stop,)) for work in workers]
    for t in threads:
        t.start()
    time.sleep(seconds)
    server.kill()
    stop.set()
    for t in threads:
        t.join(timeout=10)


class ServerProcess:
    # CPUs every server process runs on (None: wherever the OS puts it). Benchmarks set
    # it to keep the server off the cores of their load generator.
    cpus: set[int] | None = None
    # redis-py arguments every `client()` gets unless the call gives its own (a
    # password, when the server has one).
    client_defaults: dict[str, object] = {}

    def __init__(
        self,
        folder: Path,
        extra: list[str] | None = None,
        *,
        netns: str | None = None,
        host: str = "127.0.0.1",
    ) -> None:
        self.folder = folder
        self.extra = extra or []
        self.netns = netns
        self.host = host
        # Chosen free in the root namespace; a fresh namespace has every port free.
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = folder / "server.log"

    def command(self) -> list[str]:
        raise NotImplementedError

    def listen_options(self) -> list[str]:
        """Where to listen: nothing extra on loopback (each server's own default),
        else `host` alone, with protected mode off so clients from other addresses
        are served. Placed before `extra`, so a test's own settings win."""
        if self.host == "127.0.0.1":
            return []
        return ["--bind", self.host, "--protected-mode", "no"]

    def argv(self) -> list[str]:
        prefix = [] if self.netns is None else ["ip", "netns", "exec", self.netns]
        return [*prefix, *self.command()]

    def start(self, poll_s: float = 0.02) -> ServerProcess:
        """Start the process and wait until it answers PING, asking every `poll_s`."""
        self.folder.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "ab")  # noqa: SIM115 - handed to the child
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        cpus = self.cpus
        self.proc = subprocess.Popen(
            self.argv(),
            stdout=log,
            stderr=log,
            cwd=self.folder,
            env=env,
            preexec_fn=None if cpus is None else lambda: os.sched_setaffinity(0, cpus),
        )
        log.close()
        wait_until(self._answers, timeout=20, interval=poll_s)
        return self

    def _answers(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise RuntimeError(f"server exited with {self.proc.returncode}: {self.log()[-4000:]}")
        try:
            with socket.create_connection((self.host, self.port), timeout=1) as sock:
                sock.sendall(b"PING\r\n")
                return sock.recv(64).startswith((b"+PONG", b"-NOAUTH"))
        except OSError:
            return False

    def log(self) -> str:
        """The whole log (what a test looks for may be anywhere in it)."""
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def client(self, **kwargs: object) -> redis.Redis:
        return redis.Redis(  # type: ignore[arg-type]
            host=self.host, port=self.port, **{**self.client_defaults, **kwargs}
        )

    def kill(self) -> None:
        """kill -9: no chance to flush or clean up anything."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()

    def stop(self, timeout: float = 20) -> int:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode

    def restart(self) -> ServerProcess:
        self.stop()
        return self.start()


class NaradProcess(ServerProcess):
    def command(self) -> list[str]:
        return [
            sys.executable,
            "-m",
            "narad",
            "server",
            "--port",
            str(self.port),
            "--dir",
            str(self.folder / "data"),
            # No metrics port unless the test asks for one (in `extra`, which wins):
            # tests start many nodes at once, and port + 2000 may be another's.
            "--metrics-port",
            "0",
            *self.listen_options(),
            *self.extra,
        ]


class RedisProcess(ServerProcess):
    def command(self) -> list[str]:
        return [
            "redis-server",
            "--port",
            str(self.port),
            *(self.listen_options() or ["--bind", "127.0.0.1"]),
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(self.folder),
            *self.extra,
        ]


def have_redis_server() -> bool:
    return shutil.which("redis-server") is not None
