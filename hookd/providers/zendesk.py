"""Zendesk: ``X-Zendesk-Webhook-Signature: <base64 HMAC-SHA256>`` over the
``X-Zendesk-Webhook-Signature-Timestamp`` value followed by the raw body, keyed with
the webhook's signing secret (used as the text it is shown as).

The timestamp is an ISO 8601 UTC time (``2021-03-25T05:09:27Z``), not epoch seconds;
it is signed as received and must fall inside the source's window.

A webhook subscribed to Zendesk events sends a JSON event whose ``id`` Zendesk
documents as the event's unique identifier: every attempt of an invocation, and any
second invocation for the same event, carries it, and it is signed. That is the key.
A webhook connected to a trigger or automation sends a payload the admin wrote (JSON,
XML or a form), with nothing documented in it; it is keyed by the
``X-Zendesk-Webhook-Invocation-Id`` header, which every attempt of one invocation
shares (the invocations API lists attempts under it).

Reconciliation reads the webhook's invocations (``GET
/api/v2/webhooks/{id}/invocations``, ``reconcile.providers.zendesk``): an invocation
there is listed under the same ``invocation:<id>`` key, so only a webhook connected to
triggers or automations can be reconciled (the list does not name a Zendesk event's
``id``).
"""

from __future__ import annotations

import re
import uuid
from datetime import UTC, datetime
from typing import Annotated

from pydantic import Field

from hookd.errors import PayloadError
from hookd.providers.base import (
    Envelope,
    HeaderMap,
    JsonObject,
    Provider,
    Verified,
    checked_key,
    compact_json,
    loads_utf8,
    optional_header,
    select_headers,
)
from hookd.providers.reconciling import ReconcileConfig, Reconciling, matching
from hookd.providers.rfc3339 import parse_rfc3339, parse_utc_timestamp
from hookd.providers.signatures import (
    TimestampedSignature,
    hmac_b64,
    hmac_secret,
    parse_b64_digest,
)

NAME = "zendesk"
SCHEME = "zendesk-sha256"
SIGNATURE_HEADER = "x-zendesk-webhook-signature"
TIMESTAMP_HEADER = "x-zendesk-webhook-signature-timestamp"
INVOCATION_HEADER = "x-zendesk-webhook-invocation-id"
KEPT_HEADERS = (
    "x-zendesk-account-id",
    "x-zendesk-webhook-id",
    "x-zendesk-webhook-invocation-id",
    "x-zendesk-webhook-signature-timestamp",
    "content-type",
    "user-agent",
)
EVENT_TYPE_PREFIX = "zen:event-type:"
# Zendesk shows a signing secret as base64 text (``dGhpc19z…==``, ``HRkRd4Be…zeA=``).
SECRET_RE = re.compile(r"[A-Za-z0-9+/_-]{16,}={0,2}", re.ASCII)


def zendesk_event(body: bytes) -> tuple[str, JsonObject] | None:
    """The body as a Zendesk event: its ``type`` (``zen:event-type:…``) and the event,
    which has an ``id``; None for any other payload (a trigger's own JSON, XML, a form)."""
    try:
        payload = loads_utf8(body)
    except ValueError:
        return None
    if not isinstance(payload, dict):
        return None
    kind = payload.get("type")
    if isinstance(kind, str) and kind.startswith(EVENT_TYPE_PREFIX) and "id" in payload:
        return kind, payload
    return None


def envelope(headers: HeaderMap, body: bytes, verified: Verified) -> Envelope:
    kept = select_headers(headers, KEPT_HEADERS)
    event = zendesk_event(body)
    if event is not None:
        kind, fields = event
        return Envelope(
            dedupe_key=checked_key(fields.get("id"), "event id"),
            type=kind,
            occurred_at=parse_rfc3339(fields.get("time")),
            headers=kept,
        )
    invocation = optional_header(headers, INVOCATION_HEADER)
    if invocation is None:
        raise PayloadError(
            "malformed_payload", "not a Zendesk event and no X-Zendesk-Webhook-Invocation-Id"
        )
    return Envelope(
        dedupe_key=checked_key(invocation_key(invocation), "invocation id"),
        type=None,
        occurred_at=None,
        headers=kept,
    )


def zendesk_signature(secret: str, timestamp: str, body: bytes) -> str:
    """The signature Zendesk sends: base64(HMAC-SHA256(timestamp + body))."""
    return hmac_b64(secret.encode("utf-8"), timestamp.encode("ascii"), body)


