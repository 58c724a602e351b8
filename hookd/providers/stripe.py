"""Stripe: ``Stripe-Signature: t=<unix>,v1=<hex>[,v1=<hex>…]`` over ``"{t}." + body``.

Several ``v1`` entries appear while a secret is being rolled; any may match.
Unlike Stripe's SDK, a timestamp too far in the future is refused as well.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from typing import Any

from hookd.errors import PayloadError, SignatureError
from hookd.providers.base import (
    Envelope,
    HeaderMap,
    HmacKey,
    Key,
    Provider,
    SignedHeaders,
    Verified,
    checked_key,
    epoch_to_datetime,
    hmac_sha256_hex,
    match_hmac,
    one_header,
    parse_hex_digest,
    parse_json_object,
    parse_timestamp,
    select_headers,
)
from hookd.providers.reconciling import ReconcileConfig, Reconciling

SIGNATURE_HEADER = "stripe-signature"
KEPT_HEADERS = ("content-type", "user-agent")
# Stripe sends at most a handful of entries; more is a hostile header.
MAX_ENTRIES = 16


def parse_secret(raw: str) -> HmacKey:
    if not raw.startswith("whsec_") or len(raw) <= len("whsec_"):
        raise ValueError("a Stripe signing secret starts with whsec_")
    # Stripe uses the whole secret string, prefix included, as the HMAC key.
    return HmacKey(raw.encode("utf-8"))


def check_headers(headers: HeaderMap, now: float, tolerance_s: int) -> SignedHeaders:
    raw = one_header(headers, SIGNATURE_HEADER)
    entries = raw.split(",")
    if len(entries) > MAX_ENTRIES:
        raise SignatureError("malformed_signature")
    timestamps: list[str] = []
    signatures: list[tuple[str, bytes]] = []
    unparsed = 0
    for entry in entries:
        name, sep, value = entry.strip().partition("=")
        if not sep:
            raise SignatureError("malformed_signature")
        if name == "t":
            timestamps.append(value)
        elif name == "v1":
            # Stripe's Python SDK compares each v1 entry with the expected hex, passing over one
            # that is no digest at all, so it cannot spoil a valid entry beside it. Such an
            # entry never verifies: only a canonical digest is compared.
            try:
                signatures.append(("v1", parse_hex_digest(value)))
            except SignatureError:
                unparsed += 1
    if len(timestamps) != 1:
        raise SignatureError("malformed_timestamp")
    if not signatures:
        raise SignatureError("malformed_signature" if unparsed else "missing_signature")
    ts = parse_timestamp(timestamps[0], now, tolerance_s)
    return SignedHeaders(timestamp=ts, prefix=f"{ts}.".encode(), signatures=tuple(signatures))


def verify(signed: SignedHeaders, body: bytes, keys: Sequence[Key]) -> Verified:
    return match_hmac("stripe-v1", signed, body, keys, "v1")


def envelope(headers: HeaderMap, body: bytes, verified: Verified) -> Envelope:
    payload = parse_json_object(body)
    event_id = checked_key(payload.get("id"), "event id")
    if not event_id.startswith("evt_"):
        raise PayloadError("malformed_payload", "event id does not start with evt_")
    kind = payload.get("type")
    return Envelope(
        dedupe_key=event_id,
        type=kind if isinstance(kind, str) else None,
        occurred_at=epoch_to_datetime(payload.get("created")),
        headers=select_headers(headers, KEPT_HEADERS),
    )


def stripe_headers(secret: str, body: bytes, now: int) -> dict[str, str]:
    """The headers Stripe sends with ``body`` at ``now``, signed with ``secret``."""
    signature = hmac_sha256_hex(secret.encode(), f"{now}.".encode() + body)
    return {"Stripe-Signature": f"t={now},v1={signature}", "Content-Type": "application/json"}


def sample_event(secret: str, seq: int, now: int) -> tuple[dict[str, str], bytes]:
    payload: dict[str, Any] = {
        "id": f"evt_test_{uuid.uuid4().hex[:24]}",
        "object": "event",
        "type": "payment_intent.succeeded",
        "created": now,
        "livemode": False,
        "data": {"object": {"id": f"pi_test_{seq}", "object": "payment_intent", "amount": 1000}},
    }
    body = json.dumps(payload).encode()
    return stripe_headers(secret, body, now), body


PROVIDER = Provider(
    name="stripe",
    # Stripe retries for up to 3 days; its events API lists events for 30 days.
    redelivery_horizon_days=30,
    parse_secret=parse_secret,
    check_headers=check_headers,
    verify=verify,
    envelope=envelope,
    sample_event=sample_event,
    # A token is all Stripe's events API needs: the shared keys, none of its own.
    reconcile=Reconciling(
        settings=ReconcileConfig,
        api_url="https://api.stripe.com",
        adapter="reconcile.providers.stripe:StripeAdapter",
    ),
)
