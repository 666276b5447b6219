"""Safe defaults: loopback-only binding, protected mode, key names that never reach
outside the data dir, and the output buffer limit for clients that do not read."""

from __future__ import annotations

import os
import signal
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.server.raw import Raw, encode
from tests.servers import NaradProcess, wait_until


def _listening_addresses(port: int) -> set[str]:
    """The local addresses with a listening TCP socket on `port` (from /proc/net)."""
    found = set()
    for table, width in (("/proc/net/tcp", 8), ("/proc/net/tcp6", 32)):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            address, port_hex = fields[1].split(":")
            if int(port_hex, 16) == port and fields[3] == "0A":  # LISTEN
                shown = bytes.fromhex(address)[::-1]
                found.add(address if width == 32 else socket.inet_ntoa(shown))
    return found


def _non_loopback_address() -> str | None:
    """An IPv4 address of this machine outside 127/8, if it has one."""
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        probe.connect(("192.0.2.1", 9))  # no packet is sent: this only picks a route
        address = str(probe.getsockname()[0])
    except OSError:
        return None
    finally:
        probe.close()
    if address.startswith("127.") or address == "0.0.0.0":
        return None
    try:  # the address must accept a connection from this host
        with socket.socket() as sock:
            sock.bind((address, 0))
    except OSError:
        return None
    return address


def test_binds_loopback_only_by_default(shared_narad: NaradProcess) -> None:
    assert _listening_addresses(shared_narad.port) == {"127.0.0.1"}
    with Raw(shared_narad.port) as conn:
        assert conn.call("CONFIG", "GET", "bind") == [b"bind", b"127.0.0.1"]
        assert conn.call("CONFIG", "GET", "protected-mode") == [b"protected-mode", b"yes"]
    other = _non_loopback_address()
    if other is not None:
        with pytest.raises(OSError):
            socket.create_connection((other, shared_narad.port), timeout=5).close()


@pytest.fixture(scope="module")
def external_address() -> str:
    address = _non_loopback_address()
    if address is None:
        pytest.skip("this machine has no non-loopback IPv4 address")
    return address


def _first_reply(address: str, port: int) -> bytes:
    with socket.create_connection((address, port), timeout=10) as sock:
        sock.sendall(b"PING\r\n")
        data = b""
        try:
            while chunk := sock.recv(4096):
                data += chunk
                if data.endswith(b"\r\n") and not data.startswith(b"-DENIED"):
                    break
        except ConnectionResetError:
            pass
        return data


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        ([], b"-DENIED"),
        (["--requirepass", "pw"], b"-NOAUTH Authentication required.\r\n"),
        (["--protected-mode", "no"], b"+PONG\r\n"),
    ],
)
def test_protected_mode(
    tmp_path: Path, external_address: str, flags: list[str], expected: bytes
) -> None:
    server = NaradProcess(tmp_path / "n", ["--bind", f"127.0.0.1 {external_address}", *flags])
    server.start()
    try:
        reply = _first_reply(external_address, server.port)
        assert reply.startswith(expected)
        if expected == b"-DENIED":
            assert reply.endswith(b"\r\n") and b"protected mode" in reply
            # The loopback interface is still served.
            assert _first_reply("127.0.0.1", server.port) == b"+PONG\r\n"
            with Raw(server.port) as conn:
                stats = conn.call("INFO", "stats").decode()
                assert "rejected_connections:1" in stats
                # Turning protected mode off at run time lets the outside in.
                conn.call("CONFIG", "SET", "protected-mode", "no")
            assert _first_reply(external_address, server.port) == b"+PONG\r\n"
    finally:
        server.stop()


# -- key names and the file system --------------------------------------------------------

HOSTILE_KEYS = [
    b"../escape",
    b"../../escape2",
    b"/etc/passwd",
    b"/tmp/narad-escape",
    b"a/b/c",
    b"..",
    b".",
    b"",
    b"./x",
    b"..\\windows",
    b"nul\x00byte",
    b"\xff\xfe",
    b"~/home",
    b"$HOME",
    b"x" * 1000,
    b"../" * 50 + b"deep",
    "ünïcode/../ключ".encode(),
    b"meta",
    b"narad.lock",
    b"streams",
]


def _all_paths(root: Path) -> set[Path]:
    return {Path(dirpath) / name for dirpath, dirs, files in os.walk(root) for name in dirs + files}


