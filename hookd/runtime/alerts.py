"""The alerts' schedule, kept by whichever process keeps the others (``hookd serve``
without Redis, or ``hookd worker``): every ``[alerts] evaluate_every_s`` one process of
the cluster (a lease, ``maintenance_state`` task ``alerts``) evaluates the conditions
(``hookd.ops.alerts.Conditions``) and applies what it found to the stored alerts,
queueing their notifications in the same transaction (``store.admin.alerts.apply``);
the first evaluation comes one period after the process started; every ``TICK_S``
each such process sends what is due (``hookd.notify.outbox``: a claim
per message, so none goes out twice).

At shutdown a message being sent has ``STOP_GRACE_S`` to finish (a channel's timeout
bounds it) and is recorded as sent; one cut short keeps its claim until it runs out,
and is sent again by the next sender.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from datetime import UTC, datetime, timedelta

import httpx
from sqlalchemy.ext.asyncio import AsyncEngine

from hookd import tasks
from hookd.notify.channels import Channel, channel_for
from hookd.notify.outbox import Notifier, route_for
from hookd.ops.alerts import Conditions
from hookd.ops.coverage import CoverageOps
from hookd.ops.sources import SourceOps
from hookd.sources import Sources
from store.admin import alerts as store_alerts
from store.admin.alerts import Changes, Route
from store.ids import worker_id
from store.retention import lease

log = logging.getLogger("hookd.alerts")

TASK = "alerts"
# How often a process looks for messages due (retries, a group's hold, the rate limit).
TICK_S = 5.0
# An evaluation's lease: a process that died evaluating delays the next by this long.
LEASE_S = 120.0
STOP_GRACE_S = 10.0


def channels_of(sources: Sources, client: httpx.AsyncClient) -> list[Channel]:
    return [channel_for(config, client) for config in sources.notify]


class AlertSchedule:
    """Evaluate once per period per cluster; send what is due, every tick."""

    def __init__(
        self,
        engine: AsyncEngine,
        sources: Sources,
        client: httpx.AsyncClient,
        *,
        prune_every_s: float,
    ) -> None:
        config = sources.alerts
        self._engine = engine
        self._every_s = float(config.evaluate_every_s)
        self._group_s = float(config.group_s)
        self._owner = worker_id()
        channels = channels_of(sources, client)
        self._route = route_for(sources)
        self._conditions = Conditions(
            engine,
            sources,
            CoverageOps(engine, SourceOps(engine, sources)),
            config,
            prune_every_s,
        )
        self._notifier = Notifier(
            engine,
            {channel.name: channel for channel in channels},
            owner=self._owner,
            max_per_hour=config.max_per_hour,
            base_url=config.admin_url or "",
        )
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._first_at = 0.0

    async def start(self) -> None:
        # The first evaluation one period after start: what a restart interrupted (a
        # drain, a run) has that long to settle before conditions are judged.
        self._first_at = time.monotonic() + self._every_s
        self._task = asyncio.create_task(self._loop(), name="hookd-alerts")

    async def stop(self, grace_s: float = STOP_GRACE_S) -> None:
        if self._task is None:
            return
        self._stop.set()
        await tasks.finish(self._task, grace_s)
        self._task = None

    async def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                await self.tick()
            except Exception as exc:  # the database away: the next tick tries again
                log.warning("alerts not evaluated", extra={"error": type(exc).__name__})
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), min(TICK_S, self._every_s))

    async def tick(self, now: datetime | None = None) -> Changes | None:
        """An evaluation if one is due and this process takes it; then the sends."""
        now = now or datetime.now(UTC)
        changes = await self.evaluate(now) if time.monotonic() >= self._first_at else None
        if not self._stop.is_set():
            await self._notifier.send_due()
        return changes

    async def evaluate(self, now: datetime) -> Changes | None:
        """The conditions read and applied, if no process did within the period (None:
        another did, or holds the lease)."""
        # A little early counts as due: ticks drift by a few milliseconds.
        due_before = now - timedelta(seconds=self._every_s * 0.9)
        taken = await lease.acquire(
            self._engine, self._owner, LEASE_S, now, due_before=due_before, task=TASK
        )
        if not taken:
            return None
        finished = None
        try:
            findings, evaluated = await self._conditions.evaluate(now)
            changes = await store_alerts.apply(
                self._engine, findings, evaluated, now, route=self._route, group_s=self._group_s
            )
            finished = now
        finally:
            await asyncio.shield(
                lease.release(self._engine, self._owner, finished_at=finished, task=TASK)
            )
        for alert_id in changes.opened:
            log.warning("alert opened", extra={"alert": alert_id})
        for alert_id in changes.resolved:
            log.info("alert resolved", extra={"alert": alert_id})
        return changes

    @property
    def route(self) -> Route:
        return self._route

    @property
    def group_s(self) -> float:
        return self._group_s
