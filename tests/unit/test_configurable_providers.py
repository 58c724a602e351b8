"""The ``hmac`` and ``token`` providers: hand-computed vectors (the ``hmac`` module
here, never hookd's signer), tampering with exact reasons, and config one-liners."""

from __future__ import annotations

import base64
import hashlib
import hmac
import itertools
import json
from pathlib import Path

import pytest

from hookd.errors import ConfigError, SignatureError
from hookd.providers.base import Provider
from hookd.sources import parse_sources

P = Path("hookd.toml")
NOW = 1_700_000_000
SECRET = "unit-secret"
URL = "https://hooks.example.com/hooks/h"
BODY = json.dumps({"id": "evt_1", "kind": "paid"}).encode()


def source(provider: str, verify: str, secrets: str = f'["other", "{SECRET}"]') -> Provider:
    text = f'[[sources]]\nname = "h"\nprovider = "{provider}"\nsecrets = {secrets}\n'
    found = parse_sources(text + "[sources.verify]\n" + verify, P, {}).get("h")
    assert found is not None
    return found.adapter


def error_of(provider: str, verify: str | None) -> str:
    text = f'[[sources]]\nname = "h"\nprovider = "{provider}"\nsecrets = ["s"]\n'
    if verify is not None:
        text += "[sources.verify]\n" + verify
    with pytest.raises(ConfigError) as info:
        parse_sources(text, P, {})
    message = str(info.value)
    assert "\n" not in message
    return message


def hand_signed(algorithm: str, encoding: str, signed: str) -> tuple[str, dict[str, list[str]]]:
    if signed == "body":
        message = BODY
    elif signed == "timestamp_body":
        message = f"{NOW}.".encode() + BODY
    else:
        message = f"POST.{URL}.".encode() + BODY + f".{NOW}".encode()
    digest = hmac.new(SECRET.encode(), message, getattr(hashlib, algorithm)).digest()
    value = digest.hex() if encoding == "hex" else base64.b64encode(digest).decode()
    verify = (
        f'header = "X-Sig"\nprefix = "v1="\nalgorithm = "{algorithm}"\n'
        f'encoding = "{encoding}"\nsigned = "{signed}"\ndedupe = "json:id"\ntype_json = "kind"\n'
    )
    headers = {"x-sig": [f"v1={value}"]}
    if signed != "body":
        verify += 'timestamp_header = "X-Ts"\n'
        headers["x-ts"] = [str(NOW)]
    if signed == "method_url_body_timestamp":
        verify += f'public_url = "{URL}"\n'
    return verify, headers


COMBOS = list(
    itertools.product(
        ["sha1", "sha256", "sha512"],
        ["hex", "base64"],
        ["body", "timestamp_body", "method_url_body_timestamp"],
    )
)


@pytest.mark.parametrize(("algorithm", "encoding", "signed"), COMBOS)
def test_hmac_vectors_verify(algorithm: str, encoding: str, signed: str) -> None:
    verify, headers = hand_signed(algorithm, encoding, signed)
    provider = source("hmac", verify)
    verified = provider.verify_request(
        headers, BODY, [provider.parse_secret("x"), provider.parse_secret(SECRET)], NOW, 300
    )
    assert verified.key_index == 1
    assert verified.describe().startswith(f"hmac-{algorithm};key=1")
    env = provider.envelope(headers, BODY, verified)
    assert (env.dedupe_key, env.type) == ("evt_1", "paid")
    # The product's signer agrees with the hand-computed vector.
    sample_headers, sample_body = provider.sample_event(SECRET, 1, NOW)
    lower = {k.lower(): [v] for k, v in sample_headers.items()}
    keys = [provider.parse_secret(SECRET)]
    assert provider.verify_request(lower, sample_body, keys, NOW, 300).key_index == 0


def reason(
    provider: Provider,
    headers: dict[str, list[str]],
    body: bytes,
    secret: str = SECRET,
    now: int = NOW,
) -> str:
    with pytest.raises(SignatureError) as info:
        provider.verify_request(headers, body, [provider.parse_secret(secret)], now, 300)
    return info.value.reason


