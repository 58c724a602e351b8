"""Providers that sign a timestamp header's text followed by the body: SendGrid
(ECDSA P-256), Discord (ed25519) and Zoom (HMAC of ``v0:{timestamp}:{body}``), the last
two also answering handshakes. The real verifiers against the providers' own side.

SendGrid: its Python library (``sendgrid.helpers.eventwebhook.EventWebhook``) and the
vector its test suite publishes; requests signed here with ``cryptography``'s private
key. Discord: PyNaCl signs, and the verification snippet of Discord's documentation
(``VerifyKey(...).verify(f"{timestamp}{body}".encode(), bytes.fromhex(signature))``)
is run on the same requests. Zoom: the HMAC computed by hand as Zoom's documentation and
sample app build it (``"v0:" + timestamp + ":" + body``). Every refusal names its reason.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from collections.abc import Callable
from datetime import UTC, datetime

import pytest
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.hazmat.primitives.asymmetric.utils import (
    decode_dss_signature,
    encode_dss_signature,
)
from nacl.exceptions import BadSignatureError
from nacl.signing import SigningKey, VerifyKey
from sendgrid.helpers.eventwebhook import EventWebhook

from hookd.errors import PayloadError, SignatureError
from hookd.providers import PROVIDERS
from hookd.providers.base import Envelope, Key, Verified

NOW = 1_700_000_000
TOLERANCE_S = 300
Headers = dict[str, list[str]]


def keys_of(provider: str, *secrets: str) -> list[Key]:
    return [PROVIDERS[provider].parse_secret(secret) for secret in secrets]


def verified(
    provider: str, headers: Headers, body: bytes, secrets: tuple[str, ...], now: float = NOW
) -> Verified:
    keys = keys_of(provider, *secrets)
    return PROVIDERS[provider].verify_request(headers, body, keys, now, TOLERANCE_S)


def accepted(provider: str, headers: Headers, body: bytes, *secrets: str) -> Envelope:
    checked = verified(provider, headers, body, secrets)
    return PROVIDERS[provider].envelope(headers, body, checked)


def reason(
    provider: str, headers: Headers, body: bytes, secrets: tuple[str, ...], now: float = NOW
) -> str:
    with pytest.raises(SignatureError) as info:
        verified(provider, headers, body, secrets, now)
    return info.value.reason


def flip(body: bytes, index: int = 5) -> bytes:
    """The body with one bit changed."""
    return body[:index] + bytes([body[index] ^ 0x01]) + body[index + 1 :]


def header_cases(names: tuple[str, ...]) -> list[tuple[str, Callable[[Headers], None], str]]:
    """(case id, how the headers are changed, the reason it must give)."""
    cases: list[tuple[str, Callable[[Headers], None], str]] = []
    for name in names:

        def missing(h: Headers, name: str = name) -> None:
            del h[name]

        def doubled(h: Headers, name: str = name) -> None:
            h[name] = [h[name][0], h[name][0]]

        def empty(h: Headers, name: str = name) -> None:
            h[name] = ["  "]

        cases += [
            (f"{name}-missing", missing, "missing_header"),
            (f"{name}-doubled", doubled, "duplicate_header"),
            (f"{name}-empty", empty, "empty_header"),
        ]
    return cases


# --- SendGrid ---------------------------------------------------------------------------

SG_SIG = "x-twilio-email-event-webhook-signature"
SG_TS = "x-twilio-email-event-webhook-timestamp"
P256_N = 0xFFFFFFFF00000000FFFFFFFFFFFFFFFFBCE6FAADA7179E84F3B9CAC2FC632551

# The vector of sendgrid-python's test suite (test/unit/test_eventwebhook.py): the key as
# SendGrid shows it, a signature SendGrid made, and the exact payload it covers.
SG_PUBLISHED_KEY = (
    "MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE83T4O/n84iotIvIW4mdBgQ/7dAfSmpqIM8kF9mN1flpVKS3GRqe6"
    "2gw+2fNNRaINXvVpiglSI8eNEc6wEA3F+g=="
)
SG_PUBLISHED_OTHER_KEY = (
    "MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEqTxd43gyp8IOEto2LdIfjRQrIbsd4SXZkLW6jDutdhXSJCWHw8RE"
    "ntlo7aNDthvj+y7GjUuFDb/R1NGe1OPzpA=="
)
SG_PUBLISHED_SIGNATURE = (
    "MEUCIGHQVtGj+Y3LkG9fLcxf3qfI10QysgDWmMOVmxG0u6ZUAiEAyBiXDWzM+uOe5W0JuG+luQAbPIqHh89M15Tl"
    "uLtEZtM="
)
SG_PUBLISHED_BAD_SIGNATURE = (
    "MEUCIQCtIHJeH93Y+qpYeWrySphQgpNGNr/U+UyUlBkU6n7RAwIgJTz2C+8a8xonZGi6BpSzoQsbVRamr2nlxFDW"
    "YNH3j/0="
)
SG_PUBLISHED_TIMESTAMP = "1600112502"
SG_EVENT_ID = "ZHJvcC0xMDk5NDkxOS1MUnpYbF9OSFN0T0doUTRrb2ZTbV9BLTA"
SG_PUBLISHED_PAYLOAD = (
    json.dumps(
        [
            {
                "email": "hello@world.com",
                "event": "dropped",
                "reason": "Bounced Address",
                "sg_event_id": SG_EVENT_ID,
                "sg_message_id": (
                    "LRzXl_NHStOGhQ4kofSm_A.filterdrecv-p3mdw1-756b745b58-kmzbl-18-5F5FC76C-9.0"
                ),
                "smtp-id": "<LRzXl_NHStOGhQ4kofSm_A@ismtpd0039p1iad1.sendgrid.net>",
                "timestamp": 1600112492,
            }
        ],
        sort_keys=True,
        separators=(",", ":"),
    )
    + "\r\n"
)

SG_PRIVATE = ec.derive_private_key(0x5EED_5E9D_6A1D_0001, ec.SECP256R1())
SG_OTHER_PRIVATE = ec.derive_private_key(0x5EED_5E9D_6A1D_0002, ec.SECP256R1())


def sg_public(key: ec.EllipticCurvePrivateKey) -> str:
    """The verification key as SendGrid shows it: base64 of the DER SubjectPublicKeyInfo."""
    der = key.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return base64.b64encode(der).decode()


SG_KEY = sg_public(SG_PRIVATE)
SG_OTHER_KEY = sg_public(SG_OTHER_PRIVATE)


def sg_events(*pairs: tuple[str, str], timestamp: int = NOW - 5) -> bytes:
    events = [
        {"email": "a@example.com", "timestamp": timestamp + i, "event": kind, "sg_event_id": eid}
        for i, (kind, eid) in enumerate(pairs)
    ]
    return json.dumps(events).encode()


SG_BODY = sg_events(("delivered", "rWVYmVk90MjZJ9iohOBa3w=="), ("open", "FOTFFO0ecsBE-zxFXfs6WA=="))


def sg_sign(
    body: bytes, timestamp: str = str(NOW), key: ec.EllipticCurvePrivateKey = SG_PRIVATE
) -> Headers:
    """What SendGrid sends: the DER signature of ``timestamp + body``, base64."""
    der = key.sign(timestamp.encode() + body, ec.ECDSA(hashes.SHA256()))
    return {
        SG_SIG: [base64.b64encode(der).decode()],
        SG_TS: [timestamp],
        "content-type": ["application/json"],
    }


def sdk_accepts(headers: Headers, body: bytes, key: str = SG_KEY) -> bool:
    webhook = EventWebhook()
    public = webhook.convert_public_key_to_ecdsa(key)
    return bool(
        webhook.verify_signature(body.decode(), headers[SG_SIG][0], headers[SG_TS][0], public)
    )


def test_sendgrid_published_vector_verifies_and_keys_by_its_event_id() -> None:
    body = SG_PUBLISHED_PAYLOAD.encode()
    headers = {SG_SIG: [SG_PUBLISHED_SIGNATURE], SG_TS: [SG_PUBLISHED_TIMESTAMP]}
    assert sdk_accepts(headers, body, SG_PUBLISHED_KEY)
    keys = keys_of("sendgrid", SG_OTHER_KEY, SG_PUBLISHED_KEY)
    provider = PROVIDERS["sendgrid"]
    checked = provider.verify_request(headers, body, keys, 1600112502.5, TOLERANCE_S)
    assert (checked.scheme, checked.key_index, checked.timestamp) == (
        "sendgrid-ecdsa",
        1,
        1600112502,
    )
    envelope = provider.envelope(headers, body, checked)
    assert envelope.dedupe_key == "events:" + hashlib.sha256(SG_EVENT_ID.encode()).hexdigest()
    assert envelope.type == "dropped"
    assert envelope.occurred_at == datetime.fromtimestamp(1600112492, UTC)
    assert envelope.headers == {SG_TS: SG_PUBLISHED_TIMESTAMP}
    assert envelope.reply is None
    assert envelope.ack is None


@pytest.mark.parametrize(
    ("signature", "key"),
    [
        (SG_PUBLISHED_BAD_SIGNATURE, SG_PUBLISHED_KEY),
        (SG_PUBLISHED_SIGNATURE, SG_PUBLISHED_OTHER_KEY),
    ],
    ids=["published-bad-signature", "published-bad-key"],
)
def test_sendgrid_published_refusals_are_bad_signature(signature: str, key: str) -> None:
    body = SG_PUBLISHED_PAYLOAD.encode()
    headers = {SG_SIG: [signature], SG_TS: [SG_PUBLISHED_TIMESTAMP]}
    assert not sdk_accepts(headers, body, key)
    assert reason("sendgrid", headers, body, (key,), now=1600112502) == "bad_signature"


def test_sendgrid_high_s_is_accepted_and_its_twin_is_the_same_delivery() -> None:
    """SendGrid's own signature has s > n/2; (r, n - s) verifies too, for the SDK and for
    hookd, and keys the same event: malleability cannot make a second row."""
    der = base64.b64decode(SG_PUBLISHED_SIGNATURE)
    r, s = decode_dss_signature(der)
    assert s > P256_N // 2
    twin = base64.b64encode(encode_dss_signature(r, P256_N - s)).decode()
    body = SG_PUBLISHED_PAYLOAD.encode()
    keys = keys_of("sendgrid", SG_PUBLISHED_KEY)
    provider = PROVIDERS["sendgrid"]
    envelopes = []
    for signature in (SG_PUBLISHED_SIGNATURE, twin):
        headers = {SG_SIG: [signature], SG_TS: [SG_PUBLISHED_TIMESTAMP]}
        assert sdk_accepts(headers, body, SG_PUBLISHED_KEY)
        checked = provider.verify_request(headers, body, keys, 1600112502, TOLERANCE_S)
        envelopes.append(provider.envelope(headers, body, checked))
    assert envelopes[0].dedupe_key == envelopes[1].dedupe_key


def test_sendgrid_request_signed_with_the_private_key_verifies_for_sdk_and_hookd() -> None:
    headers = sg_sign(SG_BODY)
    assert sdk_accepts(headers, SG_BODY)
    envelope = accepted("sendgrid", headers, SG_BODY, SG_OTHER_KEY, SG_KEY)
    ids = sorted(["rWVYmVk90MjZJ9iohOBa3w==", "FOTFFO0ecsBE-zxFXfs6WA=="])
    assert envelope.dedupe_key == "events:" + hashlib.sha256("\n".join(ids).encode()).hexdigest()
    assert envelope.type == "batch"
    assert envelope.occurred_at == datetime.fromtimestamp(NOW - 5, UTC)


@pytest.mark.parametrize(
    "tamper",
    ["body-bit-flip", "wrong-key", "other-timestamp", "signed-by-other-key"],
)
def test_sendgrid_tampering_is_bad_signature_for_both(tamper: str) -> None:
    headers, body, key = sg_sign(SG_BODY), SG_BODY, SG_KEY
    if tamper == "body-bit-flip":
        body = flip(SG_BODY)
    elif tamper == "wrong-key":
        key = SG_OTHER_KEY
    elif tamper == "other-timestamp":
        headers[SG_TS] = [str(NOW - 1)]
    else:
        headers = sg_sign(SG_BODY, key=SG_OTHER_PRIVATE)
    assert not sdk_accepts(headers, body, key)
    assert reason("sendgrid", headers, body, (key,)) == "bad_signature"


@pytest.mark.parametrize(
    ("case", "change", "expected"),
    header_cases((SG_SIG, SG_TS)),
    ids=[case for case, _, _ in header_cases((SG_SIG, SG_TS))],
)
def test_sendgrid_header_problems(
    case: str, change: Callable[[Headers], None], expected: str
) -> None:
    headers = sg_sign(SG_BODY)
    change(headers)
    assert reason("sendgrid", headers, SG_BODY, (SG_KEY,)) == expected


def _non_canonical_base64(value: str) -> str:
    """The same bytes with other unused low bits in the last character before '='."""
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
    stripped = value.rstrip("=")
    last = alphabet.index(stripped[-1])
    return stripped[:-1] + alphabet[last ^ 0x01] + value[len(stripped) :]


def _padded_der(signature: str) -> str:
    """``r`` written with a superfluous leading zero byte: BER, not DER."""
    r, s = decode_dss_signature(base64.b64decode(signature))
    r_bytes = b"\x00" + r.to_bytes(33, "big")
    r_part = b"\x02" + bytes([len(r_bytes)]) + r_bytes
    s_raw = s.to_bytes((s.bit_length() + 8) // 8, "big")
    s_part = b"\x02" + bytes([len(s_raw)]) + s_raw
    inner = r_part + s_part
    return base64.b64encode(b"\x30" + bytes([len(inner)]) + inner).decode()


@pytest.mark.parametrize(
    "case",
    [
        "non-canonical-base64",
        "bad-base64",
        "not-der",
        "trailing-byte",
        "padded-integer",
        "too-long",
    ],
)
def test_sendgrid_malformed_signatures(case: str) -> None:
    headers = sg_sign(SG_BODY)
    # ECDSA signatures vary in length; one of 3n bytes has no padding bits to change.
    while len(base64.b64decode(headers[SG_SIG][0])) % 3 == 0:
        headers = sg_sign(SG_BODY)
    good = headers[SG_SIG][0]
    if case == "non-canonical-base64":
        value = _non_canonical_base64(good)
        assert base64.b64decode(value) == base64.b64decode(good)
    elif case == "bad-base64":
        value = good[:-4] + "!!=="
    elif case == "not-der":
        value = base64.b64encode(b"\x00" * 64).decode()
    elif case == "trailing-byte":
        value = base64.b64encode(base64.b64decode(good) + b"\x00").decode()
    elif case == "padded-integer":
        value = _padded_der(good)
    else:
        value = base64.b64encode(b"\x30" * 80).decode()
    headers[SG_SIG] = [value]
    assert reason("sendgrid", headers, SG_BODY, (SG_KEY,)) == "malformed_signature"


@pytest.mark.parametrize(
    ("timestamp", "expected"),
    [
        (NOW - TOLERANCE_S - 1, "timestamp_too_old"),
        (NOW + TOLERANCE_S + 1, "timestamp_in_future"),
        ("17e8", "malformed_timestamp"),
    ],
    ids=["stale", "future", "not-digits"],
)
def test_sendgrid_timestamp_window(timestamp: int | str, expected: str) -> None:
    headers = sg_sign(SG_BODY, str(timestamp))
    assert reason("sendgrid", headers, SG_BODY, (SG_KEY,)) == expected


def test_sendgrid_key_is_the_set_of_event_ids_not_the_bytes() -> None:
    first = sg_events(("delivered", "id-1"), ("open", "id-2"))
    reordered = json.dumps(list(reversed(json.loads(first))), indent=2).encode()
    third = sg_events(("delivered", "id-1"), ("open", "id-3"))
    keys = [
        accepted("sendgrid", sg_sign(b), b, SG_KEY).dedupe_key for b in (first, reordered, third)
    ]
    assert keys[0] == keys[1] != keys[2]


def test_sendgrid_type_is_the_shared_event_else_batch_and_ids_may_be_missing() -> None:
    same = sg_events(("bounce", "id-1"), ("bounce", "id-2"))
    assert accepted("sendgrid", sg_sign(same), same, SG_KEY).type == "bounce"
    legacy = json.dumps([{"email": "a@example.com", "timestamp": NOW, "event": "unsubscribe"}])
    body = legacy.encode()
    envelope = accepted("sendgrid", sg_sign(body), body, SG_KEY)
    assert envelope.dedupe_key == "body:" + hashlib.sha256(body).hexdigest()
    assert envelope.type == "unsubscribe"


@pytest.mark.parametrize(
    "body",
    [b"{}", b"[]", b"[1]", b"not json", b'[{"sg_event_id": 7}]', b'[{"sg_event_id": ""}]'],
)
def test_sendgrid_unusable_bodies_are_malformed_payload(body: bytes) -> None:
    headers = sg_sign(body)
    checked = verified("sendgrid", headers, body, (SG_KEY,))
    with pytest.raises(PayloadError) as info:
        PROVIDERS["sendgrid"].envelope(headers, body, checked)
    assert info.value.reason == "malformed_payload"


def test_sendgrid_secret_forms() -> None:
    pem = SG_PRIVATE.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    headers = sg_sign(SG_BODY)
    assert verified("sendgrid", headers, SG_BODY, (pem.decode(),)).key_index == 0
    rsa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048).public_key()
    p384 = ec.derive_private_key(7, ec.SECP384R1()).public_key()
    for other in (rsa_key, p384):
        der = other.public_bytes(
            serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
        )
        with pytest.raises(ValueError, match="P-256"):
            PROVIDERS["sendgrid"].parse_secret(base64.b64encode(der).decode())
    with pytest.raises(ValueError, match="verification key") as info:
        PROVIDERS["sendgrid"].parse_secret("not-a-key-at-all")
    assert "not-a-key" not in str(info.value)


def test_sendgrid_sample_event_signs_with_the_private_key() -> None:
    pkcs8 = SG_PRIVATE.private_bytes(
        serialization.Encoding.DER,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    sample_headers, body = PROVIDERS["sendgrid"].sample_event(
        base64.b64encode(pkcs8).decode(), 1, NOW
    )
    headers = {name.lower(): [value] for name, value in sample_headers.items()}
    assert sdk_accepts(headers, body)
    assert accepted("sendgrid", headers, body, SG_KEY).type == "batch"
    with pytest.raises(ValueError, match="cannot sign"):
        PROVIDERS["sendgrid"].sample_event(SG_KEY, 1, NOW)


# --- Discord ----------------------------------------------------------------------------

DC_SIG = "x-signature-ed25519"
DC_TS = "x-signature-timestamp"
DC_SEED = bytes(range(32))
DC_OTHER_SEED = bytes(range(100, 132))
DC_SIGNER = SigningKey(DC_SEED)
DC_KEY = DC_SIGNER.verify_key.encode().hex()
DC_OTHER_KEY = SigningKey(DC_OTHER_SEED).verify_key.encode().hex()
# 2023-11-14T22:13:20Z as a snowflake (worker, process and increment bits 0x2A).
DC_ID = str(((NOW * 1000 - 1_420_070_400_000) << 22) | 0x2A)


def dc_body(kind: int, **extra: object) -> bytes:
    payload: dict[str, object] = {
        "id": DC_ID,
        "application_id": "1100000000000000000",
        "type": kind,
        "token": "interaction-token",
        "version": 1,
    }
    payload.update(extra)
    return json.dumps(payload).encode()


DC_COMMAND = dc_body(2, data={"id": "1", "name": "ping", "type": 1})


def dc_sign(body: bytes, timestamp: str = str(NOW), signer: SigningKey = DC_SIGNER) -> Headers:
    """What Discord sends: the ed25519 signature of ``timestamp + body``, hex."""
    signature = signer.sign(timestamp.encode() + body).signature.hex()
    return {DC_SIG: [signature], DC_TS: [timestamp], "content-type": ["application/json"]}


def docs_snippet_accepts(headers: Headers, body: bytes, public_key: str = DC_KEY) -> bool:
    """The Python check from Discord's "Validating Security Request Headers"."""
    verify_key = VerifyKey(bytes.fromhex(public_key))
    signature, timestamp = headers[DC_SIG][0], headers[DC_TS][0]
    try:
        verify_key.verify(f"{timestamp}{body.decode()}".encode(), bytes.fromhex(signature))
    except BadSignatureError:
        return False
    return True


