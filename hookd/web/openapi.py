"""The OpenAPI 3.1 document of the operations API, served at
``GET /api/openapi.json`` behind the same bearer token as the rest of ``/api``.

It is generated: the paths from the route table (``hookd/web/api_table.py``), from
which ``hookd/web/api.py`` builds its routes too, the bodies from the models of
``hookd/ops/models.py``, through which the API serialises its answers.
``tests/integration/test_openapi.py`` checks that every ``/api`` route is in it (and
nothing else), compares it with its snapshot (``tests/integration/openapi.json``),
validates real answers against the schemas, and fuzzes a real server against it.
"""

from __future__ import annotations

import copy
import json
from importlib import metadata

from pydantic import BaseModel
from pydantic.json_schema import GenerateJsonSchema, models_json_schema

from hookd.ops import models
from hookd.web.api_table import ROUTES, ApiRoute, Param, Reply, Schema
from hookd.web.auth_limit import OVERALL, PER_CLIENT, WINDOW_S

JSON = "application/json"
REF = "#/components/schemas/{model}"


def _ref(name: str) -> dict[str, object]:
    return {"$ref": REF.format(model=name)}


class _Schema(GenerateJsonSchema):
    """pydantic's JSON Schema less the title it makes from each field's name, which
    tells a client nothing the key does not."""

    def field_title_should_be_set(self, schema: object) -> bool:
        return False


def bodies(routes: tuple[ApiRoute, ...] = ROUTES) -> tuple[type[BaseModel], ...]:
    """Every body the route table names (answers, requests), ``Error`` first."""
    named: list[type[BaseModel]] = [models.Error]
    for route in routes:
        named += [reply.body for reply in route.replies.values()]
        named += [route.request] if route.request is not None else []
    return tuple(dict.fromkeys(named))


def schemas() -> dict[str, dict[str, object]]:
    """``components.schemas``: the bodies of the route table and every schema they
    refer to (enums, nested bodies), under their class names."""
    _, top = models_json_schema(
        [(model, "serialization") for model in bodies()],
        ref_template=REF,
        schema_generator=_Schema,
    )
    generated: dict[str, dict[str, object]] = top["$defs"]
    for schema in generated.values():
        if "enum" in schema:  # the store's enums: their docstrings are about the database
            schema.pop("description", None)
    return generated


def _json(schema: dict[str, object], description: str, media: str = JSON) -> dict[str, object]:
    return {"description": description, "content": {media: {"schema": schema}}}


def _error(description: str, *codes: str) -> dict[str, object]:
    schema: dict[str, object] = _ref("Error")
    if codes:
        schema = {
            "allOf": [
                _ref("Error"),
                {"type": "object", "properties": {"error": {"enum": list(codes)}}},
            ]
        }
    return _json(schema, description)


def _refusal(
    description: str, code: str, header: str, header_description: str, values: Schema
) -> dict[str, object]:
    """An answer of the bearer token's (401, 403, 429): its ``Error`` code, and the
    header that says what to do about it."""
    return {
        "description": description,
        "headers": {header: {"description": header_description, "schema": values}},
        "content": _error(description, code)["content"],
    }


UNAUTHORIZED = _refusal(
    "No bearer token, or none of the configured ones.",
    "unauthorized",
    "WWW-Authenticate",
    "Always `Bearer`.",
    {"type": "string", "enum": ["Bearer"]},
)

FORBIDDEN = _refusal(
    "A token of this server that does not open this operation: the read "
    "token (`HOOKD_READ_TOKEN`) on a POST or on the event stream, the metrics token "
    "(`HOOKD_METRICS_TOKEN`) anywhere, the listen token (`HOOKD_LISTEN_TOKEN`) anywhere but "
    "the event stream.",
    "forbidden",
    "WWW-Authenticate",
    'Always `Bearer error="insufficient_scope"` (RFC 6750).',
    {"type": "string", "enum": ['Bearer error="insufficient_scope"']},
)

TOO_MANY_REQUESTS = _refusal(
    f"Too many wrong tokens from this client address ({PER_CLIENT} in "
    f"{WINDOW_S:g} s), or from all addresses together ({OVERALL}): the token was not "
    "looked at, right or wrong.",
    "too_many_requests",
    "Retry-After",
    "Seconds until a token may be checked again.",
    {"type": "integer", "minimum": 1},
)


