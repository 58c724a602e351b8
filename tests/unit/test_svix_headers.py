"""Standard Webhooks under Svix's header names (``svix-id``, ``svix-timestamp``,
``svix-signature``), which Svix sends by default.

Either set verifies the same signature and gives the same dedupe key; a request carrying
both verifies when they agree and is ``conflicting_headers`` when any of the three differ.
The other side is Svix's own Python library signing, through the real receiver.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from svix.webhooks import Webhook as SvixWebhook

from hookd.errors import SignatureError
from hookd.sources import Sources, parse_sources
from store.models import EVENTS
from tests.support.asgi import running_app
from tests.support.data import engine_of
from tests.unit.webhook_requests import MSG_ID, NOW, SECRETS, accept, signed_request, verify

BODY = b'{"type": "invoice.paid", "data": {"n": 1}}'
NAMES = ("id", "timestamp", "signature")


def as_svix(headers: dict[str, list[str]]) -> dict[str, list[str]]:
    """The same request with the webhook-* headers renamed svix-*."""
    return {
        name.replace("webhook-", "svix-", 1) if name.startswith("webhook-") else name: values
        for name, values in headers.items()
    }


def both_sets(headers: dict[str, list[str]]) -> dict[str, list[str]]:
    return {**headers, **as_svix(headers)}


def rejected(headers: dict[str, list[str]], body: bytes = BODY) -> str:
    with pytest.raises(SignatureError) as info:
        verify("standard", headers, body)
    return info.value.reason


def test_svix_header_names_verify_with_the_same_key_and_signature() -> None:
    """svix-* headers alone: verified as standard-v1, keyed by svix-id, kept headers
    named as they arrived."""
    headers = as_svix(signed_request("standard", BODY))
    assert not any(name.startswith("webhook-") for name in headers)
    envelope = accept("standard", headers, BODY)
    assert verify("standard", headers, BODY).scheme == "standard-v1"
    assert envelope.dedupe_key == MSG_ID
    assert envelope.type == "invoice.paid"
    assert envelope.headers["svix-id"] == MSG_ID
    assert envelope.headers["svix-timestamp"] == str(NOW)
    assert "svix-signature" not in envelope.headers


def test_both_sets_identical_verify() -> None:
    headers = both_sets(signed_request("standard", BODY))
    assert accept("standard", headers, BODY).dedupe_key == MSG_ID


def test_svix_set_with_a_wrong_signature_is_bad_signature() -> None:
    headers = as_svix(signed_request("standard", BODY))
    assert rejected(headers, BODY + b" ") == "bad_signature"


@pytest.mark.parametrize("which", NAMES)
def test_both_sets_differing_in_one_header_is_conflicting_headers(which: str) -> None:
    """webhook-* signed for one message, svix-* changed in one header: neither set is
    trusted over the other, whichever of the two is genuine."""
    genuine = signed_request("standard", BODY)
    other = signed_request("standard", BODY, msg_id="msg_other", timestamp=NOW - 1)
    headers = both_sets(genuine)
    headers[f"svix-{which}"] = other[f"webhook-{which}"]
    assert rejected(headers) == "conflicting_headers"
    swapped = both_sets(genuine)
    swapped[f"webhook-{which}"] = other[f"webhook-{which}"]
    assert rejected(swapped) == "conflicting_headers"


@pytest.mark.parametrize("which", NAMES)
def test_mixed_sets_missing_one_header_is_missing_header(which: str) -> None:
    """Two headers of one set and the third of the other: a set is incomplete."""
    genuine = signed_request("standard", BODY)
    headers = {name: values for name, values in genuine.items() if name != f"webhook-{which}"}
    headers[f"svix-{which}"] = genuine[f"webhook-{which}"]
    assert rejected(headers) == "missing_header"


def test_doubled_svix_id_is_duplicate_header() -> None:
    headers = as_svix(signed_request("standard", BODY))
    headers["svix-id"] = [MSG_ID, "msg_b"]
    assert rejected(headers) == "duplicate_header"


def test_no_header_of_either_set_names_webhook_id() -> None:
    with pytest.raises(SignatureError) as info:
        verify("standard", {"content-type": ["application/json"]}, BODY)
    assert (info.value.reason, info.value.detail) == ("missing_header", "webhook-id")


# --- Svix's own library, through the receiver ----------------------------------------


def svix_request(msg_id: str, body: bytes) -> dict[str, str]:
    """What a Svix-backed sender sends: its library's signature under svix-* headers."""
    signature = SvixWebhook(SECRETS["standard"]).sign(
        msg_id, datetime.fromtimestamp(NOW, UTC), body.decode()
    )
    return {
        "svix-id": msg_id,
        "svix-timestamp": str(NOW),
        "svix-signature": signature,
        "content-type": "application/json",
    }


