"""Helpers for tests of a node's metrics port: a node that serves one, HTTP requests
with urllib or a raw socket, and a scrape parsed by prometheus_client's own parser."""

from __future__ import annotations

import base64
import socket
import urllib.error
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from tests.servers import NaradProcess, free_port

# Every sample of a scrape: (name, its labels sorted) -> value.
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


class MeteredNarad(NaradProcess):
    """A Narad server with a metrics port of its own (`metrics_port`)."""

    def __init__(self, folder: Path, extra: list[str] | None = None) -> None:
        self.metrics_port = free_port()
        super().__init__(folder, ["--metrics-port", str(self.metrics_port), *(extra or [])])

    def url(self, path: str = "/metrics") -> str:
        return f"http://{self.host}:{self.metrics_port}{path}"

    def get(
        self, path: str = "/metrics", headers: dict[str, str] | None = None
    ) -> tuple[int, dict[str, str], bytes]:
        """(status, headers, body) of a GET."""
        request = urllib.request.Request(self.url(path), headers=headers or {})
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return response.status, dict(response.headers), response.read()
        except urllib.error.HTTPError as exc:
            return exc.code, dict(exc.headers), exc.read()

    def scrape(self, headers: dict[str, str] | None = None) -> Samples:
        """Every sample of /metrics: (name, sorted labels) -> value."""
        status, _, body = self.get("/metrics", headers)
        assert status == 200, body
        return samples(body.decode())

    def raw(self, request: bytes) -> bytes:
        """What the metrics port answers to `request`, sent as is, until it closes."""
        with socket.create_connection((self.host, self.metrics_port), timeout=15) as sock:
            sock.sendall(request)
            out = b""
            while chunk := sock.recv(65536):
                out += chunk
            return out


def samples(text: str) -> Samples:
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def value(scraped: Samples, name: str, **labels: str) -> float:
    return scraped[(name, tuple(sorted(labels.items())))]


def basic(user: str, password: str) -> dict[str, str]:
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    return {"Authorization": f"Basic {token}"}
