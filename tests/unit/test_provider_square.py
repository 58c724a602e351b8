"""Square through hookd's verifier, with Square's Python SDK
(``square.utils.webhooks_helper.verify_signature``) as the other side and the signed
notification from that SDK's own tests as the published vector."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
from square.utils.webhooks_helper import verify_signature

from hookd.errors import ConfigError, PayloadError, SignatureError
from hookd.providers import PROVIDERS
from hookd.providers.base import Provider, Verified
from hookd.sources import parse_sources

REGISTERED = PROVIDERS["square"]
NOW = 1_700_000_000
TOLERANCE_S = 300

# square-python-sdk tests/integration/test_webhooks_helper.py
SDK_BODY = (
    '{"merchant_id":"MLEFBHHSJGVHD","type":"webhooks.test_notification","event_id":'
    '"ac3ac95b-f97d-458c-a6e6-18981597e05f","created_at":"2022-07-13T20:30:59.037339943Z",'
    '"data":{"type":"webhooks","id":"bc368e64-01aa-407e-b46e-3231809b1129"}}'
)
SDK_SIGNATURE = "GF4YkrJgGBDZ9NIYbNXBnMzqb2HoL4RW/S6vkZ9/2N4="
SDK_KEY = "Ibxx_5AKakO-3qeNVR61Dw"
SDK_URL = "https://webhook.site/679a4f3a-dcfa-49ee-bac5-9d0edad886b9"
# The same tests' escaped-body case.
ESCAPED_BODY = '{"data":{"type":"webhooks","id":">id<"}}'
ESCAPED_SIGNATURE = "Cxt7+aTi4rKgcA0bC4g9EHdVtLSDWdqccmL5MvihU4U="
ESCAPED_KEY = "signature-key"
ESCAPED_URL = "https://webhook.site/webhooks"

URL = "https://hooks.example.com/hooks/square"
KEY = "Lk3nD9Qx_7aPv2Rw-5sYtA"
OTHER_KEY = "MCmhFRxGX82xMwg5FsaoQA"
BODY = json.dumps(
    {
        "merchant_id": "MLEFBHHSJGVHD",
        "type": "payment.created",
        "event_id": "6a8f5f28-54a1-4eb0-a98a-3111513fd4fc",
        "created_at": "2023-11-14T22:13:20.123456Z",
        "data": {"type": "payment", "id": "KkAkhdMsgzn59SM8A89WgKwekxLZY"},
    },
    separators=(",", ":"),
).encode()


def bound(url: str = URL) -> Provider:
    assert REGISTERED.with_public_url is not None
    return REGISTERED.with_public_url(url)


def signature(key: str, url: str, body: bytes) -> str:
    """Square's documented signature: base64 HMAC-SHA256 of URL + body."""
    return base64.b64encode(
        hmac.new(key.encode(), url.encode() + body, hashlib.sha256).digest()
    ).decode()


def signed(body: bytes = BODY, *, key: str = KEY, url: str = URL) -> dict[str, list[str]]:
    return {
        "x-square-hmacsha256-signature": [signature(key, url, body)],
        "square-environment": ["Production"],
        "square-initial-delivery-timestamp": ["2023-11-14T22:13:21.5Z"],
        "content-type": ["application/json"],
    }


def verify(headers: dict[str, list[str]], body: bytes, *keys: str, url: str = URL) -> Verified:
    provider = bound(url)
    parsed = [provider.parse_secret(k) for k in keys or (KEY,)]
    return provider.verify_request(headers, body, parsed, NOW, TOLERANCE_S)


def refused(headers: dict[str, list[str]], body: bytes = BODY, *, url: str = URL) -> str:
    with pytest.raises(SignatureError) as info:
        verify(headers, body, url=url)
    return info.value.reason


def sdk_accepts(header: str, body: bytes, key: str = KEY, url: str = URL) -> bool:
    return verify_signature(
        request_body=body.decode(), signature_header=header, signature_key=key, notification_url=url
    )


# --- published vectors ----------------------------------------------------------------


def test_square_sdk_vector_verifies() -> None:
    body = SDK_BODY.encode()
    headers = {"x-square-hmacsha256-signature": [SDK_SIGNATURE]}
    assert sdk_accepts(SDK_SIGNATURE, body, SDK_KEY, SDK_URL)
    verified = verify(headers, body, SDK_KEY, url=SDK_URL)
    assert (verified.scheme, verified.key_index, verified.timestamp) == (
        "square-hmacsha256",
        0,
        None,
    )
    envelope = bound(SDK_URL).envelope(headers, body, verified)
    assert envelope.dedupe_key == "ac3ac95b-f97d-458c-a6e6-18981597e05f"
    assert envelope.type == "webhooks.test_notification"
    assert envelope.occurred_at == datetime(2022, 7, 13, 20, 30, 59, 37339, tzinfo=UTC)
    assert envelope.headers == {}


