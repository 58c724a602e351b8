"""Zendesk through hookd's verifier. Zendesk ships no verification library: the other
side is its documented formula, base64(HMACSHA256(TIMESTAMP + BODY)), computed here
with the standard library, and the header examples of its own pages."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from datetime import UTC, datetime

import pytest

from hookd.errors import PayloadError, SignatureError
from hookd.providers import PROVIDERS
from hookd.providers.base import Verified

ZENDESK = PROVIDERS["zendesk"]
NOW = 1_700_000_000  # 2023-11-14T22:13:20Z
NOW_ISO = "2023-11-14T22:13:20Z"
TOLERANCE_S = 300
# The signing secret of Zendesk's own verification example.
SECRET = "dGhpc19zZWNyZXRfaXNfZm9yX3Rlc3Rpbmdfb25seQ=="
OTHER_SECRET = "HRkRd4BeOAoUkfZr-mhauJT64rvBASlJRoIyPsd3zeA="
EVENT_ID = "2b24ef10-19d4-4740-93cf-8f98ec4776c0"
# The event payload example of Zendesk's "Webhook event types" page.
BODY = json.dumps(
    {
        "type": "zen:event-type:user.active_changed",
        "account_id": 12514403,
        "id": EVENT_ID,
        "time": "2099-07-04T05:33:18Z",
        "zendesk_event_version": "2022-06-20",
        "subject": "zen:user:6596848315901",
        "detail": {"id": "6596848315901", "role": "end-user"},
        "event": {"current": False, "previous": True},
    }
).encode()


def zendesk_signature(secret: str, timestamp: str, body: bytes) -> str:
    mac = hmac.new(secret.encode(), timestamp.encode() + body, hashlib.sha256)
    return base64.b64encode(mac.digest()).decode()


def signed(
    body: bytes = BODY, *, secret: str = SECRET, timestamp: str = NOW_ISO
) -> dict[str, list[str]]:
    return {
        "x-zendesk-account-id": ["12514403"],
        "x-zendesk-webhook-id": ["01F1KRFQ6BG29CNWFR60NK5FNY"],
        "x-zendesk-webhook-invocation-id": ["8350205582"],
        "x-zendesk-webhook-signature": [zendesk_signature(secret, timestamp, body)],
        "x-zendesk-webhook-signature-timestamp": [timestamp],
        "content-type": ["application/json"],
    }


def verify(headers: dict[str, list[str]], body: bytes, *secrets: str, now: float = NOW) -> Verified:
    keys = [ZENDESK.parse_secret(s) for s in secrets or (SECRET,)]
    return ZENDESK.verify_request(headers, body, keys, now, TOLERANCE_S)


def refused(headers: dict[str, list[str]], body: bytes = BODY, *, now: float = NOW) -> str:
    with pytest.raises(SignatureError) as info:
        verify(headers, body, now=now)
    return info.value.reason


def test_event_signed_as_documented_verifies_and_is_keyed_by_its_id() -> None:
    headers = signed()
    verified = verify(headers, BODY)
    assert (verified.scheme, verified.key_index, verified.timestamp) == ("zendesk-sha256", 0, NOW)
    envelope = ZENDESK.envelope(headers, BODY, verified)
    assert envelope.dedupe_key == EVENT_ID
    assert envelope.type == "zen:event-type:user.active_changed"
    assert envelope.occurred_at == datetime(2099, 7, 4, 5, 33, 18, tzinfo=UTC)
    assert envelope.headers == {
        "x-zendesk-account-id": "12514403",
        "x-zendesk-webhook-id": "01F1KRFQ6BG29CNWFR60NK5FNY",
        "x-zendesk-webhook-invocation-id": "8350205582",
        "x-zendesk-webhook-signature-timestamp": NOW_ISO,
        "content-type": "application/json",
    }


def test_retried_attempt_and_second_invocation_of_one_event_share_the_key() -> None:
    """A later attempt is signed again with its own timestamp; a second invocation for
    the same event has another invocation id. Both carry the signed event id."""
    later = "2023-11-14T22:14:20Z"
    retry = signed(timestamp=later)
    retry["x-zendesk-webhook-invocation-id"] = ["8350205999"]
    first = ZENDESK.envelope(signed(), BODY, verify(signed(), BODY))
    again = ZENDESK.envelope(retry, BODY, verify(retry, BODY, now=NOW + 60))
    assert first.dedupe_key == again.dedupe_key == EVENT_ID


@pytest.mark.parametrize(
    ("body", "content_type"),
    [
        (b"<ticket><id>35436</id><status>open</status></ticket>", "application/xml"),
        (b"ticket_id=35436&status=open", "application/x-www-form-urlencoded"),
        (b'{"ticket": {"id": 35436, "status": "open"}}', "application/json"),
        (b"", "application/json"),
    ],
)
def test_trigger_payloads_are_keyed_by_the_invocation_id(body: bytes, content_type: str) -> None:
    """A trigger or automation sends the admin's own payload, in any format."""
    headers = signed(body)
    headers["content-type"] = [content_type]
    envelope = ZENDESK.envelope(headers, body, verify(headers, body))
    assert envelope.dedupe_key == "invocation:8350205582"
    assert (envelope.type, envelope.occurred_at) == (None, None)