def _parameter(param: Param) -> dict[str, object]:
    out: dict[str, object] = {"name": param.name, "in": param.where}
    if param.required is not None:
        out["required"] = param.required
    if param.description is not None:
        out["description"] = param.description
    out["schema"] = param.schema
    if param.example is not None:
        out["example"] = param.example
    return out


def _link(operation_id: str) -> dict[str, object]:
    return {"operationId": operation_id, "parameters": {"id": "$response.body#/id"}}


def _reply(reply: Reply) -> dict[str, object]:
    if reply.body is not models.Error:
        out = _json(_ref(reply.body.__name__), reply.description, reply.media)
    else:
        out = _error(reply.description, *reply.codes)
    if reply.links:
        out["links"] = {op[0].upper() + op[1:]: _link(op) for op in reply.links}
    return out


def operation(route: ApiRoute) -> dict[str, object]:
    """The Operation Object of ``route``: every answer it documents, and those of the
    bearer token every operation may give (401, 403, 429)."""
    op: dict[str, object] = {
        "operationId": route.operation_id,
        "summary": route.summary,
        "tags": [route.tag],
    }
    if route.parameters:
        op["parameters"] = [_parameter(p) for p in route.parameters]
    op["responses"] = {
        **{str(status): _reply(reply) for status, reply in route.replies.items()},
        "401": UNAUTHORIZED,
        "403": FORBIDDEN,
        "429": TOO_MANY_REQUESTS,
    }
    if route.request is not None:
        op["requestBody"] = {
            "required": True,
            "description": route.request_description,
            "content": {JSON: {"schema": _ref(route.request.__name__)}},
        }
    return op


def paths(routes: tuple[ApiRoute, ...] = ROUTES) -> dict[str, dict[str, object]]:
    """The document's ``paths``, from the route table, in its order."""
    out: dict[str, dict[str, object]] = {}
    for route in routes:
        out.setdefault(route.path, {})[route.method.lower()] = operation(route)
    return out


def _version() -> str:
    try:
        return metadata.version("hookd")
    except metadata.PackageNotFoundError:
        return "0.0.0"


_DOCUMENT: dict[str, object] = {
    "openapi": "3.1.0",
    "info": {
        "title": "hookd operations API",
        "version": _version(),
        "description": "Events, replay, bulk operations, sources, reconciliation runs and "
        "alerts of a hookd webhook receiver. Every operation needs "
        "`Authorization: Bearer <HOOKD_ADMIN_TOKEN>`; the GET operations also take "
        "`HOOKD_READ_TOKEN`, but for the event stream, which takes `HOOKD_LISTEN_TOKEN`. "
        "Wrong tokens are rate limited per client address and overall "
        "(429 with `Retry-After`); no answer may be cached (`Cache-Control: no-store`).",
        "license": {"name": "Apache-2.0", "identifier": "Apache-2.0"},
    },
    "tags": [
        {"name": "events", "description": "Stored events and replay."},
        {"name": "sources", "description": "Configured sources and reconciliation."},
        {"name": "reconcile", "description": "Reconciliation runs."},
        {"name": "destinations", "description": "Destinations: pause, circuit breaker, queue."},
        {"name": "operations", "description": "Bulk replay and cancel, by filter."},
        {"name": "alerts", "description": "Conditions that need a person."},
        {"name": "rejected", "description": "Refused webhook requests on record."},
        {"name": "meta", "description": "This document."},
    ],
    "security": [{"bearerAuth": []}],
    "paths": paths(),
    "components": {
        "securitySchemes": {
            "bearerAuth": {
                "type": "http",
                "scheme": "bearer",
                "description": "The `HOOKD_ADMIN_TOKEN` of the server (every operation), "
                "its `HOOKD_READ_TOKEN` (the GET operations but the event stream) or its "
                "`HOOKD_LISTEN_TOKEN` (the event stream alone).",
            }
        },
        "schemas": schemas(),
    },
}

DOCUMENT_JSON: bytes = json.dumps(_DOCUMENT, separators=(",", ":")).encode()


def document() -> dict[str, object]:
    """A fresh copy of the document (callers, schemathesis among them, may change it)."""
    return copy.deepcopy(_DOCUMENT)
