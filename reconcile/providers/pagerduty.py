"""PagerDuty REST API ``GET /log_entries``: what happened to the account's incidents,
newest first, between ``since`` and ``until``, paged with ``offset``/``limit`` while
``more`` (``is_overview=true``: the important changes only; ``include[]=incidents``:
each entry's incident in full; ``team_ids[]`` when the source names teams).

What can be reconciled, and why only that: PagerDuty's API does not list webhook
deliveries, and a log entry's id ("Q02JTSNZWHSEKV") is not the ``event.id`` of the
webhook it gave rise to (a ULID or UUID), nor derivable from it. An incident is
triggered once, though, and its ``trigger_log_entry`` names it: both paths key an
``incident.triggered`` event ``incident.triggered:<incident id>``
(``hookd.providers.pagerduty``). Acknowledgements, resolutions and the other
events can happen many times to one incident and share no id with their log
entries: they are not reconciled (their webhooks keep ``event.id``).

A repair is the V3 webhook body rebuilt from the trigger entry and its incident:
``event.id`` is the log entry's id (the webhook's is not shown), ``occurred_at`` the
entry's ``created_at``, ``agent`` the entry's, ``client`` null, and ``data`` the
incident as the API shows it at the repair, its ``status`` set back to "triggered",
as it was when the webhook was sent.

The API does not say what the receiver answered: there is no ack audit. It shows
the webhook subscription (``GET /webhook_subscriptions``): its ``active`` flag, its
delivery URL and its events are the registration check.

``offset + limit`` may not pass 10,000 (PagerDuty's classic pagination): past that,
the run goes on below the oldest time seen (``until``) from offset 0.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from datetime import datetime
from fnmatch import fnmatchcase
from typing import TypedDict
from urllib.parse import urlencode

from hookd.errors import ReconcileError
from hookd.providers.pagerduty import TRIGGERED, PagerDutyReconcile, triggered_key
from hookd.providers.rfc3339 import epoch, utc_z
from hookd.sources import Source, api_url
from reconcile.http import Api
from reconcile.providers.base import (
    Item,
    ListAdapter,
    Registration,
    events_drift,
    same_url,
    settings_of,
    shown_url,
)
from store.intake.events import NewEvent

LIMIT = 100
# PagerDuty's classic pagination answers no further than this (offset + limit).
MAX_OFFSET_END = 10_000
TRIGGER_ENTRY = "trigger_log_entry"
# The fields of the incident a V3 webhook's ``data`` carries (an ``incident``).
INCIDENT_FIELDS = (
    "id",
    "type",
    "self",
    "html_url",
    "number",
    "status",
    "incident_key",
    "created_at",
    "title",
    "service",
    "assignees",
    "escalation_policy",
    "teams",
    "priority",
    "urgency",
    "conference_bridge",
    "resolve_reason",
)
SUBSCRIPTION_PAGES = 5


class LogEntry(TypedDict, total=False):
    """One entry of ``GET /log_entries``, the fields read of it."""

    id: str
    type: str
    created_at: str
    agent: object
    incident: dict[str, object]
    service: dict[str, object]


class LogEntryList(TypedDict, total=False):
    log_entries: list[LogEntry]
    more: bool
    offset: int
    limit: int


class DeliveryMethod(TypedDict, total=False):
    type: str
    url: str


class Subscription(TypedDict, total=False):
    """A webhook subscription, the fields compared with the source's settings."""

    id: str
    active: bool
    events: list[str]
    filter: dict[str, object]
    delivery_method: DeliveryMethod


class SubscriptionList(TypedDict, total=False):
    webhook_subscriptions: list[Subscription]
    more: bool


def settings(source: Source) -> PagerDutyReconcile:
    return settings_of(source, PagerDutyReconcile)


def _id_of(value: object) -> str | None:
    found = value.get("id") if isinstance(value, dict) else None
    return found if isinstance(found, str) and found else None


