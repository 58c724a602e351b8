"""HubSpot signature v3: base64 HMAC-SHA256 of ``POST + URI + body + timestamp`` (ms),
checked against HubSpot's own Python library (``hubspot.utils.signature``).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from pathlib import Path
from typing import Any

import pytest
from hubspot.utils.signature import Signature

from hookd.errors import ConfigError, PayloadError, SignatureError
from hookd.providers import PROVIDERS
from hookd.providers.base import Envelope, Provider, Verified
from hookd.sources import parse_sources

NOW = 1_700_000_000
MS = NOW * 1000
TOLERANCE_S = 300
SECRET = "hubspot-unit-client-secret"
OTHER_SECRET = "hubspot-other-client-secret"
# A query with escapes HubSpot decodes (%3A, %2C) and one it leaves (%20).
URL = "https://hooks.example.com/hooks/hubspot?portal=62515&tag=a%3Ab%2Cc%20d"
# The URI as HubSpot signs it, per its table of decoded characters.
URI = "https://hooks.example.com/hooks/hubspot?portal=62515&tag=a:b,c%20d"
EVENTS: list[dict[str, Any]] = [
    {
        "eventId": 100,
        "subscriptionId": 2417091,
        "portalId": 62515,
        "appId": 54321,
        "occurredAt": MS - 2000,
        "subscriptionType": "contact.propertyChange",
        "attemptNumber": 0,
        "objectId": 123,
        "propertyName": "email",
        "propertyValue": "ada@example.com",
        "changeSource": "CRM",
    },
    {
        "eventId": 101,
        "subscriptionId": 2417091,
        "portalId": 62515,
        "appId": 54321,
        "occurredAt": MS - 1000,
        "subscriptionType": "contact.propertyChange",
        "attemptNumber": 0,
        "objectId": 124,
        "propertyName": "email",
        "propertyValue": "grace@example.com",
        "changeSource": "CRM",
    },
]
BODY = json.dumps(EVENTS).encode()


def provider(url: str = URL) -> Provider:
    bind = PROVIDERS["hubspot"].with_public_url
    assert bind is not None
    return bind(url)


def sdk_signature(
    body: bytes = BODY,
    uri: str = URI,
    millis: int | str = MS,
    secret: str = SECRET,
    method: str = "POST",
) -> str:
    return str(
        Signature.get_signature(
            secret, body.decode(), "v3", http_uri=uri, http_method=method, timestamp=str(millis)
        )
    )


def signed(
    body: bytes = BODY, uri: str = URI, millis: int | str = MS, secret: str = SECRET
) -> dict[str, list[str]]:
    """A request HubSpot's library signed."""
    return {
        "x-hubspot-signature-v3": [sdk_signature(body, uri, millis, secret)],
        "x-hubspot-request-timestamp": [str(millis)],
        "content-type": ["application/json"],
        "user-agent": ["HubSpot Connect 2.0"],
    }


def verify(
    headers: dict[str, list[str]], body: bytes = BODY, *secrets: str, now: float = NOW
) -> Verified:
    p = provider()
    keys = [p.parse_secret(s) for s in (secrets or (SECRET,))]
    return p.verify_request(headers, body, keys, now, TOLERANCE_S)


def accept(headers: dict[str, list[str]], body: bytes = BODY) -> Envelope:
    return provider().envelope(headers, body, verify(headers, body))


def rejected(
    headers: dict[str, list[str]], body: bytes = BODY, *secrets: str, now: float = NOW
) -> str:
    with pytest.raises(SignatureError) as info:
        verify(headers, body, *secrets, now=now)
    return info.value.reason


# --- the other side: HubSpot's library --------------------------------------------


def test_library_signed_request_verifies_and_is_enveloped() -> None:
    verified = verify(signed())
    assert (verified.scheme, verified.key_index, verified.timestamp) == ("hubspot-v3", 0, NOW)
    envelope = accept(signed())
    assert envelope.type == "contact.propertyChange"
    assert envelope.occurred_at is not None
    assert envelope.occurred_at.timestamp() == NOW - 2
    assert envelope.dedupe_key.startswith("batch:")
    assert envelope.headers == {
        "x-hubspot-request-timestamp": str(MS),
        "content-type": "application/json",
        "user-agent": "HubSpot Connect 2.0",
    }


def test_sample_event_verifies_with_hubspots_library() -> None:
    """What ``hookd send-test`` sends passes HubSpot's own check (which reads the real
    clock, so the sample is made now), for the decoded URI."""
    now = int(time.time())
    headers, body = provider().sample_event(SECRET, 2, now)
    assert Signature.is_valid(
        headers["X-HubSpot-Signature-v3"],
        SECRET,
        body.decode(),
        URI,
        "POST",
        "v3",
        headers["X-HubSpot-Request-Timestamp"],
    )
    lowered = {name.lower(): [value] for name, value in headers.items()}
    verified = verify(lowered, body, now=now)
    assert provider().envelope(lowered, body, verified).type == "contact.propertyChange"