def test_discord_pynacl_signed_command_verifies_and_is_deferred() -> None:
    headers = dc_sign(DC_COMMAND)
    assert docs_snippet_accepts(headers, DC_COMMAND)
    checked = verified("discord", headers, DC_COMMAND, (DC_OTHER_KEY, DC_KEY))
    assert (checked.scheme, checked.key_index, checked.timestamp) == ("discord-ed25519", 1, NOW)
    envelope = PROVIDERS["discord"].envelope(headers, DC_COMMAND, checked)
    assert envelope.dedupe_key == DC_ID
    assert envelope.type == "interaction.application_command"
    assert envelope.occurred_at == datetime.fromtimestamp(NOW, UTC)
    assert envelope.reply is None
    assert envelope.ack is not None
    assert json.loads(envelope.ack.body) == {"type": 5}
    assert (envelope.ack.status, envelope.ack.content_type) == (200, "application/json")


@pytest.mark.parametrize(
    ("kind", "stored", "answer"),
    [
        (2, "interaction.application_command", {"type": 5}),
        (3, "interaction.message_component", {"type": 6}),
        (4, "interaction.application_command_autocomplete", {"type": 8, "data": {"choices": []}}),
        (5, "interaction.modal_submit", {"type": 5}),
    ],
)
def test_discord_interaction_types_and_their_deferred_answers(
    kind: int, stored: str, answer: dict[str, object]
) -> None:
    body = dc_body(kind, data={"custom_id": "x"})
    envelope = accepted("discord", dc_sign(body), body, DC_KEY)
    assert envelope.type == stored
    assert envelope.ack is not None
    assert json.loads(envelope.ack.body) == answer


