"""The schemas of the OpenAPI document, generated from ``hookd.ops.models``: valid
OpenAPI 3.1 made of valid JSON Schemas, holding the store's words and the registry's
providers, and true of what a real server answers, whatever the dicts behind the
answers hold."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
import schemathesis
from jsonschema import Draft202012Validator

from hookd.ops import models
from hookd.providers import PROVIDERS
from hookd.web import openapi
from hookd.web.api import OperationsApi
from hookd.web.api_table import ROUTES
from store.status import EventOrigin, EventStatus, RunStatus, RunTrigger
from tests.support import openapi_snapshot
from tests.support.ops_server import AUTH, DOOMED, RECONCILED, Served, served_api, wait_done

pytestmark = pytest.mark.anyio
REF = "#/components/schemas/"


def schemas_in(node: Any) -> Iterator[dict[str, Any]]:
    """Every Schema Object the document holds outside ``components``: parameters',
    headers' and responses'."""
    if isinstance(node, dict):
        if isinstance(node.get("schema"), dict):
            yield node["schema"]
        for value in node.values():
            yield from schemas_in(value)
    elif isinstance(node, list):
        for value in node:
            yield from schemas_in(value)


def refs_in(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        if isinstance(node.get("$ref"), str):
            yield node["$ref"]
        for value in node.values():
            yield from refs_in(value)
    elif isinstance(node, list):
        for value in node:
            yield from refs_in(value)


def test_generated_document_is_valid_openapi_3_1() -> None:
    document = openapi.document()
    assert document["openapi"] == "3.1.0"
    # The official OpenAPI 3.1 meta-schema, which schemathesis carries ...
    schemathesis.openapi.from_dict(document).validate()
    # ... leaves Schema Objects unchecked: each must be valid JSON Schema 2020-12.
    components = document["components"]["schemas"]
    for schema in [*components.values(), *schemas_in(document["paths"])]:
        Draft202012Validator.check_schema(schema)
    refs = set(refs_in(document))
    assert refs, "the document refers to no schema: it changed shape"
    assert all(ref.startswith(REF) and ref.removeprefix(REF) in components for ref in refs)
    # Every body is there under its model's name, and nothing is there unused.
    assert {model.__name__ for model in openapi.bodies()} <= set(components)
    assert {ref.removeprefix(REF) for ref in refs_in(components)} | {
        ref.removeprefix(REF) for ref in refs_in(document["paths"])
    } == set(components)
    # The JSON is the document.
    assert json.loads(openapi.DOCUMENT_JSON) == document


def test_the_document_is_its_snapshot() -> None:
    """The document, paths included, is generated from the route table and the models:
    any change to what it says shows here as a difference from the committed snapshot,
    to review and write again (``python -m tests.support.openapi_snapshot``)."""
    snapshot = json.loads(openapi_snapshot.SNAPSHOT.read_text(encoding="utf-8"))
    document = openapi_snapshot.current()
    assert list(document["paths"]) == list(snapshot["paths"]), "the paths' order changed"
    assert document == snapshot


def test_every_route_of_the_table_is_answered_by_a_handler_and_a_model() -> None:
    """Each route names an ``OperationsApi`` method, and each answer a model the
    document holds (``Error`` for the refusals)."""
    components = openapi.document()["components"]["schemas"]
    for route in ROUTES:
        assert callable(getattr(OperationsApi, route.handler, None)), route.handler
        for reply in route.replies.values():
            assert reply.body.__name__ in components, (route.operation_id, reply.body)
            assert not reply.codes or reply.body is models.Error, route.operation_id
    assert len({(r.method, r.path) for r in ROUTES}) == len(ROUTES)


def test_words_come_from_the_store_and_providers_from_the_registry() -> None:
    components = openapi.document()["components"]["schemas"]
    for enum in (EventStatus, EventOrigin, RunStatus, RunTrigger):
        assert components[enum.__name__]["enum"] == [member.value for member in enum]
    for body in ("Event", "Source"):
        assert components[body]["properties"]["provider"]["enum"] == list(PROVIDERS)


@pytest.fixture
async def served(db_url: str) -> AsyncIterator[Served]:
    async with served_api(db_url) as served:
        yield served


class Answers:
    """What a real server answered, by the component each answer should be."""

    def __init__(self, client: httpx.AsyncClient) -> None:
        self.client = client
        self.seen: list[tuple[str, str, int, bytes]] = []

    async def call(self, component: str, method: str, path: str, status: int, **kwargs: Any) -> Any:
        response = await self.client.request(method, path, **kwargs)
        assert response.status_code == status, (method, path, response.text)
        self.seen.append((component, f"{method} {path}", status, response.content))
        return response.json()

    def failures(self) -> list[str]:
        """Each answer against its schema (jsonschema) and its model (pydantic, strict)."""
        components = openapi.document()["components"]
        bodies = {model.__name__: model for model in openapi.bodies()}
        found = []
        for component, request, _, content in self.seen:
            schema = {"$ref": REF + component, "components": components}
            validator = Draft202012Validator(
                schema, format_checker=Draft202012Validator.FORMAT_CHECKER
            )
            found += [
                f"{request} ({component}): {e.json_path}: {e.message}"
                for e in validator.iter_errors(json.loads(content))
            ]
            try:
                bodies[component].model_validate_json(content, strict=True)
            except ValueError as exc:
                found.append(f"{request} ({component}) as a model: {exc}")
        return found


async def test_real_answers_validate_against_the_generated_schemas(served: Served) -> None:
    async with httpx.AsyncClient(base_url=served.url, headers=AUTH, timeout=10) as client:
        answers = Answers(client)
        page = await answers.call("EventPage", "GET", "/api/events?limit=500", 200)
        short = await answers.call("EventPage", "GET", "/api/events?limit=2", 200)
        details = [
            await answers.call("EventDetail", "GET", f"/api/events/{event_id}", 200)
            for event_id in served.event_ids
        ]
        sources = await answers.call("SourceList", "GET", "/api/sources", 200)
        runs = await answers.call("ReconcileRunList", "GET", "/api/reconcile-runs", 200)
        for run in runs["runs"]:
            await answers.call("ReconcileRun", "GET", f"/api/reconcile-runs/{run['id']}", 200)
        queued = await answers.call(
            "ReconcileRun", "POST", f"/api/sources/{RECONCILED}/reconcile?dry_run=1", 202
        )
        await wait_done(client, f"/api/reconcile-runs/{queued['id']}")
        await answers.call("ReconcileRun", "GET", f"/api/reconcile-runs/{queued['id']}", 200)
        await answers.call("Source", "POST", f"/api/sources/{RECONCILED}/enable", 200)
        coverage = await answers.call(
            "Coverage", "GET", f"/api/sources/{RECONCILED}/coverage?since=1h", 200
        )
        [dead] = [e for e in page["events"] if e["source"] == DOOMED]
        replayed = await answers.call(
            "EventDetail", "POST", f"/api/events/{dead['id']}/replay", 202
        )
        await answers.call("OpenApiDocument", "GET", "/api/openapi.json", 200)
        for status, method, path in [
            (400, "GET", "/api/events?limit=0"),
            (404, "GET", f"/api/events/{'0' * 26}"),
            (404, "GET", "/api/nope"),
            (405, "DELETE", "/api/events"),
            (409, "POST", "/api/sources/github/enable"),
            (409, "GET", "/api/sources/github/coverage"),
            (400, "GET", f"/api/sources/{RECONCILED}/coverage?since=tomorrow"),
        ]:
            await answers.call("Error", method, path, status)
        await answers.call("Error", "GET", "/api/events", 401, headers={"Authorization": ""})
    # The answers reached every shape a schema allows: each nullable part set and null.
    history = [e for detail in [*details, replayed] for e in detail["history"]]
    assert {e["kind"] for e in history} == {"attempt", "replay"}
    assert {e["outcome"] for e in history if e["kind"] == "attempt"} >= {"processed", "dead"}
    assert replayed["history"][-1]["kind"] == "replay"
    events = page["events"]
    assert {e["origin"] for e in events} == {"webhook", "reconcile"}
    assert "dead" in {e["status"] for e in events}
    assert dead["error"] is not None and dead["error"]["handler"] is not None
    assert short["next_cursor"] is not None and page["next_cursor"] is None
    reconciled = {s["name"]: s["reconcile"] for s in sources["sources"]}
    assert reconciled[RECONCILED]["last_run"] is not None and reconciled["github"] is None
    assert not queued["done"] and queued["finished_at"] is None
    # A checked interval (the run's) and a hole (before it: nothing recorded).
    assert {i["state"] for i in coverage["intervals"]} == {"checked", "hole"}
    failures = answers.failures()
    assert not failures, "\n".join(failures)


async def test_the_other_resources_answer_as_their_schemas_say(served: Served) -> None:
    """What the test above does not reach: bulk operations, the pause switches, reason
    and who on a disabled source, the destinations, an object of an unordered source,
    alerts in every state, and refusals of the API's other kinds."""
    async with httpx.AsyncClient(base_url=served.url, headers=AUTH, timeout=10) as client:
        answers = Answers(client)
        listed = await answers.call("OperationList", "GET", "/api/operations?limit=1", 200)
        for operation_id in served.operation_ids:
            await answers.call("Operation", "GET", f"/api/operations/{operation_id}", 200)
        body = {"action": "replay", "filter": {"source": DOOMED}, "request_id": "schemas"}
        started = await answers.call("Operation", "POST", "/api/operations", 202, json=body)
        await wait_done(client, f"/api/operations/{started['id']}")
        again = await answers.call("Operation", "POST", "/api/operations", 200, json=body)
        await answers.call("Operation", "GET", f"/api/operations/{started['id']}", 200)
        paused = await answers.call("Source", "POST", "/api/sources/github/pause?reason=why", 200)
        await answers.call("SourceList", "GET", "/api/sources", 200)
        resumed = await answers.call("Source", "POST", "/api/sources/github/resume", 200)
        path = f"/api/sources/{RECONCILED}"
        disabled = await answers.call("Source", "POST", f"{path}/disable?reason=look", 200)
        await answers.call("SourceList", "GET", "/api/sources", 200)
        await answers.call("Source", "POST", f"{path}/enable", 200)
        await answers.call("DestinationList", "GET", "/api/destinations", 200)
        live = await answers.call("AlertList", "GET", "/api/alerts", 200)
        every = [
            await answers.call("Alert", "GET", f"/api/alerts/{alert_id}", 200)
            for alert_id in served.alert_ids
        ]
        opened, acknowledged, _ = served.alert_ids
        acked = await answers.call("Alert", "POST", f"/api/alerts/{opened}:ack", 200)
        resolved = await answers.call("Alert", "POST", f"/api/alerts/{acknowledged}:resolve", 200)
        await answers.call("AlertList", "GET", "/api/alerts?status=resolved&limit=500", 200)
        for status, method, path, kwargs in [
            (409, "GET", "/api/sources/github/objects/cus_1", {}),
            (404, "GET", "/api/sources/nope/objects/cus_1", {}),
            (404, "GET", "/api/destinations?source=nope", {}),
            (404, "POST", "/api/sources/github/destinations/nope/pause", {}),
            (400, "POST", "/api/sources/github/pause?reason=%00", {}),
            (400, "POST", "/api/operations", {"json": {"action": "delete"}}),
            (409, "POST", "/api/operations", {"json": {**body, "dry_run": True}}),
            (409, "POST", f"/api/operations/{started['id']}/cancel", {}),
            (404, "GET", f"/api/operations/{'0' * 26}", {}),
            (400, "GET", "/api/reconcile-runs?limit=x", {}),
            (400, "GET", "/api/alerts?status=closed", {}),
            (404, "GET", f"/api/alerts/{'0' * 26}", {}),
            (409, "POST", f"/api/alerts/{opened}:ack", {}),
            (409, "POST", f"/api/alerts/{acknowledged}:resolve", {}),
        ]:
            await answers.call("Error", method, path, status, **kwargs)
    assert listed["next_cursor"] is None or len(listed["operations"]) == 1
    assert again["id"] == started["id"] and again["done"]
    assert paused["paused"] and paused["pause"]["reason"] == "why"
    assert not resumed["paused"] and resumed["pause"]["paused"] is False
    assert disabled["reconcile"]["disabled_by"] == "api token:admin"
    # Every state an alert has, each nullable part set and null.
    assert [a["status"] for a in every] == ["open", "acknowledged", "resolved"]
    assert {a["id"] for a in live["alerts"]} == set(served.alert_ids[:2])
    assert every[0]["source"] is not None and acked["acknowledged_at"] is not None
    assert every[0]["acknowledged_by"] is None and resolved["resolved_by"] == "api token:admin"
    failures = answers.failures()
    assert not failures, "\n".join(failures)
