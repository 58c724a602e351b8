"""Alerts and their notifications in the database: the lifecycle and the outbox.

``apply`` takes what one evaluation found (``Finding``: a condition that holds, per kind
and key) and, in one transaction, opens the alerts that are new, refreshes the ones
still found, resolves those of the kinds evaluated that are no longer found, and queues
the messages each change calls for (``queue``): one when an alert opens, one when it
resolves, a reminder after a channel's quiet time while it stays open and nobody
acknowledged it. Messages of one channel, kind and change that are not sent yet take
the next alert in (grouping); one queued within ``group_s`` of the last is held until
then. Only one process evaluates at a time (``hookd.runtime.alerts``: a lease), and the
queue is written in the same transaction as the change, so no change is notified twice
or not at all.

The outbox's senders ``claim`` due messages under a lease (a process killed mid-send
leaves its claim to run out), then mark each ``sent``, due again later, or ``failed``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from store import dialect
from store.ids import new_id
from store.models_alerts import ALERTS, NOTIFICATIONS
from store.status import AlertStatus, NotificationStatus
from store.values import safe_text

LIVE_STATUSES = (AlertStatus.OPEN, AlertStatus.ACKNOWLEDGED)
# How long a sender's claim on a message lasts: longer than any channel's timeout.
CLAIM_S = 120.0
ERROR_CHARS = 500


@dataclass(frozen=True, slots=True)
class Finding:
    """A condition that holds now, as one evaluation found it."""

    kind: str
    key: str
    source: str | None
    severity: str
    value: float
    summary: str
    link: str


@dataclass(frozen=True, slots=True)
class Wanted:
    """A channel that wants to hear of an alert, and its quiet time before a reminder
    (0: none)."""

    channel: str
    reminder_s: float


# Which channels want to hear of an alert (its row): ``[[notify]]``'s kinds, sources and
# minimum severity.
Route = Callable[[sa.Row[Any]], Sequence[Wanted]]


@dataclass
class Changes:
    """What ``apply`` (or a change by hand) did: alert ids, and messages queued."""

    opened: list[str] = field(default_factory=list)
    refreshed: list[str] = field(default_factory=list)
    resolved: list[str] = field(default_factory=list)
    queued: int = 0


def _iso(at: datetime) -> str:
    return at.astimezone(UTC).isoformat()


async def live_alerts(conn: AsyncConnection) -> list[sa.Row[Any]]:
    result = await conn.execute(
        sa.select(ALERTS).where(ALERTS.c.status.in_([s.value for s in LIVE_STATUSES]))
    )
    return list(result)


async def apply(
    engine: AsyncEngine,
    findings: Sequence[Finding],
    evaluated: Iterable[str],
    now: datetime,
    *,
    route: Route,
    group_s: float,
) -> Changes:
    """One evaluation's findings applied (see the module's docstring). ``evaluated``:
    the kinds whose conditions were read this time; a live alert of another kind (its
    read failed) is left as it is, neither refreshed nor resolved."""
    changes = Changes()
    kinds = set(evaluated)
    async with engine.begin() as conn:
        live = {(row.kind, row.key): row for row in await live_alerts(conn)}
        found = {(f.kind, f.key): f for f in findings}
        for (kind, key), finding in found.items():
            row = live.get((kind, key))
            if row is None:
                changes.opened.append(await _open(conn, finding, now))
                continue
            await conn.execute(
                ALERTS.update()
                .where(ALERTS.c.id == row.id)
                .values(
                    last_seen=now,
                    count=ALERTS.c.count + 1,
                    value=finding.value,
                    summary=finding.summary,
                    severity=finding.severity,
                    link=finding.link,
                )
            )
            changes.refreshed.append(row.id)
        for (kind, key), row in live.items():
            if kind in kinds and (kind, key) not in found:
                await _resolve(conn, row.id, "hookd: the condition cleared", now)
                changes.resolved.append(row.id)
        for ids, what in ((changes.opened, "opened"), (changes.resolved, "resolved")):
            changes.queued += await _notify(conn, ids, what, now, route=route, group_s=group_s)
        changes.queued += await _remind(conn, changes.refreshed, now, route=route, group_s=group_s)
    return changes


async def _open(conn: AsyncConnection, finding: Finding, now: datetime) -> str:
    alert_id = new_id()
    await conn.execute(
        ALERTS.insert().values(
            id=alert_id,
            kind=finding.kind,
            key=finding.key,
            source=finding.source,
            severity=finding.severity,
            status=AlertStatus.OPEN,
            summary=finding.summary,
            link=finding.link,
            value=finding.value,
            count=1,
            first_seen=now,
            last_seen=now,
            notified={},
        )
    )
    return alert_id


async def _resolve(conn: AsyncConnection, alert_id: str, by: str, now: datetime) -> bool:
    result = await conn.execute(
        ALERTS.update()
        .where(ALERTS.c.id == alert_id, ALERTS.c.status.in_([s.value for s in LIVE_STATUSES]))
        .values(status=AlertStatus.RESOLVED, resolved_at=now, resolved_by=by[:128])
    )
    return bool(result.rowcount)


async def _rows(conn: AsyncConnection, ids: Sequence[str]) -> list[sa.Row[Any]]:
    if not ids:
        return []
    return list(await conn.execute(sa.select(ALERTS).where(ALERTS.c.id.in_(list(ids)))))


async def _notify(
    conn: AsyncConnection,
    ids: Sequence[str],
    what: str,
    now: datetime,
    *,
    route: Route,
    group_s: float,
) -> int:
    """Messages about ``ids`` (just opened, or resolved) queued to the channels that want
    them; a resolution only to those that heard of the alert."""
    queued = 0
    for row in await _rows(conn, ids):
        notified = dict(row.notified or {})
        for wanted in route(row):
            if what == "resolved" and wanted.channel not in notified:
                continue
            await queue(
                conn, wanted.channel, what, kind=row.kind, alert_id=row.id, now=now, group_s=group_s
            )
            notified[wanted.channel] = _iso(now)
            queued += 1
        await conn.execute(ALERTS.update().where(ALERTS.c.id == row.id).values(notified=notified))
    return queued


async def _remind(
    conn: AsyncConnection, ids: Sequence[str], now: datetime, *, route: Route, group_s: float
) -> int:
    """A reminder of each alert still open (nobody acknowledged it) to each channel whose
    quiet time passed since it last heard of it."""
    queued = 0
    for row in await _rows(conn, ids):
        if row.status != AlertStatus.OPEN:
            continue
        notified = dict(row.notified or {})
        changed = False
        for wanted in route(row):
            last = notified.get(wanted.channel)
            if wanted.reminder_s <= 0 or last is None:
                continue
            if (now - datetime.fromisoformat(last)).total_seconds() < wanted.reminder_s:
                continue
            await queue(
                conn,
                wanted.channel,
                "reminder",
                kind=row.kind,
                alert_id=row.id,
                now=now,
                group_s=group_s,
            )
            notified[wanted.channel] = _iso(now)
            changed = True
            queued += 1
        if changed:
            await conn.execute(
                ALERTS.update().where(ALERTS.c.id == row.id).values(notified=notified)
            )
    return queued


async def queue(
    conn: AsyncConnection,
    channel: str,
    what: str,
    *,
    kind: str,
    alert_id: str,
    now: datetime,
    group_s: float,
) -> str:
    """``alert_id`` in a message of ``channel`` about ``kind`` (``what`` happened): added to
    one not sent yet, else a new one, due ``group_s`` after the last one's creation when
    that was less than ``group_s`` ago (a storm of alerts of one kind makes one message
    per ``group_s``), at once otherwise. The message's id."""
    same = sa.and_(
        NOTIFICATIONS.c.channel == channel,
        NOTIFICATIONS.c.what == what,
        NOTIFICATIONS.c.kind == kind,
    )
    waiting = (
        await conn.execute(
            sa.select(NOTIFICATIONS.c.id, NOTIFICATIONS.c.alert_ids)
            .where(
                same,
                NOTIFICATIONS.c.status == NotificationStatus.PENDING,
                NOTIFICATIONS.c.attempts == 0,
                NOTIFICATIONS.c.lease_owner.is_(None),
            )
            .order_by(NOTIFICATIONS.c.created_at.desc())
            .limit(1)
        )
    ).first()
    if waiting is not None:
        ids = list(waiting.alert_ids)
        if alert_id not in ids:
            ids.append(alert_id)
            await conn.execute(
                NOTIFICATIONS.update().where(NOTIFICATIONS.c.id == waiting.id).values(alert_ids=ids)
            )
        return str(waiting.id)
    last = (
        await conn.execute(
            sa.select(sa.func.max(NOTIFICATIONS.c.created_at)).where(
                same, NOTIFICATIONS.c.created_at > now - timedelta(seconds=group_s)
            )
        )
    ).scalar()
    due = now if last is None else _aware(last) + timedelta(seconds=group_s)
    message_id = new_id()
    await conn.execute(
        NOTIFICATIONS.insert().values(
            id=message_id,
            channel=channel,
            what=what,
            kind=kind,
            alert_ids=[alert_id],
            status=NotificationStatus.PENDING,
            attempts=0,
            next_attempt_at=due,
            created_at=now,
        )
    )
    return message_id


