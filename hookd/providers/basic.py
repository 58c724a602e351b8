"""``provider = "basic"``: senders that can only do HTTP Basic authentication.

Each of the source's ``secrets`` is one credential, ``user:password`` (the user has no
colon; the password may). A request must carry ``Authorization: Basic
base64(user:password)`` matching one of them: the user and the password are each
compared as their SHA-256 in constant time, and both must match the same credential.
Missing or wrong credentials are answered 401 with ``WWW-Authenticate: Basic
realm="hookd"``, as RFC 7617 asks. Nothing covers the body: anyone who has seen one
request can send another, so prefer a signing sender where there is a choice.

Where the dedupe key and the type are is set per source, as for ``token`` and ``hmac``
(``[sources.verify]``: ``dedupe = "header:<Name>" | "json:<path>" | "body_sha256"``,
``type_header`` or ``type_json``).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from collections.abc import Sequence

from pydantic import field_validator

from hookd.errors import SignatureError
from hookd.providers.base import (
    Configurable,
    Handwritten,
    HeaderMap,
    HmacKey,
    Key,
    Provider,
    SignedHeaders,
    Verified,
    one_header,
)
from hookd.providers.generic import Handshake, SourceSettings, envelope_for, sample_for

NAME = "basic"
HEADER = "authorization"
REALM = 'Basic realm="hookd"'
# A credential longer than this is no one's (RFC 7617 sets no limit; senders use short ones).
MAX_CREDENTIAL_BYTES = 1024


class BasicSettings(SourceSettings):
    """``[sources.verify]`` of a ``basic`` source."""

    @field_validator("handshake")
    @classmethod
    def _handshake(cls, value: Handshake | None) -> Handshake | None:
        if value is not None:
            raise ValueError("basic sources answer no handshake")
        return value


def _digests(user: bytes, password: bytes) -> bytes:
    """What is compared: the SHA-256 of the user and of the password, side by side, so
    that the time of a comparison depends on neither's bytes nor length."""
    return hashlib.sha256(user).digest() + hashlib.sha256(password).digest()


def parse_secret(raw: str) -> HmacKey:
    user, sep, password = raw.partition(":")
    if not sep or not user or not password:
        raise ValueError('a basic credential is "user:password" (both non-empty)')
    if not (raw.isprintable() and len(raw.encode("utf-8")) <= MAX_CREDENTIAL_BYTES):
        raise ValueError("a basic credential is printable text of at most 1024 bytes")
    return HmacKey(_digests(user.encode("utf-8"), password.encode("utf-8")))


def check_headers(headers: HeaderMap, now: float, tolerance_s: int) -> SignedHeaders:
    scheme, _, encoded = one_header(headers, HEADER).partition(" ")
    if scheme.lower() != "basic" or len(encoded) > 2 * MAX_CREDENTIAL_BYTES:
        raise SignatureError("malformed_signature")
    try:
        decoded = base64.b64decode(encoded.strip(), validate=True)
    except (binascii.Error, ValueError):
        raise SignatureError("malformed_signature") from None
    user, sep, password = decoded.partition(b":")
    if not sep:
        raise SignatureError("malformed_signature")
    return SignedHeaders(None, b"", (("basic", _digests(user, password)),))


def verify(signed: SignedHeaders, body: bytes, keys: Sequence[Key]) -> Verified:
    """Both halves compared in full for every credential: user and password must match
    the same one."""
    presented = signed.signatures[0][1]
    for index, key in enumerate(keys):
        if not isinstance(key, HmacKey):
            continue
        user_ok = hmac.compare_digest(key.key[:32], presented[:32])
        password_ok = hmac.compare_digest(key.key[32:], presented[32:])
        if user_ok & password_ok:
            return Verified("basic", index, None)
    raise SignatureError("bad_signature")


def authorization(secret: str) -> str:
    """The ``Authorization`` value a sender with credential ``user:password`` sends."""
    return "Basic " + base64.b64encode(secret.encode("utf-8")).decode("ascii")


def bind(settings: BasicSettings) -> Provider:
    """The ``basic`` provider as one source's settings make it."""

    def sample_event(secret: str, seq: int, now: int) -> tuple[dict[str, str], bytes]:
        headers, body = sample_for(settings, seq, now)
        return {**headers, "Authorization": authorization(secret)}, body

    return Provider(
        name=NAME,
        scheme=Handwritten(parse_secret, check_headers, verify),
        envelope=envelope_for(settings, ()),
        sample_event=sample_event,
        configurable=CONFIGURABLE,
        unauthorized_headers=(("www-authenticate", REALM),),
    )


CONFIGURABLE = Configurable(settings=BasicSettings, bind=bind)
# What the registry holds: the scheme of example settings. A source is always served
# by ``bind`` of its own table.
EXAMPLE = BasicSettings(dedupe="body_sha256")
PROVIDER = bind(EXAMPLE)
