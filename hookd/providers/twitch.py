"""Twitch EventSub (webhook transport): ``Twitch-Eventsub-Message-Signature:
sha256=<hex>``, the HMAC-SHA256 of ``Twitch-Eventsub-Message-Id`` +
``Twitch-Eventsub-Message-Timestamp`` (its text as sent) + the raw body, keyed with
the subscription's secret (10 to 100 ASCII characters).

The timestamp (RFC 3339, nanoseconds, ``Z``) must be no older than 10 minutes, as
Twitch's guide says, nor older (or further ahead) than the source's ``tolerance_s``
when that is shorter. The dedupe key is the message id, which Twitch keeps when it
resends a message.

``Twitch-Eventsub-Message-Type`` says what the message is:

- ``webhook_callback_verification``: verified like any message, then answered with
  the body's ``challenge`` as ``text/plain`` (200); nothing is stored;
- ``notification``: stored; its type is ``Twitch-Eventsub-Subscription-Type``
  (``channel.follow``);
- ``revocation``: stored as an event of its own so that it is seen: its type is
  ``revocation.<status>`` (``revocation.authorization_revoked``,
  ``revocation.user_removed``, ``revocation.notification_failures_exceeded``,
  ``revocation.version_removed``); the subscription's type stays in the kept headers.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime

from hookd.errors import PayloadError, SignatureError
from hookd.providers.base import (
    BodySigner,
    Envelope,
    Handwritten,
    HeaderMap,
    JsonObject,
    Key,
    Provider,
    Reply,
    SignedHeaders,
    Verified,
    bounded_type,
    checked_key,
    compact_json,
    object_at,
    one_header,
    optional_header,
    parse_json_object,
    select_headers,
)
from hookd.providers.generic import echoed
from hookd.providers.rfc3339 import parse_rfc3339, parse_utc_timestamp
from hookd.providers.signatures import (
    after_prefix,
    hmac_secret,
    hmac_sha256_hex,
    match_hmac,
    parse_hex_digest,
)

NAME = "twitch"
SCHEME = "twitch-sha256"
ID_HEADER = "twitch-eventsub-message-id"
TIMESTAMP_HEADER = "twitch-eventsub-message-timestamp"
SIGNATURE_HEADER = "twitch-eventsub-message-signature"
TYPE_HEADER = "twitch-eventsub-message-type"
SUBSCRIPTION_TYPE_HEADER = "twitch-eventsub-subscription-type"
KEPT_HEADERS = (
    ID_HEADER,
    TIMESTAMP_HEADER,
    TYPE_HEADER,
    "twitch-eventsub-message-retry",
    SUBSCRIPTION_TYPE_HEADER,
    "twitch-eventsub-subscription-version",
    "content-type",
    "user-agent",
)
VERIFICATION = "webhook_callback_verification"
NOTIFICATION = "notification"
REVOCATION = "revocation"
# "Reject any message with a timestamp older than 10 minutes."
MAX_AGE_S = 600
SECRET = re.compile(r"[ -~]{10,100}")


def check_headers(headers: HeaderMap, now: float, tolerance_s: int) -> SignedHeaders:
    message_id = one_header(headers, ID_HEADER)
    if len(message_id) > 255 or not message_id.isprintable():
        raise SignatureError("malformed_id")
    raw_ts = one_header(headers, TIMESTAMP_HEADER)
    digest = parse_hex_digest(after_prefix(one_header(headers, SIGNATURE_HEADER), "sha256="))
    ts = parse_utc_timestamp(raw_ts, now, min(tolerance_s, MAX_AGE_S))
    return SignedHeaders(ts, (message_id + raw_ts).encode(), (("sha256", digest),))


def verify(signed: SignedHeaders, body: bytes, keys: Sequence[Key]) -> Verified:
    return match_hmac(SCHEME, signed, body, keys, "sha256")


def envelope(headers: HeaderMap, body: bytes, verified: Verified) -> Envelope:
    kept = select_headers(headers, KEPT_HEADERS)
    kind = optional_header(headers, TYPE_HEADER)
    payload = parse_json_object(body)
    subscription = object_at(payload, "subscription")
    if kind == VERIFICATION:
        challenge = payload.get("challenge")
        if not isinstance(challenge, str):
            raise PayloadError("malformed_payload", "verification without a challenge")
        answer = echoed({"challenge": [challenge]}, "challenge")
        assert answer is not None
        return Envelope("", VERIFICATION, None, kept, reply=Reply.text(answer))
    key = checked_key(optional_header(headers, ID_HEADER), "Twitch-Eventsub-Message-Id")
    if kind == NOTIFICATION:
        event_type = bounded_type(optional_header(headers, SUBSCRIPTION_TYPE_HEADER))
        event_type = event_type or bounded_type(subscription.get("type"))
    elif kind == REVOCATION:
        status = subscription.get("status")
        event_type = bounded_type(f"revocation.{status}" if isinstance(status, str) else None)
        event_type = event_type or REVOCATION
    else:
        raise PayloadError("malformed_payload", "unknown Twitch-Eventsub-Message-Type")
    event = payload.get("event")
    occurred = None
    if isinstance(event, dict):
        occurred = parse_rfc3339(event.get("followed_at") or event.get("started_at"))
    return Envelope(key, event_type, occurred, kept)


def twitch_headers(
    secret: str, body: bytes, now: int, kind: str = NOTIFICATION, sub_type: str = "channel.follow"
) -> dict[str, str]:
    """The headers Twitch sends with ``body`` at ``now``, signed with ``secret``."""
    message_id = str(uuid.uuid4())
    stamp = datetime.fromtimestamp(now, UTC).strftime("%Y-%m-%dT%H:%M:%S.") + "634234626Z"
    signature = hmac_sha256_hex(secret.encode("utf-8"), (message_id + stamp).encode() + body)
    return {
        "Twitch-Eventsub-Message-Id": message_id,
        "Twitch-Eventsub-Message-Retry": "0",
        "Twitch-Eventsub-Message-Type": kind,
        "Twitch-Eventsub-Message-Signature": f"sha256={signature}",
        "Twitch-Eventsub-Message-Timestamp": stamp,
        "Twitch-Eventsub-Subscription-Type": sub_type,
        "Twitch-Eventsub-Subscription-Version": "2",
        "Content-Type": "application/json",
    }


def subscription(now: int, status: str = "enabled", sub_type: str = "channel.follow") -> JsonObject:
    """A subscription object as Twitch's messages carry it."""
    created = datetime.fromtimestamp(now, UTC).strftime("%Y-%m-%dT%H:%M:%S.634234626Z")
    return {
        "id": "f1c2a387-161a-49f9-a165-0f21d7a4e1c4",
        "status": status,
        "type": sub_type,
        "version": "2",
        "cost": 0,
        "condition": {"broadcaster_user_id": "1337", "moderator_user_id": "1337"},
        "transport": {"method": "webhook", "callback": "https://example.com/webhooks/callback"},
        "created_at": created,
    }


