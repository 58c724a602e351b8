"""Stripe: ``Stripe-Signature: t=<unix>,v1=<hex>[,v1=<hex>…]`` over ``"{t}." + body``.

Several ``v1`` entries appear while a secret is being rolled; any may match.
Unlike Stripe's SDK, a timestamp too far in the future is refused as well.
"""

from __future__ import annotations

import json
import uuid
from typing import Annotated

from hookd.providers.base import (
    BodySigner,
    HmacKey,
    JsonEnvelope,
    Provider,
    epoch_to_datetime,
    string_or_none,
)
from hookd.providers.reconciling import EventNames, ReconcileConfig, Reconciling, matching
from hookd.providers.signatures import HmacEntries, hmac_sha256_hex

SIGNATURE_HEADER = "stripe-signature"


def parse_secret(raw: str) -> HmacKey:
    if not raw.startswith("whsec_") or len(raw) <= len("whsec_"):
        raise ValueError("a Stripe signing secret starts with whsec_")
    # Stripe uses the whole secret string, prefix included, as the HMAC key.
    return HmacKey(raw.encode("utf-8"))


def stripe_headers(secret: str, body: bytes, now: int) -> dict[str, str]:
    """The headers Stripe sends with ``body`` at ``now``, signed with ``secret``."""
    signature = hmac_sha256_hex(secret.encode(), f"{now}.".encode() + body)
    return {"Stripe-Signature": f"t={now},v1={signature}", "Content-Type": "application/json"}


def sample_event(secret: str, seq: int, now: int) -> tuple[dict[str, str], bytes]:
    payload = {
        "id": f"evt_test_{uuid.uuid4().hex[:24]}",
        "object": "event",
        "type": "payment_intent.succeeded",
        "created": now,
        "livemode": False,
        "data": {"object": {"id": f"pi_test_{seq}", "object": "payment_intent", "amount": 1000}},
    }
    body = json.dumps(payload).encode()
    return stripe_headers(secret, body, now), body


def sign_body(secret: str, body: bytes, _type: str | None, now: int) -> dict[str, str]:
    return stripe_headers(secret, body, now)


class StripeReconcile(ReconcileConfig):
    """``[sources.reconcile]`` of a Stripe source: the token, and what the registration
    check (each run, `hookd sources check`) compares the webhook endpoint with."""

    # The endpoint ("we_…"); without it, the one whose url is the source's public_url.
    webhook_endpoint: Annotated[
        str | None, matching(r"we_[A-Za-z0-9]{1,64}", 'must be a webhook endpoint ID ("we_…")')
    ] = None
    # Event types the endpoint must send (one enabled for "*" sends them all).
    expect_events: EventNames = ()
    # The API version the endpoint must render events in ("2024-06-20").
    expect_api_version: Annotated[
        str | None,
        matching(r"\d{4}-\d{2}-\d{2}(\.[a-z]+)?", 'must be a Stripe API version ("2024-06-20")'),
    ] = None
    check_registration: bool = True


PROVIDER = Provider(
    name="stripe",
    # Stripe retries for up to 3 days; its events API lists events for 30 days.
    redelivery_horizon_days=30,
    # Stripe's Python SDK compares each v1 entry with the expected hex, passing over one
    # that is no digest at all, as HmacEntries does.
    scheme=HmacEntries(
        "stripe-v1",
        SIGNATURE_HEADER,
        ",",
        "v1",
        timestamp="t",
        signed_prefix="{ts}.",
        parse_secret=parse_secret,
    ),
    envelope=JsonEnvelope(
        key=("id", "event id"),
        type=("type", string_or_none),
        time=("created", epoch_to_datetime),
        key_prefix="evt_",
    ),
    sample_event=sample_event,
    body_signer=BodySigner(sign_body, type_path=("type",)),
    # A token is all Stripe's events API needs; its own keys are the registration check's.
    reconcile=Reconciling(
        settings=StripeReconcile,
        api_url="https://api.stripe.com",
        adapter="reconcile.providers.stripe:StripeAdapter",
        # Listed at `created`; delivered within seconds as a rule, but an endpoint's
        # deliveries queue behind each other in bursts: five minutes.
        settle_s=300.0,
        registration=True,
        # A thin event's object, from its related_object.url ([sources.order] fetch).
        objects=True,
    ),
)
