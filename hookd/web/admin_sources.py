"""The admin UI's sources sections: the sources page (reconciliation state, counts,
retention) with its actions (reconcile now, enable, disable, replay the dead), a
source's activity charts, the pause switches of sources and destinations, and a
source's coverage."""

from __future__ import annotations

import logging
from collections.abc import Awaitable
from datetime import UTC, datetime
from typing import Any

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from hookd.errors import BadRequest, Conflict
from hookd.ops import ADMIN_REPLAY
from hookd.ops.resources import coverage_of
from hookd.ops.sources import ADMIN_ACTOR
from hookd.providers import PROVIDERS
from hookd.sources import DAY_S, keys_needed
from hookd.web.admin_charts import coverage_timeline, source_charts
from hookd.web.admin_pages import Context, Section, action, back, page
from hookd.web.admin_session import PREFIX

log = logging.getLogger("hookd.admin")

# How far past its longest retention a source's oldest kept event may be before the
# sources page says prune is behind: a day, as HookdPruneNotRunning does.
PRUNE_BEHIND_DAYS = 1.0
_NO_SWITCH = "No such source or destination."


class SourcesSection(Section):
    """The sources page, a source's activity, and what may be done to a source."""

    @page("", "sources.html", "sources")
    async def sources_page(self, _: Request) -> Context:
        now = datetime.now(UTC).timestamp()
        rows = [source.answer() for source in await self.ops.sources.overview()]
        for row in rows:
            rc: Any = row["reconcile"]
            if rc is not None:
                rc["lag_s"] = None if rc["cursor"] is None else max(0.0, now - rc["cursor"])
        return {"rows": rows, "retention": await self._retention(datetime.now(UTC))}

    @page("/sources/{name}/activity", "activity.html", "sources", missing="No such source.")
    async def activity_page(self, request: Request) -> Context:
        """A source's last 24 hours as charts (server-rendered SVG, admin_charts)."""
        source = self.ops.sources.source(request.path_params["name"])
        charts = await source_charts(
            self.ops.sources,
            source.name,
            reconciled=source.config.reconcile is not None,
            now=datetime.now(UTC),
        )
        return {"name": source.name, "provider": source.provider, "charts": charts, "refresh": 60}

    async def _retention(self, now: datetime) -> list[dict[str, object]]:
        """Each source's retention as configured, its provider's redelivery horizon
        (and what its keys must outlast, when it is reconciled), and the
        age of its oldest kept event: past the longer of ``keep_events_days`` and
        ``keep_dead_days`` by ``PRUNE_BEHIND_DAYS``, prune is behind (the alert
        HookdPruneNotRunning says the same)."""
        oldest = await self.ops.sources.oldest_events(self.ops.names)
        rows = []
        for source in self.ops.configured:
            kept = source.config.retention
            provider = PROVIDERS[source.provider]
            needed, why = keys_needed(provider, source.config.reconcile)
            received = oldest.get(source.name)
            age = None if received is None else max(0.0, (now - received).total_seconds())
            longest = max(kept.keep_events_days, kept.keep_dead_days)
            rows.append(
                {
                    "name": source.name,
                    "body": _in_days(kept.keep_body_days),
                    "events": _in_days(kept.keep_events_days),
                    "dead": _in_days(kept.keep_dead_days),
                    "keys_kept": _in_days(kept.keep_keys_days),
                    "horizon": _in_days(provider.redelivery_horizon_days),
                    # The least keep_keys_days the sources file takes, and why: said
                    # for a reconciled source, whose pass adds to the horizon.
                    "keys_needed": None if source.config.reconcile is None else _in_days(needed),
                    "keys_why": why,
                    "oldest_age_s": age,
                    "behind": age is not None and age > (longest + PRUNE_BEHIND_DAYS) * DAY_S,
                }
            )
        return rows

    @action("/sources/{name}/reconcile", missing="No such source.")
    async def reconcile_now(self, request: Request, form: dict[str, str]) -> Response:
        name = request.path_params["name"]
        try:
            started = await self.ops.runs.start(name, dry_run=False)
        except Conflict as exc:
            return back(form, PREFIX, error=exc.reason)
        run_id = started.run.id
        log.info("admin reconcile started", extra={"source": name, "run_id": run_id})
        return RedirectResponse(f"{PREFIX}/runs/{run_id}?done=reconcile_started", status_code=303)

    @action("/sources/{name}/enable", missing="No such source.")
    async def enable(self, request: Request, form: dict[str, str]) -> Response:
        name = request.path_params["name"]
        return await self._switched(form, name, self.ops.sources.enable(name), "enabled")

    @action("/sources/{name}/disable", missing="No such source.")
    async def disable(self, request: Request, form: dict[str, str]) -> Response:
        name = request.path_params["name"]
        switched = self.ops.sources.disable(name, form.get("reason"), ADMIN_ACTOR)
        return await self._switched(form, name, switched, "disabled")

    @staticmethod
    async def _switched(
        form: dict[str, str], name: str, switching: Awaitable[object], done: str
    ) -> Response:
        """Back to the sources page once ``name``'s reconciliation is ``done`` (enabled,
        disabled), or with why not: a reason refused, or the refusal's own."""
        try:
            await switching
        except BadRequest:
            return back(form, PREFIX, error="bad_reason")
        except Conflict as exc:
            return back(form, PREFIX, error=exc.reason)
        log.info(f"admin {done} reconciliation", extra={"source": name})
        return back(form, PREFIX, done=done)

    @action("/sources/{name}/replay-dead", missing="No such source.")
    async def replay_dead(self, request: Request, form: dict[str, str]) -> Response:
        source = self.ops.sources.source(request.path_params["name"])
        # As `hookd replay --source S --status dead`, of a source in the sources file.
        replayed = (await self.ops.events.replay_dead(source.name, by=ADMIN_REPLAY)).replayed
        if not replayed:
            return back(form, PREFIX + "/dead", error="nothing_dead")
        log.info("admin replayed dead", extra={"source": source.name, "count": len(replayed)})
        return back(form, PREFIX + "/dead", done="replayed_many", count=str(len(replayed)))


