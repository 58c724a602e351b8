"""GitHub: ``X-Hub-Signature-256: sha256=<hex HMAC of the raw body>``.

GitHub signs no timestamp, so replays are bounded by deduplication on
``X-GitHub-Delivery`` (redeliveries keep the same GUID). The legacy SHA-1
``X-Hub-Signature`` header is not accepted.
"""

from __future__ import annotations

from collections.abc import Sequence
from urllib.parse import parse_qs

from hookd.errors import PayloadError, SignatureError
from hookd.providers.base import (
    Envelope,
    HeaderMap,
    Key,
    Provider,
    SignedHeaders,
    Verified,
    checked_key,
    match_hmac,
    media_type,
    one_header,
    optional_header,
    parse_hex_digest,
    parse_json_object,
    plain_secret,
    select_headers,
)

SIGNATURE_HEADER = "x-hub-signature-256"
KEPT_HEADERS = (
    "x-github-delivery",
    "x-github-event",
    "x-github-hook-id",
    "x-github-hook-installation-target-id",
    "x-github-hook-installation-target-type",
    "content-type",
    "user-agent",
)


def check_headers(headers: HeaderMap, now: int, tolerance_s: int) -> SignedHeaders:
    raw = one_header(headers, SIGNATURE_HEADER)
    scheme, sep, digest = raw.partition("=")
    if not sep or scheme != "sha256":
        raise SignatureError("malformed_signature")
    return SignedHeaders(
        timestamp=None, prefix=b"", signatures=(("sha256", parse_hex_digest(digest)),)
    )


def verify(signed: SignedHeaders, body: bytes, keys: Sequence[Key]) -> Verified:
    return match_hmac("github-sha256", signed, body, keys, "sha256")


def envelope(headers: HeaderMap, body: bytes, verified: Verified) -> Envelope:
    delivery = checked_key(optional_header(headers, "x-github-delivery"), "X-GitHub-Delivery")
    event = checked_key(optional_header(headers, "x-github-event"), "X-GitHub-Event")
    if media_type(headers) == "application/x-www-form-urlencoded":
        try:
            fields = parse_qs(body.decode("utf-8"), strict_parsing=True, errors="strict")
        except (UnicodeDecodeError, ValueError):
            raise PayloadError("malformed_payload", "form body cannot be parsed") from None
        payloads = fields.get("payload", [])
        if len(payloads) != 1:
            raise PayloadError("malformed_payload", "form body needs exactly one payload field")
        payload = parse_json_object(payloads[0])
    else:
        payload = parse_json_object(body)
    action = payload.get("action")
    kind = f"{event}.{action}" if isinstance(action, str) and action else event
    return Envelope(
        dedupe_key=delivery,
        type=kind,
        occurred_at=None,
        headers=select_headers(headers, KEPT_HEADERS),
    )


PROVIDER = Provider(
    name="github",
    parse_secret=plain_secret,
    check_headers=check_headers,
    verify=verify,
    envelope=envelope,
)
