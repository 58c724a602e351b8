"""Tampered, forged and malformed requests never get in, and fail only as
``SignatureError`` (401) or ``PayloadError`` (400) with the documented reason."""

from __future__ import annotations

import json

import pytest

from hookd.errors import PayloadError, SignatureError
from hookd.providers import PROVIDERS
from tests.unit.webhook_requests import (
    CASE_IDS,
    CASES,
    NOW,
    OTHER_V1A_SIGNING,
    PROVIDER_NAMES,
    SECRETS,
    SIGNATURE_HEADER,
    TIMED,
    TIMESTAMP_HEADER,
    TOLERANCE_S,
    V1A_PUBLIC,
    V1A_SIGNING,
    Case,
    accept,
    hex_hmac,
    signed_request,
    verify,
)

BODY = b'{"id": "evt_tamper", "type": "charge.succeeded", "action": "opened"}'


def rejected(
    provider: str, headers: dict[str, list[str]], body: bytes = BODY, *secrets: str
) -> str:
    """The reason a request is refused; fails the test if it is accepted."""
    with pytest.raises(SignatureError) as info:
        verify(provider, headers, body, *secrets)
    return info.value.reason


def payload_rejected(provider: str, body: bytes, content_type: str = "application/json") -> str:
    """The reason an authentic request's body is refused by ``envelope``."""
    headers = signed_request(provider, body, content_type=content_type)
    with pytest.raises(PayloadError) as info:
        accept(provider, headers, body)
    return info.value.reason


def with_signature(provider: str, value: str) -> dict[str, list[str]]:
    """A request whose headers are all genuine except the signature header value."""
    headers = signed_request(provider, BODY)
    headers[SIGNATURE_HEADER[provider]] = [value]
    return headers


def sig_of(provider: str) -> str:
    return signed_request(provider, BODY)[SIGNATURE_HEADER[provider]][0]


def test_untampered_request_verifies_for_every_case() -> None:
    """Baseline: the requests tampered with below verify before tampering."""
    for case in CASES:
        headers = signed_request(case.provider, BODY, secret=case.signing)
        assert verify(case.provider, headers, BODY, case.configured).scheme == case.scheme


