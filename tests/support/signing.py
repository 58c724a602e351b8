"""Signed webhook requests, computed by hand from each provider's documented scheme.

The unit tests, the fault scenarios (``chaos/tamper.py``, ``chaos/fuzz.py``) and the
benchmarks all sign through here. It deliberately does not call the signers in
``hookd.providers``: a verifier checked only against the product's own signer would
pass a mistake the two share (a wrong prefix, a wrong encoding). The unit vectors
in ``tests/unit/test_vectors.py`` tie this module to the providers' own libraries.

Secrets are given as a source configures them: a plain string for GitHub, Stripe and
Slack, ``whsec_…`` for a Standard Webhooks HMAC key, and ``whsk_…`` (a base64 ed25519
seed) to sign Standard Webhooks ``v1a``.
"""

from __future__ import annotations

import base64
import hashlib
import hmac

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

SIGNATURE_HEADER = {
    "github": "x-hub-signature-256",
    "stripe": "stripe-signature",
    "slack": "x-slack-signature",
    "standard": "webhook-signature",
}
TIMESTAMP_HEADER = {"slack": "x-slack-request-timestamp", "standard": "webhook-timestamp"}

MSG_ID = "msg_2Lh3unitTest"
DELIVERY = "72d3162e-cc78-11e3-81ab-4c9367dc0958"


def hex_hmac(secret: str, message: bytes) -> str:
    return hmac.new(secret.encode(), message, hashlib.sha256).hexdigest()


def signed_prefix(provider: str, ts: str, msg_id: str) -> bytes:
    """What the provider signs before the body: the signed message is this + body."""
    if provider == "github":
        return b""
    if provider == "stripe":
        return f"{ts}.".encode()
    if provider == "slack":
        return f"v0:{ts}:".encode()
    assert provider == "standard", provider
    return f"{msg_id}.{ts}.".encode()


def signature_entry(provider: str, secret: str, message: bytes) -> str:
    """One signature over ``message`` as the provider writes it (without Stripe's ``t=``)."""
    if provider == "standard":
        if secret.startswith("whsk_"):
            seed = base64.b64decode(secret.removeprefix("whsk_"))
            signature = Ed25519PrivateKey.from_private_bytes(seed).sign(message)
            return "v1a," + base64.b64encode(signature).decode()
        key = base64.b64decode(secret.removeprefix("whsec_"))
        return "v1," + base64.b64encode(hmac.new(key, message, hashlib.sha256).digest()).decode()
    return {"github": "sha256=", "stripe": "v1=", "slack": "v0="}[provider] + hex_hmac(
        secret, message
    )


def signature_value(provider: str, secret: str, body: bytes, ts: str, msg_id: str = MSG_ID) -> str:
    """The signature header's value a genuine ``provider`` request carries for ``body``."""
    entry = signature_entry(provider, secret, signed_prefix(provider, ts, msg_id) + body)
    return f"t={ts},{entry}" if provider == "stripe" else entry


def signed_request(
    provider: str,
    secret: str,
    body: bytes,
    *,
    ts: str,
    msg_id: str = MSG_ID,
    delivery: str = DELIVERY,
    content_type: str = "application/json",
) -> tuple[dict[str, list[str]], bytes]:
    """Every header a genuine ``provider`` request carries (lower-case names, one value
    each, as the receiver hands them to a provider), and the body they sign."""
    headers = {
        SIGNATURE_HEADER[provider]: [signature_value(provider, secret, body, ts, msg_id)],
        "content-type": [content_type],
    }
    if provider == "github":
        headers["x-github-event"] = ["issues"]
        headers["x-github-delivery"] = [delivery]
    elif provider == "slack":
        headers[TIMESTAMP_HEADER["slack"]] = [ts]
    elif provider == "standard":
        headers["webhook-id"] = [msg_id]
        headers[TIMESTAMP_HEADER["standard"]] = [ts]
    return headers, body