def test_discord_ping_is_answered_pong_and_stores_nothing() -> None:
    body = json.dumps({"id": DC_ID, "application_id": "1", "type": 1, "version": 1}).encode()
    envelope = accepted("discord", dc_sign(body), body, DC_KEY)
    assert envelope.reply is not None
    assert (envelope.reply.status, json.loads(envelope.reply.body)) == (200, {"type": 1})


def test_discord_webhook_events_ping_and_event() -> None:
    ping = json.dumps({"version": 1, "application_id": "1", "type": 0}).encode()
    answered = accepted("discord", dc_sign(ping), ping, DC_KEY)
    assert answered.reply is not None
    assert (answered.reply.status, answered.reply.body) == (204, b"")
    event = json.dumps(
        {
            "version": 1,
            "application_id": "1",
            "type": 1,
            "event": {
                "type": "APPLICATION_AUTHORIZED",
                "timestamp": "2024-10-18T14:42:53.064834",
                "data": {"integration_type": 1},
            },
        }
    ).encode()
    envelope = accepted("discord", dc_sign(event), event, DC_KEY)
    assert envelope.reply is None
    assert envelope.ack is not None
    assert (envelope.ack.status, envelope.ack.body) == (204, b"")
    assert envelope.type == "APPLICATION_AUTHORIZED"
    assert envelope.dedupe_key == "event:sha256:" + hashlib.sha256(event).hexdigest()
    assert envelope.occurred_at == datetime(2024, 10, 18, 14, 42, 53, 64834, tzinfo=UTC)