def test_trigger_payload_without_invocation_id_is_malformed() -> None:
    body = b'{"ticket": 1}'
    headers = signed(body)
    del headers["x-zendesk-webhook-invocation-id"]
    with pytest.raises(PayloadError) as info:
        ZENDESK.envelope(headers, body, verify(headers, body))
    assert info.value.reason == "malformed_payload"


def test_event_with_a_non_string_id_is_malformed() -> None:
    body = json.dumps({"type": "zen:event-type:user.created", "id": 7}).encode()
    headers = signed(body)
    with pytest.raises(PayloadError):
        ZENDESK.envelope(headers, body, verify(headers, body))


def test_sample_event_is_signed_as_documented() -> None:
    headers, body = ZENDESK.sample_event(SECRET, 4, NOW)
    timestamp = headers["X-Zendesk-Webhook-Signature-Timestamp"]
    assert timestamp == NOW_ISO
    assert headers["X-Zendesk-Webhook-Signature"] == zendesk_signature(SECRET, timestamp, body)
    header_map = {name.lower(): [value] for name, value in headers.items()}
    envelope = ZENDESK.envelope(header_map, body, verify(header_map, body))
    assert envelope.dedupe_key == json.loads(body)["id"]
    assert "x-zendesk-webhook-signature" not in envelope.headers


def test_documented_request_headers_parse() -> None:
    """The headers of Zendesk's "Anatomy of a webhook request" page: an ISO 8601
    timestamp and a base64 SHA-256 digest."""
    headers = {
        "x-zendesk-webhook-signature": ["EiqWE3SXTPQpPulBV6OSuuGziIishZNc1VwNZYqZrHU="],
        "x-zendesk-webhook-signature-timestamp": ["2021-03-25T05:09:27Z"],
    }
    at = datetime(2021, 3, 25, 5, 9, 27, tzinfo=UTC).timestamp()
    checked = ZENDESK.check_headers(headers, at, TOLERANCE_S)
    assert checked.timestamp == int(at)
    assert checked.prefix == b"2021-03-25T05:09:27Z"


def test_the_retired_example_signed_body_then_timestamp_is_refused() -> None:
    """An older Zendesk page wrote the formula as (BODY)(TIMESTAMP) and its example
    signature follows that order; the current page, and every implementation, sign
    TIMESTAMP + BODY. hookd follows the current page."""
    secret = "HRkRd4BeOAoUkfZr-mhauJT64rvBASlJRoIyPsd3zeA="
    body = b'{"say": "hello"}'
    timestamp = "2021-07-25T10:00:00Z"
    old_example = "tRDSF7URY8BLCDlaBcQ7FHu051Zk+aAB0NKMP53teMw="
    mac = hmac.new(secret.encode(), body + timestamp.encode(), hashlib.sha256)
    assert base64.b64encode(mac.digest()).decode() == old_example
    at = datetime(2021, 7, 25, 10, 0, tzinfo=UTC).timestamp()
    headers = {
        "x-zendesk-webhook-signature": [old_example],
        "x-zendesk-webhook-signature-timestamp": [timestamp],
    }
    with pytest.raises(SignatureError, match="bad_signature"):
        verify(headers, body, secret, now=at)
    headers["x-zendesk-webhook-signature"] = [zendesk_signature(secret, timestamp, body)]
    assert verify(headers, body, secret, now=at).timestamp == int(at)


# --- tampering --------------------------------------------------------------------


def test_body_bit_flip_is_bad_signature() -> None:
    flipped = bytearray(BODY)
    flipped[3] ^= 0x20
    assert refused(signed(), bytes(flipped)) == "bad_signature"


def test_wrong_secret_is_bad_signature() -> None:
    assert refused(signed(secret=OTHER_SECRET)) == "bad_signature"


def test_timestamp_changed_after_signing_is_bad_signature() -> None:
    headers = signed()
    headers["x-zendesk-webhook-signature-timestamp"] = ["2023-11-14T22:13:21Z"]
    assert refused(headers) == "bad_signature"


def test_the_same_moment_written_with_a_fraction_is_bad_signature() -> None:
    """The timestamp is signed as text: another spelling of the moment does not verify."""
    headers = signed()
    headers["x-zendesk-webhook-signature-timestamp"] = ["2023-11-14T22:13:20.000Z"]
    assert refused(headers) == "bad_signature"


