"""Metrics read from the database at scrape time.

What several processes share (``hookd serve`` workers, ``hookd worker``,
``hookd reconcile`` from cron) is counted where it is recorded, in the
database, so every scrape of any receiver shows the same totals.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import sqlalchemy as sa
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector
from sqlalchemy.ext.asyncio import AsyncEngine

from hookd.sources import Sources
from store import reconcile as rstate
from store.models import EVENTS
from store.status import DONE_RUN_STATUSES, RUNNABLE_STATUSES, EventStatus

Family = CounterMetricFamily | GaugeMetricFamily
# Not processed or dead yet: what hookd_events_pending counts.
NOT_DONE = (*RUNNABLE_STATUSES, EventStatus.PROCESSING)


class _Snapshot(Collector):
    def __init__(self, families: list[Family]) -> None:
        self._families = families

    def collect(self) -> Iterator[Family]:
        yield from self._families


async def collect(engine: AsyncEngine, sources: Sources) -> list[Family]:
    now = datetime.now(UTC)
    async with engine.connect() as conn:
        pending, oldest = (
            await conn.execute(
                sa.select(sa.func.count(), sa.func.min(EVENTS.c.received_at)).where(
                    EVENTS.c.status.in_(NOT_DONE)
                )
            )
        ).one()
        dead = (
            await conn.execute(
                sa.select(sa.func.count())
                .select_from(EVENTS)
                .where(EVENTS.c.status == EventStatus.DEAD)
            )
        ).scalar_one()
        totals = await rstate.run_totals(conn)
        states = await rstate.all_states(conn)
    if oldest is not None and oldest.tzinfo is None:
        oldest = oldest.replace(tzinfo=UTC)
    families: list[Family] = [
        GaugeMetricFamily("hookd_events_pending", "Events not yet processed or dead.", pending),
        GaugeMetricFamily(
            "hookd_oldest_pending_age_seconds",
            "Age of the oldest event not yet processed or dead (0 when none).",
            (now - oldest).total_seconds() if oldest is not None else 0.0,
        ),
        GaugeMetricFamily("hookd_events_dead", "Events that gave up (replayable).", dead),
    ]
    runs = CounterMetricFamily(
        "hookd_reconcile_runs", "Reconciliation runs by outcome.", labels=["source", "outcome"]
    )
    missed = CounterMetricFamily(
        "hookd_reconcile_missed",
        "Events found by reconciliation that webhooks never brought.",
        labels=["source"],
    )
    limited = CounterMetricFamily(
        "hookd_provider_rate_limited",
        "Rate-limit answers from provider APIs.",
        labels=["source"],
    )
    lag = GaugeMetricFamily(
        "hookd_reconcile_lag_seconds",
        "Time since the reconciliation cursor: how old a gap could be unseen.",
        labels=["source"],
    )
    disabled = GaugeMetricFamily(
        "hookd_source_reconcile_disabled",
        "1 when reconciliation of a source was disabled after authentication failures.",
        labels=["source"],
    )
    by_run: dict[tuple[str, str], int] = {}
    by_source_missed: dict[str, int] = {}
    by_source_limited: dict[str, int] = {}
    for row in totals:
        if row.status in DONE_RUN_STATUSES:
            key = (row.source, "dry_run" if row.dry_run else row.status)
            by_run[key] = by_run.get(key, 0) + row.runs
        if not row.dry_run:
            by_source_missed[row.source] = by_source_missed.get(row.source, 0) + int(row.missing)
        by_source_limited[row.source] = by_source_limited.get(row.source, 0) + int(row.rate_limited)
    reconciled = [s.name for s in sources if s.config.reconcile is not None]
    for (source, outcome), count in sorted(by_run.items()):
        runs.add_metric([source, outcome], count)
    for source in reconciled:
        missed.add_metric([source], by_source_missed.get(source, 0))
        limited.add_metric([source], by_source_limited.get(source, 0))
        state = states.get(source)
        disabled.add_metric([source], 1.0 if state is not None and state.disabled else 0.0)
        if state is not None and state.cursor is not None:
            lag.add_metric([source], max(0.0, now.timestamp() - state.cursor))
    return [*families, runs, missed, limited, lag, disabled]


def render(families: list[Family]) -> bytes:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Snapshot(families))
    return generate_latest(registry)
