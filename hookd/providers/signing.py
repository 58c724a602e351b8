"""Signing the way each provider signs: for ``hookd send-test``, the forward
handler and load generators. Verification never uses this module."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
import uuid
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from hookd.providers.base import HmacKey
from hookd.providers.standard import parse_signing_key


def _hex(key: bytes, message: bytes) -> str:
    return hmac.new(key, message, hashlib.sha256).hexdigest()


def github_headers(secret: str, body: bytes, event: str, delivery: str) -> dict[str, str]:
    return {
        "X-GitHub-Event": event,
        "X-GitHub-Delivery": delivery,
        "X-Hub-Signature-256": "sha256=" + _hex(secret.encode(), body),
        "Content-Type": "application/json",
        "User-Agent": "GitHub-Hookshot/hookd-send-test",
    }


def stripe_headers(secret: str, body: bytes, now: int) -> dict[str, str]:
    signature = _hex(secret.encode(), f"{now}.".encode() + body)
    return {"Stripe-Signature": f"t={now},v1={signature}", "Content-Type": "application/json"}


def slack_headers(secret: str, body: bytes, now: int) -> dict[str, str]:
    signature = _hex(secret.encode(), f"v0:{now}:".encode() + body)
    return {
        "X-Slack-Request-Timestamp": str(now),
        "X-Slack-Signature": f"v0={signature}",
        "Content-Type": "application/json",
    }


def standard_headers(key: str, body: bytes, msg_id: str, now: int) -> dict[str, str]:
    """Sign with ``whsec_`` (v1) or ``whsk_`` (v1a, ed25519 private key)."""
    signing_key = parse_signing_key(key)
    content = f"{msg_id}.{now}.".encode() + body
    if isinstance(signing_key, HmacKey):
        mac = hmac.new(signing_key.key, content, hashlib.sha256).digest()
        signature = "v1," + base64.b64encode(mac).decode()
    else:
        assert isinstance(signing_key, Ed25519PrivateKey)
        signature = "v1a," + base64.b64encode(signing_key.sign(content)).decode()
    return {
        "webhook-id": msg_id,
        "webhook-timestamp": str(now),
        "webhook-signature": signature,
        "Content-Type": "application/json",
    }


def sample_event(
    provider: str, secret: str, seq: int, now: int | None = None
) -> tuple[dict[str, str], bytes]:
    """A realistic, correctly signed sample event: (headers, body)."""
    now = int(time.time()) if now is None else now
    unique = uuid.uuid4()
    payload: dict[str, Any]
    if provider == "github":
        payload = {
            "zen": "Keep it logically awesome.",
            "hook_id": 123,
            "action": "opened",
            "number": seq,
            "repository": {"full_name": "octo-org/hello-world"},
        }
        body = json.dumps(payload).encode()
        return github_headers(secret, body, "issues", str(unique)), body
    if provider == "stripe":
        payload = {
            "id": f"evt_test_{unique.hex[:24]}",
            "object": "event",
            "type": "payment_intent.succeeded",
            "created": now,
            "livemode": False,
            "data": {
                "object": {"id": f"pi_test_{seq}", "object": "payment_intent", "amount": 1000}
            },
        }
        body = json.dumps(payload).encode()
        return stripe_headers(secret, body, now), body
    if provider == "slack":
        payload = {
            "type": "event_callback",
            "team_id": "T0HOOKD",
            "api_app_id": "A0HOOKD",
            "event_id": f"Ev{unique.hex[:10].upper()}",
            "event_time": now,
            "event": {
                "type": "message",
                "channel": "C0HOOKD",
                "user": "U0HOOKD",
                "text": f"hello from hookd send-test #{seq}",
                # Unique per seq (its thousands move the seconds), and random below
                # that, so two calls in the same second do not repeat a message.
                "ts": f"{now + seq // 1000}.{(seq % 1000) * 1000 + unique.int % 1000:06d}",
            },
        }
        body = json.dumps(payload).encode()
        return slack_headers(secret, body, now), body
    if provider == "standard":
        payload = {"type": "invoice.paid", "timestamp": now, "data": {"invoice": seq}}
        body = json.dumps(payload).encode()
        return standard_headers(secret, body, f"msg_{unique.hex}", now), body
    raise ValueError(f"unknown provider {provider!r}")
