"""Intercom through hookd's verifier. Intercom's SDKs carry no webhook verification:
the other side is its documented signature, ``sha1=`` and the hex HMAC-SHA1 of the raw
body keyed with the app's client secret, computed here with the standard library."""

from __future__ import annotations

import hashlib
import hmac
import json
from datetime import UTC, datetime

import pytest

from hookd.errors import PayloadError, SignatureError
from hookd.providers import PROVIDERS
from hookd.providers.base import Verified

INTERCOM = PROVIDERS["intercom"]
NOW = 1_700_000_000
TOLERANCE_S = 300
SECRET = "5b0e8c52-7f1f-4c36-9f5b-7d0b2f4d9a11"
OTHER_SECRET = "0f6ab7a4-2c9d-4a8e-b3c1-6e2d9f0a4b77"
NOTIFICATION_ID = "notif_ccd8a4d0-f965-11e3-a367-c779cae3e1b3"
# The notification object example of Intercom's webhook reference.
BODY = json.dumps(
    {
        "type": "notification_event",
        "topic": "company.created",
        "id": NOTIFICATION_ID,
        "created_at": 1392731331,
        "delivery_attempts": 1,
        "first_sent_at": 1392731392,
        "data": {"item": {"type": "company", "id": "531ee472cce572a6ec000006", "name": "Blue Sun"}},
    }
).encode()


def hub_signature(secret: str, body: bytes) -> str:
    return "sha1=" + hmac.new(secret.encode(), body, hashlib.sha1).hexdigest()


def signed(body: bytes = BODY, *, secret: str = SECRET) -> dict[str, list[str]]:
    return {
        "x-hub-signature": [hub_signature(secret, body)],
        "user-agent": ["intercom-parrot-service-client/1.0"],
        "accept": ["application/json"],
        "content-type": ["application/json"],
    }


def verify(headers: dict[str, list[str]], body: bytes, *secrets: str, now: float = NOW) -> Verified:
    keys = [INTERCOM.parse_secret(s) for s in secrets or (SECRET,)]
    return INTERCOM.verify_request(headers, body, keys, now, TOLERANCE_S)


def refused(headers: dict[str, list[str]], body: bytes = BODY) -> str:
    with pytest.raises(SignatureError) as info:
        verify(headers, body)
    return info.value.reason


def test_notification_signed_as_documented_verifies() -> None:
    headers = signed()
    verified = verify(headers, BODY)
    assert (verified.scheme, verified.key_index, verified.timestamp) == ("intercom-sha1", 0, None)
    envelope = INTERCOM.envelope(headers, BODY, verified)
    assert envelope.dedupe_key == NOTIFICATION_ID
    assert envelope.type == "company.created"
    assert envelope.occurred_at == datetime.fromtimestamp(1392731331, UTC)
    assert envelope.headers == {
        "content-type": "application/json",
        "user-agent": "intercom-parrot-service-client/1.0",
    }
    assert envelope.reply is None


def test_a_retry_keeps_the_notification_id() -> None:
    payload = json.loads(BODY)
    retry = json.dumps({**payload, "delivery_attempts": 2}).encode()
    headers = signed(retry)
    assert INTERCOM.envelope(headers, retry, verify(headers, retry)).dedupe_key == NOTIFICATION_ID


def test_sample_event_is_signed_as_documented() -> None:
    headers, body = INTERCOM.sample_event(SECRET, 1, NOW)
    assert headers["X-Hub-Signature"] == hub_signature(SECRET, body)
    header_map = {name.lower(): [value] for name, value in headers.items()}
    envelope = INTERCOM.envelope(header_map, body, verify(header_map, body))
    assert envelope.dedupe_key == json.loads(body)["id"]
    assert envelope.type == "conversation.user.created"
    assert envelope.occurred_at == datetime.fromtimestamp(NOW, UTC)
    assert "x-hub-signature" not in envelope.headers


