"""Twilio: ``X-Twilio-Signature`` over the public URL and the sorted POST parameters (or,
for a JSON body, the URL with ``bodySHA256``), checked against Twilio's own library and
the vectors published in its tests.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from pathlib import Path
from urllib.parse import parse_qsl, urlencode

import pytest
from twilio.request_validator import RequestValidator

from hookd.errors import ConfigError, PayloadError, SignatureError
from hookd.providers import PROVIDERS
from hookd.providers.base import Envelope, Provider, Verified
from hookd.sources import parse_sources

NOW = 1_700_000_000
TOLERANCE_S = 300
TOKEN = "twilio-unit-auth-token"
OTHER_TOKEN = "twilio-other-auth-token"
URL = "https://hooks.example.com/hooks/twilio?source=sms&region=us1"
FORM = "application/x-www-form-urlencoded"

# The vectors of twilio-python's own tests (tests/unit/test_request_validator.py).
VECTOR_TOKEN = "12345"
VECTOR_URL = "https://mycompany.com/myapp.php?foo=1&bar=2"
VECTOR_PARAMS = {
    "CallSid": "CA1234567890ABCDE",
    "Digits": "1234",
    "From": "+14158675309",
    "To": "+18005551212",
    "Caller": "+14158675309",
}
VECTOR_SIGNATURE = "RSOYDt4T1cUTdK1PDd93/VVr8B8="
VECTOR_DUPLICATES = "Sid=CA123&SidAccount=AC123&Digits=5678&Digits=1234"
VECTOR_DUPLICATES_SIGNATURE = "IK+Dwps556ElfBT0I3Rgjkr1wJU="
VECTOR_JSON = b'{"property": "value", "boolean": true}'
VECTOR_JSON_SIGNATURE = "a9nBmqA0ju/hNViExpshrM61xv4="

# A message status callback as Twilio posts it.
PARAMS = [
    ("SmsSid", "SM0123456789abcdef0123456789abcdef"),
    ("SmsStatus", "delivered"),
    ("MessageStatus", "delivered"),
    ("To", "+15558675310"),
    ("MessagingServiceSid", "MG0123456789abcdef0123456789abcdef"),
    ("MessageSid", "SM0123456789abcdef0123456789abcdef"),
    ("AccountSid", "AC0123456789abcdef0123456789abcdef"),
    ("From", "+15017122661"),
    ("ApiVersion", "2010-04-01"),
]
BODY = urlencode(PARAMS).encode()


class Repeated(dict[str, list[str]]):
    """Parameters with every value of a repeated name, as Twilio's library reads them
    from a web framework's multi-dict (``getall``)."""

    def getall(self, name: str) -> list[str]:
        return self[name]


def provider(url: str = URL) -> Provider:
    bind = PROVIDERS["twilio"].with_public_url
    assert bind is not None
    return bind(url)


def sdk_signature(
    url: str, params: object, token: str = TOKEN, algorithm: str | None = None
) -> str:
    return str(RequestValidator(token).compute_signature(url, params, algorithm))


def request(signature: str, content_type: str = FORM) -> dict[str, list[str]]:
    return {
        "x-twilio-signature": [signature],
        "content-type": [content_type],
        "i-twilio-idempotency-token": ["d1b2c3d4-0000-4000-8000-000000000001"],
        "user-agent": ["TwilioProxy/1.1"],
    }


def signed(body: bytes = BODY, url: str = URL, token: str = TOKEN) -> dict[str, list[str]]:
    """A form request Twilio's library signed for ``url``."""
    return request(
        sdk_signature(url, dict(parse_qsl(body.decode(), keep_blank_values=True)), token)
    )


def verify(
    headers: dict[str, list[str]], body: bytes = BODY, *tokens: str, url: str = URL
) -> Verified:
    p = provider(url)
    keys = [p.parse_secret(t) for t in (tokens or (TOKEN,))]
    return p.verify_request(headers, body, keys, NOW, TOLERANCE_S)


def accept(headers: dict[str, list[str]], body: bytes = BODY, url: str = URL) -> Envelope:
    p = provider(url)
    return p.envelope(headers, body, verify(headers, body, url=url))


def rejected(
    headers: dict[str, list[str]], body: bytes = BODY, *tokens: str, url: str = URL
) -> str:
    with pytest.raises(SignatureError) as info:
        verify(headers, body, *tokens, url=url)
    return info.value.reason


# --- the other side: Twilio's library and its published vectors --------------------


