"""Keys the way senders publish them, made here: an RSA key and a self-signed X.509
certificate (an SNS signing certificate), and a JWKS (Google's token keys).

Each key is made once per process and kept (RSA key generation is the slow part)."""

from __future__ import annotations

import base64
import datetime as dt
import json
from functools import cache

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID


@cache
def rsa_key(name: str) -> rsa.RSAPrivateKey:
    """The RSA key called ``name`` (2048 bits), the same one for the whole run."""
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def private_pem(name: str) -> str:
    return (
        rsa_key(name)
        .private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        .decode()
    )


@cache
def certificate_pem(name: str, common_name: str = "sns.amazonaws.com") -> bytes:
    """A self-signed certificate of ``rsa_key(name)``, as SNS's SigningCertURL serves one."""
    key = rsa_key(name)
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(days=1))
        .not_valid_after(now + dt.timedelta(days=30))
        .sign(key, hashes.SHA256())
    )
    return cert.public_bytes(serialization.Encoding.PEM)


def _b64url_int(value: int) -> str:
    raw = value.to_bytes((value.bit_length() + 7) // 8, "big")
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def jwk(name: str, kid: str) -> dict[str, str]:
    numbers = rsa_key(name).public_key().public_numbers()
    return {
        "kty": "RSA",
        "alg": "RS256",
        "use": "sig",
        "kid": kid,
        "n": _b64url_int(numbers.n),
        "e": _b64url_int(numbers.e),
    }


def jwks(*entries: tuple[str, str]) -> bytes:
    """A JWKS document of the keys (name, kid), as Google publishes its token keys."""
    return json.dumps({"keys": [jwk(name, kid) for name, kid in entries]}).encode()
