"""The OpenAPI 3.1 document of the operations API, served at
``GET /api/openapi.json`` behind the same bearer token as the rest of ``/api``.

It describes ``hookd/web/api.py`` as implemented: the operations are written here, the
bodies they answer with are generated from the models of ``hookd/web/models.py``.
``tests/integration/test_openapi.py`` checks that every ``/api`` route is in it (and
nothing else), that real answers validate against the schemas, and fuzzes a real
server against it, so a change to the API that is not made here fails the tests.
"""

from __future__ import annotations

import copy
import json
from enum import StrEnum
from importlib import metadata
from typing import Any

from pydantic.json_schema import GenerateJsonSchema, models_json_schema

from hookd.ops.queries import MAX_LIMIT
from hookd.web import models
from hookd.web.auth_limit import OVERALL, PER_CLIENT, WINDOW_S
from store.status import EventOrigin, EventStatus

JSON = "application/json"
REF = "#/components/schemas/{model}"


def _ref(name: str) -> dict[str, str]:
    return {"$ref": REF.format(model=name)}


class _Schema(GenerateJsonSchema):
    """pydantic's JSON Schema less the title it makes from each field's name, which
    tells a client nothing the key does not."""

    def field_title_should_be_set(self, schema: object) -> bool:
        return False


def schemas() -> dict[str, Any]:
    """``components.schemas``: the bodies of ``models.BODIES`` and every schema they
    refer to, under their class names."""
    _, top = models_json_schema(
        [(model, "serialization") for model in models.BODIES],
        ref_template=REF,
        schema_generator=_Schema,
    )
    generated: dict[str, Any] = top["$defs"]
    for schema in generated.values():
        if "enum" in schema:  # the store's enums: their docstrings are about the database
            schema.pop("description", None)
    return generated


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
    "description": "No bearer token, or none of the configured ones.",
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

FORBIDDEN = {
    "description": "A token of this server that does not open this operation: the read "
    "token (`HOOKD_READ_TOKEN`) on a POST, the metrics token (`HOOKD_METRICS_TOKEN`) anywhere.",
    "headers": {
        "WWW-Authenticate": {
            "description": 'Always `Bearer error="insufficient_scope"` (RFC 6750).',
            "schema": {"type": "string", "enum": ['Bearer error="insufficient_scope"']},
        }
    },
    "content": {
        JSON: {
            "schema": {
                "allOf": [
                    _ref("Error"),
                    {"type": "object", "properties": {"error": {"enum": ["forbidden"]}}},
                ]
            }
        }
    },
}

