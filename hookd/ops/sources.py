"""Sources as an operator sees them: the overview, reconciliation switched off by hand
and back on, and the provider's registration of the endpoint checked."""

from __future__ import annotations

import getpass
import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime

import httpx
from sqlalchemy.ext.asyncio import AsyncEngine

from hookd.errors import BadRequest, Conflict
from hookd.ops import models
from hookd.ops.destinations import DestinationOps
from hookd.ops.queries import configured
from hookd.ops.resources import pause_of, source_reconcile
from hookd.sources import Source, Sources
from reconcile import audit as reconcile_audit
from reconcile import service
from reconcile.providers.base import Registration
from store.admin import activity as store_activity
from store.admin import stats
from store.admin.activity import Minutes, RunPoint
from store.intake import events
from store.reconcile import audit
from store.reconcile import runs as rstate
from store.rows import RunRow
from store.status import RUNNABLE_STATUSES, EventStatus

# Who switched reconciliation off, as ``disabled_by`` records it: how (cli, api,
# admin) and, when known, with what (the token's scope, the session's, the OS user).
API_ACTOR = "api token:admin"
ADMIN_ACTOR = "admin session:admin"
MAX_REASON = 500
# Not processed or dead yet: what a source's pending count counts.
_NOT_DONE = (*RUNNABLE_STATUSES, EventStatus.PROCESSING)
# A reason is a line of text: no control characters (PostgreSQL text holds no NUL).
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def cli_actor() -> str:
    """The command line, and the OS user who ran it when the system knows one."""
    try:
        return f"cli user:{getpass.getuser()}"[:64]
    except (OSError, KeyError):  # no login name, no passwd entry (a container's uid)
        return "cli"


def checked_reason(reason: str | None) -> str:
    """A ``disable`` reason as it is stored; ``BadRequest`` for one that cannot be."""
    text = (reason or "").strip()
    if _CONTROL.search(text):
        raise BadRequest("reason", "reason must be one line of text (no control characters)")
    if len(text) > MAX_REASON:
        raise BadRequest("reason", f"reason is longer than {MAX_REASON} characters")
    return text or "disabled by hand"


__all__ = ["Activity", "RunPoint", "SourceOps"]


@dataclass(frozen=True, slots=True)
class Activity:
    """A source's events per minute and its reconcile runs since a moment (the admin's
    charts); ``keeps_late``: whether this schema counts late deliveries per run."""

    minutes: Minutes
    runs: list[RunPoint]
    keeps_late: bool


class SourceOps:
    """The configured ``sources`` over one database."""

    def __init__(self, engine: AsyncEngine, sources: Sources) -> None:
        self.engine = engine
        self.sources = sources

    def source(self, name: str) -> Source:
        return configured(self.sources, name)

    def reconcilable(self, name: str) -> Source:
        """A configured source with a ``[sources.reconcile]`` table."""
        source = self.source(name)
        if source.config.reconcile is None:
            raise Conflict("not_configured", "this source has no [sources.reconcile] table")
        return source

    async def activity(self, name: str, since: datetime, *, reconciled: bool) -> Activity:
        """What ``name`` received and processed per minute since ``since``, and its
        reconcile runs (none when it is not ``reconciled``)."""
        async with self.engine.connect() as conn:
            per_minute = await store_activity.minutes(conn, name, since)
            runs = await store_activity.runs(conn, name, since) if reconciled else []
        return Activity(per_minute, runs, store_activity.keeps_late())

    async def oldest_events(self, names: Iterable[str]) -> dict[str, datetime]:
        """Per source of ``names``, when its oldest kept event was received (sources
        with none left out)."""
        async with self.engine.connect() as conn:
            return await stats.oldest_events(conn, names)

    def reconciled(self) -> list[Source]:
        """Every source with a ``[sources.reconcile]`` table, in the file's order."""
        return service.reconciled(self.sources)

    async def overview(self) -> list[models.Source]:
        """Each source with its reconciliation state, its pending and dead counts, its
        pause switch and its destinations, in the file's order."""
        async with self.engine.connect() as conn:
            states = await rstate.all_states(conn)
            counts = await events.counts_by_source(conn, (*_NOT_DONE, EventStatus.DEAD))
            last_runs: dict[str, RunRow] = {}
            for name, state in states.items():
                run = (
                    None if not state.last_run_id else await rstate.get_run(conn, state.last_run_id)
                )
                if run is not None:
                    last_runs[name] = run
            violations = await audit.violation_totals(conn)
        # Paused or not, and the destinations (hookd.ops.destinations).
        routing = await DestinationOps(self.engine, self.sources).source_state()
        out = []
        for source in self.sources:
            name, switch = source.name, routing[source.name]
            reconcile = None
            if source.config.reconcile is not None:
                reconcile = source_reconcile(
                    states.get(name), last_runs.get(name), violations.get(name, 0)
                )
            out.append(
                models.Source(
                    name=name,
                    provider=source.provider,
                    reconcile=reconcile,
                    pending=sum(counts.get((name, s), 0) for s in _NOT_DONE),
                    dead=counts.get((name, EventStatus.DEAD), 0),
                    paused=switch.pause is not None and switch.pause.paused,
                    pause=pause_of(switch.pause),
                    destinations=switch.destinations,
                )
            )
        return out

    async def entry(self, name: str) -> models.Source:
        """One source's overview entry."""
        [found] = [r for r in await self.overview() if r.name == name]
        return found

    async def disable(self, name: str, reason: str | None, by: str) -> models.Source:
        """Reconciliation off by hand, with why and by whom (``by``: ``cli_actor()``,
        ``API_ACTOR``, ``ADMIN_ACTOR``), until ``enable``; the source's overview entry
        afterwards. A source already off stays off as it was (its first reason, time and
        author); a run in progress finishes, no new one starts."""
        source = self.reconcilable(name)
        text = checked_reason(reason)
        now = datetime.now(UTC)
        async with self.engine.begin() as conn:
            await rstate.ensure_state(conn, source.name, now)
            await audit.disable(conn, source.name, reason=text, by=by, now=now)
        return await self.entry(source.name)

    async def check(self, name: str, client: httpx.AsyncClient) -> Registration:
        """The provider's registration of the source's endpoint, read now and recorded
        (``unchecked`` says why not, where it cannot be)."""
        source = self.reconcilable(name)
        return await reconcile_audit.check_source(self.engine, client, source)

    async def enable(self, name: str) -> models.Source:
        """Reconciliation on again after it stopped itself (auth failures); the source's
        overview entry afterwards."""
        source = self.reconcilable(name)
        await service.enable(self.engine, source.name)
        return await self.entry(source.name)
