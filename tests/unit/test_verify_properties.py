"""Property tests for the four verifiers and their envelopes.

Whatever arrives, ``verify_request`` raises only ``SignatureError`` (a random
header map never carries a valid signature), ``envelope`` of an authentic
request raises only ``PayloadError``, and a signature covers every body bit.
"""

from __future__ import annotations

import base64
import copy
import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hookd.errors import PayloadError, SignatureError
from hookd.providers import PROVIDERS
from hookd.providers.base import MAX_DEDUPE_KEY_CHARS, Envelope
from tests.unit.webhook_requests import (
    CASE_IDS,
    CASES,
    NOW,
    PROVIDER_NAMES,
    SIGNATURE_REASONS,
    TOLERANCE_S,
    Case,
    keys_for,
    signed_request,
    verify,
)

# Hypothesis' default example count; no deadline, since the first examples warm caches.
PROPERTY = settings(deadline=None)

# --- arbitrary header maps -----------------------------------------------------

HEADERS_READ = {
    "github": ["x-hub-signature-256"],
    "stripe": ["stripe-signature"],
    "slack": ["x-slack-request-timestamp", "x-slack-signature"],
    "standard": ["webhook-id", "webhook-timestamp", "webhook-signature"],
}
ALL_HEADER_NAMES = sorted({name for names in HEADERS_READ.values() for name in names})

hex_digests = st.one_of(
    st.binary(min_size=32, max_size=32).map(bytes.hex),
    st.text(alphabet="0123456789abcdefABCDEF g", max_size=70),
)
timestamps = st.one_of(
    st.integers(NOW - TOLERANCE_S, NOW + TOLERANCE_S),
    st.integers(NOW - 2 * TOLERANCE_S, NOW + 2 * TOLERANCE_S),
).map(str)


def b64(size: int) -> st.SearchStrategy[str]:
    return st.binary(min_size=size, max_size=size).map(lambda raw: base64.b64encode(raw).decode())


standard_entries = st.one_of(
    b64(32).map("v1,".__add__),
    b64(64).map("v1a,".__add__),
    st.builds(
        "{},{}".format,
        st.sampled_from(["v1", "v1a", "v2"]),
        st.binary().map(lambda raw: base64.b64encode(raw).decode()),
    ),
)
stripe_entries = st.one_of(timestamps.map("t=".__add__), hex_digests.map("v1=".__add__))

# Per header, values shaped like the real thing, so that generated requests get
# past the format checks and on to the timestamp window and signature comparison.
NEAR_VALID = {
    "x-hub-signature-256": hex_digests.map("sha256=".__add__),
    "stripe-signature": st.one_of(
        st.builds(
            "t={},{}".format,
            timestamps,
            st.lists(hex_digests.map("v1=".__add__), min_size=1, max_size=3).map(",".join),
        ),
        st.lists(stripe_entries, max_size=18).map(",".join),
    ),
    "x-slack-signature": hex_digests.map("v0=".__add__),
    "x-slack-request-timestamp": timestamps,
    "webhook-id": st.from_regex(r"msg_[A-Za-z0-9]{1,24}", fullmatch=True),
    "webhook-timestamp": timestamps,
    "webhook-signature": st.one_of(
        st.lists(standard_entries, min_size=1, max_size=2), st.lists(standard_entries, max_size=18)
    ).map(" ".join),
}


def header_lists(name: str) -> st.SearchStrategy[list[str]]:
    """Values received under ``name``: mostly one near-valid value, else 0-3 of any kind."""
    values = st.one_of(NEAR_VALID[name], st.text(max_size=80))
    return st.one_of(
        NEAR_VALID[name].map(lambda value: [value]),
        values.map(lambda value: [value]),
        st.lists(values, max_size=3),
    )


def header_maps(provider: str) -> st.SearchStrategy[dict[str, list[str]]]:
    """The headers ``provider`` reads, plus noise: other providers' headers and random names."""
    read = st.fixed_dictionaries({name: header_lists(name) for name in HEADERS_READ[provider]})
    noise = st.dictionaries(
        st.one_of(st.sampled_from(ALL_HEADER_NAMES), st.text(max_size=20)),
        st.lists(st.text(max_size=80), max_size=3),
        max_size=3,
    )
    return st.builds(lambda noise, read: {**noise, **read}, noise, read)