def webhook_incident(incident: Mapping[str, object]) -> dict[str, object]:
    """The incident as a V3 webhook's ``data`` shows it, from the REST API's incident:
    its fields, ``assignees`` from its assignments, ``status`` "triggered"."""
    data = {k: incident[k] for k in INCIDENT_FIELDS if k in incident}
    data["type"] = "incident"
    data["status"] = "triggered"
    if "assignees" not in data:
        assignments = incident.get("assignments")
        if isinstance(assignments, list):
            data["assignees"] = [
                a["assignee"] for a in assignments if isinstance(a, dict) and "assignee" in a
            ]
    return data


class PagerDutyAdapter(ListAdapter):
    def __init__(self, source: Source, api: Api, meta: Mapping[str, str], now: float) -> None:
        super().__init__(source, api, meta, now)
        self._rc = settings(source)
        self._base = api_url(source.config)
        self._now = now

    @staticmethod
    def auth_headers(source: Source) -> dict[str, str]:
        return {
            "Authorization": f"Token token={settings(source).token or ''}",
            "Accept": "application/vnd.pagerduty+json;version=2",
        }

    def _url(self, since: float, until: float, offset: int) -> str:
        query: list[tuple[str, str | int]] = [
            ("since", utc_z(since)),
            ("until", utc_z(until)),
            ("is_overview", "true"),
            ("include[]", "incidents"),
            ("limit", LIMIT),
            ("offset", offset),
            ("total", "false"),
        ]
        query += [("team_ids[]", team) for team in self._rc.team_ids]
        return f"{self._base}/log_entries?{urlencode(query)}"

    def _wanted(self, entry: LogEntry) -> bool:
        """A trigger of an incident of the source's services (any, unless it names some)."""
        if entry.get("type") != TRIGGER_ENTRY or _id_of(entry.get("incident")) is None:
            return False
        services = self._rc.service_ids
        if not services:
            return True
        incident = entry.get("incident") or {}
        service = _id_of(incident.get("service")) or _id_of(entry.get("service"))
        return service in services

    async def pages(self, since: float) -> AsyncIterator[list[Item]]:
        until, offset = self._now, 0
        seen: set[str] = set()
        while True:
            answer: LogEntryList = (
                await self.api.request("GET", self._url(since, until, offset))
            ).json()
            entries = answer["log_entries"]
            items: list[Item] = []
            oldest = until
            for entry in entries:
                when = epoch(entry["created_at"])
                oldest = min(oldest, when)
                if when < since or not self._wanted(entry):
                    continue
                key = triggered_key(str(_id_of(entry.get("incident"))))
                if key in seen:
                    continue
                seen.add(key)
                items.append(Item(key=key, time=when, ref=entry.get("id"), obj=entry))
            yield items
            if not answer.get("more") or not entries:
                return
            offset += len(entries)
            if offset + LIMIT > MAX_OFFSET_END:
                # Below the oldest seen, from the start: entries at that very time are
                # listed again (and passed over by ``seen``).
                if oldest + 1e-3 >= until:
                    # 10,000 entries within one millisecond: nothing lower to go on from.
                    raise ReconcileError(
                        "too_many_entries",
                        f"more than {MAX_OFFSET_END} log entries at {utc_z(oldest)}",
                    )
                until, offset = oldest + 1e-3, 0

    async def repair(self, item: Item, received_at: datetime) -> NewEvent:
        entry = item.obj or {}
        found = entry.get("incident")
        incident = found if isinstance(found, dict) else {}
        document = {
            "event": {
                "id": item.ref,
                "event_type": TRIGGERED,
                "resource_type": "incident",
                "occurred_at": entry.get("created_at"),
                "agent": entry.get("agent"),
                "client": None,
                "data": webhook_incident(incident),
            }
        }
        return self.stored_json(
            item,
            document,
            type_=TRIGGERED,
            occurred=item.time,
            how=f"reconcile:pagerduty-api;log_entry={item.ref}",
            received_at=received_at,
        )

    async def registration(self) -> Registration:
        rc = self._rc
        if not rc.check_registration:
            return Registration(unchecked="check_registration = false")
        base = f"{self._base}/webhook_subscriptions"
        if rc.webhook_subscription_id is not None:
            url = f"{base}/{rc.webhook_subscription_id}"
            answer = (await self.api.request("GET", url)).json()
            found = answer.get("webhook_subscription") if isinstance(answer, dict) else None
            return subscription_registration(self.source, found or {})
        expected = self.source.config.public_url
        if expected is None:
            return Registration(
                unchecked="set the source's public_url or webhook_subscription_id to say "
                "which webhook subscription is hookd's"
            )
        offset = 0
        for _ in range(SUBSCRIPTION_PAGES):
            query = urlencode({"limit": LIMIT, "offset": offset})
            page: SubscriptionList = (await self.api.request("GET", f"{base}?{query}")).json()
            subscriptions = page.get("webhook_subscriptions") or []
            matching = [s for s in subscriptions if same_url(_delivery_url(s), expected)]
            if matching:
                matching.sort(key=lambda s: s.get("active") is not True)
                return subscription_registration(self.source, matching[0])
            if not page.get("more") or not subscriptions:
                break
            offset += len(subscriptions)
        return Registration(
            {"url": None},
            (f"no webhook subscription posts to the source's public_url {shown_url(expected)}",),
        )


