"""Alerts: the conditions hookd watches, read from the database, and what a person does
with an alert (list, acknowledge, resolve), for the API, the admin UI and the CLI.

``Conditions.evaluate`` reads each condition in turn; a condition whose read fails is
left out of that evaluation (its live alerts stay as they are: a database error never
resolves an alert). Thresholds come from the sources file's ``[alerts]`` table.

| kind | key | holds when | severity |
| --- | --- | --- | --- |
| ``dead`` | source | at least ``dead`` events of the source are dead (not replayed) | critical |
| ``breaker_open`` | source/destination | its circuit breaker has been open ``breaker_open_s`` | warning |
| ``coverage_hole`` | source | reconciliation left a hole (not one the schedule fills by itself), or a ``[sources.expect]`` window was silent, that ended ``coverage_hole_s`` ago | warning |
| ``registration_drift`` | source | the last registration check found the provider's endpoint differs | warning |
| ``ack_violation`` | source | at least ``ack_violation`` deliveries in the last day that the provider saw acknowledged and hookd did not store | critical |
| ``reconcile_failing`` | source | its last ``reconcile_failing`` runs failed, or its reconciliation is switched off | warning |
| ``rejections`` | source | at least ``rejections`` requests of the source refused in the last 5 minutes (``rejected_requests``) | warning |
| ``prune_behind`` | prune | pruning is scheduled and the last prune finished ``prune_behind_s`` ago | warning |
"""  # noqa: E501

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from hookd.errors import BadRequest, Conflict, NotFound
from hookd.ops.alert_models import Alert, AlertList, ChannelState
from hookd.ops.coverage import CoverageOps
from hookd.ops.queries import has_nul
from hookd.sources import Sources
from hookd.sources.notify import NotifyConfig
from reconcile.coverage import IN_DUE_COURSE
from store.admin import alerts as store_alerts
from store.admin.alerts import Finding, Route
from store.ids import is_id
from store.intake import rejected as rejected_rows
from store.models import (
    ACK_VIOLATIONS,
    DESTINATION_BREAKERS,
    EVENTS,
    MAINTENANCE_STATE,
    RECONCILE_RUNS,
    RECONCILE_STATE,
)
from store.models_alerts import ALERTS
from store.reconcile import silence
from store.status import AlertStatus, BreakerState, CoverageOutcome, EventStatus, RunStatus

log = logging.getLogger("hookd.alerts")

CRITICAL = "critical"
WARNING = "warning"
# How far back ack violations count.
ACK_WINDOW = timedelta(days=1)
# How far back refused requests count.
REJECTIONS_WINDOW = timedelta(minutes=5)
MAX_LIST = 500


class Thresholds(Protocol):
    """The ``[alerts]`` table's thresholds (``hookd.sources.notify.AlertsConfig``)."""

    dead: int
    breaker_open_s: float
    coverage_hole_s: float
    registration_drift: int
    ack_violation: int
    reconcile_failing: int
    prune_behind_s: float
    rejections: int