def _aware(value: datetime) -> datetime:
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


# -- by hand: acknowledge, resolve ----------------------------------------------------


async def acknowledge(engine: AsyncEngine, alert_id: str, by: str, now: datetime) -> bool:
    """An open alert acknowledged (no more reminders); False if it is not open."""
    async with engine.begin() as conn:
        result = await conn.execute(
            ALERTS.update()
            .where(ALERTS.c.id == alert_id, ALERTS.c.status == AlertStatus.OPEN)
            .values(status=AlertStatus.ACKNOWLEDGED, acknowledged_at=now, acknowledged_by=by[:128])
        )
    return bool(result.rowcount)


async def resolve(
    engine: AsyncEngine, alert_id: str, by: str, now: datetime, *, route: Route, group_s: float
) -> bool:
    """A live alert resolved by hand, and the channels that heard of it told; False if it
    was not live. If its condition still holds, the next evaluation opens a new one."""
    async with engine.begin() as conn:
        if not await _resolve(conn, alert_id, by, now):
            return False
        await _notify(conn, [alert_id], "resolved", now, route=route, group_s=group_s)
    return True


async def get(engine: AsyncEngine, alert_id: str) -> sa.Row[Any] | None:
    async with engine.connect() as conn:
        return (await conn.execute(sa.select(ALERTS).where(ALERTS.c.id == alert_id))).first()


