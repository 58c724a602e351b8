"""Metrics read from the database at scrape time.

What several processes share (``hookd serve`` workers, ``hookd worker``,
``hookd reconcile`` from cron) is counted where it is recorded, in the
database, so every scrape of any receiver shows the same totals.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime

import sqlalchemy as sa
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from hookd.metrics.destinations import families as destination_families
from hookd.notify.message import ALERT_KINDS
from hookd.sources import Sources
from reconcile import coverage
from reconcile.service import is_due, is_leased
from store import dialect
from store.admin import alerts as store_alerts
from store.admin import stats
from store.models import EVENTS
from store.reconcile import audit, silence
from store.reconcile import coverage as ledger
from store.reconcile import runs as rstate
from store.retention.prune import WHATS
from store.rows import RunTotalsRow, SourceStateRow
from store.status import DONE_RUN_STATUSES, RUNNABLE_STATUSES, EventStatus, RunStatus

Family = CounterMetricFamily | GaugeMetricFamily
# The outcome label of hookd_reconcile_runs_total (a dry run's is dry_run, whatever it did).
RUN_OUTCOMES = (*DONE_RUN_STATUSES, "dry_run")
# A run record that says the run started: still running, or ended after starting.
STARTED_RUN_STATUSES = (RunStatus.RUNNING, RunStatus.SUCCEEDED, RunStatus.FAILED)
# Not processed or dead yet: what hookd_events_pending counts.
NOT_DONE = (*RUNNABLE_STATUSES, EventStatus.PROCESSING)
# hookd_retention_days's ``what`` label: each source's [sources.retention] key it shows.
RETENTION_DAYS = {
    "body": "keep_body_days",
    "event": "keep_events_days",
    "dead": "keep_dead_days",
    "key": "keep_keys_days",
}
# SQLite's table sizes read every page (see store.admin.stats): counted at most this often.
SQLITE_SIZES_EVERY_S = 300.0
_sqlite_sizes: dict[str, tuple[float, list[stats.TableSize]]] = {}


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
        ledger_starts = await _ledger_starts(conn, sources, states)
        violations = await audit.violation_totals(conn)
        pruned = await stats.pruned_totals(conn)
        partitions_dropped = await stats.partitions_dropped(conn)
        oldest_kept = await stats.oldest_events(conn, [s.name for s in sources])
        sizes = await _table_sizes(engine, conn)
        routing = await destination_families(conn, sources)
        watches = await silence.all_states(conn)
    live_alerts = await store_alerts.open_counts(engine)
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
        "Events found by reconciliation that webhooks never brought: no webhook within "
        "the source's settle_s (those whose webhook came later still: "
        "hookd_reconcile_late_total).",
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
        "1 when reconciliation of a source is disabled: after authentication failures, or "
        "by hand (`hookd sources disable`).",
        labels=["source"],
    )
    started = CounterMetricFamily(
        "hookd_reconcile_runs_started",
        "Reconciliation runs that started (running or ended; not those that found the lease held).",
        labels=["source"],
    )
    overdue = GaugeMetricFamily(
        "hookd_reconcile_overdue_seconds",
        "How long a source's scheduled run has been due with no run holding its lease: "
        "waiting for a process that keeps the schedule (0 when not due, and before the "
        "first run).",
        labels=["source"],
    )
    by_run: dict[tuple[str, str], int] = {}
    by_source_missed: dict[str, int] = {}
    by_source_limited: dict[str, int] = {}
    by_source_started: dict[str, int] = {}
    for row in totals:
        if row.status in DONE_RUN_STATUSES:
            key = (row.source, "dry_run" if row.dry_run else row.status)
            by_run[key] = by_run.get(key, 0) + row.runs
        if row.status in STARTED_RUN_STATUSES:
            by_source_started[row.source] = by_source_started.get(row.source, 0) + row.runs
        if not row.dry_run:
            by_source_missed[row.source] = by_source_missed.get(row.source, 0) + int(row.missing)
        by_source_limited[row.source] = by_source_limited.get(row.source, 0) + int(row.rate_limited)
    reconciled = [s.name for s in sources if s.config.reconcile is not None]
    # Every reconciled source's outcomes from the first scrape on, at 0 until they happen.
    for source in reconciled:
        for outcome in RUN_OUTCOMES:
            by_run.setdefault((source, outcome), 0)
    for (source, outcome), count in sorted(by_run.items()):
        runs.add_metric([source, outcome], count)
    for source in reconciled:
        missed.add_metric([source], by_source_missed.get(source, 0))
        limited.add_metric([source], by_source_limited.get(source, 0))
        started.add_metric([source], by_source_started.get(source, 0))
        state = states.get(source)
        disabled.add_metric([source], 1.0 if state is not None and state.disabled else 0.0)
        overdue.add_metric([source], _overdue_s(state, now))
        # 0 before the first run ends (no cursor yet): hookd_reconcile_due says it waits.
        cursor = state.cursor if state is not None else None
        lag.add_metric([source], 0.0 if cursor is None else max(0.0, now.timestamp() - cursor))
    return [
        *families,
        runs,
        missed,
        limited,
        lag,
        disabled,
        started,
        overdue,
        *_coverage(sources, states, totals, ledger_starts, now),
        _silent(sources, watches, now),
        *_audits(reconciled, states, violations),
        *_retention(sources, now, pruned, oldest_kept, sizes),
        *routing,
        _alerts_open(live_alerts),
        CounterMetricFamily(
            "hookd_partitions_dropped",
            "Day partitions of events dropped whole by retention (PostgreSQL).",
            partitions_dropped,
        ),
    ]


def _alerts_open(live: dict[str, int]) -> Family:
    """Live alerts per kind: every kind from the first scrape on, at 0 while none is."""
    family = GaugeMetricFamily(
        "hookd_alerts_open",
        "Alerts not resolved yet (open or acknowledged), per kind: see `hookd alerts list`.",
        labels=["kind"],
    )
    for kind in sorted({*ALERT_KINDS, *live}, key=_kind_order):
        family.add_metric([kind], live.get(kind, 0))
    return family


def _kind_order(kind: str) -> tuple[int, str]:
    """The known kinds in their order, then any other a newer process wrote."""
    return (ALERT_KINDS.index(kind), "") if kind in ALERT_KINDS else (len(ALERT_KINDS), kind)


def _audits(
    reconciled: list[str], states: dict[str, SourceStateRow], violations: dict[str, int]
) -> list[Family]:
    """The ack audit and the registration check, per reconciled source (0 where the
    provider's API shows neither)."""
    broken = CounterMetricFamily(
        "hookd_ack_violations",
        "Deliveries the provider says hookd answered with a 2xx whose event the store did "
        "not hold when a reconciliation run looked (each key once).",
        labels=["source"],
    )
    ok = GaugeMetricFamily(
        "hookd_source_registration_ok",
        "1 when the last check found the provider's registration of the endpoint as the "
        "source expects; 0 when it did not (drift), or before the first check; -1 when "
        "the last check could not read it (the API unreachable, the token refused).",
        labels=["source"],
    )
    checked = GaugeMetricFamily(
        "hookd_source_registration_checked_timestamp_seconds",
        "When the registration was last checked, or tried (unix seconds; 0 before the "
        "first check, and where it cannot be checked).",
        labels=["source"],
    )
    for source in reconciled:
        state = states.get(source)
        broken.add_metric([source], violations.get(source, 0))
        at = state.registration_checked_at if state is not None else None
        ok.add_metric([source], _registration_value(state))
        checked.add_metric([source], 0.0 if at is None else at.timestamp())
    return [broken, ok, checked]


def _registration_value(state: SourceStateRow | None) -> float:
    """``hookd_source_registration_ok``: 1 ok, 0 drift or never checked, -1 could not
    check (tried, and the registration could not be read: no drift alert)."""
    if state is None or state.registration_checked_at is None:
        return 0.0
    if state.registration_ok is None:
        return -1.0
    return 1.0 if state.registration_ok else 0.0


async def _ledger_starts(
    conn: AsyncConnection, sources: Sources, states: dict[str, SourceStateRow]
) -> dict[str, datetime]:
    """Where the coverage ledger of each reconciled source without a cursor begins: what
    its first runs set out to check (and failed to, or are still checking)."""
    found = {}
    for source in sources:
        state = states.get(source.name)
        if source.config.reconcile is None or (state is not None and state.cursor is not None):
            continue
        first = await ledger.first_start(conn, source.name)
        if first is not None:
            found[source.name] = first
    return found


def _coverage(
    sources: Sources,
    states: dict[str, SourceStateRow],
    totals: list[RunTotalsRow],
    ledger_starts: dict[str, datetime],
    now: datetime,
) -> list[Family]:
    """Late deliveries, and the time each reconciled source has not had checked."""
    late = CounterMetricFamily(
        "hookd_reconcile_late",
        "Events a reconciliation run stored whose webhook arrived afterwards (answered "
        "as a duplicate): late deliveries, each counted once. Missed events counted in "
        "hookd_reconcile_missed_total that turned up after all.",
        labels=["source"],
    )
    unchecked = GaugeMetricFamily(
        "hookd_source_unchecked_seconds",
        "Time within the provider's retention, up to now less the source's settle_s, that "
        "no reconciliation run has checked yet: from the cursor on (0 before any run).",
        labels=["source"],
    )
    margin = GaugeMetricFamily(
        "hookd_reconcile_retention_margin_seconds",
        "How long until the oldest moment not yet checked falls out of the provider's "
        "retention (GitHub 3 days, Stripe 30, ...): then events lost in it cannot be "
        "found. 0 before the first run, as hookd_source_unchecked_seconds.",
        labels=["source"],
    )
    by_source_late: dict[str, int] = {}
    for row in totals:
        if not row.dry_run:
            by_source_late[row.source] = by_source_late.get(row.source, 0) + int(row.late)
    for source in sources:
        if source.config.reconcile is None:
            continue
        state = states.get(source.name)
        first = ledger_starts.get(source.name)
        situation = coverage.Situation(
            now=now.timestamp(),
            settle_s=coverage.settle_s(source),
            retention_s=coverage.retention_s(source),
            cursor=state.cursor if state is not None else None,
        )
        gap, left = coverage.unchecked(situation, None if first is None else first.timestamp())
        late.add_metric([source.name], by_source_late.get(source.name, 0))
        unchecked.add_metric([source.name], gap)
        margin.add_metric([source.name], left)
    return [late, unchecked, margin]


def _silent(sources: Sources, watches: dict[str, silence.WatchRow], now: datetime) -> Family:
    """Per source: how long it has been silent (0 when it is not, and always for a
    source without [sources.expect], which is never judged silent)."""
    family = GaugeMetricFamily(
        "hookd_source_silent_seconds",
        "How long a source with [sources.expect] has been silent: since the start of its "
        "first window with fewer webhooks than expected, until a window has enough "
        "(0 when it is not silent, and for a source without [sources.expect]).",
        labels=["source"],
    )
    for source in sources:
        watch = watches.get(source.name) if source.config.expect is not None else None
        since = watch.silent_since if watch is not None else None
        family.add_metric(
            [source.name], 0.0 if since is None else max(0.0, (now - since).total_seconds())
        )
    return family


def _overdue_s(state: SourceStateRow | None, now: datetime) -> float:
    if state is None or state.next_run_at is None:
        return 0.0  # never ran: when it fell due is not recorded
    if not is_due(state, now) or is_leased(state, now):
        return 0.0
    return max(0.0, (now - state.next_run_at).total_seconds())


def _retention(
    sources: Sources,
    now: datetime,
    pruned: dict[tuple[str, str], int],
    oldest_kept: dict[str, datetime],
    sizes: list[stats.TableSize],
) -> list[Family]:
    removed = CounterMetricFamily(
        "hookd_pruned",
        "What retention removed: bodies stripped, event rows, keys, reconcile runs.",
        labels=["source", "what"],
    )
    for source, what in sorted({*pruned, *((s.name, w) for s in sources for w in WHATS)}):
        removed.add_metric([source, what], pruned.get((source, what), 0))
    oldest = GaugeMetricFamily(
        "hookd_oldest_event_seconds",
        "Age of the oldest event row kept, per source (0 when none): what retention bounds.",
        labels=["source"],
    )
    for source in sources:
        received = oldest_kept.get(source.name)
        age = 0.0 if received is None else max(0.0, (now - received).total_seconds())
        oldest.add_metric([source.name], age)
    # From the sources file, beside what it bounds: an alert compares the two
    # (HookdPruneNotRunning: the oldest row a day past the longer of event and dead).
    days = GaugeMetricFamily(
        "hookd_retention_days",
        "Each source's retention as configured, in days: body, event (processed rows), "
        "dead (dead rows), key (keys of pruned events).",
        labels=["source", "what"],
    )
    for source in sources:
        retention = source.config.retention
        for what, key in RETENTION_DAYS.items():
            days.add_metric([source.name, what], getattr(retention, key))
    rows = GaugeMetricFamily(
        "hookd_table_rows",
        "Rows per table (PostgreSQL: the planner's estimate).",
        labels=["table"],
    )
    size = GaugeMetricFamily(
        "hookd_table_bytes", "Bytes per table, its indexes included.", labels=["table"]
    )
    for table in sizes:
        rows.add_metric([table.table], table.rows)
        if table.bytes is not None:
            size.add_metric([table.table], table.bytes)
    return [removed, oldest, days, rows, size]


async def _table_sizes(engine: AsyncEngine, conn: AsyncConnection) -> list[stats.TableSize]:
    """PostgreSQL's at every scrape (catalog reads); SQLite's once per
    ``SQLITE_SIZES_EVERY_S``, kept per database in this process."""
    if dialect.is_postgres(conn):
        return await stats.table_sizes(conn)
    key = engine.url.render_as_string(hide_password=True)
    cached = _sqlite_sizes.get(key)
    if cached is not None and time.monotonic() - cached[0] < SQLITE_SIZES_EVERY_S:
        return cached[1]
    sizes = await stats.table_sizes(conn)
    _sqlite_sizes[key] = (time.monotonic(), sizes)
    return sizes


def render(families: list[Family]) -> bytes:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Snapshot(families))
    return generate_latest(registry)
