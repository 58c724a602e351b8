"""``provider = "pubsub"``: Pub/Sub push with an OIDC token, checked against the keys of
a JWKS, and the push body read into an event.

Tokens are made by PyJWT (an implementation that is not hookd's) with an RSA key made
for the test, whose public half the test's JWKS holds; hookd's own signer
(``id_token``, for samples) is checked against PyJWT too."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime
from typing import Any

import jwt
import pytest

from hookd.errors import PayloadError, SignatureError
from hookd.providers import pubsub
from hookd.providers.base import Identity, Key, Provider
from tests.support.published_keys import jwk, jwks, private_pem, rsa_key
from tests.support.sources_file import error_of, parse

AUDIENCE = "https://hooks.example.com/hooks/orders"
EMAIL = "push@orders-project.iam.gserviceaccount.com"
KID = "f5f4bf46e52b31d9b6249f7309ad0388bbe7ad1b"
NOW = 1_700_000_000
SUBSCRIPTION = "projects/orders-project/subscriptions/orders-push"


def claims(**changes: Any) -> dict[str, Any]:
    out: dict[str, Any] = {
        "aud": AUDIENCE,
        "azp": "106023937129283497361",
        "email": EMAIL,
        "email_verified": True,
        "exp": NOW + 3600,
        "iat": NOW,
        "iss": "https://accounts.google.com",
        "sub": "106023937129283497361",
    }
    out.update(changes)
    return {k: v for k, v in out.items() if v is not None}


def token(key: str = "pubsub", kid: str = KID, algorithm: str = "RS256", **changes: Any) -> str:
    return jwt.encode(
        claims(**changes), private_pem(key), algorithm=algorithm, headers={"kid": kid}
    )


def body(message_id: str = "9470153312411538", **message: Any) -> bytes:
    inner: dict[str, Any] = {
        "attributes": {"kind": "order.created"},
        "data": base64.b64encode(b'{"order": 1}').decode(),
        "messageId": message_id,
        "message_id": message_id,
        "publishTime": "2023-11-14T22:13:19.874Z",
        "publish_time": "2023-11-14T22:13:19.874Z",
    }
    inner.update(message)
    return json.dumps({"message": inner, "subscription": SUBSCRIPTION}).encode()


def headers(bearer: str) -> dict[str, list[str]]:
    return {"authorization": [f"Bearer {bearer}"], "content-type": ["application/json"]}


def keys(*entries: tuple[str, str], email: str = EMAIL) -> list[Key]:
    published = pubsub.parse_jwks(jwks(*(entries or (("pubsub", KID),))))
    return [pubsub.parse_secret(email), *published]


def provider(**settings: Any) -> Provider:
    return pubsub.bind(pubsub.PubsubSettings(**{"audience": AUDIENCE, **settings}))


def refusal(bearer: str, now: float = NOW, given: list[Key] | None = None, **settings: Any) -> str:
    with pytest.raises(SignatureError) as info:
        provider(**settings).verify_request(headers(bearer), body(), given or keys(), now, 300)
    return info.value.reason


def test_a_token_google_would_send_verifies() -> None:
    verified = provider().verify_request(headers(token()), body(), keys(), NOW, 300)
    assert verified.scheme == "pubsub-oidc"
    assert verified.timestamp == NOW


def test_the_sample_signer_writes_tokens_pyjwt_accepts() -> None:
    raw = pubsub.id_token(private_pem("pubsub"), claims(), kid=KID)
    decoded = jwt.decode(
        raw,
        rsa_key("pubsub").public_key(),
        algorithms=["RS256"],
        audience=AUDIENCE,
        options={"verify_exp": False, "verify_iat": False},
    )
    assert decoded["email"] == EMAIL
    assert jwt.get_unverified_header(raw)["kid"] == KID


def test_the_right_key_is_found_among_several_by_kid() -> None:
    given = keys(("pubsub-other", "older-kid"), ("pubsub", KID))
    verified = provider().verify_request(headers(token()), body(), given, NOW, 300)
    assert verified.key_index == 2  # after the source's identity and the other key


@pytest.mark.parametrize(
    ("bearer", "given", "reason"),
    [
        # Signed by a key the JWKS does not hold, under a kid it does.
        (lambda: token(key="pubsub-other"), None, "bad_signature"),
        # A kid the JWKS does not have.
        (lambda: token(kid="unknown-kid"), None, "bad_signature"),
        # The right key, listed under another kid.
        (token, lambda: keys(("pubsub", "another-kid")), "bad_signature"),
    ],
)
def test_a_token_not_signed_by_the_published_key_is_refused(
    bearer: Any, given: Any, reason: str
) -> None:
    assert refusal(bearer(), given=given() if given else None) == reason


@pytest.mark.parametrize(
    "changes",
    [
        {"aud": "https://hooks.example.com/hooks/other"},
        {"aud": None},
        {"iss": "https://evil.example"},
        {"iss": None},
        {"email": "someone@evil.iam.gserviceaccount.com"},
        {"email": None},
        {"email_verified": False},
        {"email_verified": "true"},
        {"email_verified": None},
    ],
)
def test_a_token_for_someone_else_is_refused(changes: dict[str, Any]) -> None:
    assert refusal(token(**changes)) == "bad_signature"


def test_both_google_issuers_and_a_listed_audience_are_accepted() -> None:
    for issuer in pubsub.ISSUERS:
        assert provider().verify_request(headers(token(iss=issuer)), body(), keys(), NOW, 300)
    listed = token(aud=["https://other.example", AUDIENCE])
    assert provider().verify_request(headers(listed), body(), keys(), NOW, 300)


def test_an_expired_token_is_refused_past_the_tolerance() -> None:
    expired = token(exp=NOW - 100)
    assert provider().verify_request(headers(expired), body(), keys(), NOW + 200, 300)
    assert refusal(expired, now=NOW + 201) == "timestamp_too_old"


def test_a_token_issued_ahead_is_refused_past_the_tolerance() -> None:
    ahead = token(iat=NOW + 300)
    assert provider().verify_request(headers(ahead), body(), keys(), NOW, 300)
    assert refusal(token(iat=NOW + 301)) == "timestamp_in_future"


@pytest.mark.parametrize(
    ("bearer", "reason"),
    [
        ("", "empty_header"),
        ("abc", "malformed_signature"),
        ("a.b", "malformed_signature"),
        ("a.b.c", "malformed_signature"),
    ],
)
def test_what_is_no_token_is_refused(bearer: str, reason: str) -> None:
    with pytest.raises(SignatureError) as info:
        pubsub.check_headers({"authorization": [f"Bearer {bearer}".strip()]}, NOW, 300)
    assert info.value.reason in (reason, "malformed_signature")


def test_no_authorization_is_a_missing_header_and_basic_is_refused() -> None:
    with pytest.raises(SignatureError, match="missing_header"):
        pubsub.check_headers({}, NOW, 300)
    with pytest.raises(SignatureError, match="malformed_signature"):
        pubsub.check_headers({"authorization": ["Basic dXNlcjpwYXNz"]}, NOW, 300)


def test_hs256_and_unsigned_tokens_are_refused() -> None:
    hs = jwt.encode(claims(), "secret-key-of-32-bytes-or-more-ok", algorithm="HS256")
    assert refusal(hs) == "malformed_signature"
    head = base64.urlsafe_b64encode(b'{"alg":"none","kid":"' + KID.encode() + b'"}')
    payload = base64.urlsafe_b64encode(json.dumps(claims()).encode())
    unsigned = f"{head.decode().rstrip('=')}.{payload.decode().rstrip('=')}."
    assert refusal(unsigned) == "malformed_signature"


def test_a_token_re_encoded_with_padding_is_refused() -> None:
    parts = token().split(".")
    padded = ".".join([parts[0] + "=" * (-len(parts[0]) % 4 or 4), *parts[1:]])
    assert refusal(padded) == "malformed_signature"


def test_the_email_must_be_one_of_the_sources_secrets() -> None:
    other = keys(email="another@orders-project.iam.gserviceaccount.com")
    assert refusal(token(), given=other) == "bad_signature"


# --- the push body ------------------------------------------------------------------------


def envelope_of(raw: bytes, **settings: Any) -> Any:
    p = provider(**settings)
    verified = p.verify_request(headers(token()), raw, keys(), NOW, 300)
    return p.envelope(headers(token()), raw, verified)


def test_a_push_is_keyed_by_message_id_and_timed_by_publish_time() -> None:
    env = envelope_of(body())
    assert env.dedupe_key == "9470153312411538"
    assert env.occurred_at == datetime(2023, 11, 14, 22, 13, 19, 874000, tzinfo=UTC)
    assert env.type == "orders-push"
    assert "authorization" not in env.headers


def test_the_type_is_the_configured_attribute_when_present() -> None:
    assert envelope_of(body(), type_attribute="kind").type == "order.created"
    assert envelope_of(body(attributes={}), type_attribute="kind").type == "orders-push"


def test_a_push_without_a_message_id_is_malformed() -> None:
    raw = json.dumps({"message": {"data": ""}, "subscription": SUBSCRIPTION}).encode()
    with pytest.raises(PayloadError):
        envelope_of(raw)
    with pytest.raises(PayloadError):
        envelope_of(b"[]")


# --- the JWKS, secrets and settings -------------------------------------------------------


def test_a_jwks_keeps_its_rs256_keys_only() -> None:
    document = {
        "keys": [
            {"kty": "EC", "kid": "ec", "crv": "P-256", "x": "AA", "y": "AA"},
            {**jwk("pubsub", "enc"), "use": "enc"},
            {**jwk("pubsub", "ps"), "alg": "PS256"},
            jwk("pubsub", KID),
        ]
    }
    parsed = pubsub.parse_jwks(json.dumps(document).encode())
    assert [getattr(k, "kid", None) for k in parsed] == [KID]
    for bad in (b"not json", b"{}", b'{"keys": []}', json.dumps({"keys": [document["keys"][0]]})):
        with pytest.raises(ValueError):
            pubsub.parse_jwks(bad if isinstance(bad, bytes) else bad.encode())


def test_a_secret_is_a_service_account_email() -> None:
    assert pubsub.parse_secret(EMAIL) == Identity(EMAIL)
    for raw in ("push", "@example.com", "push@localhost", "a b@example.com"):
        with pytest.raises(ValueError, match="service account"):
            pubsub.parse_secret(raw)


SOURCE = f'[[sources]]\nname = "ps"\nprovider = "pubsub"\nsecrets = ["{EMAIL}"]\n'


def test_a_source_of_pubsub_needs_its_audience() -> None:
    message = error_of(SOURCE)
    assert "verify.audience" in message
    assert parse(SOURCE + f'[sources.verify]\naudience = "{AUDIENCE}"\n').get("ps") is not None


def test_the_jwks_url_must_be_https() -> None:
    table = f'[sources.verify]\naudience = "{AUDIENCE}"\njwks_url = "http://keys.example/jwks"\n'
    assert "verify.jwks_url" in error_of(SOURCE + table)


def test_a_kid_the_fetched_keys_lack_is_missing_and_one_they_hold_is_not() -> None:
    """``missing`` is what has the receiver fetch the JWKS again (a rotation)."""
    fetch = provider().key_fetch
    assert fetch is not None and fetch.missing is not None
    p = provider()
    held = p.check_headers(headers(token(kid=KID)), NOW, 300)
    rotated = p.check_headers(headers(token(key="pubsub-new", kid="rotated-in")), NOW, 300)
    published = keys(("pubsub-old", "rotated-out"), ("pubsub", KID))
    assert fetch.missing(held, body(), published) is False
    assert fetch.missing(rotated, body(), published) is True
    # Only an RSA key of that kid counts: the source's identity (the email) is none.
    assert fetch.missing(held, body(), [pubsub.parse_secret(EMAIL)]) is True
    # Once the JWKS holds it, the token verifies as any other.
    renewed = keys(("pubsub", KID), ("pubsub-new", "rotated-in"))
    assert fetch.missing(rotated, body(), renewed) is False
    assert p.verify(rotated, body(), renewed).key_index == 2  # after the email and KID's
