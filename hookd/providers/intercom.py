"""Intercom: ``X-Hub-Signature: sha1=<hex HMAC-SHA1 of the raw body>``, keyed with the
app's client secret.

Intercom signs no timestamp, so replays are bounded by deduplication on the
notification's ``id`` (``notif_…``), which its retries keep (``delivery_attempts``
counts them). The ``ping`` notification the Developer Hub sends to test an endpoint is
answered with 200 and not stored: it is about the subscription, not an event.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import uuid
from collections.abc import Sequence
from typing import Any

from hookd.errors import SignatureError
from hookd.providers.base import (
    HEX_DIGITS,
    Envelope,
    HeaderMap,
    HmacKey,
    Key,
    Provider,
    QueryMap,
    Reply,
    SignedHeaders,
    Verified,
    checked_key,
    epoch_to_datetime,
    one_header,
    parse_json_object,
    select_headers,
)

NAME = "intercom"
SCHEME = "intercom-sha1"
SIGNATURE_HEADER = "x-hub-signature"
KEPT_HEADERS = ("content-type", "user-agent")
SHA1_HEX_CHARS = 40
PING_TOPIC = "ping"


def parse_secret(raw: str) -> HmacKey:
    if not raw:
        raise ValueError("secret is empty")
    if not (raw.isascii() and raw.isprintable()) or any(c.isspace() for c in raw):
        raise ValueError(
            "an Intercom client secret (the app's Basic Info page) is printable ASCII "
            "without spaces"
        )
    return HmacKey(raw.encode("utf-8"))


def check_headers(headers: HeaderMap, now: float, tolerance_s: int) -> SignedHeaders:
    raw = one_header(headers, SIGNATURE_HEADER)
    scheme, sep, digest = raw.partition("=")
    if not sep or scheme != "sha1":
        raise SignatureError("malformed_signature")
    # Lower-case hex only, as Intercom sends it: upper case decodes to the same bytes.
    if len(digest) != SHA1_HEX_CHARS or not HEX_DIGITS.issuperset(digest):
        raise SignatureError("malformed_signature")
    return SignedHeaders(timestamp=None, prefix=b"", signatures=(("sha1", bytes.fromhex(digest)),))


def verify(signed: SignedHeaders, body: bytes, keys: Sequence[Key]) -> Verified:
    candidates = [sig for ver, sig in signed.signatures if ver == "sha1"]
    for index, key in enumerate(keys):
        if not isinstance(key, HmacKey):
            continue
        digest = hmac.new(key.key, body, hashlib.sha1).digest()
        for candidate in candidates:
            if hmac.compare_digest(digest, candidate):
                return Verified(SCHEME, index, None)
    raise SignatureError("bad_signature")


def envelope(headers: HeaderMap, body: bytes, verified: Verified) -> Envelope:
    payload = parse_json_object(body)
    kept = select_headers(headers, KEPT_HEADERS)
    topic = payload.get("topic")
    if topic == PING_TOPIC:
        return Envelope("", PING_TOPIC, None, kept, reply=Reply.json({"status": "ok"}))
    return Envelope(
        dedupe_key=checked_key(payload.get("id"), "notification id"),
        type=topic if isinstance(topic, str) and topic else None,
        occurred_at=epoch_to_datetime(payload.get("created_at")),
        headers=kept,
    )


def intercom_headers(secret: str, body: bytes) -> dict[str, str]:
    """The headers Intercom sends with ``body``, signed with ``secret``."""
    digest = hmac.new(secret.encode("utf-8"), body, hashlib.sha1).hexdigest()
    return {
        "X-Hub-Signature": f"sha1={digest}",
        "Content-Type": "application/json",
        "Accept": "application/json",
        "User-Agent": "intercom-parrot-service-client/1.0",
    }


def sample_event(secret: str, seq: int, now: int) -> tuple[dict[str, str], bytes]:
    conversation = str(100000000 + seq)
    payload: dict[str, Any] = {
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
    body = json.dumps(payload, separators=(",", ":")).encode()
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
    parse_secret=parse_secret,
    check_headers=check_headers,
    verify=verify,
    envelope=envelope,
    sample_event=sample_event,
    challenge=challenge,
)
