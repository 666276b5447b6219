"""TLS contexts built from the tls-* settings, for every link that speaks TLS: a data
node's TLS port, a replica's link to its leader, a sentinel's port and its links to
data nodes and other sentinels (docs/security.md, "TLS").

`build` reads one `TLSSettings` (a data node's: `from_config`; a sentinel's:
narad/sentinel/config.py) and returns both contexts, or raises TLSError with the
reason in Redis's words (what Redis logs), having built nothing: a node checks the
settings this way at start and at every CONFIG SET of a tls-* setting, and keeps its
old contexts when the new ones do not load, as Redis does.

- The server context presents `tls-cert-file`, and asks clients for a certificate
  as `tls-auth-clients` says: `yes` (required, verified against the CA), `optional`
  (verified if given), `no` (not asked for).
- The client context (a replica or a sentinel connecting out) verifies the other
  end's certificate against the CA, not its name (as Redis does: nodes are named by
  address, and sentinels learn addresses at runtime), and presents
  `tls-client-cert-file` if set, else `tls-cert-file`, as its own certificate.
- `tls-protocols` names the versions allowed (TLSv1, TLSv1.1, TLSv1.2, TLSv1.3,
  any case, separated by spaces); the contexts allow the range from the oldest to
  the newest named. Empty: TLSv1.2 and TLSv1.3, Redis's default.

No I/O but reading the files named; owned by whoever calls it.
"""

from __future__ import annotations

import ctypes
import ssl
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from narad.config import Config

# A stalled handshake is dropped after this many seconds; one in progress never
# holds anything but its own connection.
HANDSHAKE_TIMEOUT_S = 10.0

PROTOCOLS = {
    "tlsv1": ssl.TLSVersion.TLSv1,
    "tlsv1.1": ssl.TLSVersion.TLSv1_1,
    "tlsv1.2": ssl.TLSVersion.TLSv1_2,
    "tlsv1.3": ssl.TLSVersion.TLSv1_3,
}
DEFAULT_PROTOCOLS = "TLSv1.2 TLSv1.3"
AUTH_CLIENTS = {"yes": ssl.CERT_REQUIRED, "optional": ssl.CERT_OPTIONAL, "no": ssl.CERT_NONE}


class TLSError(Exception):
    """The tls-* settings do not make a working TLS configuration; the text says
    which file or value and why."""


@dataclass(frozen=True)
class TLSSettings:
    """The tls-* settings a context is built from (names without `tls-`)."""

    cert_file: str = ""
    key_file: str = ""
    key_file_pass: str = ""
    client_cert_file: str = ""
    client_key_file: str = ""
    client_key_file_pass: str = ""
    ca_cert_file: str = ""
    ca_cert_dir: str = ""
    auth_clients: str = "yes"
    replication: bool = False
    protocols: str = ""
    ciphers: str = ""
    ciphersuites: str = ""
    prefer_server_ciphers: bool = False

    @classmethod
    def from_config(cls, config: Config) -> TLSSettings:
        def text(name: str) -> str:
            return str(config[f"tls-{name}"])

        return cls(
            cert_file=text("cert-file"),
            key_file=text("key-file"),
            key_file_pass=text("key-file-pass"),
            client_cert_file=text("client-cert-file"),
            client_key_file=text("client-key-file"),
            client_key_file_pass=text("client-key-file-pass"),
            ca_cert_file=text("ca-cert-file"),
            ca_cert_dir=text("ca-cert-dir"),
            auth_clients=text("auth-clients"),
            replication=bool(config["tls-replication"]),
            protocols=text("protocols"),
            ciphers=text("ciphers"),
            ciphersuites=text("ciphersuites"),
            prefer_server_ciphers=bool(config["tls-prefer-server-ciphers"]),
        )


@dataclass(frozen=True)
class Contexts:
    """The contexts in force: `server` for accepted connections, `client` for
    connections made to other nodes and sentinels."""

    server: ssl.SSLContext
    client: ssl.SSLContext


