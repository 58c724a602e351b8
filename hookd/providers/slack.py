"""Slack: ``X-Slack-Signature: v0=<hex>`` over ``"v0:{timestamp}:" + body``.

Channel messages are keyed ``msg:{team}:{channel}:{ts}`` so that a message that
arrives by webhook and the same message found by ``conversations.history``
collide; every other Events API callback is keyed by its ``event_id``, which
Slack keeps across its retries (``X-Slack-Retry-Num``).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from urllib.parse import parse_qs

from pydantic import Field

from hookd.errors import PayloadError
from hookd.providers.base import (
    BodySigner,
    Envelope,
    HeaderMap,
    JsonObject,
    Provider,
    Reply,
    Verified,
    checked_key,
    epoch_to_datetime,
    media_type,
    parse_json_object,
    select_headers,
)
from hookd.providers.reconciling import ReconcileConfig, Reconciling
from hookd.providers.signatures import TimestampedSignature, hmac_sha256_hex

SIGNATURE_HEADER = "x-slack-signature"
TIMESTAMP_HEADER = "x-slack-request-timestamp"
KEPT_HEADERS = (
    "x-slack-request-timestamp",
    "x-slack-retry-num",
    "x-slack-retry-reason",
    "content-type",
    "user-agent",
)

# Message subtypes that conversations.history also returns as channel messages.
# Edits and deletions (message_changed, message_deleted, message_replied) are
# events about a message, not messages, and keep their event_id key.
HISTORY_SUBTYPES = frozenset(
    {
        "bot_message",
        "me_message",
        "file_share",
        "thread_broadcast",
        "channel_join",
        "channel_leave",
        "channel_topic",
        "channel_purpose",
        "channel_name",
        "channel_archive",
        "channel_unarchive",
        "group_join",
        "group_leave",
        "group_topic",
        "group_purpose",
        "group_name",
        "group_archive",
        "group_unarchive",
        "pinned_item",
        "unpinned_item",
        "reminder_add",
        "tombstone",
    }
)


def message_key(team: str, channel: str, ts: str) -> str:
    """The dedupe key of a channel message, shared with reconciliation."""
    return f"msg:{team}:{channel}:{ts}"


def is_history_message(event: Mapping[str, object]) -> bool:
    if event.get("type") != "message":
        return False
    subtype = event.get("subtype")
    return subtype is None or (isinstance(subtype, str) and subtype in HISTORY_SUBTYPES)


def envelope(headers: HeaderMap, body: bytes, verified: Verified) -> Envelope:
    kept = select_headers(headers, KEPT_HEADERS)
    if media_type(headers) == "application/x-www-form-urlencoded":
        return _form_envelope(body, kept)
    payload = parse_json_object(body)
    kind = payload.get("type")
    if kind == "url_verification":
        challenge = payload.get("challenge")
        if not isinstance(challenge, str):
            raise PayloadError("malformed_payload", "url_verification without a challenge")
        answer = Reply.json({"challenge": challenge})
        return Envelope("", "url_verification", None, kept, reply=answer)
    if kind == "app_rate_limited":
        team = checked_key(payload.get("team_id"), "team_id")
        minute = payload.get("minute_rate_limited")
        return Envelope(
            checked_key(f"app_rate_limited:{team}:{minute}", "minute_rate_limited"),
            "app_rate_limited",
            epoch_to_datetime(minute),
            kept,
        )
    if kind != "event_callback":
        raise PayloadError("malformed_payload", "unsupported Slack payload type")
    event = payload.get("event")
    if not isinstance(event, dict):
        raise PayloadError("malformed_payload", "event_callback without an event")
    event_type = event.get("type")
    return Envelope(
        dedupe_key=_callback_key(payload, event),
        type=event_type if isinstance(event_type, str) else None,
        occurred_at=epoch_to_datetime(payload.get("event_time")),
        headers=kept,
    )


def _callback_key(payload: JsonObject, event: JsonObject) -> str:
    """A channel message's key (``message_key``), any other callback's ``event_id``."""
    if is_history_message(event):
        team_id = payload.get("team_id") or event.get("team")
        channel, ts = event.get("channel"), event.get("ts")
        if isinstance(team_id, str) and isinstance(channel, str) and isinstance(ts, str):
            return checked_key(message_key(team_id, channel, ts), "message key")
    return checked_key(payload.get("event_id"), "event_id")


def _form_envelope(body: bytes, kept: dict[str, str]) -> Envelope:
    """Slash commands and interactivity payloads, keyed by their ``trigger_id``."""
    try:
        fields = parse_qs(body.decode("utf-8"), strict_parsing=True, errors="strict")
    except (UnicodeDecodeError, ValueError):
        raise PayloadError("malformed_payload", "form body cannot be parsed") from None
    trigger: object
    if "payload" in fields:
        if len(fields["payload"]) != 1:
            raise PayloadError("malformed_payload", "form body needs exactly one payload field")
        payload = parse_json_object(fields["payload"][0])
        kind = payload.get("type")
        trigger = payload.get("trigger_id") or payload.get("action_ts")
    else:
        kind = "slash_command" if "command" in fields else None
        triggers = fields.get("trigger_id", [])
        trigger = triggers[0] if triggers else None
    return Envelope(
        dedupe_key=checked_key(f"trigger:{trigger}" if trigger else None, "trigger_id"),
        type=kind if isinstance(kind, str) else None,
        occurred_at=None,
        headers=kept,
    )


def slack_headers(secret: str, body: bytes, now: int) -> dict[str, str]:
    """The headers Slack sends with ``body`` at ``now``, signed with ``secret``."""
    signature = hmac_sha256_hex(secret.encode(), f"v0:{now}:".encode() + body)
    return {
        "X-Slack-Request-Timestamp": str(now),
        "X-Slack-Signature": f"v0={signature}",
        "Content-Type": "application/json",
    }


def sample_event(secret: str, seq: int, now: int) -> tuple[dict[str, str], bytes]:
    unique = uuid.uuid4()
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


def sign_body(secret: str, body: bytes, _type: str | None, now: int) -> dict[str, str]:
    return slack_headers(secret, body, now)


class SlackReconcile(ReconcileConfig):
    """``[sources.reconcile]`` of a Slack source: the channels to read, and how fast."""

    channels: tuple[str, ...] = ()
    requests_per_minute: float = Field(default=1.0, gt=0, le=10_000)
    # How far back conversations.history reaches, in days: by the workspace's plan and
    # retention settings. 90: a free workspace's visible history; paid plans keep more.
    retention_days: float = Field(default=90.0, gt=0, le=36_500, allow_inf_nan=False)

    def incomplete(self) -> tuple[str, str] | None:
        missing = super().incomplete()
        if missing is None and not self.channels:
            return "channels", "is required for slack"
        return missing

    def list_retention_days(self) -> float | None:
        return self.retention_days


PROVIDER = Provider(
    name="slack",
    # Slack retries three times within minutes; conversations.history reaches as far back
    # as the source's lookback_s, which the retention check adds.
    redelivery_horizon_days=1,
    scheme=TimestampedSignature(
        "slack-v0",
        SIGNATURE_HEADER,
        TIMESTAMP_HEADER,
        "v0=",
        prefix="v0=",
        signed_prefix="v0:{ts}:",
    ),
    envelope=envelope,
    sample_event=sample_event,
    body_signer=BodySigner(sign_body, type_path=("event", "type")),
    reconcile=Reconciling(
        settings=SlackReconcile,
        api_url="https://slack.com/api",
        adapter="reconcile.providers.slack:SlackAdapter",
        # Slack retries a failed delivery three times: at once, after a minute and
        # after five minutes. Six minutes: a message judged missing was given up on.
        settle_s=360.0,
    ),
)
