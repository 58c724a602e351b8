"""PagerDuty (v3 webhooks): ``X-PagerDuty-Signature: v1=<hex>[,v1=<hex>…]``, each the
hex HMAC-SHA256 of the raw body under one of the subscription's secrets.

Several ``v1`` entries appear while a secret is being rotated; any may match. Entries of
other versions are passed over, as PagerDuty's verification steps say, and so is a
``v1`` entry that is no lower-case SHA-256 hex digest: it never verifies, but cannot
spoil a valid entry beside it.

PagerDuty signs no timestamp, so replays are bounded by deduplication on ``event.id``,
which is inside the signed body (``X-Webhook-Id``, also repeated on each attempt, is
kept with the event but is not signed). Each payload holds exactly one event.

One exception, for reconciliation: an ``incident.triggered`` event is keyed
``incident.triggered:<incident id>`` (its ``event.data.id``), not by its ``event.id``.
PagerDuty's REST API never shows a webhook event's id (its log entries have ids of
their own), but it does list each incident's trigger (a ``trigger_log_entry`` naming
the incident), and an incident is triggered once: the key is one both paths can
compute. It is as signed as ``event.id`` (it is in the body too), so replays and
retries still dedupe. Every other event type keeps ``event.id``.
"""

from __future__ import annotations

import dataclasses
import re
import secrets
from datetime import UTC, datetime
from typing import Annotated

from pydantic import AfterValidator

from hookd.providers.base import (
    Envelope,
    HeaderMap,
    JsonEnvelope,
    Provider,
    Verified,
    bounded_type,
    checked_key,
    compact_json,
    parse_json_object,
)
from hookd.providers.reconciling import EventNames, ReconcileConfig, Reconciling, matching
from hookd.providers.rfc3339 import parse_isoformat
from hookd.providers.signatures import HmacEntries, hmac_secret, hmac_sha256_hex

NAME = "pagerduty"
SIGNATURE_HEADER = "x-pagerduty-signature"
KEPT_HEADERS = ("x-webhook-id", "x-webhook-subscription", "content-type", "user-agent")
# The one event type whose key both the webhook and the REST API can name.
TRIGGERED = "incident.triggered"
# PagerDuty's object IDs ("PT4KHLK", "Q02JTSNZWHSEKV").
OBJECT_ID = r"[A-Z0-9]{1,32}"


def triggered_key(incident_id: str) -> str:
    """The dedupe key of an incident's ``incident.triggered`` event."""
    return f"{TRIGGERED}:{incident_id}"


_FIELDS = JsonEnvelope(
    key=("id", "event.id"),
    type=("event_type", bounded_type),
    time=("occurred_at", parse_isoformat),
    inside="event",
    kept=KEPT_HEADERS,
)


def envelope(headers: HeaderMap, body: bytes, verified: Verified) -> Envelope:
    """``event.id`` as the key (see above: an ``incident.triggered`` event is keyed by
    its incident instead), ``event.event_type`` and ``event.occurred_at``."""
    found = _FIELDS(headers, body, verified)
    if found.type != TRIGGERED:
        return found
    data = parse_json_object(body).get("event")
    incident = data.get("data") if isinstance(data, dict) else None
    incident_id = incident.get("id") if isinstance(incident, dict) else None
    if not isinstance(incident_id, str) or not incident_id:
        return found
    key = checked_key(triggered_key(incident_id), "event.data.id")
    return dataclasses.replace(found, dedupe_key=key)


def _object_ids(value: tuple[str, ...]) -> tuple[str, ...]:
    for item in value:
        if not re.fullmatch(OBJECT_ID, item):
            raise ValueError(f"{item!r} is not a PagerDuty ID (upper-case letters and digits)")
    return value


ObjectIds = Annotated[tuple[str, ...], AfterValidator(_object_ids)]


class PagerDutyReconcile(ReconcileConfig):
    """``[sources.reconcile]`` of a PagerDuty source: a REST API key that reads log
    entries (and webhook subscriptions, for the registration check), which incidents
    the subscription sends (``service_ids``, ``team_ids``: all of the account's when
    neither is set), and what the registration check compares."""

    # The incidents' services the subscription's filter takes (checked on our side).
    service_ids: ObjectIds = ()
    # The teams (asked of the API: ``team_ids[]``).
    team_ids: ObjectIds = ()
    # The subscription ("P…"); without it, the one whose URL is the source's public_url.
    webhook_subscription_id: Annotated[
        str | None, matching(OBJECT_ID, 'must be a webhook subscription ID ("PY1OL64")')
    ] = None
    expect_events: EventNames = ()
    check_registration: bool = True


def pagerduty_headers(secret: str, body: bytes) -> dict[str, str]:
    """The headers PagerDuty sends with ``body``, signed with ``secret``."""
    return {
        "X-PagerDuty-Signature": f"v1={hmac_sha256_hex(secret.encode('utf-8'), body)}",
        "X-Webhook-Id": secrets.token_hex(16),
        "X-Webhook-Subscription": "PHOOKD1",
        "Content-Type": "application/json",
        "User-Agent": "PagerDuty-Webhook/V3.0",
    }


def sample_event(secret: str, seq: int, now: int) -> tuple[dict[str, str], bytes]:
    """An ``incident.triggered`` event, signed as PagerDuty signs it."""
    occurred = datetime.fromtimestamp(now, UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z")
    # A fresh incident each time: its trigger is keyed by the incident's id.
    incident = "Q" + secrets.token_hex(6).upper()
    payload = {
        "event": {
            "id": "01" + secrets.token_hex(12).upper(),
            "event_type": "incident.triggered",
            "resource_type": "incident",
            "occurred_at": occurred,
            "agent": None,
            "client": None,
            "data": {
                "id": incident,
                "type": "incident",
                "self": f"https://api.pagerduty.com/incidents/{incident}",
                "number": seq,
                "status": "triggered",
                "title": f"hookd send-test #{seq}",
                "urgency": "high",
                "created_at": occurred,
                "service": {
                    "id": "PHOOKD2",
                    "summary": "hookd",
                    "type": "service_reference",
                },
            },
        }
    }
    body = compact_json(payload)
    return pagerduty_headers(secret, body), body


PROVIDER = Provider(
    name=NAME,
    # PagerDuty retries up to 5 attempts over about 20 minutes.
    redelivery_horizon_days=1,
    # An entry without "=" or of another version is passed over, as PagerDuty says.
    scheme=HmacEntries(
        "pagerduty-v1",
        SIGNATURE_HEADER,
        ",",
        "v1",
        strict=False,
        parse_secret=hmac_secret("a PagerDuty webhook subscription secret is empty"),
    ),
    envelope=envelope,
    sample_event=sample_event,
    # Its log entries list each incident's trigger: incident.triggered is reconciled.
    reconcile=Reconciling(
        settings=PagerDutyReconcile,
        api_url="https://api.pagerduty.com",
        adapter="reconcile.providers.pagerduty:PagerDutyAdapter",
        # Five attempts over about twenty minutes, with room for skew: half an hour.
        settle_s=1800.0,
        # PagerDuty documents no limit to its log: hookd looks back half a year at most.
        retention_days=180,
        registration=True,
    ),
)