def sample_event(secret: str, seq: int, now: int) -> tuple[dict[str, str], bytes]:
    """A ``channel.follow`` notification, as in Twitch's EventSub guide."""
    followed = datetime.fromtimestamp(now, UTC).strftime("%Y-%m-%dT%H:%M:%S.000000000Z")
    payload = {
        "subscription": subscription(now),
        "event": {
            "user_id": str(1234 + seq),
            "user_login": f"cool_user_{seq}",
            "user_name": f"Cool_User_{seq}",
            "broadcaster_user_id": "1337",
            "broadcaster_user_login": "cooler_user",
            "broadcaster_user_name": "Cooler_User",
            "followed_at": followed,
        },
    }
    body = compact_json(payload)
    return twitch_headers(secret, body, now), body


def sign_body(secret: str, body: bytes, event_type: str | None, now: int) -> dict[str, str]:
    return twitch_headers(secret, body, now, sub_type=event_type or "channel.follow")


PROVIDER = Provider(
    name=NAME,
    # Twitch resends a notification a few times, then revokes the subscription
    # (notification_failures_exceeded).
    redelivery_horizon_days=1,
    scheme=Handwritten(
        hmac_secret(
            shape=SECRET,
            unlike="a Twitch EventSub secret is 10 to 100 ASCII characters",
        ),
        check_headers,
        verify,
    ),
    envelope=envelope,
    sample_event=sample_event,
    body_signer=BodySigner(sign_body),
)
