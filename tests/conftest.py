"""Shared fixtures: real server processes on free loopback ports."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from tests.servers import NaradProcess, RedisProcess, have_redis_server
from tests.tls import Certificates, make_certificates


@pytest.fixture(scope="session")
def tls_certs(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    """A CA, server, client and unrelated-CA certificates, made once (tests/tls.py)."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed")
    return make_certificates(tmp_path_factory.mktemp("tls"))


@pytest.fixture
def narad(tmp_path: Path) -> Iterator[NaradProcess]:
    """A Narad server with its embedded defaults, in a fresh data dir."""
    server = NaradProcess(tmp_path / "narad")
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def debug_narad(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NaradProcess]:
    """One server per module with DEBUG allowed, so tests can move the queue clock."""
    server = NaradProcess(tmp_path_factory.mktemp("debug"), ["--enable-debug-command", "yes"])
    server.start()
    yield server
    server.stop()


@pytest.fixture
def frozen_client(debug_narad: NaradProcess) -> Iterator[redis.Redis]:
    """A RESP3 client of `debug_narad` with the queue clock frozen, so that no
    deadline falls due while a test runs unless the test moves the clock."""
    client = debug_narad.client(protocol=3)
    client.execute_command("DEBUG", "CLOCK", "FREEZE")
    yield client
    client.close()


@pytest.fixture(scope="module")
def shared_narad(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NaradProcess]:
    """One server for a module's read-mostly tests; each test uses its own keys or db."""
    server = NaradProcess(tmp_path_factory.mktemp("narad"))
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisProcess]:
    """A real redis-server 7.0, for side-by-side checks of replies and errors."""
    if not have_redis_server():
        pytest.skip("redis-server is not installed")
    server = RedisProcess(tmp_path_factory.mktemp("redis"))
    server.start()
    yield server
    server.stop()


# A server pair started with a password, for AUTH and pre-auth tests.
PASSWORD = "s3cret"


@pytest.fixture(scope="module")
def narad_pw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NaradProcess]:
    server = NaradProcess(tmp_path_factory.mktemp("narad-pw"), ["--requirepass", PASSWORD])
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def redis_pw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisProcess]:
    if not have_redis_server():
        pytest.skip("redis-server is not installed")
    server = RedisProcess(tmp_path_factory.mktemp("redis-pw"), ["--requirepass", PASSWORD])
    server.start()
    yield server
    server.stop()
