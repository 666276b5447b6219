"""TLS for the tests: certificates made with `openssl`, and Narad processes that
listen on a TLS port.

`make_certificates` makes, in a folder: a CA; two server certificates it signed for
127.0.0.1 and localhost (`server`, and `server2` for rotation); a client certificate
it signed; and a second, unrelated CA with a client certificate of its own
(`stranger`), which the nodes must refuse. The `tls_certs` fixture (tests/conftest.py)
makes them once per session.

`TLSNaradProcess` is a NaradProcess whose `port` is its TLS port: it starts with
`--tls-port`, `tls-*` files and `tls-replication yes`, with no plain port unless asked
for (`plain_port`), and its `client()` is redis-py with `ssl=True` and the client
certificate. So tests/replication/cluster.py's `group` and tests/sentinel/cluster.py's
`deployment` run over TLS when given it as their node class.
"""

from __future__ import annotations

import socket
import ssl
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import redis

from tests.servers import NaradProcess, free_port


@dataclass(frozen=True)
class Certificates:
    folder: Path

    def path(self, name: str) -> str:
        return str(self.folder / name)

    @property
    def ca(self) -> str:
        return self.path("ca.crt")

    def cert(self, name: str) -> str:
        return self.path(f"{name}.crt")

    def key(self, name: str) -> str:
        return self.path(f"{name}.key")

    def node_settings(self, server: str = "server") -> list[str]:
        """The flags of a node presenting `server`, verifying against the CA, its
        replication links over TLS."""
        return [
            "--tls-cert-file", self.cert(server), "--tls-key-file", self.key(server),
            "--tls-ca-cert-file", self.ca, "--tls-replication", "yes",
        ]

    def sentinel_lines(self) -> list[str]:
        """The sentinel.conf lines of a sentinel with TLS on every link."""
        return [
            f"tls-cert-file {self.cert('server')}", f"tls-key-file {self.key('server')}",
            f"tls-ca-cert-file {self.ca}", "tls-replication yes",
        ]

    def client_kwargs(self, client: str = "client") -> dict[str, object]:
        """redis-py's arguments for a TLS client presenting `client`."""
        return {
            "ssl": True, "ssl_ca_certs": self.ca, "ssl_certfile": self.cert(client),
            "ssl_keyfile": self.key(client),
        }

    def cli_flags(self, client: str = "client") -> list[str]:
        """redis-cli's flags for a TLS client presenting `client`."""
        return ["--tls", "--cacert", self.ca, "--cert", self.cert(client),
                "--key", self.key(client)]

    def context(self, client: str | None = "client") -> ssl.SSLContext:
        """A client context trusting the CA, presenting `client` (None: nothing)."""
        context = ssl.create_default_context(cafile=self.ca)
        context.check_hostname = False
        if client is not None:
            context.load_cert_chain(self.cert(client), self.key(client))
        return context


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def make_certificates(folder: Path) -> Certificates:
    folder.mkdir(parents=True, exist_ok=True)
    for ca, name in (("ca", "Narad test CA"), ("other-ca", "Unrelated CA")):
        _openssl("req", "-x509", "-new", "-nodes", "-newkey", "rsa:2048", "-keyout",
                 f"{ca}.key", "-out", f"{ca}.crt", "-days", "3", "-subj", f"/CN={name}",
                 cwd=folder)
    (folder / "server.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    (folder / "client.ext").write_text("extendedKeyUsage=clientAuth\n")
    for name, ca, ext, cn in (
        ("server", "ca", "server.ext", "narad-server"),
        ("server2", "ca", "server.ext", "narad-server-rotated"),
        ("client", "ca", "client.ext", "narad-client"),
        ("stranger", "other-ca", "client.ext", "stranger"),
    ):
        _openssl("req", "-new", "-nodes", "-newkey", "rsa:2048", "-keyout", f"{name}.key",
                 "-out", f"{name}.csr", "-subj", f"/CN={cn}", cwd=folder)
        _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.crt", "-CAkey",
                 f"{ca}.key", "-CAcreateserial", "-out", f"{name}.crt", "-days", "3",
                 "-extfile", ext, cwd=folder)
    return Certificates(folder)


class TLSClients:
    """For a ServerProcess whose `port` is a TLS port: the start's PING and
    `client()` go through TLS with the client certificate of `certs`."""

    certs: Certificates
    host: str
    port: int
    proc: subprocess.Popen[bytes] | None
    log: Callable[[], str]
    client_defaults: dict[str, object]

    def _answers(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise RuntimeError(f"server exited with {self.proc.returncode}: {self.log()[-4000:]}")
        try:
            with tls_connection(self.host, self.port, self.certs.context()) as sock:
                sock.sendall(b"PING\r\n")
                return sock.recv(64).startswith((b"+PONG", b"-NOAUTH"))
        except OSError:
            return False

    def client(self, **kwargs: object) -> redis.Redis:
        return redis.Redis(
            host=self.host, port=self.port,
            **{**self.certs.client_kwargs(), **self.client_defaults, **kwargs},
        )  # type: ignore[arg-type]


class TLSNaradProcess(TLSClients, NaradProcess):
    """A Narad node on a TLS port (`port`), and on `plain_port` too if asked."""

    def __init__(
        self, folder: Path, certs: Certificates, extra: list[str] | None = None,
        *, plain: bool = False, server: str = "server",
    ) -> None:
        super().__init__(folder, extra)
        self.certs = certs
        self.server_cert = server
        self.plain_port = free_port() if plain else 0

    def command(self) -> list[str]:
        argv = super().command()
        at = argv.index("--port")
        argv[at: at + 2] = [
            "--port", str(self.plain_port), "--tls-port", str(self.port),
            *self.certs.node_settings(self.server_cert),
        ]
        return argv


def tls_connection(host: str, port: int, context: ssl.SSLContext) -> ssl.SSLSocket:
    sock = socket.create_connection((host, port), timeout=5)
    try:
        return context.wrap_socket(sock, server_hostname=host)
    except BaseException:
        sock.close()
        raise


def tls_nodes(certs: Certificates) -> Callable[[Path, list[str]], NaradProcess]:
    """A node maker for tests/replication/cluster.py's `group` (and the sentinel
    tests' `deployment`): TLS-only nodes presenting `certs`' server certificate."""
    return lambda folder, extra: TLSNaradProcess(folder, certs, extra)
