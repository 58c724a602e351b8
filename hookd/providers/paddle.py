"""Paddle Billing: ``Paddle-Signature: ts=<unix>;h1=<hex>`` over ``"{ts}:" + body``.

The key is the notification destination's endpoint secret key (``pdl_ntfset_…``),
used whole as the HMAC key. Several ``h1`` entries may appear while the key is being
rotated; any may match. An ``h1`` that is no digest at all is passed over, as
Paddle's own library does, so it cannot spoil a valid entry beside it.

Events are keyed by ``event_id``. An automatic retry re-sends the same notification
(same ``notification_id``, same ``event_id``); a replay (``POST
/notifications/{id}/replay``) creates a new notification with a new
``notification_id`` for the same ``event_id``. Keying by the event keeps a replayed
notification from being stored twice; reconciliation reads the destination's
notifications (``GET /notifications``), whose entries carry the same ``event_id``.
"""

from __future__ import annotations

import re
import uuid
from typing import Literal

from pydantic import field_validator

from hookd.providers.base import (
    JsonEnvelope,
    Provider,
    compact_json,
    text_or_none,
)
from hookd.providers.reconciling import ReconcileConfig, Reconciling
from hookd.providers.rfc3339 import parse_rfc3339, utc_z
from hookd.providers.signatures import HmacEntries, hmac_secret, hmac_sha256_hex

NAME = "paddle"
SCHEME = "paddle-h1"
SIGNATURE_HEADER = "paddle-signature"
# ``pdl_ntfset_<destination id>_<key>``; Paddle's library tests also carry the older
# ``pdl_ntf_`` form. The key part is base64 text.
SECRET_RE = re.compile(r"pdl_ntf(?:set)?_[0-9a-z]+_[A-Za-z0-9+/=_-]+", re.ASCII)
# Paddle IDs: a prefix and 26 characters of lower-case Crockford base32.
ID_ALPHABET = "0123456789abcdefghjkmnpqrstvwxyz"
# A notification setting's ID: its prefix, then 26 lower-case letters and digits.
SETTING_ID = re.compile(r"ntfset_[a-z\d]{26}")


def paddle_headers(secret: str, body: bytes, now: int) -> dict[str, str]:
    """The headers Paddle sends with ``body`` at ``now``, signed with ``secret``."""
    signature = hmac_sha256_hex(secret.encode("utf-8"), f"{now}:".encode() + body)
    return {
        "Paddle-Signature": f"ts={now};h1={signature}",
        "Content-Type": "application/json",
        "User-Agent": "Paddle",
    }


def paddle_id(prefix: str) -> str:
    """``evt_01hs0tqfme2xwb2hvwv87p8y3w``: a prefix and 26 base32 characters."""
    number = uuid.uuid4().int
    chars = []
    for _ in range(26):
        number, digit = divmod(number, 32)
        chars.append(ID_ALPHABET[digit])
    return f"{prefix}_{''.join(chars)}"


def sample_event(secret: str, seq: int, now: int) -> tuple[dict[str, str], bytes]:
    when = utc_z(now)
    payload = {
        "event_id": paddle_id("evt"),
        "event_type": "transaction.completed",
        "occurred_at": when,
        "notification_id": paddle_id("ntf"),
        "data": {
            "id": paddle_id("txn"),
            "status": "completed",
            "customer_id": paddle_id("ctm"),
            "currency_code": "USD",
            "origin": "web",
            "collection_mode": "automatic",
            "items": [{"price": {"id": paddle_id("pri")}, "quantity": seq}],
            "details": {"totals": {"subtotal": "1000", "tax": "0", "total": "1000"}},
            "created_at": when,
            "updated_at": when,
            "billed_at": when,
        },
    }
    body = compact_json(payload)
    return paddle_headers(secret, body, now), body


class PaddleReconcile(ReconcileConfig):
    """``[sources.reconcile]`` of a Paddle source: the notification destination
    (notification setting) that points at hookd, whose notifications are listed."""

    notification_setting_id: str | None = None
    repair: Literal["fetch", "redeliver"] = "fetch"

    @field_validator("notification_setting_id")
    @classmethod
    def _setting(cls, value: str | None) -> str | None:
        if value is not None and not SETTING_ID.fullmatch(value):
            raise ValueError('must be a notification setting ID ("ntfset_" and 26 characters)')
        return value

    def incomplete(self) -> tuple[str, str] | None:
        missing = super().incomplete()
        if missing is None and self.notification_setting_id is None:
            return "notification_setting_id", "is required for paddle"
        return missing


PROVIDER = Provider(
    name=NAME,
    # Paddle keeps (lists, replays) notifications and events for 90 days.
    redelivery_horizon_days=90,
    scheme=HmacEntries(
        SCHEME,
        SIGNATURE_HEADER,
        ";",
        "h1",
        timestamp="ts",
        signed_prefix="{ts}:",
        parse_secret=hmac_secret(
            shape=SECRET_RE,
            unlike="a Paddle endpoint secret key looks like pdl_ntfset_<id>_<key> "
            "(the notification destination's endpoint_secret_key)",
        ),
    ),
    envelope=JsonEnvelope(
        key=("event_id", "event_id"),
        type=("event_type", text_or_none),
        time=("occurred_at", parse_rfc3339),
        key_prefix="evt_",
    ),
    sample_event=sample_event,
    reconcile=Reconciling(
        settings=PaddleReconcile,
        api_url="https://api.paddle.com",
        adapter="reconcile.providers.paddle:PaddleAdapter",
        # Notifications go out within seconds as a rule, queued per destination.
        settle_s=300.0,
    ),
)
