"""Operations API under ``/api``: events, replay, sources, reconcile runs, bulk operations,
alerts and the OpenAPI document of all of them (`hookd/web/openapi.py`). Bearer token required,
also for unknown paths: the admin token for everything, the read token for the GETs but
the event stream, the listen token for the event stream alone (``hookd.auth``); wrong
tokens are rate limited per client address and overall, across processes
(``hookd.web.auth_limit``: 429 with Retry-After). Every answer under /api, errors
included, is ``Cache-Control: no-store`` (``hookd.web.headers``).

The routes are the route table's (`hookd/web/api_table.py`: method, path, handler, who
may call it, parameters, answers). Each handler reads its request, asks ``hookd.ops``
and returns the resource it answered with (a model of ``hookd.ops.models``), which is
serialised here as the table says; the refusals of ``hookd.ops`` become the status
codes and bodies here (``protected``)."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Never

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import BaseRoute, Match, NoMatchFound, Route
from starlette.types import Receive, Scope, Send

from hookd.auth import Right, Tokens
from hookd.errors import BadRequest, Conflict, NotFound
from hookd.ops import API_REPLAY, EventQuery, OperationRequest, RunQuery, models
from hookd.ops.queries import parse_limit
from hookd.ops.rejected import DEFAULT_LIMIT as DEFAULT_REJECTED
from hookd.ops.sources import API_ACTOR
from hookd.ops.stream import parse_stream_query
from hookd.web import openapi
from hookd.web.api_table import ALERT_LIMIT, ROUTES, ApiRoute
from hookd.web.auth_limit import AuthLimit, BearerGuard
from hookd.web.served import ServedOps
from ingest.httpguard import ENDLESS

Endpoint = Callable[[Request], Awaitable[Response]]
# What a handler answers: a resource (with the route's status, or its own), or a response.
Answer = models.Resource | tuple[int, models.Resource] | Response
Handler = Callable[[Request], Awaitable[Answer]]
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
    error = models.Error(error=code, detail=detail) if detail else models.Error(error=code)
    return JSONResponse(error.answer(), status_code=status)


# The 403's detail, by what the token lacked.
NOT_OURS = {
    Right.WRITE: "this token may only read: changes need HOOKD_ADMIN_TOKEN",
    Right.READ: "this token does not open the operations API",
    Right.LISTEN: "this token does not open the event stream: it needs HOOKD_LISTEN_TOKEN "
    "or HOOKD_ADMIN_TOKEN",
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
                models.Error(error="method_not_allowed").answer(),
                405,
                headers={"Allow": ", ".join(sorted(allowed))},
            )
        return problem(404, "not_found")


class OperationsApi:
    """Events, sources and reconcile runs; runs started here run in this process
    (``RunOps.stop`` cancels them)."""

    def __init__(self, tokens: Tokens, ops: ServedOps) -> None:
        self._guard = BearerGuard(tokens, AuthLimit(ops.engine))
        self._ops = ops

    async def events_index(self, request: Request) -> Answer:
        return await self._ops.events.page(EventQuery.parse(request.query_params))

    async def events_stream(self, request: Request) -> Answer:
        """Server-sent events until the client goes away (``hookd.ops.stream``). The
        query is checked and the start found before the 200, so a bad one is a 400."""
        query = parse_stream_query(
            request.query_params.getlist("source"),
            request.query_params,
            request.headers.get("last-event-id"),
        )
        stream = self._ops.stream
        if request.method == "HEAD":  # the headers only: no endless body nobody reads
            return Response(media_type="text/event-stream", headers={"X-Accel-Buffering": "no"})
        cursor, sent = await stream.start(query)
        request.scope[ENDLESS] = True
        return StreamingResponse(
            stream.frames(query, cursor, sent),
            media_type="text/event-stream",
            # Proxies that buffer (nginx) would hold the events back.
            headers={"X-Accel-Buffering": "no"},
        )

    async def event_detail(self, request: Request) -> Answer:
        return (await self._ops.events.show(request.path_params["id"])).resource

    async def event_replay(self, request: Request) -> Answer:
        return await self._ops.events.replay(request.path_params["id"], by=API_REPLAY)

    async def openapi_document(self, _: Request) -> Answer:
        return Response(openapi.DOCUMENT_JSON, media_type="application/json")

    async def sources_index(self, _: Request) -> Answer:
        return models.SourceList(sources=await self._ops.sources.overview())

    async def reconcile_now(self, request: Request) -> Answer:
        dry_run = request.query_params.get("dry_run", "").lower() in ("1", "true", "yes")
        return (await self._ops.runs.start(request.path_params["name"], dry_run=dry_run)).run

    async def enable(self, request: Request) -> Answer:
        return await self._ops.sources.enable(request.path_params["name"])

    async def disable(self, request: Request) -> Answer:
        reason = request.query_params.get("reason")
        return await self._ops.sources.disable(request.path_params["name"], reason, API_ACTOR)

    async def coverage(self, request: Request) -> Answer:
        query = request.query_params
        return await self._ops.coverage.resource(
            request.path_params["name"], query.get("since") or None, query.get("until") or None
        )

    async def source_pause(self, request: Request) -> Answer:
        name = request.path_params["name"]
        reason = request.query_params.get("reason")
        await self._ops.destinations.pause_source(name, by=API_ACTOR, reason=reason)
        return await self._ops.sources.entry(name)

    async def source_resume(self, request: Request) -> Answer:
        name = request.path_params["name"]
        await self._ops.destinations.resume_source(name, by=API_ACTOR)
        return await self._ops.sources.entry(name)

    async def object_detail(self, request: Request) -> Answer:
        params = request.path_params
        return await self._ops.objects.show(params["name"], params["id"])

    async def destinations_index(self, request: Request) -> Answer:
        source = request.query_params.get("source") or None
        return models.DestinationList(destinations=await self._ops.destinations.list(source))

    async def destination_pause(self, request: Request) -> Answer:
        source, name = request.path_params["name"], request.path_params["destination"]
        reason = request.query_params.get("reason")
        await self._ops.destinations.pause(source, name, by=API_ACTOR, reason=reason)
        return await self._ops.destinations.show(source, name)

    async def destination_resume(self, request: Request) -> Answer:
        source, name = request.path_params["name"], request.path_params["destination"]
        await self._ops.destinations.resume(source, name, by=API_ACTOR)
        return await self._ops.destinations.show(source, name)

    async def runs_index(self, request: Request) -> Answer:
        return await self._ops.runs.recent(RunQuery.parse(request.query_params))

    async def run_detail(self, request: Request) -> Answer:
        return await self._ops.runs.get(request.path_params["id"])

    async def operation_start(self, request: Request) -> Answer:
        asked = OperationRequest.parse(await json_body(request))
        started = await self._ops.operations.create(asked, trigger="api")
        # 202: a new operation under way; 200: a dry run (done at once), or the one
        # this request_id asked for before.
        fresh = started.created and not started.operation.done
        return (202 if fresh else 200), started.operation

    async def operations_index(self, request: Request) -> Answer:
        return await self._ops.operations.page(request.query_params)

    async def operation_detail(self, request: Request) -> Answer:
        return await self._ops.operations.get(request.path_params["id"])

    async def operation_cancel(self, request: Request) -> Answer:
        operation = await self._ops.operations.cancel(request.path_params["id"])
        return (200 if operation.done else 202), operation

    async def alerts_index(self, request: Request) -> Answer:
        query = request.query_params
        raw_limit = query.get("limit")
        return await self._ops.alerts.list(
            status=query.get("status") or "live",
            kind=query.get("kind") or None,
            source=query.get("source") or None,
            limit=ALERT_LIMIT if raw_limit is None else parse_limit(raw_limit),
        )

    async def rejected_index(self, request: Request) -> Answer:
        query = request.query_params
        raw_limit = query.get("limit")
        return await self._ops.rejected.list(
            source=query.get("source") or None,
            reason=query.get("reason") or None,
            limit=DEFAULT_REJECTED if raw_limit is None else parse_limit(raw_limit),
        )

    async def alert_detail(self, request: Request) -> Answer:
        return await self._ops.alerts.get(request.path_params["id"])

    async def alert_ack(self, request: Request) -> Answer:
        return await self._ops.alerts.acknowledge(request.path_params["id"], API_ACTOR)

    async def alert_resolve(self, request: Request) -> Answer:
        return await self._ops.alerts.resolve(request.path_params["id"], API_ACTOR)

    def _endpoint(self, route: ApiRoute) -> Endpoint:
        """``route``'s handler, its answer serialised through its model."""
        handler: Handler = getattr(self, route.handler)

        async def endpoint(request: Request) -> Response:
            answered = await handler(request)
            if isinstance(answered, Response):
                return answered
            status, resource = answered if isinstance(answered, tuple) else (route.ok, answered)
            # The model the route table (and so the document) gives for this status.
            assert isinstance(resource, route.replies[status].body), (route.handler, status)
            return JSONResponse(resource.answer(), status_code=status)

        return protected(self._guard, route.right, endpoint)

    def routes(self) -> list[BaseRoute]:
        """A route per entry of the route table (``api_table.ROUTES``), then the fallback."""
        table: list[BaseRoute] = [
            Route(route.route_path, self._endpoint(route), methods=[route.method])
            for route in ROUTES
        ]
        return [*table, ApiFallback(self._guard)]


def routes(tokens: Tokens, ops: ServedOps) -> list[BaseRoute]:
    return OperationsApi(tokens, ops).routes()
