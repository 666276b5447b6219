"""narad.client over TLS (`narad+tls://`), to a real server on a TLS port."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlencode

import pytest
import redis

from narad.client import connect
from tests.tls import Certificates, TLSNaradProcess


@pytest.fixture
def tls_narad(tmp_path: Path, tls_certs: Certificates) -> Iterator[TLSNaradProcess]:
    server = TLSNaradProcess(tmp_path / "narad", tls_certs)
    server.start()
    yield server
    server.stop()


def test_tls_url(tls_narad: TLSNaradProcess, tls_certs: Certificates) -> None:
    query = urlencode({"ca": tls_certs.ca, "cert": tls_certs.cert("client"),
                       "key": tls_certs.key("client")})
    with connect(f"narad+tls://127.0.0.1:{tls_narad.port}?{query}") as client:
        queue = client.queue("secure")
        queue.create()
        client.producer("secure").push("over tls")
        [message] = queue.pop()
        assert message.payload == b"over tls"
        assert queue.ack(message) == 1
    # The same port refuses a client that speaks plain text.
    with connect(f"narad://127.0.0.1:{tls_narad.port}", retry_s=0) as plain, \
            pytest.raises(redis.ConnectionError):
        plain.queue("secure").stats()
