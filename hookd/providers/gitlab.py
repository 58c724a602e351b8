"""GitLab: the webhook's secret token, sent as it is in ``X-Gitlab-Token``.

Nothing is signed: the header's value must equal one of the source's ``secrets``. Both
sides are hashed before ``hmac.compare_digest``, so that the comparison's time depends
on neither the token's bytes nor its length. Anyone who has seen one request can send
another, so deduplication is the only replay bound.

Duplicates are recognised by ``Idempotency-Key`` (GitLab 17.4 and later: "Unique ID
consistent across webhook retries"). ``X-Gitlab-Event-UUID`` is no such key: GitLab
gives recursive webhooks (triggered by earlier webhooks) the same value, so keying on it
would drop genuine events. A delivery without ``Idempotency-Key`` (GitLab before 17.4)
is keyed by the SHA-256 of its body, which a retry repeats byte for byte.

GitLab's newer signing token (``webhook-id``/``webhook-timestamp``/``webhook-signature``,
Standard Webhooks) is verified by ``provider = "standard"``, not here.
"""

from __future__ import annotations

import hashlib
import json
import re
import uuid
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Literal

from pydantic import Field, StrictInt, StrictStr, field_validator

from hookd.providers.base import (
    Envelope,
    HeaderMap,
    Provider,
    Verified,
    checked_key,
    optional_header,
    parse_json_object,
    select_headers,
    with_action,
)
from hookd.providers.reconciling import ReconcileConfig, Reconciling
from hookd.providers.rfc3339 import parse_iso8601
from hookd.providers.signatures import SharedToken, hmac_secret

NAME = "gitlab"
SCHEME = "gitlab-token"
TOKEN_HEADER = "x-gitlab-token"  # noqa: S105 - a header name, not a token
EVENT_HEADER = "x-gitlab-event"
IDEMPOTENCY_HEADER = "idempotency-key"
KEPT_HEADERS = (
    EVENT_HEADER,
    IDEMPOTENCY_HEADER,
    "x-gitlab-event-uuid",
    "x-gitlab-webhook-uuid",
    "x-gitlab-instance",
    "content-type",
    "user-agent",
)
# A project: its numeric ID or its path ("group/subgroup/project").
PROJECT_PATH = re.compile(r"[^/\s]+(/[^/\s]+)+")
SAMPLE_INSTANCE = "https://gitlab.example.com"
SAMPLE_VERSION = "17.4.0"


def event_type(header: str | None, payload: object) -> str | None:
    """``merge_request.open``: the payload's ``object_kind`` (``event_name`` for system
    hooks) and ``object_attributes.action`` when it has one; ``X-Gitlab-Event``
    (``Push Hook``) when the payload names no kind. The same for a webhook and for a
    hook event found in GitLab's log by reconciliation."""
    if not isinstance(payload, dict):
        return header or None
    kind = payload.get("object_kind") or payload.get("event_name")
    if not isinstance(kind, str) or not kind:
        return header or None
    attributes = payload.get("object_attributes")
    return with_action(kind, attributes.get("action") if isinstance(attributes, dict) else None)


def occurred_at(payload: Mapping[str, object]) -> datetime | None:
    """When the object last changed, for the events whose payload says so."""
    attributes = payload.get("object_attributes")
    if not isinstance(attributes, dict):
        return None
    return parse_iso8601(attributes.get("updated_at")) or parse_iso8601(
        attributes.get("created_at")
    )


def envelope(headers: HeaderMap, body: bytes, verified: Verified) -> Envelope:
    payload = parse_json_object(body)
    idempotency_key = optional_header(headers, IDEMPOTENCY_HEADER)
    if idempotency_key:
        key = checked_key(idempotency_key, "Idempotency-Key")
    else:
        key = "sha256:" + hashlib.sha256(body).hexdigest()
    return Envelope(
        dedupe_key=key,
        type=event_type(optional_header(headers, EVENT_HEADER), payload),
        occurred_at=occurred_at(payload),
        headers=select_headers(headers, KEPT_HEADERS),
    )


