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

import dataclasses
import re
import uuid
from datetime import datetime
from typing import Literal

from pydantic import field_validator

from hookd.providers.base import (
    JsonEnvelope,
    Provider,
    compact_json,
    text_or_none,
)
from hookd.providers.reconciling import ReconcileConfig, Reconciling
from hookd.providers.rfc3339 import parse_iso8601, utc_z
from hookd.providers.signatures import PRINTABLE_WORD, HmacHeader, hmac_b64, hmac_secret

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
# Square IDs and event types: printable, no spaces.
SQUARE_WORD = re.compile(r"[A-Za-z0-9_.\-]+")
# What the registry holds is bound to this placeholder; a source is always served by
# the provider bound to its own ``public_url`` (hookd.sources refuses one without).
EXAMPLE_URL = "https://hookd.example/hooks/square"


def created_at(value: object) -> datetime | None:
    """An event's ``created_at``, in UTC. Square writes it with ``Z``, but the Events
    API's own example writes it without a zone (``2022-04-26T10:08:40.454726``): such
    a time is read as UTC, the zone of every other time Square writes."""
    return parse_iso8601(value)


def square_signature(secret: str, url: str, body: bytes) -> str:
    """The header value Square sends with ``body`` posted to ``url``."""
    return hmac_b64(secret.encode("utf-8"), url.encode("utf-8"), body)


def bind(url: str) -> Provider:
    """The Square provider for a source whose notification URL is ``url``."""

    def sample_event(secret: str, seq: int, now: int) -> tuple[dict[str, str], bytes]:
        payment_id = uuid.uuid4().hex[:22].upper()
        when = utc_z(now)
        payload = {
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
        body = compact_json(payload)
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
        scheme=HmacHeader(
            SCHEME,
            SIGNATURE_HEADER,
            encoding="base64",
            signed_prefix=url.encode("utf-8"),
            parse_secret=hmac_secret(
                shape=PRINTABLE_WORD,
                unlike="a Square signature key is the subscription's Signature Key: printable "
                "ASCII without spaces",
            ),
        ),
        envelope=JsonEnvelope(
            key=("event_id", "event_id"),
            type=("type", text_or_none),
            time=("created_at", created_at),
            kept=KEPT_HEADERS,
        ),
        sample_event=sample_event,
    )


class SquareReconcile(ReconcileConfig):
    """``[sources.reconcile]`` of a Square source: which events to search for.

    Square's Events API cannot send a webhook again, so ``repair`` takes only
    ``"fetch"``. ``event_types`` should be the webhook subscription's event types:
    an event of a type the subscription does not send would otherwise be reported
    missing (and stored)."""

    event_types: tuple[str, ...] = ()
    location_ids: tuple[str, ...] = ()
    merchant_ids: tuple[str, ...] = ()
    repair: Literal["fetch"] = "fetch"

    @field_validator("event_types", "location_ids", "merchant_ids")
    @classmethod
    def _words(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for word in value:
            if not SQUARE_WORD.fullmatch(word):
                raise ValueError(f"{word!r} is not a Square ID or event type")
        return value


PROVIDER = dataclasses.replace(
    bind(EXAMPLE_URL),
    # Square retries for 72 hours; its Events API lists events of the past 28 days.
    redelivery_horizon_days=28,
    with_public_url=bind,
    # Square cannot send a webhook again: a missing event is stored from the list.
    reconcile=Reconciling(
        settings=SquareReconcile,
        api_url="https://connect.squareup.com",
        adapter="reconcile.providers.square:SquareAdapter",
        # Square sends within seconds as a rule and promises no bound: five minutes.
        settle_s=300.0,
    ),
)
