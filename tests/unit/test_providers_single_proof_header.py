"""Providers whose proof is one header and no signed timestamp header: Shopify
(base64 HMAC of the body), GitLab (the secret token itself), Bitbucket Cloud
(``sha256=<hex>``) and Linear (hex HMAC, its timestamp inside the body). Each provider's
documented scheme on the other side of hookd's verifier.

Requests are signed here, by hand, from each provider's documentation (``sign_*``
below), never with ``hookd.providers``; where the provider publishes a vector it is
used as it stands: Shopify's app library (``shopify-api-js``, ``validate.test.ts``:
secret ``test_secret_key``, body ``{"foo": "bar"}``), GitLab's delivery-headers table,
and Linear's SDK test fixture (``LinearWebhooks.test.ts``: secret ``SECRET``, a Comment
payload with ``webhookTimestamp`` 1677611643000). No official Python signer exists for
any of the four.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

import pytest

from hookd.errors import PayloadError, SignatureError
from hookd.providers import PROVIDERS
from hookd.providers.base import Envelope, Verified

NOW = 1_700_000_000
TOLERANCE_S = 300
NAMES = ("shopify", "gitlab", "bitbucket", "linear")
SECRETS = {
    "shopify": "shpss_unit_shopify_client_secret",
    "gitlab": "gitlab-unit-secret-token",
    "bitbucket": "bitbucket-unit-webhook-secret",
    "linear": "lin_wh_unit_linear_signing_secret",
}
OTHER_SECRETS = {
    "shopify": "shpss_another_client_secret",
    "gitlab": "gitlab-other-secret-token",
    "bitbucket": "bitbucket-other-webhook-secret",
    "linear": "lin_wh_another_signing_secret",
}
# The header each provider proves itself with; never kept with an event.
PROOF_HEADER = {
    "shopify": "x-shopify-hmac-sha256",
    "gitlab": "x-gitlab-token",
    "bitbucket": "x-hub-signature",
    "linear": "linear-signature",
}
SCHEME = {
    "shopify": "shopify-sha256",
    "gitlab": "gitlab-token",
    "bitbucket": "bitbucket-sha256",
    "linear": "linear-sha256",
}

Headers = dict[str, list[str]]


def header_map(headers: Mapping[str, str]) -> Headers:
    """Mixed-case single-valued headers as the receiver hands them to a provider."""
    return {name.lower(): [value] for name, value in headers.items()}


# --- the providers' schemes, by hand --------------------------------------------------


def sign_shopify(secret: str, body: bytes) -> str:
    """Base64 of HMAC-SHA256(client secret, raw body)."""
    return base64.b64encode(hmac.new(secret.encode(), body, hashlib.sha256).digest()).decode()


def sign_bitbucket(secret: str, body: bytes) -> str:
    """``sha256=`` and the hex HMAC-SHA256(webhook secret, raw body)."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def sign_linear(secret: str, body: bytes) -> str:
    """The hex HMAC-SHA256(signing secret, raw body)."""
    return hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


SHOPIFY_BODY = json.dumps({"id": 820982911946154508, "email": "jon@example.com"}).encode()
GITLAB_BODY = json.dumps(
    {
        "object_kind": "merge_request",
        "event_type": "merge_request",
        "project": {"id": 1, "path_with_namespace": "gitlabhq/gitlab-test"},
        "object_attributes": {
            "id": 99,
            "iid": 1,
            "action": "open",
            "created_at": "2013-12-03T17:15:43Z",
            "updated_at": "2013-12-03T17:23:34Z",
        },
    }
).encode()
BITBUCKET_BODY = json.dumps(
    {"actor": {"display_name": "Ann"}, "repository": {"full_name": "team/repo"}, "push": {}}
).encode()


