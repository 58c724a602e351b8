"""Standard Webhooks under Svix's header names (``svix-id``, ``svix-timestamp``,
``svix-signature``), which Svix sends by default.

Either set verifies the same signature and gives the same dedupe key; a request carrying
both verifies when they agree and is ``conflicting_headers`` when any of the three differ.
The other side is Svix's own Python library signing, through the real receiver.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
import sqlalchemy as sa
from svix.webhooks import Webhook as SvixWebhook

from hookd.errors import SignatureError
from hookd.sources import parse_sources
from store import db
from store.models import EVENTS
from tests.support.asgi import running_app
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
    engine = db.create_engine(sqlite_url)
    try:
        async with engine.connect() as conn:
            stored = (await conn.execute(sa.select(EVENTS.c.dedupe_key))).scalars().all()
    finally:
        await engine.dispose()
    assert stored == ["msg_svix_0001"]
