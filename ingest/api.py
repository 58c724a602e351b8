"""Operations API (CONTRACT §3): events, their state, replay. Bearer token required."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

from sqlalchemy.ext.asyncio import AsyncEngine
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ingest.auth import token_ok
from ingest.config import Sources
from reconcile import service
from reconcile.poller import Reconciler
from store import claims
from store import reconcile as rstate
from store.events import event_resource, get_event, list_events
from store.ids import is_id
from store.models import ORIGINS, STATUSES

Endpoint = Callable[[Request], Awaitable[Response]]
MAX_LIMIT = 500


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
        raw_limit = q.get("limit", "50")
        if not raw_limit.isdigit() or not 1 <= int(raw_limit) <= MAX_LIMIT:
            return problem(
                400, "bad_request", f"limit must be a whole number from 1 to {MAX_LIMIT}"
            )
        limit = int(raw_limit)
        cursor = q.get("cursor") or None
        if cursor is not None and not is_id(cursor):
            return problem(400, "bad_request", "cursor is not one this API gave out")
        async with engine.connect() as conn:
            rows = await list_events(
                conn,
                source=q.get("source") or None,
                status=status,
                type_=q.get("type") or None,
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
        async with engine.connect() as conn:
            row = await get_event(conn, event_id)
        if row is None:
            return problem(404, "not_found")
        return JSONResponse(event_resource(row))

    async def event_replay(request: Request) -> Response:
        event_id = request.path_params["id"]
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

    return [
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
        self._tasks: set[asyncio.Task[object]] = set()

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

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
        task = asyncio.create_task(
            self._reconciler.run(source, trigger="api", dry_run=dry_run, run_id=run_id)
        )
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        async with self._reconciler.engine.connect() as conn:
            row = await rstate.get_run(conn, run_id)
        assert row is not None
        return JSONResponse(rstate.run_resource(row), status_code=202)

    async def run_detail(self, request: Request) -> Response:
        async with self._reconciler.engine.connect() as conn:
            row = await rstate.get_run(conn, request.path_params["id"])
        if row is None:
            return problem(404, "not_found")
        return JSONResponse(rstate.run_resource(row))

    async def runs_index(self, request: Request) -> Response:
        raw_limit = request.query_params.get("limit", "50")
        if not raw_limit.isdigit() or not 1 <= int(raw_limit) <= MAX_LIMIT:
            return problem(
                400, "bad_request", f"limit must be a whole number from 1 to {MAX_LIMIT}"
            )
        async with self._reconciler.engine.connect() as conn:
            rows = await rstate.list_runs(
                conn, request.query_params.get("source") or None, int(raw_limit)
            )
        return JSONResponse({"runs": [rstate.run_resource(r) for r in rows]})

    async def enable(self, request: Request) -> Response:
        source = self._sources.get(request.path_params["name"])
        if source is None:
            return problem(404, "not_found")
        await service.enable(self._reconciler.engine, source.name)
        [resource] = [
            r
            for r in await service.source_resources(self._reconciler.engine, self._sources)
            if r["name"] == source.name
        ]
        return JSONResponse(resource)

    def routes(self) -> list[Route]:
        t = self._token
        return [
            Route("/api/sources", protected(t, self.sources_index), methods=["GET"]),
            Route(
                "/api/sources/{name}/reconcile", protected(t, self.reconcile_now), methods=["POST"]
            ),
            Route("/api/sources/{name}/enable", protected(t, self.enable), methods=["POST"]),
            Route("/api/reconcile-runs", protected(t, self.runs_index), methods=["GET"]),
            Route("/api/reconcile-runs/{id}", protected(t, self.run_detail), methods=["GET"]),
        ]