def test_published_form_vector_verifies() -> None:
    body = urlencode(VECTOR_PARAMS).encode()
    assert sdk_signature(VECTOR_URL, VECTOR_PARAMS, VECTOR_TOKEN) == VECTOR_SIGNATURE
    verified = verify(request(VECTOR_SIGNATURE), body, VECTOR_TOKEN, url=VECTOR_URL)
    assert verified.scheme == "twilio-sha1"
    assert verified.timestamp is None


def test_published_repeated_parameter_vector_verifies() -> None:
    """A name sent twice signs each of its values, sorted."""
    body = VECTOR_DUPLICATES.encode()
    params = Repeated()
    for name, value in parse_qsl(VECTOR_DUPLICATES):
        params.setdefault(name, []).append(value)
    assert sdk_signature(VECTOR_URL, params, VECTOR_TOKEN) == VECTOR_DUPLICATES_SIGNATURE
    headers = request(VECTOR_DUPLICATES_SIGNATURE)
    assert verify(headers, body, VECTOR_TOKEN, url=VECTOR_URL).key_index == 0


def test_published_json_vector_verifies() -> None:
    """A JSON body: the URL with bodySHA256 appended to its query is what is signed."""
    headers = request(VECTOR_JSON_SIGNATURE, "application/json")
    verified = verify(headers, VECTOR_JSON, VECTOR_TOKEN, url=VECTOR_URL)
    assert verified.scheme == "twilio-sha1"
    digest = hashlib.sha256(VECTOR_JSON).hexdigest()
    uri = f"{VECTOR_URL}&bodySHA256={digest}"
    assert RequestValidator(VECTOR_TOKEN).validate(uri, VECTOR_JSON.decode(), VECTOR_JSON_SIGNATURE)


@pytest.mark.parametrize(
    ("url", "signature"),
    [
        # Signed without the port the URL names (the library's removes_port tests).
        ("https://mycompany.com:1234/myapp.php?foo=1&bar=2", VECTOR_SIGNATURE),
        ("http://mycompany.com:1234/myapp.php?foo=1&bar=2", "Zmvh+3yNM1Phv2jhDCwEM3q5ebU="),
        # Signed with the default port the URL leaves out (its adds_port tests).
        (VECTOR_URL, "kvajT1Ptam85bY51eRf/AJRuM3w="),
        ("http://mycompany.com/myapp.php?foo=1&bar=2", "0ZXoZLH/DfblKGATFgpif+LLRf4="),
    ],
    ids=["https-port-removed", "http-port-removed", "https-443-added", "http-80-added"],
)
def test_published_port_vectors_verify(url: str, signature: str) -> None:
    body = urlencode(VECTOR_PARAMS).encode()
    assert RequestValidator(VECTOR_TOKEN).validate(url, VECTOR_PARAMS, signature)
    assert verify(request(signature), body, VECTOR_TOKEN, url=url).key_index == 0


def test_library_signed_status_callback_verifies_and_is_enveloped() -> None:
    envelope = accept(signed())
    assert envelope.type == "message.delivered"
    assert envelope.occurred_at is None
    # A message status callback is keyed by what it reports, as reconciliation keys it.
    assert envelope.dedupe_key == "message:SM0123456789abcdef0123456789abcdef:delivered"
    assert envelope.headers == {
        "i-twilio-idempotency-token": "d1b2c3d4-0000-4000-8000-000000000001",
        "content-type": FORM,
        "user-agent": "TwilioProxy/1.1",
    }


def test_sample_event_verifies_with_twilios_library() -> None:
    """What ``hookd send-test`` sends is what Twilio's library accepts for the URL."""
    headers, body = provider().sample_event(TOKEN, 3, NOW)
    params = dict(parse_qsl(body.decode(), keep_blank_values=True))
    assert RequestValidator(TOKEN).validate(URL, params, headers["X-Twilio-Signature"])
    lowered = {name.lower(): [value] for name, value in headers.items()}
    assert verify(lowered, body).scheme == "twilio-sha1"
    assert provider().envelope(lowered, body, verify(lowered, body)).type == "message.delivered"


def test_shared_key_hmac_sha256_verifies() -> None:
    """A Webhook Setting with a SharedKey signs with HMAC-SHA256 and says so in a header."""
    params = dict(PARAMS)
    signature = sdk_signature(URL, params, "shared-key-secret", "HMAC_SHA256")
    headers = request(signature)
    headers["x-twilio-webhooks-signature-settings"] = ["key=KS0123,algorithm=HMAC_SHA256"]
    verified = verify(headers, BODY, TOKEN, "shared-key-secret")
    assert (verified.scheme, verified.key_index) == ("twilio-sha256", 1)
    assert "x-twilio-webhooks-signature-settings" in accept_with(headers, "shared-key-secret")


