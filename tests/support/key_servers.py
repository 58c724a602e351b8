"""The hosts senders publish their keys on (SNS's ``sns.<region>.amazonaws.com``,
Google's ``www.googleapis.com``), emulated on loopback.

``KeyServer`` is an HTTP proxy (``CONNECT``, as ``HTTPS_PROXY`` makes httpx speak) that
answers every tunnel itself, over TLS with a certificate for the host asked, issued
by a test CA (``SSL_CERT_FILE``). So hookd fetches the very https URL a message
names, the host pin and TLS verification included, and nothing leaves the machine:
production code has no switch for it, only the two environment variables every
HTTP client honours. It counts the requests per URL, and can answer slowly, with
another status, or with too many bytes.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import socket
import socketserver
import ssl
import threading
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

HOSTS = (
    "sns.us-east-1.amazonaws.com",
    "sns.eu-west-1.amazonaws.com",
    "www.googleapis.com",
    "sns.us-east-1.amazonaws.com.evil.example",
)


@dataclass
class Route:
    body: bytes
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _issue(tmp: Path, hosts: Sequence[str]) -> tuple[Path, ssl.SSLContext]:
    """A test CA (written to a file, for ``SSL_CERT_FILE``) and a server context with a
    certificate it issued for ``hosts``."""
    now = dt.datetime.now(dt.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (
        x509.CertificateBuilder()
        .subject_name(_name("hookd test CA"))
        .issuer_name(_name("hookd test CA"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(days=1))
        .not_valid_after(now + dt.timedelta(days=7))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(
            x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    leaf = (
        x509.CertificateBuilder()
        .subject_name(_name(hosts[0]))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(days=1))
        .not_valid_after(now + dt.timedelta(days=7))
        .add_extension(
            x509.SubjectAlternativeName([x509.DNSName(h) for h in hosts]), critical=False
        )
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False
        )
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    ca_file = tmp / "test-ca.pem"
    ca_file.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    chain = tmp / "server.pem"
    chain.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        + leaf.public_bytes(serialization.Encoding.PEM)
    )
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(chain)
    return ca_file, context


class KeyServer:
    """See the module's notes. Use as a context manager; ``env()`` is what points an
    HTTP client (or a ``hookd serve`` process) at it."""

    def __init__(self, tmp: Path, hosts: Sequence[str] = HOSTS) -> None:
        self.ca_file, self._tls = _issue(tmp, hosts)
        self.routes: dict[tuple[str, str], Route] = {}
        self.hits: Counter[str] = Counter()
        self.tunnels: list[str] = []
        self._lock = threading.Lock()
        owner = self

        class Handler(socketserver.StreamRequestHandler):
            def handle(self) -> None:
                owner._tunnel(self.request, self.rfile)

        class Server(socketserver.ThreadingTCPServer):
            daemon_threads = True
            allow_reuse_address = True

        self._server = Server(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def serve(self, url: str, body: bytes, **kwargs: object) -> None:
        """Answer GET ``url`` (``https://host/path?query``) with ``body``."""
        rest = url.removeprefix("https://")
        host, _, target = rest.partition("/")
        self.routes[(host, "/" + target)] = Route(body, **kwargs)  # type: ignore[arg-type]

    def count(self, url: str) -> int:
        with self._lock:
            return self.hits[url]

    def env(self) -> dict[str, str]:
        return {
            "HTTPS_PROXY": self.url,
            "SSL_CERT_FILE": str(self.ca_file),
            "NO_PROXY": "127.0.0.1,localhost",
        }

    def __enter__(self) -> KeyServer:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _tunnel(self, sock: socket.socket, rfile: object) -> None:
        head = _read_head(rfile)
        if not head:
            return
        method, target, _ = head[0].split(" ", 2)
        if method != "CONNECT":
            sock.sendall(b"HTTP/1.1 405 Method Not Allowed\r\ncontent-length: 0\r\n\r\n")
            return
        host = target.rsplit(":", 1)[0]
        with self._lock:
            self.tunnels.append(host)
        sock.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
        try:
            with self._tls.wrap_socket(sock, server_side=True) as tls:
                self._answer(tls, host)
        except (ssl.SSLError, OSError):
            return

    def _answer(self, tls: ssl.SSLSocket, host: str) -> None:
        reader = tls.makefile("rb")
        head = _read_head(reader)
        if not head:
            return
        _, target, _ = head[0].split(" ", 2)
        with self._lock:
            self.hits[f"https://{host}{target}"] += 1
        route = self.routes.get((host, target)) or self.routes.get((host, target.split("?")[0]))
        if route is None:
            route = Route(b"no such key\n", status=404)
        if route.delay_s:
            threading.Event().wait(route.delay_s)
        headers = {"content-length": str(len(route.body)), "connection": "close", **route.headers}
        lines = [f"HTTP/1.1 {route.status} X"] + [f"{k}: {v}" for k, v in headers.items()]
        with contextlib.suppress(OSError):
            tls.sendall(("\r\n".join(lines) + "\r\n\r\n").encode() + route.body)


def _read_head(reader: object) -> list[str]:
    lines: list[str] = []
    while True:
        line = reader.readline(8192)  # type: ignore[attr-defined]
        if not line or line in (b"\r\n", b"\n"):
            return lines
        lines.append(line.decode("latin-1").rstrip("\r\n"))


@contextlib.contextmanager
def key_server(tmp: Path) -> Iterator[KeyServer]:
    with KeyServer(tmp) as server:
        yield server
