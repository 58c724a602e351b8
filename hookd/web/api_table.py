"""The operations API's route table: each operation once, with its method and path,
the handler that answers it (a method of ``hookd.web.api.OperationsApi``), who may
call it, its parameters, its request body and every answer it gives (status, model,
error codes, links).

``hookd.web.api`` builds its Starlette routes from this table and serialises each
handler's answer through the model given here; ``hookd.web.openapi`` writes the
document's paths from it. A new route is one entry here and one handler there.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Literal

from pydantic import BaseModel

from hookd.auth import Right
from hookd.ops import models
from hookd.ops.alert_models import Alert, AlertList
from hookd.ops.alerts import STATUS_FILTERS
from hookd.ops.queries import MAX_LIMIT
from hookd.ops.rejected_models import RejectedList
from store.status import EventOrigin, EventStatus

Schema = dict[str, object]
ULID_EXAMPLE = "01J8Z3Q4XW6N2V7C9D0E1F2G3H"
NAME_PATTERN = "^[a-z0-9][a-z0-9-]{0,63}$"
# GET /api/alerts without a limit: hookd.ops.alerts' own default.
ALERT_LIMIT = 100


@dataclass(frozen=True, slots=True)
class Param:
    """A query or path parameter."""

    name: str
    where: Literal["query", "path"]
    schema: Schema
    description: str | None = None
    # A path parameter is always required; a query parameter says so only when given.
    required: bool | None = None
    example: str | None = None


@dataclass(frozen=True, slots=True)
class Reply:
    """One answer of an operation: a ``body`` model, or an ``Error`` (with the codes its
    ``error`` takes, when they are known); ``links``: operations the answer's ``id``
    leads to."""

    description: str
    body: type[BaseModel] = models.Error
    codes: tuple[str, ...] = ()
    links: tuple[str, ...] = ()
    # The answer's media type: JSON but for the event stream (server-sent events, each
    # event's data a ``body``).
    media: str = "application/json"


@dataclass(frozen=True, slots=True)
class ApiRoute:
    method: Literal["GET", "POST"]
    path: str  # as the document writes it; ``path_params`` take a slash too
    operation_id: str
    handler: str  # the name of the ``OperationsApi`` method that answers it
    summary: str
    tag: str
    replies: dict[int, Reply]
    parameters: tuple[Param, ...] = ()
    # READ: the read token or the admin token; WRITE: the admin token only; LISTEN: the
    # listen token or the admin token.
    right: Right = Right.READ
    request: type[models.Resource] | None = None
    request_description: str = ""
    path_params: tuple[str, ...] = field(default=())

    @property
    def ok(self) -> int:
        """The status of a handler's answer unless it says another."""
        return min(status for status in self.replies if status < 300)

    @property
    def route_path(self) -> str:
        """The path as Starlette matches it."""
        path = self.path
        for name in self.path_params:
            path = path.replace("{" + name + "}", "{" + name + ":path}")
        return path


def _path(name: str, description: str, schema: Schema, example: str) -> Param:
    return Param(name, "path", schema, description, required=True, example=example)


def _id(what: str) -> Param:
    return _path(
        "id",
        f"{what} id (a ULID). Any other value answers 404.",
        {"type": "string", "pattern": models.ULID},
        ULID_EXAMPLE,
    )


def _limit(description: str) -> Param:
    schema: Schema = {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT, "default": 50}
    return Param("limit", "query", schema, description, required=False)


def _enum(values: type[StrEnum]) -> Schema:
    """A query parameter taking one of the store's words."""
    return {"type": "string", "enum": [str(v) for v in values]}


def _text(name: str, description: str) -> Param:
    return Param(name, "query", {"type": "string"}, description)


EVENT_ID = _id("Event")
RUN_ID = _id("Reconcile run")
OPERATION_ID = _id("Operation")
ALERT_ID = _id("Alert")
SOURCE_NAME = _path(
    "name",
    "Source name, as configured in `[[sources]]`. An unknown name answers 404.",
    {"type": "string", "pattern": NAME_PATTERN},
    "github",
)
DESTINATION_NAME = _path(
    "destination",
    "Destination name, as configured in `[[sources.destinations]]` (`forward` for "
    "`[sources.forward]`). An unknown name answers 404.",
    {"type": "string", "pattern": NAME_PATTERN},
    "billing",
)
PAUSE_REASON = Param(
    "reason",
    "query",
    {"type": "string", "maxLength": 500},
    "Why, for whoever looks next (one line, at most 500 characters).",
    required=False,
)
CURSOR = Param(
    "cursor",
    "query",
    {"type": "string", "pattern": models.ULID},
    "`next_cursor` of the previous page. Empty: the first page.",
)