def test_key_names_never_leave_the_data_dir(tmp_path: Path) -> None:
    work = tmp_path / "work"
    server = NaradProcess(work)
    data_dir = work / "data"
    outside_before = _all_paths(tmp_path) - _all_paths(work)
    server.start()
    try:
        with Raw(server.port) as conn:
            for db in (0, 15):
                conn.call("SELECT", db)
                for i, key in enumerate(HOSTILE_KEYS):
                    assert conn.call("XADD", key, f"{i + 1}-0", "f", key) == f"{i + 1}-0".encode()
                conn.call("RENAME", b"../escape", b"../renamed")
            conn.call("SELECT", 0)
            conn.call("SWAPDB", 0, 1)
        server.restart()
        with Raw(server.port) as conn:
            conn.call("SELECT", 1)
            assert sorted(conn.call("KEYS", "*")) == sorted(
                [k for k in HOSTILE_KEYS if k != b"../escape"] + [b"../renamed"]
            )
            for key in HOSTILE_KEYS[1:]:
                assert conn.call("XRANGE", key, "-", "+")[0][1] == [b"f", key]
            conn.call("FLUSHALL")
    finally:
        server.stop()
    created = _all_paths(tmp_path) - _all_paths(work) - {work} - outside_before
    assert created == set()
    for path in _all_paths(work):
        assert path.resolve().is_relative_to(work.resolve()), path
    for path in _all_paths(data_dir):
        assert not path.is_symlink(), path
    assert not Path("/tmp/narad-escape").exists()
    assert not (work / "escape").exists() and not (tmp_path / "escape").exists()


# -- the output buffer limit ----------------------------------------------------------------


@pytest.fixture
def limited(tmp_path: Path) -> Iterator[NaradProcess]:
    server = NaradProcess(tmp_path / "n").start()
    yield server
    server.stop()


def _rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def test_client_that_never_reads_is_disconnected(limited: NaradProcess) -> None:
    port = limited.port
    with Raw(port) as admin:
        assert admin.call("CONFIG", "SET", "client-output-buffer-limit", "normal 1mb 0 0") == b"OK"
        value = b"v" * 1000
        admin.send(b"".join(encode(["XADD", "big", f"{i + 1}-0", "f", value]) for i in range(2000)))
        for _ in range(2000):
            admin.read()
        rss_before = _rss_kb(limited.proc.pid)  # type: ignore[union-attr]
        reader = Raw(port)
        reader.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        reader_id = reader.call("CLIENT", "ID")
        # 20 XRANGEs of ~2 MB each, never read: 40 MB if the server kept them.
        reader.send(encode(["XRANGE", "big", "-", "+"]) * 20)

        def reader_gone() -> bool:
            return f"id={reader_id} ".encode() not in admin.call("CLIENT", "LIST")

        wait_until(reader_gone)
        # What the kernel already holds still trickles in through the tiny receive
        # window; the server itself has let go of the connection.
        reader.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\0\0\0\0\0\0\0")
        reader.close()
        assert admin.call("PING") == b"PONG"
        assert admin.call("XLEN", "big") == 2000
        assert len(admin.call("XRANGE", "big", "-", "+", "COUNT", "5")) == 5
        rss_after = _rss_kb(limited.proc.pid)  # type: ignore[union-attr]
        assert rss_after - rss_before < 100_000, (rss_before, rss_after)
        log = limited.log_path.read_text(errors="replace")
        assert "output buffer limit" in log


def test_slow_reader_within_the_limit_gets_everything(limited: NaradProcess) -> None:
    with Raw(limited.port) as conn:
        conn.call("CONFIG", "SET", "client-output-buffer-limit", "normal 64mb 0 0")
        value = b"w" * 1000
        conn.send(b"".join(encode(["XADD", "mid", f"{i + 1}-0", "f", value]) for i in range(1000)))
        for _ in range(1000):
            conn.read()
        conn.send(encode(["XRANGE", "mid", "-", "+"]) * 20)
        for _ in range(20):
            assert len(conn.read()) == 1000


class _LowFileLimit(NaradProcess):
    """Narad started with a soft limit of 256 open files under a hard one of 4096."""

    def command(self) -> list[str]:
        return ["prlimit", "--nofile=256:4096", *super().command()]


def _open_files_limits(pid: int) -> tuple[int, int]:
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
        if line.startswith("Max open files"):
            soft, hard = line.split()[3:5]
            return int(soft), int(hard)
    raise AssertionError("no open files line")


