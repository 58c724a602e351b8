"""Paddle Billing through hookd's verifier, with Paddle's own Python library
(``paddle_billing.Notifications``) as the other side and the signed payloads from that
library's tests as published vectors."""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

import pytest
from paddle_billing.Notifications import PaddleSignature, Secret, Verifier

from hookd.errors import PayloadError, SignatureError
from hookd.providers import PROVIDERS
from hookd.providers.base import Verified

PADDLE = PROVIDERS["paddle"]
NOW = 1_700_000_000
TOLERANCE_S = 300
SECRET = "pdl_ntfset_01hs0t3tw21j988db1pam5xg8m_GrOWLNef+vmtjJYq4mSnHNzvc8uWoJ1I"
OTHER_SECRET = "pdl_ntfset_01gkpjp8bkm3tm53kdgkx6sms7_6h3qd3uFSi9YCD3OLYAShQI90XTI5vEI"

# Paddle's Python library tests (tests/Unit/Notification): two notifications signed by
# Paddle with the destination key below, and one signature header carrying a "dummy"
# h1 beside the real one, checked against three keys of which the last signed.
SDK_SECRET = SECRET
SDK_VECTORS = [
    (
        "ts=1710498758;h1=558bf93944dbeb4790c7a8af6cb2ea435c8ca9c8396aafc1a4e37424ac132744",
        r'{"data":{"id":"ctm_01hs0tqf76sxmp7ba5e4mw1sc8","name":"John Doe","email":'
        r'"blackhole+verification2@paddle.com","locale":"en","status":"active","created_at":'
        r'"2024-03-15T10:32:37.862Z","updated_at":"2024-03-15T10:32:37.862Z","custom_data":'
        r'null,"import_meta":null,"marketing_consent":false},"event_id":'
        r'"evt_01hs0tqfme2xwb2hvwv87p8y3w","event_type":"customer.created","occurred_at":'
        r'"2024-03-15T10:32:38.286848Z","notification_id":"ntf_01hs0tqfrhgkyp39x4wyvy7h6n"}',
        "evt_01hs0tqfme2xwb2hvwv87p8y3w",
        datetime(2024, 3, 15, 10, 32, 38, 286848, tzinfo=UTC),
    ),
    (
        "ts=1710498288;h1=38219b3ba1578184e625c29d201a27cd25bd69e2ec9c3ab87dcb90d87ff73a41",
        r'{"data":{"id":"ctm_01hs0t94g83hs5jdw282ztqa4z","name":"\u00dc\u00c4\u00c5\u00e5'
        r'\u00d6\u00dc\u00c4\u00c5\u00e5\u00d6","email":"blackhole+verification1@paddle.com",'
        r'"locale":"en","status":"active","created_at":"2024-03-15T10:24:48.136Z",'
        r'"updated_at":"2024-03-15T10:24:48.136Z","custom_data":null,"import_meta":null,'
        r'"marketing_consent":false},"event_id":"evt_01hs0t94tjvtv62azjmkbeysz7","event_type":'
        r'"customer.created","occurred_at":"2024-03-15T10:24:48.466759Z","notification_id":'
        r'"ntf_01hs0t94ws0ay8keh5t4rq70ht"}',
        "evt_01hs0t94tjvtv62azjmkbeysz7",
        datetime(2024, 3, 15, 10, 24, 48, 466759, tzinfo=UTC),
    ),
]
ROTATION_HEADER = (
    "ts=1696195954;h1=dummy;h1=d96299976a6eb066f484d7fde011ac56fc32b38fc9940bc419d6e537fdc6ef02"
)
ROTATION_SECRETS = [
    "pdl_ntf_01hbpjmytsa32fhr36nqgc3kgb_TjIG2BXbm83HPXqNfziwe506sBEdqL/4",
    "pdl_ntf_01hbpjmytsa32fhr36nqgc3kgb_vB/yIOnTOCWIvpBadM5jzBZPHc7OmdSo",
    "pdl_ntf_01hbpjmytsa32fhr36nqgc3kgb_WvRO0eL4Bj9rgYYIBZY6wZhG4EHy9jzh",
]

BODY = json.dumps(
    {
        "event_id": "evt_01hv8wvr8d1hm5hkyh3r6ehzmc",
        "event_type": "subscription.created",
        "occurred_at": "2023-11-14T22:13:20.000000Z",
        "notification_id": "ntf_01hv8wvrb2ewsmf8kpgm3ybq0w",
        "data": {"id": "sub_01hv8wvrf5cnbdmba2g3w3dcbr", "status": "active"},
    },
    separators=(",", ":"),
).encode()


@dataclass
class SdkRequest:
    """What Paddle's ``Verifier`` reads from a framework request."""

    headers: dict[str, str]
    body: bytes


def h1(secret: str, ts: int | str, body: bytes) -> str:
    """Paddle's documented signature: HMAC-SHA256 of ``ts:body``, lower-case hex."""
    message = f"{ts}:".encode() + body
    return hmac.new(secret.encode(), message, hashlib.sha256).hexdigest()