BAD_REQUEST = Reply(
    "A query parameter is out of range or not one of its values.", codes=("bad_request",)
)
NOT_FOUND = Reply("No such resource.", codes=("not_found",))
BAD_REASON = Reply(
    "`reason` is longer than 500 characters or holds a control character.", codes=("bad_request",)
)
NOT_RECONCILED = Reply("The source has no `[sources.reconcile]` table.", codes=("not_configured",))
NOT_COVERED = Reply(
    "The source has neither a `[sources.reconcile]` nor a `[sources.expect]` table.",
    codes=("not_configured",),
)


ROUTES: tuple[ApiRoute, ...] = (
    ApiRoute(
        "GET",
        "/api/events",
        "listEvents",
        "events_index",
        "List events, newest first, keyset paged",
        "events",
        {200: Reply("A page of events.", models.EventPage), 400: BAD_REQUEST},
        (
            _text("source", "Only this source. Empty: any."),
            Param("status", "query", _enum(EventStatus)),
            _text("type", "Only this event type. Empty: any."),
            Param("origin", "query", _enum(EventOrigin)),
            _limit("Page size."),
            CURSOR,
            _text(
                "object",
                "Only the events of this object (`object_key`) of a source with "
                "`[sources.order]`; with `source`, of that source's object. Empty: any.",
            ),
        ),
    ),
    ApiRoute(
        "GET",
        "/api/events:stream",
        "streamEvents",
        "events_stream",
        "Stream newly stored events, in id order, as server-sent events (`hookd listen`)",
        "events",
        {
            200: Reply(
                "`text/event-stream`, open until the client closes it: one server-sent event "
                "per stored event (`id:` its id, `event: event`, `data:` one line of JSON, "
                "this schema), in id order, each once; a comment line every 15 s when idle. "
                "An event is sent once its id is 2 s old; every poll also re-reads the ids of "
                "the last `HOOKD_COMMIT_TIMEOUT_S` + 5 s behind the cursor, so one committed "
                "late is still sent (once). On a resume, that window is sent again: the "
                "client skips the ids it has. Read-only: no event changes.",
                models.StreamedEvent,
                media="text/event-stream",
            ),
            400: BAD_REQUEST,
        },
        (
            Param(
                "source",
                "query",
                {"type": "array", "items": {"type": "string"}, "maxItems": 50},
                "Only these sources (repeat the parameter). None: every source.",
                required=False,
            ),
            _text("type", "Only event types matching this glob (`*`, `?`). Empty: any."),
            Param(
                "after",
                "query",
                {"type": "string", "pattern": models.ULID},
                "Resume after this event id (the last one received); the `Last-Event-ID` "
                "header, when sent, overrides it. Not with `last` or `since`.",
                required=False,
            ),
            Param(
                "last",
                "query",
                {"type": "integer", "minimum": 1, "maximum": 10_000},
                "Start with the newest `last` matching events already stored.",
                required=False,
            ),
            Param(
                "since",
                "query",
                {"type": "string", "format": "date-time"},
                "Start with the events received since this moment (ISO 8601 with its offset).",
                required=False,
            ),
        ),
        right=Right.LISTEN,
    ),
    ApiRoute(
        "GET",
        "/api/events/{id}",
        "getEvent",
        "event_detail",
        "One event",
        "events",
        {
            200: Reply("The event, with its history.", models.EventDetail),
            404: Reply(
                "No such event, or its row was pruned by the retention policy: then "
                "`detail` says when, and the status it had ended in.",
                codes=("not_found",),
            ),
        },
        (EVENT_ID,),
    ),
    ApiRoute(
        "POST",
        "/api/events/{id}/replay",
        "replayEvent",
        "event_replay",
        "Run an event's handlers again, on the same row",
        "events",
        {
            202: Reply(
                "Queued again: status `pending`, attempts reset, origin kept; the "
                "history ends with this replay.",
                models.EventDetail,
                links=("getEvent",),
            ),
            404: Reply(
                "No such event, or the retention policy pruned it (or was pruning it "
                "when the replay came): then `detail` says when, and the status it "
                "had ended in.",
                codes=("not_found",),
            ),
            409: Reply(
                "The event is being processed right now (`in_progress`), or it is "
                "processed and the retention policy removed its body (`body_pruned`).",
                codes=("in_progress", "body_pruned"),
            ),
        },
        (EVENT_ID,),
        right=Right.WRITE,
    ),
    ApiRoute(
        "GET",
        "/api/sources",
        "listSources",
        "sources_index",
        "Sources with their reconcile state and pending/dead counts",
        "sources",
        {200: Reply("Every configured source.", models.SourceList)},
    ),
    ApiRoute(
        "POST",
        "/api/sources/{name}/reconcile",
        "reconcileSource",
        "reconcile_now",
        "Start a reconciliation run now (runs in the background)",
        "sources",
        {
            202: Reply(
                "The run, queued; poll it until `done`.",
                models.ReconcileRun,
                links=("getReconcileRun",),
            ),
            404: NOT_FOUND,
            409: NOT_RECONCILED,
        },
        (
            SOURCE_NAME,
            Param(
                "dry_run",
                "query",
                {"type": "boolean", "default": False},
                "`1`, `true` or `yes` (any case): count, repair nothing. Any other value: "
                "a real run.",
            ),
        ),
        right=Right.WRITE,
    ),
    ApiRoute(
        "POST",
        "/api/sources/{name}/enable",
        "enableSource",
        "enable",
        "Re-enable reconciliation after it was disabled (auth failures, or by hand)",
        "sources",
        {
            200: Reply("The source, reconciliation active.", models.Source),
            404: NOT_FOUND,
            409: NOT_RECONCILED,
        },
        (SOURCE_NAME,),
        right=Right.WRITE,
    ),
    ApiRoute(
        "GET",
        "/api/sources/{name}/objects/{id}",
        "getSourceObject",
        "object_detail",
        "One object's latest known state ([sources.order])",
        "sources",
        {
            200: Reply("The object.", models.SourceObject),
            404: Reply(
                "No such source, or no event of that object is stored and none was processed.",
                codes=("not_found",),
            ),
            409: Reply("The source has no `[sources.order]` table.", codes=("not_configured",)),
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
        path_params=("id",),
    ),
    ApiRoute(
        "GET",
        "/api/sources/{name}/coverage",
        "getSourceCoverage",
        "coverage",
        "What reconciliation has checked of a source: intervals and holes, merged",
        "sources",
        {
            200: Reply(
                "The range's checked intervals and holes (with their reasons); "
                "`covered` is true when there is no hole. A source with "
                "`[sources.expect]` and no `[sources.reconcile]`: the windows its "
                "silence watch judged, heard (checked) or silent (a hole).",
                models.Coverage,
            ),
            400: Reply(
                "`since` or `until` is not a time, or `since` is not before `until`.",
                codes=("bad_request",),
            ),
            404: NOT_FOUND,
            409: NOT_COVERED,
        },
        (
            SOURCE_NAME,
            _text(
                "since",
                "Start of the range (provider time): ISO 8601 (UTC unless it names an "
                "offset), unix seconds, or a time ago (`90m`, `24h`, `7d`). Empty: where "
                "the source's coverage ledger begins.",
            ),
            _text("until", "End of the range, as `since`. Empty: now less the source's settle_s."),
        ),
    ),
    ApiRoute(
        "POST",
        "/api/sources/{name}/disable",
        "disableSource",
        "disable",
        "Stop the source's reconciliation by hand, until it is enabled again",
        "sources",
        {
            200: Reply(
                "The source, reconciliation disabled: with `reason`, `disabled_at` and "
                "`disabled_by` (`api token:admin`). One already disabled stays as it was.",
                models.Source,
            ),
            400: BAD_REASON,
            404: NOT_FOUND,
            409: NOT_RECONCILED,
        },
        (
            SOURCE_NAME,
            Param(
                "reason",
                "query",
                {"type": "string", "maxLength": 500},
                "Why, for whoever looks next (one line, at most 500 characters). "
                "Empty: `disabled by hand`.",
                required=False,
            ),
        ),
        right=Right.WRITE,
    ),
    ApiRoute(
        "POST",
        "/api/sources/{name}/pause",
        "pauseSource",
        "source_pause",
        "Pause the source's processing: its events are still stored and acknowledged",
        "sources",
        {
            200: Reply(
                "The source, `paused`, with who paused it (`api token:admin`) and when. "
                "One already paused stays as it was.",
                models.Source,
            ),
            400: BAD_REASON,
            404: NOT_FOUND,
        },
        (SOURCE_NAME, PAUSE_REASON),
        right=Right.WRITE,
    ),
    ApiRoute(
        "POST",
        "/api/sources/{name}/resume",
        "resumeSource",
        "source_resume",
        "Resume the source's processing: what waited is processed in the order it came",
        "sources",
        {200: Reply("The source, not paused.", models.Source), 404: NOT_FOUND},
        (SOURCE_NAME,),
        right=Right.WRITE,
    ),
    ApiRoute(
        "GET",
        "/api/destinations",
        "listDestinations",
        "destinations_index",
        "Destinations with their pause, circuit breaker and queue",
        "destinations",
        {
            200: Reply("The destinations.", models.DestinationList),
            404: Reply("`source` names no configured source.", codes=("not_found",)),
        },
        (_text("source", "Only this source's. Empty: every source's."),),
    ),
    ApiRoute(
        "POST",
        "/api/sources/{name}/destinations/{destination}/pause",
        "pauseDestination",
        "destination_pause",
        "Pause one destination: its deliveries wait, using no attempt",
        "destinations",
        {
            200: Reply("The destination, `paused`. One already paused stays.", models.Destination),
            400: BAD_REASON,
            404: NOT_FOUND,
        },
        (SOURCE_NAME, DESTINATION_NAME, PAUSE_REASON),
        right=Right.WRITE,
    ),
    ApiRoute(
        "POST",
        "/api/sources/{name}/destinations/{destination}/resume",
        "resumeDestination",
        "destination_resume",
        "Resume one destination: what waited is delivered in the order it came",
        "destinations",
        {200: Reply("The destination.", models.Destination), 404: NOT_FOUND},
        (SOURCE_NAME, DESTINATION_NAME),
        right=Right.WRITE,
    ),
    ApiRoute(
        "GET",
        "/api/reconcile-runs",
        "listReconcileRuns",
        "runs_index",
        "Reconcile runs, newest first",
        "reconcile",
        {200: Reply("The runs.", models.ReconcileRunList), 400: BAD_REQUEST},
        (_text("source", "Only this source. Empty: any."), _limit("How many runs.")),
    ),
    ApiRoute(
        "GET",
        "/api/reconcile-runs/{id}",
        "getReconcileRun",
        "run_detail",
        "One reconcile run",
        "reconcile",
        {200: Reply("The run.", models.ReconcileRun), 404: NOT_FOUND},
        (RUN_ID,),
    ),
    ApiRoute(
        "GET",
        "/api/operations",
        "listOperations",
        "operations_index",
        "Bulk operations, newest first, keyset paged",
        "operations",
        {200: Reply("A page of operations.", models.OperationList), 400: BAD_REQUEST},
        (_limit("Page size."), CURSOR),
    ),
    ApiRoute(
        "POST",
        "/api/operations",
        "startOperation",
        "operation_start",
        "Replay or cancel every event a filter selects (runs in the background)",
        "operations",
        {
            202: Reply(
                "A new operation, queued; poll it until `done`.",
                models.Operation,
                links=("getOperation", "cancelOperation"),
            ),
            200: Reply(
                "A dry run (done at once, `progress.total` the estimate), or the "
                "operation this `request_id` started before.",
                models.Operation,
                links=("getOperation",),
            ),
            400: Reply(
                "The body is not a request this API takes: `detail` says what to change.",
                codes=("bad_request",),
            ),
            409: Reply(
                "This `request_id` started an operation with another action, filter or dry_run.",
                codes=("request_id_reused",),
            ),
            413: Reply("The body is over 64 KiB.", codes=("body_too_large",)),
        },
        right=Right.WRITE,
        request=models.OperationRequest,
        request_description="What to do (`action`) to which events (`filter`).",
    ),
    ApiRoute(
        "GET",
        "/api/operations/{id}",
        "getOperation",
        "operation_detail",
        "One bulk operation: status and progress",
        "operations",
        {200: Reply("The operation.", models.Operation), 404: NOT_FOUND},
        (OPERATION_ID,),
    ),
    ApiRoute(
        "POST",
        "/api/operations/{id}/cancel",
        "cancelOperation",
        "operation_cancel",
        "Stop a bulk operation; what it did stays done",
        "operations",
        {
            200: Reply(
                "Stopped (`cancelled`): `progress` and `error.message` say how far it got.",
                models.Operation,
            ),
            202: Reply(
                "Asked: its runner stops at its next batch; poll until `done`.",
                models.Operation,
                links=("getOperation",),
            ),
            404: NOT_FOUND,
            409: Reply("The operation already succeeded or failed.", codes=("done",)),
        },
        (OPERATION_ID,),
        right=Right.WRITE,
    ),
    ApiRoute(
        "GET",
        "/api/alerts",
        "listAlerts",
        "alerts_index",
        "Alerts: conditions that need a person, newest first",
        "alerts",
        {200: Reply("The alerts, by when they were last found.", AlertList), 400: BAD_REQUEST},
        (
            Param(
                "status",
                "query",
                {"type": "string", "enum": list(STATUS_FILTERS), "default": "live"},
                "`live`: open or acknowledged (not resolved yet); or one status.",
                required=False,
            ),
            _text(
                "kind",
                "Only this kind: `dead`, `breaker_open`, `coverage_hole`, "
                "`registration_drift`, `ack_violation`, `reconcile_failing`, `prune_behind`, "
                "`rejections`. Empty: any.",
            ),
            _text("source", "Only this source's. Empty: any."),
            Param(
                "limit",
                "query",
                {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT, "default": ALERT_LIMIT},
                "How many alerts.",
                required=False,
            ),
        ),
    ),
    ApiRoute(
        "GET",
        "/api/rejected",
        "listRejected",
        "rejected_index",
        "Rejected requests on record, newest first (names and safe inputs; never a body)",
        "rejected",
        {200: Reply("The rejected requests, newest first.", RejectedList), 400: BAD_REQUEST},
        (
            _text("source", "Only this source's. Empty: any."),
            _text(
                "reason",
                "Only this reason (as hookd_webhook_rejections_total labels it, e.g. "
                "`bad_signature`). Empty: any.",
            ),
            _limit("How many rejected requests."),
        ),
    ),
    ApiRoute(
        "GET",
        "/api/alerts/{id}",
        "getAlert",
        "alert_detail",
        "One alert",
        "alerts",
        {200: Reply("The alert.", Alert), 404: NOT_FOUND},
        (ALERT_ID,),
    ),
    ApiRoute(
        "POST",
        "/api/alerts/{id}:ack",
        "acknowledgeAlert",
        "alert_ack",
        "Acknowledge an open alert: somebody is on it, no more reminders",
        "alerts",
        {
            200: Reply(
                "The alert, `acknowledged`, with who (`api token:admin`) and when. It "
                "resolves by itself when its condition clears, or by hand.",
                Alert,
            ),
            404: NOT_FOUND,
            409: Reply(
                "The alert is not open: acknowledged already, or resolved.",
                codes=("not_open",),
            ),
        },
        (ALERT_ID,),
        right=Right.WRITE,
    ),
    ApiRoute(
        "POST",
        "/api/alerts/{id}:resolve",
        "resolveAlert",
        "alert_resolve",
        "Resolve an alert by hand: the channels that heard of it are told",
        "alerts",
        {
            200: Reply(
                "The alert, `resolved`, with who (`api token:admin`) and when. If its "
                "condition still holds, the next evaluation opens a new alert.",
                Alert,
            ),
            404: NOT_FOUND,
            409: Reply("The alert is resolved already.", codes=("resolved",)),
        },
        (ALERT_ID,),
        right=Right.WRITE,
    ),
    ApiRoute(
        "GET",
        "/api/openapi.json",
        "getOpenApi",
        "openapi_document",
        "This document",
        "meta",
        {200: Reply("The OpenAPI document.", models.OpenApiDocument)},
    ),
)