@dataclass(frozen=True)
class Conditions:
    """The conditions of one cluster, read from its database."""

    engine: AsyncEngine
    sources: Sources
    coverage: CoverageOps
    thresholds: Thresholds
    # HOOKD_PRUNE_EVERY_S: 0, pruning is not scheduled and cannot fall behind.
    prune_every_s: float

    async def evaluate(self, now: datetime) -> tuple[list[Finding], set[str]]:
        """What holds now, and the kinds that could be read."""
        checks: dict[str, Callable[[datetime], Awaitable[list[Finding]]]] = {
            "dead": self._dead,
            "breaker_open": self._breakers,
            "coverage_hole": self._holes,
            "registration_drift": self._drift,
            "ack_violation": self._violations,
            "reconcile_failing": self._reconcile,
            "prune_behind": self._prune,
            "rejections": self._rejections,
        }
        findings: list[Finding] = []
        evaluated: set[str] = set()
        for kind, check in checks.items():
            try:
                findings += await check(now)
            except Exception as exc:  # the database away, a source's report failing
                log.warning(
                    "alert condition not evaluated",
                    extra={"kind": kind, "error": type(exc).__name__},
                )
                continue
            evaluated.add(kind)
        return findings, evaluated

    async def _read(self, query: sa.Select[Any]) -> list[Any]:
        async with self.engine.connect() as conn:
            return list(await conn.execute(query))

    async def _dead(self, now: datetime) -> list[Finding]:
        rows = await self._read(
            sa.select(EVENTS.c.source, sa.func.count())
            .where(EVENTS.c.status == EventStatus.DEAD)
            .group_by(EVENTS.c.source)
        )
        limit = max(1, self.thresholds.dead)
        return [
            Finding(
                "dead",
                source,
                source,
                CRITICAL,
                float(n),
                f"{n} dead event{'s' if n != 1 else ''} of {source}: a handler or destination "
                "gave up; fix the cause, then replay them",
                f"/admin/dead?source={source}",
            )
            for source, n in rows
            if n >= limit
        ]

    async def _breakers(self, now: datetime) -> list[Finding]:
        since = now - timedelta(seconds=self.thresholds.breaker_open_s)
        rows = await self._read(
            sa.select(DESTINATION_BREAKERS).where(
                DESTINATION_BREAKERS.c.state == BreakerState.OPEN,
                DESTINATION_BREAKERS.c.opened_at <= since,
            )
        )
        return [
            Finding(
                "breaker_open",
                f"{row.source}/{row.destination}",
                row.source,
                WARNING,
                float(row.failures),
                f"the circuit breaker of {row.source}'s destination {row.destination} is open "
                f"after {row.failures} failed deliveries ({row.reason or 'no reason recorded'}); "
                "deliveries wait until it recovers",
                f"/admin/sources/{row.source}/activity",
            )
            for row in rows
        ]

    async def _holes(self, now: datetime) -> list[Finding]:
        findings = []
        older = now.timestamp() - self.thresholds.coverage_hole_s
        async with self.engine.connect() as conn:
            watches = await silence.all_states(conn)
        for source in self.sources:
            if source.config.reconcile is None and source.config.expect is None:
                continue
            report = await self.coverage.report(source.name, now=now)
            watch = watches.get(source.name)
            silent_since = None
            if watch is not None and watch.silent_since is not None:
                silent_since = watch.silent_since.timestamp()
            holes = [
                h
                for h in report.holes
                if _alerting({r.kind for r in h.reasons}, h.end, silent_since) and h.end <= older
            ]
            if not holes:
                continue
            seconds = sum(h.seconds for h in holes)
            reasons = sorted({r.kind for h in holes for r in h.reasons})
            meaning = (
                "events the provider sent there may be missing; a covering run fills them"
                if source.config.reconcile is not None
                else "the sender was not heard from as [sources.expect] expects"
            )
            if CoverageOutcome.SILENT in reasons and source.config.reconcile is not None:
                meaning = (
                    "fewer webhooks came than [sources.expect] expects; a covering run "
                    "finds any the provider sent"
                )
            findings.append(
                Finding(
                    "coverage_hole",
                    source.name,
                    source.name,
                    WARNING,
                    seconds,
                    f"{len(holes)} coverage hole{'s' if len(holes) != 1 else ''} of "
                    f"{source.name} ({', '.join(reasons)}), {seconds:.0f} s in all: {meaning}",
                    f"/admin/sources/{source.name}/coverage",
                )
            )
        return findings

    async def _drift(self, now: datetime) -> list[Finding]:
        rows = await self._read(
            sa.select(RECONCILE_STATE.c.source, RECONCILE_STATE.c.registration).where(
                RECONCILE_STATE.c.registration_ok.is_(False)
            )
        )
        findings = []
        for row in rows:
            source, registration = row.source, row.registration
            problems = [str(p) for p in (registration or {}).get("problems", [])]
            if len(problems) < max(1, self.thresholds.registration_drift):
                continue
            findings.append(
                Finding(
                    "registration_drift",
                    source,
                    source,
                    WARNING,
                    float(len(problems)),
                    f"{source}'s registration at the provider differs from hookd's: "
                    + "; ".join(problems[:3]),
                    "/admin/",
                )
            )
        return findings

    async def _violations(self, now: datetime) -> list[Finding]:
        """Violations of the last day, found since the source's last alert of this kind
        was resolved: a person who resolved it has seen those."""
        since = now - ACK_WINDOW
        counted = (
            sa.select(ACK_VIOLATIONS.c.source, sa.func.count().label("n"))
            .where(ACK_VIOLATIONS.c.found_at >= since)
            .group_by(ACK_VIOLATIONS.c.source)
        )
        rows = await self._read(counted)
        if not rows:
            return []
        resolved = dict(
            await self._read(
                sa.select(ALERTS.c.key, sa.func.max(ALERTS.c.resolved_at))
                .where(ALERTS.c.kind == "ack_violation", ALERTS.c.resolved_at.is_not(None))
                .group_by(ALERTS.c.key)
            )
        )
        limit = max(1, self.thresholds.ack_violation)
        findings = []
        for source, in_window in rows:
            n = in_window
            seen = resolved.get(source)
            if seen is not None:
                after = max(since, seen if seen.tzinfo else seen.replace(tzinfo=UTC))
                n = (
                    await self._read(
                        sa.select(sa.func.count()).where(
                            ACK_VIOLATIONS.c.source == source, ACK_VIOLATIONS.c.found_at > after
                        )
                    )
                )[0][0]
            if n < limit:
                continue
            findings.append(
                Finding(
                    "ack_violation",
                    source,
                    source,
                    CRITICAL,
                    float(n),
                    f"{n} deliver{'ies' if n != 1 else 'y'} of {source} the provider saw "
                    "acknowledged but hookd did not store (reconciliation repaired them): "
                    "something answered 2xx in hookd's place",
                    f"/admin/runs?source={source}",
                )
            )
        return findings

    async def _reconcile(self, now: datetime) -> list[Finding]:
        findings = []
        needed = max(1, self.thresholds.reconcile_failing)
        async with self.engine.connect() as conn:
            states = {
                row.source: row
                for row in await conn.execute(
                    sa.select(
                        RECONCILE_STATE.c.source,
                        RECONCILE_STATE.c.disabled,
                        RECONCILE_STATE.c.disabled_reason,
                    )
                )
            }
            for source in self.sources:
                if source.config.reconcile is None:
                    continue
                state = states.get(source.name)
                if state is not None and state.disabled:
                    findings.append(_switched_off(source.name, state.disabled_reason))
                    continue
                failed = await _failed_in_a_row(conn, source.name, needed)
                if failed >= needed:
                    findings.append(
                        Finding(
                            "reconcile_failing",
                            source.name,
                            source.name,
                            WARNING,
                            float(failed),
                            f"the last {failed} reconciliation runs of {source.name} failed: "
                            "missed webhooks are not being repaired",
                            f"/admin/runs?source={source.name}",
                        )
                    )
        return findings

    async def _rejections(self, now: datetime) -> list[Finding]:
        async with self.engine.connect() as conn:
            counts = await rejected_rows.counts_since(conn, now - REJECTIONS_WINDOW)
        limit = max(1, self.thresholds.rejections)
        findings = []
        for source, reasons in sorted(counts.items()):
            n = sum(reasons.values())
            if n < limit:
                continue
            top = sorted(reasons.items(), key=lambda item: (-item[1], item[0]))[:3]
            said = ", ".join(f"{reason} {count}" for reason, count in top)
            findings.append(
                Finding(
                    "rejections",
                    source,
                    source,
                    WARNING,
                    float(n),
                    f"{n} requests to {source} refused in the last 5 minutes ({said}): "
                    "a sender with a wrong secret, a clock off, or someone probing",
                    f"/admin/rejected?source={source}",
                )
            )
        return findings

    async def _prune(self, now: datetime) -> list[Finding]:
        if self.prune_every_s <= 0:
            return []
        rows = await self._read(
            sa.select(MAINTENANCE_STATE.c.last_finished_at).where(
                MAINTENANCE_STATE.c.task == "prune"
            )
        )
        last = rows[0][0] if rows else None
        if last is None:
            return []
        last = last if last.tzinfo is not None else last.replace(tzinfo=UTC)
        behind = (now - last).total_seconds()
        if behind < self.thresholds.prune_behind_s:
            return []
        return [
            Finding(
                "prune_behind",
                "prune",
                None,
                WARNING,
                behind,
                f"the last prune finished {behind / 3600:.1f} h ago (scheduled every "
                f"{self.prune_every_s:.0f} s): the database grows; see `hookd prune --dry-run`",
                "/admin/",
            )
        ]


