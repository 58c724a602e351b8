"""PagerDuty v3 webhooks: ``X-PagerDuty-Signature: v1=<hex>[,v1=<hex>…]`` over the raw
body. The other side is the vector of PagerDuty's own Go client
(``webhookv3/webhookv3_test.go``) and a signer written from PagerDuty's "Verifying
Signatures" steps.
"""

from __future__ import annotations

import hashlib
import hmac
import json

import pytest

from hookd.errors import PayloadError, SignatureError
from hookd.providers import PROVIDERS
from hookd.providers.base import Envelope, Verified

PROVIDER = PROVIDERS["pagerduty"]
NOW = 1_700_000_000
TOLERANCE_S = 300

# The published vector: secret, body and signature of go-pagerduty's test.
VECTOR_SECRET = "lDQHScfUeXUKaQRNF+8XIiDKZ7XX3itBAYzwU0TARw8lJqRnkKl2iB1anSb0Z+IK"
VECTOR_BODY = (
    b'{"event":{"id":"01BWDWL3NYY7LUFPZCC28QUCMK","event_type":"incident.priority_updated",'
    b'"resource_type":"incident","occurred_at":"2021-04-26T17:36:27.458Z","agent":{"html_url":'
    b'"https://acme.pagerduty.com/users/PLH1HKV","id":"PLH1HKV","self":'
    b'"https://api.pagerduty.com/users/PLH1HKV","summary":"Tenex Engineer","type":'
    b'"user_reference"},"client":null,"data":{"id":"PGR0VU2","type":"incident","self":'
    b'"https://api.pagerduty.com/incidents/PGR0VU2","html_url":'
    b'"https://acme.pagerduty.com/incidents/PGR0VU2","number":2,"status":"triggered","title":'
    b'"A little bump in the road","service":{"html_url":'
    b'"https://acme.pagerduty.com/services/PF9KMXH","id":"PF9KMXH","self":'
    b'"https://api.pagerduty.com/services/PF9KMXH","summary":"API Service","type":'
    b'"service_reference"},"assignees":[{"html_url":"https://acme.pagerduty.com/users/PTUXL6G",'
    b'"id":"PTUXL6G","self":"https://api.pagerduty.com/users/PTUXL6G","summary":"User 123",'
    b'"type":"user_reference"}],"escalation_policy":{"html_url":'
    b'"https://acme.pagerduty.com/escalation_policies/PUS0KTE","id":"PUS0KTE","self":'
    b'"https://api.pagerduty.com/escalation_policies/PUS0KTE","summary":"Default","type":'
    b'"escalation_policy_reference"},"teams":[{"html_url":'
    b'"https://acme.pagerduty.com/teams/PFCVPS0","id":"PFCVPS0","self":'
    b'"https://api.pagerduty.com/teams/PFCVPS0","summary":"Engineering","type":'
    b'"team_reference"}],"priority":{"html_url":'
    b'"https://acme.pagerduty.com/account/incident_priorities","id":"PSO75BM","self":'
    b'"https://api.pagerduty.com/priorities/PSO75BM","summary":"P1","type":'
    b'"priority_reference"},"urgency":"high","conference_bridge":{"conference_number":1000,'
    b'"conference_url":"https://example.com"},"resolve_reason":null}}}'
)
VECTOR_SIGNATURE = "v1=0c0b9495b893a39e70d1fea2fe11fbe0a825f88b9f67846f6cc07dd2bc5476cd"
VECTOR_MISMATCH = "v1=7020c8a7ec668a9b7012bc3dd82e483394b038f4230acc6785efbf2a7d8bcaf5"

SECRET = "pagerduty-unit-subscription-secret"
OTHER_SECRET = "pagerduty-other-subscription-secret"
BODY = VECTOR_BODY


def signature(body: bytes = BODY, secret: str = SECRET) -> str:
    """``v1=`` and the Base16 HMAC-SHA256 of the body (PagerDuty's steps 2 and 3)."""
    return "v1=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def request(value: str) -> dict[str, list[str]]:
    return {
        "x-pagerduty-signature": [value],
        "x-webhook-id": ["36ab4d62-7f21-4b5e-a9f1-0d4b2f0c0001"],
        "x-webhook-subscription": ["PX2ZL7A"],
        "content-type": ["application/json"],
        "user-agent": ["PagerDuty-Webhook/V3.0"],
    }


