"""Signed requests for the provider tests: fixed secrets, a fixed clock, header maps.

Signatures come from ``tests.support.signing``, computed by hand from each provider's
documented scheme, so the verifiers are never checked against the signers in
``hookd.providers`` alone.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from dataclasses import dataclass

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from hookd.providers import PROVIDERS
from hookd.providers.base import Envelope, HeaderMap, Key, Verified
from tests.support import signing

# The provider tests take these from here, with the secrets and the clock.
SIGNATURE_HEADER = signing.SIGNATURE_HEADER
TIMESTAMP_HEADER = signing.TIMESTAMP_HEADER
MSG_ID = signing.MSG_ID
DELIVERY = signing.DELIVERY
hex_hmac = signing.hex_hmac

NOW = 1_700_000_000
TOLERANCE_S = 300

PROVIDER_NAMES = ("github", "stripe", "slack", "standard")
# Providers that sign a timestamp (GitHub does not).
TIMED = ("stripe", "slack", "standard")

SECRETS = {
    "github": "gh-unit-secret",
    "stripe": "whsec_unit_stripe_secret",
    "slack": "slack-unit-secret",
    "standard": "whsec_" + base64.b64encode(b"standard-unit-secret-32-bytes!!!").decode(),
}
OTHER_SECRETS = {
    "github": "gh-other-secret",
    "stripe": "whsec_other_stripe_secret",
    "slack": "slack-other-secret",
    "standard": "whsec_" + base64.b64encode(b"another-standard-secret-32bytes!").decode(),
}

# Every reason code a verifier may give; anything else is a new, untested path.
SIGNATURE_REASONS = frozenset(
    {
        "missing_header",
        "duplicate_header",
        "conflicting_headers",
        "empty_header",
        "malformed_id",
        "malformed_signature",
        "missing_signature",
        "malformed_timestamp",
        "timestamp_too_old",
        "timestamp_in_future",
        "bad_signature",
    }
)


def ed25519_pair(seed: bytes) -> tuple[str, str]:
    """(``whsk_`` signing key, ``whpk_`` public key) for a 32-byte seed."""
    public = Ed25519PrivateKey.from_private_bytes(seed).public_key().public_bytes_raw()
    return (
        "whsk_" + base64.b64encode(seed).decode(),
        "whpk_" + base64.b64encode(public).decode(),
    )


V1A_SIGNING, V1A_PUBLIC = ed25519_pair(bytes(range(32)))
OTHER_V1A_SIGNING, OTHER_V1A_PUBLIC = ed25519_pair(bytes(range(100, 132)))


@dataclass(frozen=True)
class Case:
    """A provider and a secret pair: ``signing`` signs, ``configured`` verifies."""

    provider: str
    signing: str
    configured: str
    other_signing: str
    scheme: str

    @property
    def id(self) -> str:
        return self.scheme


CASES = [
    Case("github", SECRETS["github"], SECRETS["github"], OTHER_SECRETS["github"], "github-sha256"),
    Case("stripe", SECRETS["stripe"], SECRETS["stripe"], OTHER_SECRETS["stripe"], "stripe-v1"),
    Case("slack", SECRETS["slack"], SECRETS["slack"], OTHER_SECRETS["slack"], "slack-v0"),
    Case(
        "standard",
        SECRETS["standard"],
        SECRETS["standard"],
        OTHER_SECRETS["standard"],
        "standard-v1",
    ),
    Case("standard", V1A_SIGNING, V1A_PUBLIC, OTHER_V1A_SIGNING, "standard-v1a"),
]
CASE_IDS = [case.id for case in CASES]


def header_map(headers: Mapping[str, str]) -> dict[str, list[str]]:
    """Mixed-case single-valued headers as the receiver hands them to a provider."""
    return {name.lower(): [value] for name, value in headers.items()}


def keys_for(provider: str, *secrets: str) -> list[Key]:
    parse = PROVIDERS[provider].parse_secret
    return [parse(secret) for secret in (secrets or (SECRETS[provider],))]


def signature_value(
    provider: str, body: bytes, *, secret: str, timestamp: str, msg_id: str = MSG_ID
) -> str:
    """The signature header value ``provider`` would send for ``body``."""
    return signing.signature_value(provider, secret, body, timestamp, msg_id)


def signed_request(
    provider: str,
    body: bytes,
    *,
    secret: str | None = None,
    timestamp: int | str = NOW,
    msg_id: str = MSG_ID,
    content_type: str = "application/json",
) -> dict[str, list[str]]:
    """Every header a real ``provider`` request carries, correctly signed."""
    headers, _ = signing.signed_request(
        provider,
        secret or SECRETS[provider],
        body,
        ts=str(timestamp),
        msg_id=msg_id,
        content_type=content_type,
    )
    return headers


def verify(
    provider: str, headers: HeaderMap, body: bytes, *secrets: str, now: int = NOW
) -> Verified:
    """``verify_request`` with the given secrets (default: the provider's) at ``now``."""
    keys = keys_for(provider, *secrets)
    return PROVIDERS[provider].verify_request(headers, body, keys, now, TOLERANCE_S)


def accept(provider: str, headers: HeaderMap, body: bytes, *secrets: str) -> Envelope:
    """Verify, then build the envelope: what the receiver does with a request."""
    verified = verify(provider, headers, body, *secrets)
    return PROVIDERS[provider].envelope(headers, body, verified)
