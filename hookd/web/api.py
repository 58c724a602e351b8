"""Operations API under ``/api``: events, replay, sources, reconcile runs and the OpenAPI
document of all of them (`hookd/web/openapi.py`). Bearer token required, also for unknown paths."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Never

from sqlalchemy.ext.asyncio import AsyncEngine
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Match, NoMatchFound, Route
from starlette.types import Receive, Scope, Send

from hookd.auth import token_ok
from hookd.sources import Source, Sources
from hookd.web import openapi
from reconcile import service
from reconcile.poller import INTERRUPT_WRITE_S, Reconciler
from store import claims
from store import reconcile as rstate
from store.events import event_resource, get_event, list_events
from store.ids import is_id
from store.models import ORIGINS, STATUSES

log = logging.getLogger("hookd.api")

Endpoint = Callable[[Request], Awaitable[Response]]
MAX_LIMIT = openapi.MAX_LIMIT
_LIMIT_RE = re.compile(r"[0-9]{1,9}")


def parse_limit(raw: str) -> int | None:
    """``limit`` as a whole number in 1..MAX_LIMIT, else None.

    ASCII digits only: ``str.isdigit`` also admits superscripts (on which ``int``
    fails) and other scripts' digits; a length bound keeps ``int`` off huge strings.
    """
    if not _LIMIT_RE.fullmatch(raw):
        return None
    limit = int(raw)
    return limit if 1 <= limit <= MAX_LIMIT else None


def bad_text(*values: str | None) -> bool:
    """A NUL character: PostgreSQL text cannot hold one, so a filter with it is refused."""
    return any(v is not None and "\x00" in v for v in values)


def problem(status: int, code: str, detail: str = "") -> JSONResponse:
    body = {"error": code} | ({"detail": detail} if detail else {})
    return JSONResponse(body, status_code=status)


def protected(token: str, endpoint: Endpoint) -> Endpoint:
    async def guarded(request: Request) -> Response:
        if not token_ok(request, token):
            return JSONResponse(
                {"error": "unauthorized"}, 401, headers={"WWW-Authenticate": "Bearer"}
            )
        return await endpoint(request)

    return guarded


class ApiFallback(BaseRoute):
    """Every other path under /api: 401 without the token, like the rest of /api; then
    a JSON 404, or a JSON 405 when the path exists with other methods.

    Starlette's own 404/405 are plain text and answer without the token. This route
    matches only what no other route of the app matches fully, wherever it is listed.
    """

    def __init__(self, token: str) -> None:
        self._endpoint = protected(token, self._answer)
        self._under_api = (Route("/api", self._answer), Route("/api/{rest:path}", self._answer))

    @staticmethod
    def _others(scope: Scope, this: BaseRoute) -> list[BaseRoute]:
        router = scope.get("router")
        return [r for r in getattr(router, "routes", ()) if r is not this]

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        # A helper's PARTIAL (method other than GET) says the path is under /api too.
        if all(r.matches(scope)[0] is Match.NONE for r in self._under_api):
            return Match.NONE, {}
        if any(r.matches(scope)[0] is Match.FULL for r in self._others(scope, self)):
            return Match.NONE, {}
        return Match.FULL, {}

    def url_path_for(self, name: str, /, **path_params: object) -> Never:
        raise NoMatchFound(name, path_params)

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        response = await self._endpoint(Request(scope, receive))
        await response(scope, receive, send)

    async def _answer(self, request: Request) -> Response:
        allowed = {
            method
            for r in self._others(request.scope, self)
            if isinstance(r, Route) and r.matches(request.scope)[0] is Match.PARTIAL
            for method in r.methods or ()
        }
        if allowed:
            return JSONResponse(
                {"error": "method_not_allowed"},
                405,
                headers={"Allow": ", ".join(sorted(allowed))},
            )
        return problem(404, "not_found")


def routes(
    engine: AsyncEngine, token: str, on_replay: Callable[[], Awaitable[None]]
) -> list[Route]:
    async def events_index(request: Request) -> Response:
        q = request.query_params
        status, origin = q.get("status"), q.get("origin")
        if status is not None and status not in STATUSES:
            return problem(400, "bad_request", f"status must be one of {', '.join(STATUSES)}")
        if origin is not None and origin not in ORIGINS:
            return problem(400, "bad_request", f"origin must be one of {', '.join(ORIGINS)}")
        limit = parse_limit(q.get("limit", "50"))
        if limit is None:
            return problem(
                400, "bad_request", f"limit must be a whole number from 1 to {MAX_LIMIT}"
            )
        cursor = q.get("cursor") or None
        if cursor is not None and not is_id(cursor):
            return problem(400, "bad_request", "cursor is not one this API gave out")
        source, type_ = q.get("source") or None, q.get("type") or None
        if bad_text(source, type_):
            return problem(400, "bad_request", "source and type must not contain NUL")
        async with engine.connect() as conn:
            rows = await list_events(
                conn,
                source=source,
                status=status,
                type_=type_,
                origin=origin,
                limit=limit + 1,
                before_id=cursor,
            )
        page = rows[:limit]
        next_cursor = page[-1].id if len(rows) > limit else None
        return JSONResponse(
            {"events": [event_resource(r) for r in page], "next_cursor": next_cursor}
        )

    async def event_detail(request: Request) -> Response:
        event_id = request.path_params["id"]
        if not is_id(event_id):
            return problem(404, "not_found")
        async with engine.connect() as conn:
            row = await get_event(conn, event_id)
        if row is None:
            return problem(404, "not_found")
        return JSONResponse(event_resource(row))

    async def event_replay(request: Request) -> Response:
        event_id = request.path_params["id"]
        if not is_id(event_id):
            return problem(404, "not_found")
        async with engine.begin() as conn:
            row = await get_event(conn, event_id)
            if row is None:
                return problem(404, "not_found")
            replayed = await claims.replay(conn, [event_id], datetime.now(UTC))
            if not replayed:
                return problem(409, "in_progress", "the event is being processed right now")
            row = await get_event(conn, event_id)
        await on_replay()
        assert row is not None
        return JSONResponse(event_resource(row), status_code=202)

    async def openapi_document(_: Request) -> Response:
        return Response(openapi.DOCUMENT_JSON, media_type="application/json")

    return [
        Route("/api/openapi.json", protected(token, openapi_document), methods=["GET"]),
        Route("/api/events", protected(token, events_index), methods=["GET"]),
        Route("/api/events/{id}", protected(token, event_detail), methods=["GET"]),
        Route("/api/events/{id}/replay", protected(token, event_replay), methods=["POST"]),
    ]


class SourcesApi:
    """Sources, reconcile runs and the enable switch; runs started here run in this process."""

    def __init__(self, reconciler: Reconciler, sources: Sources, token: str) -> None:
        self._reconciler = reconciler
        self._sources = sources
        self._token = token
        self._tasks: dict[asyncio.Task[object], str] = {}

    async def stop(self) -> None:
        """Cancel the runs started here; each records itself failed. One cancelled
        before it began has only its ``queued`` record, failed here instead."""
        tasks = dict(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if not tasks:
            return
        with contextlib.suppress(Exception):  # the next run closes them by the lease
            async with asyncio.timeout(INTERRUPT_WRITE_S), self._reconciler.engine.begin() as conn:
                now = datetime.now(UTC)
                for run_id in tasks.values():
                    await rstate.fail_unfinished_run(
                        conn, run_id, self._reconciler.interrupt_reason, now
                    )

    def _forget(self, task: asyncio.Task[object]) -> None:
        self._tasks.pop(task, None)

    async def sources_index(self, _: Request) -> Response:
        engine = self._reconciler.engine
        return JSONResponse({"sources": await service.source_resources(engine, self._sources)})

    async def reconcile_now(self, request: Request) -> Response:
        source = self._sources.get(request.path_params["name"])
        if source is None:
            return problem(404, "not_found")
        if source.config.reconcile is None:
            return problem(409, "not_configured", "this source has no [sources.reconcile] table")
        dry_run = request.query_params.get("dry_run", "").lower() in ("1", "true", "yes")
        run_id = await self._reconciler.create_queued(source, "api", dry_run)
        task: asyncio.Task[object] = asyncio.create_task(self._run(source, run_id, dry_run))
        self._tasks[task] = run_id
        task.add_done_callback(self._forget)
        async with self._reconciler.engine.connect() as conn:
            row = await rstate.get_run(conn, run_id)
        assert row is not None
        return JSONResponse(rstate.run_resource(row), status_code=202)

    async def _run(self, source: Source, run_id: str, dry_run: bool) -> None:
        """The run behind a 202; whatever happens, the queued record ends ``done``."""
        error: str | None = None
        try:
            outcome = await self._reconciler.run(
                source, trigger="api", dry_run=dry_run, run_id=run_id
            )
        except Exception as exc:  # the run record says so; the process goes on
            log.error(  # noqa: TRY400 - no traceback: it may quote SQL parameters
                "api run crashed",
                extra={"source": source.name, "run_id": run_id, "error": type(exc).__name__},
            )
            error = f"crashed: {type(exc).__name__}"
        else:
            if outcome.status == "disabled":
                # A disabled source does not run, and the run left its record alone.
                error = f"disabled: {outcome.error}" if outcome.error else "disabled"
        if error is None:
            return
        now = datetime.now(UTC)
        async with self._reconciler.engine.begin() as conn:
            row = await rstate.get_run(conn, run_id)
            if row is not None and row.status in ("queued", "running"):
                await rstate.update_run(conn, run_id, status="failed", finished_at=now, error=error)

    async def run_detail(self, request: Request) -> Response:
        run_id = request.path_params["id"]
        if not is_id(run_id):
            return problem(404, "not_found")
        async with self._reconciler.engine.connect() as conn:
            row = await rstate.get_run(conn, run_id)
        if row is None:
            return problem(404, "not_found")
        return JSONResponse(rstate.run_resource(row))

    async def runs_index(self, request: Request) -> Response:
        limit = parse_limit(request.query_params.get("limit", "50"))
        if limit is None:
            return problem(
                400, "bad_request", f"limit must be a whole number from 1 to {MAX_LIMIT}"
            )
        source = request.query_params.get("source") or None
        if bad_text(source):
            return problem(400, "bad_request", "source must not contain NUL")
        async with self._reconciler.engine.connect() as conn:
            rows = await rstate.list_runs(conn, source, limit)
        return JSONResponse({"runs": [rstate.run_resource(r) for r in rows]})

    async def enable(self, request: Request) -> Response:
        source = self._sources.get(request.path_params["name"])
        if source is None:
            return problem(404, "not_found")
        if source.config.reconcile is None:
            return problem(409, "not_configured", "this source has no [sources.reconcile] table")
        await service.enable(self._reconciler.engine, source.name)
        [resource] = [
            r
            for r in await service.source_resources(self._reconciler.engine, self._sources)
            if r["name"] == source.name
        ]
        return JSONResponse(resource)

    def routes(self) -> list[BaseRoute]:
        t = self._token
        return [
            Route("/api/sources", protected(t, self.sources_index), methods=["GET"]),
            Route(
                "/api/sources/{name}/reconcile", protected(t, self.reconcile_now), methods=["POST"]
            ),
            Route("/api/sources/{name}/enable", protected(t, self.enable), methods=["POST"]),
            Route("/api/reconcile-runs", protected(t, self.runs_index), methods=["GET"]),
            Route("/api/reconcile-runs/{id}", protected(t, self.run_detail), methods=["GET"]),
            ApiFallback(t),
        ]
