"""Pure pieces of reconciliation: schedule maths, rate-limit reading, the app JWT."""

from __future__ import annotations

import base64
import json
import random

import httpx
import pytest
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa

from ingest.config import ReconcileConfig
from reconcile.http import rate_limit_wait
from reconcile.providers.github import app_jwt
from reconcile.schedule import error_delay, next_interval

RC = ReconcileConfig(token="t", every_s=100, min_every_s=10, max_every_s=1000)


def test_interval_halves_after_misses_and_grows_after_clean_runs_within_bounds() -> None:
    assert next_interval(RC, None, found_missing=True) == 50
    assert next_interval(RC, 50, found_missing=False) == 75
    assert next_interval(RC, 12, found_missing=True) == 10
    assert next_interval(RC, 900, found_missing=False) == 1000


def test_error_delay_is_jittered_growing_and_capped() -> None:
    rng = random.Random(3)
    for errors, ceiling in [(1, 20), (2, 40), (4, 160), (20, 1000)]:
        delays = [error_delay(RC, errors, rng) for _ in range(200)]
        assert all(1 <= d <= ceiling for d in delays)
        assert max(delays) > ceiling * 0.8


def response(status: int, **headers: str) -> httpx.Response:
    return httpx.Response(status, headers=headers)


def test_rate_limit_waits_as_the_provider_says() -> None:
    assert rate_limit_wait(response(429, **{"Retry-After": "7"})) == 7
    assert (
        rate_limit_wait(
            response(403, **{"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "1030"}), now=1000
        )
        == 30
    )
    assert rate_limit_wait(response(429)) == 60
    assert rate_limit_wait(response(403)) is None, "a plain 403 is an auth failure"
    assert rate_limit_wait(response(200, **{"X-RateLimit-Remaining": "0"})) is None


def _b64url_decode(part: str) -> bytes:
    return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))


def test_app_jwt_is_rs256_signed_with_the_app_key() -> None:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()
    token = app_jwt(4242, pem, now=1_700_000_000)
    header, claims, signature = token.split(".")
    assert json.loads(_b64url_decode(header)) == {"alg": "RS256", "typ": "JWT"}
    body = json.loads(_b64url_decode(claims))
    assert body == {"iat": 1_699_999_940, "exp": 1_700_000_540, "iss": "4242"}
    key.public_key().verify(
        _b64url_decode(signature),
        f"{header}.{claims}".encode(),
        padding.PKCS1v15(),
        hashes.SHA256(),
    )
    with pytest.raises(InvalidSignature):
        key.public_key().verify(
            _b64url_decode(signature), b"tampered", padding.PKCS1v15(), hashes.SHA256()
        )
