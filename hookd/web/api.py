"""Operations API under ``/api``: events, replay, sources, reconcile runs, bulk operations
and the OpenAPI document of all of them (`hookd/web/openapi.py`). Bearer token required,
also for unknown paths: the admin token for everything, the read token for the GETs
(``hookd.auth``); wrong tokens are rate limited per client address and overall, across
processes (``hookd.web.auth_limit``: 429 with Retry-After). Every answer under /api,
errors included, is ``Cache-Control: no-store`` (``hookd.web.headers``).

Each endpoint reads its request, asks ``hookd.ops`` and answers; the refusals of
``hookd.ops`` become the status codes and bodies here (``protected``)."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Never

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Match, NoMatchFound, Route
from starlette.types import Receive, Scope, Send

from hookd.auth import Right, Tokens
from hookd.errors import BadRequest, Conflict, NotFound
from hookd.ops import (
    API_REPLAY,
    CoverageOps,
    EventOps,
    EventQuery,
    OperationOps,
    OperationRequest,
    RunOps,
    RunQuery,
    SourceOps,
)
from hookd.ops.destinations import DestinationOps
from hookd.ops.objects import ObjectOps
from hookd.ops.sources import API_ACTOR
from hookd.web import openapi
from hookd.web.auth_limit import AuthLimit, BearerGuard

Endpoint = Callable[[Request], Awaitable[Response]]
# The largest request body the API reads (a bulk operation's request is a few hundred bytes).
MAX_BODY_BYTES = 65_536


class BodyTooLarge(Exception):
    """A request body over ``MAX_BODY_BYTES`` (HTTP 413)."""


async def json_body(request: Request) -> object:
    """The request's JSON body, read no further than ``MAX_BODY_BYTES``."""
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            raise BodyTooLarge
        chunks.append(chunk)
    try:
        return json.loads(b"".join(chunks))
    except (ValueError, RecursionError):
        raise BadRequest("body", "the body must be a JSON object") from None


def problem(status: int, code: str, detail: str = "") -> JSONResponse:
    body = {"error": code} | ({"detail": detail} if detail else {})
    return JSONResponse(body, status_code=status)


# The 403's detail, by what the token lacked.
NOT_OURS = {
    Right.WRITE: "this token may only read: changes need HOOKD_ADMIN_TOKEN",
    Right.READ: "this token does not open the operations API",
}


def protected(guard: BearerGuard, right: Right, endpoint: Endpoint) -> Endpoint:
    async def guarded(request: Request) -> Response:
        refused = await guard.refusal(request, right, NOT_OURS[right])
        if refused is not None:
            return refused
        try:
            return await endpoint(request)
        except BadRequest as exc:
            return problem(400, "bad_request", exc.detail)
        except NotFound as exc:  # not even what kind of thing is missing, unless it was
            return problem(404, "not_found", exc.said)  # pruned: that is said
        except Conflict as exc:
            return problem(409, exc.reason, exc.detail)
        except BodyTooLarge:
            return problem(413, "body_too_large", f"at most {MAX_BODY_BYTES} bytes")

    return guarded


class ApiFallback(BaseRoute):
    """Every other path under /api: 401 without the token, like the rest of /api; then
    a JSON 404, or a JSON 405 when the path exists with other methods.

    Starlette's own 404/405 are plain text and answer without the token. This route
    matches only what no other route of the app matches fully, wherever it is listed.
    """

    def __init__(self, guard: BearerGuard) -> None:
        # Reading is enough to be told what is not there (or which methods are).
        self._endpoint = protected(guard, Right.READ, self._answer)

    @staticmethod
    def _others(scope: Scope, this: BaseRoute) -> list[BaseRoute]:
        router = scope.get("router")
        return [r for r in getattr(router, "routes", ()) if r is not this]

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        # By prefix, not a route pattern: those stop at a newline in the path (an encoded
        # %0A), and such a path must get its 401 like any other under /api.
        path = scope.get("path", "")
        if scope["type"] != "http" or not (path == "/api" or path.startswith("/api/")):
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