def test_square_sdk_escaped_body_vector_verifies() -> None:
    body = ESCAPED_BODY.encode()
    headers = {"x-square-hmacsha256-signature": [ESCAPED_SIGNATURE]}
    assert sdk_accepts(ESCAPED_SIGNATURE, body, ESCAPED_KEY, ESCAPED_URL)
    assert verify(headers, body, ESCAPED_KEY, url=ESCAPED_URL).key_index == 0
    # Authentic but without an event_id: nothing to key it by.
    with pytest.raises(PayloadError):
        bound(ESCAPED_URL).envelope(
            headers, body, verify(headers, body, ESCAPED_KEY, url=ESCAPED_URL)
        )


def test_sdk_vector_against_another_notification_url_is_bad_signature() -> None:
    """The SDK's url-mismatch case: one character of the URL changed."""
    other = "https://webhook.site/79a4f3a-dcfa-49ee-bac5-9d0edad886b9"
    headers = {"x-square-hmacsha256-signature": [SDK_SIGNATURE]}
    assert not sdk_accepts(SDK_SIGNATURE, SDK_BODY.encode(), SDK_KEY, other)
    with pytest.raises(SignatureError) as info:
        verify(headers, SDK_BODY.encode(), SDK_KEY, url=other)
    assert info.value.reason == "bad_signature"


# --- Square's SDK as the other side ---------------------------------------------------


def test_square_sdk_accepts_hookd_sample_event() -> None:
    provider = bound()
    headers, body = provider.sample_event(KEY, 2, int(time.time()))
    assert sdk_accepts(headers["x-square-hmacsha256-signature"], body)
    header_map = {name.lower(): [value] for name, value in headers.items()}
    verified = verify(header_map, body)
    envelope = provider.envelope(header_map, body, verified)
    assert envelope.dedupe_key == json.loads(body)["event_id"]
    assert envelope.type == "payment.updated"
    assert envelope.headers["square-environment"] == "Sandbox"
    assert "x-square-hmacsha256-signature" not in envelope.headers


def test_request_signed_as_square_documents_verifies_for_both() -> None:
    headers = signed()
    assert sdk_accepts(headers["x-square-hmacsha256-signature"][0], BODY)
    envelope = bound().envelope(headers, BODY, verify(headers, BODY))
    assert envelope.dedupe_key == "6a8f5f28-54a1-4eb0-a98a-3111513fd4fc"
    assert envelope.occurred_at == datetime(2023, 11, 14, 22, 13, 20, 123456, tzinfo=UTC)
    assert envelope.headers == {
        "square-environment": "Production",
        "square-initial-delivery-timestamp": "2023-11-14T22:13:21.5Z",
        "content-type": "application/json",
    }


def test_rotated_keys_verify_with_either() -> None:
    headers = signed()
    assert verify(headers, BODY, OTHER_KEY, KEY).key_index == 1


def test_body_bit_flip_is_bad_signature_for_both() -> None:
    flipped = bytearray(BODY)
    flipped[5] ^= 0x04
    header = signed()["x-square-hmacsha256-signature"][0]
    assert not sdk_accepts(header, bytes(flipped))
    assert refused(signed(), bytes(flipped)) == "bad_signature"


def test_wrong_key_is_bad_signature_for_both() -> None:
    headers = signed(key=OTHER_KEY)
    assert not sdk_accepts(headers["x-square-hmacsha256-signature"][0], BODY)
    assert refused(headers) == "bad_signature"


def test_a_different_public_url_is_bad_signature_for_both() -> None:
    """Signed for the URL registered with Square; the source says another."""
    headers = signed(url=URL)
    elsewhere = "https://hooks.example.com/hooks/square2"
    assert not sdk_accepts(headers["x-square-hmacsha256-signature"][0], BODY, url=elsewhere)
    assert refused(headers, url=elsewhere) == "bad_signature"
    assert refused(headers, url=URL + "/") == "bad_signature"


def non_canonical(encoded: str) -> str:
    """The same bytes with a non-zero padding bit: decodes alike, is not what Square sends."""
    last = encoded.rstrip("=")[-1]
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
    bumped = alphabet[alphabet.index(last) ^ 1]
    return encoded.rstrip("=")[:-1] + bumped + "="