@pytest.mark.anyio
async def test_svix_library_signature_is_202_then_duplicate_200(
    tmp_path: Path, sqlite_url: str
) -> None:
    path = tmp_path / "hookd.toml"
    path.write_text(
        f'[[sources]]\nname = "svix"\nprovider = "standard"\nsecrets = ["{SECRETS["standard"]}"]\n'
    )
    sources = parse_sources(path.read_text(), path, env={})
    body = json.dumps({"type": "invoice.paid", "data": {"invoice": 7}}).encode()
    headers = svix_request("msg_svix_0001", body)
    async with running_app(sources, sqlite_url, clock=lambda: NOW + 0.5) as (_, client):
        first = await client.post("/hooks/svix", content=body, headers=headers)
        again = await client.post("/hooks/svix", content=body, headers=headers)
        tampered = await client.post("/hooks/svix", content=body + b" ", headers=headers)
    assert first.status_code == 202, first.text
    assert again.status_code == 200, again.text
    assert tampered.status_code == 401
    assert tampered.json()["error"] == "bad_signature"
    async with engine_of(sqlite_url) as engine, engine.connect() as conn:
        stored = (await conn.execute(sa.select(EVENTS.c.dedupe_key))).scalars().all()
    assert stored == ["msg_svix_0001"]


# --- Svix's own published vectors, through the receiver --------------------------------
#
# Svix publishes no single table of vectors: each SDK's webhook test file carries its own.
# These are every fixed value in them (svix/svix-webhooks at commit 4fc0cfb8b426):
#   python/tests/test_webhooks.py, go/webhook_test.go, javascript/src/webhook.test.ts,
#   java/lib/src/test/com/svix/test/WebhookTest.java, csharp/Svix.Tests/WebhookTest.cs,
#   ruby/spec/webhook_spec.rb, php/tests/WebhookTest.php, rust/src/webhooks.rs, and
#   server/svix-server/src/worker.rs (test_asymmetric_key_signing, the one v1a vector).
# Where an SDK test builds its request at "now", the vector takes its fixed message and
# the app's clock stands where the test's clock did; Svix's tolerance is 5 minutes, as
# hookd's default. Each vector runs under svix-* and under webhook-* header names (the
# SDKs test both: "valid unbranded signature is valid").

