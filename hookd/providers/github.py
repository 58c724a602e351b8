"""GitHub: ``X-Hub-Signature-256: sha256=<hex HMAC of the raw body>``.

GitHub signs no timestamp, so replays are bounded by deduplication on
``X-GitHub-Delivery`` (redeliveries keep the same GUID). The legacy SHA-1
``X-Hub-Signature`` header is not accepted.
"""

from __future__ import annotations

import json
import re
import uuid
from typing import Literal
from urllib.parse import parse_qs

from pydantic import field_validator

from hookd.errors import PayloadError
from hookd.providers.base import (
    BodySigner,
    Envelope,
    HeaderMap,
    Provider,
    Verified,
    checked_key,
    media_type,
    optional_header,
    parse_json_object,
    select_headers,
    with_action,
)
from hookd.providers.reconciling import EventNames, ReconcileConfig, Reconciling
from hookd.providers.signatures import HmacHeader, hmac_sha256_hex

SIGNATURE_HEADER = "x-hub-signature-256"
# The request headers an event keeps, whether it came by webhook or was fetched
# from the deliveries API by reconciliation.
KEPT_HEADERS = (
    "x-github-delivery",
    "x-github-event",
    "x-github-hook-id",
    "x-github-hook-installation-target-id",
    "x-github-hook-installation-target-type",
    "content-type",
    "user-agent",
)


def event_type(event: str | None, action: object) -> str | None:
    """``issues.opened``: the event and its action, when it has one; the event alone
    otherwise. The same for a webhook and for a delivery found by reconciliation."""
    return with_action(event, action)


def envelope(headers: HeaderMap, body: bytes, verified: Verified) -> Envelope:
    delivery = checked_key(optional_header(headers, "x-github-delivery"), "X-GitHub-Delivery")
    event = checked_key(optional_header(headers, "x-github-event"), "X-GitHub-Event")
    if media_type(headers) == "application/x-www-form-urlencoded":
        try:
            fields = parse_qs(body.decode("utf-8"), strict_parsing=True, errors="strict")
        except (UnicodeDecodeError, ValueError):
            raise PayloadError("malformed_payload", "form body cannot be parsed") from None
        payloads = fields.get("payload", [])
        if len(payloads) != 1:
            raise PayloadError("malformed_payload", "form body needs exactly one payload field")
        payload = parse_json_object(payloads[0])
    else:
        payload = parse_json_object(body)
    return Envelope(
        dedupe_key=delivery,
        type=event_type(event, payload.get("action")),
        occurred_at=None,
        headers=select_headers(headers, KEPT_HEADERS),
    )


def github_headers(secret: str, body: bytes, event: str, delivery: str) -> dict[str, str]:
    """The headers GitHub sends with ``body``, signed with ``secret``."""
    return {
        "X-GitHub-Event": event,
        "X-GitHub-Delivery": delivery,
        "X-Hub-Signature-256": "sha256=" + hmac_sha256_hex(secret.encode(), body),
        "Content-Type": "application/json",
        "User-Agent": "GitHub-Hookshot/hookd-send-test",
    }


def sample_event(secret: str, seq: int, now: int) -> tuple[dict[str, str], bytes]:
    payload = {
        "zen": "Keep it logically awesome.",
        "hook_id": 123,
        "action": "opened",
        "number": seq,
        "repository": {"full_name": "octo-org/hello-world"},
    }
    body = json.dumps(payload).encode()
    return github_headers(secret, body, "issues", str(uuid.uuid4())), body


def sign_body(secret: str, body: bytes, event: str | None, now: int) -> dict[str, str]:
    """``body`` as GitHub would deliver it for ``event`` (X-GitHub-Event; the stored type
    adds the body's ``action``)."""
    return github_headers(secret, body, event or "issues", str(uuid.uuid4()))


class GitHubReconcile(ReconcileConfig):
    """``[sources.reconcile]`` of a GitHub source: whose hook deliveries to list."""

    hook: str | None = None
    app_id: int | None = None
    private_key: str | None = None
    repair: Literal["fetch", "redeliver"] = "fetch"
    # The registration check (each run, `hookd sources check`): the events the hook
    # must send (a hook sending "*" sends them all); off with check_registration.
    expect_events: EventNames = ()
    check_registration: bool = True

    @field_validator("hook")
    @classmethod
    def _hook(cls, value: str | None) -> str | None:
        if value is None or value == "app":
            return value
        if not re.fullmatch(r"(repos/[^/\s]+/[^/\s]+|orgs/[^/\s]+)/hooks/[0-9]+", value):
            raise ValueError('must be "repos/OWNER/REPO/hooks/ID", "orgs/ORG/hooks/ID" or "app"')
        return value

    def incomplete(self) -> tuple[str, str] | None:
        # A GitHub App's hook is read with a JWT made from its key, not with a token.
        if not self.token and self.hook != "app":
            return "token", "is required"
        if self.hook is None:
            return "hook", "is required for github"
        if self.hook == "app" and (self.app_id is None or not self.private_key):
            key = "app_id" if self.app_id is None else "private_key"
            return key, 'is required with hook = "app"'
        return None


PROVIDER = Provider(
    name="github",
    # GitHub does not retry; its deliveries can be listed and redelivered for 3 days.
    redelivery_horizon_days=3,
    scheme=HmacHeader("github-sha256", SIGNATURE_HEADER, prefix="sha256="),
    envelope=envelope,
    sample_event=sample_event,
    body_signer=BodySigner(sign_body),
    reconcile=Reconciling(
        settings=GitHubReconcile,
        api_url="https://api.github.com",
        adapter="reconcile.providers.github:GitHubAdapter",
        # A delivery is listed once attempted; GitHub waits 10 s for the answer and
        # never retries: one not stored a minute after its delivered_at is not coming.
        settle_s=60.0,
        registration=True,
    ),
)
