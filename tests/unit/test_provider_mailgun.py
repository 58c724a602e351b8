"""Mailgun: the signature block inside the JSON body, ``signature`` = hex HMAC-SHA256
(webhook signing key) of ``timestamp + token``. The other side is the vector of
Mailgun's own PHP library (``tests/Api/WebhookTest.php``) and a signer written from
Mailgun's "Securing Webhooks" steps.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from typing import Any

import pytest

from hookd.errors import PayloadError, SignatureError
from hookd.providers import PROVIDERS
from hookd.providers.base import Envelope, Verified

PROVIDER = PROVIDERS["mailgun"]
TOLERANCE_S = 300

# The published vector.
VECTOR_KEY = "key-3ax6xnjp29jd6fds4gc373sgvjxteol0"
VECTOR_TIMESTAMP = 1403645220
VECTOR_TOKEN = "5egbgr1vjgqxtrnp65xfznchgdccwh5d6i09vijqi3whgowmn6"
VECTOR_SIGNATURE = "9cfc5c41582e51246e73c88d34db3af0a3a2692a76fbab81492842f000256d33"
VECTOR_BAD_TOKEN = "owyldpe6nxhmrn78epljl6bj0orrki1u3d2v5e6cnlmmuox8jr"

NOW = VECTOR_TIMESTAMP
KEY = "mailgun-unit-signing-key"
OTHER_KEY = "mailgun-other-signing-key"
TOKEN = "e0b5477167110d68991efc6b9f89f0a11066af27834600e123"
EVENT_DATA: dict[str, Any] = {
    "id": "CPgfbmQMTCKtHW6uIWtuVe",
    "timestamp": 1403645219.908181,
    "log-level": "info",
    "event": "delivered",
    "recipient": "alice@example.com",
    "message": {"headers": {"message-id": "20130503182626.18666.16540@example.com"}},
}


def sign(key: str, timestamp: str, token: str) -> str:
    """Mailgun's steps: concatenate timestamp and token, HMAC-SHA256 with the key, hex."""
    return hmac.new(key.encode(), (timestamp + token).encode(), hashlib.sha256).hexdigest()


def body_with(block: object, event_data: object = EVENT_DATA) -> bytes:
    return json.dumps({"signature": block, "event-data": event_data}).encode()


def signed(
    key: str = KEY, timestamp: int | str = NOW, token: str = TOKEN, **extra: object
) -> bytes:
    block: dict[str, object] = {
        "timestamp": str(timestamp),
        "token": token,
        "signature": sign(key, str(timestamp), token),
    }
    block.update(extra)
    return body_with(block)


HEADERS = {"content-type": ["application/json"], "user-agent": ["mailgun/treq-16.12.0"]}


def verify(body: bytes, *keys: str, now: float = NOW) -> Verified:
    parsed = [PROVIDER.parse_secret(k) for k in (keys or (KEY,))]
    return PROVIDER.verify_request(HEADERS, body, parsed, now, TOLERANCE_S)


def accept(body: bytes, *keys: str) -> Envelope:
    return PROVIDER.envelope(HEADERS, body, verify(body, *keys))


def rejected(body: bytes, *keys: str, now: float = NOW) -> str:
    with pytest.raises(SignatureError) as info:
        verify(body, *keys, now=now)
    return info.value.reason


# --- the other side: the published vector and Mailgun's steps ----------------------


@pytest.mark.parametrize("timestamp", [str(VECTOR_TIMESTAMP), VECTOR_TIMESTAMP], ids=["str", "int"])
def test_published_vector_verifies(timestamp: int | str) -> None:
    """Mailgun's docs write the timestamp as a string and call it an int: both verify."""
    block = {"timestamp": timestamp, "token": VECTOR_TOKEN, "signature": VECTOR_SIGNATURE}
    verified = verify(body_with(block), VECTOR_KEY)
    assert (verified.scheme, verified.key_index, verified.timestamp) == (
        "mailgun-sha256",
        0,
        VECTOR_TIMESTAMP,
    )


