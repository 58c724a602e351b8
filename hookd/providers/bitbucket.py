"""Bitbucket Cloud: ``X-Hub-Signature: sha256=<hex HMAC-SHA256 of the raw body>``, keyed
with the webhook's secret.

Bitbucket signs no timestamp, so replays are bounded by deduplication on
``X-Request-UUID``: Bitbucket's automatic retries are further attempts of the same
request, counted by ``X-Attempt-Number``. ``X-Hook-UUID`` names the webhook, not the
event, and ``X-Event-Key`` (``repo:push``) is the event's type.

A webhook without a secret sends no signature; hookd always requires one.
"""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime

from hookd.providers.base import (
    Envelope,
    HeaderMap,
    Provider,
    Verified,
    checked_key,
    optional_header,
    parse_json_object,
    select_headers,
)
from hookd.providers.signatures import HmacHeader, hmac_secret, hmac_sha256_hex

NAME = "bitbucket"
SCHEME = "bitbucket-sha256"
SIGNATURE_HEADER = "x-hub-signature"
REQUEST_HEADER = "x-request-uuid"
EVENT_HEADER = "x-event-key"
KEPT_HEADERS = (
    EVENT_HEADER,
    "x-hook-uuid",
    REQUEST_HEADER,
    "x-attempt-number",
    "content-type",
    "user-agent",
)
SAMPLE_HOOK_UUID = "{1b8c5e73-4d0a-4a55-9a4f-2f6c0c9d2e11}"


def envelope(headers: HeaderMap, body: bytes, verified: Verified) -> Envelope:
    request_uuid = checked_key(optional_header(headers, REQUEST_HEADER), "X-Request-UUID")
    # Every Bitbucket payload is a JSON object; anything else is no Bitbucket event.
    parse_json_object(body)
    return Envelope(
        dedupe_key=request_uuid,
        type=optional_header(headers, EVENT_HEADER) or None,
        # Bitbucket's payloads carry no time of the event itself.
        occurred_at=None,
        headers=select_headers(headers, KEPT_HEADERS),
    )


def bitbucket_headers(secret: str, body: bytes, event: str, request: str) -> dict[str, str]:
    """The headers Bitbucket Cloud sends with ``body``, signed with ``secret``."""
    return {
        "X-Event-Key": event,
        "X-Hook-UUID": SAMPLE_HOOK_UUID,
        "X-Request-UUID": request,
        "X-Attempt-Number": "1",
        "X-Hub-Signature": "sha256=" + hmac_sha256_hex(secret.encode("utf-8"), body),
        "Content-Type": "application/json",
        "User-Agent": "Bitbucket-Webhooks/2.0",
    }


def sample_event(secret: str, seq: int, now: int) -> tuple[dict[str, str], bytes]:
    commit = (uuid.uuid4().hex + uuid.uuid4().hex)[:40]
    repository = {
        "type": "repository",
        "full_name": "hookd/hello-world",
        "name": "hello-world",
        "uuid": "{9f1d2b4a-7c3e-4e8a-b6d1-0a2b3c4d5e6f}",
        "links": {"html": {"href": "https://bitbucket.org/hookd/hello-world"}},
    }
    actor = {
        "type": "user",
        "display_name": "Hookd Tester",
        "uuid": "{4e5f6a7b-8c9d-4e0f-a1b2-c3d4e5f6a7b8}",
        "account_id": "557058:hookd-send-test",
    }
    payload = {
        "actor": actor,
        "repository": repository,
        "push": {
            "changes": [
                {
                    "new": {
                        "type": "branch",
                        "name": "main",
                        "target": {
                            "type": "commit",
                            "hash": commit,
                            "message": f"hookd send-test #{seq}\n",
                            "date": datetime.fromtimestamp(now, UTC).isoformat(),
                        },
                    },
                    "created": False,
                    "forced": False,
                    "closed": False,
                }
            ]
        },
    }
    body = json.dumps(payload).encode()
    return bitbucket_headers(secret, body, "repo:push", str(uuid.uuid4())), body


PROVIDER = Provider(
    name=NAME,
    # Bitbucket resends a failed request at most twice, right away.
    redelivery_horizon_days=1,
    scheme=HmacHeader(
        SCHEME,
        SIGNATURE_HEADER,
        prefix="sha256=",
        parse_secret=hmac_secret("a Bitbucket webhook secret must not be empty"),
    ),
    envelope=envelope,
    sample_event=sample_event,
)