def verify(headers: dict[str, list[str]], body: bytes = BODY, *secrets: str) -> Verified:
    keys = [PROVIDER.parse_secret(s) for s in (secrets or (SECRET,))]
    return PROVIDER.verify_request(headers, body, keys, NOW, TOLERANCE_S)


def accept(headers: dict[str, list[str]], body: bytes = BODY, *secrets: str) -> Envelope:
    return PROVIDER.envelope(headers, body, verify(headers, body, *secrets))


def rejected(headers: dict[str, list[str]], body: bytes = BODY, *secrets: str) -> str:
    with pytest.raises(SignatureError) as info:
        verify(headers, body, *secrets)
    return info.value.reason


# --- the other side: the published vector and PagerDuty's steps ---------------------


def test_published_vector_verifies_and_is_enveloped() -> None:
    headers = request(VECTOR_SIGNATURE)
    assert signature(VECTOR_BODY, VECTOR_SECRET) == VECTOR_SIGNATURE
    verified = verify(headers, VECTOR_BODY, VECTOR_SECRET)
    assert (verified.scheme, verified.key_index, verified.timestamp) == ("pagerduty-v1", 0, None)
    envelope = accept(headers, VECTOR_BODY, VECTOR_SECRET)
    assert envelope.dedupe_key == "01BWDWL3NYY7LUFPZCC28QUCMK"
    assert envelope.type == "incident.priority_updated"
    assert envelope.occurred_at is not None
    assert envelope.occurred_at.isoformat() == "2021-04-26T17:36:27.458000+00:00"
    assert envelope.headers == {
        "x-webhook-id": "36ab4d62-7f21-4b5e-a9f1-0d4b2f0c0001",
        "x-webhook-subscription": "PX2ZL7A",
        "content-type": "application/json",
        "user-agent": "PagerDuty-Webhook/V3.0",
    }


def test_published_mismatch_is_bad_signature() -> None:
    assert rejected(request(VECTOR_MISMATCH), VECTOR_BODY, VECTOR_SECRET) == "bad_signature"


def test_sample_event_passes_pagerdutys_steps() -> None:
    headers, body = PROVIDER.sample_event(SECRET, 4, NOW)
    entries = headers["X-PagerDuty-Signature"].split(",")
    assert any(hmac.compare_digest(signature(body), entry) for entry in entries)
    lowered = {name.lower(): [value] for name, value in headers.items()}
    envelope = accept(lowered, body)
    assert envelope.type == "incident.triggered"
    assert envelope.occurred_at is not None and envelope.occurred_at.timestamp() == NOW
    assert set(envelope.headers) == {
        "x-webhook-id",
        "x-webhook-subscription",
        "content-type",
        "user-agent",
    }


# --- several signatures (secret rotation) and unknown versions ------------------------


@pytest.mark.parametrize(
    "value",
    [
        f"{VECTOR_MISMATCH},{signature()}",
        f"{signature()},{VECTOR_MISMATCH}",
        f"v2=abc,{signature()}",
        f"{signature()}, v0=zz",
        f"v1=NOTHEX,{signature()}",
    ],
    ids=["old-then-new", "new-then-old", "v2-first", "v0-after", "junk-v1-beside"],
)
def test_any_valid_v1_entry_verifies(value: str) -> None:
    assert verify(request(value)).key_index == 0


def test_rotation_verifies_against_either_configured_secret() -> None:
    value = f"{signature(secret=OTHER_SECRET)},{VECTOR_MISMATCH}"
    assert verify(request(value), BODY, SECRET, OTHER_SECRET).key_index == 1


def test_only_other_versions_is_missing_signature() -> None:
    digest = signature().removeprefix("v1=")
    assert rejected(request(f"v2={digest},v0={digest}")) == "missing_signature"
    assert rejected(request(digest)) == "missing_signature"


@pytest.mark.parametrize(
    "value",
    [
        signature().upper().replace("V1=", "v1="),
        signature()[:-1],
        signature() + "0",
        "v1=" + "g" * 64,
        "v1=",
    ],
    ids=["upper-case", "truncated", "long", "non-hex", "empty-digest"],
)
def test_non_canonical_v1_entries_alone_are_malformed_signature(value: str) -> None:
    assert rejected(request(value)) == "malformed_signature"


def test_too_many_entries_is_malformed_signature() -> None:
    assert rejected(request(",".join([signature()] * 17))) == "malformed_signature"


# --- tampering -------------------------------------------------------------------