class DestinationsSection(Section):
    """The pause switches: a source's processing, one destination's deliveries."""

    @action("/sources/{name}/pause", missing=_NO_SWITCH)
    @action("/sources/{name}/destinations/{destination}/pause", missing=_NO_SWITCH)
    async def pause(self, request: Request, form: dict[str, str]) -> Response:
        return await self._switch(request, form, paused=True)

    @action("/sources/{name}/resume", missing=_NO_SWITCH)
    @action("/sources/{name}/destinations/{destination}/resume", missing=_NO_SWITCH)
    async def resume(self, request: Request, form: dict[str, str]) -> Response:
        return await self._switch(request, form, paused=False)

    async def _switch(self, request: Request, form: dict[str, str], *, paused: bool) -> Response:
        """Pause or resume a source (no ``destination`` in the path) or a destination."""
        name = request.path_params["name"]
        destination = request.path_params.get("destination")
        ops = self.ops.destinations
        try:
            if destination is None and paused:
                await ops.pause_source(name, by=ADMIN_ACTOR, reason=form.get("reason"))
            elif destination is None:
                await ops.resume_source(name, by=ADMIN_ACTOR)
            elif paused:
                await ops.pause(name, destination, by=ADMIN_ACTOR, reason=form.get("reason"))
            else:
                await ops.resume(name, destination, by=ADMIN_ACTOR)
        except BadRequest:
            return back(form, PREFIX, error="bad_pause_reason")
        log.info(
            "admin paused" if paused else "admin resumed",
            extra={"source": name, "destination": destination},
        )
        return back(form, PREFIX, done="paused" if paused else "resumed")


class CoverageSection(Section):
    """A source's coverage, as ``hookd coverage`` shows it."""

    @page(
        "/sources/{name}/coverage",
        "coverage.html",
        "sources",
        missing="No such source.",
        conflict="This source is not reconciled.",
    )
    async def coverage_page(self, request: Request) -> Context:
        """A source's coverage, as `hookd coverage` shows it, for the range asked."""
        name = request.path_params["name"]
        since = request.query_params.get("since") or None
        until = request.query_params.get("until") or None
        report = coverage_of(await self.ops.coverage.report(name, since, until)).answer()
        return {
            "name": name,
            "since": since or "",
            "until": until or "",
            "report": report,
            "timeline": coverage_timeline(report),
        }


def _in_days(days: float) -> str:
    """A number of days as the sources file may give it: ``7 days``, ``1 day``, ``0.5 days``."""
    shown = f"{round(days, 3):g}"
    return f"{shown} day" if shown == "1" else f"{shown} days"