class OperationsApi:
    """Events, sources and reconcile runs; runs started here run in this process
    (``RunOps.stop`` cancels them)."""

    def __init__(
        self,
        tokens: Tokens,
        events: EventOps,
        sources: SourceOps,
        runs: RunOps,
        operations: OperationOps,
    ) -> None:
        self._guard = BearerGuard(tokens, AuthLimit(sources.engine))
        self._events = events
        self._sources = sources
        self._runs = runs
        self._operations = operations
        self._coverage = CoverageOps(sources.engine, sources)
        self._destinations = DestinationOps(sources.engine, sources.sources, events.wake)
        self._objects = ObjectOps(sources.engine, sources.sources)

    async def events_index(self, request: Request) -> Response:
        page = await self._events.page(EventQuery.parse(request.query_params))
        return JSONResponse({"events": page.events, "next_cursor": page.next_cursor})

    async def event_detail(self, request: Request) -> Response:
        return JSONResponse((await self._events.show(request.path_params["id"])).resource)

    async def event_replay(self, request: Request) -> Response:
        replayed = await self._events.replay(request.path_params["id"], by=API_REPLAY)
        return JSONResponse(replayed, status_code=202)

    async def openapi_document(self, _: Request) -> Response:
        return Response(openapi.DOCUMENT_JSON, media_type="application/json")

    async def sources_index(self, _: Request) -> Response:
        return JSONResponse({"sources": await self._sources.overview()})

    async def reconcile_now(self, request: Request) -> Response:
        dry_run = request.query_params.get("dry_run", "").lower() in ("1", "true", "yes")
        started = await self._runs.start(request.path_params["name"], dry_run=dry_run)
        return JSONResponse(started.run, status_code=202)

    async def enable(self, request: Request) -> Response:
        return JSONResponse(await self._sources.enable(request.path_params["name"]))

    async def disable(self, request: Request) -> Response:
        reason = request.query_params.get("reason")
        return JSONResponse(
            await self._sources.disable(request.path_params["name"], reason, API_ACTOR)
        )

    async def coverage(self, request: Request) -> Response:
        query = request.query_params
        return JSONResponse(
            await self._coverage.resource(
                request.path_params["name"], query.get("since") or None, query.get("until") or None
            )
        )

    async def source_pause(self, request: Request) -> Response:
        name = request.path_params["name"]
        reason = request.query_params.get("reason")
        await self._destinations.pause_source(name, by=API_ACTOR, reason=reason)
        return JSONResponse(await self._source_entry(name))

    async def source_resume(self, request: Request) -> Response:
        name = request.path_params["name"]
        await self._destinations.resume_source(name, by=API_ACTOR)
        return JSONResponse(await self._source_entry(name))

    async def _source_entry(self, name: str) -> dict[str, object]:
        [found] = [r for r in await self._sources.overview() if r["name"] == name]
        return found

    async def object_detail(self, request: Request) -> Response:
        params = request.path_params
        return JSONResponse(await self._objects.show(params["name"], params["id"]))

    async def destinations_index(self, request: Request) -> Response:
        source = request.query_params.get("source") or None
        return JSONResponse({"destinations": await self._destinations.list(source)})

    async def destination_pause(self, request: Request) -> Response:
        source, name = request.path_params["name"], request.path_params["destination"]
        reason = request.query_params.get("reason")
        await self._destinations.pause(source, name, by=API_ACTOR, reason=reason)
        return JSONResponse(await self._destinations.show(source, name))

    async def destination_resume(self, request: Request) -> Response:
        source, name = request.path_params["name"], request.path_params["destination"]
        await self._destinations.resume(source, name, by=API_ACTOR)
        return JSONResponse(await self._destinations.show(source, name))

    async def runs_index(self, request: Request) -> Response:
        runs = await self._runs.recent(RunQuery.parse(request.query_params))
        return JSONResponse({"runs": runs})

    async def run_detail(self, request: Request) -> Response:
        return JSONResponse(await self._runs.get(request.path_params["id"]))

    async def operation_start(self, request: Request) -> Response:
        asked = OperationRequest.parse(await json_body(request))
        started = await self._operations.create(asked, trigger="api")
        # 202: a new operation under way; 200: a dry run (done at once), or the one
        # this request_id asked for before.
        fresh = started.created and not started.operation["done"]
        return JSONResponse(started.operation, status_code=202 if fresh else 200)

    async def operations_index(self, request: Request) -> Response:
        found, next_cursor = await self._operations.page(request.query_params)
        return JSONResponse({"operations": found, "next_cursor": next_cursor})

    async def operation_detail(self, request: Request) -> Response:
        return JSONResponse(await self._operations.get(request.path_params["id"]))

    async def operation_cancel(self, request: Request) -> Response:
        operation = await self._operations.cancel(request.path_params["id"])
        return JSONResponse(operation, status_code=200 if operation["done"] else 202)

    def routes(self) -> list[BaseRoute]:
        t = self._guard

        def read(endpoint: Endpoint) -> Endpoint:
            return protected(t, Right.READ, endpoint)

        def write(endpoint: Endpoint) -> Endpoint:
            return protected(t, Right.WRITE, endpoint)

        return [
            Route("/api/openapi.json", read(self.openapi_document), methods=["GET"]),
            Route("/api/events", read(self.events_index), methods=["GET"]),
            Route("/api/events/{id}", read(self.event_detail), methods=["GET"]),
            Route("/api/events/{id}/replay", write(self.event_replay), methods=["POST"]),
            Route("/api/sources", read(self.sources_index), methods=["GET"]),
            Route("/api/sources/{name}/reconcile", write(self.reconcile_now), methods=["POST"]),
            Route("/api/sources/{name}/enable", write(self.enable), methods=["POST"]),
            Route("/api/sources/{name}/coverage", read(self.coverage), methods=["GET"]),
            Route("/api/sources/{name}/disable", write(self.disable), methods=["POST"]),
            Route("/api/sources/{name}/pause", write(self.source_pause), methods=["POST"]),
            Route("/api/sources/{name}/resume", write(self.source_resume), methods=["POST"]),
            Route(
                "/api/sources/{name}/objects/{id:path}", read(self.object_detail), methods=["GET"]
            ),
            Route("/api/destinations", read(self.destinations_index), methods=["GET"]),
            Route(
                "/api/sources/{name}/destinations/{destination}/pause",
                write(self.destination_pause),
                methods=["POST"],
            ),
            Route(
                "/api/sources/{name}/destinations/{destination}/resume",
                write(self.destination_resume),
                methods=["POST"],
            ),
            Route("/api/reconcile-runs", read(self.runs_index), methods=["GET"]),
            Route("/api/reconcile-runs/{id}", read(self.run_detail), methods=["GET"]),
            Route("/api/operations", write(self.operation_start), methods=["POST"]),
            Route("/api/operations", read(self.operations_index), methods=["GET"]),
            Route("/api/operations/{id}", read(self.operation_detail), methods=["GET"]),
            Route("/api/operations/{id}/cancel", write(self.operation_cancel), methods=["POST"]),
            ApiFallback(t),
        ]


def routes(
    tokens: Tokens, events: EventOps, sources: SourceOps, runs: RunOps, operations: OperationOps
) -> list[BaseRoute]:
    return OperationsApi(tokens, events, sources, runs, operations).routes()