# The message every SDK signs ("sign function works" / test_sign_function).
SVIX_SECRET = "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
SVIX_ID = "msg_p5jXN8AQM9LWM0D4loKWxJek"
SVIX_TS = 1614265330
SVIX_BODY = '{"test": 2432232314}'
SVIX_SIG = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
# rust/src/webhooks.rs test_sign.
RUST_SECRET = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD"
RUST_ID = "msg_27UH4WbU6Z5A5EzD8u03UvzRbpk"
RUST_TS = 1649367553
RUST_BODY = '{"email":"test@example.com","username":"test_user"}'
RUST_SIG = "v1,tZ1I4/hDygAJgO5TYxiSd6Sd0kDW6hPenDe+bTa3Kkw="
# server/svix-server/src/worker.rs test_asymmetric_key_signing: the ed25519 key as Svix
# writes it (seed then public key) and the v1a signature it gives over the message above.
SVIX_ED25519_KEY = (
    "6Xb/dCcHpPea21PS1N9VY/NZW723CEc77N4rJCubMbfVKIDij2HKpMKkioLlX0dRqSKJp4AJ6p9lMicMFs6Kvg=="
)
SVIX_WHPK = "whpk_1SiA4o9hyqTCpIqC5V9HUakiiaeACeqfZTInDBbOir4="
SVIX_V1A_SIG = (
    "v1a,hnO3f9T8Ytu9HwrXslvumlUpqtNVqkhqw/enGzPCXe5BdqzCInXqYXFymVJaA7AZdpXwVLPo3mNl8EM+m7TBAg=="
)
WRONG_V1 = "v1,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc="
RUST_WRONG = (
    "v1,tFtCZ5RDCPxzWQRWXWPgrCgE2frDBe9gjpbWQxnVfsQ=",
    "v1,Mm7xgUVICxZfQ3bgf0h0Dof65L/IFx+PnZvnDWPCX6Q=",
    "v1,9DfC1c3eeOrXB6w/5dIDydLNQaEyww5KalE5jLBZucE=",
)
TOLERANCE = 300
ACCEPTED = "accepted"


@dataclass(frozen=True)
class SvixVector:
    name: str
    secret: str  # as the SDK test writes it (bare base64 or whsec_; whpk_ for v1a)
    msg_id: str
    timestamp: int  # the signed timestamp; the app's clock is timestamp + skew
    payload: str
    signature: str
    expect: str  # ACCEPTED, "malformed_payload", or the SignatureError reason
    sent_timestamp: str | None = None  # the header as sent, when not `timestamp`
    omit: str | None = None  # "id", "timestamp" or "signature": that header left out
    skew: float = 0.5


def _svix(name: str, expect: str = ACCEPTED, **changes: Any) -> SvixVector:
    fields: dict[str, Any] = {
        "secret": SVIX_SECRET,
        "msg_id": SVIX_ID,
        "timestamp": SVIX_TS,
        "payload": SVIX_BODY,
        "signature": SVIX_SIG,
    }
    return SvixVector(name=name, expect=expect, **{**fields, **changes})


def _rust(name: str, expect: str = ACCEPTED, **changes: Any) -> SvixVector:
    fields: dict[str, Any] = {
        "secret": RUST_SECRET,
        "msg_id": RUST_ID,
        "timestamp": RUST_TS,
        "payload": RUST_BODY,
        "signature": RUST_SIG,
    }
    return SvixVector(name=name, expect=expect, **{**fields, **changes})


