"""PagerDuty (v3 webhooks): ``X-PagerDuty-Signature: v1=<hex>[,v1=<hex>…]``, each the
hex HMAC-SHA256 of the raw body under one of the subscription's secrets.

Several ``v1`` entries appear while a secret is being rotated; any may match. Entries of
other versions are passed over, as PagerDuty's verification steps say, and so is a
``v1`` entry that is no lower-case SHA-256 hex digest: it never verifies, but cannot
spoil a valid entry beside it.

PagerDuty signs no timestamp, so replays are bounded by deduplication on ``event.id``,
which is inside the signed body (``X-Webhook-Id``, also repeated on each attempt, is
kept with the event but is not signed). Each payload holds exactly one event.
"""

from __future__ import annotations

import secrets
from datetime import UTC, datetime

from hookd.providers.base import (
    JsonEnvelope,
    Provider,
    bounded_type,
    compact_json,
)
from hookd.providers.rfc3339 import parse_isoformat
from hookd.providers.signatures import HmacEntries, hmac_secret, hmac_sha256_hex

NAME = "pagerduty"
SIGNATURE_HEADER = "x-pagerduty-signature"
KEPT_HEADERS = ("x-webhook-id", "x-webhook-subscription", "content-type", "user-agent")


def pagerduty_headers(secret: str, body: bytes) -> dict[str, str]:
    """The headers PagerDuty sends with ``body``, signed with ``secret``."""
    return {
        "X-PagerDuty-Signature": f"v1={hmac_sha256_hex(secret.encode('utf-8'), body)}",
        "X-Webhook-Id": secrets.token_hex(16),
        "X-Webhook-Subscription": "PHOOKD1",
        "Content-Type": "application/json",
        "User-Agent": "PagerDuty-Webhook/V3.0",
    }


def sample_event(secret: str, seq: int, now: int) -> tuple[dict[str, str], bytes]:
    """An ``incident.triggered`` event, signed as PagerDuty signs it."""
    occurred = datetime.fromtimestamp(now, UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z")
    incident = f"Q{seq:06d}"
    payload = {
        "event": {
            "id": "01" + secrets.token_hex(12).upper(),
            "event_type": "incident.triggered",
            "resource_type": "incident",
            "occurred_at": occurred,
            "agent": None,
            "client": None,
            "data": {
                "id": incident,
                "type": "incident",
                "self": f"https://api.pagerduty.com/incidents/{incident}",
                "number": seq,
                "status": "triggered",
                "title": f"hookd send-test #{seq}",
                "urgency": "high",
                "created_at": occurred,
                "service": {
                    "id": "PHOOKD2",
                    "summary": "hookd",
                    "type": "service_reference",
                },
            },
        }
    }
    body = compact_json(payload)
    return pagerduty_headers(secret, body), body


PROVIDER = Provider(
    name=NAME,
    # PagerDuty retries up to 5 attempts over about 20 minutes.
    redelivery_horizon_days=1,
    # An entry without "=" or of another version is passed over, as PagerDuty says.
    scheme=HmacEntries(
        "pagerduty-v1",
        SIGNATURE_HEADER,
        ",",
        "v1",
        strict=False,
        parse_secret=hmac_secret("a PagerDuty webhook subscription secret is empty"),
    ),
    envelope=JsonEnvelope(
        key=("id", "event.id"),
        type=("event_type", bounded_type),
        time=("occurred_at", parse_isoformat),
        inside="event",
        kept=KEPT_HEADERS,
    ),
    sample_event=sample_event,
)
