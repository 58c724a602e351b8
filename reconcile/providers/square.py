"""Square Events API ``POST /v2/events`` (Search events): the events created since
the window's start (``query.filter.created_at.start_at``), newest first
(``query.sort: DEFAULT, DESC``), a hundred a page, paged with the ``cursor`` of
each answer, sent with the original query as Square requires.

An event the Events API returns is the body its webhook carries (``merchant_id``,
``location_id``, ``type``, ``event_id``, ``created_at``, ``data``), so a repair needs
no further call. Its ``created_at`` may come without a zone (Square's own example:
``2022-04-26T10:08:40.454726``): it is read as UTC, both to place it in the window
and as the stored event's ``occurred_at``. Square keeps events 28 days (the window
is capped there), answers only a personal access token (not an OAuth one), and
lists only what happened while events were enabled (``PUT /v2/events/enable``). It
has no call that sends a webhook again: a missing event is always stored from the
list.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from datetime import datetime
from typing import NotRequired, TypedDict

from hookd.errors import ReconcileError
from hookd.providers.base import text_or_none
from hookd.providers.rfc3339 import utc_z
from hookd.providers.square import SquareReconcile, created_at
from hookd.sources import Source, api_url
from reconcile.http import Api
from reconcile.providers.base import Item, ListAdapter, settings_of
from store.intake.events import NewEvent

RETENTION_S = 28 * 86_400
PAGE_LIMIT = 100
# The API version requests are written for (Square-Version).
SQUARE_VERSION = "2026-09-16"


class _TimeRange(TypedDict):
    start_at: str


class _Filter(TypedDict):
    created_at: _TimeRange
    event_types: NotRequired[list[str]]
    location_ids: NotRequired[list[str]]
    merchant_ids: NotRequired[list[str]]


class _Sort(TypedDict):
    field: str
    order: str


class _Query(TypedDict):
    filter: _Filter
    sort: _Sort


class SearchEvents(TypedDict):
    """The body of ``POST /v2/events``: the query, and the cursor of the page before."""

    limit: int
    query: _Query
    cursor: NotRequired[str]


class _Error(TypedDict, total=False):
    code: str
    detail: str


class SearchAnswer(TypedDict, total=False):
    """Its answer: the events (each kept whole, the body of the repaired one), the
    next page's cursor, or errors."""

    events: list[dict[str, object]] | None
    cursor: str
    errors: list[_Error]


def settings(source: Source) -> SquareReconcile:
    return settings_of(source, SquareReconcile)


class SquareAdapter(ListAdapter):
    def __init__(self, source: Source, api: Api, meta: Mapping[str, str], now: float) -> None:
        super().__init__(source, api, meta, now)
        self._url = f"{api_url(source.config)}/v2/events"
        self._oldest_allowed = now - RETENTION_S + 60
        self._rc = settings(source)

    @staticmethod
    def auth_headers(source: Source) -> dict[str, str]:
        return {
            "Authorization": f"Bearer {settings(source).token or ''}",
            "Square-Version": SQUARE_VERSION,
        }

    def _query(self, start: float) -> _Query:
        rc = self._rc
        wanted: _Filter = {"created_at": {"start_at": utc_z(start)}}
        if rc.event_types:
            wanted["event_types"] = list(rc.event_types)
        if rc.location_ids:
            wanted["location_ids"] = list(rc.location_ids)
        if rc.merchant_ids:
            wanted["merchant_ids"] = list(rc.merchant_ids)
        return {"filter": wanted, "sort": {"field": "DEFAULT", "order": "DESC"}}

    async def pages(self, since: float) -> AsyncIterator[list[Item]]:
        start = max(since, self._oldest_allowed)
        request: SearchEvents = {"limit": PAGE_LIMIT, "query": self._query(start)}
        while True:
            answer: SearchAnswer = (await self.api.request("POST", self._url, json=request)).json()
            errors = answer.get("errors")
            if errors:
                first = errors[0] if isinstance(errors[0], dict) else {}
                raise ReconcileError(
                    "provider_refused", f"Square {first.get('code')}: {first.get('detail')}"
                )
            items = []
            for event in answer.get("events") or []:
                event_id, created = event.get("event_id"), event.get("created_at")
                if not isinstance(event_id, str) or not isinstance(created, str):
                    continue
                moment = created_at(created)
                if moment is None:
                    raise ReconcileError(
                        "bad_answer", f"Square listed event {event_id} with created_at {created!r}"
                    )
                when = moment.timestamp()
                if when >= start:
                    items.append(Item(key=event_id, time=when, obj=event))
            yield items
            cursor = answer.get("cursor")
            if not cursor:
                return
            request["cursor"] = cursor

    async def repair(self, item: Item, received_at: datetime) -> NewEvent:
        event = item.obj or {}
        occurred = created_at(event.get("created_at"))
        return self.stored_json(
            item,
            event,
            type_=text_or_none(event.get("type")),
            occurred=None if occurred is None else occurred.timestamp(),
            how="reconcile:square-api",
            received_at=received_at,
        )
