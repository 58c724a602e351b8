"""Alerts as the real lifecycle makes them (``store.admin.alerts.apply``), for the tests
of the store, the API, the admin UI, the CLI and the metrics: findings, a route to the
channels, and the rows read back."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from store.admin import alerts as store_alerts
from store.admin.alerts import Changes, Finding, Wanted
from store.models_alerts import ALERTS, NOTIFICATIONS

# Every kind the conditions evaluate (an evaluation that read them all).
EVALUATED = (
    "dead",
    "breaker_open",
    "coverage_hole",
    "registration_drift",
    "ack_violation",
    "reconcile_failing",
    "prune_behind",
    "rejections",
)
T0 = datetime(2026, 12, 5, 1, 0, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def dead(source: str = "github", count: int = 12, summary: str | None = None) -> Finding:
    return Finding(
        "dead",
        source,
        source,
        "critical",
        float(count),
        summary or f"{count} events of {source} are dead: replay them once the cause is fixed",
        f"/admin/dead?source={source}",
    )


def breaker(source: str = "stripe", destination: str = "billing") -> Finding:
    return Finding(
        "breaker_open",
        f"{source}/{destination}",
        source,
        "warning",
        600.0,
        f"the circuit breaker of {source}/{destination} has been open 10 min",
        "/admin/destinations",
    )


def failing(source: str = "stripe") -> Finding:
    return Finding(
        "reconcile_failing",
        source,
        source,
        "warning",
        3.0,
        f"the last 3 reconciliation runs of {source} failed",
        f"/admin/runs?source={source}",
    )


class Channels:
    """A route to channels that can change between calls (``[[notify]]`` edited)."""

    def __init__(self, *wanted: Wanted) -> None:
        self.wanted: list[Wanted] = list(wanted)

    def __call__(self, _row: sa.Row[Any]) -> Sequence[Wanted]:
        return list(self.wanted)


NOBODY = Channels()


async def apply(
    engine: AsyncEngine,
    findings: Sequence[Finding],
    now: datetime,
    *,
    evaluated: Sequence[str] = EVALUATED,
    route: Channels = NOBODY,
    group_s: float = 60.0,
) -> Changes:
    return await store_alerts.apply(engine, findings, evaluated, now, route=route, group_s=group_s)


async def alert_rows(engine: AsyncEngine) -> list[sa.Row[Any]]:
    async with engine.connect() as conn:
        return list(await conn.execute(sa.select(ALERTS).order_by(ALERTS.c.id)))


async def alert_row(engine: AsyncEngine, alert_id: str) -> sa.Row[Any]:
    async with engine.connect() as conn:
        return (await conn.execute(sa.select(ALERTS).where(ALERTS.c.id == alert_id))).one()


async def messages(engine: AsyncEngine) -> list[sa.Row[Any]]:
    """The outbox, oldest first."""
    async with engine.connect() as conn:
        query = sa.select(NOTIFICATIONS).order_by(NOTIFICATIONS.c.created_at, NOTIFICATIONS.c.id)
        return list(await conn.execute(query))
