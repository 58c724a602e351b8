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

Paddle's schema requires none of a notification's fields. One without
``occurred_at`` is timed by its payload's ``occurred_at``; one that still cannot be
placed in time, or names no event (``payload.event_id``), or (to be replayed) has no
``id``, is not judged: stored, it is accounted for; otherwise it is counted, and the
run's window is left a hole that says why, while the run goes on with the rest.

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
from hookd.providers.rfc3339 import parse_rfc3339, utc_z
from hookd.sources import Source, api_url
from reconcile.http import Api
from reconcile.providers.base import Item, ListAdapter, settings_of, unjudged
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


def notified_at(n: Notification) -> datetime | None:
    """When a notification's event occurred: its ``occurred_at``, else its payload's
    (Paddle's schema requires neither)."""
    return parse_rfc3339(n.get("occurred_at")) or parse_rfc3339(
        (n.get("payload") or {}).get("occurred_at")
    )


def notification_doubt(n: Notification, event_id: object, redeliver: bool) -> str | None:
    """Why an event's notification cannot be judged, or None when it can: Paddle's
    schema requires none of its ``id``, ``occurred_at`` or ``payload.event_id``."""
    if not isinstance(event_id, str) or not event_id:
        return "Paddle listed a notification without its payload's event_id"
    if notified_at(n) is None:
        return "Paddle listed a notification without occurred_at"
    if redeliver and not isinstance(n.get("id"), str):
        return "Paddle listed a notification without an id: it cannot be replayed"
    return None


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
            notifications = answer.get("data") or []
            items: list[Item] = []
            newest = float("-inf")
            for n in notifications:
                payload = n.get("payload") or {}
                event_id = payload.get("event_id")
                if n.get("origin") not in (None, "event") and isinstance(event_id, str):
                    # A replay: its event's own notification is the item.
                    moment = notified_at(n)
                    if moment is not None and moment.timestamp() >= start:
                        self._note_delivered(n, event_id)
                    continue
                doubt = notification_doubt(n, event_id, self._redeliver)
                if doubt is not None:
                    key = event_id if isinstance(event_id, str) else ""
                    if not key or key not in seen:
                        seen.add(key)
                        items.append(unjudged(doubt, key, n.get("id")))
                    continue
                moment = notified_at(n)
                assert moment is not None
                assert isinstance(event_id, str)
                when = moment.timestamp()
                newest = max(newest, when)
                if when < start:
                    continue
                self._note_delivered(n, event_id)
                if event_id in seen:
                    continue
                seen.add(event_id)
                items.append(Item(key=event_id, time=when, ref=n.get("id"), obj=n))
            pagination = (answer.get("meta") or {}).get("pagination") or {}
            more = bool(pagination.get("has_more")) and bool(notifications)
            last = notifications[-1].get("id") if notifications else None
            if more and not isinstance(last, str):
                # ``after`` is the page's last ID: without it the rest cannot be asked
                # for. What it holds is not judged, and the run's window says so.
                items.append(unjudged("Paddle listed more notifications after one without an id"))
                more = False
            yield items
            # Newest first by ID, which follows creation: a page all older than the
            # window ends it, should the API not have applied ``from``.
            if not more or newest < start:
                return
            assert isinstance(last, str)
            params["after"] = last

    def _note_delivered(self, n: Notification, event_id: str) -> None:
        if n.get("status") == "delivered":
            at = parse_rfc3339(n.get("delivered_at"))
            self.note_acked(Acked(event_id, n.get("id"), None, at))

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
            how="reconcile:paddle-api" + (f";notification={item.ref}" if item.ref else ""),
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
