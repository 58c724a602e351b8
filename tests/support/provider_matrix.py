"""Every registered provider, ready to sign and verify: the secrets each scheme takes,
the URL the URL-signing ones are bound to, and settings for the configurable ones.

The registry-wide property tests (``tests/unit/test_provider_properties.py``) and the
``registry`` fuzz target in ``chaos/fuzz_webhooks.py`` walk ``PROVIDERS`` through this table,
so a provider registered without an entry here fails a test instead of going unchecked.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from hypothesis import strategies as st

from hookd.providers import PROVIDERS
from hookd.providers.base import Key, Provider
from hookd.providers.custom_hmac import HmacSettings
from hookd.providers.pubsub import SAMPLE_EMAIL, SAMPLE_KID
from hookd.providers.shared_token import TokenSettings
from hookd.providers.sns import SAMPLE_TOPIC
from tests.support.published_keys import certificate_pem, jwks, private_pem

NOW = 1_700_000_000
TOLERANCE_S = 300
PUBLIC_URL = "https://hooks.example.com/hooks/matrix?tenant=1"
PLAIN = "matrix-secret-0123456789"
OTHER_PLAIN = "matrix-other-9876543210"

# Providers whose signature leaves (part of) the body uncovered, by their design: a
# token proves only the sender (token, gitlab); Mailgun signs a timestamp and a token
# that travel inside the body, not the rest of it.
# SNS signs named fields of its message, not the bytes: SigningCertURL, UnsubscribeURL
# and the JSON's spacing are outside. Pub/Sub's token proves the sender, not the body.
BODY_UNSIGNED = frozenset({"token", "gitlab", "mailgun", "okta", "basic", "sns", "pubsub"})
# Twilio signs the decoded form parameters, not the bytes: ``%2f`` and ``%2F`` are one
# parameter, so a body can change without its signature changing.
SIGNS_DECODED_FORM = frozenset({"twilio"})


def _whsec(raw: bytes) -> str:
    return "whsec_" + base64.b64encode(raw).decode()


def _p256_pair(secret: int) -> tuple[str, str]:
    """(base64 PKCS#8 private key, base64 DER public key as SendGrid shows it)."""
    private = ec.derive_private_key(secret, ec.SECP256R1())
    der = private.private_bytes(
        serialization.Encoding.DER,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    public = private.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return base64.b64encode(der).decode(), base64.b64encode(public).decode()


def _ed25519_pair(seed: bytes) -> tuple[str, str]:
    """(hex seed, hex public key): how Discord shows an application's key."""
    public = Ed25519PrivateKey.from_private_bytes(seed).public_key().public_bytes_raw()
    return seed.hex(), public.hex()


@dataclass(frozen=True)
class Pair:
    """What signs a sample and what the source is configured with (equal for HMAC)."""

    signing: str
    configured: str
    # For a provider whose keys are fetched (``Provider.key_fetch``): what its key URL
    # serves, which verifies the signature, the configured secret being an identity.
    fetched: bytes = b""


PAIRS: dict[str, tuple[Pair, Pair]] = {
    # provider: (the pair that verifies, another sender's pair)
    "stripe": (Pair("whsec_matrix", "whsec_matrix"), Pair("whsec_other", "whsec_other")),
    "standard": (
        Pair(_whsec(b"m" * 32), _whsec(b"m" * 32)),
        Pair(_whsec(b"o" * 32), _whsec(b"o" * 32)),
    ),
    "paddle": (
        Pair("pdl_ntfset_01matrix_matrixkey", "pdl_ntfset_01matrix_matrixkey"),
        Pair("pdl_ntfset_01other_otherkey", "pdl_ntfset_01other_otherkey"),
    ),
    "sendgrid": (Pair(*_p256_pair(0x5EED)), Pair(*_p256_pair(0xBEEF))),
    "discord": (Pair(*_ed25519_pair(bytes(range(32)))), Pair(*_ed25519_pair(b"\x07" * 32))),
    # HTTP Basic: a credential is user:password.
    "basic": (
        Pair("matrix:" + PLAIN, "matrix:" + PLAIN),
        Pair("matrix:" + OTHER_PLAIN, "matrix:" + OTHER_PLAIN),
    ),
    # Another sender: the same topic, signed by a certificate that is not SNS's.
    "sns": (
        Pair(private_pem("sns"), SAMPLE_TOPIC, certificate_pem("sns")),
        Pair(private_pem("sns-other"), SAMPLE_TOPIC, certificate_pem("sns-other")),
    ),
    # Another sender: the same account, a key Google's JWKS does not hold.
    "pubsub": (
        Pair(private_pem("pubsub"), SAMPLE_EMAIL, jwks(("pubsub", SAMPLE_KID))),
        Pair(private_pem("pubsub-other"), SAMPLE_EMAIL, jwks(("pubsub-other", "other-kid"))),
    ),
}


def pairs(name: str) -> tuple[Pair, Pair]:
    """The (verifying, other) secret pairs of provider ``name``."""
    return PAIRS.get(name, (Pair(PLAIN, PLAIN), Pair(OTHER_PLAIN, OTHER_PLAIN)))


def bound(name: str, settings: Any = None) -> Provider:
    """The provider as a source of it verifies: bound to ``PUBLIC_URL`` when it signs
    the URL, and to ``settings`` (or its example ones) when it is configurable."""
    provider = PROVIDERS[name]
    if provider.with_public_url is not None:
        return provider.with_public_url(PUBLIC_URL)
    if provider.configurable is not None and settings is not None:
        return provider.configurable.bind(settings)
    return provider


def keys(name: str, *pairs_: Pair) -> list[Key]:
    """The keys a source of ``name`` verifies with: its secrets parsed, then (for a
    provider that fetches its keys) what its key URL serves, as the receiver adds them."""
    provider = PROVIDERS[name]
    out = [provider.parse_secret(pair.configured) for pair in pairs_]
    if provider.key_fetch is not None:
        for pair in pairs_:
            out.extend(provider.key_fetch.parse(pair.fetched))
    return out


# --- settings of the configurable providers -------------------------------------------

header_names = st.sampled_from(["X-Signature", "X-Hub-Signature", "Signature", "x-sig-2"])
dedupe_rules = st.sampled_from(
    ["body_sha256", "json:id", "json:data.id", "header:X-Event-Id", "header:Idempotency-Key"]
)
type_rules = st.sampled_from(
    [{}, {"type_json": "type"}, {"type_json": "data.kind"}, {"type_header": "X-Event-Type"}]
)


@st.composite
def hmac_settings(draw: st.DrawFn) -> HmacSettings:
    """Any valid ``[sources.verify]`` table of an ``hmac`` source."""
    signed = draw(st.sampled_from(["body", "timestamp_body", "method_url_body_timestamp"]))
    table: dict[str, Any] = {
        "header": draw(header_names),
        "prefix": draw(st.sampled_from(["", "sha256=", "v1,", "t=1,v0="])),
        "algorithm": draw(st.sampled_from(["sha1", "sha256", "sha512"])),
        "encoding": draw(st.sampled_from(["hex", "base64"])),
        "signed": signed,
        "separator": draw(st.sampled_from([".", ":", ""])),
        "dedupe": draw(dedupe_rules),
        **draw(type_rules),
    }
    if signed != "body":
        table["timestamp_header"] = draw(st.sampled_from(["X-Timestamp", "X-Request-Time"]))
    if signed == "method_url_body_timestamp":
        table["public_url"] = PUBLIC_URL
    if draw(st.booleans()):
        table["handshake"] = draw(st.sampled_from(["dropbox", "x_crc", "graph"]))
    return HmacSettings.model_validate(table)


@st.composite
def token_settings(draw: st.DrawFn) -> TokenSettings:
    """Any valid ``[sources.verify]`` table of a ``token`` source."""
    table: dict[str, Any] = {
        "header": draw(st.sampled_from(["X-Gitlab-Token", "X-Webhook-Token", "Authorization"])),
        "dedupe": draw(dedupe_rules),
        **draw(type_rules),
    }
    if draw(st.booleans()):
        table["handshake"] = draw(st.sampled_from(["dropbox", "graph"]))
    return TokenSettings.model_validate(table)


SETTINGS: dict[str, st.SearchStrategy[Any]] = {"hmac": hmac_settings(), "token": token_settings()}


def providers_of(name: str) -> st.SearchStrategy[Provider]:
    """The provider ``name`` as some source binds it (any settings, if it takes any)."""
    if name in SETTINGS:
        return SETTINGS[name].map(lambda settings: bound(name, settings))
    return st.just(bound(name))