def _delivery_url(subscription: Subscription) -> object:
    method = subscription.get("delivery_method")
    return method.get("url") if isinstance(method, dict) else None


def _covers(event: str, glob: str) -> bool:
    return fnmatchcase(event, glob)


def subscription_registration(source: Source, subscription: Subscription) -> Registration:
    """A webhook subscription against the source's ``public_url``, ``expect_events``
    (without it, the types its handlers and destinations take), and the one event
    reconciliation needs it to send (``incident.triggered``)."""
    rc = settings(source)
    url = _delivery_url(subscription)
    events: Sequence[str] = [e for e in subscription.get("events") or [] if isinstance(e, str)]
    active = subscription.get("active")
    registered: dict[str, object] = {
        "id": subscription.get("id"),
        "url": url,
        "active": active,
        "events": list(events),
        "filter": subscription.get("filter"),
    }
    problems: list[str] = []
    if active is not True:
        problems.append("the webhook subscription is not active: PagerDuty sends it nothing")
    expected = source.config.public_url
    if expected is not None and not same_url(url, expected):
        problems.append(
            f"the subscription posts to {shown_url(url)}, not to the source's public_url "
            f"{shown_url(expected)}"
        )
    drift = events_drift(rc.expect_events, source, events, _covers, "the subscription")
    if drift:
        problems.append(drift)
    if TRIGGERED not in events:
        problems.append(
            f"the subscription does not send {TRIGGERED}, the one event reconciliation checks"
        )
    scope = scope_drift(rc, subscription.get("filter"))
    if scope:
        problems.append(scope)
    return Registration(registered, tuple(problems))


def scope_drift(rc: PagerDutyReconcile, scope: object) -> str | None:
    """Whether the incidents reconciliation checks (``service_ids``, ``team_ids``) are
    those the subscription's filter sends: a trigger it never sends would be stored as
    missed."""
    kind = scope.get("type") if isinstance(scope, dict) else None
    ident = _id_of(scope)
    if kind == "service_reference" and ident is not None and rc.service_ids != (ident,):
        return (
            f"the subscription sends the incidents of service {ident} only: set "
            f'service_ids = ["{ident}"], or triggers of other services are stored as missed'
        )
    if kind == "team_reference" and ident is not None and rc.team_ids != (ident,):
        return (
            f"the subscription sends the incidents of team {ident} only: set "
            f'team_ids = ["{ident}"], or triggers of other teams are stored as missed'
        )
    return None
