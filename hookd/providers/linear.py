"""Linear: ``Linear-Signature: <hex HMAC-SHA256 of the raw body>``, keyed with the
webhook's signing secret.

The signed time travels in the body: ``webhookTimestamp``, milliseconds since the epoch.
Linear asks receivers to refuse a delivery whose timestamp is more than a minute from
their clock; hookd checks it, after the signature, against the source's ``tolerance_s``
(both edges inclusive, the clock keeping its fraction) like every other provider's
window, so ``tolerance_s = 60`` is Linear's own advice and the 300 s default is wider.
A body without a usable ``webhookTimestamp`` is refused (``malformed_timestamp``): it
could be replayed forever. Linear's SDK also reads a ``Linear-Timestamp`` header when
there is one; it is not signed, so hookd does not trust it.

Each delivery is keyed by ``Linear-Delivery``, the UUID Linear gives a payload delivery.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime

from hookd.errors import SignatureError
from hookd.providers.base import (
    Envelope,
    Handwritten,
    HeaderMap,
    JsonObject,
    Key,
    Provider,
    SignedHeaders,
    Verified,
    checked_key,
    epoch_to_datetime,
    loads_utf8,
    one_header,
    optional_header,
    parse_json_object,
    select_headers,
    with_action,
)
from hookd.providers.rfc3339 import parse_iso8601
from hookd.providers.signatures import (
    check_window,
    hmac_secret,
    hmac_sha256_hex,
    match_hmac,
    parse_hex_digest,
)

NAME = "linear"
SCHEME = "linear-sha256"
SIGNATURE_HEADER = "linear-signature"
DELIVERY_HEADER = "linear-delivery"
EVENT_HEADER = "linear-event"
TIMESTAMP_FIELD = "webhookTimestamp"
KEPT_HEADERS = (DELIVERY_HEADER, EVENT_HEADER, "content-type", "user-agent")
MS_PER_S = 1000
# Milliseconds since the epoch; fifteen digits reach the year 33658.
MAX_TIMESTAMP_MS = 10**15


def check_headers(headers: HeaderMap, now: float, tolerance_s: int) -> SignedHeaders:
    digest = parse_hex_digest(one_header(headers, SIGNATURE_HEADER))
    return SignedHeaders(
        timestamp=None,
        prefix=b"",
        signatures=(("sha256", digest),),
        checked_at=now,
        tolerance_s=tolerance_s,
    )


def webhook_timestamp_ms(body: bytes) -> int:
    """The body's ``webhookTimestamp``, or ``malformed_timestamp``."""
    try:
        payload = loads_utf8(body)
    except ValueError:
        raise SignatureError("malformed_timestamp") from None
    value = payload.get(TIMESTAMP_FIELD) if isinstance(payload, dict) else None
    if isinstance(value, bool) or not isinstance(value, int):
        raise SignatureError("malformed_timestamp")
    if not 0 < value < MAX_TIMESTAMP_MS:
        raise SignatureError("malformed_timestamp")
    return value


def verify(signed: SignedHeaders, body: bytes, keys: Sequence[Key]) -> Verified:
    """The signature first (a forged body says nothing), then its timestamp's window."""
    verified = match_hmac(SCHEME, signed, body, keys, "sha256")
    ts_ms = webhook_timestamp_ms(body)
    check_window(ts_ms, signed.checked_at, signed.tolerance_s, per_second=MS_PER_S)
    return Verified(verified.scheme, verified.key_index, ts_ms // MS_PER_S)


def event_type(payload: JsonObject, header: str | None) -> str | None:
    """``Issue.create``: the payload's ``type`` and ``action``; ``Linear-Event`` (the
    entity type alone) when the payload names no type."""
    kind = payload.get("type")
    if not isinstance(kind, str) or not kind:
        return header or None
    return with_action(kind, payload.get("action"))


def envelope(headers: HeaderMap, body: bytes, verified: Verified) -> Envelope:
    delivery = checked_key(optional_header(headers, DELIVERY_HEADER), "Linear-Delivery")
    payload = parse_json_object(body)
    stamp = payload.get(TIMESTAMP_FIELD)
    sent_at = epoch_to_datetime(stamp / MS_PER_S) if isinstance(stamp, int) else None
    return Envelope(
        dedupe_key=delivery,
        type=event_type(payload, optional_header(headers, EVENT_HEADER)),
        # ``createdAt`` is when the action took place; the send time when it is missing.
        occurred_at=parse_iso8601(payload.get("createdAt")) or sent_at,
        headers=select_headers(headers, KEPT_HEADERS),
    )


def linear_headers(secret: str, body: bytes, event: str, delivery: str) -> dict[str, str]:
    """The headers Linear sends with ``body``, signed with ``secret``."""
    return {
        "Linear-Delivery": delivery,
        "Linear-Event": event,
        "Linear-Signature": hmac_sha256_hex(secret.encode("utf-8"), body),
        "Content-Type": "application/json; charset=utf-8",
        "User-Agent": "Linear-Webhook",
    }


def sample_event(secret: str, seq: int, now: int) -> tuple[dict[str, str], bytes]:
    created = datetime.fromtimestamp(now, UTC).isoformat(timespec="milliseconds")
    created = created.replace("+00:00", "Z")
    issue_id = str(uuid.uuid4())
    payload = {
        "action": "create",
        "actor": {"id": str(uuid.uuid4()), "name": "Hookd Tester", "type": "user"},
        "createdAt": created,
        "data": {
            "id": issue_id,
            "createdAt": created,
            "updatedAt": created,
            "number": seq,
            "identifier": f"HOOK-{seq}",
            "title": f"hookd send-test #{seq}",
            "priority": 0,
            "teamId": "72b2a2dc-6f4f-4423-9d34-24b5bd10634a",
        },
        "url": f"https://linear.app/hookd/issue/HOOK-{seq}",
        "type": "Issue",
        "organizationId": "e0c3fae0-5f4c-4e4b-9f3e-1a2b3c4d5e6f",
        "webhookTimestamp": now * MS_PER_S,
        "webhookId": "0b6d2e3c-2f1a-4c8e-9a7b-5d4c3b2a1f0e",
    }
    body = json.dumps(payload).encode()
    return linear_headers(secret, body, "Issue", str(uuid.uuid4())), body


PROVIDER = Provider(
    name=NAME,
    # Linear does not document its retry window: hookd's default.
    redelivery_horizon_days=3,
    scheme=Handwritten(
        hmac_secret("a Linear webhook signing secret must not be empty"), check_headers, verify
    ),
    envelope=envelope,
    sample_event=sample_event,
)