def test_published_bad_vector_is_bad_signature() -> None:
    block = {
        "timestamp": VECTOR_TIMESTAMP,
        "token": VECTOR_BAD_TOKEN,
        "signature": VECTOR_SIGNATURE,
    }
    assert rejected(body_with(block), VECTOR_KEY) == "bad_signature"


def test_signed_event_is_enveloped() -> None:
    envelope = accept(signed())
    assert envelope.dedupe_key == "CPgfbmQMTCKtHW6uIWtuVe"
    assert envelope.type == "delivered"
    assert envelope.occurred_at is not None
    assert envelope.occurred_at.timestamp() == pytest.approx(1403645219.908181)
    assert envelope.headers == {
        "content-type": "application/json",
        "user-agent": "mailgun/treq-16.12.0",
    }


def test_sample_event_passes_mailguns_steps() -> None:
    headers, body = PROVIDER.sample_event(KEY, 5, NOW)
    block = json.loads(body)["signature"]
    expected = sign(KEY, block["timestamp"], block["token"])
    assert hmac.compare_digest(expected, block["signature"])
    assert len(block["token"]) == 50
    lowered = {name.lower(): [value] for name, value in headers.items()}
    envelope = PROVIDER.envelope(lowered, body, verify(body))
    assert envelope.type == "delivered"


def test_parent_signature_verifies_against_the_primary_accounts_key() -> None:
    """A subaccount's event carries the primary account's HMAC as well."""
    body = signed(key="subaccount-key", **{"parent-signature": sign(OTHER_KEY, str(NOW), TOKEN)})
    assert verify(body, KEY, OTHER_KEY).key_index == 1
    assert verify(body, "subaccount-key").key_index == 0
    assert rejected(body, KEY) == "bad_signature"


# --- what is signed, and what is not ----------------------------------------------------


def test_wrong_key_is_bad_signature() -> None:
    assert rejected(signed(key=OTHER_KEY)) == "bad_signature"


def test_no_keys_is_bad_signature() -> None:
    with pytest.raises(SignatureError) as info:
        PROVIDER.verify_request(HEADERS, signed(), [], NOW, TOLERANCE_S)
    assert info.value.reason == "bad_signature"


@pytest.mark.parametrize("field", ["token", "timestamp"])
def test_changed_signed_field_is_bad_signature(field: str) -> None:
    block = json.loads(signed())["signature"]
    block[field] = TOKEN[::-1] if field == "token" else str(NOW - 1)
    assert rejected(body_with(block)) == "bad_signature"


@pytest.mark.parametrize(
    ("bit", "reason"),
    [(0, "bad_signature"), (3, "bad_signature"), (6, "bad_signature"), (7, "missing_signature")],
)
def test_flipped_bit_in_the_token_is_refused(bit: int, reason: str) -> None:
    """A flipped bit in the token is bad_signature; the top bit makes the body invalid
    UTF-8, so no signature block can be read from it at all."""
    body = bytearray(signed())
    at = body.index(TOKEN.encode()) + 10
    body[at] ^= 1 << bit
    assert rejected(bytes(body)) == reason


def test_event_data_is_not_signed() -> None:
    """Mailgun's HMAC covers the timestamp and token only: other event data under a
    genuine signature block verifies (the window and the key are the defence)."""
    block = json.loads(signed())["signature"]
    forged = body_with(block, {**EVENT_DATA, "event": "failed", "id": "other"})
    assert verify(forged).key_index == 0


# --- the signature block's shape --------------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"not json",
        b"\xff",
        b"[]",
        b'"signature"',
        json.dumps({"event-data": EVENT_DATA}).encode(),
    ],
    ids=["empty", "text", "not-utf8", "array", "string", "no-block"],
)
def test_body_without_a_signature_block_is_missing_signature(body: bytes) -> None:
    assert rejected(body) == "missing_signature"


def test_signature_block_that_is_not_an_object_is_malformed_signature() -> None:
    assert rejected(body_with("sig")) == "malformed_signature"


def test_block_without_either_signature_field_is_missing_signature() -> None:
    assert rejected(body_with({"timestamp": str(NOW), "token": TOKEN})) == "missing_signature"