def test_ping_is_answered_and_not_stored() -> None:
    """The Developer Hub's test notification: no event, possibly no id."""
    body = json.dumps(
        {
            "type": "notification_event",
            "app_id": "a86dr8yl",
            "data": {"type": "notification_event_data", "item": {"type": "ping", "message": "hi"}},
            "id": None,
            "topic": "ping",
            "created_at": NOW,
        }
    ).encode()
    headers = signed(body)
    envelope = INTERCOM.envelope(headers, body, verify(headers, body))
    assert envelope.reply is not None
    assert envelope.reply.status == 200
    assert envelope.type == "ping"


def test_a_forged_ping_is_refused_like_anything_else() -> None:
    body = b'{"topic": "ping"}'
    assert refused(signed(body, secret=OTHER_SECRET), body) == "bad_signature"


def test_no_timestamp_is_checked() -> None:
    """Intercom signs none: the notification id bounds replays."""
    assert verify(signed(), BODY, now=NOW + 10**7).timestamp is None


def test_rotated_secrets_verify_with_either() -> None:
    assert verify(signed(), BODY, OTHER_SECRET, SECRET).key_index == 1


def test_body_bit_flip_is_bad_signature() -> None:
    flipped = bytearray(BODY)
    flipped[-3] ^= 0x01
    assert refused(signed(), bytes(flipped)) == "bad_signature"


def test_wrong_secret_is_bad_signature() -> None:
    assert refused(signed(secret=OTHER_SECRET)) == "bad_signature"


GOOD = hub_signature(SECRET, BODY)
TAMPERED: list[tuple[str, str | list[str] | None, str]] = [
    ("missing", None, "missing_header"),
    ("doubled", [GOOD, GOOD], "duplicate_header"),
    ("empty", "", "empty_header"),
    ("upper_case_hex", "sha1=" + GOOD.removeprefix("sha1=").upper(), "malformed_signature"),
    ("upper_case_scheme", "SHA1=" + GOOD.removeprefix("sha1="), "malformed_signature"),
    ("short_hex", GOOD[:-1], "malformed_signature"),
    ("no_scheme", GOOD.removeprefix("sha1="), "malformed_signature"),
    (
        "sha256_scheme",
        "sha256=" + hmac.new(SECRET.encode(), BODY, hashlib.sha256).hexdigest(),
        "malformed_signature",
    ),
    ("sha256_length_under_sha1", "sha1=" + "ab" * 32, "malformed_signature"),
    ("hex_with_space", "sha1=" + GOOD[5:25] + " " + GOOD[26:], "malformed_signature"),
]


@pytest.mark.parametrize(
    ("value", "reason"), [case[1:] for case in TAMPERED], ids=[case[0] for case in TAMPERED]
)
def test_tampered_signature_header_is_refused(value: str | list[str] | None, reason: str) -> None:
    headers = signed()
    if value is None:
        del headers["x-hub-signature"]
    else:
        headers["x-hub-signature"] = [value] if isinstance(value, str) else value
    assert refused(headers) == reason


def test_github_style_sha256_header_alone_is_missing_header() -> None:
    headers = signed()
    del headers["x-hub-signature"]
    headers["x-hub-signature-256"] = ["sha256=" + "0" * 64]
    assert refused(headers) == "missing_header"


@pytest.mark.parametrize(
    "payload",
    [
        {"topic": "contact.created"},
        {"id": "", "topic": "contact.created"},
        {"id": 12, "topic": "x"},
    ],
)
def test_authentic_notification_without_id_is_malformed(payload: dict[str, object]) -> None:
    body = json.dumps(payload).encode()
    headers = signed(body)
    with pytest.raises(PayloadError) as info:
        INTERCOM.envelope(headers, body, verify(headers, body))
    assert info.value.reason == "malformed_payload"


@pytest.mark.parametrize(
    ("secret", "message"),
    [("", "secret is empty"), ("client secret", "client secret"), ("sécret", "client secret")],
)
def test_ill_formed_secrets_are_refused(secret: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        INTERCOM.parse_secret(secret)