def test_second_secret_verifies_with_its_index() -> None:
    assert verify(signed(secret=OTHER_SECRET), BODY, SECRET, OTHER_SECRET).key_index == 1


# --- the URI ----------------------------------------------------------------------


def test_uri_signed_without_decoding_is_bad_signature() -> None:
    """HubSpot decodes %3A and %2C before signing; a signature over the raw URL is not its."""
    assert rejected(signed(uri=URL)) == "bad_signature"


def test_escapes_outside_the_table_stay_encoded() -> None:
    """%20 is not in HubSpot's table: decoding it too is not what HubSpot signs."""
    assert rejected(signed(uri=URI.replace("%20", " "))) == "bad_signature"


def test_lower_case_escapes_are_decoded_too() -> None:
    url = URL.replace("%3A", "%3a").replace("%2C", "%2c")
    p = provider(url)
    verified = p.verify_request(signed(), BODY, [p.parse_secret(SECRET)], NOW, TOLERANCE_S)
    assert verified.key_index == 0


@pytest.mark.parametrize(
    "uri",
    [
        "https://hooks.example.com/hooks/hubspot",
        "https://hooks.example.com/hooks/hubspot?tag=a:b,c%20d&portal=62515",
        "http://hooks.example.com/hooks/hubspot?portal=62515&tag=a:b,c%20d",
        "https://evil.example.com/hooks/hubspot?portal=62515&tag=a:b,c%20d",
    ],
)
def test_signed_for_another_url_is_bad_signature(uri: str) -> None:
    assert rejected(signed(uri=uri)) == "bad_signature"


def test_signed_for_another_method_is_bad_signature() -> None:
    headers = signed()
    headers["x-hubspot-signature-v3"] = [sdk_signature(method="GET")]
    assert rejected(headers) == "bad_signature"


# --- tampering -------------------------------------------------------------------