@pytest.mark.parametrize(("algorithm", "encoding", "signed"), COMBOS)
def test_hmac_tampering_has_exact_reasons(algorithm: str, encoding: str, signed: str) -> None:
    verify, headers = hand_signed(algorithm, encoding, signed)
    provider = source("hmac", verify)
    flipped = bytes([BODY[0] ^ 1]) + BODY[1:]
    assert reason(provider, headers, flipped) == "bad_signature"
    assert reason(provider, headers, BODY, "wrong") == "bad_signature"
    assert (
        reason(provider, {k: v for k, v in headers.items() if k != "x-sig"}, BODY)
        == "missing_header"
    )
    value = headers["x-sig"][0]
    assert reason(provider, {**headers, "x-sig": [value.upper()]}, BODY) == "malformed_signature"
    assert reason(provider, {**headers, "x-sig": [value[3:]]}, BODY) == "malformed_signature"
    assert reason(provider, {**headers, "x-sig": [value[:-2]]}, BODY) == "malformed_signature"
    if encoding == "base64" and value.endswith("="):
        # A non-canonical last character decodes to the same bytes: refused.
        chars = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
        stem = value.rstrip("=")
        other = stem[:-1] + chars[chars.index(stem[-1]) ^ 1] + value[len(stem) :]
        assert reason(provider, {**headers, "x-sig": [other]}, BODY) == "malformed_signature"
    if signed != "body":
        assert reason(provider, headers, BODY, now=NOW + 301) == "timestamp_too_old"
        assert reason(provider, headers, BODY, now=NOW - 301) == "timestamp_in_future"
        assert reason(provider, {**headers, "x-ts": ["12a"]}, BODY) == "malformed_timestamp"
        assert (
            reason(provider, {k: v for k, v in headers.items() if k != "x-ts"}, BODY)
            == "missing_header"
        )


def test_body_sha256_and_header_keys() -> None:
    provider = source("hmac", 'header = "X-Sig"\ndedupe = "body_sha256"\ntype_header = "X-Event"\n')
    digest = hmac.new(SECRET.encode(), BODY, hashlib.sha256).hexdigest()
    headers = {"x-sig": [digest], "x-event": ["paid"]}
    verified = provider.verify_request(headers, BODY, [provider.parse_secret(SECRET)], NOW, 300)
    env = provider.envelope(headers, BODY, verified)
    assert env.dedupe_key == "sha256:" + hashlib.sha256(BODY).hexdigest()
    assert env.type == "paid"


def test_token_verifies_any_secret_and_refuses_others() -> None:
    provider = source("token", 'header = "X-Gitlab-Token"\ndedupe = "header:X-Gitlab-Event-UUID"\n')
    keys = [provider.parse_secret("other"), provider.parse_secret(SECRET)]
    headers = {"x-gitlab-token": [SECRET], "x-gitlab-event-uuid": ["u-1"]}
    verified = provider.verify_request(headers, BODY, keys, NOW, 300)
    assert verified.key_index == 1
    assert provider.envelope(headers, BODY, verified).dedupe_key == "u-1"
    for bad in ([SECRET + "x"], [SECRET[:-1]], ["OTHER"]):
        with pytest.raises(SignatureError, match="bad_signature"):
            provider.verify_request({**headers, "x-gitlab-token": bad}, BODY, keys, NOW, 300)
    with pytest.raises(SignatureError, match="missing_header"):
        provider.verify_request({"x-gitlab-event-uuid": ["u"]}, BODY, keys, NOW, 300)
    with pytest.raises(SignatureError, match="duplicate_header"):
        provider.verify_request({"x-gitlab-token": [SECRET, SECRET]}, BODY, keys, NOW, 300)


@pytest.mark.parametrize(
    ("provider", "verify", "expected"),
    [
        (
            "hmac",
            'header = "X"\nalgorithm = "md5"\ndedupe = "body_sha256"\n',
            "key 'verify.algorithm': must be 'sha1', 'sha256' or 'sha512', not 'md5'",
        ),
        ("hmac", 'dedupe = "body_sha256"\n', "key 'verify.header': is required; add it"),
        ("hmac", None, "key 'verify.dedupe': is required; add it"),
        (
            "hmac",
            'header = "X"\ndedupe = "id"\n',
            'key \'verify.dedupe\': must be "header:<Name>", "json:<dotted.path>" or "body_sha256"',
        ),
        (
            "hmac",
            'header = "X"\ndedupe = "body_sha256"\n'
            'signed = "method_url_body_timestamp"\ntimestamp_header = "T"\n',
            "key 'verify.public_url': is required with signed = \"method_url_body_timestamp\"",
        ),
        (
            "hmac",
            'header = "X"\ndedupe = "body_sha256"\nsigned = "timestamp_body"\n',
            "key 'verify.timestamp_header': is required with signed = \"timestamp_body\"",
        ),
        (
            "hmac",
            'header = "X"\ndedupe = "body_sha256"\nalgoritm = "sha1"\n',
            "key 'verify.algoritm': unknown key (did you mean 'algorithm'?)",
        ),
        ("token", 'dedupe = "body_sha256"\n', "key 'verify.header': is required; add it"),
        (
            "token",
            'header = "X Y"\ndedupe = "body_sha256"\n',
            "key 'verify.header': must be a header name (letters, digits and '-')",
        ),
        (
            "github",
            'header = "X"\n',
            "key 'verify': github sources take no verify table",
        ),
    ],
)
def test_bad_settings_are_one_line_errors(provider: str, verify: str | None, expected: str) -> None:
    assert error_of(provider, verify) == f"hookd.toml: source 'h': {expected}"