def accept_with(headers: dict[str, list[str]], token: str) -> dict[str, str]:
    p = provider()
    verified = p.verify_request(headers, BODY, [p.parse_secret(token)], NOW, TOLERANCE_S)
    return p.envelope(headers, BODY, verified).headers


# --- the form parameters ----------------------------------------------------------


def test_reordered_parameters_still_verify_with_the_same_key() -> None:
    """Twilio signs the parameters sorted by name: their order in the body is not signed."""
    headers = signed()
    reordered = urlencode(list(reversed(PARAMS))).encode()
    assert reordered != BODY
    assert accept(headers, reordered).dedupe_key == accept(headers).dedupe_key


@pytest.mark.parametrize(
    "change",
    [
        [(n, "undelivered" if n == "MessageStatus" else v) for n, v in PARAMS],
        [*PARAMS, ("ErrorCode", "30003")],
        PARAMS[1:],
        [(n.lower() if n == "To" else n, v) for n, v in PARAMS],
    ],
    ids=["changed-value", "added", "removed", "renamed"],
)
def test_changed_parameters_are_bad_signature(change: list[tuple[str, str]]) -> None:
    assert rejected(signed(), urlencode(change).encode()) == "bad_signature"


def test_body_that_is_no_form_is_bad_signature() -> None:
    """Nothing Twilio signed can be rebuilt from a body that does not parse as a form."""
    assert rejected(signed(), b"SmsSid=SM1&&MessageStatus") == "bad_signature"
    assert rejected(signed(), b"\xff\xfe=1") == "bad_signature"


# --- tampering -------------------------------------------------------------------