@pytest.mark.parametrize(
    "body",
    [
        dc_body(9),
        dc_body(2, id="not-a-snowflake"),
        dc_body(2, id=12345),
        json.dumps({"id": DC_ID, "type": "2"}).encode(),
        json.dumps({"type": 1, "event": {"timestamp": "x"}}).encode(),
        b"[]",
    ],
    ids=["unknown-type", "bad-id", "numeric-id", "string-type", "event-without-type", "array"],
)
def test_discord_unusable_bodies_are_malformed_payload(body: bytes) -> None:
    headers = dc_sign(body)
    checked = verified("discord", headers, body, (DC_KEY,))
    with pytest.raises(PayloadError) as info:
        PROVIDERS["discord"].envelope(headers, body, checked)
    assert info.value.reason == "malformed_payload"


@pytest.mark.parametrize("tamper", ["body-bit-flip", "wrong-key", "other-timestamp"])
def test_discord_tampering_is_bad_signature_for_both(tamper: str) -> None:
    headers, body, key = dc_sign(DC_COMMAND), DC_COMMAND, DC_KEY
    if tamper == "body-bit-flip":
        body = flip(DC_COMMAND, 20)
    elif tamper == "wrong-key":
        key = DC_OTHER_KEY
    else:
        headers[DC_TS] = [str(NOW + 1)]
    assert not docs_snippet_accepts(headers, body, key)
    assert reason("discord", headers, body, (key,)) == "bad_signature"


