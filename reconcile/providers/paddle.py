"""Paddle Billing ``GET /notifications``: the notifications of one notification
destination (``notification_setting_id``), newest first (``order_by=id[DESC]``),
from the window's start (``from``), paged with ``after`` (the last ID of a page)
while ``meta.pagination.has_more``.

A notification's ``payload`` is the webhook body Paddle sent, so a repair needs no
further call. Replays are notifications of their own (``origin: replay``) with the
event's ``event_id``: only the event's first notification (``origin: event``) is
listed, one item per event. With ``repair = "redeliver"`` a missing event is
replayed (``POST /notifications/{id}/replay``), which Paddle allows only for a
notification it has ``delivered`` or that ``failed``; one it is still delivering
(``not_attempted``, ``needs_retry``) is left to Paddle's own retries. Paddle keeps
notifications ninety days: the window is capped there.

A notification's ``status`` is ``delivered`` once the destination answered it with
a 2xx: each such notification of an event (its replays too) is noted for the ack
audit.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Mapping
from datetime import datetime
from typing import NotRequired, TypedDict

from hookd.providers.base import text_or_none
from hookd.providers.paddle import PaddleReconcile
from hookd.providers.rfc3339 import epoch, parse_rfc3339, utc_z
from hookd.sources import Source, api_url
from reconcile.http import Api
from reconcile.providers.base import Item, ListAdapter, settings_of
from store.intake.events import NewEvent
from store.reconcile.audit import Acked

log = logging.getLogger("hookd.reconcile")

RETENTION_S = 90 * 86_400
PER_PAGE = 200
API_VERSION = "1"
REPLAYABLE = frozenset({"delivered", "failed"})


class Payload(TypedDict, total=False):
    """A notification's ``payload``, the webhook body Paddle sent: the fields read of
    it (it is kept whole, the body of the repaired event)."""

    event_id: str
    event_type: str
    occurred_at: str


class Notification(TypedDict, total=False):
    """One notification of ``GET /notifications``, the fields read of it."""

    id: str
    occurred_at: str
    delivered_at: str | None
    status: str
    origin: str
    payload: Payload


class _Pagination(TypedDict, total=False):
    has_more: bool


class _Meta(TypedDict, total=False):
    pagination: _Pagination


class NotificationList(TypedDict):
    """``GET /notifications``: a page of notifications, and whether more follow."""

    data: list[Notification]
    meta: NotRequired[_Meta]


def settings(source: Source) -> PaddleReconcile:
    return settings_of(source, PaddleReconcile)


class PaddleAdapter(ListAdapter):
    def __init__(self, source: Source, api: Api, meta: Mapping[str, str], now: float) -> None:
        super().__init__(source, api, meta, now)
        rc = settings(source)
        assert rc.notification_setting_id is not None
        self._setting = rc.notification_setting_id
        self._redeliver = rc.repair == "redeliver"
        self._url = f"{api_url(source.config)}/notifications"
        self._oldest_allowed = now - RETENTION_S + 60

    @staticmethod
    def auth_headers(source: Source) -> dict[str, str]:
        return {
            "Authorization": f"Bearer {settings(source).token or ''}",
            "Paddle-Version": API_VERSION,
        }

    @property
    def redelivers(self) -> bool:
        return self._redeliver

    async def pages(self, since: float) -> AsyncIterator[list[Item]]:
        start = max(since, self._oldest_allowed)
        params: dict[str, str | int] = {
            "notification_setting_id": self._setting,
            "from": utc_z(start),
            "order_by": "id[DESC]",
            "per_page": PER_PAGE,
        }
        seen: set[str] = set()
        while True:
            answer: NotificationList = (
                await self.api.request("GET", self._url, params=params)
            ).json()
            notifications = answer["data"]
            items: list[Item] = []
            newest = float("-inf")
            for n in notifications:
                when = epoch(n["occurred_at"])
                newest = max(newest, when)
                payload = n.get("payload") or {}
                event_id = payload.get("event_id")
                if when >= start and isinstance(event_id, str) and n.get("status") == "delivered":
                    at = parse_rfc3339(n.get("delivered_at"))
                    self.note_acked(Acked(event_id, n.get("id"), None, at))
                if (
                    when < start
                    or n.get("origin") != "event"
                    or not isinstance(event_id, str)
                    or event_id in seen
                ):
                    continue
                seen.add(event_id)
                items.append(Item(key=event_id, time=when, ref=n["id"], obj=n))
            yield items
            pagination = (answer.get("meta") or {}).get("pagination") or {}
            # Newest first by ID, which follows creation: a page all older than the
            # window ends it, should the API not have applied ``from``.
            if not pagination.get("has_more") or not notifications or newest < start:
                return
            params["after"] = notifications[-1]["id"]

    async def repair(self, item: Item, received_at: datetime) -> NewEvent:
        # Listed, its payload is an object: it named the event's id.
        found = (item.obj or {}).get("payload")
        payload = found if isinstance(found, dict) else {}
        occurred = parse_rfc3339(payload.get("occurred_at"))
        return self.stored_json(
            item,
            payload,
            type_=text_or_none(payload.get("event_type")),
            occurred=None if occurred is None else occurred.timestamp(),
            how=f"reconcile:paddle-api;notification={item.ref}",
            received_at=received_at,
        )

    async def redeliver(self, item: Item) -> None:
        status = (item.obj or {}).get("status")
        if status not in REPLAYABLE:
            # Paddle is still delivering it (and refuses a replay until it is done).
            log.info(
                "paddle is still delivering a missing notification; left to its retries",
                extra={"source": self.source.name, "notification": item.ref, "status": status},
            )
            return
        await self.api.request("POST", f"{self._url}/{item.ref}/replay")