def test_fractional_timestamp_signed_as_sent_verifies() -> None:
    assert verify(signed(timestamp="2023-11-14T22:13:20.5Z"), BODY, now=NOW).timestamp == NOW


def non_canonical(encoded: str) -> str:
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
    last = encoded.rstrip("=")[-1]
    return encoded.rstrip("=")[:-1] + alphabet[alphabet.index(last) ^ 1] + "="


GOOD = zendesk_signature(SECRET, NOW_ISO, BODY)
SIG = "x-zendesk-webhook-signature"
TS = "x-zendesk-webhook-signature-timestamp"
TAMPERED: list[tuple[str, str, str | list[str] | None, str]] = [
    ("signature_missing", SIG, None, "missing_header"),
    ("signature_doubled", SIG, [GOOD, GOOD], "duplicate_header"),
    ("signature_empty", SIG, "", "empty_header"),
    ("signature_padding_bits", SIG, non_canonical(GOOD), "malformed_signature"),
    ("signature_unpadded", SIG, GOOD.rstrip("="), "malformed_signature"),
    ("signature_hex", SIG, hmac.new(b"k", b"m", hashlib.sha256).hexdigest(), "malformed_signature"),
    ("signature_short", SIG, base64.b64encode(bytes(31)).decode(), "malformed_signature"),
    ("timestamp_missing", TS, None, "missing_header"),
    ("timestamp_doubled", TS, [NOW_ISO, NOW_ISO], "duplicate_header"),
    ("timestamp_empty", TS, "", "empty_header"),
    ("timestamp_epoch_seconds", TS, str(NOW), "malformed_timestamp"),
    ("timestamp_with_offset", TS, "2023-11-14T22:13:20+00:00", "malformed_timestamp"),
    ("timestamp_space_separator", TS, "2023-11-14 22:13:20Z", "malformed_timestamp"),
    ("timestamp_no_zone", TS, "2023-11-14T22:13:20", "malformed_timestamp"),
    ("timestamp_impossible_date", TS, "2023-02-30T22:13:20Z", "malformed_timestamp"),
    ("timestamp_lower_case", TS, "2023-11-14t22:13:20z", "malformed_timestamp"),
]


@pytest.mark.parametrize(
    ("header", "value", "reason"),
    [case[1:] for case in TAMPERED],
    ids=[case[0] for case in TAMPERED],
)
def test_tampered_headers_are_refused(
    header: str, value: str | list[str] | None, reason: str
) -> None:
    headers = signed()
    if value is None:
        del headers[header]
    else:
        headers[header] = [value] if isinstance(value, str) else value
    assert refused(headers) == reason


@pytest.mark.parametrize(
    ("timestamp", "now", "reason"),
    [
        ("2023-11-14T22:08:19Z", NOW, "timestamp_too_old"),
        ("2023-11-14T22:08:20Z", NOW + 0.25, "timestamp_too_old"),
        ("2023-11-14T22:18:21Z", NOW, "timestamp_in_future"),
        ("2023-11-14T22:18:20.5Z", NOW, "timestamp_in_future"),
    ],
)
def test_stale_and_future_timestamps_are_refused(timestamp: str, now: float, reason: str) -> None:
    assert refused(signed(timestamp=timestamp), now=now) == reason


@pytest.mark.parametrize("timestamp", ["2023-11-14T22:08:20Z", "2023-11-14T22:18:20Z"])
def test_window_edges_are_inclusive(timestamp: str) -> None:
    assert verify(signed(timestamp=timestamp), BODY).key_index == 0


def test_rotated_secrets_verify_with_either() -> None:
    assert verify(signed(secret=SECRET), BODY, OTHER_SECRET, SECRET).key_index == 1


@pytest.mark.parametrize(
    ("secret", "message"),
    [
        ("", "secret is empty"),
        ("short", "signing secret"),
        ("dGhpc19zZWNyZXRf aXNfZm9yX3Rlc3Rpbmdfb25seQ==", "signing secret"),
        ("dGhpc19zZWNyZXRfaXNfZm9yX3Rlc3Rpbmdfb25seQ==\n", "signing secret"),
        ("dGhpc19zZWNyZXRfaXNfZm9yX3Rlc3Rpbmdfb25seQ===", "signing secret"),
        ("sécret-sécret-sécret", "signing secret"),
    ],
)
def test_ill_formed_secrets_are_refused(secret: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ZENDESK.parse_secret(secret)


def test_the_secret_is_the_text_not_its_base64_decoding() -> None:
    """Zendesk's example keys HMAC with the secret string as shown."""
    assert ZENDESK.parse_secret(SECRET).key == SECRET.encode()