TOO_MANY_REQUESTS = {
    "description": f"Too many wrong tokens from this client address ({PER_CLIENT} in "
    f"{WINDOW_S:g} s), or from all addresses together ({OVERALL}): the token was not "
    "looked at, right or wrong.",
    "headers": {
        "Retry-After": {
            "description": "Seconds until a token may be checked again.",
            "schema": {"type": "integer", "minimum": 1},
        }
    },
    "content": {
        JSON: {
            "schema": {
                "allOf": [
                    _ref("Error"),
                    {"type": "object", "properties": {"error": {"enum": ["too_many_requests"]}}},
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
    {"type": "string", "pattern": models.ULID},
    "01J8Z3Q4XW6N2V7C9D0E1F2G3H",
)
RUN_ID = _path(
    "id",
    "Reconcile run id (a ULID). Any other value answers 404.",
    {"type": "string", "pattern": models.ULID},
    "01J8Z3Q4XW6N2V7C9D0E1F2G3H",
)
OPERATION_ID = _path(
    "id",
    "Operation id (a ULID). Any other value answers 404.",
    {"type": "string", "pattern": models.ULID},
    "01J8Z3Q4XW6N2V7C9D0E1F2G3H",
)
SOURCE_NAME = _path(
    "name",
    "Source name, as configured in `[[sources]]`. An unknown name answers 404.",
    {"type": "string", "pattern": "^[a-z0-9][a-z0-9-]{0,63}$"},
    "github",
)

DESTINATION_NAME = _path(
    "destination",
    "Destination name, as configured in `[[sources.destinations]]` (`forward` for "
    "`[sources.forward]`). An unknown name answers 404.",
    {"type": "string", "pattern": "^[a-z0-9][a-z0-9-]{0,63}$"},
    "billing",
)
PAUSE_REASON = {
    "name": "reason",
    "in": "query",
    "required": False,
    "description": "Why, for whoever looks next (one line, at most 500 characters).",
    "schema": {"type": "string", "maxLength": 500},
}


def _enum(values: type[StrEnum]) -> dict[str, Any]:
    """A query parameter taking one of the store's words."""
    return {"type": "string", "enum": [str(v) for v in values]}


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
    op["responses"] = {
        **responses,
        "401": UNAUTHORIZED,
        "403": FORBIDDEN,
        "429": TOO_MANY_REQUESTS,
    }
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


OPERATION_LINKS = {
    "GetOperation": {
        "operationId": "getOperation",
        "parameters": {"id": "$response.body#/id"},
    },
    "CancelOperation": {
        "operationId": "cancelOperation",
        "parameters": {"id": "$response.body#/id"},
    },
}


def _with_links(response: dict[str, Any], links: dict[str, Any]) -> dict[str, Any]:
    return {**response, "links": links}


def _with_body(op: dict[str, Any], model: str, description: str) -> dict[str, Any]:
    """``op`` taking a JSON request body of ``model``."""
    body = {
        "required": True,
        "description": description,
        "content": {JSON: {"schema": _ref(model)}},
    }
    return {**op, "requestBody": body}


_OPERATION_STARTED = _with_links(
    _json(_ref("Operation"), "A new operation, queued; poll it until `done`."), OPERATION_LINKS
)


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
                    "schema": _enum(EventStatus),
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
                    "schema": _enum(EventOrigin),
                },
                _limit("Page size."),
                {
                    "name": "cursor",
                    "in": "query",
                    "description": "`next_cursor` of the previous page. Empty: the first page.",
                    "schema": {"type": "string", "pattern": models.ULID},
                },
                {
                    "name": "object",
                    "in": "query",
                    "description": "Only the events of this object (`object_key`) of a source "
                    "with `[sources.order]`; with `source`, of that source's object. Empty: any.",
                    "schema": {"type": "string"},
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
                "200": _json(_ref("EventDetail"), "The event, with its history."),
                "404": _error(
                    "No such event, or its row was pruned by the retention policy: then "
                    "`detail` says when, and the status it had ended in.",
                    "not_found",
                ),
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
                        _ref("EventDetail"),
                        "Queued again: status `pending`, attempts reset, origin kept; the "
                        "history ends with this replay.",
                    ),
                    {"GetEvent": EVENT_LINKS["GetEvent"]},
                ),
                "404": _error(
                    "No such event, or the retention policy pruned it (or was pruning it "
                    "when the replay came): then `detail` says when, and the status it "
                    "had ended in.",
                    "not_found",
                ),
                "409": _error(
                    "The event is being processed right now (`in_progress`), or it is "
                    "processed and the retention policy removed its body (`body_pruned`).",
                    "in_progress",
                    "body_pruned",
                ),
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
            "Re-enable reconciliation after it was disabled (auth failures, or by hand)",
            "sources",
            {
                "200": _json(_ref("Source"), "The source, reconciliation active."),
                "404": NOT_FOUND,
                "409": _error("The source has no `[sources.reconcile]` table.", "not_configured"),
            },
            (SOURCE_NAME,),
        )
    },
    "/api/sources/{name}/objects/{id}": {
        "get": _op(
            "getSourceObject",
            "One object's latest known state ([sources.order])",
            "sources",
            {
                "200": _json(_ref("SourceObject"), "The object."),
                "404": _error(
                    "No such source, or no event of that object is stored and none was processed.",
                    "not_found",
                ),
                "409": _error("The source has no `[sources.order]` table.", "not_configured"),
            },
            (
                SOURCE_NAME,
                _path(
                    "id",
                    "The object key, as `object_key` of its events holds it (percent-encode "
                    "what a URL path cannot hold; `/` may stay).",
                    {"type": "string", "minLength": 1},
                    "cus_123",
                ),
            ),
        )
    },
    "/api/sources/{name}/coverage": {
        "get": _op(
            "getSourceCoverage",
            "What reconciliation has checked of a source: intervals and holes, merged",
            "sources",
            {
                "200": _json(
                    _ref("Coverage"),
                    "The range's checked intervals and holes (with their reasons); "
                    "`covered` is true when there is no hole.",
                ),
                "400": _error(
                    "`since` or `until` is not a time, or `since` is not before `until`.",
                    "bad_request",
                ),
                "404": NOT_FOUND,
                "409": _error("The source has no `[sources.reconcile]` table.", "not_configured"),
            },
            (
                SOURCE_NAME,
                {
                    "name": "since",
                    "in": "query",
                    "description": "Start of the range (provider time): ISO 8601 (UTC unless "
                    "it names an offset), unix seconds, or a time ago (`90m`, `24h`, `7d`). "
                    "Empty: where the source's coverage ledger begins.",
                    "schema": {"type": "string"},
                },
                {
                    "name": "until",
                    "in": "query",
                    "description": "End of the range, as `since`. Empty: now less the "
                    "source's settle_s.",
                    "schema": {"type": "string"},
                },
            ),
        )
    },
    "/api/sources/{name}/disable": {
        "post": _op(
            "disableSource",
            "Stop the source's reconciliation by hand, until it is enabled again",
            "sources",
            {
                "200": _json(
                    _ref("Source"),
                    "The source, reconciliation disabled: with `reason`, `disabled_at` and "
                    "`disabled_by` (`api token:admin`). One already disabled stays as it was.",
                ),
                "400": _error(
                    "`reason` is longer than 500 characters or holds a control character.",
                    "bad_request",
                ),
                "404": NOT_FOUND,
                "409": _error("The source has no `[sources.reconcile]` table.", "not_configured"),
            },
            (
                SOURCE_NAME,
                {
                    "name": "reason",
                    "in": "query",
                    "required": False,
                    "description": "Why, for whoever looks next (one line, at most 500 "
                    "characters). Empty: `disabled by hand`.",
                    "schema": {"type": "string", "maxLength": 500},
                },
            ),
        )
    },
    "/api/sources/{name}/pause": {
        "post": _op(
            "pauseSource",
            "Pause the source's processing: its events are still stored and acknowledged",
            "sources",
            {
                "200": _json(
                    _ref("Source"),
                    "The source, `paused`, with who paused it (`api token:admin`) and when. "
                    "One already paused stays as it was.",
                ),
                "400": _error(
                    "`reason` is longer than 500 characters or holds a control character.",
                    "bad_request",
                ),
                "404": NOT_FOUND,
            },
            (SOURCE_NAME, PAUSE_REASON),
        )
    },
    "/api/sources/{name}/resume": {
        "post": _op(
            "resumeSource",
            "Resume the source's processing: what waited is processed in the order it came",
            "sources",
            {"200": _json(_ref("Source"), "The source, not paused."), "404": NOT_FOUND},
            (SOURCE_NAME,),
        )
    },
    "/api/destinations": {
        "get": _op(
            "listDestinations",
            "Destinations with their pause, circuit breaker and queue",
            "destinations",
            {
                "200": _json(_ref("DestinationList"), "The destinations."),
                "404": _error("`source` names no configured source.", "not_found"),
            },
            (
                {
                    "name": "source",
                    "in": "query",
                    "description": "Only this source's. Empty: every source's.",
                    "schema": {"type": "string"},
                },
            ),
        )
    },
    "/api/sources/{name}/destinations/{destination}/pause": {
        "post": _op(
            "pauseDestination",
            "Pause one destination: its deliveries wait, using no attempt",
            "destinations",
            {
                "200": _json(
                    _ref("Destination"), "The destination, `paused`. One already paused stays."
                ),
                "400": _error(
                    "`reason` is longer than 500 characters or holds a control character.",
                    "bad_request",
                ),
                "404": NOT_FOUND,
            },
            (SOURCE_NAME, DESTINATION_NAME, PAUSE_REASON),
        )
    },
    "/api/sources/{name}/destinations/{destination}/resume": {
        "post": _op(
            "resumeDestination",
            "Resume one destination: what waited is delivered in the order it came",
            "destinations",
            {"200": _json(_ref("Destination"), "The destination."), "404": NOT_FOUND},
            (SOURCE_NAME, DESTINATION_NAME),
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
    "/api/operations": {
        "get": _op(
            "listOperations",
            "Bulk operations, newest first, keyset paged",
            "operations",
            {
                "200": _json(_ref("OperationList"), "A page of operations."),
                "400": BAD_REQUEST,
            },
            (
                _limit("Page size."),
                {
                    "name": "cursor",
                    "in": "query",
                    "description": "`next_cursor` of the previous page. Empty: the first page.",
                    "schema": {"type": "string", "pattern": models.ULID},
                },
            ),
        ),
        "post": _with_body(
            _op(
                "startOperation",
                "Replay or cancel every event a filter selects (runs in the background)",
                "operations",
                {
                    "202": _OPERATION_STARTED,
                    "200": _with_links(
                        _json(
                            _ref("Operation"),
                            "A dry run (done at once, `progress.total` the estimate), or the "
                            "operation this `request_id` started before.",
                        ),
                        {"GetOperation": OPERATION_LINKS["GetOperation"]},
                    ),
                    "400": _error(
                        "The body is not a request this API takes: `detail` says what to change.",
                        "bad_request",
                    ),
                    "409": _error(
                        "This `request_id` started an operation with another action, filter "
                        "or dry_run.",
                        "request_id_reused",
                    ),
                    "413": _error("The body is over 64 KiB.", "body_too_large"),
                },
            ),
            "OperationRequest",
            "What to do (`action`) to which events (`filter`).",
        ),
    },
    "/api/operations/{id}": {
        "get": _op(
            "getOperation",
            "One bulk operation: status and progress",
            "operations",
            {
                "200": _json(_ref("Operation"), "The operation."),
                "404": NOT_FOUND,
            },
            (OPERATION_ID,),
        )
    },
    "/api/operations/{id}/cancel": {
        "post": _op(
            "cancelOperation",
            "Stop a bulk operation; what it did stays done",
            "operations",
            {
                "200": _json(
                    _ref("Operation"),
                    "Stopped (`cancelled`): `progress` and `error.message` say how far it got.",
                ),
                "202": _with_links(
                    _json(
                        _ref("Operation"),
                        "Asked: its runner stops at its next batch; poll until `done`.",
                    ),
                    {"GetOperation": OPERATION_LINKS["GetOperation"]},
                ),
                "404": NOT_FOUND,
                "409": _error("The operation already succeeded or failed.", "done"),
            },
            (OPERATION_ID,),
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
        "description": "Events, replay, bulk operations, sources and reconciliation runs of a "
        "hookd webhook receiver. Every operation needs "
        "`Authorization: Bearer <HOOKD_ADMIN_TOKEN>`; the GET operations also take "
        "`HOOKD_READ_TOKEN`. Wrong tokens are rate limited per client address and overall "
        "(429 with `Retry-After`); no answer may be cached (`Cache-Control: no-store`).",
        "license": {"name": "Apache-2.0", "identifier": "Apache-2.0"},
    },
    "tags": [
        {"name": "events", "description": "Stored events and replay."},
        {"name": "sources", "description": "Configured sources and reconciliation."},
        {"name": "reconcile", "description": "Reconciliation runs."},
        {"name": "destinations", "description": "Destinations: pause, circuit breaker, queue."},
        {"name": "operations", "description": "Bulk replay and cancel, by filter."},
        {"name": "meta", "description": "This document."},
    ],
    "security": [{"bearerAuth": []}],
    "paths": PATHS,
    "components": {
        "securitySchemes": {
            "bearerAuth": {
                "type": "http",
                "scheme": "bearer",
                "description": "The `HOOKD_ADMIN_TOKEN` of the server (every operation) or "
                "its `HOOKD_READ_TOKEN` (the GET operations).",
            }
        },
        "schemas": schemas(),
    },
}

DOCUMENT_JSON: bytes = json.dumps(_DOCUMENT, separators=(",", ":")).encode()


def document() -> dict[str, Any]:
    """A fresh copy of the document (callers, schemathesis among them, may change it)."""
    return copy.deepcopy(_DOCUMENT)
