"""Stripe ``GET /v1/events``: newest first, ``created[gte]``, paged with
``starting_after``; the listed event object is the event, so a repair needs no
further call. Stripe keeps events thirty days: the window is capped there.

The events API does not say what the receiver answered (an event has a count of
``pending_webhooks``, not its attempts), so there is no ack audit. The webhook
endpoint (``GET /v1/webhook_endpoints/{id}``, or the one of the list whose ``url``
is the source's ``public_url``) is the registration: its ``status``, ``url``,
``enabled_events`` and ``api_version``. Its events are compared with
``expect_events`` or, without it, with the types the source's handlers' and
destinations' ``types`` filters take (``invoice.*`` needs an ``invoice.`` event)."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Mapping
from datetime import datetime
from fnmatch import fnmatchcase
from typing import Any, TypedDict

from hookd.providers.base import string_or_none
from hookd.providers.stripe import StripeReconcile
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

RETENTION_S = 30 * 86_400
# Pages of 100 webhook endpoints looked through for the source's (Stripe allows 16).
ENDPOINT_PAGES = 5


class StripeEvent(TypedDict, total=False):
    """An event object, the fields read of it; it is kept whole (all its fields), the
    body of the repaired event."""

    id: str
    created: int
    type: str


class EventList(TypedDict, total=False):
    """``GET /v1/events``: a page of events, and whether more follow."""

    data: list[StripeEvent]
    has_more: bool


class WebhookEndpoint(TypedDict, total=False):
    """A webhook endpoint object, the fields compared with the source's settings."""

    id: str
    url: str
    status: str
    enabled_events: list[str]
    api_version: str | None


class EndpointList(TypedDict, total=False):
    """``GET /v1/webhook_endpoints``: a page of endpoints, and whether more follow."""

    data: list[WebhookEndpoint]
    has_more: bool


class StripeAdapter(ListAdapter):
    def __init__(self, source: Source, api: Api, meta: Mapping[str, str], now: float) -> None:
        super().__init__(source, api, meta, now)
        self._url = f"{api_url(source.config)}/v1/events"
        self._settings = settings_of(source, StripeReconcile)
        self._oldest_allowed = now - RETENTION_S + 60

    @staticmethod
    def auth_headers(source: Source) -> dict[str, str]:
        rc = source.config.reconcile
        assert rc is not None
        return {"Authorization": f"Bearer {rc.token or ''}", "Stripe-Version": "2024-06-20"}

    async def pages(self, since: float) -> AsyncIterator[list[Item]]:
        params: dict[str, str | int] = {
            "limit": 100,
            "created[gte]": int(max(since, self._oldest_allowed)),
        }
        while True:
            page: EventList = (await self.api.request("GET", self._url, params=params)).json()
            data = page.get("data", [])
            yield [
                Item(key=e["id"], time=float(e["created"]), obj=e)
                for e in data
                if isinstance(e.get("id"), str) and e["id"].startswith("evt_")
            ]
            if not page.get("has_more") or not data:
                return
            params["starting_after"] = data[-1]["id"]

    async def repair(self, item: Item, received_at: datetime) -> NewEvent:
        obj = item.obj or {}
        return self.stored_json(
            item,
            obj,
            type_=string_or_none(obj.get("type")),
            occurred=item.time,
            how="reconcile:stripe-api",
            received_at=received_at,
        )

    async def fetch_object(self, document: Any) -> Any:
        """A thin event's object from its ``related_object.url`` (a path of the API,
        ``/v1/…`` or ``/v2/…``); a snapshot event's ``data.object``, as it came."""
        doc = document if isinstance(document, dict) else {}
        related = doc.get("related_object")
        path = related.get("url") if isinstance(related, dict) else None
        wellformed = isinstance(path, str) and re.fullmatch(r"/v[12]/[A-Za-z0-9_./-]+", path)
        if wellformed and ".." not in str(path):
            url = f"{api_url(self.source.config)}{path}"
            return (await self.api.request("GET", url)).json()
        data = doc.get("data")
        return data.get("object") if isinstance(data, dict) else None

    async def registration(self) -> Registration:
        rc = self._settings
        if not rc.check_registration:
            return Registration(unchecked="check_registration = false")
        base = f"{api_url(self.source.config)}/v1/webhook_endpoints"
        if rc.webhook_endpoint is not None:
            endpoint = (await self.api.request("GET", f"{base}/{rc.webhook_endpoint}")).json()
            return endpoint_registration(self.source, endpoint)
        expected = self.source.config.public_url
        if expected is None:
            return Registration(
                unchecked="set the source's public_url or webhook_endpoint to say which "
                "webhook endpoint is hookd's"
            )
        params: dict[str, str | int] = {"limit": 100}
        for _ in range(ENDPOINT_PAGES):
            page: EndpointList = (await self.api.request("GET", base, params=params)).json()
            data = page.get("data", [])
            matching = [e for e in data if same_url(e.get("url"), expected)]
            if matching:
                # An enabled one if there are several (one may be a disabled leftover).
                matching.sort(key=lambda e: e.get("status") != "enabled")
                return endpoint_registration(self.source, matching[0])
            if not page.get("has_more") or not data:
                break
            params["starting_after"] = data[-1]["id"]
        return Registration(
            {"url": None},
            (f"no webhook endpoint posts to the source's public_url {shown_url(expected)}",),
        )


def endpoint_registration(source: Source, endpoint: WebhookEndpoint) -> Registration:
    """A webhook endpoint object (``GET /v1/webhook_endpoints/{id}``) against the
    source's ``public_url``, ``expect_events`` (without it, the types its handlers
    and destinations take) and ``expect_api_version``."""
    rc = settings_of(source, StripeReconcile)
    url, status = endpoint.get("url"), endpoint.get("status")
    events = list(endpoint.get("enabled_events") or [])
    version = endpoint.get("api_version")
    registered: dict[str, object] = {
        "id": endpoint.get("id"),
        "url": url,
        "status": status,
        "enabled_events": events,
        "api_version": version,
    }
    problems: list[str] = []
    if status != "enabled":
        problems.append(
            f"the webhook endpoint is {status or 'not enabled'}: Stripe sends it nothing"
        )
    expected = source.config.public_url
    if expected is not None and not same_url(url, expected):
        problems.append(
            f"the endpoint posts to {shown_url(url)}, not to the source's public_url "
            f"{shown_url(expected)}"
        )
    drift = events_drift(rc.expect_events, source, events, fnmatchcase, "the endpoint")
    if drift:
        problems.append(drift)
    wanted = rc.expect_api_version
    if wanted is not None and version != wanted:
        has = version or "the account's default version"
        problems.append(f"the endpoint renders events in API version {has}, not {wanted}")
    return Registration(registered, tuple(problems))