def linear_body(timestamp_ms: object = NOW * 1000, **extra: Any) -> bytes:
    payload = {
        "action": "update",
        "type": "Issue",
        "createdAt": "2023-11-14T22:13:19.500Z",
        "data": {"id": "2174add1-f7c8-44e3-bbf3-2d60b5ea8bc9", "title": "Fix the login"},
        "url": "https://linear.app/team/issue/ENG-1",
        "organizationId": "e0c3fae0-5f4c-4e4b-9f3e-1a2b3c4d5e6f",
        "webhookTimestamp": timestamp_ms,
        **extra,
    }
    return json.dumps(payload).encode()


BODIES = {
    "shopify": SHOPIFY_BODY,
    "gitlab": GITLAB_BODY,
    "bitbucket": BITBUCKET_BODY,
    "linear": linear_body(),
}


def signed(provider: str, body: bytes | None = None, secret: str | None = None) -> Headers:
    """Every header a real ``provider`` request carries, signed as the provider signs."""
    body = BODIES[provider] if body is None else body
    secret = secret or SECRETS[provider]
    if provider == "shopify":
        return header_map(
            {
                "X-Shopify-Topic": "orders/create",
                "X-Shopify-Hmac-Sha256": sign_shopify(secret, body),
                "X-Shopify-Shop-Domain": "example.myshopify.com",
                "X-Shopify-API-Version": "2025-07",
                "X-Shopify-Webhook-Id": "b54557e4-bdd9-4b37-8a5f-bf7d70bcd043",
                "X-Shopify-Event-Id": "98880550-7158-44d4-b7cd-2c97c8a091b5",
                "X-Shopify-Triggered-At": "2023-03-29T18:00:27.877041743Z",
                "Content-Type": "application/json",
            }
        )
    if provider == "gitlab":
        return header_map(
            {
                "Content-Type": "application/json",
                "User-Agent": "GitLab/17.4.0",
                "X-Gitlab-Event": "Merge Request Hook",
                "X-Gitlab-Instance": "https://gitlab.com",
                "X-Gitlab-Webhook-UUID": "02affd2d-2cba-4033-917d-ec22d5dc4b38",
                "X-Gitlab-Event-UUID": "13792a34-cac6-4fda-95a8-c58e00a3954e",
                "Idempotency-Key": "f5e5f430-f57b-4e6e-9fac-d9128cd7232f",
                "X-Gitlab-Token": secret,
            }
        )
    if provider == "bitbucket":
        return header_map(
            {
                "X-Event-Key": "repo:push",
                "X-Hook-UUID": "{cb7d8f3e-0a7a-4c3b-9e3c-6f0a6b2a1d9e}",
                "X-Request-UUID": "5f9a7c53-5f57-4a1e-9a40-2b4f8c1e0d77",
                "X-Attempt-Number": "1",
                "X-Hub-Signature": sign_bitbucket(secret, body),
                "Content-Type": "application/json",
                "User-Agent": "Bitbucket-Webhooks/2.0",
            }
        )
    assert provider == "linear", provider
    return header_map(
        {
            "Linear-Delivery": "234d1a4e-b617-4388-90fe-adc3633d6b72",
            "Linear-Event": "Issue",
            "Linear-Signature": sign_linear(secret, body),
            "Content-Type": "application/json; charset=utf-8",
            "User-Agent": "Linear-Webhook",
        }
    )


# --- going through hookd's verifier ---------------------------------------------------


def verify(
    provider: str,
    headers: Headers,
    body: bytes,
    *secrets: str,
    now: float = NOW,
    tolerance_s: int = TOLERANCE_S,
) -> Verified:
    parse = PROVIDERS[provider].parse_secret
    keys = [parse(secret) for secret in (secrets or (SECRETS[provider],))]
    return PROVIDERS[provider].verify_request(headers, body, keys, now, tolerance_s)


def accept(provider: str, headers: Headers, body: bytes, *secrets: str) -> Envelope:
    verified = verify(provider, headers, body, *secrets)
    return PROVIDERS[provider].envelope(headers, body, verified)


