"""Intercom: ``X-Hub-Signature: sha1=<hex HMAC-SHA1 of the raw body>``, keyed with the
app's client secret.

Intercom signs no timestamp, so replays are bounded by deduplication on the
notification's ``id`` (``notif_…``), which its retries keep (``delivery_attempts``
counts them). The ``ping`` notification the Developer Hub sends to test an endpoint is
answered with 200 and not stored: it is about the subscription, not an event.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from hookd.providers.base import (
    Envelope,
    HeaderMap,
    Key,
    Provider,
    QueryMap,
    Reply,
    Verified,
    checked_key,
    compact_json,
    epoch_to_datetime,
    parse_json_object,
    select_headers,
    text_or_none,
)
from hookd.providers.signatures import PRINTABLE_WORD, HmacHeader, hmac_digest, hmac_secret

NAME = "intercom"
SCHEME = "intercom-sha1"
SIGNATURE_HEADER = "x-hub-signature"
KEPT_HEADERS = ("content-type", "user-agent")
PING_TOPIC = "ping"


def envelope(headers: HeaderMap, body: bytes, verified: Verified) -> Envelope:
    payload = parse_json_object(body)
    kept = select_headers(headers, KEPT_HEADERS)
    topic = payload.get("topic")
    if topic == PING_TOPIC:
        return Envelope("", PING_TOPIC, None, kept, reply=Reply.json({"status": "ok"}))
    return Envelope(
        dedupe_key=checked_key(payload.get("id"), "notification id"),
        type=text_or_none(topic),
        occurred_at=epoch_to_datetime(payload.get("created_at")),
        headers=kept,
    )


def intercom_headers(secret: str, body: bytes) -> dict[str, str]:
    """The headers Intercom sends with ``body``, signed with ``secret``."""
    digest = hmac_digest(secret.encode("utf-8"), body, algorithm="sha1").hex()
    return {
        "X-Hub-Signature": f"sha1={digest}",
        "Content-Type": "application/json",
        "Accept": "application/json",
        "User-Agent": "intercom-parrot-service-client/1.0",
    }


def sample_event(secret: str, seq: int, now: int) -> tuple[dict[str, str], bytes]:
    conversation = str(100000000 + seq)
    payload = {
        "type": "notification_event",
        "app_id": "a86dr8yl",
        "data": {
            "type": "notification_event_data",
            "item": {
                "type": "conversation",
                "id": conversation,
                "created_at": now,
                "updated_at": now,
                "state": "open",
                "open": True,
                "source": {
                    "type": "conversation",
                    "delivered_as": "customer_initiated",
                    "body": f"<p>hello from hookd send-test #{seq}</p>",
                    "author": {"type": "user", "id": "5f7f0d217289f8d4ba7e9d23"},
                },
            },
        },
        "links": {},
        "id": f"notif_{uuid.uuid4()}",
        "topic": "conversation.user.created",
        "delivery_status": "pending",
        "delivery_attempts": 1,
        "delivered_at": 0,
        "first_sent_at": now,
        "created_at": now,
        "self": None,
    }
    body = compact_json(payload)
    return intercom_headers(secret, body), body


def challenge(method: str, query: QueryMap, keys: Sequence[Key]) -> Reply | None:
    """Intercom checks a webhook URL with a ``HEAD`` request when it is saved ("Your
    endpoint must return a 200 to a HEAD request"); it carries nothing to store."""
    if method == "HEAD":
        return Reply(b"", "text/plain; charset=utf-8")
    return None


PROVIDER = Provider(
    name=NAME,
    # Intercom keeps retrying a failing subscription until it suspends it after 7 days.
    redelivery_horizon_days=7,
    scheme=HmacHeader(
        SCHEME,
        SIGNATURE_HEADER,
        prefix="sha1=",
        algorithm="sha1",
        parse_secret=hmac_secret(
            shape=PRINTABLE_WORD,
            unlike="an Intercom client secret (the app's Basic Info page) is printable ASCII "
            "without spaces",
        ),
    ),
    envelope=envelope,
    sample_event=sample_event,
    challenge=challenge,
)
