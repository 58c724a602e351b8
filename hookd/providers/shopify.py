"""Shopify: ``X-Shopify-Hmac-Sha256: <base64 HMAC-SHA256 of the raw body>``, keyed with
the app's client secret (the key an admin-created webhook shows, for those).

Shopify signs no timestamp and no header. Duplicates are recognised by
``X-Shopify-Event-Id``, the header Shopify's "Ignore duplicate webhooks" guide names
("the same value across more than one webhook indicates a duplicate"); a delivery
without it (older API versions) falls back to ``X-Shopify-Webhook-Id``, which Shopify's
own app library calls the webhook's idempotency key. Either is scoped by the topic, so
that two topics fired by one merchant action can never collapse into one event.

The body is never parsed: a subscription may ask for XML, and nothing hookd keeps
comes from it.
"""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime

from hookd.providers.base import (
    Envelope,
    HeaderMap,
    Provider,
    Verified,
    checked_key,
    optional_header,
    select_headers,
)
from hookd.providers.rfc3339 import parse_iso8601
from hookd.providers.signatures import HmacHeader, hmac_b64, hmac_secret

NAME = "shopify"
SCHEME = "shopify-sha256"
SIGNATURE_HEADER = "x-shopify-hmac-sha256"
TOPIC_HEADER = "x-shopify-topic"
EVENT_ID_HEADER = "x-shopify-event-id"
WEBHOOK_ID_HEADER = "x-shopify-webhook-id"
TRIGGERED_AT_HEADER = "x-shopify-triggered-at"
KEPT_HEADERS = (
    TOPIC_HEADER,
    "x-shopify-shop-domain",
    "x-shopify-api-version",
    WEBHOOK_ID_HEADER,
    EVENT_ID_HEADER,
    TRIGGERED_AT_HEADER,
    "x-shopify-sub-topic",
    "x-shopify-name",
    "content-type",
    "user-agent",
)
SAMPLE_API_VERSION = "2025-07"
SAMPLE_SHOP = "hookd-test.myshopify.com"


def dedupe_key(headers: HeaderMap) -> str:
    """``{topic}:{X-Shopify-Event-Id}``, or the webhook id when there is no event id."""
    topic = checked_key(optional_header(headers, TOPIC_HEADER), "X-Shopify-Topic")
    event_id = optional_header(headers, EVENT_ID_HEADER)
    if event_id:
        return checked_key(f"{topic}:{event_id}", "X-Shopify-Event-Id")
    webhook_id = checked_key(optional_header(headers, WEBHOOK_ID_HEADER), "X-Shopify-Webhook-Id")
    return checked_key(f"{topic}:{webhook_id}", "X-Shopify-Webhook-Id")


def envelope(headers: HeaderMap, body: bytes, verified: Verified) -> Envelope:
    return Envelope(
        dedupe_key=dedupe_key(headers),
        type=optional_header(headers, TOPIC_HEADER),
        occurred_at=parse_iso8601(optional_header(headers, TRIGGERED_AT_HEADER)),
        headers=select_headers(headers, KEPT_HEADERS),
    )


def shopify_hmac(secret: str, body: bytes) -> str:
    """The ``X-Shopify-Hmac-Sha256`` value Shopify sends with ``body`` (for signing only)."""
    return hmac_b64(secret.encode("utf-8"), body)


def sample_event(secret: str, seq: int, now: int) -> tuple[dict[str, str], bytes]:
    created = datetime.fromtimestamp(now, UTC).isoformat()
    order_id = 820_982_911_946_154_508 + seq
    payload = {
        "id": order_id,
        "admin_graphql_api_id": f"gid://shopify/Order/{order_id}",
        "name": f"#{1000 + seq}",
        "email": "jon@example.com",
        "created_at": created,
        "updated_at": created,
        "currency": "USD",
        "total_price": "49.00",
        "financial_status": "paid",
        "test": True,
        "line_items": [
            {"id": 466_157_049 + seq, "title": "IPod Nano - 8gb", "quantity": 1, "price": "49.00"}
        ],
    }
    body = json.dumps(payload).encode()
    headers = {
        "X-Shopify-Topic": "orders/create",
        "X-Shopify-Hmac-Sha256": shopify_hmac(secret, body),
        "X-Shopify-Shop-Domain": SAMPLE_SHOP,
        "X-Shopify-API-Version": SAMPLE_API_VERSION,
        "X-Shopify-Webhook-Id": str(uuid.uuid4()),
        "X-Shopify-Event-Id": str(uuid.uuid4()),
        "X-Shopify-Triggered-At": created.replace("+00:00", "Z"),
        "Content-Type": "application/json",
        "User-Agent": "Shopify-Captain-Hook",
    }
    return headers, body


PROVIDER = Provider(
    name=NAME,
    # Shopify retries 8 times over 4 hours.
    redelivery_horizon_days=1,
    scheme=HmacHeader(
        SCHEME,
        SIGNATURE_HEADER,
        encoding="base64",
        parse_secret=hmac_secret(
            "a Shopify client secret (the app's API secret key) must not be empty"
        ),
    ),
    envelope=envelope,
    sample_event=sample_event,
)
