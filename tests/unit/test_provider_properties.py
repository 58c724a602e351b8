"""Properties of every registered provider, the configurable ones under any settings.

- Whatever arrives (a provider's own sample with its headers mutated, dropped, doubled
  or replaced, and any body), only ``SignatureError`` or ``PayloadError`` leaves
  ``verify_request`` and ``envelope``.
- The provider's own sample, signed, verifies and gives a usable envelope; signed with
  another sender's secret it is ``bad_signature``-class refused.
- Any single bit flipped in a signed body is refused, except where the provider's
  scheme leaves the body (or its encoding) uncovered, which is stated per provider in
  ``tests.support.provider_matrix``.

The per-provider files test each scheme against the provider's SDK or published
vectors; this file makes sure no provider (or setting) has an exit they did not think of.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qsl

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hookd.errors import PayloadError, SignatureError
from hookd.providers import PROVIDERS
from hookd.providers.base import MAX_DEDUPE_KEY_CHARS, Envelope, HeaderMap, Provider
from tests.support import provider_matrix as matrix
from tests.unit.webhook_requests import SIGNATURE_REASONS

PROPERTY = settings(deadline=None, max_examples=60)
NAMES = list(PROVIDERS)


def header_map(headers: dict[str, str]) -> dict[str, list[str]]:
    return {name.lower(): [value] for name, value in headers.items()}


def sample(provider: Provider, name: str, seq: int = 1) -> tuple[dict[str, list[str]], bytes]:
    good, _ = matrix.pairs(name)
    headers, body = provider.sample_event(good.signing, seq, matrix.NOW)
    return header_map(headers), body


def check(provider: Provider, name: str, headers: HeaderMap, body: bytes) -> Envelope | None:
    """Verify then read, as the receiver does; only the two documented errors may leave."""
    good, _ = matrix.pairs(name)
    keys = matrix.keys(name, good)
    reason = ""
    try:
        verified = provider.verify_request(headers, body, keys, matrix.NOW, matrix.TOLERANCE_S)
        env = provider.envelope(headers, body, verified)
    except SignatureError as exc:
        reason = exc.reason
    except PayloadError as exc:
        reason = f"payload:{exc.reason}"
    if reason:
        assert reason in SIGNATURE_REASONS or reason == "payload:malformed_payload", reason
        return None
    assert isinstance(env.dedupe_key, str)
    assert len(env.dedupe_key) <= MAX_DEDUPE_KEY_CHARS
    assert env.dedupe_key or env.reply is not None, "an event to store without a key"
    assert env.dedupe_key.isprintable()
    assert env.type is None or isinstance(env.type, str)
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in env.headers.items())
    return env


def test_every_registered_provider_is_in_the_matrix_and_its_sample_verifies() -> None:
    """A provider registered later gets here too: its sample must verify with the
    matrix's secret and be refused with another sender's."""
    for name in NAMES:
        provider = matrix.bound(name)
        headers, body = sample(provider, name)
        env = check(provider, name, headers, body)
        assert env is not None, name
        _, other = matrix.pairs(name)
        with pytest.raises(SignatureError) as info:
            provider.verify_request(
                headers, body, matrix.keys(name, other), matrix.NOW, matrix.TOLERANCE_S
            )
        assert info.value.reason == "bad_signature", name


# --- arbitrary requests -----------------------------------------------------------------

values = st.one_of(
    st.text(max_size=80),
    st.text(alphabet="0123456789abcdefABCDEF=,.;: v1t", max_size=140),
    st.binary(max_size=64).map(lambda raw: raw.hex()),
    st.integers(matrix.NOW - 1000, matrix.NOW + 1000).map(str),
)


fractions = st.floats(0, 1, exclude_max=True)


@st.composite
def mutated_headers(draw: st.DrawFn, headers: dict[str, list[str]]) -> dict[str, list[str]]:
    """The sample's headers, each kept, dropped, emptied, doubled or replaced, plus junk."""
    out: dict[str, list[str]] = {}
    for name, vals in headers.items():
        how = draw(st.integers(0, 5))
        if how == 0:
            out[name] = vals
        elif how == 1:
            continue
        elif how == 2:
            out[name] = [""]
        elif how == 3:
            out[name] = [*vals, draw(values)]
        elif how == 4:
            out[name] = [draw(values)]
        else:
            # A fraction, not a length: samples carry random ids, so their lengths vary
            # from run to run, and hypothesis needs the same draws to replay an example.
            out[name] = [vals[0][: int(draw(fractions) * len(vals[0]))]]
    for _ in range(draw(st.integers(0, 2))):
        out[draw(st.sampled_from(sorted(headers) or ["x-any"]))] = [draw(values)]
    return out