@pytest.mark.parametrize("provider", PROVIDER_NAMES)
@PROPERTY
@given(data=st.data(), body=st.binary(max_size=256))
def test_arbitrary_request_raises_only_signature_error(
    provider: str, data: st.DataObject, body: bytes
) -> None:
    """Random headers and body: verify_request raises SignatureError with a known reason."""
    headers = data.draw(header_maps(provider), label="headers")
    with pytest.raises(SignatureError) as info:
        PROVIDERS[provider].verify_request(headers, body, keys_for(provider), NOW, TOLERANCE_S)
    assert info.value.reason in SIGNATURE_REASONS


# --- arbitrary bodies of authentic requests ------------------------------------------

epochs = st.integers(-(2**70), 2**70)  # bounded: json.dumps refuses ints over 4300 digits
json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    epochs,
    st.floats(),  # NaN and ±Infinity too, which json.dumps writes and json.loads reads
    st.text(max_size=20),
)
json_values = st.recursive(
    json_scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=4), st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=8,
)


# Real payloads of each provider; the properties below corrupt one field at a time.
SLACK_CALLBACK = {"type": "event_callback", "team_id": "T1", "event_id": "Ev1", "event_time": NOW}
FORM = "application/x-www-form-urlencoded"


@dataclass(frozen=True)
class Template:
    provider: str
    payload: dict[str, Any]
    # Sent as ``payload=<json>`` form-encoded instead of as a JSON body.
    form: bool = False


TEMPLATES = {
    "github-issue": Template("github", {"action": "opened", "issue": {"number": 1}}),
    "github-issue-form": Template("github", {"action": "closed", "issue": {"number": 1}}, True),
    "stripe-event": Template(
        "stripe",
        {"id": "evt_1", "type": "charge.succeeded", "created": NOW, "data": {"object": {}}},
    ),
    "slack-message": Template(
        "slack",
        {
            **SLACK_CALLBACK,
            "event": {
                "type": "message",
                "subtype": "bot_message",
                "channel": "C1",
                "ts": "1700000000.000100",
                "team": "T1",
            },
        },
    ),
    "slack-reaction": Template(
        "slack", {**SLACK_CALLBACK, "event": {"type": "reaction_added", "reaction": "tada"}}
    ),
    "slack-url-verification": Template("slack", {"type": "url_verification", "challenge": "c"}),
    "slack-rate-limited": Template(
        "slack", {"type": "app_rate_limited", "team_id": "T1", "minute_rate_limited": NOW}
    ),
    "slack-block-actions": Template(
        "slack", {"type": "block_actions", "trigger_id": "1.2.ab", "action_ts": "1.2"}, True
    ),
    "standard-event": Template("standard", {"type": "invoice.paid", "data": {"invoice": 1}}),
}

DELETE = object()
# Values of the wrong type or size for any field, tried as often as arbitrary JSON.
odd_values = st.sampled_from(
    [None, True, 0, -1, 1e300, float("nan"), "", "\x00", "x" * 300, [], ["x"], {}, {"a": 1}]
)


