"""The OpenAPI 3.1 document of the operations API, served at
``GET /api/openapi.json`` behind the same bearer token as the rest of ``/api``.

It describes ``hookd/web/api.py`` as implemented; ``tests/integration/test_openapi.py``
checks that every ``/api`` route is in it (and nothing else) and fuzzes a real
server against it, so a change to the API that is not made here fails the tests.
"""

from __future__ import annotations

import copy
import json
from importlib import metadata
from typing import Any

from store.models import ORIGINS, STATUSES

ULID = "^[0-9A-HJKMNP-TV-Z]{26}$"
MAX_LIMIT = 500
PROVIDERS = ("github", "stripe", "slack", "standard")
RUN_STATUSES = ("queued", "running", "succeeded", "failed", "lease_held")
RUN_TRIGGERS = ("cli", "schedule", "api")

JSON = "application/json"


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` or ``null`` (OpenAPI 3.1 / JSON Schema 2020-12 spelling)."""
    if "$ref" in schema:
        return {"oneOf": [schema, {"type": "null"}]}
    return {**schema, "type": [schema["type"], "null"]}


def _obj(
    properties: dict[str, Any], description: str, optional: tuple[str, ...] = ()
) -> dict[str, Any]:
    return {
        "type": "object",
        "description": description,
        "required": [name for name in properties if name not in optional],
        "properties": properties,
        "additionalProperties": False,
    }


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {JSON: {"schema": schema}}}


def _error(description: str, *codes: str) -> dict[str, Any]:
    schema: dict[str, Any] = _ref("Error")
    if codes:
        schema = {
            "allOf": [
                _ref("Error"),
                {"type": "object", "properties": {"error": {"enum": list(codes)}}},
            ]
        }
    return _json(schema, description)


UNAUTHORIZED = {
    "description": "No bearer token, or not the configured one (`HOOKD_ADMIN_TOKEN`).",
    "headers": {
        "WWW-Authenticate": {
            "description": "Always `Bearer`.",
            "schema": {"type": "string", "enum": ["Bearer"]},
        }
    },
    "content": {
        JSON: {
            "schema": {
                "allOf": [
                    _ref("Error"),
                    {"type": "object", "properties": {"error": {"enum": ["unauthorized"]}}},
                ]
            }
        }
    },
}

BAD_REQUEST = _error("A query parameter is out of range or not one of its values.", "bad_request")
NOT_FOUND = _error("No such resource.", "not_found")


def _limit(description: str) -> dict[str, Any]:
    return {
        "name": "limit",
        "in": "query",
        "required": False,
        "description": description,
        "schema": {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT, "default": 50},
    }


def _path(name: str, description: str, schema: dict[str, Any], example: str) -> dict[str, Any]:
    return {
        "name": name,
        "in": "path",
        "required": True,
        "description": description,
        "schema": schema,
        "example": example,
    }


EVENT_ID = _path(
    "id",
    "Event id (a ULID). Any other value answers 404.",
    {"type": "string", "pattern": ULID},
    "01J8Z3Q4XW6N2V7C9D0E1F2G3H",
)
RUN_ID = _path(
    "id",
    "Reconcile run id (a ULID). Any other value answers 404.",
    {"type": "string", "pattern": ULID},
    "01J8Z3Q4XW6N2V7C9D0E1F2G3H",
)
SOURCE_NAME = _path(
    "name",
    "Source name, as configured in `[[sources]]`. An unknown name answers 404.",
    {"type": "string", "pattern": "^[a-z0-9][a-z0-9-]{0,63}$"},
    "github",
)

_TIME = {"type": "string", "format": "date-time"}

SCHEMAS: dict[str, Any] = {
    "Error": _obj(
        {
            "error": {"type": "string", "description": "A stable, machine-readable code."},
            "detail": {"type": "string", "description": "What to change, for a person."},
        },
        "What went wrong.",
        optional=("detail",),
    ),
    "EventError": _obj(
        {
            "message": {
                "type": "string",
                "description": "One line: the handler, the exception type and its message.",
            },
            "handler": _nullable(
                {
                    "type": "string",
                    "description": "The handler that raised; null when processing failed "
                    "outside the handlers (e.g. a body no configured key decrypts).",
                }
            ),
            "type": _nullable(
                {"type": "string", "description": "The exception's type name, e.g. `ValueError`."}
            ),
        },
        "The last failed attempt: why a retrying event is retrying, or why a dead one gave up.",
    ),
    "Event": _obj(
        {
            "name": {"type": "string", "pattern": "^events/[0-9A-HJKMNP-TV-Z]{26}$"},
            "id": {"type": "string", "pattern": ULID},
            "source": {"type": "string"},
            "provider": {"type": "string", "enum": list(PROVIDERS)},
            "type": _nullable({"type": "string"}),
            "dedupe_key": {"type": "string"},
            "origin": {"type": "string", "enum": list(ORIGINS)},
            "status": {"type": "string", "enum": list(STATUSES)},
            "done": {
                "type": "boolean",
                "description": "True once `status` is `processed` or `dead`.",
            },
            "attempts": {"type": "integer", "minimum": 0},
            "received_at": _TIME,
            "occurred_at": _nullable(_TIME),
            "processed_at": _nullable(_TIME),
            "verified_with": {
                "type": "string",
                "description": "How the signature was verified at receipt.",
            },
            "error": _nullable(_ref("EventError")),
            "poll_after_seconds": _nullable(
                {
                    "type": "integer",
                    "minimum": 1,
                    "description": "While not done: when to look again. Null once done.",
                }
            ),
        },
        "One stored event, shaped like a long-running operation.",
    ),
    "EventPage": _obj(
        {
            "events": {"type": "array", "items": _ref("Event")},
            "next_cursor": _nullable(
                {
                    "type": "string",
                    "pattern": ULID,
                    "description": "Pass as `cursor` for the next page; null on the last one.",
                }
            ),
        },
        "One page of events, newest first.",
    ),
    "ReconcileRun": _obj(
        {
            "name": {"type": "string", "pattern": "^reconcile-runs/[0-9A-HJKMNP-TV-Z]{26}$"},
            "id": {"type": "string", "pattern": ULID},
            "source": {"type": "string"},
            "status": {"type": "string", "enum": list(RUN_STATUSES)},
            "done": {
                "type": "boolean",
                "description": "True once `status` is `succeeded`, `failed` or `lease_held`.",
            },
            "trigger": {"type": "string", "enum": list(RUN_TRIGGERS)},
            "dry_run": {"type": "boolean"},
            "started_at": _TIME,
            "finished_at": _nullable(_TIME),
            "items_checked": {"type": "integer", "minimum": 0},
            "items_missing": {"type": "integer", "minimum": 0},
            "items_repaired": {"type": "integer", "minimum": 0},
            "pages": {"type": "integer", "minimum": 0},
            "api_calls": {"type": "integer", "minimum": 0},
            "rate_limited": {"type": "integer", "minimum": 0},
            "cursor_before": _nullable(
                {"type": "number", "description": "Watermark before the run (unix seconds)."}
            ),
            "cursor_after": _nullable(
                {"type": "number", "description": "Watermark after the run (unix seconds)."}
            ),
            "error": _nullable({"type": "string"}),
        },
        "One reconciliation run against a provider's API.",
    ),
    "ReconcileRunList": _obj(
        {"runs": {"type": "array", "items": _ref("ReconcileRun")}},
        "Reconcile runs, newest first.",
    ),
    "SourceReconcile": _obj(
        {
            "state": {"type": "string", "enum": ["active", "disabled"]},
            "reason": _nullable({"type": "string", "description": "Why it was disabled."}),
            "cursor": _nullable({"type": "number", "description": "Watermark (unix seconds)."}),
            "interval_s": _nullable({"type": "number"}),
            "next_run_at": _nullable(_TIME),
            "last_run": _nullable(_ref("ReconcileRun")),
        },
        "Reconciliation state of a source that has a `[sources.reconcile]` table.",
    ),
    "Source": _obj(
        {
            "name": {"type": "string"},
            "provider": {"type": "string", "enum": list(PROVIDERS)},
            "reconcile": {
                **_nullable(_ref("SourceReconcile")),
                "description": "Null when the source is not reconciled.",
            },
            "pending": {
                "type": "integer",
                "minimum": 0,
                "description": "Events pending, retrying or processing.",
            },
            "dead": {"type": "integer", "minimum": 0},
        },
        "A configured source.",
    ),
    "SourceList": _obj(
        {"sources": {"type": "array", "items": _ref("Source")}},
        "Every configured source, in configuration order.",
    ),
    "OpenApiDocument": {
        "type": "object",
        "description": "This document.",
        "required": ["openapi", "info", "paths"],
        "properties": {"openapi": {"type": "string"}},
        "additionalProperties": True,
    },
}


def _op(
    operation_id: str,
    summary: str,
    tag: str,
    responses: dict[str, Any],
    parameters: tuple[dict[str, Any], ...] = (),
) -> dict[str, Any]:
    op: dict[str, Any] = {"operationId": operation_id, "summary": summary, "tags": [tag]}
    if parameters:
        op["parameters"] = list(parameters)
    op["responses"] = {**responses, "401": UNAUTHORIZED}
    return op


EVENT_LINKS = {
    "GetEvent": {
        "operationId": "getEvent",
        "parameters": {"id": "$response.body#/id"},
    },
    "ReplayEvent": {
        "operationId": "replayEvent",
        "parameters": {"id": "$response.body#/id"},
    },
}
RUN_LINKS = {
    "GetReconcileRun": {
        "operationId": "getReconcileRun",
        "parameters": {"id": "$response.body#/id"},
    }
}


def _with_links(response: dict[str, Any], links: dict[str, Any]) -> dict[str, Any]:
    return {**response, "links": links}


PATHS: dict[str, Any] = {
    "/api/events": {
        "get": _op(
            "listEvents",
            "List events, newest first, keyset paged",
            "events",
            {
                "200": _json(_ref("EventPage"), "A page of events."),
                "400": BAD_REQUEST,
            },
            (
                {
                    "name": "source",
                    "in": "query",
                    "description": "Only this source. Empty: any.",
                    "schema": {"type": "string"},
                },
                {
                    "name": "status",
                    "in": "query",
                    "schema": {"type": "string", "enum": list(STATUSES)},
                },
                {
                    "name": "type",
                    "in": "query",
                    "description": "Only this event type. Empty: any.",
                    "schema": {"type": "string"},
                },
                {
                    "name": "origin",
                    "in": "query",
                    "schema": {"type": "string", "enum": list(ORIGINS)},
                },
                _limit("Page size."),
                {
                    "name": "cursor",
                    "in": "query",
                    "description": "`next_cursor` of the previous page. Empty: the first page.",
                    "schema": {"type": "string", "pattern": ULID},
                },
            ),
        )
    },
    "/api/events/{id}": {
        "get": _op(
            "getEvent",
            "One event",
            "events",
            {
                "200": _json(_ref("Event"), "The event."),
                "404": NOT_FOUND,
            },
            (EVENT_ID,),
        )
    },
    "/api/events/{id}/replay": {
        "post": _op(
            "replayEvent",
            "Run an event's handlers again, on the same row",
            "events",
            {
                "202": _with_links(
                    _json(
                        _ref("Event"),
                        "Queued again: status `pending`, attempts reset, origin kept.",
                    ),
                    {"GetEvent": EVENT_LINKS["GetEvent"]},
                ),
                "404": NOT_FOUND,
                "409": _error("The event is being processed right now.", "in_progress"),
            },
            (EVENT_ID,),
        )
    },
    "/api/sources": {
        "get": _op(
            "listSources",
            "Sources with their reconcile state and pending/dead counts",
            "sources",
            {"200": _json(_ref("SourceList"), "Every configured source.")},
        )
    },
    "/api/sources/{name}/reconcile": {
        "post": _op(
            "reconcileSource",
            "Start a reconciliation run now (runs in the background)",
            "sources",
            {
                "202": _with_links(
                    _json(_ref("ReconcileRun"), "The run, queued; poll it until `done`."),
                    RUN_LINKS,
                ),
                "404": NOT_FOUND,
                "409": _error("The source has no `[sources.reconcile]` table.", "not_configured"),
            },
            (
                SOURCE_NAME,
                {
                    "name": "dry_run",
                    "in": "query",
                    "description": "`1`, `true` or `yes` (any case): count, repair nothing. "
                    "Any other value: a real run.",
                    "schema": {"type": "boolean", "default": False},
                },
            ),
        )
    },
    "/api/sources/{name}/enable": {
        "post": _op(
            "enableSource",
            "Re-enable reconciliation after it was disabled (auth failures)",
            "sources",
            {
                "200": _json(_ref("Source"), "The source, reconciliation active."),
                "404": NOT_FOUND,
                "409": _error("The source has no `[sources.reconcile]` table.", "not_configured"),
            },
            (SOURCE_NAME,),
        )
    },
    "/api/reconcile-runs": {
        "get": _op(
            "listReconcileRuns",
            "Reconcile runs, newest first",
            "reconcile",
            {
                "200": _json(_ref("ReconcileRunList"), "The runs."),
                "400": BAD_REQUEST,
            },
            (
                {
                    "name": "source",
                    "in": "query",
                    "description": "Only this source. Empty: any.",
                    "schema": {"type": "string"},
                },
                _limit("How many runs."),
            ),
        )
    },
    "/api/reconcile-runs/{id}": {
        "get": _op(
            "getReconcileRun",
            "One reconcile run",
            "reconcile",
            {
                "200": _json(_ref("ReconcileRun"), "The run."),
                "404": NOT_FOUND,
            },
            (RUN_ID,),
        )
    },
    "/api/openapi.json": {
        "get": _op(
            "getOpenApi",
            "This document",
            "meta",
            {"200": _json(_ref("OpenApiDocument"), "The OpenAPI document.")},
        )
    },
}


def _version() -> str:
    try:
        return metadata.version("hookd")
    except metadata.PackageNotFoundError:
        return "0.0.0"


_DOCUMENT: dict[str, Any] = {
    "openapi": "3.1.0",
    "info": {
        "title": "hookd operations API",
        "version": _version(),
        "description": "Events, replay, sources and reconciliation runs of a hookd "
        "webhook receiver. Every operation needs `Authorization: Bearer <HOOKD_ADMIN_TOKEN>`.",
        "license": {"name": "Apache-2.0", "identifier": "Apache-2.0"},
    },
    "tags": [
        {"name": "events", "description": "Stored events and replay."},
        {"name": "sources", "description": "Configured sources and reconciliation."},
        {"name": "reconcile", "description": "Reconciliation runs."},
        {"name": "meta", "description": "This document."},
    ],
    "security": [{"bearerAuth": []}],
    "paths": PATHS,
    "components": {
        "securitySchemes": {
            "bearerAuth": {
                "type": "http",
                "scheme": "bearer",
                "description": "The `HOOKD_ADMIN_TOKEN` of the server.",
            }
        },
        "schemas": SCHEMAS,
    },
}

DOCUMENT_JSON: bytes = json.dumps(_DOCUMENT, separators=(",", ":")).encode()


def document() -> dict[str, Any]:
    """A fresh copy of the document (callers, schemathesis among them, may change it)."""
    return copy.deepcopy(_DOCUMENT)
