"""Operations API under ``/api``: events, replay, sources, reconcile runs and the OpenAPI
document of all of them (`hookd/web/openapi.py`). Bearer token required, also for unknown paths:
the admin token for everything, the read token for the GETs (``hookd.auth``).

Each endpoint reads its request, asks ``hookd.ops`` and answers; the refusals of
``hookd.ops`` become the status codes and bodies here (``protected``)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Never

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Match, NoMatchFound, Route
from starlette.types import Receive, Scope, Send

from hookd.auth import Right, Tokens, refusal
from hookd.errors import BadRequest, Conflict, NotFound
from hookd.ops import EventOps, EventQuery, RunOps, RunQuery, SourceOps
from hookd.web import openapi

Endpoint = Callable[[Request], Awaitable[Response]]


def problem(status: int, code: str, detail: str = "") -> JSONResponse:
    body = {"error": code} | ({"detail": detail} if detail else {})
    return JSONResponse(body, status_code=status)


# The 403's detail, by what the token lacked.
NOT_OURS = {
    Right.WRITE: "this token may only read: changes need HOOKD_ADMIN_TOKEN",
    Right.READ: "this token does not open the operations API",
}


def protected(tokens: Tokens, right: Right, endpoint: Endpoint) -> Endpoint:
    async def guarded(request: Request) -> Response:
        refused = refusal(tokens, request, right, NOT_OURS[right])
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

    return guarded


class ApiFallback(BaseRoute):
    """Every other path under /api: 401 without the token, like the rest of /api; then
    a JSON 404, or a JSON 405 when the path exists with other methods.

    Starlette's own 404/405 are plain text and answer without the token. This route
    matches only what no other route of the app matches fully, wherever it is listed.
    """

    def __init__(self, tokens: Tokens) -> None:
        # Reading is enough to be told what is not there (or which methods are).
        self._endpoint = protected(tokens, Right.READ, self._answer)
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


class OperationsApi:
    """Events, sources and reconcile runs; runs started here run in this process
    (``RunOps.stop`` cancels them)."""

    def __init__(self, tokens: Tokens, events: EventOps, sources: SourceOps, runs: RunOps) -> None:
        self._tokens = tokens
        self._events = events
        self._sources = sources
        self._runs = runs

    async def events_index(self, request: Request) -> Response:
        page = await self._events.page(EventQuery.parse(request.query_params))
        return JSONResponse({"events": page.events, "next_cursor": page.next_cursor})

    async def event_detail(self, request: Request) -> Response:
        return JSONResponse((await self._events.show(request.path_params["id"])).resource)

    async def event_replay(self, request: Request) -> Response:
        return JSONResponse(await self._events.replay(request.path_params["id"]), status_code=202)

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

    async def runs_index(self, request: Request) -> Response:
        runs = await self._runs.recent(RunQuery.parse(request.query_params))
        return JSONResponse({"runs": runs})

    async def run_detail(self, request: Request) -> Response:
        return JSONResponse(await self._runs.get(request.path_params["id"]))

    def routes(self) -> list[BaseRoute]:
        t = self._tokens

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
            Route("/api/reconcile-runs", read(self.runs_index), methods=["GET"]),
            Route("/api/reconcile-runs/{id}", read(self.run_detail), methods=["GET"]),
            ApiFallback(t),
        ]


def routes(tokens: Tokens, events: EventOps, sources: SourceOps, runs: RunOps) -> list[BaseRoute]:
    return OperationsApi(tokens, events, sources, runs).routes()
