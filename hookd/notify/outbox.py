"""Sending the queued notifications (``store.admin.alerts``: the outbox).

``Notifier.send_due`` claims the messages that are due (a claim per message, so two
processes never send the same one, and one killed mid-send leaves its claim to run
out), builds each from its alerts as they are now, and sends it through its channel
(``hookd.notify.channels``). A failure is retried with capped, jittered back-off up to
``MAX_ATTEMPTS``; a refusal for good (a 4xx but 408 and 429) fails it at once. Past a
channel's ``max_per_hour`` (``[alerts]``), a message waits, unsent and unattempted,
until the oldest of the last hour's ages out: the channel is not flooded, and what
waits still takes in later alerts of its kind (grouping).
"""

from __future__ import annotations

import logging
import random
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa
from prometheus_client import Counter
from sqlalchemy.ext.asyncio import AsyncEngine

from hookd import metric_families as families
from hookd.backoff import full_jitter
from hookd.notify.channels import Channel, ChannelError, wants
from hookd.notify.message import AlertItem, Message, Severity, What
from hookd.sources import Sources
from hookd.sources.notify import NotifyConfig
from store.admin import alerts as store_alerts
from store.admin.alerts import Wanted
from store.status import NotificationStatus

log = logging.getLogger("hookd.notify")

MAX_ATTEMPTS = 8
RETRY_FIRST_S = 5.0
RETRY_CAP_S = 600.0
# Messages claimed at a time by one sender.
CLAIM_BATCH = 20
HOUR = timedelta(hours=1)

NOTIFICATIONS = families.NOTIFICATIONS.register()


def counted(channel: str, result: str) -> Counter:
    return NOTIFICATIONS.labels(channel=channel, result=result)


def initialise_metrics(channels: Sequence[str]) -> None:
    for channel in channels:
        for result in ("sent", "retry", "failed"):
            counted(channel, result)


def _aware(value: datetime | None) -> datetime | None:
    if value is None:
        return None
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def item_of(row: sa.Row[Any], base_url: str = "") -> AlertItem:
    """An alert's row as a message shows it; its link absolute under ``base_url``."""
    first = _aware(row.first_seen)
    last = _aware(row.last_seen)
    assert first is not None
    assert last is not None
    return AlertItem(
        id=row.id,
        kind=row.kind,
        key=row.key,
        source=row.source,
        severity=Severity(row.severity),
        summary=row.summary,
        link=base_url.rstrip("/") + row.link if base_url else row.link,
        first_seen=first,
        last_seen=last,
        count=row._mapping["count"],
    )


def router(configs: Sequence[NotifyConfig]) -> store_alerts.Route:
    """Which channels want to hear of an alert: each channel's kinds, sources and
    minimum severity (``channels.wants``), with its quiet time before a reminder."""

    def route(row: sa.Row[Any]) -> Sequence[Wanted]:
        item = item_of(row)
        return [
            Wanted(config.name, float(config.reminder_s))
            for config in configs
            if wants(config, item)
        ]

    return route


def route_for(sources: Sources) -> store_alerts.Route:
    """The sources file's channels as a route (none configured: nobody is messaged)."""
    if not sources.notify:
        return lambda _row: ()
    return router(sources.notify)


class Notifier:
    """Sends what the outbox holds, as ``owner``."""

    def __init__(
        self,
        engine: AsyncEngine,
        channels: Mapping[str, Channel],
        *,
        owner: str,
        max_per_hour: int,
        base_url: str = "",
        rng: random.Random | None = None,
    ) -> None:
        self._engine = engine
        self._channels = channels
        self._owner = owner
        self._max_per_hour = max_per_hour
        self._base_url = base_url
        self._rng = rng or random.Random()  # noqa: S311 - jitter, not secrecy
        initialise_metrics(list(channels))

    async def send_due(self, now: datetime | None = None) -> int:
        """Every due message claimed and sent (or put off): the number sent."""
        sent = 0
        while True:
            now = now or datetime.now(UTC)
            rows = await store_alerts.claim(self._engine, self._owner, now, CLAIM_BATCH)
            for row in rows:
                sent += await self._one(row, datetime.now(UTC))
            if len(rows) < CLAIM_BATCH:
                return sent
            now = None

    async def _one(self, row: sa.Row[Any], now: datetime) -> int:
        channel = self._channels.get(row.channel)
        if channel is None:
            await self._finish(
                row,
                now,
                NotificationStatus.FAILED,
                error=f"no [[notify]] channel named {row.channel!r} any more",
                attempted=False,
            )
            return 0
        recent = await store_alerts.sent_since(self._engine, row.channel, now - HOUR)
        if len(recent) >= self._max_per_hour:
            # The oldest of the hour ages out: then there is room again.
            retry_at = recent[len(recent) - self._max_per_hour] + HOUR
            await self._finish(
                row, now, NotificationStatus.PENDING, retry_at=retry_at, attempted=False
            )
            log.info(
                "notification held back by the rate limit",
                extra={"channel": row.channel, "notification": row.id, "until": retry_at},
            )
            return 0
        alerts = await store_alerts.alerts_of(self._engine, list(row.alert_ids))
        if not alerts:
            await self._finish(
                row, now, NotificationStatus.FAILED, error="its alerts are gone", attempted=False
            )
            return 0
        message = Message(
            id=row.id,
            what=What(row.what),
            kind=row.kind,
            items=tuple(item_of(alert, self._base_url) for alert in alerts),
        )
        try:
            await channel.send(message)
        except ChannelError as exc:
            await self._failed(row, now, exc)
            return 0
        await self._finish(row, now, NotificationStatus.SENT)
        counted(row.channel, "sent").inc()
        log.info(
            "notification sent",
            extra={
                "channel": row.channel,
                "notification": row.id,
                "what": row.what,
                "kind": row.kind,
                "alerts": len(alerts),
            },
        )
        return 1

    async def _failed(self, row: sa.Row[Any], now: datetime, exc: ChannelError) -> None:
        attempts = row.attempts + 1
        fields = {
            "channel": row.channel,
            "notification": row.id,
            "attempt": attempts,
            "reason": exc.reason,
        }
        if exc.permanent or attempts >= MAX_ATTEMPTS:
            await self._finish(row, now, NotificationStatus.FAILED, error=exc.reason)
            counted(row.channel, "failed").inc()
            log.warning("notification failed", extra=fields)
            return
        delay = max(1.0, full_jitter(self._rng, RETRY_FIRST_S, attempts - 1, RETRY_CAP_S))
        retry_at = now + timedelta(seconds=delay)
        await self._finish(
            row, now, NotificationStatus.PENDING, error=exc.reason, retry_at=retry_at
        )
        counted(row.channel, "retry").inc()
        log.warning("notification not sent; retrying", extra={**fields, "retry_in_s": delay})

    async def _finish(
        self,
        row: sa.Row[Any],
        now: datetime,
        status: NotificationStatus,
        *,
        error: str | None = None,
        retry_at: datetime | None = None,
        attempted: bool = True,
    ) -> None:
        await store_alerts.finish(
            self._engine,
            row.id,
            self._owner,
            now,
            status=status,
            error=error,
            retry_at=retry_at,
            attempted=attempted,
        )