def rejected(provider: str, headers: Headers, body: bytes, *secrets: str, **kw: Any) -> str:
    with pytest.raises(SignatureError) as info:
        verify(provider, headers, body, *secrets, **kw)
    return info.value.reason


def flip_bit(body: bytes, bit: int) -> bytes:
    flipped = bytearray(body)
    flipped[bit // 8] ^= 1 << (bit % 8)
    return bytes(flipped)


# --- every provider -------------------------------------------------------------------


@pytest.mark.parametrize("provider", NAMES)
def test_a_request_signed_as_documented_verifies(provider: str) -> None:
    headers = signed(provider)
    verified = verify(provider, headers, BODIES[provider])
    assert (verified.scheme, verified.key_index) == (SCHEME[provider], 0)


@pytest.mark.parametrize("provider", NAMES)
def test_the_proof_header_is_never_kept(provider: str) -> None:
    envelope = accept(provider, signed(provider), BODIES[provider])
    assert PROOF_HEADER[provider] not in envelope.headers
    assert envelope.headers["content-type"].startswith("application/json")


@pytest.mark.parametrize("provider", NAMES)
def test_the_second_configured_secret_verifies_as_key_one(provider: str) -> None:
    """Rotation: the secret the request was signed with may be any of the source's."""
    headers = signed(provider)
    verified = verify(
        provider, headers, BODIES[provider], OTHER_SECRETS[provider], SECRETS[provider]
    )
    assert verified.key_index == 1


@pytest.mark.parametrize("provider", NAMES)
def test_wrong_secret_is_bad_signature(provider: str) -> None:
    headers = signed(provider, secret=OTHER_SECRETS[provider])
    assert rejected(provider, headers, BODIES[provider]) == "bad_signature"


@pytest.mark.parametrize("provider", NAMES)
def test_missing_proof_header_is_missing_header(provider: str) -> None:
    headers = signed(provider)
    del headers[PROOF_HEADER[provider]]
    with pytest.raises(SignatureError) as info:
        verify(provider, headers, BODIES[provider])
    assert (info.value.reason, info.value.detail) == ("missing_header", PROOF_HEADER[provider])


@pytest.mark.parametrize("provider", NAMES)
def test_doubled_proof_header_is_duplicate_header(provider: str) -> None:
    """Two copies, even of the genuine value: a proxy merging requests, or an attack."""
    headers = signed(provider)
    genuine = headers[PROOF_HEADER[provider]][0]
    headers[PROOF_HEADER[provider]] = [genuine, genuine]
    assert rejected(provider, headers, BODIES[provider]) == "duplicate_header"


@pytest.mark.parametrize("provider", NAMES)
@pytest.mark.parametrize("value", ["", "   "])
def test_empty_proof_header_is_empty_header(provider: str, value: str) -> None:
    headers = signed(provider)
    headers[PROOF_HEADER[provider]] = [value]
    assert rejected(provider, headers, BODIES[provider]) == "empty_header"


@pytest.mark.parametrize("provider", ["shopify", "bitbucket", "linear"])
@pytest.mark.parametrize("bit", [0, 7, 100])
def test_flipped_body_bit_is_bad_signature(provider: str, bit: int) -> None:
    headers = signed(provider)
    assert rejected(provider, headers, flip_bit(BODIES[provider], bit)) == "bad_signature"


@pytest.mark.parametrize("provider", NAMES)
def test_secret_parser_refuses_an_empty_secret_by_name(provider: str) -> None:
    with pytest.raises(ValueError, match=rf"(?i){provider}.*must not be empty"):
        PROVIDERS[provider].parse_secret("")


@pytest.mark.parametrize("provider", NAMES)
def test_sample_event_is_signed_as_the_provider_signs(provider: str) -> None:
    """``hookd send-test`` sends what the provider would: checked here against the
    hand-written scheme, then through the verifier."""
    secret = SECRETS[provider]
    sent, body = PROVIDERS[provider].sample_event(secret, 3, NOW)
    headers = header_map(sent)
    proof = headers[PROOF_HEADER[provider]][0]
    expected: dict[str, Callable[[str, bytes], str]] = {
        "shopify": sign_shopify,
        "gitlab": lambda secret, _body: secret,
        "bitbucket": sign_bitbucket,
        "linear": sign_linear,
    }
    assert hmac.compare_digest(proof, expected[provider](secret, body))
    envelope = accept(provider, headers, body)
    assert envelope.dedupe_key
    assert envelope.type
    # ``send-test --count 2`` in one second: two events, not an event and a duplicate.
    again, again_body = PROVIDERS[provider].sample_event(secret, 3, NOW)
    assert accept(provider, header_map(again), again_body).dedupe_key != envelope.dedupe_key


# --- Shopify ----------------------------------------------------------------------------

# shopify-api-js, lib/webhooks/__tests__/validate.test.ts and utils.ts.
LIBRARY_SECRET = "test_secret_key"
LIBRARY_BODY = b'{"foo": "bar"}'
LIBRARY_HMAC = "B23tXN681gZ0qIWNRrgtzBE9XSDo5yaUu6wfmhu3a7g="
LIBRARY_HEADERS = {
    "X-Shopify-API-Version": "2023-01",
    "X-Shopify-Shop-Domain": "shop1.myshopify.io",
    "X-Shopify-Hmac-Sha256": LIBRARY_HMAC,
    "X-Shopify-Topic": "products/create",
    "X-Shopify-Webhook-Id": "123456789",
}


def test_shopify_library_vector_verifies_keyed_by_topic_and_webhook_id() -> None:
    """Shopify's own vector: no X-Shopify-Event-Id, so the webhook id keys it."""
    assert sign_shopify(LIBRARY_SECRET, LIBRARY_BODY) == LIBRARY_HMAC
    headers = header_map(LIBRARY_HEADERS)
    envelope = accept("shopify", headers, LIBRARY_BODY, LIBRARY_SECRET)
    assert envelope.dedupe_key == "products/create:123456789"
    assert envelope.type == "products/create"
    assert envelope.occurred_at is None
    assert envelope.headers["x-shopify-shop-domain"] == "shop1.myshopify.io"


def test_shopify_library_vector_with_a_wrong_secret_is_bad_signature() -> None:
    headers = header_map(LIBRARY_HEADERS)
    assert rejected("shopify", headers, LIBRARY_BODY, "test_secret_key2") == "bad_signature"


def test_shopify_event_id_keys_the_event_and_triggered_at_dates_it() -> None:
    envelope = accept("shopify", signed("shopify"), SHOPIFY_BODY)
    assert envelope.dedupe_key == "orders/create:98880550-7158-44d4-b7cd-2c97c8a091b5"
    assert envelope.occurred_at == datetime(2023, 3, 29, 18, 0, 27, 877041, tzinfo=UTC)
    assert envelope.headers["x-shopify-event-id"] == "98880550-7158-44d4-b7cd-2c97c8a091b5"


def test_shopify_retry_with_another_webhook_id_is_the_same_event() -> None:
    first = signed("shopify")
    retry = signed("shopify")
    retry["x-shopify-webhook-id"] = ["0f8a4a53-3d3c-4d43-9e3a-7c4c5d2e1b00"]
    assert accept("shopify", first, SHOPIFY_BODY).dedupe_key == (
        accept("shopify", retry, SHOPIFY_BODY).dedupe_key
    )


def test_shopify_same_event_id_under_another_topic_is_another_event() -> None:
    paid = signed("shopify")
    paid["x-shopify-topic"] = ["orders/paid"]
    assert accept("shopify", paid, SHOPIFY_BODY).dedupe_key != (
        accept("shopify", signed("shopify"), SHOPIFY_BODY).dedupe_key
    )


@pytest.mark.parametrize("missing", ["x-shopify-topic", "x-shopify-webhook-id"])
def test_shopify_without_topic_or_any_id_is_malformed_payload(missing: str) -> None:
    headers = signed("shopify")
    del headers["x-shopify-event-id"]
    del headers[missing]
    verified = verify("shopify", headers, SHOPIFY_BODY)
    with pytest.raises(PayloadError) as info:
        PROVIDERS["shopify"].envelope(headers, SHOPIFY_BODY, verified)
    assert info.value.reason == "malformed_payload"


@pytest.mark.parametrize(
    "value",
    [
        # The last character carries two unused bits; setting one decodes to the same
        # digest, so it must not verify.
        LIBRARY_HMAC[:42] + "h=",
        LIBRARY_HMAC.rstrip("="),
        LIBRARY_HMAC[:4] + " " + LIBRARY_HMAC[4:],
        base64.b64encode(bytes(20)).decode(),
        "sha256=" + LIBRARY_HMAC,
    ],
    ids=["padding-bits", "no-padding", "inner-space", "short-digest", "prefixed"],
)
def test_shopify_non_canonical_base64_is_malformed_signature(value: str) -> None:
    assert base64.b64decode(LIBRARY_HMAC[:42] + "h=") == base64.b64decode(LIBRARY_HMAC)
    headers = header_map({**LIBRARY_HEADERS, "X-Shopify-Hmac-Sha256": value})
    assert rejected("shopify", headers, LIBRARY_BODY, LIBRARY_SECRET) == "malformed_signature"


def test_shopify_xml_body_verifies_without_being_parsed() -> None:
    body = b'<?xml version="1.0" encoding="UTF-8"?><order><id>1</id></order>'
    headers = signed("shopify", body)
    headers["content-type"] = ["application/xml"]
    assert accept("shopify", headers, body).type == "orders/create"


# --- GitLab -----------------------------------------------------------------------------

# The example push body of GitLab's webhook events page, shortened.
GITLAB_PUSH = json.dumps(
    {
        "object_kind": "push",
        "event_name": "push",
        "before": "95790bf891e76fee5e1747ab589903a6a1f80f22",
        "after": "da1560886d4f094c3e6c9ef40349f7d38b5d27d7",
        "ref": "refs/heads/master",
        "checkout_sha": "da1560886d4f094c3e6c9ef40349f7d38b5d27d7",
        "user_id": 4,
        "user_name": "John Smith",
        "project_id": 15,
        "project": {"id": 15, "name": "Diaspora", "path_with_namespace": "mike/diaspora"},
        "commits": [],
        "total_commits_count": 4,
    }
).encode()


def test_gitlab_documented_headers_key_by_idempotency_key() -> None:
    """The example values of GitLab's delivery-headers table."""
    headers = signed("gitlab")
    headers["x-gitlab-event"] = ["Push Hook"]
    envelope = accept("gitlab", headers, GITLAB_PUSH)
    assert envelope.dedupe_key == "f5e5f430-f57b-4e6e-9fac-d9128cd7232f"
    assert envelope.type == "push"
    assert envelope.occurred_at is None
    assert envelope.headers["x-gitlab-event-uuid"] == "13792a34-cac6-4fda-95a8-c58e00a3954e"
    assert envelope.headers["x-gitlab-instance"] == "https://gitlab.com"


def test_gitlab_type_is_object_kind_and_action_dated_by_updated_at() -> None:
    envelope = accept("gitlab", signed("gitlab"), GITLAB_BODY)
    assert envelope.type == "merge_request.open"
    assert envelope.occurred_at == datetime(2013, 12, 3, 17, 23, 34, tzinfo=UTC)


def test_gitlab_older_time_format_and_system_hook_event_name() -> None:
    body = json.dumps({"event_name": "project_create", "name": "StoreCloud"}).encode()
    assert accept("gitlab", signed("gitlab"), body).type == "project_create"
    note = json.dumps(
        {
            "object_kind": "note",
            "object_attributes": {"id": 1243, "updated_at": "2015-05-17 18:08:09 UTC"},
        }
    ).encode()
    envelope = accept("gitlab", signed("gitlab"), note)
    assert envelope.type == "note"
    assert envelope.occurred_at == datetime(2015, 5, 17, 18, 8, 9, tzinfo=UTC)


def test_gitlab_payload_without_a_kind_is_typed_by_x_gitlab_event() -> None:
    envelope = accept("gitlab", signed("gitlab"), b'{"custom": "template"}')
    assert envelope.type == "Merge Request Hook"


def test_gitlab_before_17_4_is_keyed_by_the_body_not_the_event_uuid() -> None:
    """Recursive webhooks share X-Gitlab-Event-UUID: two of them must stay two events,
    while a retry (the same bytes) stays one."""
    headers = signed("gitlab")
    del headers["idempotency-key"]
    first = accept("gitlab", headers, GITLAB_PUSH)
    assert first.dedupe_key == "sha256:" + hashlib.sha256(GITLAB_PUSH).hexdigest()
    assert accept("gitlab", headers, GITLAB_PUSH).dedupe_key == first.dedupe_key
    assert accept("gitlab", headers, GITLAB_BODY).dedupe_key != first.dedupe_key


@pytest.mark.parametrize(
    "presented",
    [
        SECRETS["gitlab"].upper(),
        SECRETS["gitlab"] + "x",
        SECRETS["gitlab"][:-1],
        "x" + SECRETS["gitlab"],
    ],
    ids=["upper-case", "longer", "shorter", "prefixed"],
)
def test_gitlab_a_token_that_is_not_exactly_the_secret_is_bad_signature(presented: str) -> None:
    headers = signed("gitlab")
    headers["x-gitlab-token"] = [presented]
    assert rejected("gitlab", headers, GITLAB_BODY) == "bad_signature"


def test_gitlab_token_covers_no_body() -> None:
    """GitLab's secret token is no signature: a changed body still verifies. Nothing
    but TLS and deduplication protects a GitLab delivery's content."""
    headers = signed("gitlab")
    assert verify("gitlab", headers, flip_bit(GITLAB_BODY, 7)).scheme == "gitlab-token"


def test_gitlab_non_json_body_is_malformed_payload() -> None:
    headers = signed("gitlab")
    with pytest.raises(PayloadError):
        accept("gitlab", headers, b"not json")


# --- Bitbucket Cloud -------------------------------------------------------------------


def test_bitbucket_keyed_by_request_uuid_typed_by_event_key() -> None:
    envelope = accept("bitbucket", signed("bitbucket"), BITBUCKET_BODY)
    assert envelope.dedupe_key == "5f9a7c53-5f57-4a1e-9a40-2b4f8c1e0d77"
    assert envelope.type == "repo:push"
    assert envelope.occurred_at is None
    assert envelope.headers["x-hook-uuid"] == "{cb7d8f3e-0a7a-4c3b-9e3c-6f0a6b2a1d9e}"


def test_bitbucket_retry_attempt_is_the_same_event() -> None:
    retry = signed("bitbucket")
    retry["x-attempt-number"] = ["2"]
    assert accept("bitbucket", retry, BITBUCKET_BODY).dedupe_key == (
        accept("bitbucket", signed("bitbucket"), BITBUCKET_BODY).dedupe_key
    )


@pytest.mark.parametrize(
    "value",
    [
        lambda sig: "sha256=" + sig.removeprefix("sha256=").upper(),
        lambda sig: "SHA256=" + sig.removeprefix("sha256="),
        lambda sig: sig.removeprefix("sha256="),
        lambda sig: "sha1=" + sig.removeprefix("sha256="),
        lambda sig: sig[:-2],
        lambda sig: sig + "00",
    ],
    ids=["upper-hex", "upper-prefix", "no-prefix", "sha1", "short", "long"],
)
def test_bitbucket_non_canonical_signature_is_malformed_signature(
    value: Callable[[str], str],
) -> None:
    headers = signed("bitbucket")
    headers["x-hub-signature"] = [value(headers["x-hub-signature"][0])]
    assert rejected("bitbucket", headers, BITBUCKET_BODY) == "malformed_signature"


def test_bitbucket_without_request_uuid_is_malformed_payload() -> None:
    headers = signed("bitbucket")
    del headers["x-request-uuid"]
    with pytest.raises(PayloadError):
        accept("bitbucket", headers, BITBUCKET_BODY)


# --- Linear ------------------------------------------------------------------------------

# linear/linear, packages/sdk/src/_tests/LinearWebhooks.test.ts: the request body as
# JSON.stringify writes it, signed there with the secret "SECRET".
SDK_SECRET = "SECRET"
SDK_TIMESTAMP_MS = 1677611643000
SDK_BODY = (
    b'{"action":"create","data":{"id":"2174add1-f7c8-44e3-bbf3-2d60b5ea8bc9",'
    b'"createdAt":"2020-01-23T12:53:18.084Z","updatedAt":"2020-01-23T12:53:18.084Z",'
    b'"archivedAt":null,"body":"Indeed, I think this is definitely an improvement over the '
    b'previous version.","edited":false,"issueId":"539068e2-ae88-4d09-bd75-22eb4a59612f",'
    b'"userId":"aacdca22-6266-4c0a-ab3c-8fa70a26765c"},"type":"Comment",'
    b'"url":"https://linear.app/issue/LIN-1778/foo-bar#comment-77217de3-fb52-4dad-bb9a-'
    b'b356beb93de8","createdAt":"2020-01-23T12:53:18.084Z","webhookTimestamp":1677611643000}'
)
SDK_SENT_AT = SDK_TIMESTAMP_MS / 1000


def sdk_request() -> Headers:
    headers = signed("linear", SDK_BODY, SDK_SECRET)
    headers["linear-event"] = ["Comment"]
    return headers


def test_linear_sdk_fixture_verifies_when_fresh() -> None:
    assert json.loads(SDK_BODY)["webhookTimestamp"] == SDK_TIMESTAMP_MS
    verified = verify("linear", sdk_request(), SDK_BODY, SDK_SECRET, now=SDK_SENT_AT + 0.5)
    assert (verified.scheme, verified.timestamp) == ("linear-sha256", 1677611643)
    envelope = PROVIDERS["linear"].envelope(sdk_request(), SDK_BODY, verified)
    assert envelope.dedupe_key == "234d1a4e-b617-4388-90fe-adc3633d6b72"
    assert envelope.type == "Comment.create"
    assert envelope.occurred_at == datetime(2020, 1, 23, 12, 53, 18, 84000, tzinfo=UTC)
    assert envelope.headers["linear-event"] == "Comment"


def test_linear_sdk_fixture_is_refused_once_stale_as_linear_refuses_it() -> None:
    """The SDK test's "correct signature, incorrect timestamp": a minute and a bit later
    it is too old under Linear's own one-minute window."""
    reason = rejected(
        "linear", sdk_request(), SDK_BODY, SDK_SECRET, now=SDK_SENT_AT + 61, tolerance_s=60
    )
    assert reason == "timestamp_too_old"


def test_linear_sdk_fixture_with_a_wrong_secret_is_bad_signature() -> None:
    reason = rejected("linear", sdk_request(), SDK_BODY, "WRONG_SECRET", now=SDK_SENT_AT)
    assert reason == "bad_signature"


@pytest.mark.parametrize(
    ("offset_ms", "reason"),
    [
        (-TOLERANCE_S * 1000, None),
        (-TOLERANCE_S * 1000 - 1, "timestamp_too_old"),
        (TOLERANCE_S * 1000, None),
        (TOLERANCE_S * 1000 + 1, "timestamp_in_future"),
        (-86_400_000, "timestamp_too_old"),
        (86_400_000, "timestamp_in_future"),
    ],
)
def test_linear_window_is_the_sources_tolerance_with_inclusive_edges(
    offset_ms: int, reason: str | None
) -> None:
    body = linear_body(NOW * 1000 + offset_ms)
    headers = signed("linear", body)
    if reason is None:
        assert verify("linear", headers, body).timestamp is not None
    else:
        assert rejected("linear", headers, body) == reason


def test_linear_window_follows_the_source_not_a_fixed_minute() -> None:
    body = linear_body((NOW - 120) * 1000)
    headers = signed("linear", body)
    assert verify("linear", headers, body, tolerance_s=300).timestamp == NOW - 120
    assert rejected("linear", headers, body, tolerance_s=60) == "timestamp_too_old"


def test_linear_window_keeps_the_clocks_fraction() -> None:
    body = linear_body((NOW - 60) * 1000)
    headers = signed("linear", body)
    assert verify("linear", headers, body, now=NOW, tolerance_s=60).timestamp == NOW - 60
    reason = rejected("linear", headers, body, now=NOW + 0.25, tolerance_s=60)
    assert reason == "timestamp_too_old"


@pytest.mark.parametrize(
    "body",
    [
        linear_body(None),
        linear_body(str(NOW * 1000)),
        linear_body(NOW * 1000 + 0.5),
        linear_body(True),
        linear_body(-1),
        linear_body(10**16),
        json.dumps({"type": "Issue"}).encode(),
        b"[1, 2]",
        b"\xff not json",
    ],
    ids=["null", "string", "float", "bool", "negative", "huge", "absent", "array", "not-json"],
)
def test_linear_body_without_a_usable_timestamp_is_malformed_timestamp(body: bytes) -> None:
    assert rejected("linear", signed("linear", body), body) == "malformed_timestamp"


def test_linear_signature_is_checked_before_the_timestamp() -> None:
    """A forged body says nothing about time: a bad signature is reported as such even
    when the timestamp in it is stale or missing."""
    stale = linear_body((NOW - 3600) * 1000)
    assert rejected("linear", signed("linear"), stale) == "bad_signature"
    assert rejected("linear", signed("linear"), b"{}") == "bad_signature"


def test_linear_unsigned_timestamp_header_is_ignored() -> None:
    """Linear's SDK reads a ``Linear-Timestamp`` header when present; nothing signs
    it, so it can neither rescue a stale body nor refuse a fresh one."""
    stale = linear_body((NOW - 3600) * 1000)
    headers = signed("linear", stale)
    headers["linear-timestamp"] = [str(NOW * 1000)]
    assert rejected("linear", headers, stale) == "timestamp_too_old"
    fresh = signed("linear")
    fresh["linear-timestamp"] = ["1"]
    assert verify("linear", fresh, BODIES["linear"]).timestamp == NOW


@pytest.mark.parametrize(
    "value",
    [
        lambda sig: sig.upper(),
        lambda sig: "sha256=" + sig,
        lambda sig: base64.b64encode(bytes.fromhex(sig)).decode(),
        lambda sig: sig[:-1],
    ],
    ids=["upper-hex", "prefixed", "base64", "short"],
)
def test_linear_non_canonical_signature_is_malformed_signature(
    value: Callable[[str], str],
) -> None:
    headers = signed("linear")
    headers["linear-signature"] = [value(headers["linear-signature"][0])]
    assert rejected("linear", headers, BODIES["linear"]) == "malformed_signature"


def test_linear_without_type_is_typed_by_the_event_header_and_dated_by_send_time() -> None:
    body = json.dumps({"webhookTimestamp": NOW * 1000, "data": {}}).encode()
    envelope = accept("linear", signed("linear", body), body)
    assert envelope.type == "Issue"
    assert envelope.occurred_at == datetime.fromtimestamp(NOW, UTC)


def test_linear_without_delivery_header_is_malformed_payload() -> None:
    headers = signed("linear")
    del headers["linear-delivery"]
    with pytest.raises(PayloadError):
        accept("linear", headers, BODIES["linear"])
