"""Mailgun: the signature travels in the JSON body, not in a header:
``{"signature": {"timestamp", "token", "signature"}, "event-data": {…}}``, where
``signature`` is the hex HMAC-SHA256 (the webhook signing key) of ``timestamp + token``.

There is no header to check before the body is read, so ``check_headers`` only records
the clock and the window; ``verify`` reads the signature block from the body, refuses a
timestamp outside the source's ``tolerance_s`` and checks the HMAC. A subaccount's event
also carries ``parent-signature``, the same HMAC under the primary account's key: either
verifies against any configured key.

A body that is not a JSON object with a ``signature`` block carries nothing to
establish where it came from, so it is ``missing_signature`` (401), not a payload error.

What Mailgun signs is the timestamp and token only, not ``event-data``: a captured
signature block stays valid with other event data until its timestamp leaves the window.
Keep ``tolerance_s`` short. Events are keyed by ``event-data.id``, Mailgun's id for the
event, the same in every retry and in its events API.

Reconciliation reads the domain's events (``GET /v3/{domain}/events``,
``reconcile.providers.mailgun``): an event there is the ``event-data`` of its webhook,
listed under the same ``id``.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from typing import Annotated

from pydantic import Field

from hookd.errors import SignatureError
from hookd.providers.base import (
    Handwritten,
    HeaderMap,
    JsonEnvelope,
    JsonObject,
    Key,
    Provider,
    SignedHeaders,
    Verified,
    bounded_type,
    compact_json,
    epoch_to_datetime,
    loads_utf8,
)
from hookd.providers.reconciling import (
    EventNames,
    ReconcileConfig,
    Reconciling,
    matching,
)
from hookd.providers.signatures import (
    hmac_secret,
    hmac_sha256_hex,
    matching_key,
    parse_hex_digest,
    parse_timestamp,
)

NAME = "mailgun"
# Mailgun's tokens are 50 characters; a longer one is not Mailgun's.
MAX_TOKEN_CHARS = 512
SIGNATURE_FIELDS = ("signature", "parent-signature")
# A sending domain: labels of letters, digits and hyphens, dot-separated.
DOMAIN = r"(?=.{1,253}\Z)([A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)+[A-Za-z]{2,63}"


def check_headers(headers: HeaderMap, now: float, tolerance_s: int) -> SignedHeaders:
    """Nothing to check yet: the signature is in the body. Keep the clock for ``verify``."""
    return SignedHeaders(
        timestamp=None, prefix=b"", signatures=(), checked_at=now, tolerance_s=tolerance_s
    )


def signature_block(body: bytes) -> JsonObject:
    try:
        payload = loads_utf8(body)
    except ValueError:
        raise SignatureError("missing_signature") from None
    if not isinstance(payload, dict) or "signature" not in payload:
        raise SignatureError("missing_signature")
    block = payload["signature"]
    if not isinstance(block, dict):
        raise SignatureError("malformed_signature")
    return block


def timestamp_text(value: object) -> str:
    """The timestamp as it is signed: Mailgun writes it as a string of digits (its docs
    also call it an int, which is signed as the same digits)."""
    if isinstance(value, bool):
        raise SignatureError("malformed_timestamp")
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return value
    raise SignatureError("malformed_timestamp")


def token_text(value: object) -> str:
    """The block's ``token``: printable ASCII, as Mailgun writes it, or
    ``malformed_signature``."""
    if not (
        isinstance(value, str)
        and 0 < len(value) <= MAX_TOKEN_CHARS
        and value.isascii()
        and value.isprintable()
    ):
        raise SignatureError("malformed_signature")
    return value


def signatures_in(block: JsonObject) -> list[bytes]:
    """The block's ``signature`` and ``parent-signature`` (a subaccount's event), each a
    hex digest; neither is ``missing_signature``."""
    candidates: list[bytes] = []
    for field in SIGNATURE_FIELDS:
        value = block.get(field)
        if value is None:
            continue
        if not isinstance(value, str):
            raise SignatureError("malformed_signature")
        candidates.append(parse_hex_digest(value))
    if not candidates:
        raise SignatureError("missing_signature")
    return candidates


def verify(signed: SignedHeaders, body: bytes, keys: Sequence[Key]) -> Verified:
    block = signature_block(body)
    raw_ts = timestamp_text(block.get("timestamp"))
    token = token_text(block.get("token"))
    candidates = signatures_in(block)
    ts = parse_timestamp(raw_ts, signed.checked_at, signed.tolerance_s)
    index = matching_key(keys, candidates, ((raw_ts + token).encode("ascii"),))
    return Verified("mailgun-sha256", index, ts)


def mailgun_signature(secret: str, timestamp: str, token: str) -> dict[str, str]:
    """The ``signature`` block Mailgun puts in a body at ``timestamp``, with ``token``."""
    digest = hmac_sha256_hex(secret.encode("utf-8"), (timestamp + token).encode("ascii"))
    return {"token": token, "timestamp": timestamp, "signature": digest}


def sample_event(secret: str, seq: int, now: int) -> tuple[dict[str, str], bytes]:
    """A ``delivered`` event, signed as Mailgun signs it."""
    recipient = f"send-test-{seq}@example.com"
    payload = {
        "signature": mailgun_signature(secret, str(now), secrets.token_hex(25)),
        "event-data": {
            "id": secrets.token_urlsafe(16),
            "timestamp": now + (seq % 1000) / 1000,
            "log-level": "info",
            "event": "delivered",
            "recipient": recipient,
            "recipient-domain": "example.com",
            "message": {
                "headers": {
                    "to": recipient,
                    "message-id": f"{secrets.token_hex(8)}.{seq}@mg.example.com",
                    "from": "hookd <send-test@mg.example.com>",
                    "subject": f"hookd send-test #{seq}",
                },
                "size": 512,
            },
            "delivery-status": {"code": 250, "message": "OK", "attempt-no": 1},
            "flags": {"is-routed": False, "is-authenticated": True, "is-test-mode": False},
            "tags": [],
            "user-variables": {},
        },
    }
    body = compact_json(payload)
    return {"Content-Type": "application/json", "User-Agent": "mailgun/treq-16.12.0"}, body


class MailgunReconcile(ReconcileConfig):
    """``[sources.reconcile]`` of a Mailgun source: the sending domain whose events are
    listed, how long the account's plan keeps them, and what the registration check
    (each run, ``hookd sources check``) compares the domain's webhooks with.

    The token is a Mailgun API key that can read the domain's events (the account's
    primary key, or a key whose role reads logs); it is sent as ``api:<key>``."""

    domain: Annotated[
        str | None, matching(DOMAIN, 'must be a sending domain ("mg.example.com")')
    ] = None
    # How far back the events API reaches, in days: by the account's plan (Mailgun
    # keeps logs one day on its free plans, up to 30 on others). The window never
    # reaches further, and what a run could not reach is recorded as lost.
    log_retention_days: float = Field(default=1.0, gt=0, le=30, allow_inf_nan=False)
    # Webhook names that must post to the source's public_url ("delivered", "opened",
    # "permanent_fail"...); without them, at least one must.
    expect_events: EventNames = ()
    check_registration: bool = True

    def incomplete(self) -> tuple[str, str] | None:
        missing = super().incomplete()
        if missing is None and self.domain is None:
            return "domain", "is required for mailgun"
        return missing

    def list_retention_days(self) -> float | None:
        return self.log_retention_days


PROVIDER = Provider(
    name=NAME,
    # Mailgun retries for 8 hours.
    redelivery_horizon_days=1,
    scheme=Handwritten(
        hmac_secret("a Mailgun webhook signing key is empty"), check_headers, verify
    ),
    envelope=JsonEnvelope(
        key=("id", "event-data.id"),
        type=("event", bounded_type),
        time=("timestamp", epoch_to_datetime),
        inside="event-data",
    ),
    sample_event=sample_event,
    # "If Mailgun receives a 200 (Success) code it will determine the webhook POST is
    # successful"; any other code but 406 is retried for 8 hours.
    accepted_status=200,
    reconcile=Reconciling(
        settings=MailgunReconcile,
        # US; an EU domain's API is https://api.eu.mailgun.net (api_url).
        api_url="https://api.mailgun.net",
        adapter="reconcile.providers.mailgun:MailgunAdapter",
        # Mailgun's events API is eventually consistent: it says an event may take up
        # to half an hour to be listed. Half an hour, then, before an event is judged.
        settle_s=1800.0,
        registration=True,
    ),
)
