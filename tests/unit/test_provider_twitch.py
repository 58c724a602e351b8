"""Twitch EventSub through hookd's verifier, signed here as Twitch's guide documents
it (HMAC-SHA256 of message id + timestamp text + raw body, ``sha256=<hex>``), with the
guide's example message id, timestamp and ``channel.follow`` body."""

from __future__ import annotations

import hashlib
import hmac
import json
from datetime import UTC, datetime

import pytest

from hookd.errors import PayloadError, SignatureError
from hookd.providers import PROVIDERS
from hookd.providers.base import Verified

TWITCH = PROVIDERS["twitch"]
SECRET = "s3cRe7-twitch-eventsub"
OTHER = "another-twitch-secret"
MESSAGE_ID = "e76c6bd4-55c9-4987-8304-da1588d8988b"
STAMP = "2019-11-16T10:11:12.634234626Z"
SIGNED_AT = datetime(2019, 11, 16, 10, 11, 12, tzinfo=UTC).timestamp()
SUBSCRIPTION = {
    "id": "f1c2a387-161a-49f9-a165-0f21d7a4e1c4",
    "status": "enabled",
    "type": "channel.follow",
    "version": "2",
    "cost": 0,
    "condition": {"broadcaster_user_id": "1337", "moderator_user_id": "1337"},
    "transport": {"method": "webhook", "callback": "https://example.com/webhooks/callback"},
    "created_at": "2019-11-16T10:11:12.634234626Z",
}
NOTIFICATION = json.dumps(
    {
        "subscription": SUBSCRIPTION,
        "event": {
            "user_id": "1234",
            "user_login": "cool_user",
            "user_name": "Cool_User",
            "broadcaster_user_id": "1337",
            "broadcaster_user_login": "cooler_user",
            "broadcaster_user_name": "Cooler_User",
            "followed_at": "2020-07-15T18:16:11.17106713Z",
        },
    }
).encode()


def headers_for(
    body: bytes,
    kind: str = "notification",
    *,
    secret: str = SECRET,
    message_id: str = MESSAGE_ID,
    stamp: str = STAMP,
) -> dict[str, list[str]]:
    mac = hmac.new(secret.encode(), (message_id + stamp).encode() + body, hashlib.sha256)
    return {
        "twitch-eventsub-message-id": [message_id],
        "twitch-eventsub-message-retry": ["0"],
        "twitch-eventsub-message-type": [kind],
        "twitch-eventsub-message-signature": ["sha256=" + mac.hexdigest()],
        "twitch-eventsub-message-timestamp": [stamp],
        "twitch-eventsub-subscription-type": ["channel.follow"],
        "twitch-eventsub-subscription-version": ["2"],
        "content-type": ["application/json"],
    }


def verify(
    headers: dict[str, list[str]], body: bytes, now: float = SIGNED_AT + 1, tolerance: int = 300
) -> Verified:
    keys = [TWITCH.parse_secret(SECRET)]
    return TWITCH.verify_request(headers, body, keys, now, tolerance)


def reason(headers: dict[str, list[str]], body: bytes, **kw: float) -> str:
    with pytest.raises(SignatureError) as info:
        verify(headers, body, **kw)  # type: ignore[arg-type]
    return info.value.reason


def test_notification_verifies_and_is_keyed_by_its_message_id() -> None:
    headers = headers_for(NOTIFICATION)
    verified = verify(headers, NOTIFICATION)
    assert (verified.scheme, verified.timestamp) == ("twitch-sha256", int(SIGNED_AT))
    env = TWITCH.envelope(headers, NOTIFICATION, verified)
    assert (env.dedupe_key, env.type, env.reply) == (MESSAGE_ID, "channel.follow", None)
    assert env.occurred_at == datetime(2020, 7, 15, 18, 16, 11, 171067, tzinfo=UTC)
    assert env.headers["twitch-eventsub-message-retry"] == "0"


def test_tampered_wrong_secret_and_changed_id_are_refused() -> None:
    headers = headers_for(NOTIFICATION)
    assert reason(headers, NOTIFICATION + b" ") == "bad_signature"
    assert reason(headers_for(NOTIFICATION, secret=OTHER), NOTIFICATION) == "bad_signature"
    moved = {**headers, "twitch-eventsub-message-id": ["another-id"]}
    assert reason(moved, NOTIFICATION) == "bad_signature"


def test_older_than_ten_minutes_is_refused_even_with_a_longer_tolerance() -> None:
    headers = headers_for(NOTIFICATION)
    assert verify(headers, NOTIFICATION, now=SIGNED_AT + 599, tolerance=3600)
    assert reason(headers, NOTIFICATION, now=SIGNED_AT + 601, tolerance=3600) == (
        "timestamp_too_old"
    )
    # The source's tolerance, when shorter, is the limit.
    assert reason(headers, NOTIFICATION, now=SIGNED_AT + 301) == "timestamp_too_old"
    assert reason(headers, NOTIFICATION, now=SIGNED_AT - 301) == "timestamp_in_future"
    odd = headers_for(NOTIFICATION, stamp="2019-11-16 10:11:12Z")
    assert reason(odd, NOTIFICATION) == "malformed_timestamp"


def test_verification_is_answered_with_the_challenge_once_signed() -> None:
    body = json.dumps(
        {
            "challenge": "pogchamp-kappa-360noscope-vohiyo",
            "subscription": {**SUBSCRIPTION, "status": "webhook_callback_verification_pending"},
        }
    ).encode()
    headers = headers_for(body, "webhook_callback_verification")
    env = TWITCH.envelope(headers, body, verify(headers, body))
    assert env.reply is not None
    assert (env.reply.status, env.reply.body) == (200, b"pogchamp-kappa-360noscope-vohiyo")
    assert env.reply.content_type.startswith("text/plain")
    # Unsigned (or signed with another secret), it is never answered.
    assert reason(headers_for(body, "webhook_callback_verification", secret=OTHER), body) == (
        "bad_signature"
    )
    markup = json.dumps({"challenge": "<script>", "subscription": SUBSCRIPTION}).encode()
    marked = headers_for(markup, "webhook_callback_verification")
    with pytest.raises(PayloadError):
        TWITCH.envelope(marked, markup, verify(marked, markup))


def test_revocation_is_stored_under_its_own_type() -> None:
    body = json.dumps(
        {"subscription": {**SUBSCRIPTION, "status": "authorization_revoked"}}
    ).encode()
    headers = headers_for(body, "revocation")
    env = TWITCH.envelope(headers, body, verify(headers, body))
    assert (env.dedupe_key, env.type, env.reply) == (
        MESSAGE_ID,
        "revocation.authorization_revoked",
        None,
    )
    assert env.headers["twitch-eventsub-subscription-type"] == "channel.follow"


def test_unknown_message_type_and_short_secret_are_refused() -> None:
    headers = headers_for(NOTIFICATION, "something_else")
    with pytest.raises(PayloadError):
        TWITCH.envelope(headers, NOTIFICATION, verify(headers, NOTIFICATION))
    with pytest.raises(ValueError, match="10 to 100"):
        TWITCH.parse_secret("short")
