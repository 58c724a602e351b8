"""The resources hookd.ops answers with, as pydantic models: written once, for the
operations API (which serialises them: ``Resource.answer()``), the admin UI and the
command line (which render the same values).

``hookd.web.openapi`` generates ``components.schemas`` from them; every model forbids
extra keys, and ``tests/integration/test_openapi_schemas.py`` validates real answers
against those schemas. A class docstring is the schema's description, read by the
API's clients.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, WithJsonSchema
from pydantic.config import JsonDict

from hookd.providers import PROVIDERS
from store.status import (
    EventOrigin,
    EventStatus,
    OperationAction,
    OperationStatus,
    RunStatus,
    RunTrigger,
)

# 26 characters of Crockford's base32: a ULID, as every id hookd makes is.
ULID_CHARS = "[0-9A-HJKMNP-TV-Z]{26}"
ULID = f"^{ULID_CHARS}$"

Ulid = Annotated[str, StringConstraints(pattern=ULID)]


def resource_name(collection: str) -> StringConstraints:
    """``<collection>/<ULID>``: the ``name`` of a resource shaped like a long-running
    operation (``events/…``, ``operations/…``)."""
    return StringConstraints(pattern=f"^{collection}/{ULID_CHARS}$")


Count = Annotated[int, Field(ge=0)]
# A sum of seconds: 0 (a whole number) when there is nothing to add up, kept as it is.
Seconds = Annotated[
    int | float,
    Field(ge=0),
    WithJsonSchema({"minimum": 0, "type": "number"}, mode="serialization"),
]


def _provider_names(schema: JsonDict) -> None:
    # Read when the document is generated, so that it lists the registry as it is then.
    schema["enum"] = list(PROVIDERS)


ProviderName = Annotated[str, Field(json_schema_extra=_provider_names)]


class Resource(BaseModel):
    # Exactly these keys: a new one must be described here first.
    model_config = ConfigDict(extra="forbid")

    def answer(self) -> dict[str, object]:
        """The JSON object of this resource, as the API answers it and ``--json`` prints
        it: field order, times in ISO 8601 (``Z`` for UTC), an optional key left out
        unless it was given (``Error.detail``, a coverage interval's own keys)."""
        return self.model_dump(mode="json", by_alias=True, exclude_unset=True)


class Error(Resource):
    """What went wrong."""

    error: str = Field(description="A stable, machine-readable code.")
    # Left out of the body when there is nothing to say, hence the empty default.
    detail: str = Field(default="", description="What to change, for a person.")


class EventError(Resource):
    """The last failed attempt: why a retrying event is retrying, or why a dead one gave up."""

    message: str = Field(description="One line: the handler, the exception type and its message.")
    handler: str | None = Field(
        description="The handler that raised; null when processing failed outside the "
        "handlers (e.g. a body no configured key decrypts)."
    )
    type: str | None = Field(description="The exception's type name, e.g. `ValueError`.")


class Event(Resource):
    """One stored event, shaped like a long-running operation."""

    name: Annotated[str, resource_name("events")]
    id: Ulid
    source: str
    provider: ProviderName
    type: str | None
    dedupe_key: str
    origin: EventOrigin
    status: EventStatus
    done: bool = Field(description="True once `status` is `processed`, `dead` or `superseded`.")
    attempts: Count
    received_at: datetime
    occurred_at: datetime | None
    processed_at: datetime | None
    verified_with: str = Field(description="How the signature was verified at receipt.")
    object_key: str | None = Field(
        description="The object the event is about, read from its body by the source's "
        "`[sources.order]` key; null when the source has none or the event names no object."
    )
    object_version: float | None = Field(
        description="The event's version of its object (the provider's updated-at in unix "
        "seconds, or its version number); events of an object run in this order."
    )
    payload_hash: str | None = Field(
        description="SHA-256 of the body as received (hex), on sources with `[sources.order]`."
    )
    error: EventError | None
    poll_after_seconds: Annotated[int, Field(ge=1)] | None = Field(
        description="While not done: when to look again. Null once done."
    )


class StreamedEvent(Resource):
    """One event of the event stream (`GET /api/events:stream`): the `data:` line of a
    server-sent event whose `id:` is the event's id. The provider's original headers and
    body, so that a local app's own signature check passes with the provider's secret."""

    id: Ulid
    source: str
    provider: ProviderName
    type: str | None
    received_at: datetime
    headers: dict[str, str] = Field(
        description="The request's headers as stored at receipt (the sender's, e.g. "
        "`content-type`, `user-agent`; never its signature, which is checked and not kept) "
        "and, when `signed_now`, the provider's signature headers made now."
    )
    signed_now: bool = Field(
        description="True: `headers` carry a signature made now, as the provider signs, with "
        "the source's first configured secret, so an app that checks the provider's "
        "signature with that secret accepts the request. False: hookd cannot sign for this "
        "provider or source (no signer, a public key, the source gone)."
    )
    body: str | None = Field(
        description="The request's body as received (decrypted), in standard base64; null "
        "when it is gone (`body_missing` says why)."
    )
    body_missing: Literal["pruned", "undecryptable"] | None = Field(
        description="`pruned`: the retention policy removed the body; `undecryptable`: no "
        "key in `HOOKD_ENCRYPTION_KEYS` opens it. Null when `body` is there."
    )


class WatchedEvent(Event):
    """An event of a watch list (stuck, many attempts; the admin UI and the command line):
    whose claim it is (``host:pid:…``), until when."""

    lease_owner: str | None
    lease_expires_at: datetime | None


class HistoryAttempt(Resource):
    """One processing attempt: a claim of the event and its handlers' run."""

    kind: Literal["attempt"]
    at: datetime = Field(description="When the attempt started (found, for `abandoned`).")
    finished_at: datetime | None = Field(description="When its outcome was recorded.")
    attempt: Count = Field(description="Its number: the event's `attempts` after the claim.")
    worker: str | None = Field(description="The worker that made it; null when not known.")
    outcome: str = Field(
        description="`processed`, `retry` or `dead` (what it left the event in); `released` "
        "(cut short by a shutdown and given back), `lease_lost` (it ran, but its claim had "
        "been taken over) or `abandoned` (its worker stopped: found by the takeover). A short "
        "word: new processing steps add their own."
    )
    handler: str | None = Field(description="The handler that raised; null otherwise.")
    error: str | None = Field(description="One line: the failure, as `error.message` said it.")
    error_type: str | None = Field(description="The exception's type name.")
    duration_s: float | None = Field(description="How long the handlers ran, in seconds.")


class HistoryReplay(Resource):
    """A replay: the event made pending again, its attempts reset to 0."""

    kind: Literal["replay"]
    at: datetime
    attempts_reset: Count = Field(description="The attempts it had before the replay.")
    status_before: EventStatus = Field(description="The status the replay found.")
    via: str = Field(description="How it was asked for: `cli`, `api`, `admin`, or an operation.")
    by: str | None = Field(
        description="With what, when known: `token:admin`, `session:admin`, `user:NAME` (the "
        "OS user of the command line)."
    )


HistoryEntry = HistoryAttempt | HistoryReplay


class EventDetail(Event):
    """One stored event, with what happened to it."""

    history: list[Annotated[HistoryEntry, Field(discriminator="kind")]] = Field(
        description="Every processing attempt and replay, oldest first. A replay keeps the "
        "event's `origin` (how it first arrived) and resets `attempts` and `error`: "
        "what they said before is here."
    )


class EventPage(Resource):
    """One page of events, newest first."""

    events: list[Event]
    next_cursor: Ulid | None = Field(
        description="Pass as `cursor` for the next page; null on the last one."
    )


class WatchPage(Resource):
    """One page of a watch list (stuck, many attempts), newest first."""

    events: list[WatchedEvent]
    next_cursor: Ulid | None


class ReconcileRun(Resource):
    """One reconciliation run against a provider's API."""

    name: Annotated[str, resource_name("reconcile-runs")]
    id: Ulid
    source: str
    status: RunStatus
    done: bool = Field(description="True once `status` is `succeeded`, `failed` or `lease_held`.")
    trigger: RunTrigger
    dry_run: bool
    started_at: datetime
    finished_at: datetime | None
    items_checked: Count
    items_missing: Count
    items_repaired: Count
    items_late: Count = Field(
        description="Events this run stored whose webhook arrived afterwards (late "
        "deliveries, counted as they come)."
    )
    pages: Count
    api_calls: Count
    rate_limited: Count
    cursor_before: float | None = Field(description="Watermark before the run (unix seconds).")
    cursor_after: float | None = Field(description="Watermark after the run (unix seconds).")
    error: str | None
    ack_violations: Count = Field(
        description="Deliveries the provider says hookd answered with a 2xx whose event "
        "was not stored, first found by this run (GitHub, GitLab, Paddle)."
    )
    registration: RunRegistration | None = Field(
        description="The run's check of the provider's registration of the endpoint; "
        "null when it made none."
    )


RegistrationState = Literal["ok", "drift", "could_not_check"]
REGISTRATION_STATE = (
    "`ok`: as the source expects; `drift`: it differs (`problems` say how); "
    "`could_not_check`: the registration could not be read (the API unreachable, the "
    "token refused; `reason` says why), so nothing is known of it."
)


class RunRegistration(Resource):
    """A registration check made by a run."""

    ok: bool | None = Field(
        description="The registration is as the source expects; null when it could not be read."
    )
    state: RegistrationState = Field(description=REGISTRATION_STATE)
    reason: str | None = Field(description="Why it could not be read (`could_not_check`).")
    problems: list[str] = Field(description="How it differs, one sentence each.")


class ReconcileRunList(Resource):
    """Reconcile runs, newest first."""

    runs: list[ReconcileRun]


class SourceReconcile(Resource):
    """Reconciliation state of a source that has a `[sources.reconcile]` table."""

    state: Literal["active", "disabled"]
    reason: str | None = Field(description="Why it was disabled.")
    cursor: float | None = Field(description="Watermark (unix seconds).")
    interval_s: float | None
    next_run_at: datetime | None
    last_run: ReconcileRun | None
    disabled_at: datetime | None = Field(description="When it was disabled (null: active).")
    disabled_by: str | None = Field(
        description="Who disabled it: `hookd auth-failures` (stopped itself), `cli user:NAME`, "
        "`api token:admin`, `admin session:admin`."
    )
    registration: SourceRegistration | None = Field(
        description="The last check of the provider's registration of the endpoint (each "
        "run, `hookd sources check`); null before the first, and where the provider's API "
        "does not show it."
    )
    ack_violations: Count = Field(
        description="Deliveries the provider says hookd answered with a 2xx whose event "
        "was not stored, ever found (`hookd_ack_violations_total`)."
    )


class SourceRegistration(Resource):
    """The provider's registration of a source's webhook endpoint, as last checked."""

    ok: bool | None = Field(description="As the source expects; null when it could not be read.")
    state: RegistrationState = Field(description=REGISTRATION_STATE)
    reason: str | None = Field(description="Why it could not be read (`could_not_check`).")
    checked_at: datetime = Field(description="When it was last checked, or tried.")
    problems: list[str] = Field(description="How it differs, one sentence each.")
    registered: dict[str, object] = Field(
        description="The provider's fields as read: GitHub `url`, `active`, `events`, "
        "`content_type`, `last_response`; Stripe `id`, `url`, `status`, `enabled_events`, "
        "`api_version`."
    )


class Source(Resource):
    """A configured source."""

    name: str
    provider: ProviderName
    reconcile: SourceReconcile | None = Field(description="Null when the source is not reconciled.")
    pending: Count = Field(description="Events pending, retrying or processing.")
    dead: Count
    paused: bool = Field(
        description="True while its processing is paused: events are stored and "
        "acknowledged, not processed."
    )
    pause: PauseSwitch | None = Field(description="The last pause or resume; null: never.")
    destinations: list[Destination] = Field(
        description="Its destinations (`[sources.forward]` as `forward`), in file order."
    )


class PauseSwitch(Resource):
    """The last time a source or destination was paused or resumed."""

    paused: bool = Field(description="True: paused then; false: resumed.")
    by: str = Field(description="Who: `api token:admin`, `admin session:admin`, `cli user:NAME`.")
    at: datetime
    reason: str | None = Field(description="Why it was paused, as given.")


BreakerStateName = Literal["closed", "half_open", "open", "disabled"]


class Breaker(Resource):
    """A destination's circuit breaker, as every process sees it."""

    state: BreakerStateName = Field(
        description="`open`: deliveries wait for the cool-down (no attempt used); "
        "`half_open`: one delivery probes; `disabled`: `breaker.enabled = false`."
    )
    failures: Count = Field(description="Failed deliveries in a row.")
    opened_at: datetime | None
    retry_at: datetime | None = Field(
        description="Open: when a delivery may probe. Half-open: when the probe's claim ends."
    )
    reason: str | None = Field(description="Why it last opened.")


class Destination(Resource):
    """A destination of a source: where its events are delivered, signed."""

    name: str
    source: str
    url: str = Field(description="Where it posts, without user info or query.")
    paused: bool
    pause: PauseSwitch | None = Field(description="The last pause or resume; null: never.")
    breaker: Breaker
    waiting: Count = Field(
        description="The source's events not done yet that it has neither delivered nor skipped."
    )
    rate_per_s: float | None
    concurrency: int | None
    max_attempts: Annotated[int, Field(ge=1)]


class DestinationList(Resource):
    """Destinations, in configuration order."""

    destinations: list[Destination]


class SourceList(Resource):
    """Every configured source, in configuration order."""

    sources: list[Source]


class OperationFilter(Resource):
    """Which events a bulk operation goes over: every key given must hold; a key left
    out (or null) selects every event. An operation takes only events stored before it
    was asked for."""

    source: str | None = Field(default=None, description="Events stored under this source.")
    destination: str | None = Field(
        default=None,
        description="`NAME` or `SOURCE/NAME`: events of the sources that have this destination "
        "(`forward` is `[sources.forward]`); a replay then runs only that destination again.",
    )
    status: EventStatus | None = Field(
        default=None, description="Cancel takes `pending` or `retrying` (both when left out)."
    )
    type: str | None = Field(default=None, description="A glob over the event type (`*`, `?`).")
    origin: EventOrigin | None = None
    since: datetime | float | None = Field(
        default=None,
        description="Received at or after: ISO 8601 (UTC unless it says otherwise) or unix "
        "seconds. Shown as ISO 8601.",
    )
    until: datetime | float | None = Field(
        default=None, description="Received before; as `since`, and later than it."
    )
    object: str | None = Field(
        default=None,
        description="One object's events: the key per-object ordering (`[sources.order]`) "
        "stored with each.",
    )


class OperationRequest(Resource):
    """A bulk operation to start."""

    action: OperationAction = Field(
        description="`replay`: run the events' handlers again (as a single replay does); "
        "`cancel`: make pending and retrying events `dead`, error `cancelled by operation ID`."
    )
    filter: OperationFilter
    request_id: Annotated[str, StringConstraints(min_length=1, max_length=255)] | None = Field(
        default=None,
        description="Idempotency key: a request with one already used answers that operation "
        "(409 if its action, filter or dry_run differ). Left out: every request is new.",
    )
    dry_run: bool = Field(
        default=False, description="Count the events, change nothing: answered done at once."
    )


class OperationProgress(Resource):
    """How far an operation got."""

    total: Count = Field(description="The estimate: events the filter selected when asked for.")
    done: Count = Field(description="Events gone over so far (changed or skipped).")
    changed: Count = Field(description="Replayed, or cancelled.")
    skipped: Count = Field(
        description="Left as they were: being processed at that moment, their body removed "
        "by retention, or (cancel) no longer pending or retrying."
    )


OperationErrorCode = Literal["cancelled", "failed"]
Trigger = Literal["api", "admin", "cli"]


class OperationError(Resource):
    """Why an operation ended without finishing: cancelled by hand, or failed."""

    code: OperationErrorCode
    message: str = Field(description="For a cancelled one: how far it got.")


class Operation(Resource):
    """A bulk operation, shaped like a long-running operation: poll it until `done`."""

    name: Annotated[str, resource_name("operations")]
    id: Ulid
    request_id: str
    action: OperationAction
    trigger: Trigger = Field(description="Who asked for it.")
    dry_run: bool
    filter: OperationFilter
    status: OperationStatus
    done: bool = Field(description="True once `status` is `succeeded`, `failed` or `cancelled`.")
    progress: OperationProgress
    error: OperationError | None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    cancel_requested_at: datetime | None
    poll_after_seconds: Annotated[int, Field(ge=1)] | None = Field(
        description="While not done: when to look again. Null once done."
    )


class OperationList(Resource):
    """Bulk operations, newest first."""

    operations: list[Operation]
    next_cursor: Ulid | None = Field(
        description="Pass as `cursor` for the next page; null on the last one."
    )


class OpenApiDocument(BaseModel):
    """This document."""

    # Only its outline: the document describes itself no further.
    model_config = ConfigDict(extra="allow")

    openapi: str
    info: Any
    paths: Any


# Every body the document names; the schemas they refer to (enums, nested bodies) follow.
CoverageKind = Literal[
    "failed",
    "unrecoverable",
    "not_checked",
    "beyond_retention",
    "settling",
    "pending",
    "not_recorded",
    "silent",
]


class CoverageReason(Resource):
    """Why a piece of time is not covered."""

    kind: CoverageKind = Field(
        description="`failed`: a run failed on it (a later run checks it again); "
        "`unrecoverable`: beyond the provider's retention when a run came to it; "
        "`not_checked`: reconciliation was disabled; `beyond_retention`: older than the "
        "provider keeps, no run can check it any more; `settling`: younger than the "
        "source's settle_s, not judged yet; `pending`: after the last checked moment, the "
        "next run's; `not_recorded`: no record (no run has covered it yet, or from before "
        "the ledger's records); `silent`: fewer webhooks than the source's "
        "[sources.expect] expects were received in it."
    )
    detail: str | None
    run_id: Ulid | None = Field(description="The run that recorded it, when one did.")


class CoverageInterval(Resource):
    """A piece of the asked range: checked, or a hole. Adjacent pieces with the same
    state (and, for holes, the same reasons) are merged."""

    model_config = ConfigDict(extra="forbid", validate_by_name=True)

    from_: datetime = Field(validation_alias="from", serialization_alias="from")
    to: datetime
    seconds: Annotated[float, Field(ge=0)]
    state: Literal["checked", "hole"]
    runs: Count | None = Field(default=None, description="Checked: how many runs checked it.")
    repaired: Count | None = Field(
        default=None, description="Checked: events those runs found missing and repaired."
    )
    reasons: list[CoverageReason] | None = Field(
        default=None, description="A hole: every reason that applies, most telling first."
    )


class Coverage(Resource):
    """What reconciliation has checked of a source over a range of provider time
    (`[since, until)`), from its coverage ledger."""

    source: str
    since: datetime
    until: datetime
    covered: bool = Field(description="True when the whole range was checked: no hole.")
    checked_seconds: Seconds
    unchecked_seconds: Seconds
    settle_s: Annotated[float, Field(ge=0)] = Field(
        description="The source's settle window: what is younger is not judged yet."
    )
    retention_s: Annotated[float, Field(gt=0)] = Field(
        description="How far back the provider's list API reaches."
    )
    intervals: list[CoverageInterval]


class SourceObject(Resource):
    """One object of a source with `[sources.order]`: its latest known state, from the
    newest of its events processed (null fields until one is), and its events' counts."""

    name: str = Field(description="`sources/NAME/objects/KEY`.")
    source: str
    key: str = Field(description="The object key, as events' `object_key` holds it.")
    latest_type: str | None = Field(description="The type of the newest event processed.")
    version: float | None = Field(
        description="The provider's updated-at (unix seconds) or version of the newest event "
        "processed: an event older than this is superseded."
    )
    last_event_id: Ulid | None = Field(description="The newest event processed.")
    payload_hash: str | None = Field(description="SHA-256 of that event's body (hex).")
    updated_at: datetime | None = Field(description="When that event was processed.")
    events: dict[EventStatus, Count] = Field(
        description="How many of the object's stored events are in each status; list them "
        "with `GET /api/events?source=NAME&object=KEY`."
    )