@pytest.mark.parametrize(
    "value",
    [
        sign(KEY, str(NOW), TOKEN).upper(),
        sign(KEY, str(NOW), TOKEN)[:-1],
        sign(KEY, str(NOW), TOKEN) + "0",
        "z" * 64,
        "",
        64,
    ],
    ids=["upper-case", "truncated", "long", "non-hex", "empty", "number"],
)
def test_non_canonical_signature_is_malformed_signature(value: object) -> None:
    block = {"timestamp": str(NOW), "token": TOKEN, "signature": value}
    assert rejected(body_with(block)) == "malformed_signature"


@pytest.mark.parametrize("token", [None, "", 5, "t\u00e9", "t\n", "x" * 513])
def test_missing_or_odd_token_is_malformed_signature(token: object) -> None:
    block: dict[str, object] = {"timestamp": str(NOW), "signature": sign(KEY, str(NOW), TOKEN)}
    if token is not None:
        block["token"] = token
    assert rejected(body_with(block)) == "malformed_signature"


@pytest.mark.parametrize(
    "timestamp",
    [None, True, 1403645220.5, "12a", "-5", "+5", "1.5", "", "\u0661\u0662", "0" * 13],
    ids=[
        "missing",
        "bool",
        "float",
        "letters",
        "minus",
        "plus",
        "fraction",
        "empty",
        "arabic-digits",
        "13-digits",
    ],
)
def test_malformed_timestamp(timestamp: object) -> None:
    block: dict[str, object] = {"token": TOKEN, "signature": sign(KEY, str(timestamp), TOKEN)}
    if timestamp is not None:
        block["timestamp"] = timestamp
    assert rejected(body_with(block)) == "malformed_timestamp"


# --- the window -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("offset", "reason"),
    [(-TOLERANCE_S - 1, "timestamp_too_old"), (TOLERANCE_S + 1, "timestamp_in_future")],
    ids=["stale", "future"],
)
def test_timestamp_outside_the_window_is_refused(offset: int, reason: str) -> None:
    assert rejected(signed(timestamp=NOW + offset)) == reason


@pytest.mark.parametrize("offset", [-TOLERANCE_S, TOLERANCE_S])
def test_timestamp_at_the_edges_is_accepted(offset: int) -> None:
    assert verify(signed(timestamp=NOW + offset)).timestamp == NOW + offset


def test_window_comes_from_the_clock_check_headers_was_given() -> None:
    """The body's timestamp is checked against the clock and window of ``check_headers``."""
    signed_headers = PROVIDER.check_headers(HEADERS, NOW + 1000.0, 2000)
    assert (signed_headers.checked_at, signed_headers.tolerance_s) == (NOW + 1000.0, 2000)
    key = PROVIDER.parse_secret(KEY)
    assert PROVIDER.verify(signed_headers, signed(), [key]).timestamp == NOW
    late = PROVIDER.check_headers(HEADERS, NOW + 1000.0, 999)
    with pytest.raises(SignatureError) as info:
        PROVIDER.verify(late, signed(), [key])
    assert info.value.reason == "timestamp_too_old"


# --- envelope ---------------------------------------------------------------------


def test_a_retry_with_a_new_signature_block_is_the_same_event() -> None:
    later = signed(timestamp=NOW + 60, token="f" * 50)
    assert accept(later).dedupe_key == accept(signed()).dedupe_key


@pytest.mark.parametrize(
    "event_data",
    [None, "x", {"event": "delivered"}, {"id": ""}, {"id": 5}],
    ids=["missing", "not-object", "no-id", "empty-id", "number-id"],
)
def test_authentic_body_without_an_event_id_is_malformed_payload(event_data: object) -> None:
    block = json.loads(signed())["signature"]
    payload: dict[str, object] = {"signature": block}
    if event_data is not None:
        payload["event-data"] = event_data
    body = json.dumps(payload).encode()
    verified = verify(body)
    with pytest.raises(PayloadError) as info:
        PROVIDER.envelope(HEADERS, body, verified)
    assert info.value.reason == "malformed_payload"


def test_empty_secret_is_refused() -> None:
    with pytest.raises(ValueError, match="empty"):
        PROVIDER.parse_secret("")
