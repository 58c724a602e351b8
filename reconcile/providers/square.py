"""Square Events API ``POST /v2/events`` (Search events): the events created since
the window's start (``query.filter.created_at.start_at``), newest first
(``query.sort: DEFAULT, DESC``), a hundred a page, paged with the ``cursor`` of
each answer, sent with the original query as Square requires.

An event the Events API returns is the body its webhook carries (``merchant_id``,
``location_id``, ``type``, ``event_id``, ``created_at``, ``data``), so a repair needs
no further call. Square keeps events 28 days (the window is capped there), answers
only a personal access token (not an OAuth one), and lists only what happened while
events were enabled (``PUT /v2/events/enable``). It has no call that sends a webhook
again: a missing event is always stored from the list.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from datetime import datetime
from typing import Any

from hookd.errors import ReconcileError
from hookd.providers.base import text_or_none
from hookd.providers.rfc3339 import epoch, parse_rfc3339, utc_z
from hookd.providers.square import SquareReconcile
from hookd.sources import Source, api_url
from reconcile.http import Api
from reconcile.providers.base import Item, ListAdapter, settings_of
from store.events import NewEvent

RETENTION_S = 28 * 86_400
PAGE_LIMIT = 100
# The API version requests are written for (Square-Version).
SQUARE_VERSION = "2026-09-16"


def settings(source: Source) -> SquareReconcile:
    return settings_of(source, SquareReconcile)


class SquareAdapter(ListAdapter):
    def __init__(self, source: Source, api: Api, meta: Mapping[str, Any], now: float) -> None:
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

    def _query(self, start: float) -> dict[str, Any]:
        rc = self._rc
        wanted: dict[str, Any] = {"created_at": {"start_at": utc_z(start)}}
        if rc.event_types:
            wanted["event_types"] = list(rc.event_types)
        if rc.location_ids:
            wanted["location_ids"] = list(rc.location_ids)
        if rc.merchant_ids:
            wanted["merchant_ids"] = list(rc.merchant_ids)
        return {"filter": wanted, "sort": {"field": "DEFAULT", "order": "DESC"}}

    async def pages(self, since: float) -> AsyncIterator[list[Item]]:
        start = max(since, self._oldest_allowed)
        request: dict[str, Any] = {"limit": PAGE_LIMIT, "query": self._query(start)}
        while True:
            answer = (await self.api.request("POST", self._url, json=request)).json()
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
                when = epoch(created)
                if when >= start:
                    items.append(Item(key=event_id, time=when, obj=event))
            yield items
            cursor = answer.get("cursor")
            if not cursor:
                return
            request["cursor"] = cursor

    async def repair(self, item: Item, received_at: datetime) -> NewEvent:
        event = item.obj or {}
        occurred = parse_rfc3339(event.get("created_at"))
        return self.stored_json(
            item,
            event,
            type_=text_or_none(event.get("type")),
            occurred=None if occurred is None else occurred.timestamp(),
            how="reconcile:square-api",
            received_at=received_at,
        )
