"""Stripe ``GET /v1/events``: newest first, ``created[gte]``, paged with
``starting_after``; the listed event object is the event, so a repair needs no
further call. Stripe keeps events thirty days: the window is capped there."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from datetime import datetime
from typing import Any

from hookd.sources import Source, api_url
from reconcile.http import Api
from reconcile.providers.base import Item, ListAdapter, reconciled
from store.events import NewEvent

RETENTION_S = 30 * 86_400


class StripeAdapter(ListAdapter):
    def __init__(self, source: Source, api: Api, meta: Mapping[str, Any], now: float) -> None:
        super().__init__(source, api, meta, now)
        self._url = f"{api_url(source.config)}/v1/events"
        self._oldest_allowed = now - RETENTION_S + 60

    @staticmethod
    def auth_headers(source: Source) -> dict[str, str]:
        rc = source.config.reconcile
        assert rc is not None
        return {"Authorization": f"Bearer {rc.token or ''}", "Stripe-Version": "2024-06-20"}

    async def pages(self, since: float) -> AsyncIterator[list[Item]]:
        params: dict[str, Any] = {
            "limit": 100,
            "created[gte]": int(max(since, self._oldest_allowed)),
        }
        while True:
            page = (await self.api.request("GET", self._url, params=params)).json()
            data: list[dict[str, Any]] = page.get("data", [])
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
        kind = obj.get("type")
        return reconciled(
            source=self.source.name,
            provider="stripe",
            key=item.key,
            type_=kind if isinstance(kind, str) else None,
            occurred=item.time,
            headers={"content-type": "application/json"},
            body=json.dumps(obj, separators=(",", ":")).encode(),
            how="reconcile:stripe-api",
            received_at=received_at,
        )
