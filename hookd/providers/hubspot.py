"""HubSpot (signature v3): ``X-HubSpot-Signature-v3`` = base64 HMAC-SHA256 (the app's
client secret) of ``method + URI + body + timestamp``.

``X-HubSpot-Request-Timestamp`` is in milliseconds since the epoch and is refused
outside the source's ``tolerance_s`` (HubSpot says five minutes, hookd's default);
unlike HubSpot's own library, a timestamp too far in the future is refused as well.
The method is always POST, the only one the receiver takes for a webhook. The URI is
the full URL HubSpot posts to, query string included, with the characters HubSpot's
table lists (``: / ? @ ! $ ' ( ) * , ;``) URL-decoded and every other escape left as it
is. hookd behind a proxy cannot know that URL, so a hubspot source sets ``public_url``
and the provider is bound to it.

A request carries a JSON array of up to 100 events, and HubSpot retries the request
with each event's ``attemptNumber`` increased, so neither the raw body nor an event's
``eventId`` (which HubSpot does not promise to be unique) identifies a delivery. The
dedupe key is a digest of the events with ``attemptNumber`` left out, in an order of
their own: a retry of the same events is a duplicate, whatever their order.
"""

from __future__ import annotations

import hashlib
import json
import re
import secrets
from collections.abc import Sequence
from functools import partial

from hookd.errors import PayloadError, SignatureError
from hookd.providers.base import (
    Envelope,
    Handwritten,
    HeaderMap,
    JsonObject,
    Key,
    Provider,
    SignedHeaders,
    Verified,
    bounded_type,
    checked_key,
    compact_json,
    epoch_to_datetime,
    one_header,
    parse_json_array,
    select_headers,
)
from hookd.providers.signatures import (
    check_window,
    hmac_b64,
    hmac_secret,
    matching_key,
    parse_b64_digest,
)

NAME = "hubspot"
SIGNATURE_HEADER = "x-hubspot-signature-v3"
TIMESTAMP_HEADER = "x-hubspot-request-timestamp"
KEPT_HEADERS = ("x-hubspot-request-timestamp", "content-type", "user-agent")
# The receiver answers every other method with 405 before a verifier runs.
METHOD = "POST"
# What the registry's entry is bound to; a source is always bound to its own public_url.
EXAMPLE_URL = "https://hookd.example/hooks/hubspot"
# The escapes HubSpot decodes in the URI before signing; every other one stays encoded.
DECODED = {
    "%3A": ":",
    "%2F": "/",
    "%3F": "?",
    "%40": "@",
    "%21": "!",
    "%24": "$",
    "%27": "'",
    "%28": "(",
    "%29": ")",
    "%2A": "*",
    "%2C": ",",
    "%3B": ";",
}
ESCAPE = re.compile("|".join(DECODED), re.IGNORECASE)
# Milliseconds: thirteen digits today; fifteen reach the year 33658.
MAX_MILLIS_DIGITS = 15
MAX_EVENTS = 1000
IGNORED_FIELDS = frozenset({"attemptNumber"})


def signed_uri(url: str) -> str:
    """``url`` as HubSpot signs it: the escapes of its table decoded, in one pass."""
    return ESCAPE.sub(lambda match: DECODED[match.group(0).upper()], url)


def parse_millis(raw: str, now: float, tolerance_s: int) -> int:
    """Milliseconds since the epoch, inside ``now ± tolerance_s`` (edges inclusive).
    Only the decimal digits HubSpot writes: no sign, no leading zero, no fraction, since
    the exact text is signed after the body."""
    if (
        not (raw.isascii() and raw.isdigit())
        or len(raw) > MAX_MILLIS_DIGITS
        or (raw.startswith("0") and raw != "0")
    ):
        raise SignatureError("malformed_timestamp")
    millis = int(raw)
    check_window(millis, now, tolerance_s, per_second=1000)
    return millis


