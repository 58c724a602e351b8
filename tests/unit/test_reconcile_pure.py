"""Pure pieces of reconciliation: schedule maths, rate-limit reading, the app JWT."""

from __future__ import annotations

import asyncio
import base64
import json
import random

import httpx
import pytest
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa

from hookd.errors import ReconcileError
from hookd.providers.reconciling import ReconcileConfig
from reconcile.http import Api, rate_limit_wait
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


def paced_api(handler: httpx.MockTransport, sleeps: list[float]) -> tuple[Api, httpx.AsyncClient]:
    """Slack's default budget, a request a minute, with sleeps recorded, not slept."""

    async def sleep(seconds: float) -> None:
        sleeps.append(seconds)

    client = httpx.AsyncClient(transport=handler)
    api = Api(
        client,
        lambda: {"Authorization": "Bearer xoxb-secret"},
        min_interval_s=60.0,
        sleep=sleep,
        rng=random.Random(1),
    )
    return api, client


def test_unreachable_api_retries_on_a_short_backoff_not_the_request_pacing() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("All connection attempts failed", request=request) from (
            ConnectionRefusedError(111, "Connection refused")
        )

    sleeps: list[float] = []

    async def call() -> None:
        api, client = paced_api(httpx.MockTransport(refuse), sleeps)
        async with client:
            await api.request("POST", "https://slack.example/api/auth.test?token=xoxb-secret")

    with pytest.raises(ReconcileError) as failed:
        asyncio.run(call())
    assert failed.value.reason == "provider_unreachable"
    message = str(failed.value)
    assert "connection refused" in message
    assert "POST https://slack.example/api/auth.test" in message
    assert "xoxb-secret" not in message, "the query (a token, a cursor) stays out of errors"
    assert len(sleeps) == 3, sleeps
    assert max(sleeps) <= 2.0, f"retries waited on the request budget: {sleeps}"


def test_answered_requests_keep_the_pacing_and_retry_after() -> None:
    answers = iter([200, 429, 200])

    def answer(_: httpx.Request) -> httpx.Response:
        status = next(answers)
        return httpx.Response(status, headers={"Retry-After": "7"} if status == 429 else {})

    sleeps: list[float] = []

    async def call() -> None:
        api, client = paced_api(httpx.MockTransport(answer), sleeps)
        async with client:
            await api.request("POST", "https://slack.example/api/auth.test")
            await api.request("POST", "https://slack.example/api/conversations.history")

    asyncio.run(call())
    # The second call waits its minute, is told to wait 7 s, then waits out the
    # minute again: a 429 was an answered request too.
    assert [round(s) for s in sleeps] == [60, 7, 60]