def signed(body: bytes = BODY, *, secret: str = SECRET, ts: int = NOW) -> dict[str, list[str]]:
    return {
        "paddle-signature": [f"ts={ts};h1={h1(secret, ts, body)}"],
        "content-type": ["application/json"],
    }


def verify(headers: dict[str, list[str]], body: bytes, *secrets: str, now: float = NOW) -> Verified:
    keys = [PADDLE.parse_secret(s) for s in secrets or (SECRET,)]
    return PADDLE.verify_request(headers, body, keys, now, TOLERANCE_S)


def refused(headers: dict[str, list[str]], body: bytes = BODY, *, now: float = NOW) -> str:
    with pytest.raises(SignatureError) as info:
        verify(headers, body, now=now)
    return info.value.reason


def sdk_accepts(header: str, body: bytes, secret: str = SECRET) -> bool:
    """Paddle's library on the same header and body (no clock involved)."""
    return bool(PaddleSignature().verify(header, body.decode(), Secret(secret)))


# --- published vectors ----------------------------------------------------------------


@pytest.mark.parametrize(("header", "payload", "event_id", "occurred"), SDK_VECTORS)
def test_paddle_signed_notifications_verify(
    header: str, payload: str, event_id: str, occurred: datetime
) -> None:
    body = payload.encode()
    ts = int(header.split(";", maxsplit=1)[0].removeprefix("ts="))
    headers = {"paddle-signature": [header], "content-type": ["application/json"]}
    assert sdk_accepts(header, body, SDK_SECRET)
    verified = verify(headers, body, SDK_SECRET, now=ts + 0.5)
    assert (verified.scheme, verified.key_index, verified.timestamp) == ("paddle-h1", 0, ts)
    envelope = PADDLE.envelope(headers, body, verified)
    assert envelope.dedupe_key == event_id
    assert envelope.type == "customer.created"
    assert envelope.occurred_at == occurred
    assert envelope.headers == {"content-type": "application/json"}


def test_rotation_vector_verifies_with_the_key_that_signed() -> None:
    """A non-hex h1 beside the real one, three keys: the third verifies, as in Paddle's
    library (which accepts it too)."""
    body = b"hello-world"
    request = SdkRequest({"Paddle-Signature": ROTATION_HEADER}, body)
    assert Verifier(0).verify(request, [Secret(s) for s in ROTATION_SECRETS])
    verified = verify(
        {"paddle-signature": [ROTATION_HEADER]}, body, *ROTATION_SECRETS, now=1696195954
    )
    assert verified.key_index == 2
    with pytest.raises(SignatureError) as info:
        verify({"paddle-signature": [ROTATION_HEADER]}, body, *ROTATION_SECRETS[:2], now=1696195954)
    assert info.value.reason == "bad_signature"


# --- Paddle's library as the other side -------------------------------------------


def test_paddle_verifier_accepts_hookd_sample_event_at_the_real_clock() -> None:
    """``send-test``'s request passes Paddle's full Verifier (five-second drift check
    included) and hookd's."""
    now = int(time.time())
    headers, body = PADDLE.sample_event(SECRET, 3, now)
    assert Verifier().verify(SdkRequest(headers, body), Secret(SECRET))
    header_map = {name.lower(): [value] for name, value in headers.items()}
    verified = verify(header_map, body, now=now)
    envelope = PADDLE.envelope(header_map, body, verified)
    payload = json.loads(body)
    assert envelope.dedupe_key == payload["event_id"]
    assert envelope.type == "transaction.completed"
    assert envelope.occurred_at == datetime.fromtimestamp(now, UTC)
    assert "paddle-signature" not in envelope.headers


def test_a_second_h1_from_the_new_key_verifies_during_rotation() -> None:
    header = f"ts={NOW};h1={h1(OTHER_SECRET, NOW, BODY)};h1={h1(SECRET, NOW, BODY)}"
    assert sdk_accepts(header, BODY)
    assert verify({"paddle-signature": [header]}, BODY).key_index == 0
    assert (
        verify(
            {"paddle-signature": [header]}, BODY, "pdl_ntfset_01x_unrelatedkey", SECRET
        ).key_index
        == 1
    )


Mutation = Callable[[dict[str, list[str]]], dict[str, list[str]]]


def with_header(value: str | list[str] | None) -> Mutation:
    def mutate(headers: dict[str, list[str]]) -> dict[str, list[str]]:
        out = dict(headers)
        if value is None:
            del out["paddle-signature"]
        else:
            out["paddle-signature"] = [value] if isinstance(value, str) else value
        return out

    return mutate