def _alerting(kinds: set[str], end: float, silent_since: float | None) -> bool:
    """Whether a hole with these reasons raises ``coverage_hole``: not one the schedule
    fills by itself; a silent one (``[sources.expect]``) only while the silence it is
    part of goes on: the sender heard from again resolves the alert, though the hole
    stays in the ledger."""
    rest = kinds - {CoverageOutcome.SILENT.value}
    if rest == kinds:
        return not kinds <= IN_DUE_COURSE
    if not rest <= IN_DUE_COURSE:
        return True
    return silent_since is not None and end > silent_since


def _switched_off(source: str, reason: str | None) -> Finding:
    return Finding(
        "reconcile_failing",
        source,
        source,
        WARNING,
        0.0,
        f"reconciliation of {source} is switched off ({reason or 'no reason recorded'}): "
        f"missed webhooks are not being repaired; `hookd sources enable {source}` switches it on",
        f"/admin/runs?source={source}",
    )


async def _failed_in_a_row(conn: AsyncConnection, source: str, needed: int) -> int:
    """How many of the source's last ``needed`` finished runs (not dry runs) failed, in a
    row from the newest."""
    rows = await conn.execute(
        sa.select(RECONCILE_RUNS.c.status)
        .where(
            RECONCILE_RUNS.c.source == source,
            RECONCILE_RUNS.c.dry_run.is_(False),
            RECONCILE_RUNS.c.status.in_([RunStatus.SUCCEEDED, RunStatus.FAILED]),
        )
        .order_by(RECONCILE_RUNS.c.id.desc())
        .limit(needed)
    )
    failed = 0
    for (status,) in rows:
        if status != RunStatus.FAILED:
            break
        failed += 1
    return failed