@pytest.mark.parametrize("bit", [0, 7, 8 * 100 + 5, 8 * len(BODY) - 1])
def test_flipped_body_bit_is_bad_signature(bit: int) -> None:
    body = bytearray(BODY)
    body[bit // 8] ^= 1 << (bit % 8)
    assert rejected(signed(), bytes(body)) == "bad_signature"


def test_wrong_secret_is_bad_signature() -> None:
    assert rejected(signed(secret=OTHER_SECRET)) == "bad_signature"


def test_timestamp_header_changed_inside_the_window_is_bad_signature() -> None:
    headers = signed()
    headers["x-hubspot-request-timestamp"] = [str(MS + 1)]
    assert rejected(headers) == "bad_signature"


@pytest.mark.parametrize("header", ["x-hubspot-signature-v3", "x-hubspot-request-timestamp"])
def test_missing_doubled_or_empty_header(header: str) -> None:
    headers = signed()
    del headers[header]
    assert rejected(headers) == "missing_header"
    headers = signed()
    headers[header] *= 2
    assert rejected(headers) == "duplicate_header"
    headers = signed()
    headers[header] = [" "]
    assert rejected(headers) == "empty_header"


# 32 bytes whose standard base64 has both "+" and "/".
PLUS_SLASH = b"\xfb\xef\xbe\xff\xff\xff" * 5 + b"\x00\x00"


@pytest.mark.parametrize(
    "value",
    [
        sdk_signature()[:-1],
        sdk_signature().rstrip("="),
        sdk_signature()[:-2] + "-" + sdk_signature()[-1],
        base64.b64encode(PLUS_SLASH).decode().replace("+", " "),
        base64.urlsafe_b64encode(PLUS_SLASH).decode(),
        base64.b64encode(b"\x01" * 20).decode(),
    ],
    ids=["truncated", "unpadded", "dash", "space-for-plus", "urlsafe", "sha1-size"],
)
def test_non_canonical_signature_is_malformed_signature(value: str) -> None:
    headers = signed()
    headers["x-hubspot-signature-v3"] = [value]
    assert rejected(headers) == "malformed_signature"


def test_unused_base64_bits_set_is_malformed_signature() -> None:
    """The last character of the 44-character encoding has two unused bits; setting one
    leaves the decoded signature unchanged, and must still be refused."""
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
    genuine = sdk_signature()
    assert genuine.endswith("=") and not genuine.endswith("==")
    last = alphabet.index(genuine[-2])
    for bit in (0, 1):
        other = genuine[:-2] + alphabet[last ^ (1 << bit)] + "="
        assert base64.b64decode(other) == base64.b64decode(genuine)
        headers = signed()
        headers["x-hubspot-signature-v3"] = [other]
        assert rejected(headers) == "malformed_signature"


@pytest.mark.parametrize(
    "raw",
    [
        "12a",
        "-1700000000000",
        "+1700000000000",
        "1.7e12",
        "1700000000000.0",
        "0" + str(MS),
        "1" * 16,
        "\u0661\u0667\u0660\u0660",
    ],
)
def test_malformed_timestamp(raw: str) -> None:
    assert rejected(signed(millis=raw)) == "malformed_timestamp"


@pytest.mark.parametrize(
    ("millis", "reason"),
    [
        (MS - (TOLERANCE_S + 1) * 1000, "timestamp_too_old"),
        (MS + (TOLERANCE_S + 1) * 1000, "timestamp_in_future"),
        (NOW, "timestamp_too_old"),  # seconds where HubSpot writes milliseconds
    ],
    ids=["stale", "future", "seconds"],
)
def test_timestamp_outside_the_window_is_refused(millis: int, reason: str) -> None:
    assert rejected(signed(millis=millis)) == reason


@pytest.mark.parametrize("offset_ms", [-TOLERANCE_S * 1000, TOLERANCE_S * 1000])
def test_timestamp_at_the_edges_is_accepted(offset_ms: int) -> None:
    assert verify(signed(millis=MS + offset_ms)).key_index == 0


def test_one_millisecond_past_the_edges_is_refused() -> None:
    assert rejected(signed(millis=MS - TOLERANCE_S * 1000 - 1)) == "timestamp_too_old"
    assert rejected(signed(millis=MS + TOLERANCE_S * 1000 + 1)) == "timestamp_in_future"


# --- envelope ---------------------------------------------------------------------


def test_retry_with_attempt_numbers_raised_and_events_reordered_is_one_delivery() -> None:
    retried = [{**event, "attemptNumber": 3} for event in reversed(EVENTS)]
    body = json.dumps(retried).encode()
    assert accept(signed(body), body).dedupe_key == accept(signed()).dedupe_key


def test_other_events_are_another_delivery() -> None:
    one = json.dumps(EVENTS[:1]).encode()
    changed = json.dumps([{**EVENTS[0], "propertyValue": "x@example.com"}]).encode()
    keys = {accept(signed(b), b).dedupe_key for b in (BODY, one, changed)}
    assert len(keys) == 3


def test_mixed_subscription_types_have_no_type() -> None:
    events = [EVENTS[0], {**EVENTS[1], "subscriptionType": "deal.creation"}]
    body = json.dumps(events).encode()
    assert accept(signed(body), body).type is None


def locally_signed(body: bytes) -> dict[str, list[str]]:
    """Signed from HubSpot's documented steps over raw bytes (its library takes text, so
    it cannot sign a body that is not UTF-8)."""
    message = b"POST" + URI.encode() + body + str(MS).encode()
    digest = hmac.new(SECRET.encode(), message, hashlib.sha256).digest()
    return {
        "x-hubspot-signature-v3": [base64.b64encode(digest).decode()],
        "x-hubspot-request-timestamp": [str(MS)],
    }


@pytest.mark.parametrize(
    "body",
    [b"{}", b"[]", b'[{"eventId": 1}, 2]', b'{"eventId": 1}', b"not json", b"[\xff]"],
)
def test_authentic_body_that_is_no_event_array_is_malformed_payload(body: bytes) -> None:
    headers = locally_signed(body)
    verified = verify(headers, body)
    with pytest.raises(PayloadError) as info:
        provider().envelope(headers, body, verified)
    assert info.value.reason == "malformed_payload"


def test_local_signer_agrees_with_hubspots_library() -> None:
    assert locally_signed(BODY)["x-hubspot-signature-v3"] == [sdk_signature()]


def test_signature_header_is_never_kept() -> None:
    assert "x-hubspot-signature-v3" not in accept(signed()).headers


# --- secrets and configuration ------------------------------------------------------


def test_empty_secret_is_refused() -> None:
    with pytest.raises(ValueError, match="empty"):
        PROVIDERS["hubspot"].parse_secret("")


def test_source_without_public_url_is_a_one_line_config_error() -> None:
    text = '[[sources]]\nname = "hs"\nprovider = "hubspot"\nsecrets = ["s"]\n'
    with pytest.raises(ConfigError) as info:
        parse_sources(text, Path("hookd.toml"), {})
    message = str(info.value)
    assert "\n" not in message
    assert "public_url" in message and "hubspot" in message


def test_source_with_public_url_verifies_for_that_url() -> None:
    text = (
        f'[[sources]]\nname = "hs"\nprovider = "hubspot"\nsecrets = ["{SECRET}"]\n'
        f'public_url = "{URL}"\n'
    )
    source = parse_sources(text, Path("hookd.toml"), {}).get("hs")
    assert source is not None
    verified = source.adapter.verify_request(signed(), BODY, source.keys, NOW, TOLERANCE_S)
    assert verified.scheme == "hubspot-v3"