GOOD = f"ts={NOW};h1={h1(SECRET, NOW, BODY)}"
TAMPERED_HEADERS: list[tuple[str, str | list[str] | None, str]] = [
    ("missing", None, "missing_header"),
    ("doubled", [GOOD, GOOD], "duplicate_header"),
    ("empty", "", "empty_header"),
    ("upper_case_hex", f"ts={NOW};h1={h1(SECRET, NOW, BODY).upper()}", "malformed_signature"),
    ("short_hex", f"ts={NOW};h1={h1(SECRET, NOW, BODY)[:-1]}", "malformed_signature"),
    ("base64_digest", f"ts={NOW};h1=" + "A" * 43 + "=", "malformed_signature"),
    ("entry_without_equals", f"ts={NOW};h1", "malformed_signature"),
    ("no_h1", f"ts={NOW}", "missing_signature"),
    ("no_ts", f"h1={h1(SECRET, NOW, BODY)}", "malformed_timestamp"),
    # Paddle's library lets the last ts win; hookd takes no choice between two.
    ("two_ts", f"ts={NOW};ts={NOW};h1={h1(SECRET, NOW, BODY)}", "malformed_timestamp"),
    ("ts_not_digits", f"ts={NOW}.0;h1={h1(SECRET, NOW, BODY)}", "malformed_timestamp"),
    ("ts_changed", f"ts={NOW + 1};h1={h1(SECRET, NOW, BODY)}", "bad_signature"),
]


@pytest.mark.parametrize(
    ("value", "reason"),
    [case[1:] for case in TAMPERED_HEADERS],
    ids=[case[0] for case in TAMPERED_HEADERS],
)
def test_tampered_signature_header_is_refused(value: str | list[str] | None, reason: str) -> None:
    headers = with_header(value)(signed())
    assert refused(headers) == reason
    # Paddle's library refuses the single-valued variants too (it raises on some),
    # except two ts entries, which it accepts when the last one is the signed one.
    if isinstance(value, str) and value and not value.startswith(f"ts={NOW};ts="):
        try:
            accepted = sdk_accepts(value, BODY)
        except ValueError:
            accepted = False
        assert not accepted


def test_body_bit_flip_is_bad_signature_for_both() -> None:
    flipped = bytearray(BODY)
    flipped[10] ^= 0x01
    assert refused(signed(), bytes(flipped)) == "bad_signature"
    assert not sdk_accepts(GOOD, bytes(flipped))


def test_wrong_secret_is_bad_signature_for_both() -> None:
    headers = signed(secret=OTHER_SECRET)
    assert refused(headers) == "bad_signature"
    assert not sdk_accepts(headers["paddle-signature"][0], BODY)


@pytest.mark.parametrize(
    ("ts", "now", "reason"),
    [
        (NOW - TOLERANCE_S - 1, NOW, "timestamp_too_old"),
        (NOW, NOW + TOLERANCE_S + 0.25, "timestamp_too_old"),
        (NOW + TOLERANCE_S + 1, NOW, "timestamp_in_future"),
    ],
)
def test_stale_and_future_timestamps_are_refused(ts: int, now: float, reason: str) -> None:
    assert refused(signed(ts=ts), now=now) == reason


@pytest.mark.parametrize("ts", [NOW - TOLERANCE_S, NOW + TOLERANCE_S])
def test_window_edges_are_inclusive(ts: int) -> None:
    assert verify(signed(ts=ts), BODY).timestamp == ts


# --- secret and payload ---------------------------------------------------------------


@pytest.mark.parametrize("secret", [SECRET, OTHER_SECRET, *ROTATION_SECRETS])
def test_endpoint_secret_keys_parse(secret: str) -> None:
    assert PADDLE.parse_secret(secret).key == secret.encode()


@pytest.mark.parametrize(
    ("secret", "message"),
    [
        ("", "secret is empty"),
        ("whsec_stripe_style_secret", "pdl_ntfset_"),
        ("pdl_ntfset_01hs0t3tw21j988db1pam5xg8m", "pdl_ntfset_"),
        ("pdl_ntfset_01hs0t3tw21j988db1pam5xg8m_Gr OWL", "pdl_ntfset_"),
        (" " + SECRET, "pdl_ntfset_"),
        ("apikey_01hs0t3tw21j988db1pam5xg8m", "pdl_ntfset_"),
    ],
)
def test_ill_formed_secrets_are_refused(secret: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        PADDLE.parse_secret(secret)


@pytest.mark.parametrize(
    "payload",
    [
        {"event_type": "customer.created"},
        {"event_id": "", "event_type": "customer.created"},
        {"event_id": "ntf_01hs0tqfrhgkyp39x4wyvy7h6n", "event_type": "customer.created"},
        {"event_id": 7},
    ],
)
def test_authentic_payload_without_an_event_id_is_malformed(payload: dict[str, object]) -> None:
    body = json.dumps(payload).encode()
    headers = signed(body)
    verified = verify(headers, body)
    with pytest.raises(PayloadError) as info:
        PADDLE.envelope(headers, body, verified)
    assert info.value.reason == "malformed_payload"


def test_retry_and_replay_of_one_event_share_the_dedupe_key() -> None:
    """A replay is a new notification (new notification_id) of the same event_id."""
    payload = json.loads(BODY)
    replay = {**payload, "notification_id": "ntf_01hv8x0000replay0000000000"}
    keys = set()
    for body, ts in ((BODY, NOW), (BODY, NOW + 60), (json.dumps(replay).encode(), NOW + 120)):
        headers = signed(body, ts=ts)
        verified = verify(headers, body, now=ts)
        keys.add(PADDLE.envelope(headers, body, verified).dedupe_key)
    assert keys == {"evt_01hv8wvr8d1hm5hkyh3r6ehzmc"}
