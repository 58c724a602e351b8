"""Zoom: ``x-zm-signature: v0=<hex>``, the HMAC-SHA256 of
``"v0:{x-zm-request-timestamp}:" + body`` keyed with the app's secret token.

``endpoint.url_validation`` (sent when the endpoint is saved, then every 72 hours) is
signed like any event and is answered only once verified, as Zoom's own library and
sample do: ``{"plainToken": ..., "encryptedToken": <hex HMAC-SHA256 of plainToken>}``,
keyed with the secret that verified the request. It stores nothing.

Zoom events carry no id that survives a retry (``x-zm-trackingid`` names one delivery
attempt). An event is keyed by its name, its ``event_ts`` (milliseconds, when the event
happened) and the SHA-256 of its canonical ``payload`` (sorted keys, no whitespace): a
retry of the same event is a duplicate, and two events of one kind at the same
millisecond differ by their payload. Fields outside ``payload`` (``download_token`` of
recording events) are not part of the key. An event without ``event_ts`` is keyed by the
SHA-256 of its body.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from hookd.errors import PayloadError
from hookd.providers.base import (
    Envelope,
    Handwritten,
    HeaderMap,
    HmacKey,
    JsonObject,
    Key,
    Provider,
    Reply,
    SignedHeaders,
    Verified,
    checked_key,
    compact_json,
    epoch_to_datetime,
    parse_json_object,
    select_headers,
)
from hookd.providers.signatures import TimestampedSignature, hmac_sha256_hex, plain_secret

SIGNATURE_HEADER = "x-zm-signature"
TIMESTAMP_HEADER = "x-zm-request-timestamp"
KEPT_HEADERS = (TIMESTAMP_HEADER, "x-zm-trackingid", "content-type", "user-agent")
SCHEME = "zoom-v0"
URL_VALIDATION = "endpoint.url_validation"
MAX_PLAIN_TOKEN_CHARS = 256


@dataclass(frozen=True, slots=True)
class ZoomVerified(Verified):
    """A verified request, with the answer to a url_validation challenge when it is one:
    computed here, since only the verifier holds the secret that answers it."""

    answer: Reply | None = None


# The timestamp is signed as the text it arrived as.
SIGNATURE = TimestampedSignature(
    SCHEME, SIGNATURE_HEADER, TIMESTAMP_HEADER, "v0=", prefix="v0=", signed_prefix="v0:{raw}:"
)


def _plain_token(payload: JsonObject) -> str:
    inner = payload.get("payload")
    token = inner.get("plainToken") if isinstance(inner, dict) else None
    if not isinstance(token, str) or not token or len(token) > MAX_PLAIN_TOKEN_CHARS:
        raise PayloadError("malformed_payload", "url_validation without a valid plainToken")
    if not (token.isascii() and token.isprintable()):
        raise PayloadError("malformed_payload", "url_validation without a valid plainToken")
    return token


def _validation_answer(body: bytes, key: HmacKey) -> Reply | None:
    """The answer to a url_validation body, or None for any other body."""
    if URL_VALIDATION.encode() not in body:
        return None
    try:
        payload = parse_json_object(body)
    except PayloadError:
        return None  # the envelope refuses it
    if payload.get("event") != URL_VALIDATION:
        return None
    try:
        token = _plain_token(payload)
    except PayloadError:
        return None
    encrypted = hmac_sha256_hex(key.key, token.encode())
    return Reply.json({"plainToken": token, "encryptedToken": encrypted})


def verify(signed: SignedHeaders, body: bytes, keys: Sequence[Key]) -> Verified:
    verified = SIGNATURE.verify(signed, body, keys)
    key = keys[verified.key_index]
    assert isinstance(key, HmacKey)
    answer = _validation_answer(body, key)
    return ZoomVerified(verified.scheme, verified.key_index, verified.timestamp, answer)


def event_key(event: str, payload: JsonObject, body: bytes) -> str:
    """``{event}:{event_ts}:{sha256 of the canonical payload}``, see the module's notes."""
    event_ts = payload.get("event_ts")
    if isinstance(event_ts, bool) or not isinstance(event_ts, int):
        return checked_key(f"{event}:body:{hashlib.sha256(body).hexdigest()}", "event")
    canonical = json.dumps(
        payload.get("payload"), sort_keys=True, separators=(",", ":"), ensure_ascii=False
    )
    digest = hashlib.sha256(canonical.encode("utf-8", "surrogatepass")).hexdigest()
    return checked_key(f"{event}:{event_ts}:{digest}", "event")


def envelope(headers: HeaderMap, body: bytes, verified: Verified) -> Envelope:
    kept = select_headers(headers, KEPT_HEADERS)
    payload = parse_json_object(body)
    event = checked_key(payload.get("event"), "event")
    if event == URL_VALIDATION:
        answer = verified.answer if isinstance(verified, ZoomVerified) else None
        if answer is None:
            _plain_token(payload)  # says what is wrong with it
            raise PayloadError("malformed_payload", "url_validation cannot be answered")
        return Envelope("", URL_VALIDATION, None, kept, reply=answer)
    event_ts = payload.get("event_ts")
    occurred = None
    if isinstance(event_ts, int) and not isinstance(event_ts, bool):
        occurred = epoch_to_datetime(event_ts / 1000)
    return Envelope(
        dedupe_key=event_key(event, payload, body),
        type=event,
        occurred_at=occurred,
        headers=kept,
    )


def zoom_headers(secret: str, body: bytes, now: int) -> dict[str, str]:
    """The headers Zoom sends with ``body`` at ``now``, signed with the secret token."""
    signature = hmac_sha256_hex(secret.encode(), f"v0:{now}:".encode() + body)
    return {
        "x-zm-request-timestamp": str(now),
        "x-zm-signature": f"v0={signature}",
        "x-zm-trackingid": uuid.uuid4().hex,
        "Content-Type": "application/json; charset=utf-8",
    }


def sample_event(secret: str, seq: int, now: int) -> tuple[dict[str, str], bytes]:
    meeting = uuid.uuid4()
    payload = {
        "event": "meeting.started",
        "event_ts": now * 1000 + seq % 1000,
        "payload": {
            "account_id": "hookdSampleAccount",
            "object": {
                "id": str(80_000_000_000 + meeting.int % 10_000_000_000),
                "uuid": meeting.hex,
                "host_id": "hookdSampleHost",
                "topic": f"hookd send-test #{seq}",
                "type": 2,
                "timezone": "UTC",
            },
        },
    }
    body = compact_json(payload)
    return zoom_headers(secret, body, now), body


# No reconcile: Zoom has no API that lists past webhook deliveries.
PROVIDER = Provider(
    name="zoom",
    # Zoom retries three times, the last about 85 minutes after the first.
    redelivery_horizon_days=1,
    scheme=Handwritten(plain_secret, SIGNATURE.check_headers, verify),
    envelope=envelope,
    sample_event=sample_event,
    # "Your endpoint must respond with either a 200 or 204 HTTP status code": Zoom
    # names no other success, so a new event gets 200, not 202.
    accepted_status=200,
)
