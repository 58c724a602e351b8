"""The admin UI at ``/admin``: server-rendered pages over the same operations
(``hookd.ops``) as the Operations API, behind a login with the admin token (every
page and action) or the read token (the pages only: no action is offered, and a
POSTed one is refused with 403, logging out aside).

The session, its CSRF token, forms, redirects and security headers are in
``admin_session``; the templates, their filters and the pages' messages in
``admin_format``. Pages run no JavaScript and load nothing from elsewhere; GET pages
never change state. Event bodies and headers are never shown.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote, urlencode

from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Route

from hookd.auth import Tokens
from hookd.errors import BadRequest, Conflict, NotFound
from hookd.ops import ADMIN_REPLAY, EventOps, EventQuery, RunOps, RunQuery, SourceOps
from hookd.ops.coverage import CoverageOps
from hookd.ops.destinations import DestinationOps
from hookd.ops.models import Event, WatchPage
from hookd.ops.objects import ObjectOps
from hookd.ops.operations import OperationOps
from hookd.ops.resources import coverage_of
from hookd.ops.sources import ADMIN_ACTOR
from hookd.ops.watch import WatchOps, WatchQuery
from hookd.providers import PROVIDERS
from hookd.sources import DAY_S, keys_needed
from hookd.timefmt import iso_z_or_none
from hookd.web.admin_charts import coverage_timeline, source_charts
from hookd.web.admin_format import BAD_FILTER, TEMPLATES, environment, flash_message
from hookd.web.admin_session import (
    PREFIX,
    Session,
    Sessions,
    csrf_ok,
    filled,
    here,
    read_form,
    safe_next,
    secured,
    with_query,
)
from hookd.web.auth_limit import (
    UNAVAILABLE,
    UNAVAILABLE_RETRY_S,
    AuthLimit,
    bounded,
    client_address,
)
from processing.handlers import FORWARD
from store import stats
from store.models import ORIGINS, STATUSES
from store.status import RUNNABLE_STATUSES, EventStatus

log = logging.getLogger("hookd.admin")

PAGE_SIZE = 50
# An event page reloads itself while the event is about to move on (never tried, or claimed).
_MOVING = (EventStatus.PENDING, EventStatus.PROCESSING)
# How far past its longest retention a source's oldest kept event may be before the
# sources page says prune is behind: a day, as HookdPruneNotRunning does.
PRUNE_BEHIND_DAYS = 1.0

Endpoint = Callable[[Request], Awaitable[Response]]


Page = Callable[[Request, Session], Awaitable[Response]]
Action = Callable[[Request, Session, dict[str, str]], Awaitable[Response]]


class AdminUI:
    """The /admin pages over the operations the API offers: the same ``events``
    (replay wakes processing as the API's does), ``sources`` and ``runs`` (a run
    started here is one the API started, cancelled at shutdown like them).
    """

    def __init__(
        self,
        tokens: Tokens,
        events: EventOps,
        sources: SourceOps,
        runs: RunOps,
        watch: WatchOps,
        *,
        operations: OperationOps,
    ) -> None:
        self._sessions = Sessions(tokens.admin, tokens.read, sources.engine)
        self._login_limit = AuthLimit(sources.engine)
        self._operations = operations
        self._watch = watch
        self._events = events
        self._source_ops = sources
        self._sources = sources.sources
        self._runs = runs
        self._templates = environment()
        self._stylesheet = (TEMPLATES / "admin.css").read_bytes()
        self._names = [s.name for s in self._sources]
        self._objects = ObjectOps(sources.engine, sources.sources)
        self._destinations = DestinationOps(sources.engine, sources.sources, events.wake)

    # -- plumbing ------------------------------------------------------------------
    def _render(
        self, request: Request, template: str, http_status: int = 200, **context: Any
    ) -> Response:
        context.setdefault("csrf", None)
        context.setdefault("section", "")
        context.setdefault("can_act", False)
        html = self._templates.get_template(template).render(
            prefix=PREFIX, flash=flash_message(request.query_params), here=here(request), **context
        )
        return HTMLResponse(html, status_code=http_status)

    def _problem(self, request: Request, session: Session | None, code: int, text: str) -> Response:
        csrf = session.csrf if session else None
        can_act = session.can_act if session else False
        return self._render(
            request, "error.html", code, csrf=csrf, can_act=can_act, code=code, message=text
        )

    @staticmethod
    def _to_login(request: Request) -> Response:
        target = PREFIX + "/login"
        if request.method == "GET" and request.url.path != PREFIX:
            target += "?next=" + quote(here(request), safe="")
        return RedirectResponse(target, status_code=303)

    @staticmethod
    def _back(form: Mapping[str, str], default: str, **flash: str) -> Response:
        target = safe_next(form.get("back"), default)
        return RedirectResponse(with_query(target, **flash), status_code=303)

    def page(self, handler: Page) -> Endpoint:
        """A GET page: a valid session or a 303 to the login page."""

        async def endpoint(request: Request) -> Response:
            session = await self._sessions.load(request)
            if session is None:
                return secured(self._to_login(request))
            return secured(await handler(request, session))

        return endpoint

    def action(self, handler: Action, *, read_only_too: bool = False) -> Endpoint:
        """A POST: a valid session that may act (``read_only_too``: any session, for
        logging out), then the form's CSRF token, before anything changes."""

        async def endpoint(request: Request) -> Response:
            session = await self._sessions.load(request)
            if session is None:
                return secured(self._to_login(request))
            if not (session.can_act or read_only_too):
                path = request.url.path
                log.warning("admin action refused: read-only session", extra={"path": path})
                text = (
                    "This session may only look: sign in with HOOKD_ADMIN_TOKEN to change things."
                )
                return secured(self._problem(request, session, 403, text))
            form = await read_form(request)
            if form is None:
                return secured(self._problem(request, session, 413, "That form is too large."))
            if not csrf_ok(session, form):
                log.warning("admin form refused: bad csrf", extra={"path": request.url.path})
                text = "The form's CSRF token is missing or wrong."
                return secured(self._problem(request, session, 403, text))
            return secured(await handler(request, session, form))

        return endpoint

    # -- login ---------------------------------------------------------------------
    async def login_form(self, request: Request) -> Response:
        response = self._render(
            request,
            "login.html",
            enabled=self._sessions.enabled,
            next=safe_next(request.query_params.get("next")),
            message=None,
        )
        return secured(response)

    async def login(self, request: Request) -> Response:
        form = await read_form(request) or {}
        target = safe_next(form.get("next"))
        if not self._sessions.enabled:
            message = "The admin UI is off: set HOOKD_ADMIN_TOKEN (or HOOKD_READ_TOKEN) to use it."
            return secured(self._login_page(request, 401, target, message))
        client = client_address(request)
        # Too many refused tokens from this address (or from everyone): no token is
        # looked at until later. Else this check is counted before the token is
        # compared, in one atomic statement that every process shares.
        reservation = None
        try:
            async with bounded(self._login_limit) as check:
                wait_s = await check.wait_s(client)
                if wait_s is None:
                    reservation = await check.reserve(client)
                    wait_s = reservation.wait_s
        except UNAVAILABLE as exc:
            log.warning("admin login unavailable", extra={"error": type(exc).__name__})
            message = "Logins are not possible right now: try again in a few seconds."
            response = self._login_page(request, 503, target, message)
            response.headers["Retry-After"] = str(UNAVAILABLE_RETRY_S)
            return secured(response)
        if reservation is None or wait_s is not None:
            log.warning("admin login rate limited", extra={"client": client, "wait_s": wait_s})
            message = f"Too many refused logins: try again in {wait_s} s."
            response = self._login_page(request, 429, target, message)
            response.headers["Retry-After"] = str(wait_s)
            return secured(response)
        can_act = self._sessions.opens(form.get("token", ""))
        if can_act is None:
            # The reservation stays: it is this refusal, counted.
            log.warning("admin login refused", extra={"client": client})
            return secured(self._login_page(request, 401, target, "That token is not right."))
        log.info("admin login", extra={"client": client, "read_only": not can_act})
        await self._login_limit.release(reservation.attempt)
        response = RedirectResponse(target, status_code=303)
        await self._sessions.start(response, request, can_act=can_act)
        return secured(response)

    def _login_page(self, request: Request, code: int, target: str, message: str) -> Response:
        return self._render(
            request,
            "login.html",
            code,
            enabled=self._sessions.enabled,
            next=target,
            message=message,
        )

    async def logout(self, request: Request, session: Session, __: dict[str, str]) -> Response:
        log.info("admin logout", extra={"client": client_address(request)})
        response = RedirectResponse(PREFIX + "/login?done=logged_out", status_code=303)
        # Deleted server-side: a copy of this cookie stops working as well.
        await self._sessions.end(response, request, session)
        return response

    async def css(self, _: Request) -> Response:
        return Response(
            self._stylesheet,
            media_type="text/css",
            headers={"Cache-Control": "max-age=300", "X-Content-Type-Options": "nosniff"},
        )

    # -- sources -------------------------------------------------------------------
    async def activity_page(self, request: Request, session: Session) -> Response:
        """A source's last 24 hours as charts (server-rendered SVG, admin_charts)."""
        source = self._sources.get(request.path_params["name"])
        if source is None:
            return self._problem(request, session, 404, "No such source.")
        charts = await source_charts(
            self._source_ops.engine,
            source.name,
            reconciled=source.config.reconcile is not None,
            now=datetime.now(UTC),
        )
        return self._render(
            request,
            "activity.html",
            csrf=session.csrf,
            can_act=session.can_act,
            section="sources",
            name=source.name,
            provider=source.provider,
            charts=charts,
            refresh=60,
        )

    async def sources_page(self, request: Request, session: Session) -> Response:
        now = datetime.now(UTC).timestamp()
        rows = [source.answer() for source in await self._source_ops.overview()]
        for row in rows:
            rc: Any = row["reconcile"]
            if rc is not None:
                rc["lag_s"] = None if rc["cursor"] is None else max(0.0, now - rc["cursor"])
        return self._render(
            request,
            "sources.html",
            csrf=session.csrf,
            can_act=session.can_act,
            section="sources",
            rows=rows,
            retention=await self._retention(datetime.now(UTC)),
        )

    async def _retention(self, now: datetime) -> list[dict[str, Any]]:
        """Each source's retention as configured, its provider's redelivery horizon
        (and what its keys must outlast, when it is reconciled), and the
        age of its oldest kept event: past the longer of ``keep_events_days`` and
        ``keep_dead_days`` by ``PRUNE_BEHIND_DAYS``, prune is behind (the alert
        HookdPruneNotRunning says the same)."""
        async with self._source_ops.engine.connect() as conn:
            oldest = await stats.oldest_events(conn, self._names)
        rows = []
        for source in self._sources:
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
            started = await self._runs.start(name, dry_run=False)
        except NotFound:
            return self._problem(request, session, 404, "No such source.")
        except Conflict as exc:
            return self._back(form, PREFIX, error=exc.reason)
        run_id = started.run.id
        log.info("admin reconcile started", extra={"source": name, "run_id": run_id})
        return RedirectResponse(f"{PREFIX}/runs/{run_id}?done=reconcile_started", status_code=303)

    async def enable(self, request: Request, session: Session, form: dict[str, str]) -> Response:
        name = request.path_params["name"]
        try:
            await self._source_ops.enable(name)
        except NotFound:
            return self._problem(request, session, 404, "No such source.")
        except Conflict as exc:
            return self._back(form, PREFIX, error=exc.reason)
        log.info("admin enabled reconciliation", extra={"source": name})
        return self._back(form, PREFIX, done="enabled")

    async def disable(self, request: Request, session: Session, form: dict[str, str]) -> Response:
        name = request.path_params["name"]
        try:
            await self._source_ops.disable(name, form.get("reason"), ADMIN_ACTOR)
        except NotFound:
            return self._problem(request, session, 404, "No such source.")
        except BadRequest:
            return self._back(form, PREFIX, error="bad_reason")
        except Conflict as exc:
            return self._back(form, PREFIX, error=exc.reason)
        log.info("admin disabled reconciliation", extra={"source": name})
        return self._back(form, PREFIX, done="disabled")

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
        ops = self._destinations
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
            return self._problem(request, session, 404, "No such source or destination.")
        except BadRequest:
            return self._back(form, PREFIX, error="bad_pause_reason")
        log.info(
            "admin paused" if paused else "admin resumed",
            extra={"source": name, "destination": destination},
        )
        return self._back(form, PREFIX, done="paused" if paused else "resumed")

    async def replay_dead(
        self, request: Request, session: Session, form: dict[str, str]
    ) -> Response:
        try:
            source = self._source_ops.source(request.path_params["name"])
        except NotFound:
            return self._problem(request, session, 404, "No such source.")
        # As `hookd replay --source S --status dead`, of a source in the sources file.
        replayed = (await self._events.replay_dead(source.name, by=ADMIN_REPLAY)).replayed
        if not replayed:
            return self._back(form, PREFIX + "/dead", error="nothing_dead")
        log.info("admin replayed dead", extra={"source": source.name, "count": len(replayed)})
        return self._back(form, PREFIX + "/dead", done="replayed_many", count=str(len(replayed)))

    # -- events --------------------------------------------------------------------
    async def _event_list(
        self, request: Request, session: Session, *, dead: bool
    ) -> dict[str, Any] | Response:
        """The filtered, keyset-paged list as GET /api/events makes it; or an error page.

        A filter left empty in the form means "any"; the dead page lists dead events
        of one source or of all, whatever else the query says."""
        q = request.query_params
        params = filled(q, "source", "cursor") if dead else filled(q, *EVENT_FILTERS, "cursor")
        if dead:
            params["status"] = EventStatus.DEAD
        try:
            query = EventQuery.parse({**params, "limit": str(PAGE_SIZE)})
        except BadRequest as exc:
            text = BAD_FILTER.get(exc.field, exc.detail)
            return self._problem(request, session, 400, text)
        page = await self._events.page(query)
        filters = {
            "source": query.source,
            "status": query.status,
            "origin": query.origin,
            "type": query.type,
            "object": query.object,
        }
        kept = {k: v for k, v in filters.items() if v and not (dead and k == "status")}
        older = None
        if page.next_cursor is not None:
            older = "?" + urlencode({**kept, "cursor": page.next_cursor})
        return {
            "events": listed(page.events),
            "filters": filters,
            "older": older,
            "newest": "?" + urlencode(kept),
            "first_page": query.cursor is None,
        }

    async def events_page(self, request: Request, session: Session) -> Response:
        listed = await self._event_list(request, session, dead=False)
        if isinstance(listed, Response):
            return listed
        return self._render(
            request,
            "events.html",
            csrf=session.csrf,
            can_act=session.can_act,
            section="events",
            sources=self._names,
            statuses=STATUSES,
            origins=ORIGINS,
            **listed,
        )

    async def dead_page(self, request: Request, session: Session) -> Response:
        listed = await self._event_list(request, session, dead=True)
        if isinstance(listed, Response):
            return listed
        counts = [{"name": r.name, "dead": r.dead} for r in await self._source_ops.overview()]
        return self._render(
            request,
            "dead.html",
            csrf=session.csrf,
            can_act=session.can_act,
            section="dead",
            sources=self._names,
            counts=counts,
            **listed,
        )

    async def _watch_page(
        self,
        request: Request,
        session: Session,
        section: str,
        fetch: Callable[[WatchQuery], Awaitable[WatchPage]],
    ) -> Response:
        """A watch list (stuck, many attempts): filtered and paged as the event list."""
        q = request.query_params
        params = filled(q, "source", "cursor", *(("attempts",) if section == "retried" else ()))
        try:
            query = WatchQuery.parse({**params, "limit": str(PAGE_SIZE)})
        except BadRequest as exc:
            return self._problem(request, session, 400, BAD_FILTER.get(exc.field, exc.detail))
        page = await fetch(query)
        kept = {k: v for k, v in params.items() if k != "cursor"}
        older = None
        if page.next_cursor is not None:
            older = "?" + urlencode({**kept, "cursor": page.next_cursor})
        return self._render(
            request,
            f"{section}.html",
            csrf=session.csrf,
            can_act=session.can_act,
            section=section,
            sources=self._names,
            events=listed(page.events),
            filters={"source": query.source, "attempts": query.min_attempts},
            older=older,
            newest="?" + urlencode(kept),
            first_page=query.cursor is None,
        )

    async def stuck_page(self, request: Request, session: Session) -> Response:
        return await self._watch_page(request, session, "stuck", self._watch.stuck)

    async def retried_page(self, request: Request, session: Session) -> Response:
        return await self._watch_page(request, session, "retried", self._watch.retried)

    async def event_page(self, request: Request, session: Session) -> Response:
        try:
            detail = await self._events.show(request.path_params["id"], with_ledger=True)
        except NotFound:
            return self._problem(request, session, 404, "No such event.")
        event = detail.resource.answer()
        runnable = event["status"] in RUNNABLE_STATUSES
        event["next_attempt_at"] = iso_z_or_none(detail.next_attempt_at) if runnable else None
        source = self._sources.get(event["source"])
        chain = [*source.config.handler_refs] if source else []
        if source is not None and source.config.forward is not None:
            chain.append(FORWARD)
        chain += [d.name for d in source.config.destinations] if source else []
        finished, skipped = detail.finished, detail.skipped
        handlers = [{"name": h, "finished": h in finished, "skipped": h in skipped} for h in chain]
        handlers += [
            {"name": h, "finished": True, "skipped": h in skipped}
            for h in sorted(finished - set(chain))
        ]
        return self._render(
            request,
            "event.html",
            csrf=session.csrf,
            can_act=session.can_act,
            section="events",
            event=event,
            handlers=handlers,
            max_attempts=source.config.max_attempts if source else None,
            refresh=2 if event["status"] in _MOVING else None,
        )

    async def object_page(self, request: Request, session: Session) -> Response:
        """One object of a source with [sources.order]: its latest known state and its
        newest events."""
        name, key = request.path_params["name"], request.path_params["id"]
        try:
            state = await self._objects.show(name, key)
        except NotFound:
            return self._problem(request, session, 404, "No such object.")
        except Conflict as exc:
            return self._problem(request, session, 409, exc.detail)
        page = await self._events.page(EventQuery(source=name, object=key, limit=PAGE_SIZE))
        return self._render(
            request,
            "object.html",
            csrf=session.csrf,
            can_act=session.can_act,
            section="events",
            state=state.answer(),
            events=listed(page.events),
            first_page=True,
            older=None,
            newest=None,
            more="?" + urlencode({"source": name, "object": key}) if page.next_cursor else None,
        )

    async def replay(self, request: Request, session: Session, form: dict[str, str]) -> Response:
        event_id = request.path_params["id"]
        default = f"{PREFIX}/events/{event_id}"
        # As POST /api/events/{id}/replay, which wakes processing too.
        try:
            await self._events.replay(event_id, by=ADMIN_REPLAY)
        except NotFound:
            return self._problem(request, session, 404, "No such event.")
        except Conflict as exc:
            return self._back(form, default, error=exc.reason)
        log.info("admin replayed event", extra={"event_id": event_id})
        return self._back(form, default, done="replayed")

    async def coverage_page(self, request: Request, session: Session) -> Response:
        """A source's coverage, as `hookd coverage` shows it, for the range asked."""
        name = request.path_params["name"]
        since = request.query_params.get("since") or None
        until = request.query_params.get("until") or None
        try:
            report = await CoverageOps(self._source_ops.engine, self._source_ops).report(
                name, since, until
            )
        except NotFound:
            return self._problem(request, session, 404, "No such source.")
        except Conflict:
            return self._problem(request, session, 409, "This source is not reconciled.")
        except BadRequest as exc:
            return self._problem(request, session, 400, exc.detail)
        view = coverage_of(report).answer()
        return self._render(
            request,
            "coverage.html",
            csrf=session.csrf,
            can_act=session.can_act,
            section="sources",
            name=name,
            since=since or "",
            until=until or "",
            report=view,
            timeline=coverage_timeline(view),
        )

    # -- reconcile runs ------------------------------------------------------------
    async def runs_page(self, request: Request, session: Session) -> Response:
        params = filled(request.query_params, "source")
        try:
            query = RunQuery.parse({**params, "limit": str(PAGE_SIZE)})
        except BadRequest as exc:
            return self._problem(request, session, 400, BAD_FILTER.get(exc.field, exc.detail))
        return self._render(
            request,
            "runs.html",
            csrf=session.csrf,
            can_act=session.can_act,
            section="runs",
            runs=[run.answer() for run in (await self._runs.recent(query)).runs],
            reconciled=[s.name for s in self._source_ops.reconciled()],
            sources=self._names,
            source=query.source,
        )

    async def run_page(self, request: Request, session: Session) -> Response:
        try:
            found = await self._runs.get(request.path_params["id"])
        except NotFound:
            return self._problem(request, session, 404, "No such reconciliation run.")
        run = found.answer()
        source = self._sources.get(found.source)
        return self._render(
            request,
            "run.html",
            csrf=session.csrf,
            can_act=session.can_act,
            section="runs",
            run=run,
            can_reconcile=source is not None and source.config.reconcile is not None,
            refresh=None if found.done else 2,
        )

    # -- bulk operations -------------------------------------------------------------
    async def operations_page(self, request: Request, session: Session) -> Response:
        params = filled(request.query_params, "cursor")
        try:
            page = await self._operations.page({**params, "limit": str(PAGE_SIZE)})
        except BadRequest as exc:
            return self._problem(request, session, 400, BAD_FILTER.get(exc.field, exc.detail))
        return self._render(
            request,
            "operations.html",
            csrf=session.csrf,
            can_act=session.can_act,
            section="operations",
            operations=[op.answer() for op in page.operations],
            older=None
            if page.next_cursor is None
            else "?" + urlencode({"cursor": page.next_cursor}),
            first_page="cursor" not in params,
            refresh=2 if any(not op.done for op in page.operations) else None,
        )

    async def operation_page(self, request: Request, session: Session) -> Response:
        try:
            operation = await self._operations.get(request.path_params["id"])
        except NotFound:
            return self._problem(request, session, 404, "No such operation.")
        return self._render(
            request,
            "operation.html",
            csrf=session.csrf,
            can_act=session.can_act,
            section="operations",
            op=operation.answer(),
            refresh=None if operation.done else 1,
        )

    async def operation_cancel(
        self, request: Request, session: Session, form: dict[str, str]
    ) -> Response:
        operation_id = request.path_params["id"]
        default = f"{PREFIX}/operations/{operation_id}"
        try:
            # Not waited for: the operation's page shows it stop (it refreshes itself).
            await self._operations.cancel(operation_id, wait_s=0)
        except NotFound:
            return self._problem(request, session, 404, "No such operation.")
        except Conflict as exc:
            return self._back(form, default, error=exc.reason)
        log.info("admin cancelled operation", extra={"operation_id": operation_id})
        return self._back(form, default, done="operation_cancelled")

    def routes(self) -> list[Route]:
        page, action = self.page, self.action
        return [
            Route(PREFIX + "/login", self.login_form, methods=["GET"]),
            Route(PREFIX + "/login", self.login, methods=["POST"]),
            Route(PREFIX + "/logout", action(self.logout, read_only_too=True), methods=["POST"]),
            Route(PREFIX + "/static/admin.css", self.css, methods=["GET"]),
            Route(PREFIX, page(self.sources_page), methods=["GET"]),
            Route(PREFIX + "/sources/{name}/activity", page(self.activity_page), methods=["GET"]),
            Route(
                PREFIX + "/sources/{name}/reconcile", action(self.reconcile_now), methods=["POST"]
            ),
            Route(PREFIX + "/sources/{name}/enable", action(self.enable), methods=["POST"]),
            Route(PREFIX + "/sources/{name}/coverage", page(self.coverage_page), methods=["GET"]),
            Route(PREFIX + "/sources/{name}/disable", action(self.disable), methods=["POST"]),
            Route(PREFIX + "/sources/{name}/pause", action(self.source_pause), methods=["POST"]),
            Route(PREFIX + "/sources/{name}/resume", action(self.source_resume), methods=["POST"]),
            Route(
                PREFIX + "/sources/{name}/destinations/{destination}/pause",
                action(self.source_pause),
                methods=["POST"],
            ),
            Route(
                PREFIX + "/sources/{name}/destinations/{destination}/resume",
                action(self.source_resume),
                methods=["POST"],
            ),
            Route(
                PREFIX + "/sources/{name}/replay-dead", action(self.replay_dead), methods=["POST"]
            ),
            Route(PREFIX + "/events", page(self.events_page), methods=["GET"]),
            Route(PREFIX + "/events/{id}", page(self.event_page), methods=["GET"]),
            Route(PREFIX + "/events/{id}/replay", action(self.replay), methods=["POST"]),
            Route(
                PREFIX + "/sources/{name}/objects/{id:path}",
                page(self.object_page),
                methods=["GET"],
            ),
            Route(PREFIX + "/dead", page(self.dead_page), methods=["GET"]),
            Route(PREFIX + "/stuck", page(self.stuck_page), methods=["GET"]),
            Route(PREFIX + "/retried", page(self.retried_page), methods=["GET"]),
            Route(PREFIX + "/runs", page(self.runs_page), methods=["GET"]),
            Route(PREFIX + "/runs/{id}", page(self.run_page), methods=["GET"]),
            Route(PREFIX + "/operations", page(self.operations_page), methods=["GET"]),
            Route(PREFIX + "/operations/{id}", page(self.operation_page), methods=["GET"]),
            Route(
                PREFIX + "/operations/{id}/cancel",
                action(self.operation_cancel),
                methods=["POST"],
            ),
        ]


def listed(events: Sequence[Event]) -> list[dict[str, object]]:
    """Events as a list shows them: with the summary line the API gives as
    ``error.message``, for the list's column."""
    return [e.answer() | {"last_error": e.error and e.error.message} for e in events]


def _in_days(days: float) -> str:
    """A number of days as the sources file may give it: ``7 days``, ``1 day``, ``0.5 days``."""
    shown = f"{round(days, 3):g}"
    return f"{shown} day" if shown == "1" else f"{shown} days"


def routes(
    tokens: Tokens,
    events: EventOps,
    sources: SourceOps,
    runs: RunOps,
    watch: WatchOps,
    *,
    operations: OperationOps,
) -> list[Route]:
    return AdminUI(tokens, events, sources, runs, watch, operations=operations).routes()


EVENT_FILTERS = ("source", "status", "origin", "type", "object")