def bind(public_url: str) -> Provider:
    """The HubSpot provider for a source whose webhooks HubSpot posts to ``public_url``."""
    head = (METHOD + signed_uri(public_url)).encode("utf-8")

    def check_headers(headers: HeaderMap, now: float, tolerance_s: int) -> SignedHeaders:
        raw_ts = one_header(headers, TIMESTAMP_HEADER)
        signature = parse_b64_digest(one_header(headers, SIGNATURE_HEADER))
        millis = parse_millis(raw_ts, now, tolerance_s)
        return SignedHeaders(timestamp=millis, prefix=head, signatures=(("v3", signature),))

    def verify(signed: SignedHeaders, body: bytes, keys: Sequence[Key]) -> Verified:
        if signed.timestamp is None:
            raise SignatureError("malformed_timestamp")
        tail = str(signed.timestamp).encode("ascii")
        candidates = [sig for version, sig in signed.signatures if version == "v3"]
        index = matching_key(keys, candidates, (signed.prefix, body, tail))
        return Verified("hubspot-v3", index, signed.timestamp // 1000)

    return Provider(
        name=NAME,
        # HubSpot retries up to 10 times over 24 hours.
        redelivery_horizon_days=1,
        scheme=Handwritten(hmac_secret("a HubSpot client secret is empty"), check_headers, verify),
        envelope=envelope,
        sample_event=partial(sample_for, public_url),
        with_public_url=bind,
    )


def batch_key(events: Sequence[JsonObject]) -> str:
    """``batch:<sha256>`` of the events without their ``attemptNumber``, sorted."""
    try:
        canonical = sorted(
            json.dumps(
                {k: v for k, v in event.items() if k not in IGNORED_FIELDS},
                sort_keys=True,
                ensure_ascii=False,
                separators=(",", ":"),
            )
            for event in events
        )
    except (ValueError, RecursionError):
        raise PayloadError("malformed_payload", "events cannot be read") from None
    digest = hashlib.sha256("\n".join(canonical).encode("utf-8", "surrogatepass")).hexdigest()
    return f"batch:{digest}"


def envelope(headers: HeaderMap, body: bytes, verified: Verified) -> Envelope:
    events = parse_json_array(body, MAX_EVENTS)
    kinds = {event.get("subscriptionType") for event in events}
    kind = bounded_type(kinds.pop()) if len(kinds) == 1 else None
    moments = [
        moment
        for moment in (epoch_to_datetime(_seconds(event.get("occurredAt"))) for event in events)
        if moment is not None
    ]
    return Envelope(
        dedupe_key=checked_key(batch_key(events), "events digest"),
        type=kind,
        occurred_at=min(moments) if moments else None,
        headers=select_headers(headers, KEPT_HEADERS),
    )


def _seconds(millis: object) -> float | None:
    if isinstance(millis, bool) or not isinstance(millis, int | float):
        return None
    return millis / 1000


def hubspot_signature(secret: str, uri: str, body: bytes, millis: int) -> str:
    """The ``X-HubSpot-Signature-v3`` of ``body`` posted to ``uri`` (already decoded)."""
    return hmac_b64(secret.encode("utf-8"), f"{METHOD}{uri}".encode(), body, str(millis).encode())


def sample_for(url: str, secret: str, seq: int, now: int) -> tuple[dict[str, str], bytes]:
    """A contact property change, signed for ``url`` as HubSpot signs it."""
    millis = now * 1000
    events = [
        {
            "eventId": 1 + secrets.randbelow(2**31 - 1),
            "subscriptionId": 2_417_091,
            "portalId": 62515,
            "appId": 54321,
            "occurredAt": millis,
            "subscriptionType": "contact.propertyChange",
            "attemptNumber": 0,
            "objectId": 1_000_000 + seq,
            "propertyName": "email",
            "propertyValue": f"send-test-{seq}@example.com",
            "changeSource": "CRM",
            "sourceId": "userId:1234567",
        }
    ]
    body = compact_json(events)
    headers = {
        "X-HubSpot-Signature-v3": hubspot_signature(secret, signed_uri(url), body, millis),
        "X-HubSpot-Request-Timestamp": str(millis),
        "Content-Type": "application/json",
        "User-Agent": "HubSpot Connect 2.0 (hookd send-test)",
    }
    return headers, body


PROVIDER = bind(EXAMPLE_URL)
