"""Square: ``x-square-hmacsha256-signature: <base64 HMAC-SHA256>`` over the notification
URL followed by the raw body, keyed with the webhook subscription's signature key.

The notification URL is the one registered with Square, which hookd behind a proxy
cannot know, so a Square source sets ``public_url`` and is served by the provider bound
to it (``with_public_url``). Square signs no timestamp: replays are bounded by
deduplication on ``event_id``, which Square documents as the idempotency value of a
notification and keeps across its retries. The legacy SHA-1 ``x-square-signature``
header is not accepted.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import hmac
import json
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from hookd.errors import SignatureError
from hookd.providers.base import (
    Envelope,
    HeaderMap,
    HmacKey,
    Key,
    Provider,
    SignedHeaders,
    Verified,
    b64decode_strict,
    checked_key,
    match_hmac,
    one_header,
    parse_json_object,
    select_headers,
)
from hookd.providers.reconcile_settings import SQUARE_API_URL, SquareReconcile
from hookd.providers.reconciling import Reconciling
from hookd.providers.rfc3339 import parse_rfc3339

NAME = "square"
SCHEME = "square-hmacsha256"
SIGNATURE_HEADER = "x-square-hmacsha256-signature"
KEPT_HEADERS = (
    "square-environment",
    "square-initial-delivery-timestamp",
    "square-retry-number",
    "square-retry-reason",
    "content-type",
    "user-agent",
)
DIGEST_BYTES = 32
# What the registry holds is bound to this placeholder; a source is always served by
# the provider bound to its own ``public_url`` (hookd.sources refuses one without).
EXAMPLE_URL = "https://hookd.example/hooks/square"


def parse_secret(raw: str) -> HmacKey:
    if not raw:
        raise ValueError("secret is empty")
    if not (raw.isascii() and raw.isprintable()) or any(c.isspace() for c in raw):
        raise ValueError(
            "a Square signature key is the subscription's Signature Key: printable "
            "ASCII without spaces"
        )
    return HmacKey(raw.encode("utf-8"))


def envelope(headers: HeaderMap, body: bytes, verified: Verified) -> Envelope:
    payload = parse_json_object(body)
    kind = payload.get("type")
    return Envelope(
        dedupe_key=checked_key(payload.get("event_id"), "event_id"),
        type=kind if isinstance(kind, str) and kind else None,
        occurred_at=parse_rfc3339(payload.get("created_at")),
        headers=select_headers(headers, KEPT_HEADERS),
    )


def square_signature(secret: str, url: str, body: bytes) -> str:
    """The header value Square sends with ``body`` posted to ``url``."""
    mac = hmac.new(secret.encode("utf-8"), url.encode("utf-8") + body, hashlib.sha256)
    return base64.b64encode(mac.digest()).decode("ascii")


def rfc3339(moment: int) -> str:
    return datetime.fromtimestamp(moment, UTC).isoformat(timespec="microseconds")[:-6] + "Z"


def bind(url: str) -> Provider:
    """The Square provider for a source whose notification URL is ``url``."""
    prefix = url.encode("utf-8")

    def check_headers(headers: HeaderMap, now: float, tolerance_s: int) -> SignedHeaders:
        digest = b64decode_strict(one_header(headers, SIGNATURE_HEADER))
        if len(digest) != DIGEST_BYTES:
            raise SignatureError("malformed_signature")
        return SignedHeaders(timestamp=None, prefix=prefix, signatures=(("sha256", digest),))

    def verify(signed: SignedHeaders, body: bytes, keys: Sequence[Key]) -> Verified:
        return match_hmac(SCHEME, signed, body, keys, "sha256")

    def sample_event(secret: str, seq: int, now: int) -> tuple[dict[str, str], bytes]:
        payment_id = uuid.uuid4().hex[:22].upper()
        when = rfc3339(now)
        payload: dict[str, Any] = {
            "merchant_id": "MLEFBHHSJGVHD",
            "type": "payment.updated",
            "event_id": str(uuid.uuid4()),
            "created_at": when,
            "data": {
                "type": "payment",
                "id": payment_id,
                "object": {
                    "payment": {
                        "id": payment_id,
                        "amount_money": {"amount": 100 * seq, "currency": "USD"},
                        "status": "COMPLETED",
                        "source_type": "CARD",
                        "location_id": "L88917AVBK2S5",
                        "order_id": uuid.uuid4().hex[:24].upper(),
                        "created_at": when,
                        "updated_at": when,
                        "version": 3,
                    }
                },
            },
        }
        body = json.dumps(payload, separators=(",", ":")).encode()
        headers = {
            "x-square-hmacsha256-signature": square_signature(secret, url, body),
            "square-environment": "Sandbox",
            "square-initial-delivery-timestamp": when,
            "content-type": "application/json",
            "user-agent": "Square Connect v2",
        }
        return headers, body

    return Provider(
        name=NAME,
        parse_secret=parse_secret,
        check_headers=check_headers,
        verify=verify,
        envelope=envelope,
        sample_event=sample_event,
    )


PROVIDER = dataclasses.replace(
    bind(EXAMPLE_URL),
    # Square retries for 72 hours; its Events API lists events of the past 28 days.
    redelivery_horizon_days=28,
    with_public_url=bind,
    # Square cannot send a webhook again: a missing event is stored from the list.
    reconcile=Reconciling(
        settings=SquareReconcile,
        api_url=SQUARE_API_URL,
        adapter="reconcile.providers.square:SquareAdapter",
        # Square sends within seconds as a rule and promises no bound: five minutes.
        settle_s=300.0,
    ),
)