def gitlab_headers(secret: str, event: str, idempotency_key: str) -> dict[str, str]:
    """The headers GitLab sends with a webhook whose secret token is ``secret``."""
    return {
        "Content-Type": "application/json",
        "User-Agent": f"GitLab/{SAMPLE_VERSION}",
        "Idempotency-Key": idempotency_key,
        "X-Gitlab-Event": event,
        "X-Gitlab-Webhook-UUID": str(uuid.uuid4()),
        "X-Gitlab-Instance": SAMPLE_INSTANCE,
        "X-Gitlab-Event-UUID": str(uuid.uuid4()),
        "X-Gitlab-Token": secret,
    }


def sample_event(secret: str, seq: int, now: int) -> tuple[dict[str, str], bytes]:
    after = (uuid.uuid4().hex + uuid.uuid4().hex)[:40]  # a commit id: 40 hex digits
    stamp = datetime.fromtimestamp(now, UTC).isoformat()
    project = {
        "id": 15,
        "name": "Diaspora",
        "web_url": f"{SAMPLE_INSTANCE}/mike/diaspora",
        "path_with_namespace": "mike/diaspora",
        "default_branch": "main",
    }
    payload = {
        "object_kind": "push",
        "event_name": "push",
        "before": "95790bf891e76fee5e1747ab589903a6a1f80f22",
        "after": after,
        "ref": "refs/heads/main",
        "checkout_sha": after,
        "user_id": 4,
        "user_name": "John Smith",
        "user_username": "jsmith",
        "project_id": 15,
        "project": project,
        "commits": [
            {
                "id": after,
                "message": f"hookd send-test #{seq}",
                "timestamp": stamp,
                "url": f"{SAMPLE_INSTANCE}/mike/diaspora/-/commit/{after}",
                "author": {"name": "John Smith", "email": "john@example.com"},
                "added": [],
                "modified": ["README.md"],
                "removed": [],
            }
        ],
        "total_commits_count": 1,
    }
    body = json.dumps(payload).encode()
    return gitlab_headers(secret, "Push Hook", str(uuid.uuid4())), body


class GitLabReconcile(ReconcileConfig):
    """``[sources.reconcile]`` of a GitLab source: the project webhook whose events
    (deliveries) are listed, and how a missing one is repaired.

    GitLab allows five resends a minute per webhook and user (an administrator of a
    self-managed instance can change that): ``resends_per_minute`` paces them."""

    project: StrictInt | StrictStr | None = None
    hook_id: int | None = Field(default=None, ge=1)
    repair: Literal["fetch", "redeliver"] = "fetch"
    resends_per_minute: float = Field(default=5.0, gt=0, le=100_000)

    @field_validator("project")
    @classmethod
    def _project(cls, value: int | str | None) -> int | str | None:
        if isinstance(value, int):
            if value < 1:
                raise ValueError("must be a project ID (1 or more) or path")
            return value
        if value is None or value.isdigit() or PROJECT_PATH.fullmatch(value):
            return value
        raise ValueError('must be a project ID or path ("group/project")')

    def incomplete(self) -> tuple[str, str] | None:
        missing = super().incomplete()
        if missing is not None:
            return missing
        if self.project is None:
            return "project", "is required for gitlab"
        if self.hook_id is None:
            return "hook_id", "is required for gitlab"
        return None


PROVIDER = Provider(
    name=NAME,
    # GitLab lists and resends a hook's events of the last 7 days.
    redelivery_horizon_days=7,
    scheme=SharedToken(
        SCHEME, TOKEN_HEADER, parse_secret=hmac_secret("a GitLab secret token must not be empty")
    ),
    envelope=envelope,
    sample_event=sample_event,
    reconcile=Reconciling(
        settings=GitLabReconcile,
        api_url="https://gitlab.com/api/v4",
        adapter="reconcile.providers.gitlab:GitLabAdapter",
        # Hooks run from a background queue and are logged after the request, which
        # may take up to the instance's webhook timeout (60 s at most): two minutes.
        settle_s=120.0,
    ),
)