def test_discord_upper_case_hex_is_malformed_though_it_decodes_the_same() -> None:
    headers = dc_sign(DC_COMMAND)
    headers[DC_SIG] = [headers[DC_SIG][0].upper()]
    assert docs_snippet_accepts(headers, DC_COMMAND)  # bytes.fromhex ignores case
    assert reason("discord", headers, DC_COMMAND, (DC_KEY,)) == "malformed_signature"


@pytest.mark.parametrize(
    "value",
    [lambda s: s[:-2], lambda s: s + "00", lambda s: "zz" + s[2:], lambda s: s[:64] + " " + s[65:]],
    ids=["short", "long", "not-hex", "inner-space"],
)
def test_discord_malformed_signatures(value: Callable[[str], str]) -> None:
    headers = dc_sign(DC_COMMAND)
    headers[DC_SIG] = [value(headers[DC_SIG][0])]
    assert reason("discord", headers, DC_COMMAND, (DC_KEY,)) == "malformed_signature"


@pytest.mark.parametrize(
    ("case", "change", "expected"),
    header_cases((DC_SIG, DC_TS)),
    ids=[case for case, _, _ in header_cases((DC_SIG, DC_TS))],
)
def test_discord_header_problems(
    case: str, change: Callable[[Headers], None], expected: str
) -> None:
    headers = dc_sign(DC_COMMAND)
    change(headers)
    assert reason("discord", headers, DC_COMMAND, (DC_KEY,)) == expected