async def listed(
    engine: AsyncEngine,
    *,
    status: str | None = None,
    kind: str | None = None,
    source: str | None = None,
    limit: int = 100,
) -> list[sa.Row[Any]]:
    """Alerts newest first; ``status`` "live" means open or acknowledged."""
    query = sa.select(ALERTS).order_by(ALERTS.c.last_seen.desc(), ALERTS.c.id.desc()).limit(limit)
    if status == "live":
        query = query.where(ALERTS.c.status.in_([s.value for s in LIVE_STATUSES]))
    elif status is not None:
        query = query.where(ALERTS.c.status == status)
    if kind is not None:
        query = query.where(ALERTS.c.kind == kind)
    if source is not None:
        query = query.where(ALERTS.c.source == source)
    async with engine.connect() as conn:
        return list(await conn.execute(query))


async def open_counts(engine: AsyncEngine) -> dict[str, int]:
    """Live alerts (open or acknowledged) per kind: ``hookd_alerts_open``."""
    query = (
        sa.select(ALERTS.c.kind, sa.func.count())
        .where(ALERTS.c.status.in_([s.value for s in LIVE_STATUSES]))
        .group_by(ALERTS.c.kind)
    )
    async with engine.connect() as conn:
        return {kind: int(n) for kind, n in await conn.execute(query)}


# -- the outbox -----------------------------------------------------------------------


async def claim(engine: AsyncEngine, owner: str, now: datetime, limit: int) -> list[sa.Row[Any]]:
    """Up to ``limit`` due messages taken for ``owner`` until ``now + CLAIM_S``: pending,
    due, and not held by another sender (or its claim ran out).

    The update asks again what the pick asked: on SQLite the pick takes no lock, and
    two senders may pick the same messages; each takes only those still free when its
    update runs (one writer at a time), and returns those it took."""
    claimable = sa.and_(
        NOTIFICATIONS.c.status == NotificationStatus.PENDING,
        NOTIFICATIONS.c.next_attempt_at <= now,
        sa.or_(NOTIFICATIONS.c.lease_owner.is_(None), NOTIFICATIONS.c.lease_expires_at < now),
    )
    until = now + timedelta(seconds=CLAIM_S)
    async with engine.begin() as conn:
        pick = (
            sa.select(NOTIFICATIONS.c.id)
            .where(claimable)
            .order_by(NOTIFICATIONS.c.next_attempt_at)
            .limit(limit)
        )
        ids = [row[0] for row in await conn.execute(dialect.locked(conn, pick, skip_locked=True))]
        if not ids:
            return []
        await conn.execute(
            NOTIFICATIONS.update()
            .where(NOTIFICATIONS.c.id.in_(ids), claimable)
            .values(lease_owner=owner, lease_expires_at=until)
        )
        rows = await conn.execute(
            sa.select(NOTIFICATIONS)
            .where(
                NOTIFICATIONS.c.id.in_(ids),
                NOTIFICATIONS.c.lease_owner == owner,
                NOTIFICATIONS.c.lease_expires_at == until,
            )
            .order_by(NOTIFICATIONS.c.next_attempt_at)
        )
        return list(rows)