GOOD = signature(KEY, URL, BODY)
TAMPERED_HEADERS: list[tuple[str, str | list[str] | None, str]] = [
    ("missing", None, "missing_header"),
    ("doubled", [GOOD, GOOD], "duplicate_header"),
    ("empty", "", "empty_header"),
    ("non_canonical_padding_bits", non_canonical(GOOD), "malformed_signature"),
    ("missing_padding", GOOD.rstrip("="), "malformed_signature"),
    ("url_safe_alphabet", GOOD.replace("+", "-").replace("/", "_") + "-", "malformed_signature"),
    ("hex_digest", hashlib.sha256(b"x").hexdigest(), "malformed_signature"),
    ("sha1_length", base64.b64encode(bytes(20)).decode(), "malformed_signature"),
    ("prefixed", "sha256=" + GOOD, "malformed_signature"),
]


@pytest.mark.parametrize(
    ("value", "reason"),
    [case[1:] for case in TAMPERED_HEADERS],
    ids=[case[0] for case in TAMPERED_HEADERS],
)
def test_tampered_signature_header_is_refused(value: str | list[str] | None, reason: str) -> None:
    headers = signed()
    if value is None:
        del headers["x-square-hmacsha256-signature"]
    else:
        headers["x-square-hmacsha256-signature"] = [value] if isinstance(value, str) else value
    assert refused(headers) == reason
    if isinstance(value, str) and value:
        assert not sdk_accepts(value, BODY)


def test_the_non_canonical_variant_decodes_to_the_same_digest() -> None:
    """So that the refusal above is about the encoding, not the bytes."""
    assert base64.b64decode(non_canonical(GOOD)) == base64.b64decode(GOOD)


def test_no_timestamp_is_checked() -> None:
    """Square signs none: an old notification verifies at any clock; dedupe bounds it."""
    provider = bound()
    keys = [provider.parse_secret(KEY)]
    assert provider.verify_request(signed(), BODY, keys, NOW + 10**6, TOLERANCE_S).timestamp is None


# --- configuration ------------------------------------------------------------------


def sources_text(extra: str = "") -> str:
    return f'[[sources]]\nname = "sq"\nprovider = "square"\nsecrets = ["{KEY}"]\n{extra}'


def test_square_source_without_public_url_is_a_one_line_config_error() -> None:
    with pytest.raises(ConfigError) as info:
        parse_sources(sources_text(), Path("hookd.toml"), {})
    message = str(info.value)
    assert "public_url" in message
    assert "\n" not in message


def test_square_source_is_served_by_the_provider_bound_to_its_public_url() -> None:
    sources = parse_sources(sources_text(f'public_url = "{URL}"\n'), Path("hookd.toml"), {})
    source = sources.get("sq")
    assert source is not None
    verified = source.adapter.verify_request(signed(), BODY, source.keys, NOW, TOLERANCE_S)
    assert verified.scheme == "square-hmacsha256"
    other = parse_sources(
        sources_text('public_url = "https://elsewhere.example/hooks/sq"\n'), Path("h.toml"), {}
    ).get("sq")
    assert other is not None
    with pytest.raises(SignatureError, match="bad_signature"):
        other.adapter.verify_request(signed(), BODY, other.keys, NOW, TOLERANCE_S)


@pytest.mark.parametrize(
    ("secret", "message"),
    [("", "secret is empty"), ("key with spaces", "Signature Key"), ("kéy", "Signature Key")],
)
def test_ill_formed_signature_keys_are_refused(secret: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        REGISTERED.parse_secret(secret)


def test_ill_formed_key_in_sources_is_a_config_error() -> None:
    text = (
        f'[[sources]]\nname = "sq"\nprovider = "square"\nsecrets = ["a b"]\npublic_url = "{URL}"\n'
    )
    with pytest.raises(ConfigError, match=r"secrets\.0"):
        parse_sources(text, Path("hookd.toml"), {})


@pytest.mark.parametrize(
    "payload", [{"type": "payment.created"}, {"event_id": ""}, {"event_id": 5}]
)
def test_authentic_payload_without_event_id_is_malformed(payload: dict[str, object]) -> None:
    body = json.dumps(payload).encode()
    headers = signed(body)
    verified = verify(headers, body)
    with pytest.raises(PayloadError) as info:
        bound().envelope(headers, body, verified)
    assert info.value.reason == "malformed_payload"


def test_created_at_without_a_zone_is_utc_as_in_the_events_apis_own_example() -> None:
    # Square's SearchEvents response example writes "2022-04-26T10:08:40.454726".
    body = json.dumps(
        {**json.loads(BODY), "created_at": "2022-04-26T10:08:40.454726"}, separators=(",", ":")
    ).encode()
    headers = signed(body)
    envelope = bound().envelope(headers, body, verify(headers, body))
    assert envelope.occurred_at == datetime(2022, 4, 26, 10, 8, 40, 454726, tzinfo=UTC)
