"""HTTP Basic (``provider = "basic"``): several ``user:password`` credentials, each
part compared in constant time, the dedupe key where the source's settings say, and
the ``WWW-Authenticate`` header a 401 carries (RFC 7617)."""

from __future__ import annotations

import base64
import hashlib
import json

import pytest

from hookd.errors import SignatureError
from hookd.providers.basic import CONFIGURABLE, BasicSettings

BASIC = CONFIGURABLE.bind(BasicSettings(dedupe="json:id", type_json="type"))
CREDENTIALS = ["sender:pa:ss-word", "backup:other-password"]
KEYS = [BASIC.parse_secret(c) for c in CREDENTIALS]
BODY = json.dumps({"id": "evt_1", "type": "order.paid"}).encode()


def auth(credential: str) -> dict[str, list[str]]:
    encoded = base64.b64encode(credential.encode()).decode()
    return {"authorization": [f"Basic {encoded}"], "content-type": ["application/json"]}


def refused(headers: dict[str, list[str]]) -> str:
    with pytest.raises(SignatureError) as info:
        BASIC.verify_request(headers, BODY, KEYS, 0, 300)
    return info.value.reason


def test_each_credential_verifies_and_the_envelope_follows_the_settings() -> None:
    for index, credential in enumerate(CREDENTIALS):
        verified = BASIC.verify_request(auth(credential), BODY, KEYS, 0, 300)
        assert (verified.scheme, verified.key_index) == ("basic", index)
    env = BASIC.envelope(auth(CREDENTIALS[0]), BODY, verified)
    assert (env.dedupe_key, env.type) == ("evt_1", "order.paid")
    assert "authorization" not in env.headers
    assert BASIC.unauthorized_headers == (("www-authenticate", 'Basic realm="hookd"'),)


def test_user_and_password_must_both_match_the_same_credential() -> None:
    assert refused(auth("sender:other-password")) == "bad_signature"
    assert refused(auth("backup:pa:ss-word")) == "bad_signature"
    assert refused(auth("sender:pa:ss-wor")) == "bad_signature"
    assert refused(auth("Sender:pa:ss-word")) == "bad_signature"


def test_missing_or_malformed_credentials_are_refused() -> None:
    assert refused({}) == "missing_header"
    assert refused({"authorization": ["Bearer abc"]}) == "malformed_signature"
    assert refused({"authorization": ["Basic !!!"]}) == "malformed_signature"
    no_colon = base64.b64encode(b"sender").decode()
    assert refused({"authorization": [f"Basic {no_colon}"]}) == "malformed_signature"


def test_a_credential_must_be_user_colon_password() -> None:
    for bad in ("nocolon", ":password", "user:"):
        with pytest.raises(ValueError, match="user:password"):
            BASIC.parse_secret(bad)


def test_body_hash_dedupe() -> None:
    hashed = CONFIGURABLE.bind(BasicSettings(dedupe="body_sha256"))
    verified = hashed.verify_request(auth(CREDENTIALS[1]), BODY, KEYS, 0, 300)
    env = hashed.envelope(auth(CREDENTIALS[1]), BODY, verified)
    assert env.dedupe_key == "sha256:" + hashlib.sha256(BODY).hexdigest()


def test_no_handshake_for_basic() -> None:
    with pytest.raises(ValueError, match="no handshake"):
        BasicSettings(dedupe="body_sha256", handshake="dropbox")
