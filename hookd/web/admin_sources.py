"""The admin UI's sources sections: the sources page (reconciliation state, counts,
retention) with its actions (reconcile now, enable, disable, replay the dead), a
source's activity charts, the pause switches of sources and destinations, and a
source's coverage."""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from hookd.errors import BadRequest, Conflict, NotFound
from hookd.ops import ADMIN_REPLAY
from hookd.ops.resources import coverage_of
from hookd.ops.sources import ADMIN_ACTOR
from hookd.providers import PROVIDERS
from hookd.sources import DAY_S, keys_needed
from hookd.web.admin_charts import coverage_timeline, source_charts
from hookd.web.admin_pages import ActionRoute, PageRoute, Section
from hookd.web.admin_session import PREFIX, Session

log = logging.getLogger("hookd.admin")

# How far past its longest retention a source's oldest kept event may be before the
# sources page says prune is behind: a day, as HookdPruneNotRunning does.
PRUNE_BEHIND_DAYS = 1.0


class SourcesSection(Section):
    """The sources page, a source's activity, and what may be done to a source."""

    def routes(self) -> list[PageRoute | ActionRoute]:
        return [
            PageRoute("", self.sources_page),
            PageRoute("/sources/{name}/activity", self.activity_page),
            ActionRoute("/sources/{name}/reconcile", self.reconcile_now),
            ActionRoute("/sources/{name}/enable", self.enable),
            ActionRoute("/sources/{name}/disable", self.disable),
            ActionRoute("/sources/{name}/replay-dead", self.replay_dead),
        ]

    async def activity_page(self, request: Request, session: Session) -> Response:
        """A source's last 24 hours as charts (server-rendered SVG, admin_charts)."""
        source = self.ops.configured.get(request.path_params["name"])
        if source is None:
            return self.view.problem(request, session, 404, "No such source.")
        charts = await source_charts(
            self.ops.sources,
            source.name,
            reconciled=source.config.reconcile is not None,
            now=datetime.now(UTC),
        )
        return self.view.page(
            request,
            session,
            "activity.html",
            "sources",
            name=source.name,
            provider=source.provider,
            charts=charts,
            refresh=60,
        )

    async def sources_page(self, request: Request, session: Session) -> Response:
        now = datetime.now(UTC).timestamp()
        rows = [source.answer() for source in await self.ops.sources.overview()]
        for row in rows:
            rc: Any = row["reconcile"]
            if rc is not None:
                rc["lag_s"] = None if rc["cursor"] is None else max(0.0, now - rc["cursor"])
        return self.view.page(
            request,
            session,
            "sources.html",
            "sources",
            rows=rows,
            retention=await self._retention(datetime.now(UTC)),
        )

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

    async def reconcile_now(
        self, request: Request, session: Session, form: dict[str, str]
    ) -> Response:
        name = request.path_params["name"]
        try:
            started = await self.ops.runs.start(name, dry_run=False)
        except NotFound:
            return self.view.problem(request, session, 404, "No such source.")
        except Conflict as exc:
            return self.view.back(form, PREFIX, error=exc.reason)
        run_id = started.run.id
        log.info("admin reconcile started", extra={"source": name, "run_id": run_id})
        return RedirectResponse(f"{PREFIX}/runs/{run_id}?done=reconcile_started", status_code=303)

    async def enable(self, request: Request, session: Session, form: dict[str, str]) -> Response:
        name = request.path_params["name"]
        try:
            await self.ops.sources.enable(name)
        except NotFound:
            return self.view.problem(request, session, 404, "No such source.")
        except Conflict as exc:
            return self.view.back(form, PREFIX, error=exc.reason)
        log.info("admin enabled reconciliation", extra={"source": name})
        return self.view.back(form, PREFIX, done="enabled")

    async def disable(self, request: Request, session: Session, form: dict[str, str]) -> Response:
        name = request.path_params["name"]
        try:
            await self.ops.sources.disable(name, form.get("reason"), ADMIN_ACTOR)
        except NotFound:
            return self.view.problem(request, session, 404, "No such source.")
        except BadRequest:
            return self.view.back(form, PREFIX, error="bad_reason")
        except Conflict as exc:
            return self.view.back(form, PREFIX, error=exc.reason)
        log.info("admin disabled reconciliation", extra={"source": name})
        return self.view.back(form, PREFIX, done="disabled")

    async def replay_dead(
        self, request: Request, session: Session, form: dict[str, str]
    ) -> Response:
        try:
            source = self.ops.sources.source(request.path_params["name"])
        except NotFound:
            return self.view.problem(request, session, 404, "No such source.")
        # As `hookd replay --source S --status dead`, of a source in the sources file.
        replayed = (await self.ops.events.replay_dead(source.name, by=ADMIN_REPLAY)).replayed
        if not replayed:
            return self.view.back(form, PREFIX + "/dead", error="nothing_dead")
        log.info("admin replayed dead", extra={"source": source.name, "count": len(replayed)})
        return self.view.back(
            form, PREFIX + "/dead", done="replayed_many", count=str(len(replayed))
        )


class DestinationsSection(Section):
    """The pause switches: a source's processing, one destination's deliveries."""

    def routes(self) -> list[PageRoute | ActionRoute]:
        return [
            ActionRoute("/sources/{name}/pause", self.source_pause),
            ActionRoute("/sources/{name}/resume", self.source_resume),
            ActionRoute("/sources/{name}/destinations/{destination}/pause", self.source_pause),
            ActionRoute("/sources/{name}/destinations/{destination}/resume", self.source_resume),
        ]

    async def source_pause(
        self, request: Request, session: Session, form: dict[str, str]
    ) -> Response:
        return await self._switch(request, session, form, paused=True)

    async def source_resume(
        self, request: Request, session: Session, form: dict[str, str]
    ) -> Response:
        return await self._switch(request, session, form, paused=False)

    async def _switch(
        self, request: Request, session: Session, form: dict[str, str], *, paused: bool
    ) -> Response:
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
        except NotFound:
            return self.view.problem(request, session, 404, "No such source or destination.")
        except BadRequest:
            return self.view.back(form, PREFIX, error="bad_pause_reason")
        log.info(
            "admin paused" if paused else "admin resumed",
            extra={"source": name, "destination": destination},
        )
        return self.view.back(form, PREFIX, done="paused" if paused else "resumed")


class CoverageSection(Section):
    """A source's coverage, as ``hookd coverage`` shows it."""

    def routes(self) -> list[PageRoute | ActionRoute]:
        return [PageRoute("/sources/{name}/coverage", self.coverage_page)]

    async def coverage_page(self, request: Request, session: Session) -> Response:
        """A source's coverage, as `hookd coverage` shows it, for the range asked."""
        name = request.path_params["name"]
        since = request.query_params.get("since") or None
        until = request.query_params.get("until") or None
        try:
            report = await self.ops.coverage.report(name, since, until)
        except NotFound:
            return self.view.problem(request, session, 404, "No such source.")
        except Conflict:
            return self.view.problem(request, session, 409, "This source is not reconciled.")
        except BadRequest as exc:
            return self.view.problem(request, session, 400, exc.detail)
        view = coverage_of(report).answer()
        return self.view.page(
            request,
            session,
            "coverage.html",
            "sources",
            name=name,
            since=since or "",
            until=until or "",
            report=view,
            timeline=coverage_timeline(view),
        )


def _in_days(days: float) -> str:
    """A number of days as the sources file may give it: ``7 days``, ``1 day``, ``0.5 days``."""
    shown = f"{round(days, 3):g}"
    return f"{shown} day" if shown == "1" else f"{shown} days"
