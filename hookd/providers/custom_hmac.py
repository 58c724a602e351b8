"""``provider = "hmac"``: any sender that signs with HMAC, its scheme set per source.

``[sources.verify]`` says which header carries the signature (after an optional
``prefix`` such as ``sha256=``), the hash (``sha1``, ``sha256``, ``sha512``), its
encoding (lower-case ``hex`` or canonical ``base64``) and what is signed:

- ``body``: the raw body;
- ``timestamp_body``: ``{timestamp}{separator}{body}``;
- ``method_url_body_timestamp``: ``POST{sep}{public_url}{sep}{body}{sep}{timestamp}``,
  where ``public_url`` is the URL the sender posts to (hookd behind a proxy cannot
  know it) and the method is always POST, the only one the receiver takes.

The timestamp comes from ``timestamp_header`` and must fall inside the source's
``tolerance_s``; a timestamp that is not signed proves nothing, so it is only taken
with a mode that signs it. ``handshake`` answers a registration challenge (Dropbox's,
X's CRC, Microsoft Graph's; see ``generic``).
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Sequence
from typing import Literal

from pydantic import field_validator

from hookd.providers.base import (
    Configurable,
    Handwritten,
    HeaderMap,
    Key,
    Provider,
    SignedHeaders,
    Verified,
    one_header,
)
from hookd.providers.generic import (
    HeaderName,
    SourceSettings,
    challenge_for,
    envelope_for,
    sample_for,
)
from hookd.providers.signatures import (
    after_prefix,
    hmac_digest,
    matching_key,
    parse_b64_digest,
    parse_hex_digest,
    parse_timestamp,
    plain_secret,
)

NAME = "hmac"
# The receiver answers every other method with 405 before a verifier runs.
METHOD = "POST"
Algorithm = Literal["sha1", "sha256", "sha512"]
Signed = Literal["body", "timestamp_body", "method_url_body_timestamp"]


class HmacSettings(SourceSettings):
    """``[sources.verify]`` of an ``hmac`` source."""

    header: HeaderName
    prefix: str = ""
    algorithm: Algorithm = "sha256"
    encoding: Literal["hex", "base64"] = "hex"
    signed: Signed = "body"
    separator: str = "."
    timestamp_header: HeaderName | None = None
    public_url: str | None = None

    @field_validator("public_url")
    @classmethod
    def _public_url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("http://", "https://")):
            raise ValueError("must be an http:// or https:// URL")
        return value

    def incomplete(self) -> tuple[str, str] | None:
        timed = self.signed != "body"
        if timed and self.timestamp_header is None:
            return "timestamp_header", f'is required with signed = "{self.signed}"'
        if not timed and self.timestamp_header is not None:
            return "timestamp_header", 'is only checked when signed (signed = "timestamp_body")'
        url_mode = self.signed == "method_url_body_timestamp"
        if url_mode and self.public_url is None:
            return "public_url", 'is required with signed = "method_url_body_timestamp"'
        if not url_mode and self.public_url is not None:
            return "public_url", 'is only used with signed = "method_url_body_timestamp"'
        return super().incomplete()


def bind(settings: HmacSettings) -> Provider:
    """The ``hmac`` provider as one source's settings make it."""
    algorithm = settings.algorithm
    size = hashlib.new(algorithm).digest_size
    sep = settings.separator

    # Lower-case hex only: an upper-case copy decodes the same, so it would let a changed
    # header verify.
    decode = parse_hex_digest if settings.encoding == "hex" else parse_b64_digest

    def check_headers(headers: HeaderMap, now: float, tolerance_s: int) -> SignedHeaders:
        raw = after_prefix(one_header(headers, settings.header), settings.prefix)
        signature = decode(raw, size)
        if settings.timestamp_header is None:
            return SignedHeaders(None, b"", (("hmac", signature),))
        ts = parse_timestamp(one_header(headers, settings.timestamp_header), now, tolerance_s)
        if settings.signed == "timestamp_body":
            head = f"{ts}{sep}"
        else:
            head = f"{METHOD}{sep}{settings.public_url}{sep}"
        return SignedHeaders(ts, head.encode(), (("hmac", signature),))

    def tail(signed: SignedHeaders) -> bytes:
        if settings.signed == "method_url_body_timestamp":
            return f"{sep}{signed.timestamp}".encode()
        return b""

    def verify(signed: SignedHeaders, body: bytes, keys: Sequence[Key]) -> Verified:
        candidates = [candidate for _, candidate in signed.signatures]
        message = (signed.prefix, body, tail(signed))
        index = matching_key(keys, candidates, message, algorithm=algorithm)
        return Verified(f"hmac-{algorithm}", index, signed.timestamp)

    def sample_event(secret: str, seq: int, now: int) -> tuple[dict[str, str], bytes]:
        headers, body = sample_for(settings, seq, now)
        return {**headers, **sign(settings, secret, body, now)}, body

    kept = () if settings.timestamp_header is None else (settings.timestamp_header,)
    return Provider(
        name=NAME,
        scheme=Handwritten(plain_secret, check_headers, verify),
        envelope=envelope_for(settings, kept),
        sample_event=sample_event,
        configurable=CONFIGURABLE,
        challenge=challenge_for(settings),
    )


def sign(settings: HmacSettings, secret: str, body: bytes, now: int) -> dict[str, str]:
    """The headers such a sender adds to ``body`` at ``now``."""
    sep = settings.separator
    if settings.signed == "body":
        message = body
    elif settings.signed == "timestamp_body":
        message = f"{now}{sep}".encode() + body
    else:
        url = settings.public_url
        message = f"{METHOD}{sep}{url}{sep}".encode() + body + f"{sep}{now}".encode()
    digest = hmac_digest(secret.encode(), message, algorithm=settings.algorithm)
    encoded = digest.hex() if settings.encoding == "hex" else base64.b64encode(digest).decode()
    headers = {settings.header: settings.prefix + encoded}
    if settings.timestamp_header is not None:
        headers[settings.timestamp_header] = str(now)
    return headers


CONFIGURABLE = Configurable(settings=HmacSettings, bind=bind)
# What the registry holds: the scheme of example settings (a GitHub-like sha256= hex
# header over the body). A source is always served by ``bind`` of its own table.
EXAMPLE = HmacSettings(header="X-Signature", prefix="sha256=", dedupe="body_sha256")
PROVIDER = bind(EXAMPLE)