def alert_of(row: sa.Row[Any]) -> Alert:
    return Alert(
        id=row.id,
        kind=row.kind,
        key=row.key,
        source=row.source,
        severity=row.severity,
        status=row.status,
        summary=row.summary,
        link=row.link,
        value=row.value,
        count=row._mapping["count"],
        first_seen=row.first_seen,
        last_seen=row.last_seen,
        acknowledged_at=row.acknowledged_at,
        acknowledged_by=row.acknowledged_by,
        resolved_at=row.resolved_at,
        resolved_by=row.resolved_by,
    )


STATUS_FILTERS = ("live", *[s.value for s in AlertStatus])


class AlertOps:
    """What a person does with alerts; ``route`` and ``group_s`` say who hears of a
    resolution by hand."""

    def __init__(
        self,
        engine: AsyncEngine,
        route: Route,
        group_s: float,
        channels: Sequence[NotifyConfig] = (),
    ) -> None:
        self._engine = engine
        self._route = route
        self._group_s = group_s
        self._channels = channels

    async def channels(self) -> list[ChannelState]:
        """Each configured channel's messages by outcome, and its last failure: a
        failing channel is itself visible."""
        states = await store_alerts.channel_states(self._engine)
        out = []
        for config in self._channels:
            state = states.get(config.name) or store_alerts.ChannelCounts()
            out.append(
                ChannelState(
                    name=config.name,
                    kind=config.kind,
                    pending=state.pending,
                    sent=state.sent,
                    failed=state.failed,
                    last_error=state.last_error,
                )
            )
        return out

    async def list(
        self,
        *,
        status: str | None = "live",
        kind: str | None = None,
        source: str | None = None,
        limit: int = 100,
    ) -> AlertList:
        if status is not None and status not in STATUS_FILTERS:
            raise BadRequest("status", f"status must be one of {', '.join(STATUS_FILTERS)}")
        if not 1 <= limit <= MAX_LIST:
            raise BadRequest("limit", f"limit must be between 1 and {MAX_LIST}")
        if has_nul(kind, source):
            raise BadRequest("text", "filters must not contain NUL")
        rows = await store_alerts.listed(
            self._engine, status=status, kind=kind, source=source, limit=limit
        )
        return AlertList(alerts=[alert_of(row) for row in rows])

    async def get(self, alert_id: str) -> Alert:
        if not is_id(alert_id):  # not one of ours (a NUL is no id PostgreSQL could hold)
            raise NotFound("alert")
        row = await store_alerts.get(self._engine, alert_id)
        if row is None:
            raise NotFound("alert")
        return alert_of(row)

    async def acknowledge(self, alert_id: str, by: str) -> Alert:
        """An open alert acknowledged: nobody is reminded of it any more."""
        current = await self.get(alert_id)
        if current.status != AlertStatus.OPEN.value:
            raise Conflict("not_open", f"the alert is {current.status}, not open")
        await store_alerts.acknowledge(self._engine, alert_id, by, datetime.now(UTC))
        return await self.get(alert_id)

    async def resolve(self, alert_id: str, by: str) -> Alert:
        """A live alert resolved by hand (if its condition still holds, the next
        evaluation opens a new one)."""
        current = await self.get(alert_id)
        if current.status == AlertStatus.RESOLVED.value:
            raise Conflict("resolved", "the alert is resolved already")
        await store_alerts.resolve(
            self._engine,
            alert_id,
            by,
            datetime.now(UTC),
            route=self._route,
            group_s=self._group_s,
        )
        return await self.get(alert_id)
