"""Okta event hooks: a static secret in a header the admin names (``Authorization`` by
default), compared in constant time, and a one-time verification ``GET``.

When an event hook is saved (or verified again), Okta sends ``GET`` with
``X-Okta-Verification-Challenge: <value>`` and the hook's authorization header; it is
answered ``{"verification": "<value>"}`` (200, JSON) only when that header holds one of
the source's ``secrets``, and stores nothing. Deliveries are ``POST`` with the same
header: nothing signs the body, so anyone who has seen one request can send another
(deduplication bounds a replay of the same delivery).

A delivery carries a batch of events (``data.events[]``), stored as one event keyed by
the delivery's top-level ``eventId`` (hookd stores a body as one event; a retry of the
delivery keeps its ``eventId``). Its type is the ``eventType`` its events share
(``user.session.start``), or Okta's own ``com.okta.event_hook`` for a batch of several
types; its time is ``eventTime``.

``[sources.verify] header = "<Name>"`` names the header when it is not
``Authorization``.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import UTC, datetime

from hookd.errors import PayloadError
from hookd.providers.base import (
    BodySigner,
    Configurable,
    Envelope,
    HeaderMap,
    Key,
    Provider,
    QueryMap,
    Reply,
    Verified,
    bounded_type,
    checked_key,
    compact_json,
    one_header,
    parse_json_object,
    select_headers,
)
from hookd.providers.generic import HeaderName, VerifySettings, echoed
from hookd.providers.rfc3339 import parse_rfc3339
from hookd.providers.signatures import SharedToken

NAME = "okta"
CHALLENGE_HEADER = "x-okta-verification-challenge"
HOOK_TYPE = "com.okta.event_hook"
KEPT_HEADERS = ("content-type", "user-agent")


class OktaSettings(VerifySettings):
    """``[sources.verify]`` of an ``okta`` source: the header the hook's authorization
    secret travels in, as set in the Admin Console."""

    header: HeaderName = "authorization"


def event_type(payload: dict[str, object]) -> str | None:
    """The ``eventType`` every event of the batch shares, else the hook's own type."""
    data = payload.get("data")
    events = data.get("events") if isinstance(data, dict) else None
    if not isinstance(events, list):
        raise PayloadError("malformed_payload", "payload has no data.events list")
    kinds = {event.get("eventType") if isinstance(event, dict) else None for event in events}
    if len(kinds) == 1:
        shared = bounded_type(next(iter(kinds)))
        if shared is not None:
            return shared
    return bounded_type(payload.get("eventType")) or HOOK_TYPE


def envelope(headers: HeaderMap, body: bytes, verified: Verified) -> Envelope:
    payload = parse_json_object(body)
    return Envelope(
        dedupe_key=checked_key(payload.get("eventId"), "eventId"),
        type=event_type(payload),
        occurred_at=parse_rfc3339(payload.get("eventTime")),
        headers=select_headers(headers, KEPT_HEADERS),
    )


def bind(settings: OktaSettings) -> Provider:
    """The ``okta`` provider, its secret in the header ``settings`` names."""
    scheme = SharedToken(NAME, settings.header)

    def challenge(
        method: str, query: QueryMap, headers: HeaderMap, keys: Sequence[Key]
    ) -> Reply | None:
        """Okta's verification ``GET``, answered once its authorization header matches."""
        if method != "GET" or CHALLENGE_HEADER not in headers:
            return None
        presented = one_header(headers, CHALLENGE_HEADER)
        value = echoed({CHALLENGE_HEADER: [presented]}, CHALLENGE_HEADER)
        scheme.verify(scheme.check_headers(headers, 0.0, 0), b"", keys)
        return Reply.json({"verification": value})

    def sample_event(secret: str, seq: int, now: int) -> tuple[dict[str, str], bytes]:
        return okta_delivery(settings.header, secret, seq, now, "user.session.start")

    def sign_body(secret: str, body: bytes, _type: str | None, now: int) -> dict[str, str]:
        return {settings.header: secret, "Content-Type": "application/json"}

    return Provider(
        name=NAME,
        # Okta retries a delivery once, after a timeout or an error answer.
        redelivery_horizon_days=1,
        scheme=scheme,
        envelope=envelope,
        sample_event=sample_event,
        body_signer=BodySigner(sign_body),
        configurable=CONFIGURABLE,
        header_challenge=challenge,
        accepted_status=200,
    )


def okta_delivery(
    header: str, secret: str, seq: int, now: int, kind: str
) -> tuple[dict[str, str], bytes]:
    """A delivery of one ``kind`` event as Okta sends it, with its authorization header."""
    at = datetime.fromtimestamp(now, UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z")
    payload = {
        "eventType": HOOK_TYPE,
        "eventTypeVersion": "1.0",
        "cloudEventsVersion": "0.1",
        "source": "https://hookd-sample.okta.com/api/v1/eventHooks/whoql0HfiLGPWc8Jx0g3",
        "eventId": str(uuid.uuid4()),
        "data": {
            "events": [
                {
                    "uuid": str(uuid.uuid4()),
                    "published": at,
                    "eventType": kind,
                    "version": "0",
                    "displayMessage": f"hookd send-test #{seq}",
                    "severity": "INFO",
                    "actor": {"id": "00uhookdsample", "type": "User"},
                }
            ]
        },
        "eventTime": at,
        "contentType": "application/json",
    }
    headers = {header: secret, "Content-Type": "application/json", "User-Agent": "Okta Event Hooks"}
    return headers, compact_json(payload)


CONFIGURABLE = Configurable(settings=OktaSettings, bind=bind)
PROVIDER = bind(OktaSettings())