@pytest.mark.parametrize("bit", [0, 7, 8 * 200 + 1, 8 * len(BODY) - 1])
def test_flipped_body_bit_is_bad_signature(bit: int) -> None:
    body = bytearray(BODY)
    body[bit // 8] ^= 1 << (bit % 8)
    assert rejected(request(signature()), bytes(body)) == "bad_signature"


def test_wrong_secret_is_bad_signature() -> None:
    assert rejected(request(signature(secret=OTHER_SECRET))) == "bad_signature"


def test_no_keys_is_bad_signature() -> None:
    with pytest.raises(SignatureError) as info:
        PROVIDER.verify_request(request(signature()), BODY, [], NOW, TOLERANCE_S)
    assert info.value.reason == "bad_signature"


def test_missing_doubled_or_empty_signature_header() -> None:
    headers = request(signature())
    del headers["x-pagerduty-signature"]
    assert rejected(headers) == "missing_header"
    headers = request(signature())
    headers["x-pagerduty-signature"] *= 2
    assert rejected(headers) == "duplicate_header"
    assert rejected(request("  ")) == "empty_header"


# --- envelope ---------------------------------------------------------------------


def test_retry_with_another_webhook_id_is_the_same_event() -> None:
    again = request(signature())
    again["x-webhook-id"] = ["another-delivery-attempt"]
    assert accept(again).dedupe_key == accept(request(signature())).dedupe_key


@pytest.mark.parametrize(
    "payload",
    [{}, {"event": "x"}, {"event": {"event_type": "incident.triggered"}}, {"event": {"id": ""}}],
    ids=["no-event", "event-not-object", "no-id", "empty-id"],
)
def test_authentic_payload_without_an_event_id_is_malformed_payload(payload: object) -> None:
    body = json.dumps(payload).encode()
    headers = request(signature(body))
    verified = verify(headers, body)
    with pytest.raises(PayloadError) as info:
        PROVIDER.envelope(headers, body, verified)
    assert info.value.reason == "malformed_payload"


def test_unreadable_occurred_at_is_left_out() -> None:
    body = json.dumps({"event": {"id": "E1", "event_type": "x", "occurred_at": "soon"}}).encode()
    envelope = accept(request(signature(body)), body)
    assert (envelope.dedupe_key, envelope.occurred_at) == ("E1", None)


def test_signature_header_is_never_kept() -> None:
    assert "x-pagerduty-signature" not in accept(request(signature())).headers


def test_empty_secret_is_refused() -> None:
    with pytest.raises(ValueError, match="empty"):
        PROVIDER.parse_secret("")


# --- the key reconciliation can name ------------------------------------------------


def triggered(incident: object, event_id: str = "01BWDWL3NYY7LUFPZCC28QUCMK") -> bytes:
    event = {
        "id": event_id,
        "event_type": "incident.triggered",
        "resource_type": "incident",
        "occurred_at": "2021-04-26T17:36:27.458Z",
        "agent": None,
        "client": None,
        "data": {"id": incident, "type": "incident"},
    }
    return json.dumps({"event": event}).encode()


def test_an_incident_trigger_is_keyed_by_its_incident_as_the_log_names_it() -> None:
    body = triggered("PT4KHLK")
    envelope = accept(request(signature(body)), body)
    assert envelope.dedupe_key == "incident.triggered:PT4KHLK"
    # Another delivery of the same trigger (another subscription, a new event.id) is
    # the same event; another incident's trigger is not.
    again = triggered("PT4KHLK", event_id="01OTHEREVENTID0000000000000")
    assert accept(request(signature(again)), again).dedupe_key == envelope.dedupe_key
    other = triggered("PGR0VU2")
    assert accept(request(signature(other)), other).dedupe_key == "incident.triggered:PGR0VU2"


@pytest.mark.parametrize("incident", [None, "", 7])
def test_a_trigger_without_an_incident_id_keeps_its_event_id(incident: object) -> None:
    body = triggered(incident)
    assert accept(request(signature(body)), body).dedupe_key == "01BWDWL3NYY7LUFPZCC28QUCMK"


def test_other_event_types_keep_their_event_id() -> None:
    # The published vector is an incident.priority_updated event of incident PGR0VU2.
    assert accept(request(VECTOR_SIGNATURE), VECTOR_BODY, VECTOR_SECRET).dedupe_key == (
        "01BWDWL3NYY7LUFPZCC28QUCMK"
    )