@pytest.mark.parametrize("bit", [0, 7, 8 * 40 + 3, 8 * len(BODY) - 1])
def test_flipped_body_bit_is_bad_signature(bit: int) -> None:
    body = bytearray(BODY)
    body[bit // 8] ^= 1 << (bit % 8)
    assert rejected(signed(), bytes(body)) == "bad_signature"


def test_wrong_token_is_bad_signature() -> None:
    assert rejected(signed(token=OTHER_TOKEN)) == "bad_signature"
    assert rejected(signed(), BODY, OTHER_TOKEN) == "bad_signature"


def test_no_keys_is_bad_signature() -> None:
    p = provider()
    with pytest.raises(SignatureError) as info:
        p.verify_request(signed(), BODY, [], NOW, TOLERANCE_S)
    assert info.value.reason == "bad_signature"


@pytest.mark.parametrize(
    "other",
    [
        "https://hooks.example.com/hooks/twilio",  # query left out
        "https://hooks.example.com/hooks/twilio?region=us1&source=sms",  # query reordered
        "https://hooks.example.com/hooks/twilio-2?source=sms&region=us1",
        "http://hooks.example.com/hooks/twilio?source=sms&region=us1",
        "https://evil.example.com/hooks/twilio?source=sms&region=us1",
    ],
)
def test_signed_for_another_url_is_bad_signature(other: str) -> None:
    assert rejected(signed(url=other)) == "bad_signature"


def test_missing_signature_header_is_missing_header() -> None:
    headers = signed()
    del headers["x-twilio-signature"]
    assert rejected(headers) == "missing_header"


def test_doubled_signature_header_is_duplicate_header() -> None:
    headers = signed()
    headers["x-twilio-signature"] *= 2
    assert rejected(headers) == "duplicate_header"


@pytest.mark.parametrize("value", ["", "  "])
def test_empty_signature_header_is_empty_header(value: str) -> None:
    assert rejected(request(value)) == "empty_header"


def flipped_unused_bits(encoded: str) -> list[str]:
    """Other spellings of ``encoded`` that decode to the same bytes."""
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
    data = encoded.rstrip("=")
    pad = len(encoded) - len(data)
    last = alphabet.index(data[-1])
    out = []
    for bit in range({1: 2, 2: 4}[pad]):
        other = data[:-1] + alphabet[last ^ (1 << bit)] + "=" * pad
        assert base64.b64decode(other) == base64.b64decode(encoded)
        out.append(other)
    return out


def test_non_canonical_base64_of_the_genuine_signature_is_malformed_signature() -> None:
    genuine = signed()["x-twilio-signature"][0]
    for other in flipped_unused_bits(genuine):
        assert rejected(request(other)) == "malformed_signature"


@pytest.mark.parametrize(
    "mangle",
    [
        lambda s: s[:-1],
        lambda s: s.rstrip("="),
        lambda s: s.replace("=", "") + "==",
        lambda s: s[:-2] + "!" + s[-1],
        lambda s: base64.urlsafe_b64encode(b"\xfb" * 20).decode(),
        lambda s: base64.b64encode(b"\x01" * 32).decode(),  # SHA-256 sized, no settings
        lambda s: " ".join([s[:10], s[10:]]),
    ],
    ids=["truncated", "unpadded", "overpadded", "bang", "urlsafe", "sha256-size", "space"],
)
def test_non_canonical_signature_is_malformed_signature(mangle: object) -> None:
    genuine = signed()["x-twilio-signature"][0]
    assert callable(mangle)
    assert rejected(request(mangle(genuine))) == "malformed_signature"


def test_unknown_algorithm_is_malformed_signature_and_doubled_settings_duplicate() -> None:
    headers = signed()
    headers["x-twilio-webhooks-signature-settings"] = ["key=KS1,algorithm=HMAC_MD5"]
    assert rejected(headers) == "malformed_signature"
    headers["x-twilio-webhooks-signature-settings"] = ["key=KS1", "key=KS2"]
    assert rejected(headers) == "duplicate_header"


def test_sha1_signature_claimed_as_sha256_is_malformed_signature() -> None:
    headers = signed()
    headers["x-twilio-webhooks-signature-settings"] = ["key=KS1,algorithm=HMAC_SHA256"]
    assert rejected(headers) == "malformed_signature"


def test_json_body_changed_is_bad_signature() -> None:
    digest = hashlib.sha256(VECTOR_JSON).hexdigest()
    signature = sdk_signature(f"{URL}&bodySHA256={digest}", {})
    headers = request(signature, "application/json")
    assert verify(headers, VECTOR_JSON).key_index == 0
    assert rejected(headers, VECTOR_JSON.replace(b"true", b"false")) == "bad_signature"
    # The same body and signature posted as a form: another signed string.
    assert rejected(request(signature), VECTOR_JSON) == "bad_signature"


# --- envelope ---------------------------------------------------------------------


def test_retries_with_another_idempotency_token_are_one_event() -> None:
    """The idempotency token is not signed: the key comes from what Twilio signed."""
    first, again = signed(), signed()
    again["i-twilio-idempotency-token"] = ["another-token"]
    assert accept(first).dedupe_key == accept(again).dedupe_key
    other = [(n, "sent" if n == "MessageStatus" else v) for n, v in PARAMS]
    other_body = urlencode(other).encode()
    assert accept(signed(other_body), other_body).dedupe_key != accept(first).dedupe_key


@pytest.mark.parametrize(
    ("params", "kind"),
    [
        ([("CallSid", "CA1"), ("CallStatus", "completed")], "call.completed"),
        ([("SmsSid", "SM1"), ("SmsStatus", "received"), ("Body", "hi")], "message.received"),
        ([("CallSid", "CA1"), ("RecordingStatus", "completed")], "recording.completed"),
        ([("CallSid", "CA1"), ("Digits", "1")], None),
    ],
)
def test_type_names_the_resource_and_its_status(
    params: list[tuple[str, str]], kind: str | None
) -> None:
    body = urlencode(params).encode()
    assert accept(signed(body), body).type == kind


def test_voice_timestamp_is_occurred_at() -> None:
    params = [
        ("CallSid", "CA1"),
        ("CallStatus", "ringing"),
        ("Timestamp", "Tue, 14 Nov 2023 22:13:20 +0000"),
    ]
    body = urlencode(params).encode()
    envelope = accept(signed(body), body)
    assert envelope.occurred_at is not None
    assert envelope.occurred_at.timestamp() == NOW


def test_json_envelope_keys_by_body_digest_and_reads_cloudevents() -> None:
    events = [
        {
            "id": "EZ1",
            "type": "com.twilio.messaging.message.delivered",
            "time": "2023-11-14T22:13:20Z",
        }
    ]
    body = json.dumps(events).encode()
    digest = hashlib.sha256(body).hexdigest()
    headers = request(sdk_signature(f"{URL}&bodySHA256={digest}", {}), "application/json")
    envelope = accept(headers, body)
    assert envelope.dedupe_key == f"sha256:{digest}"
    assert envelope.type == "com.twilio.messaging.message.delivered"
    assert envelope.occurred_at is not None and envelope.occurred_at.timestamp() == NOW


def test_authentic_json_that_does_not_parse_is_malformed_payload() -> None:
    body = b"{not json"
    digest = hashlib.sha256(body).hexdigest()
    headers = request(sdk_signature(f"{URL}&bodySHA256={digest}", {}), "application/json")
    with pytest.raises(PayloadError) as info:
        accept(headers, body)
    assert info.value.reason == "malformed_payload"


def test_signature_header_is_never_kept() -> None:
    assert "x-twilio-signature" not in accept(signed()).headers


# --- secrets and configuration ------------------------------------------------------


def test_empty_secret_is_refused() -> None:
    with pytest.raises(ValueError, match="empty"):
        PROVIDERS["twilio"].parse_secret("")


def test_source_without_public_url_is_a_one_line_config_error() -> None:
    text = '[[sources]]\nname = "tw"\nprovider = "twilio"\nsecrets = ["tok"]\n'
    with pytest.raises(ConfigError) as info:
        parse_sources(text, Path("hookd.toml"), {})
    message = str(info.value)
    assert "\n" not in message
    assert "public_url" in message and "twilio" in message


def test_source_with_public_url_verifies_for_that_url() -> None:
    text = (
        f'[[sources]]\nname = "tw"\nprovider = "twilio"\nsecrets = ["{TOKEN}"]\n'
        f'public_url = "{URL}"\n'
    )
    source = parse_sources(text, Path("hookd.toml"), {}).get("tw")
    assert source is not None
    verified = source.adapter.verify_request(signed(), BODY, source.keys, NOW, TOLERANCE_S)
    assert verified.scheme == "twilio-sha1"
    headers, body = source.adapter.sample_event(TOKEN, 1, NOW)
    params = dict(parse_qsl(body.decode()))
    assert RequestValidator(TOKEN).validate(URL, params, headers["X-Twilio-Signature"])


def test_signature_is_computed_over_utf8() -> None:
    """A non-ASCII parameter value is signed as UTF-8, as Twilio's library does."""
    params = [("Body", "caf\u00e9 \u2603"), ("SmsSid", "SM1"), ("SmsStatus", "received")]
    body = urlencode(params).encode()
    expected = base64.b64encode(
        hmac.new(
            TOKEN.encode(),
            (URL + "".join(n + v for n, v in sorted(params))).encode(),
            hashlib.sha1,
        ).digest()
    ).decode()
    assert sdk_signature(URL, dict(params)) == expected
    assert verify(request(expected), body).key_index == 0


# --- the keys reconciliation can name ----------------------------------------------

CALL = [
    ("CallSid", "CA0123456789abcdef0123456789abcdef"),
    ("CallStatus", "completed"),
    ("AccountSid", "AC0123456789abcdef0123456789abcdef"),
    ("From", "+15017122661"),
    ("To", "+15558675310"),
    ("Direction", "outbound-api"),
    ("Timestamp", "Mon, 16 Aug 2010 03:45:01 +0000"),
    ("CallbackSource", "call-progress-events"),
    ("SequenceNumber", "3"),
    ("CallDuration", "42"),
    ("ApiVersion", "2010-04-01"),
]


def enveloped(params: list[tuple[str, str]]) -> Envelope:
    body = urlencode(params).encode()
    return accept(signed(body), body)


def test_a_message_status_callback_is_keyed_by_its_sid_and_status() -> None:
    delivered = enveloped(PARAMS)
    assert delivered.dedupe_key == "message:SM0123456789abcdef0123456789abcdef:delivered"
    # The same status again with other parameters (a retry carrying a later
    # RawDlrDoneDate) is the same callback; another status is another.
    later = enveloped([*PARAMS, ("RawDlrDoneDate", "2401021530")])
    assert later.dedupe_key == delivered.dedupe_key
    sent = [(k, "sent" if k in {"SmsStatus", "MessageStatus"} else v) for k, v in PARAMS]
    assert enveloped(sent).dedupe_key == "message:SM0123456789abcdef0123456789abcdef:sent"


def test_a_call_status_callback_is_keyed_by_its_sid_and_status() -> None:
    envelope = enveloped(CALL)
    assert envelope.dedupe_key == "call:CA0123456789abcdef0123456789abcdef:completed"
    assert envelope.type == "call.completed"
    assert envelope.occurred_at is not None


@pytest.mark.parametrize(
    "params",
    [
        # A <Gather> action: CallSid and CallStatus, but no call-progress CallbackSource.
        [(k, v) for k, v in CALL if k != "CallbackSource"] + [("Digits", "1234")],
        # A recording callback names its call but reports the recording.
        [*CALL, ("RecordingSid", "RE01"), ("RecordingStatus", "completed")],
        # An incoming message: SmsStatus only.
        [(k, "received" if k == "SmsStatus" else v) for k, v in PARAMS if k != "MessageStatus"],
    ],
    ids=["gather-action", "recording", "incoming-message"],
)
def test_other_form_posts_keep_the_digest_of_their_parameters(
    params: list[tuple[str, str]],
) -> None:
    assert enveloped(params).dedupe_key.startswith("sha256:")