async def finish(
    engine: AsyncEngine,
    message_id: str,
    owner: str,
    now: datetime,
    *,
    status: NotificationStatus,
    error: str | None = None,
    retry_at: datetime | None = None,
    attempted: bool = True,
) -> bool:
    """A claimed message's outcome: sent, failed for good, or pending again at
    ``retry_at`` (``attempted`` False: put off without trying, by the rate limit).
    Fenced on the claim; False if it was no longer this owner's."""
    values: dict[str, object] = {"lease_owner": None, "lease_expires_at": None, "status": status}
    if attempted:
        values["attempts"] = NOTIFICATIONS.c.attempts + 1
    if error is not None:
        values["last_error"] = safe_text(error, ERROR_CHARS)
    if status == NotificationStatus.SENT:
        values["sent_at"] = now
    if retry_at is not None:
        values["next_attempt_at"] = retry_at
    async with engine.begin() as conn:
        result = await conn.execute(
            NOTIFICATIONS.update()
            .where(NOTIFICATIONS.c.id == message_id, NOTIFICATIONS.c.lease_owner == owner)
            .values(**values)
        )
    return bool(result.rowcount)


async def sent_since(engine: AsyncEngine, channel: str, since: datetime) -> list[datetime]:
    """When ``channel``'s messages sent since ``since`` went out, oldest first (the rate
    limit)."""
    async with engine.connect() as conn:
        rows = await conn.execute(
            sa.select(NOTIFICATIONS.c.sent_at)
            .where(
                NOTIFICATIONS.c.channel == channel,
                NOTIFICATIONS.c.status == NotificationStatus.SENT,
                NOTIFICATIONS.c.sent_at >= since,
            )
            .order_by(NOTIFICATIONS.c.sent_at)
        )
        return [_aware(row[0]) for row in rows]


async def alerts_of(engine: AsyncEngine, ids: Sequence[str]) -> list[sa.Row[Any]]:
    async with engine.connect() as conn:
        rows = await _rows(conn, ids)
    order = {alert_id: i for i, alert_id in enumerate(ids)}
    return sorted(rows, key=lambda row: order.get(row.id, 0))


@dataclass
class ChannelCounts:
    """A channel's messages by status, and its last failure's reason."""

    pending: int = 0
    sent: int = 0
    failed: int = 0
    last_error: str | None = None


async def channel_states(engine: AsyncEngine) -> dict[str, ChannelCounts]:
    """Per channel: messages waiting, sent, failed for good, and the last error (a
    failing channel is itself visible)."""
    async with engine.connect() as conn:
        counts = await conn.execute(
            sa.select(NOTIFICATIONS.c.channel, NOTIFICATIONS.c.status, sa.func.count()).group_by(
                NOTIFICATIONS.c.channel, NOTIFICATIONS.c.status
            )
        )
        states: dict[str, ChannelCounts] = {}
        for channel, status, n in counts:
            state = states.setdefault(channel, ChannelCounts())
            if status in ("pending", "sent", "failed"):
                setattr(state, status, int(n))
        for channel, state in states.items():
            last = (
                await conn.execute(
                    sa.select(NOTIFICATIONS.c.last_error)
                    .where(
                        NOTIFICATIONS.c.channel == channel,
                        NOTIFICATIONS.c.last_error.is_not(None),
                    )
                    .order_by(NOTIFICATIONS.c.created_at.desc())
                    .limit(1)
                )
            ).scalar()
            state.last_error = last
    return states
