"""The OpenAPI document of the operations API: complete, served behind the token,
and true of a real server (schemathesis against uvicorn on loopback)."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Callable, Iterator
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

import httpx
import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)
from starlette.routing import BaseRoute, Mount, Route

from hookd.sources import Sources
from hookd.web import openapi
from hookd.web.api import ApiFallback
from store.models import ADMIN_LOGIN_FAILURES
from store.reconcile import runs as rstate
from tests.support.asgi import running_app
from tests.support.data import engine_of
from tests.support.emulators import GitHubEmulator
from tests.support.http import serve_app
from tests.support.ops_server import (
    API_TOKEN,
    AUTH,
    RECONCILED,
    TOKEN,
    Served,
    served_api,
    sources_for,
    wait_done,
)

pytestmark = pytest.mark.anyio
# Per operation and strategy (positive, negative, real ids): well under a minute in all.
EXAMPLES = 50
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]

HTTP_METHODS = {"get", "put", "post", "delete", "options", "head", "patch", "trace"}


def api_routes(routes: list[BaseRoute], prefix: str = "") -> dict[str, set[str]]:
    """``{path: methods}`` of the routes under /api, less the HEAD that Starlette adds to GET."""
    found: dict[str, set[str]] = {}
    for route in routes:
        if isinstance(route, ApiFallback):
            continue  # answers what no route does: no operation of its own
        if isinstance(route, Mount):
            found |= api_routes(list(route.routes), prefix + route.path)
        elif isinstance(route, Route):
            # A path parameter's convertor (``{id:path}``) is not OpenAPI's: ``{id}``.
            path = re.sub(r"\{(\w+):\w+\}", r"{\1}", prefix + route.path)
            if path == "/api" or path.startswith("/api/"):
                # Several routes may share a path, one per method (GET and POST /api/operations).
                found[path] = found.get(path, set()) | (set(route.methods or ()) - {"HEAD"})
        else:  # a WebSocketRoute or something new: the document would not know it
            assert not getattr(route, "path", "").startswith("/api"), route
    return found


def spec_operations(document: dict[str, Any]) -> dict[str, set[str]]:
    return {
        path: {method.upper() for method in item if method in HTTP_METHODS}
        for path, item in document["paths"].items()
    }


async def test_document_lists_every_api_route_and_nothing_else(
    sources: Sources, sqlite_url: str
) -> None:
    document = openapi.document()
    async with running_app(sources, sqlite_url, admin_token=TOKEN) as (app, _):
        routes = api_routes(list(app.routes))
    assert routes, "no /api routes found: the app changed shape"
    assert spec_operations(document) == routes
    operation_ids = [
        op["operationId"]
        for item in document["paths"].values()
        for method, op in item.items()
        if method in HTTP_METHODS
    ]
    assert len(operation_ids) == len(set(operation_ids))
    # Valid OpenAPI 3.1 (schemathesis carries the official meta-schema).
    schemathesis.openapi.from_dict(document).validate()


async def test_document_is_served_behind_the_token(sources: Sources, sqlite_url: str) -> None:
    async with running_app(sources, sqlite_url, admin_token=TOKEN) as (_, client):
        served = await client.get("/api/openapi.json", headers=AUTH)
        refused = [
            await client.get("/api/openapi.json", headers=headers)
            for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": TOKEN})
        ]
    assert served.status_code == 200
    assert served.headers["content-type"] == "application/json"
    assert served.json() == openapi.document()
    assert [r.status_code for r in refused] == [401, 401, 401]
    assert all(r.headers["www-authenticate"] == "Bearer" for r in refused)


async def test_other_api_paths_need_the_token_and_answer_json(
    sources: Sources, sqlite_url: str
) -> None:
    """No plain-text 404/405 from Starlette under /api, and none before the token."""
    async with running_app(sources, sqlite_url, admin_token=TOKEN) as (_, client):
        for method, path in [
            ("GET", "/api"),
            ("GET", "/api/"),
            ("GET", "/api/nope"),
            ("GET", "/api/events/"),
            ("GET", "/api/events/a/b"),
            ("DELETE", "/api/events"),
            ("GET", "/api/sources/github/enable"),
        ]:
            refused = await client.request(method, path)
            assert refused.status_code == 401, (method, path)
            assert refused.json() == {"error": "unauthorized"}
        missing = await client.get("/api/events/a/b", headers=AUTH)
        wrong = await client.delete("/api/events", headers=AUTH)
        wrong_post = await client.get("/api/sources/github/enable", headers=AUTH)
        fine = await client.get("/api/events", headers=AUTH)
        other = await client.get("/nope", headers=AUTH)
    assert (missing.status_code, missing.json()) == (404, {"error": "not_found"})
    assert (wrong.status_code, wrong.json()) == (405, {"error": "method_not_allowed"})
    assert wrong.headers["allow"] == "GET, HEAD"
    assert (wrong_post.status_code, wrong_post.headers["allow"]) == (405, "POST")
    assert fine.status_code == 200
    assert other.status_code == 404, "outside /api, Starlette answers as before"


async def test_a_run_on_a_disabled_source_ends_and_enable_needs_reconcile(
    sqlite_url: str,
) -> None:
    emulator = GitHubEmulator(API_TOKEN)
    async with (
        serve_app(emulator.app) as api_url,
        running_app(
            sources_for(api_url), sqlite_url, admin_token=TOKEN, reconcile_schedule=False
        ) as (app, client),
    ):
        async with app.state.engine.begin() as conn:
            await rstate.ensure_state(conn, RECONCILED, datetime.now(UTC))
            await rstate.update_state(
                conn, RECONCILED, None, disabled=True, disabled_reason="switched off"
            )
        started = await client.post(f"/api/sources/{RECONCILED}/reconcile", headers=AUTH)
        assert started.status_code == 202
        run = await wait_done(client, f"/api/reconcile-runs/{started.json()['id']}")
        not_reconciled = await client.post("/api/sources/github/enable", headers=AUTH)
        enabled = await client.post(f"/api/sources/{RECONCILED}/enable", headers=AUTH)
    assert (run["status"], run["error"]) == ("failed", "disabled: switched off"), run
    assert run["finished_at"] is not None
    assert emulator.api_calls == 0
    assert (not_reconciled.status_code, not_reconciled.json()["error"]) == (409, "not_configured")
    assert (enabled.status_code, enabled.json()["reconcile"]["state"]) == (200, "active")


@pytest.fixture
async def served(db_url: str) -> AsyncIterator[Served]:
    async with served_api(db_url) as served:
        yield served


Check = Callable[[schemathesis.Case, schemathesis.Response], None]
Known = dict[tuple[str, str], list[str]]

# Negative generation adds arbitrary headers to operations that document none, and these
# name the request's framing: the HTTP server (uvicorn's parser) answers a malformed one
# with its own plain-text 400 before any application code runs, so the document cannot
# describe that answer. They are left out of generated cases; everything else is kept.
FRAMING_HEADERS = frozenset(
    {
        "connection",
        "content-length",
        "expect",
        "host",
        "keep-alive",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    }
)


def without_framing(case: schemathesis.Case) -> schemathesis.Case:
    """The case with any generated HTTP framing header removed."""
    if case.headers:
        for name in [name for name in case.headers if name.lower() in FRAMING_HEADERS]:
            del case.headers[name]
    return case


# Values that broke, or could break, the API: NUL (PostgreSQL text cannot hold one),
# digits `int` refuses or no client means, huge numbers, long and non-BMP text.
QUERY_EDGES = [
    "",
    "\x00",
    "pending\x00",
    "a\x00b",
    "\u00b2",
    "\u0661\u0662",
    "\uff15",
    "9" * 5000,
    "-1",
    "0",
    "501",
    " 5",
    "1.5",
    "1e3",
    "true",
    "\U0001f4a9",
    "x" * 4000,
    "'; DROP TABLE events; --",
    "%00",
]
PATH_EDGES = [
    "\x00",
    "01J8Z3Q4XW6N2V7C9D0E1F2G3\x00",
    "%00",
    "\u00b2",
    "a/b",
    "..",
    " ",
    "x" * 300,
    "01j8z3q4xw6n2v7c9d0e1f2g3h",
    "\U0001f4a9",
    "GITHUB",
]


def edge_cases(operation: schemathesis.APIOperation, known: Known) -> Iterator[schemathesis.Case]:
    """One case per parameter and edge value, the other parameters left out or valid."""
    base = {
        p.name: (known.get((operation.path, p.name)) or ["x"])[0] for p in operation.path_parameters
    }
    for parameter in operation.query:
        for value in QUERY_EDGES:
            yield operation.Case(path_parameters=base, query={parameter.name: value})
    for parameter in operation.path_parameters:
        for value in PATH_EDGES:
            # What schemathesis does to generated ones: all quoted, dots too.
            quoted = quote(value, safe="").replace(".", "%2E")
            yield operation.Case(path_parameters={**base, parameter.name: quoted})


def fuzz(
    url: str,
    headers: dict[str, str],
    check: Check,
    *,
    negative: bool = False,
    known: Known | None = None,
    skip: frozenset[str] = frozenset(),
) -> list[str]:
    """Edge cases, then generated ones, for every operation of the served document but
    those ``skip`` names (by operationId); what failed."""
    known = known or {}
    failures: list[str] = []
    with requests.Session() as session:
        served = session.get(f"{url}/api/openapi.json", headers=AUTH, timeout=10)
        served.raise_for_status()
        # Not `from_url`: it leaves out the operation that served the document.
        schema = schemathesis.openapi.from_dict(served.json())
        for result in schema.get_all_operations():
            operation = result.ok()
            if operation.definition.raw.get("operationId") in skip:
                continue

            def call(case: schemathesis.Case) -> None:
                case = without_framing(case)
                response = case.call(base_url=url, session=session, headers=headers, timeout=10)
                check(case, response)

            strategies = [operation.as_strategy()]
            if negative and (operation.path_parameters or operation.query):
                strategies.append(operation.as_strategy(schemathesis.GenerationMode.NEGATIVE))
            # Real ids and names, which no generator can guess, to reach the 2xx answers.
            for parameter in operation.path_parameters:
                values = known.get((operation.path, parameter.name))
                if values:
                    strategies.append(
                        st.sampled_from(values).flatmap(
                            lambda value, op=operation, name=parameter.name: op.as_strategy(
                                path_parameters={name: value}
                            )
                        )
                    )

            @settings(
                max_examples=EXAMPLES * len(strategies),
                deadline=None,
                database=None,
                phases=[Phase.explicit, Phase.generate],
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
            )
            @given(case=st.one_of(strategies))
            def generated(case: schemathesis.Case) -> None:
                call(case)

            try:
                for case in edge_cases(operation, known):
                    call(case)
                generated()
            except (Exception, schemathesis.errors.FailureGroup) as exc:
                # Collected, so that one report shows every operation that failed.
                failures.append(f"{operation.label}: {type(exc).__name__}: {exc}")
    return failures


# Every operation of the document is fuzzed: the time grows with the API, not with a fault.
@pytest.mark.timeout(600)
async def test_every_answer_conforms_to_the_document(served: Served) -> None:
    """With the token: no 5xx, and status, content type and body as documented."""

    def conforms(case: schemathesis.Case, response: schemathesis.Response) -> None:
        case.validate_response(response, checks=CHECKS)

    known = {
        ("/api/events/{id}", "id"): served.event_ids,
        ("/api/events/{id}/replay", "id"): served.event_ids,
        ("/api/reconcile-runs/{id}", "id"): served.run_ids,
        ("/api/sources/{name}/reconcile", "name"): served.sources,
        ("/api/sources/{name}/enable", "name"): served.sources,
        ("/api/sources/{name}/disable", "name"): served.sources,
        ("/api/operations/{id}", "id"): served.operation_ids,
        ("/api/operations/{id}/cancel", "id"): served.operation_ids,
        ("/api/alerts/{id}", "id"): served.alert_ids,
        ("/api/alerts/{id}:ack", "id"): served.alert_ids,
        ("/api/alerts/{id}:resolve", "id"): served.alert_ids,
    }
    # The event stream's 200 never ends (a request would time out, not fail): its answers
    # are tests/integration/test_listen.py's; without the token it is fuzzed below.
    failures = await asyncio.to_thread(
        fuzz,
        served.url,
        AUTH,
        conforms,
        negative=True,
        known=known,
        skip=frozenset({"streamEvents"}),
    )
    assert not failures, "\n\n".join(failures)


@pytest.mark.timeout(600)
async def test_nothing_answers_without_the_token(sqlite_url: str) -> None:
    """No token, a wrong one, or one without the scheme: 401 everywhere, never a 2xx;
    for a wrong one, 429 once the address has had its 5 refusals in a minute
    (``hookd.web.auth_limit``). Never cached.

    On SQLite only: what the token opens is decided before anything else, so the second
    database would double the fuzzing (the slowest test of the suite) and prove nothing
    more; every route with every token on both is tests/integration/test_scoped_tokens.py,
    the limit on both is tests/integration/test_auth_limits.py."""

    def refused(case: schemathesis.Case, response: schemathesis.Response) -> None:
        sent = response.request.headers
        where = (case.method, case.formatted_path, case.query, sent)
        assert response.headers["cache-control"] == ["no-store"], where
        # A bearer token of any kind (schemathesis makes some up for the document's
        # security scheme when given none) is a guess: 429 once the limit is reached.
        scheme, _, token = str(sent.get("Authorization", "")).partition(" ")
        if response.status_code == 429 and scheme.lower() == "bearer" and token.strip():
            assert response.json()["error"] == "too_many_requests", where
            assert 1 <= int(response.headers["retry-after"][0]) <= 60, where
            return
        assert response.status_code == 401, where
        assert response.json() == {"error": "unauthorized"}, where
        assert response.headers["www-authenticate"] == ["Bearer"], where

    async with engine_of(sqlite_url) as engine, served_api(sqlite_url) as served:
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": TOKEN}):
            # Each pass fetches the document with the right token: from an address
            # the last pass's guesses got limited, it would wait too.
            async with engine.begin() as conn:
                await conn.execute(ADMIN_LOGIN_FAILURES.delete())
            failures = await asyncio.to_thread(fuzz, served.url, headers, refused)
            assert not failures, "\n\n".join(failures)


async def test_a_malformed_framing_header_is_refused_by_the_server(sqlite_url: str) -> None:
    """Why generated cases leave FRAMING_HEADERS out: uvicorn's parser refuses the request
    with its own 400 before the application sees it, and the server goes on answering."""
    async with served_api(sqlite_url) as served:
        host, port = served.url.removeprefix("http://").split(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(
            b"GET /api/events HTTP/1.1\r\nHost: x\r\n"
            + f"Authorization: Bearer {TOKEN}\r\nTransfer-Encoding: FALSE\r\n\r\n".encode()
        )
        await writer.drain()
        answer = await asyncio.wait_for(reader.read(), timeout=10)
        writer.close()
        assert answer.startswith(b"HTTP/1.1 400 "), answer
        assert b"text/plain" in answer and b"Invalid HTTP request received." in answer
        async with httpx.AsyncClient(base_url=served.url) as client:
            fine = await client.get("/api/events", headers=AUTH)
        assert fine.status_code == 200
