"""Meta (WhatsApp Cloud API, Messenger, Instagram) through hookd's verifier, signed
here as Meta documents (``X-Hub-Signature-256: sha256=`` hex HMAC-SHA256 of the raw
body, keyed with the app secret), and its verification request, with the example of
Meta's "Getting started" guide (``hub.challenge=1158201444``,
``hub.verify_token=meatyhamhock``)."""

from __future__ import annotations

import hashlib
import hmac
import json

import pytest

from hookd.errors import HandshakeRefused, PayloadError, SignatureError
from hookd.providers.meta import CONFIGURABLE, MetaSettings

SECRET = "0a1b2c3d4e5f60718293a4b5c6d7e8f9"
META = CONFIGURABLE.bind(MetaSettings(verify_token="meatyhamhock"))
KEYS = [META.parse_secret(SECRET)]
QUERY = {
    "hub.mode": ["subscribe"],
    "hub.challenge": ["1158201444"],
    "hub.verify_token": ["meatyhamhock"],
}


def change(field: str, n: int = 0) -> dict[str, object]:
    return {"field": field, "value": {"messaging_product": "whatsapp", "n": n}}


def body_of(*changes: dict[str, object], kind: str = "whatsapp_business_account") -> bytes:
    entry = {"id": "102290129340398", "time": 1_700_000_000, "changes": list(changes)}
    return json.dumps({"object": kind, "entry": [entry]}).encode()


def signed(body: bytes, secret: str = SECRET) -> dict[str, list[str]]:
    digest = hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    return {"x-hub-signature-256": [f"sha256={digest}"], "content-type": ["application/json"]}


def test_verification_request_is_answered_only_with_the_right_token() -> None:
    assert META.challenge is not None
    reply = META.challenge("GET", QUERY, KEYS)
    assert reply is not None
    assert (reply.status, reply.body) == (200, b"1158201444")
    assert reply.content_type.startswith("text/plain")
    for token in ("meatyhamhocK", "", "meatyhamhock "):
        with pytest.raises(HandshakeRefused):
            META.challenge("GET", {**QUERY, "hub.verify_token": [token]}, KEYS)
    with pytest.raises(HandshakeRefused):
        META.challenge("GET", {"hub.mode": ["subscribe"], "hub.challenge": ["1"]}, KEYS)
    with pytest.raises(PayloadError):
        META.challenge("GET", {**QUERY, "hub.mode": ["unsubscribe"]}, KEYS)
    with pytest.raises(PayloadError):
        META.challenge("GET", {**QUERY, "hub.challenge": ["<b>1</b>"]}, KEYS)
    # Not a verification request: a GET without hub.mode, or any POST.
    assert META.challenge("GET", {}, KEYS) is None
    assert META.challenge("POST", QUERY, KEYS) is None


def test_a_notification_verifies_and_is_keyed_by_its_body() -> None:
    body = body_of(change("messages"))
    headers = signed(body)
    verified = META.verify_request(headers, body, KEYS, 0, 300)
    env = META.envelope(headers, body, verified)
    assert env.dedupe_key == "sha256:" + hashlib.sha256(body).hexdigest()
    assert env.type == "whatsapp_business_account/messages"
    assert env.occurred_at is not None and env.occurred_at.timestamp() == 1_700_000_000


def test_a_batch_type_is_its_shared_field_or_the_object() -> None:
    shared = body_of(change("messages", 1), change("messages", 2))
    mixed = body_of(change("messages"), change("message_template_status_update"))
    messenger = json.dumps(
        {"object": "page", "entry": [{"id": "1", "time": 1, "messaging": [{"x": 1}]}]}
    ).encode()
    for body, kind in (
        (shared, "whatsapp_business_account/messages"),
        (mixed, "whatsapp_business_account"),
        (messenger, "page/messaging"),
    ):
        verified = META.verify_request(signed(body), body, KEYS, 0, 300)
        assert META.envelope(signed(body), body, verified).type == kind


def test_tampered_and_wrong_secret_are_refused() -> None:
    body = body_of(change("messages"))
    for headers, sent in ((signed(body), body + b" "), (signed(body, "f" * 32), body)):
        with pytest.raises(SignatureError) as info:
            META.verify_request(headers, sent, KEYS, 0, 300)
        assert info.value.reason == "bad_signature"
    sha1 = {"x-hub-signature": ["sha1=" + hashlib.sha1(body).hexdigest()]}
    with pytest.raises(SignatureError):
        META.verify_request(sha1, body, KEYS, 0, 300)


def test_the_verify_token_setting_is_required_and_printable() -> None:
    assert MetaSettings(verify_token=" ").incomplete() == (
        "verify_token",
        "must be the printable verify token set in the app dashboard",
    )
    assert MetaSettings(verify_token="meatyhamhock").incomplete() is None