@pytest.mark.parametrize(
    ("timestamp", "expected"),
    [(NOW - TOLERANCE_S - 1, "timestamp_too_old"), (NOW + TOLERANCE_S + 1, "timestamp_in_future")],
    ids=["stale", "future"],
)
def test_discord_timestamp_window(timestamp: int, expected: str) -> None:
    headers = dc_sign(DC_COMMAND, str(timestamp))
    assert docs_snippet_accepts(headers, DC_COMMAND)  # authentic, but outside the window
    assert reason("discord", headers, DC_COMMAND, (DC_KEY,)) == expected


def test_discord_secret_is_the_hex_public_key() -> None:
    for bad in ("", DC_KEY[:-2], "zz" + DC_KEY[2:]):
        with pytest.raises(ValueError, match="64 hex digits"):
            PROVIDERS["discord"].parse_secret(bad)
    sample_headers, body = PROVIDERS["discord"].sample_event(DC_SEED.hex(), 3, NOW)
    headers = {name.lower(): [value] for name, value in sample_headers.items()}
    assert docs_snippet_accepts(headers, body)
    assert accepted("discord", headers, body, DC_KEY).type == "interaction.application_command"


# --- Zoom -------------------------------------------------------------------------------

ZM_SIG = "x-zm-signature"
ZM_TS = "x-zm-request-timestamp"
ZM_SECRET = "zoom-unit-secret-token"
ZM_OTHER = "zoom-other-secret-token"