SVIX_VECTORS = (
    # Valid: every SDK's sign test, and the lists they accept.
    _svix("sign-function"),
    _rust("rust-sign"),
    _svix(
        "multi-sig",
        signature=" ".join(
            (WRONG_V1, "v2,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc=", SVIX_SIG, WRONG_V1)
        ),
    ),
    _rust("rust-multi-sig", signature=" ".join((*RUST_WRONG[:2], RUST_SIG, RUST_WRONG[2]))),
    _svix("server-v1a", secret=SVIX_WHPK, signature=SVIX_V1A_SIG),
    # csharp VerifyWebhookSignWithLargePayloadWorks: authentic, but not a JSON object.
    _svix(
        "large-1mib",
        "malformed_payload",
        payload="a" * (1024 * 1024),
        signature="v1,txpEUxqWZJ5nteTnymUVa+7C4NHpBeXJ6CsBAW0c3/A=",
    ),
    _svix(
        "large-256kib",
        "malformed_payload",
        payload="a" * (256 * 1024),
        signature="v1,Mw4Pe2WgApuT7NSqnSq0PQPV9gbLdggCl9B865x5Xh0=",
    ),
    _svix(
        "large-256kib-minus-1",
        "malformed_payload",
        payload="a" * (256 * 1024 - 1),
        signature="v1,NTItnqyWMoFhk2Bbe5V/BMdcFRWgcSQaTgqLHX7FC7c=",
    ),
    # Invalid signatures.
    _svix(
        "python-invalid",
        "bad_signature",
        signature="v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OA=",
    ),
    _svix(
        "csharp-ruby-invalid",
        "malformed_signature",
        signature="v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLawdd",
    ),
    _svix("wrong-v1", "bad_signature", signature=WRONG_V1),
    _svix("partial-empty", "malformed_signature", signature="v1,"),
    # The JS and Rust tests cut the valid header to its first 8 characters.
    _svix("partial-8-chars", "malformed_signature", signature="v1,g0hM9"),
    _svix("js-invalid", "malformed_signature", signature="v1,dawfeoifkpqwoekfpqoekf"),
    _svix("java-invalid", "malformed_signature", signature="v1,invalid_signature"),
    _svix(
        "only-v2",
        "missing_signature",
        signature="v2,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=",
    ),
    # Java's and Kotlin's mismatch tests put their value in svix-id, not svix-signature.
    _svix("java-id-overwritten", "bad_signature", msg_id="v1,invalid_signature"),
    _rust(
        "rust-no-verify",
        "bad_signature",
        signature="v1,R3PTzyfHASBKHH98a7yexTwaJ4yNIcGhFQc1yuN+BPU=",
    ),
    _rust("rust-no-verify-multi", "bad_signature", signature=" ".join(RUST_WRONG)),
    # Missing headers.
    _svix("missing-id", "missing_header", omit="id"),
    _svix("missing-timestamp", "missing_header", omit="timestamp"),
    _svix("missing-signature", "missing_header", omit="signature"),
    # Timestamps.
    _svix("timestamp-hello", "malformed_timestamp", sent_timestamp="hello"),
    _svix("timestamp-old", "timestamp_too_old", skew=TOLERANCE + 1.0),
    _svix("timestamp-new", "timestamp_in_future", skew=-(TOLERANCE + 1.0)),
    _rust("rust-timestamp-mismatch", "bad_signature", sent_timestamp=str(RUST_TS + 1)),
    _rust("rust-negative-timestamp", "malformed_timestamp", sent_timestamp="-1"),
    _svix("php-float-timestamp", "malformed_timestamp", sent_timestamp="161426533.0"),
)
VALID = frozenset({ACCEPTED, "malformed_payload"})
PREFIXES = ("svix", "webhook")


def configured(secret: str) -> str:
    """The SDK tests give the bare base64 as often as whsec_; a source takes whsec_."""
    return secret if secret.startswith(("whsec_", "whpk_")) else "whsec_" + secret


def vector_headers(vector: SvixVector, prefix: str) -> dict[str, str]:
    values = {
        "id": vector.msg_id,
        "timestamp": vector.sent_timestamp or str(vector.timestamp),
        "signature": vector.signature,
    }
    headers = {f"{prefix}-{name}": value for name, value in values.items() if name != vector.omit}
    headers["content-type"] = "application/json"
    return headers


def test_svix_vector_table_is_what_svix_publishes() -> None:
    """The table as Svix's tests state it: 8 signed as Svix signs, 20 refused."""
    assert len(SVIX_VECTORS) == 28
    assert len({vector.name for vector in SVIX_VECTORS}) == len(SVIX_VECTORS)
    assert sum(vector.expect in VALID for vector in SVIX_VECTORS) == 8
    # The whpk_ key is the public half of Svix's published ed25519 key.
    raw = base64.b64decode(SVIX_ED25519_KEY)
    public = Ed25519PrivateKey.from_private_bytes(raw[:32]).public_key()
    assert raw[32:] == public.public_bytes(Encoding.Raw, PublicFormat.Raw)
    assert "whpk_" + base64.b64encode(raw[32:]).decode() == SVIX_WHPK


@pytest.mark.parametrize(
    "vector",
    [v for v in SVIX_VECTORS if v.expect in VALID and not v.secret.startswith("whpk_")],
    ids=lambda v: v.name,
)
def test_svix_library_signs_each_valid_v1_vector(vector: SvixVector) -> None:
    """The other side: Svix's Python library gives the vector's signature."""
    signature = SvixWebhook(vector.secret).sign(
        vector.msg_id, datetime.fromtimestamp(vector.timestamp, UTC), vector.payload
    )
    assert signature in vector.signature.split()


