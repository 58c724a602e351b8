"""Asana through hookd: deliveries signed as Asana's webhook guide documents
(``X-Hook-Signature``: hex HMAC-SHA256 of the body, keyed with the secret of the
handshake, whose example secret is used here), the handshake's token check and answer,
and the dedupe key and type of a batch."""

from __future__ import annotations

import hashlib
import hmac
import json

import pytest

from hookd.errors import HandshakeRefused, PayloadError, SignatureError
from hookd.providers import PROVIDERS
from hookd.providers.base import HmacKey

ASANA = PROVIDERS["asana"]
LEARNS = ASANA.learns_secret
# The X-Hook-Secret of Asana's "Establish a webhook" example.
HOOK_SECRET = "b537207f20cbfa02357cf448134da559e8bd39d61597dcd5631b8012eae53e81"
TOKENS = ["handshake-token-0123456789", "handshake-token-abcdefghij"]
TOKEN_KEYS = [ASANA.parse_secret(t) for t in TOKENS]


def event(
    resource_type: str = "task", action: str = "changed", gid: str = "1337"
) -> dict[str, object]:
    return {
        "user": {"gid": "1516", "resource_type": "user"},
        "created_at": "2012-02-22T02:06:58.147Z",
        "action": action,
        "resource": {"gid": gid, "resource_type": resource_type},
        "parent": None,
    }


def body_of(*events: dict[str, object]) -> bytes:
    return json.dumps({"events": list(events)}).encode()


def signed(body: bytes, secret: str = HOOK_SECRET) -> dict[str, list[str]]:
    mac = hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    return {"x-hook-signature": [mac], "content-type": ["application/json"]}


def learned_keys() -> list[HmacKey]:
    assert LEARNS is not None
    key = LEARNS.parse(HOOK_SECRET)
    assert isinstance(key, HmacKey)
    return [key]


def test_a_delivery_verifies_with_the_learned_secret_only() -> None:
    body = body_of(event())
    verified = ASANA.verify_request(signed(body), body, learned_keys(), 0, 300)
    env = ASANA.envelope(signed(body), body, verified)
    assert (env.dedupe_key, env.type) == (
        "sha256:" + hashlib.sha256(body).hexdigest(),
        "task.changed",
    )
    assert env.occurred_at is not None and env.occurred_at.year == 2012
    for headers, sent in ((signed(body), body + b" "), (signed(body, TOKENS[0]), body)):
        with pytest.raises(SignatureError):
            ASANA.verify_request(headers, sent, learned_keys(), 0, 300)


def test_a_batch_is_typed_by_what_its_events_share() -> None:
    keys = learned_keys()
    for events, kind in (
        ((event(), event(gid="2")), "task.changed"),
        ((event(), event(action="added")), "task"),
        ((event(), event("story", "added")), "events"),
    ):
        body = body_of(*events)
        verified = ASANA.verify_request(signed(body), body, keys, 0, 300)
        assert ASANA.envelope(signed(body), body, verified).type == kind


def test_a_heartbeat_is_answered_and_not_stored() -> None:
    body = body_of()
    verified = ASANA.verify_request(signed(body), body, learned_keys(), 0, 300)
    env = ASANA.envelope(signed(body), body, verified)
    assert env.reply is not None and env.dedupe_key == ""


def test_the_handshake_needs_a_configured_token() -> None:
    assert LEARNS is not None
    assert LEARNS.header == "x-hook-secret"
    assert LEARNS.opened_by({"token": [TOKENS[1]]}, TOKEN_KEYS) == 1
    assert LEARNS.opened_by({"token": [TOKENS[0]], "other": ["x"]}, TOKEN_KEYS) == 0
    for query in ({}, {"token": ["guess"]}, {"token": [TOKENS[0], TOKENS[1]]}):
        with pytest.raises(HandshakeRefused):
            LEARNS.opened_by(query, TOKEN_KEYS)


def test_the_handshake_answer_echoes_the_secret() -> None:
    assert LEARNS is not None
    reply = LEARNS.answer(HOOK_SECRET)
    assert reply.status == 200
    assert ("x-hook-secret", HOOK_SECRET) in reply.headers
    for junk in ("", "has space", "x" * 300, "é"):
        with pytest.raises(PayloadError):
            LEARNS.parse(junk)


def test_a_token_is_long_enough() -> None:
    with pytest.raises(ValueError, match="at least 16"):
        ASANA.parse_secret("short")
