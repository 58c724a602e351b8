"""Okta event hooks through hookd: the authorization header (a static secret, in the
header the admin names) compared in constant time for deliveries and for the one-time
verification ``GET``, answered ``{"verification": ...}`` as Okta's event hook guide
shows; a delivery's batch keyed by its top-level ``eventId``."""

from __future__ import annotations

import json

import pytest

from hookd.errors import PayloadError, SignatureError
from hookd.providers.okta import CONFIGURABLE, OktaSettings

SECRET = "Basic b2t0YTpzdXBlcnNlY3JldA=="
OKTA = CONFIGURABLE.bind(OktaSettings())
CUSTOM = CONFIGURABLE.bind(OktaSettings(header="X-Okta-Secret"))
KEYS = [OKTA.parse_secret(SECRET)]
CHALLENGE = "X1KxbT-X8n2lB6jZ8Q_FpWvSi0s1AZ0hs3wMlD-V"


def delivery(*kinds: str, event_id: str = "b5a188b9-5ece-4636-b041-482ffda96311") -> bytes:
    events = [
        {"uuid": f"u{i}", "published": "2019-04-17T16:50:56.000Z", "eventType": kind}
        for i, kind in enumerate(kinds)
    ]
    return json.dumps(
        {
            "eventType": "com.okta.event_hook",
            "eventTypeVersion": "1.0",
            "cloudEventsVersion": "0.1",
            "source": "https://example.okta.com/api/v1/eventHooks/whoql0HfiLGPWc8Jx0g3",
            "eventId": event_id,
            "data": {"events": events},
            "eventTime": "2019-04-17T16:50:58.184Z",
            "contentType": "application/json",
        }
    ).encode()


def test_verification_get_is_answered_with_the_right_authorization_only() -> None:
    assert OKTA.header_challenge is not None and OKTA.challenge is None
    headers = {"x-okta-verification-challenge": [CHALLENGE], "authorization": [SECRET]}
    reply = OKTA.header_challenge("GET", {}, headers, KEYS)
    assert reply is not None
    assert (reply.status, json.loads(reply.body)) == (200, {"verification": CHALLENGE})
    assert reply.content_type == "application/json"
    for wrong in ({"authorization": [SECRET + "x"]}, {}):
        with pytest.raises(SignatureError):
            OKTA.header_challenge(
                "GET",
                {},
                {**headers, **wrong} if wrong else {"x-okta-verification-challenge": [CHALLENGE]},
                KEYS,
            )
    marked = {**headers, "x-okta-verification-challenge": ["<b>"]}
    with pytest.raises(PayloadError):
        OKTA.header_challenge("GET", {}, marked, KEYS)
    # A delivery (POST), or a GET without the challenge header, is no challenge.
    assert OKTA.header_challenge("POST", {}, headers, KEYS) is None
    assert OKTA.header_challenge("GET", {}, {"authorization": [SECRET]}, KEYS) is None


def test_delivery_is_keyed_by_event_id_and_typed_by_its_events() -> None:
    body = delivery("user.session.start", "user.session.start")
    headers = {"authorization": [SECRET], "content-type": ["application/json"]}
    verified = OKTA.verify_request(headers, body, KEYS, 0, 300)
    env = OKTA.envelope(headers, body, verified)
    assert (env.dedupe_key, env.type) == (
        "b5a188b9-5ece-4636-b041-482ffda96311",
        "user.session.start",
    )
    assert env.occurred_at is not None and env.occurred_at.isoformat().startswith("2019-04-17")
    assert "authorization" not in env.headers
    mixed = delivery("user.session.start", "user.lifecycle.create")
    assert OKTA.envelope(headers, mixed, verified).type == "com.okta.event_hook"
    with pytest.raises(PayloadError):
        OKTA.envelope(headers, json.dumps({"eventId": "x"}).encode(), verified)


def test_wrong_or_missing_authorization_is_refused() -> None:
    body = delivery("user.session.start")
    for headers in ({"authorization": ["Basic nope"]}, {}, {"authorization": [""]}):
        with pytest.raises(SignatureError):
            OKTA.verify_request(headers, body, KEYS, 0, 300)


def test_the_header_can_be_named() -> None:
    body = delivery("user.session.start")
    headers = {"x-okta-secret": [SECRET]}
    assert CUSTOM.verify_request(headers, body, KEYS, 0, 300).scheme == "okta"
    with pytest.raises(SignatureError):
        CUSTOM.verify_request({"authorization": [SECRET]}, body, KEYS, 0, 300)