def test_the_open_files_limit_is_raised_to_the_hard_one(tmp_path: Path) -> None:
    """Each client and each segment file holds a descriptor: as Redis does, the server
    lifts its soft limit to the hard one at start."""
    server = _LowFileLimit(tmp_path).start()
    try:
        assert server.proc is not None
        assert _open_files_limits(server.proc.pid) == (4096, 4096)
        assert server.client().ping()
    finally:
        server.stop()


# -- Unexpected exceptions, and stopping a server whose loop is held ---------------------


def _log_lines(server: NaradProcess, word: str) -> list[str]:
    lines = server.log_path.read_text(errors="replace").splitlines()
    return [line for line in lines if word in line]


def test_an_unexpected_exception_answers_an_error_and_the_connection_lives(
    tmp_path: Path,
) -> None:
    """A handler that raises something no code path expected (here: a field name that
    is not UTF-8) answers `-ERR`, counts as a failed call, logs at most one line and
    no traceback; the connection serves the next command."""
    server = NaradProcess(tmp_path / "narad").start()
    try:
        with Raw(server.port) as raw:
            assert raw.call("Q.CREATE", "k") == b"OK"
            reply = raw.call("Q.SCHEMA", "SET", "k", '{"type":"object"}', "FIELD", b"\xff")
            assert isinstance(reply, tuple) and reply[0] == "error"
            assert raw.call("PING") == b"PONG"
            stats = raw.call("INFO", "commandstats").decode()
            assert "cmdstat_q.schema|set:calls=1," in stats and "failed_calls=1" in stats
        log = server.log_path.read_text(errors="replace")
        assert "Traceback" not in log
        assert len(_log_lines(server, "event=internal_error")) <= 1
    finally:
        server.stop()


def test_an_unexpected_exception_in_exec_fails_that_command_only(
    shared_narad: NaradProcess,
) -> None:
    with Raw(shared_narad.port) as raw:
        assert raw.call("MULTI") == b"OK"
        for args in (
            ("Q.CREATE", "in-multi"),
            ("Q.SCHEMA", "SET", "in-multi", '{"type":"object"}', "FIELD", b"\xff"),
            ("PING",),
        ):
            assert raw.call(*args) == b"QUEUED"
        created, failed, pong = raw.call("EXEC")
        assert (created, pong) == (b"OK", b"PONG")
        assert isinstance(failed, tuple) and failed[0] == "error"
        assert raw.call("PING") == b"PONG"


def test_an_error_text_with_a_lone_surrogate_is_sent(shared_narad: NaradProcess) -> None:
    """An error reply that quotes a property named "\\ud800" (INCOMPATIBLE, or a refusal
    of the text) reaches the client as one error line; it closed the connection with
    a traceback."""
    with Raw(shared_narad.port) as raw:
        assert raw.call("Q.CREATE", "surrogates") == b"OK"
        first = '{"type":"object","properties":{"a":{"type":"string"}}}'
        assert raw.call("Q.SCHEMA", "SET", "surrogates", first) == 1
        second = (
            '{"type":"object","properties":{"\\ud800":{"type":"string"}},'
            '"required":["\\ud800"]}'
        )
        reply = raw.call("Q.SCHEMA", "SET", "surrogates", second)
        assert isinstance(reply, tuple) and reply[0] == "error"
        assert raw.call("PING") == b"PONG"


def test_sigterm_stops_a_server_whose_loop_is_held(tmp_path: Path) -> None:
    """DEBUG SLEEP holds the event loop as a runaway request would; SIGTERM still ends
    the process once `shutdown-timeout` has passed, and the data dir starts again."""
    extra = ["--enable-debug-command", "yes", "--shutdown-timeout", "1"]
    server = NaradProcess(tmp_path / "narad", extra).start()
    with server.client() as client:
        client.xadd("kept", {"f": "v"})
    held = Raw(server.port)
    held.send_command("DEBUG", "SLEEP", "600")

    def loop_is_held() -> bool:
        with socket.create_connection(("127.0.0.1", server.port), timeout=5) as probe:
            probe.settimeout(0.5)
            probe.sendall(b"PING\r\n")
            try:
                probe.recv(16)
            except TimeoutError:
                return True
            return False

    wait_until(loop_is_held)
    assert server.proc is not None
    server.proc.send_signal(signal.SIGTERM)
    assert server.proc.wait(timeout=60) == 1  # far less than the 600 s sleep
    held.close()
    assert len(_log_lines(server, "event=stop_requested signal=SIGTERM")) == 1
    server.start()
    try:
        with server.client() as client:
            assert client.xlen("kept") == 1
    finally:
        assert server.stop() == 0
    assert _log_lines(server, "event=stopped")