async def stored_events(url: str) -> list[tuple[str, str]]:
    async with engine_of(url) as engine, engine.connect() as conn:
        query = sa.select(EVENTS.c.dedupe_key, EVENTS.c.verified_with)
        rows = (await conn.execute(query)).all()
    return [(key, verified) for key, verified in rows]


def one_source(tmp_path: Path, secret: str) -> Sources:
    path = tmp_path / "hookd.toml"
    path.write_text(f'[[sources]]\nname = "svix"\nprovider = "standard"\nsecrets = ["{secret}"]\n')
    return parse_sources(path.read_text(), path, env={})


@pytest.mark.anyio
@pytest.mark.parametrize("prefix", PREFIXES)
@pytest.mark.parametrize("vector", SVIX_VECTORS, ids=lambda v: v.name)
async def test_svix_vector_through_the_receiver(
    vector: SvixVector, prefix: str, tmp_path: Path, sqlite_url: str
) -> None:
    """Each vector as Svix sends it, and renamed webhook-*: a valid one is 202, then 200
    duplicate, one row; an authentic non-JSON body is 400; an invalid one is 401 with its
    reason; neither stores anything."""
    sources = one_source(tmp_path, configured(vector.secret))
    body = vector.payload.encode()
    headers = vector_headers(vector, prefix)
    clock = vector.timestamp + vector.skew
    async with running_app(sources, sqlite_url, clock=lambda: clock) as (_, client):
        first = await client.post("/hooks/svix", content=body, headers=headers)
        again = await client.post("/hooks/svix", content=body, headers=headers)
    stored = await stored_events(sqlite_url)
    if vector.expect == ACCEPTED:
        assert (first.status_code, first.json()["status"]) == (202, "accepted"), first.text
        assert (again.status_code, again.json()["status"]) == (200, "duplicate"), again.text
        scheme = "standard-v1a" if vector.signature.startswith("v1a,") else "standard-v1"
        assert stored == [(vector.msg_id, f"{scheme};key=0;t={vector.timestamp}")]
        return
    status = 400 if vector.expect == "malformed_payload" else 401
    assert (first.status_code, first.json()["error"]) == (status, vector.expect), first.text
    assert (again.status_code, again.json()["error"]) == (status, vector.expect)
    assert stored == []


# --- v1a (ed25519) under Svix's header names ------------------------------------------

V1A_SEED = bytes(range(32))


@pytest.mark.anyio
async def test_v1a_signature_under_svix_headers_is_202_then_duplicate_200(
    tmp_path: Path, sqlite_url: str
) -> None:
    """Signed with cryptography's ed25519 over "{id}.{ts}.{body}", sent as Svix sends it,
    verified with the whpk_ public key."""
    private = Ed25519PrivateKey.from_private_bytes(V1A_SEED)
    public = private.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    sources = one_source(tmp_path, "whpk_" + base64.b64encode(public).decode())
    body = json.dumps({"type": "invoice.paid", "data": {"invoice": 8}}).encode()
    msg_id = "msg_svix_v1a_0001"
    signature = private.sign(f"{msg_id}.{NOW}.".encode() + body)
    headers = {
        "svix-id": msg_id,
        "svix-timestamp": str(NOW),
        "svix-signature": "v1a," + base64.b64encode(signature).decode(),
        "content-type": "application/json",
    }
    async with running_app(sources, sqlite_url, clock=lambda: NOW + 0.5) as (_, client):
        first = await client.post("/hooks/svix", content=body, headers=headers)
        again = await client.post("/hooks/svix", content=body, headers=headers)
        tampered = await client.post("/hooks/svix", content=body + b" ", headers=headers)
    assert (first.status_code, first.json()["status"]) == (202, "accepted"), first.text
    assert (again.status_code, again.json()["status"]) == (200, "duplicate"), again.text
    assert (tampered.status_code, tampered.json()["error"]) == (401, "bad_signature")
    assert await stored_events(sqlite_url) == [(msg_id, f"standard-v1a;key=0;t={NOW}")]