@pytest.mark.parametrize("name", NAMES)
@PROPERTY
@given(data=st.data())
def test_any_request_leaves_verify_and_envelope_only_as_signature_or_payload_error(
    name: str, data: st.DataObject
) -> None:
    provider = data.draw(matrix.providers_of(name))
    headers, body = sample(provider, name)
    headers = data.draw(mutated_headers(headers))
    body = data.draw(st.one_of(st.just(body), st.binary(max_size=300), st.just(b"")))
    check(provider, name, headers, body)


# --- a signed body covers every bit -----------------------------------------------------


def flip(body: bytes, bit: int) -> bytes:
    raw = bytearray(body)
    raw[bit // 8] ^= 1 << (bit % 8)
    return bytes(raw)


@pytest.mark.parametrize("name", [n for n in NAMES if n not in matrix.BODY_UNSIGNED])
@PROPERTY
@given(data=st.data())
def test_any_single_bit_flip_of_a_signed_body_is_refused(name: str, data: st.DataObject) -> None:
    provider = data.draw(matrix.providers_of(name))
    headers, body = sample(provider, name, data.draw(st.integers(1, 10_000)))
    assert check(provider, name, headers, body) is not None
    bit = int(data.draw(fractions) * 8 * len(body))
    changed = flip(body, bit)
    good, _ = matrix.pairs(name)
    keys = matrix.keys(name, good)
    reason = ""
    try:
        provider.verify_request(headers, changed, keys, matrix.NOW, matrix.TOLERANCE_S)
    except SignatureError as exc:
        reason = exc.reason
    if reason:
        assert reason in SIGNATURE_REASONS
        return
    # Only a scheme that signs decoded form parameters may pass a changed body, and
    # then only one that decodes to the very same parameters.
    assert name in matrix.SIGNS_DECODED_FORM, f"{name}: bit {bit} flipped and still verified"
    assert parse_qsl(changed.decode("latin-1"), keep_blank_values=True) == parse_qsl(
        body.decode("latin-1"), keep_blank_values=True
    )


@pytest.mark.parametrize("name", sorted(matrix.SETTINGS))
@PROPERTY
@given(data=st.data())
def test_configurable_sample_verifies_under_any_settings(name: str, data: st.DataObject) -> None:
    """Whatever a valid ``[sources.verify]`` says, the sender it describes is accepted
    with the key and type where the settings say, and another secret is refused."""
    settings_: Any = data.draw(matrix.SETTINGS[name])
    provider = matrix.bound(name, settings_)
    headers, body = sample(provider, name, data.draw(st.integers(1, 10_000)))
    env = check(provider, name, headers, body)
    assert env is not None
    if settings_.dedupe != "body_sha256":
        assert env.dedupe_key.startswith("evt_")
    if settings_.type_header or settings_.type_json:
        assert env.type == "hookd.test"
    _, other = matrix.pairs(name)
    with pytest.raises(SignatureError):
        provider.verify_request(
            headers, body, matrix.keys(name, other), matrix.NOW, matrix.TOLERANCE_S
        )