def zm_event(**extra: object) -> bytes:
    payload: dict[str, object] = {
        "event": "meeting.started",
        "event_ts": 1_700_000_000_123,
        "payload": {
            "account_id": "AAAAAAAAAAAAAAAAAAAAAA",
            "object": {"id": "81234567890", "uuid": "4444AAAiAAAAAiAiAiiAii==", "topic": "t"},
        },
    }
    payload.update(extra)
    return json.dumps(payload).encode()


ZM_BODY = zm_event()


def zm_sign(
    body: bytes, timestamp: str = str(NOW), secret: str = ZM_SECRET, tracking: str = "t-1"
) -> Headers:
    """As Zoom's docs and sample build it: ``v0=`` + hex HMAC of ``v0:{ts}:{body}``."""
    message = f"v0:{timestamp}:".encode() + body
    digest = hmac.new(secret.encode(), message, hashlib.sha256).hexdigest()
    return {
        ZM_SIG: [f"v0={digest}"],
        ZM_TS: [timestamp],
        "x-zm-trackingid": [tracking],
        "content-type": ["application/json; charset=utf-8"],
    }


def test_zoom_hand_signed_event_verifies() -> None:
    headers = zm_sign(ZM_BODY)
    checked = verified("zoom", headers, ZM_BODY, (ZM_OTHER, ZM_SECRET))
    assert (checked.scheme, checked.key_index, checked.timestamp) == ("zoom-v0", 1, NOW)
    envelope = PROVIDERS["zoom"].envelope(headers, ZM_BODY, checked)
    assert envelope.type == "meeting.started"
    assert envelope.dedupe_key.startswith("meeting.started:1700000000123:")
    assert envelope.occurred_at == datetime.fromtimestamp(1_700_000_000.123, UTC)
    assert envelope.headers["x-zm-trackingid"] == "t-1"
    assert envelope.reply is None


def test_zoom_url_validation_is_answered_with_the_verifying_secret() -> None:
    body = json.dumps(
        {
            "payload": {"plainToken": "qgg8vlvZRS6UYooatFL8Aw"},
            "event_ts": 1654503849680,
            "event": "endpoint.url_validation",
        }
    ).encode()
    envelope = accepted("zoom", zm_sign(body), body, ZM_OTHER, ZM_SECRET)
    expected = hmac.new(ZM_SECRET.encode(), b"qgg8vlvZRS6UYooatFL8Aw", hashlib.sha256).hexdigest()
    assert envelope.reply is not None
    assert envelope.reply.status == 200
    assert json.loads(envelope.reply.body) == {
        "plainToken": "qgg8vlvZRS6UYooatFL8Aw",
        "encryptedToken": expected,
    }
    forged = zm_sign(body, secret="attacker")
    assert reason("zoom", forged, body, (ZM_SECRET,)) == "bad_signature"


