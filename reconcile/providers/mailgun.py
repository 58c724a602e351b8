"""Mailgun ``GET /v3/{domain}/events``: the domain's events, newest first (``begin`` the
run's start, ``end`` the window's, ``ascending=no``), up to 300 a page, paged by
following each answer's ``paging.next`` URL until a page comes back empty.

A listed event is the ``event-data`` of its webhook, with the same ``id``: the key the
receiver stores a webhook under, so a repair and a late webhook deduplicate on it. A
repair stores ``{"event-data": <the listed event>}``, the webhook's body without its
``signature`` block (a repaired event was never signed: ``verified_with`` says it came
from the API). Mailgun lists events for a time that depends on the account's plan
(``log_retention_days``; the window is capped there), and warns that an event may take
up to half an hour to be listed (hence the provider's settle window). Mailgun has no
call that posts a webhook again, and the events API does not say what a webhook's
receiver answered: there is no ack audit.

The registration is the domain's webhooks (``GET /v3/domains/{domain}/webhooks``):
each webhook name (``delivered``, ``opened``…) and the URLs it posts to. The check
wants the source's ``public_url`` among them: for every name of ``expect_events``, or,
without it, for at least one.
"""

from __future__ import annotations

import base64
import math
from collections.abc import AsyncIterator, Mapping
from datetime import datetime
from typing import TypedDict
from urllib.parse import quote

from hookd.providers.base import bounded_type
from hookd.providers.mailgun import MailgunReconcile
from hookd.sources import Source, api_url
from reconcile.http import Api
from reconcile.providers.base import (
    Item,
    ListAdapter,
    Registration,
    same_url,
    settings_of,
    shown_url,
)
from store.intake.events import NewEvent

PAGE_LIMIT = 300


class MailgunEvent(TypedDict, total=False):
    """One listed event, the fields read of it; it is kept whole, the ``event-data`` of
    the repaired event's body."""

    id: str
    event: str
    timestamp: float


class _Paging(TypedDict, total=False):
    next: str
    previous: str
    first: str
    last: str


class EventPage(TypedDict, total=False):
    """``GET /v3/{domain}/events``: a page of events, and the URLs of the next ones."""

    items: list[MailgunEvent]
    paging: _Paging


class _Hook(TypedDict, total=False):
    urls: list[str]
    url: str


class DomainWebhooks(TypedDict, total=False):
    """``GET /v3/domains/{domain}/webhooks``: each webhook name and where it posts."""

    webhooks: dict[str, _Hook]


def settings(source: Source) -> MailgunReconcile:
    return settings_of(source, MailgunReconcile)


def event_time(event: Mapping[str, object]) -> float | None:
    """The event's ``timestamp`` (unix seconds, a float), or None."""
    value = event.get("timestamp")
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


class MailgunAdapter(ListAdapter):
    def __init__(self, source: Source, api: Api, meta: Mapping[str, str], now: float) -> None:
        super().__init__(source, api, meta, now)
        self._rc = settings(source)
        assert self._rc.domain is not None
        self._domain = self._rc.domain
        self._base = api_url(source.config)
        self._now = now

    @staticmethod
    def auth_headers(source: Source) -> dict[str, str]:
        key = settings(source).token or ""
        basic = base64.b64encode(f"api:{key}".encode()).decode("ascii")
        return {"Authorization": f"Basic {basic}"}

    async def pages(self, since: float) -> AsyncIterator[list[Item]]:
        url = f"{self._base}/v3/{quote(self._domain, safe='')}/events"
        # Unix seconds, ``begin`` after ``end``: newest first.
        params: dict[str, str | int | float] | None = {
            "begin": math.ceil(self._now),
            "end": math.floor(since),
            "ascending": "no",
            "limit": PAGE_LIMIT,
        }
        while True:
            if params is None:
                response = await self.api.request("GET", url)
            else:
                response = await self.api.request("GET", url, params=params)
            page: EventPage = response.json()
            events = page.get("items") or []
            if not events:
                return
            items: list[Item] = []
            oldest = float("inf")
            for event in events:
                key, when = event.get("id"), event_time(event)
                if not isinstance(key, str) or not key or when is None:
                    continue
                oldest = min(oldest, when)
                if when >= since:
                    items.append(Item(key=key, time=when, obj=event))
            yield items
            # Newest first: a page that reaches past the window's start is its last one,
            # should ``end`` not have been applied.
            if oldest < since:
                return
            following = (page.get("paging") or {}).get("next")
            if not isinstance(following, str) or not following:
                return
            # The next page's URL holds its own query (Mailgun's page token).
            url, params = following, None

    async def repair(self, item: Item, received_at: datetime) -> NewEvent:
        event = dict(item.obj or {})
        return self.stored_json(
            item,
            {"event-data": event},
            type_=bounded_type(event.get("event")),
            occurred=item.time,
            how="reconcile:mailgun-api",
            received_at=received_at,
        )

    async def registration(self) -> Registration:
        rc = self._rc
        if not rc.check_registration:
            return Registration(unchecked="check_registration = false")
        expected = self.source.config.public_url
        if expected is None:
            return Registration(
                unchecked="set the source's public_url to say which webhook URL is hookd's"
            )
        url = f"{self._base}/v3/domains/{quote(self._domain, safe='')}/webhooks"
        answer: DomainWebhooks = (await self.api.request("GET", url)).json()
        hooks = answer.get("webhooks") or {}
        posting: dict[str, list[str]] = {}
        for name, hook in hooks.items():
            urls = hook.get("urls") if isinstance(hook, dict) else None
            if not isinstance(urls, list):
                single = hook.get("url") if isinstance(hook, dict) else None
                urls = [single] if isinstance(single, str) else []
            posting[name] = [u for u in urls if isinstance(u, str)]
        ours = sorted(
            name for name, urls in posting.items() if any(same_url(u, expected) for u in urls)
        )
        registered: dict[str, object] = {
            "domain": self._domain,
            "webhooks": {name: [shown_url(u) for u in urls] for name, urls in posting.items()},
        }
        problems: list[str] = []
        if rc.expect_events:
            lacking = [name for name in rc.expect_events if name not in ours]
            if lacking:
                problems.append(
                    f"the domain's {', '.join(lacking)} webhook does not post to the "
                    f"source's public_url {shown_url(expected)}"
                )
        elif not ours:
            problems.append(
                f"no webhook of the domain posts to the source's public_url {shown_url(expected)}"
            )
        return Registration(registered, tuple(problems))