# --- body and secret -----------------------------------------------------------


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
@pytest.mark.parametrize("bit", [0, 7, 8 * len(BODY) - 1])
def test_flipped_body_bit_is_bad_signature(case: Case, bit: int) -> None:
    """Flipping one bit of a signed body fails with bad_signature."""
    headers = signed_request(case.provider, BODY, secret=case.signing)
    body = bytearray(BODY)
    body[bit // 8] ^= 1 << (bit % 8)
    assert rejected(case.provider, headers, bytes(body), case.configured) == "bad_signature"


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_wrong_secret_is_bad_signature(case: Case) -> None:
    """A request signed with a secret that is not configured fails with bad_signature."""
    headers = signed_request(case.provider, BODY, secret=case.other_signing)
    assert rejected(case.provider, headers, BODY, case.configured) == "bad_signature"


@pytest.mark.parametrize("provider", PROVIDER_NAMES)
def test_no_configured_keys_is_bad_signature(provider: str) -> None:
    """With an empty key list nothing verifies."""
    headers = signed_request(provider, BODY)
    with pytest.raises(SignatureError) as info:
        PROVIDERS[provider].verify_request(headers, BODY, [], NOW, TOLERANCE_S)
    assert info.value.reason == "bad_signature"


# --- signature header presence ---------------------------------------------------


@pytest.mark.parametrize("provider", PROVIDER_NAMES)
def test_missing_signature_header_is_missing_header(provider: str) -> None:
    """No signature header at all: missing_header."""
    headers = signed_request(provider, BODY)
    del headers[SIGNATURE_HEADER[provider]]
    assert rejected(provider, headers) == "missing_header"


@pytest.mark.parametrize("provider", PROVIDER_NAMES)
def test_signature_header_with_no_values_is_missing_header(provider: str) -> None:
    """A header name present with an empty value list counts as missing."""
    headers = signed_request(provider, BODY)
    headers[SIGNATURE_HEADER[provider]] = []
    assert rejected(provider, headers) == "missing_header"


@pytest.mark.parametrize("provider", PROVIDER_NAMES)
@pytest.mark.parametrize("value", ["", "   ", "\t"], ids=["empty", "spaces", "tab"])
def test_empty_signature_header_is_empty_header(provider: str, value: str) -> None:
    """A blank signature header: empty_header."""
    assert rejected(provider, with_signature(provider, value)) == "empty_header"


@pytest.mark.parametrize("provider", PROVIDER_NAMES)
def test_doubled_signature_header_is_duplicate_header(provider: str) -> None:
    """A signature header sent twice is refused even when both copies are valid."""
    headers = signed_request(provider, BODY)
    headers[SIGNATURE_HEADER[provider]] *= 2
    assert rejected(provider, headers) == "duplicate_header"


@pytest.mark.parametrize("provider", sorted(TIMESTAMP_HEADER))
def test_doubled_timestamp_header_is_duplicate_header(provider: str) -> None:
    """Two timestamp headers (e.g. a fresh one added to a replay) are refused."""
    headers = signed_request(provider, BODY)
    headers[TIMESTAMP_HEADER[provider]] = [str(NOW), str(NOW - 10_000)]
    assert rejected(provider, headers) == "duplicate_header"


@pytest.mark.parametrize("provider", sorted(TIMESTAMP_HEADER))
def test_missing_timestamp_header_is_missing_header(provider: str) -> None:
    """Slack and Standard Webhooks need their timestamp header."""
    headers = signed_request(provider, BODY)
    del headers[TIMESTAMP_HEADER[provider]]
    assert rejected(provider, headers) == "missing_header"


def test_doubled_webhook_id_is_duplicate_header() -> None:
    """Standard Webhooks: two webhook-id headers are refused."""
    headers = signed_request("standard", BODY)
    headers["webhook-id"] = ["msg_a", "msg_b"]
    assert rejected("standard", headers) == "duplicate_header"


@pytest.mark.parametrize("msg_id", ["msg_\u00e9", "msg_\x00", "msg_\x7f", "m" * 256])
def test_unprintable_or_long_webhook_id_is_malformed_id(msg_id: str) -> None:
    """A webhook-id that is not short printable ASCII is refused as malformed_id."""
    headers = signed_request("standard", BODY, msg_id=msg_id)
    assert rejected("standard", headers) == "malformed_id"


def test_stripe_header_without_v1_is_missing_signature() -> None:
    """A Stripe header with a timestamp but no v1 entry: missing_signature."""
    v0 = hex_hmac(SECRETS["stripe"], f"{NOW}.".encode() + BODY)
    assert rejected("stripe", with_signature("stripe", f"t={NOW},v0={v0}")) == "missing_signature"


def test_stripe_header_without_timestamp_is_malformed_timestamp() -> None:
    """A Stripe header with no t= entry: malformed_timestamp."""
    v1 = sig_of("stripe").split(",")[1]
    assert rejected("stripe", with_signature("stripe", v1)) == "malformed_timestamp"


def test_stripe_header_with_two_timestamps_is_malformed_timestamp() -> None:
    """Two t= entries in one Stripe header are ambiguous: malformed_timestamp."""
    value = f"t={NOW - 10_000},{sig_of('stripe')}"
    assert rejected("stripe", with_signature("stripe", value)) == "malformed_timestamp"


def test_standard_header_with_only_unknown_versions_is_missing_signature() -> None:
    """Unknown versions (v2) are skipped; none left means missing_signature."""
    value = sig_of("standard").replace("v1,", "v2,")
    assert rejected("standard", with_signature("standard", value)) == "missing_signature"


@pytest.mark.parametrize("provider", ["stripe", "standard"])
def test_too_many_signature_entries_is_malformed_signature(provider: str) -> None:
    """More than 16 entries in one header is hostile: malformed_signature."""
    separator = "," if provider == "stripe" else " "
    value = separator.join([sig_of(provider)] * 17)
    assert rejected(provider, with_signature(provider, value)) == "malformed_signature"


# --- signature format -----------------------------------------------------------


@pytest.mark.parametrize("provider", PROVIDER_NAMES)
@pytest.mark.parametrize("cut", [1, 2, 4])
def test_truncated_signature_is_malformed_signature(provider: str, cut: int) -> None:
    """A signature missing its last characters: malformed_signature."""
    value = sig_of(provider)[:-cut]
    assert rejected(provider, with_signature(provider, value)) == "malformed_signature"


@pytest.mark.parametrize("provider", ["github", "stripe", "slack"])
@pytest.mark.parametrize("bad", ["g", "\u00e9", " ", "-"], ids=["g", "non-ascii", "space", "dash"])
def test_non_hex_digest_is_malformed_signature(provider: str, bad: str) -> None:
    """One non-hex character in a 64-character digest: malformed_signature."""
    value = sig_of(provider)
    value = value[:-2] + bad + value[-1]
    assert rejected(provider, with_signature(provider, value)) == "malformed_signature"


@pytest.mark.parametrize("provider", ["github", "stripe", "slack"])
def test_hex_digest_with_embedded_spaces_is_malformed_signature(provider: str) -> None:
    """64 characters of hex pairs and spaces is not a SHA-256 digest (fromhex would skip them)."""
    value = sig_of(provider)
    spaced = " ".join(value[-64:][i : i + 4] for i in range(0, 52, 4))
    assert len(spaced) == 64
    assert rejected(provider, with_signature(provider, value[:-64] + spaced)) == (
        "malformed_signature"
    )


@pytest.mark.parametrize("bad", ["!", "-", "_", "\u00e9", "*"])
def test_non_base64_standard_signature_is_malformed_signature(bad: str) -> None:
    """A v1 entry that is not strict standard base64: malformed_signature."""
    value = sig_of("standard")
    value = value[:-3] + bad + value[-2:]
    assert rejected("standard", with_signature("standard", value)) == "malformed_signature"


@pytest.mark.parametrize("provider", ["github", "stripe", "slack"])
def test_upper_case_hex_digest_is_malformed_signature(provider: str) -> None:
    """The genuine digest in upper case decodes to the same bytes, but no provider sends it
    and their own libraries refuse it: a changed header must not verify."""
    value = sig_of(provider)
    digest = value[-64:]
    assert digest != digest.upper(), "the sample digest has letters"
    upper = with_signature(provider, value[:-64] + digest.upper())
    assert rejected(provider, upper) == "malformed_signature"


def flip_unused_bits(encoded: str) -> list[str]:
    """The other spellings of ``encoded`` that decode to the same bytes: its last data
    character with an unused low bit set (1 of 2 bits after one "=", 1 of 4 after "==")."""
    import base64

    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
    data = encoded.rstrip("=")
    pad = len(encoded) - len(data)
    unused = {1: 2, 2: 4}[pad]
    last = alphabet.index(data[-1])
    out = []
    for bit in range(unused):
        other = data[:-1] + alphabet[last ^ (1 << bit)] + "=" * pad
        assert base64.b64decode(other) == base64.b64decode(encoded)
        out.append(other)
    return out


@pytest.mark.parametrize("version", ["v1", "v1a"])
def test_non_canonical_base64_of_the_genuine_signature_is_malformed_signature(
    version: str,
) -> None:
    """A bit flipped in the unused bits of the last base64 character leaves the decoded
    signature unchanged; it must still be refused (found by chaos.tamper)."""
    if version == "v1":
        headers, keys = signed_request("standard", BODY), ()
    else:
        headers, keys = signed_request("standard", BODY, secret=V1A_SIGNING), (V1A_PUBLIC,)
    genuine = headers["webhook-signature"][0]
    assert genuine.startswith(f"{version},")
    verify("standard", headers, BODY, *keys)  # the genuine one verifies
    for other in flip_unused_bits(genuine.split(",", 1)[1]):
        headers["webhook-signature"] = [f"{version},{other}"]
        assert rejected("standard", headers, BODY, *keys) == "malformed_signature"


def test_standard_entry_without_version_is_malformed_signature() -> None:
    """A bare base64 entry with no "v1," is malformed_signature."""
    value = sig_of("standard").removeprefix("v1,")
    assert rejected("standard", with_signature("standard", value)) == "malformed_signature"


# --- timestamps ------------------------------------------------------------------


@pytest.mark.parametrize("provider", TIMED)
@pytest.mark.parametrize(
    ("offset", "reason"),
    [(-3600, "timestamp_too_old"), (3600, "timestamp_in_future")],
    ids=["stale", "future"],
)
def test_timestamp_far_from_now_is_refused(provider: str, offset: int, reason: str) -> None:
    """A correctly signed request an hour old or an hour ahead is refused."""
    headers = signed_request(provider, BODY, timestamp=NOW + offset)
    assert rejected(provider, headers) == reason


@pytest.mark.parametrize("provider", TIMED)
@pytest.mark.parametrize("offset", [-TOLERANCE_S, TOLERANCE_S], ids=["-tol", "+tol"])
def test_timestamp_exactly_at_tolerance_is_accepted(provider: str, offset: int) -> None:
    """Both edges of now ± tolerance are inside the window."""
    headers = signed_request(provider, BODY, timestamp=NOW + offset)
    assert verify(provider, headers, BODY).timestamp == NOW + offset


@pytest.mark.parametrize("provider", TIMED)
@pytest.mark.parametrize(
    ("offset", "reason"),
    [(-TOLERANCE_S - 1, "timestamp_too_old"), (TOLERANCE_S + 1, "timestamp_in_future")],
    ids=["-tol-1", "+tol+1"],
)
def test_timestamp_one_second_outside_tolerance_is_refused(
    provider: str, offset: int, reason: str
) -> None:
    """One second past either edge of the window is refused."""
    headers = signed_request(provider, BODY, timestamp=NOW + offset)
    assert rejected(provider, headers) == reason


NON_NUMERIC = [
    "12a",
    "\u0661\u0662\u0663",  # Arabic-Indic digits: str.isdigit() but not ASCII
    "\u00b2",  # superscript two: str.isdigit() too
    "1e9",
    "-5",
    "+5",
    "1.5",
    "0x1f",
    "1_700_000_000",
    "0001700000000",  # 13 digits: over the 12-digit limit
]


@pytest.mark.parametrize("provider", TIMED)
@pytest.mark.parametrize("raw", NON_NUMERIC)
def test_non_numeric_timestamp_is_malformed_timestamp(provider: str, raw: str) -> None:
    """Anything but 1-12 ASCII digits is malformed_timestamp, even when correctly signed."""
    headers = signed_request(provider, BODY, timestamp=raw)
    assert rejected(provider, headers) == "malformed_timestamp"


@pytest.mark.parametrize(
    ("provider", "reason"),
    [("stripe", "malformed_timestamp"), ("slack", "empty_header"), ("standard", "empty_header")],
)
def test_empty_timestamp_is_refused(provider: str, reason: str) -> None:
    """An empty timestamp: "t=" in Stripe's header, an empty header for the others."""
    headers = signed_request(provider, BODY, timestamp="")
    assert rejected(provider, headers) == reason


@pytest.mark.parametrize(
    ("provider", "reason"),
    [
        ("stripe", "malformed_timestamp"),
        # A whole header value is stripped of HTTP whitespace first, so " 1" reads as 1.
        ("slack", "timestamp_too_old"),
        ("standard", "timestamp_too_old"),
    ],
)
def test_space_padded_timestamp_is_refused(provider: str, reason: str) -> None:
    """ " 1" never passes: malformed inside Stripe's header, epoch 1 (stale) as a header."""
    headers = signed_request(provider, BODY, timestamp=" 1")
    assert rejected(provider, headers) == reason


# --- scheme downgrades and cross-provider confusion ------------------------------------


def test_v1a_signature_with_only_whsec_configured_is_bad_signature() -> None:
    """An ed25519 v1a signature cannot satisfy an HMAC (whsec_) secret."""
    headers = signed_request("standard", BODY, secret=V1A_SIGNING)
    assert rejected("standard", headers, BODY, SECRETS["standard"]) == "bad_signature"


def test_v1_signature_with_only_whpk_configured_is_bad_signature() -> None:
    """An HMAC v1 signature cannot satisfy an ed25519 (whpk_) public key."""
    headers = signed_request("standard", BODY)
    assert rejected("standard", headers, BODY, V1A_PUBLIC) == "bad_signature"


def test_v1a_signature_by_another_ed25519_key_is_bad_signature() -> None:
    """A v1a signature from a key other than the configured whpk_ fails."""
    headers = signed_request("standard", BODY, secret=OTHER_V1A_SIGNING)
    assert rejected("standard", headers, BODY, SECRETS["standard"], V1A_PUBLIC) == ("bad_signature")


CROSS = [(sent, to) for sent in PROVIDER_NAMES for to in PROVIDER_NAMES if sent != to]


@pytest.mark.parametrize(("sent", "to"), CROSS, ids=[f"{s}-to-{t}" for s, t in CROSS])
def test_other_providers_headers_are_missing_header(sent: str, to: str) -> None:
    """A genuine request of one provider sent to another provider's verifier is refused."""
    assert rejected(to, signed_request(sent, BODY)) == "missing_header"


@pytest.mark.parametrize(("sent", "to"), CROSS, ids=[f"{s}-to-{t}" for s, t in CROSS])
def test_other_providers_signature_value_is_refused(sent: str, to: str) -> None:
    """Another provider's signature value under this provider's header name is refused."""
    foreign = sig_of(sent)
    assert rejected(to, with_signature(to, foreign)) in {
        "malformed_signature",
        "missing_signature",
        "malformed_timestamp",
    }


HEX = ("github", "stripe", "slack")
RELABEL = [(sent, to) for sent in HEX for to in HEX if sent != to]


@pytest.mark.parametrize(("sent", "to"), RELABEL, ids=[f"{s}-as-{t}" for s, t in RELABEL])
def test_digest_relabelled_for_another_provider_is_bad_signature(sent: str, to: str) -> None:
    """With one secret shared by two sources, a digest of one scheme never passes the other."""
    shared = "whsec_shared_between_sources"
    digest = signed_request(sent, BODY, secret=shared)[SIGNATURE_HEADER[sent]][0][-64:]
    value = sig_of(to)[:-64] + digest
    assert rejected(to, with_signature(to, value), BODY, shared) == "bad_signature"


# --- authentic requests with bad payloads ------------------------------------------


@pytest.mark.parametrize("provider", PROVIDER_NAMES)
@pytest.mark.parametrize("body", [b"\xff\xfe{}", b'{"id": "evt_\xc3"}', b"\xed\xa0\x80"])
def test_non_utf8_signed_body_is_malformed_payload(provider: str, body: bytes) -> None:
    """A correctly signed body that is not UTF-8 is a PayloadError, not a crash."""
    assert payload_rejected(provider, body) == "malformed_payload"


@pytest.mark.parametrize("provider", ["github", "slack"])
@pytest.mark.parametrize(
    "body",
    [b"payload=%ff%fe", b"\xff=1", b"no-equals-sign", b"", b"payload=[]", b"payload=1&payload=2"],
)
def test_bad_form_body_is_malformed_payload(provider: str, body: bytes) -> None:
    """Form-encoded bodies that are not UTF-8, not key=value or hold no object are refused."""
    form = "application/x-www-form-urlencoded"
    assert payload_rejected(provider, body, content_type=form) == "malformed_payload"


@pytest.mark.parametrize("provider", PROVIDER_NAMES)
@pytest.mark.parametrize("body", [b"[]", b'"x"', b"1", b"null", b"true", b"", b"{", b"[" * 100_000])
def test_signed_body_that_is_not_a_json_object_is_malformed_payload(
    provider: str, body: bytes
) -> None:
    """JSON that is not an object, or not JSON at all, is malformed_payload."""
    assert payload_rejected(provider, body) == "malformed_payload"


@pytest.mark.parametrize(
    "event_id",
    ["ch_3NG8Du2eZvKYlo2C", "evt", "EVT_1", "", 123, None, "evt_\n1", "evt_" + "x" * 300],
)
def test_stripe_event_id_not_evt_is_malformed_payload(event_id: object) -> None:
    """A Stripe event whose id is not a printable evt_ string is refused."""
    body = json.dumps({"id": event_id, "type": "charge.succeeded"}).encode()
    assert payload_rejected("stripe", body) == "malformed_payload"


def test_github_without_delivery_header_is_malformed_payload() -> None:
    """GitHub requests are deduplicated on X-GitHub-Delivery, so it is required."""
    headers = signed_request("github", BODY)
    del headers["x-github-delivery"]
    with pytest.raises(PayloadError):
        accept("github", headers, BODY)


@pytest.mark.parametrize("subtype", [[], {}, ["bot_message"], 5])
def test_slack_message_with_non_string_subtype_is_keyed_by_event_id(subtype: object) -> None:
    """A message event whose subtype is not a string is an ordinary event (no TypeError)."""
    body = json.dumps(
        {
            "type": "event_callback",
            "team_id": "T1",
            "event_id": "Ev1",
            "event": {"type": "message", "subtype": subtype, "channel": "C1", "ts": "1.2"},
        }
    ).encode()
    assert accept("slack", signed_request("slack", body), body).dedupe_key == "Ev1"


@pytest.mark.parametrize(
    "payload",
    [
        {"type": "url_verification"},
        {"type": "url_verification", "challenge": 5},
        {"type": "event_callback", "event_id": "Ev1"},
        {"type": "event_callback", "event_id": "Ev1", "event": "message"},
        {"type": "event_callback", "event": {"type": "reaction_added"}},
        {"type": "block_actions"},
    ],
    ids=["no-challenge", "int-challenge", "no-event", "str-event", "no-event-id", "unknown"],
)
def test_incomplete_slack_payload_is_malformed_payload(payload: dict[str, object]) -> None:
    """Slack payloads missing what the envelope needs are PayloadErrors."""
    assert payload_rejected("slack", json.dumps(payload).encode()) == "malformed_payload"