def build(settings: TLSSettings) -> Contexts:
    """Both contexts from `settings`, each file read now; TLSError otherwise."""
    if not settings.cert_file:
        raise TLSError("No tls-cert-file configured!")
    if not settings.key_file:
        raise TLSError("No tls-key-file configured!")
    if (settings.auth_clients != "no" or settings.replication) and not (
        settings.ca_cert_file or settings.ca_cert_dir
    ):
        raise TLSError(
            "Either tls-ca-cert-file or tls-ca-cert-dir must be specified when "
            "tls-replication or tls-auth-clients are enabled!"
        )
    versions = _versions(settings.protocols)
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    client = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    client.check_hostname = False
    client.verify_mode = ssl.CERT_REQUIRED
    server.verify_mode = AUTH_CLIENTS[settings.auth_clients]
    for context in (server, client):
        context.minimum_version, context.maximum_version = versions
        context.options |= ssl.OP_NO_COMPRESSION
        if settings.prefer_server_ciphers:
            context.options |= ssl.OP_CIPHER_SERVER_PREFERENCE
        _load_ca(context, settings)
        if settings.ciphers:
            try:
                context.set_ciphers(settings.ciphers)
            except ssl.SSLError:
                raise TLSError(f"Failed to configure ciphers: {settings.ciphers}") from None
        if settings.ciphersuites:
            _set_ciphersuites(context, settings.ciphersuites)
    _load_chain(server, settings.cert_file, settings.key_file, settings.key_file_pass)
    if settings.client_cert_file or settings.client_key_file:
        _load_chain(
            client, settings.client_cert_file, settings.client_key_file,
            settings.client_key_file_pass,
        )
    else:
        _load_chain(client, settings.cert_file, settings.key_file, settings.key_file_pass)
    return Contexts(server, client)


def _versions(text: str) -> tuple[ssl.TLSVersion, ssl.TLSVersion]:
    words = (text or DEFAULT_PROTOCOLS).lower().split()
    if not words or any(word not in PROTOCOLS for word in words):
        raise TLSError(
            "Invalid tls-protocols specified. Use a combination of 'TLSv1', 'TLSv1.1', "
            "'TLSv1.2' and 'TLSv1.3'."
        )
    chosen = [PROTOCOLS[word] for word in words]
    return min(chosen), max(chosen)


def _load_ca(context: ssl.SSLContext, settings: TLSSettings) -> None:
    if not (settings.ca_cert_file or settings.ca_cert_dir):
        return
    try:
        context.load_verify_locations(
            cafile=settings.ca_cert_file or None, capath=settings.ca_cert_dir or None
        )
    except (OSError, ValueError) as exc:
        raise TLSError(
            "Failed to configure CA certificate(s) file/directory: "
            f"{settings.ca_cert_file or settings.ca_cert_dir}: {_reason(exc)}"
        ) from None


def _load_chain(context: ssl.SSLContext, cert: str, key: str, password: str) -> None:
    if not cert or not key:
        raise TLSError("tls-client-cert-file and tls-client-key-file must be set together")
    try:
        context.load_cert_chain(cert, key, password or None)
    except (OSError, ValueError) as exc:
        raise TLSError(
            f"Failed to load certificate and private key: {cert}, {key}: {_reason(exc)}"
        ) from None


def _reason(exc: BaseException) -> str:
    if isinstance(exc, ssl.SSLError):
        return str(exc.reason or exc)
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc)


# -- tls-ciphersuites ----------------------------------------------------------------
#
# Python's ssl module has no call for TLS 1.3's cipher suites (OpenSSL's
# SSL_CTX_set_ciphersuites), so it is called through ctypes on the SSL_CTX the context
# wraps: the first field after the object's header in CPython's PySSLContext. The
# result is checked against what the context then reports (`get_ciphers`), so that a
# layout this code does not know fails the setting instead of going unnoticed.


def _set_ciphersuites(context: ssl.SSLContext, suites: str) -> None:
    wanted = [name for name in suites.split(":") if name]
    function = _openssl_function("SSL_CTX_set_ciphersuites")
    if function is None:
        raise TLSError("Failed to configure ciphersuites: not supported by this Python")
    pointer = ctypes.c_void_p.from_address(id(context) + object.__basicsize__).value
    if not wanted or not function(pointer, suites.encode()):
        raise TLSError(f"Failed to configure ciphersuites: {suites}")
    tls13 = {c["name"] for c in context.get_ciphers() if c["protocol"] == "TLSv1.3"}
    if tls13 != set(wanted):
        raise TLSError(f"Failed to configure ciphersuites: {suites}")


def _openssl_function(name: str) -> ctypes._CFuncPtr | None:  # type: ignore[name-defined]
    """`name` from the libssl the ssl module is linked to, or None."""
    try:
        with open("/proc/self/maps") as maps:
            paths = {line.split()[-1] for line in maps if "libssl" in line and "/" in line}
    except OSError:
        return None
    for path in sorted(paths):
        try:
            function = getattr(ctypes.CDLL(path), name)
        except (OSError, AttributeError):
            continue
        function.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
        function.restype = ctypes.c_int
        return function
    return None