def iso_z(moment: int) -> str:
    return datetime.fromtimestamp(moment, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def zendesk_headers(
    secret: str, body: bytes, now: int, *, webhook_id: str, invocation_id: str
) -> dict[str, str]:
    """The headers Zendesk sends with ``body`` at ``now``, signed with ``secret``."""
    timestamp = iso_z(now)
    return {
        "X-Zendesk-Account-Id": "12514403",
        "X-Zendesk-Webhook-Id": webhook_id,
        "X-Zendesk-Webhook-Invocation-Id": invocation_id,
        "X-Zendesk-Webhook-Signature": zendesk_signature(secret, timestamp, body),
        "X-Zendesk-Webhook-Signature-Timestamp": timestamp,
        "Content-Type": "application/json",
        "User-Agent": "Zendesk Webhook",
    }


def sample_event(secret: str, seq: int, now: int) -> tuple[dict[str, str], bytes]:
    when = iso_z(now)
    user_id = str(6596848315900 + seq)
    payload = {
        "type": "zen:event-type:user.active_changed",
        "account_id": 12514403,
        "id": str(uuid.uuid4()),
        "time": when,
        "zendesk_event_version": "2022-06-20",
        "subject": f"zen:user:{user_id}",
        "detail": {
            "created_at": when,
            "email": f"user{seq}@example.com",
            "external_id": "",
            "default_group_id": "0",
            "id": user_id,
            "organization_id": "0",
            "role": "end-user",
            "updated_at": when,
        },
        "event": {"current": False, "previous": True},
    }
    body = compact_json(payload)
    invocation = str(uuid.uuid4().int % 10**10)
    headers = zendesk_headers(
        secret, body, now, webhook_id="01F1KRFQ6BG29CNWFR60NK5FNY", invocation_id=invocation
    )
    return headers, body


def invocation_key(invocation_id: str) -> str:
    """The key a trigger's or automation's webhook is stored under (``envelope``)."""
    return f"invocation:{invocation_id.strip()}"


class ZendeskReconcile(ReconcileConfig):
    """``[sources.reconcile]`` of a Zendesk source: the webhook whose invocations are
    listed (one connected to triggers or automations), and how the token is sent.

    ``api_url`` is the account's, ``https://<subdomain>.zendesk.com``. With ``email``,
    the token is an API token sent as ``<email>/token:<token>`` (basic auth); without
    it, an OAuth access token (``Bearer``). Either must be an admin's: only admins
    may read webhooks and their invocations."""

    webhook_id: Annotated[
        str | None,
        matching(r"[0-9A-Za-z]{10,64}", 'must be a webhook ID ("01GB2G9R1Q0B1QJQXAJX2HRT5C")'),
    ] = None
    email: Annotated[str | None, matching(r"[^@\s/:]+@[^@\s/:]+", "must be an e-mail address")] = (
        None
    )
    check_registration: bool = True
    # Invocations asked for a page (Zendesk allows up to 100).
    page_size: int = Field(default=100, ge=1, le=100)

    def incomplete(self) -> tuple[str, str] | None:
        missing = super().incomplete()
        if missing is not None:
            return missing
        if not self.api_url:
            return "api_url", "is required for zendesk: https://<subdomain>.zendesk.com"
        if self.webhook_id is None:
            return "webhook_id", "is required for zendesk"
        return None


PROVIDER = Provider(
    name=NAME,
    # Zendesk does not document a retry window: hookd's default.
    redelivery_horizon_days=3,
    # The timestamp is signed as the text it arrived as.
    scheme=TimestampedSignature(
        SCHEME,
        SIGNATURE_HEADER,
        TIMESTAMP_HEADER,
        "sha256",
        read_timestamp=parse_utc_timestamp,
        decode=parse_b64_digest,
        parse_secret=hmac_secret(
            shape=SECRET_RE,
            unlike="a Zendesk signing secret is the base64 text the webhook shows "
            "(at least 16 characters, no spaces)",
        ),
    ),
    envelope=envelope,
    sample_event=sample_event,
    reconcile=Reconciling(
        settings=ZendeskReconcile,
        # Each account has its own (api_url is required).
        api_url="https://zendesk.com",
        adapter="reconcile.providers.zendesk:ZendeskAdapter",
        # Zendesk invokes a webhook as its trigger fires and logs the invocation as it
        # starts; a failed attempt is retried within minutes. Five minutes.
        settle_s=300.0,
        # "Returns up to 7 days of invocations for a webhook."
        retention_days=7.0,
        registration=True,
    ),
)