def field_paths(payload: dict[str, Any], prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """The path of every field of ``payload``, nested objects included."""
    paths = []
    for name, value in payload.items():
        paths.append((*prefix, name))
        if isinstance(value, dict):
            paths.extend(field_paths(value, (*prefix, name)))
    return paths


@st.composite
def one_field_off(draw: st.DrawFn, payload: dict[str, Any]) -> dict[str, Any]:
    """``payload`` with one field, at any depth, removed or set to an odd or arbitrary value."""
    corrupted = copy.deepcopy(payload)
    *parents, name = draw(st.sampled_from(field_paths(payload)), label="field")
    target = corrupted
    for parent in parents:
        target = target[parent]
    value = draw(st.one_of(st.just(DELETE), odd_values, json_values), label="value")
    if value is DELETE:
        del target[name]
    else:
        target[name] = value
    return corrupted


def encode(payload: Any, form: bool) -> bytes:
    document = json.dumps(payload)
    return urlencode({"payload": document}).encode() if form else document.encode()


def check_envelope(provider: str, body: bytes, content_type: str) -> None:
    """Sign and verify ``body``; its envelope must be usable or a malformed_payload."""
    headers = signed_request(provider, body, content_type=content_type)
    verified = verify(provider, headers, body)
    try:
        envelope = PROVIDERS[provider].envelope(headers, body, verified)
    except PayloadError as error:
        refused: PayloadError | None = error
    else:
        refused = None
    if refused is not None:
        assert refused.reason == "malformed_payload"
        return
    assert isinstance(envelope, Envelope)
    assert len(envelope.dedupe_key) <= MAX_DEDUPE_KEY_CHARS
    # Only a handshake that is answered directly goes without a dedupe key.
    assert envelope.dedupe_key or envelope.reply is not None


CONTENT_TYPES = st.sampled_from(
    [
        "application/json",
        "application/x-www-form-urlencoded",
        "Application/X-WWW-Form-Urlencoded; charset=utf-8",
        "text/plain",
        "",
    ]
)


def bodies(provider: str) -> st.SearchStrategy[bytes]:
    """Raw bytes, and JSON or form bodies, some of them near-real ``provider`` payloads."""
    near_real = [one_field_off(t.payload) for t in TEMPLATES.values() if t.provider == provider]
    documents = st.one_of(json_values, *near_real).map(json.dumps)
    form_fields = st.one_of(
        documents.map(lambda document: [("payload", document)]),
        st.lists(st.tuples(st.sampled_from(["payload", "command", "trigger_id"]), st.text())),
    )
    return st.one_of(
        st.binary(max_size=256),
        documents.map(str.encode),
        form_fields.map(lambda fields: urlencode(fields).encode()),
    )


@pytest.mark.parametrize("provider", PROVIDER_NAMES)
@PROPERTY
@given(data=st.data(), content_type=CONTENT_TYPES)
def test_envelope_of_any_authentic_body_is_usable_or_payload_error(
    provider: str, data: st.DataObject, content_type: str
) -> None:
    """Any correctly signed body yields an Envelope with a usable key, or a PayloadError."""
    check_envelope(provider, data.draw(bodies(provider), label="body"), content_type)


@pytest.mark.parametrize("name", sorted(TEMPLATES))
@PROPERTY
@given(data=st.data())
def test_envelope_of_real_payload_with_one_field_off_is_usable_or_payload_error(
    name: str, data: st.DataObject
) -> None:
    """A real payload with one field removed or mistyped: an Envelope or a PayloadError."""
    template = TEMPLATES[name]
    payload = data.draw(one_field_off(template.payload), label="payload")
    content_type = FORM if template.form else "application/json"
    check_envelope(template.provider, encode(payload, template.form), content_type)


# --- signatures cover the whole body ---------------------------------------------------


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
@PROPERTY
@given(body=st.binary(max_size=512))
def test_correctly_signed_body_verifies(case: Case, body: bytes) -> None:
    """Any body, signed with the configured secret, verifies with that scheme."""
    headers = signed_request(case.provider, body, secret=case.signing)
    verified = verify(case.provider, headers, body, case.configured)
    assert (verified.scheme, verified.key_index) == (case.scheme, 0)


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
@PROPERTY
@given(body=st.binary(min_size=1, max_size=512), data=st.data())
def test_any_single_bit_flip_is_bad_signature(case: Case, body: bytes, data: st.DataObject) -> None:
    """Flipping any one bit of a correctly signed body fails with bad_signature."""
    headers = signed_request(case.provider, body, secret=case.signing)
    bit = data.draw(st.integers(0, 8 * len(body) - 1), label="bit")
    flipped = bytearray(body)
    flipped[bit // 8] ^= 1 << (bit % 8)
    with pytest.raises(SignatureError) as info:
        verify(case.provider, headers, bytes(flipped), case.configured)
    assert info.value.reason == "bad_signature"
