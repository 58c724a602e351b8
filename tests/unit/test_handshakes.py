"""Registration handshakes of ``hmac`` and ``token`` sources (``[sources.verify]
handshake``): Dropbox's challenge, X's CRC, Microsoft Graph's validationToken.

Expected answers are computed here from each sender's documentation (the ``hmac`` and
``base64`` modules for X's ``response_token``), never with hookd's own code; the echoed
token is bounded, and anything else is ``malformed_payload``.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from pathlib import Path

import pytest

from hookd.errors import ConfigError, PayloadError
from hookd.providers.base import Provider, Reply
from hookd.sources import Source, parse_sources

P = Path("hookd.toml")
SECRET = "consumer-secret"
OLD = "old-consumer-secret"
HMAC_VERIFY = 'header = "X-Signature"\nprefix = "sha256="\ndedupe = "body_sha256"\n'
TOKEN_VERIFY = 'header = "X-Token"\ndedupe = "body_sha256"\n'

# X's CRC example (the consumer secret and crc_token of its "Securing webhooks" samples).
X_CONSUMER_SECRET = "z3ZX4v7mAAUGykl3EcmkqbartmuW8VFOOzCloLx9Q45P0hLrFu"
X_CRC_TOKEN = "9b4507b3-9040-4669-9ca3-6b94edb50553"
# The form Microsoft Graph's validation tokens take (URL-decoded): opaque text with spaces.
GRAPH_TOKEN = (
    "Validation: Testing client application reachability for subscription "
    "Request-Id: 1a2b3c4d-0000-4000-8000-0123456789ab"
)


def source(provider: str, handshake: str | None, secrets: tuple[str, ...] = (SECRET,)) -> Source:
    listed = ", ".join(f'"{secret}"' for secret in secrets)
    text = f'[[sources]]\nname = "h"\nprovider = "{provider}"\nsecrets = [{listed}]\n'
    text += "[sources.verify]\n" + (HMAC_VERIFY if provider == "hmac" else TOKEN_VERIFY)
    if handshake is not None:
        text += f'handshake = "{handshake}"\n'
    found = parse_sources(text, P, {}).get("h")
    assert found is not None
    return found


def answer(src: Source, method: str, query: dict[str, list[str]]) -> Reply | None:
    adapter: Provider = src.adapter
    assert adapter.challenge is not None
    return adapter.challenge(method, query, src.keys)


def refused(src: Source, method: str, query: dict[str, list[str]]) -> str:
    with pytest.raises(PayloadError) as info:
        answer(src, method, query)
    return info.value.reason


def config_error(provider: str, handshake: str) -> str:
    text = f'[[sources]]\nname = "h"\nprovider = "{provider}"\nsecrets = ["s"]\n'
    text += "[sources.verify]\n" + (HMAC_VERIFY if provider == "hmac" else TOKEN_VERIFY)
    text += f'handshake = "{handshake}"\n'
    with pytest.raises(ConfigError) as info:
        parse_sources(text, P, {})
    message = str(info.value)
    assert "\n" not in message
    return message


# --- configuration ----------------------------------------------------------------------


@pytest.mark.parametrize("provider", ["hmac", "token"])
def test_no_handshake_means_no_challenge(provider: str) -> None:
    assert source(provider, None).adapter.challenge is None


@pytest.mark.parametrize(
    ("provider", "handshake"),
    [
        ("hmac", "dropbox"),
        ("hmac", "x_crc"),
        ("hmac", "graph"),
        ("token", "dropbox"),
        ("token", "graph"),
    ],
)
def test_handshakes_are_accepted(provider: str, handshake: str) -> None:
    assert source(provider, handshake).adapter.challenge is not None


def test_unknown_handshake_is_a_one_line_error() -> None:
    assert config_error("hmac", "slack") == (
        "hookd.toml: source 'h': key 'verify.handshake': "
        "must be 'dropbox', 'x_crc' or 'graph', not 'slack'"
    )


def test_x_crc_needs_an_hmac_source() -> None:
    assert config_error("token", "x_crc") == (
        "hookd.toml: source 'h': key 'verify.handshake': x_crc answers with an "
        'HMAC keyed with the consumer secret: use provider = "hmac"'
    )


# --- Dropbox ----------------------------------------------------------------------------


@pytest.mark.parametrize("provider", ["hmac", "token"])
def test_dropbox_challenge_is_echoed_as_plain_text(provider: str) -> None:
    reply = answer(source(provider, "dropbox"), "GET", {"challenge": ["abc123"]})
    assert reply is not None
    assert (reply.status, reply.body) == (200, b"abc123")
    assert reply.content_type.split(";")[0] == "text/plain"
    assert ("x-content-type-options", "nosniff") in reply.headers


def test_dropbox_answers_only_its_get() -> None:
    src = source("hmac", "dropbox")
    assert answer(src, "POST", {"challenge": ["abc123"]}) is None
    assert answer(src, "GET", {}) is None
    assert answer(src, "GET", {"crc_token": ["abc"]}) is None


# --- X ----------------------------------------------------------------------------------


def test_x_crc_response_token_matches_the_documented_computation() -> None:
    src = source("hmac", "x_crc", (X_CONSUMER_SECRET,))
    reply = answer(src, "GET", {"crc_token": [X_CRC_TOKEN]})
    mac = hmac.new(X_CONSUMER_SECRET.encode(), X_CRC_TOKEN.encode(), hashlib.sha256).digest()
    assert reply is not None
    assert (reply.status, reply.content_type) == (200, "application/json")
    assert json.loads(reply.body) == {"response_token": "sha256=" + base64.b64encode(mac).decode()}


def test_x_crc_answers_with_the_first_secret() -> None:
    """During a rotation the first secret is the current consumer secret."""
    reply = answer(source("hmac", "x_crc", (SECRET, OLD)), "GET", {"crc_token": ["t"]})
    mac = hmac.new(SECRET.encode(), b"t", hashlib.sha256).digest()
    assert reply is not None
    assert json.loads(reply.body)["response_token"] == "sha256=" + base64.b64encode(mac).decode()


def test_x_crc_answers_only_its_get() -> None:
    src = source("hmac", "x_crc")
    assert answer(src, "POST", {"crc_token": ["t"]}) is None
    assert answer(src, "GET", {"challenge": ["t"]}) is None


# --- Microsoft Graph --------------------------------------------------------------------


@pytest.mark.parametrize("provider", ["hmac", "token"])
def test_graph_validation_token_is_echoed_decoded(provider: str) -> None:
    reply = answer(source(provider, "graph"), "POST", {"validationToken": [GRAPH_TOKEN]})
    assert reply is not None
    assert (reply.status, reply.body) == (200, GRAPH_TOKEN.encode())
    assert reply.content_type.split(";")[0] == "text/plain"


def test_graph_answers_only_its_post() -> None:
    src = source("hmac", "graph")
    assert answer(src, "GET", {"validationToken": ["t"]}) is None
    assert answer(src, "POST", {}) is None


# --- what is never echoed ---------------------------------------------------------------

JUNK = {
    "doubled": ["a", "b"],
    "empty": [""],
    "too-long": ["x" * 513],
    "markup": ["<script>alert(1)</script>"],
    "ampersand": ["a&b"],
    "quote": ['a"b'],
    "apostrophe": ["a'b"],
    "backquote": ["a`b"],
    "backslash": ["a\\b"],
    "non-ascii": ["caf\u00e9"],
    "control": ["a\x00b"],
    "newline": ["a\r\nSet-Cookie: x=1"],
    "edge-space": [" abc"],
}


@pytest.mark.parametrize(
    ("handshake", "method", "name"),
    [
        ("dropbox", "GET", "challenge"),
        ("x_crc", "GET", "crc_token"),
        ("graph", "POST", "validationToken"),
    ],
)
@pytest.mark.parametrize("junk", list(JUNK), ids=list(JUNK))
def test_junk_tokens_are_malformed_payload(
    handshake: str, method: str, name: str, junk: str
) -> None:
    assert refused(source("hmac", handshake), method, {name: JUNK[junk]}) == "malformed_payload"


@pytest.mark.parametrize(
    ("handshake", "method", "name"),
    [("dropbox", "GET", "challenge"), ("x_crc", "GET", "crc_token")],
)
def test_spaces_only_in_graph_tokens(handshake: str, method: str, name: str) -> None:
    assert refused(source("hmac", handshake), method, {name: ["a b"]}) == "malformed_payload"


def test_longest_token_is_echoed() -> None:
    token = "A" * 512
    reply = answer(source("hmac", "dropbox"), "GET", {"challenge": [token]})
    assert reply is not None
    assert reply.body == token.encode()