@pytest.mark.parametrize("token", ["", "x" * 257, "tab\there", None])
def test_zoom_url_validation_with_a_bad_plain_token_is_malformed_payload(token: str | None) -> None:
    inner = {} if token is None else {"plainToken": token}
    body = json.dumps({"event": "endpoint.url_validation", "payload": inner}).encode()
    headers = zm_sign(body)
    checked = verified("zoom", headers, body, (ZM_SECRET,))
    with pytest.raises(PayloadError):
        PROVIDERS["zoom"].envelope(headers, body, checked)


def test_zoom_dedupe_key_survives_a_retry_and_separates_events() -> None:
    def key(body: bytes, **kwargs: str) -> str:
        return accepted("zoom", zm_sign(body, **kwargs), body, ZM_SECRET).dedupe_key

    first = key(ZM_BODY)
    retried = key(ZM_BODY, timestamp=str(NOW + 120), tracking="t-2")
    reformatted = json.dumps(json.loads(ZM_BODY), indent=1, sort_keys=True).encode()
    with_token = zm_event(download_token="per-delivery-token")
    other_object = zm_event(payload={"account_id": "A", "object": {"id": "2"}})
    later = zm_event(event_ts=1_700_000_000_124)
    assert first == retried == key(reformatted) == key(with_token)
    assert len({first, key(other_object), key(later)}) == 3
    no_ts = json.dumps({"event": "user.created", "payload": {}}).encode()
    assert key(no_ts) == "user.created:body:" + hashlib.sha256(no_ts).hexdigest()


@pytest.mark.parametrize("tamper", ["body-bit-flip", "wrong-secret", "other-timestamp"])
def test_zoom_tampering_is_bad_signature(tamper: str) -> None:
    headers, body, secret = zm_sign(ZM_BODY), ZM_BODY, ZM_SECRET
    if tamper == "body-bit-flip":
        body = flip(ZM_BODY)
    elif tamper == "wrong-secret":
        secret = ZM_OTHER
    else:
        headers[ZM_TS] = [str(NOW - 1)]
    assert reason("zoom", headers, body, (secret,)) == "bad_signature"


@pytest.mark.parametrize(
    "value",
    [
        lambda d: "v0=" + d.upper(),
        lambda d: "v1=" + d,
        lambda d: d,
        lambda d: "v0=" + d[:-1],
        lambda d: "v0=" + base64.b64encode(bytes.fromhex(d)).decode(),
    ],
    ids=["upper-case-hex", "other-version", "no-version", "short", "base64"],
)
def test_zoom_malformed_signatures(value: Callable[[str], str]) -> None:
    headers = zm_sign(ZM_BODY)
    digest = headers[ZM_SIG][0].removeprefix("v0=")
    headers[ZM_SIG] = [value(digest)]
    assert reason("zoom", headers, ZM_BODY, (ZM_SECRET,)) == "malformed_signature"


@pytest.mark.parametrize(
    ("case", "change", "expected"),
    header_cases((ZM_SIG, ZM_TS)),
    ids=[case for case, _, _ in header_cases((ZM_SIG, ZM_TS))],
)
def test_zoom_header_problems(case: str, change: Callable[[Headers], None], expected: str) -> None:
    headers = zm_sign(ZM_BODY)
    change(headers)
    assert reason("zoom", headers, ZM_BODY, (ZM_SECRET,)) == expected


@pytest.mark.parametrize(
    ("timestamp", "expected"),
    [
        (NOW - TOLERANCE_S - 1, "timestamp_too_old"),
        (NOW + TOLERANCE_S + 1, "timestamp_in_future"),
        # Zoom's timestamp is in seconds; thirteen digits of milliseconds are no timestamp.
        (NOW * 1000, "malformed_timestamp"),
    ],
    ids=["stale", "future", "milliseconds"],
)
def test_zoom_timestamp_window(timestamp: int, expected: str) -> None:
    headers = zm_sign(ZM_BODY, str(timestamp))
    assert reason("zoom", headers, ZM_BODY, (ZM_SECRET,)) == expected


def test_zoom_sample_event_verifies() -> None:
    sample_headers, body = PROVIDERS["zoom"].sample_event(ZM_SECRET, 4, NOW)
    headers = {name.lower(): [value] for name, value in sample_headers.items()}
    assert headers[ZM_SIG] == zm_sign(body)[ZM_SIG]
    assert accepted("zoom", headers, body, ZM_SECRET).type == "meeting.started"
