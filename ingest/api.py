"""Operations API (CONTRACT §3): events, their state, replay. Bearer token required."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

from sqlalchemy.ext.asyncio import AsyncEngine
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ingest.auth import token_ok
from store import claims
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
