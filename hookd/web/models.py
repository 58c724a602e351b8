"""The bodies the operations API answers with, as pydantic models.

They describe the JSON that ``store.events.event_resource``, ``store.reconcile.
run_resource``, ``reconcile.service.source_resources`` and ``hookd.web.api.problem``
already build as plain dicts; nothing serialises through them. ``hookd.web.openapi``
generates ``components.schemas`` from them, and ``tests/integration/test_openapi.py``
validates real answers against those schemas, so a key added to a dict and not here
(every model forbids extra keys) fails the tests.

A class docstring is the schema's description, read by the API's clients.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints
from pydantic.config import JsonDict

from hookd.providers import PROVIDERS
from store.status import EventOrigin, EventStatus, RunStatus, RunTrigger

ULID = "^[0-9A-HJKMNP-TV-Z]{26}$"

Ulid = Annotated[str, StringConstraints(pattern=ULID)]
Count = Annotated[int, Field(ge=0)]


def _provider_names(schema: JsonDict) -> None:
    # Read when the document is generated, so that it lists the registry as it is then.
    schema["enum"] = list(PROVIDERS)


ProviderName = Annotated[str, Field(json_schema_extra=_provider_names)]


class _Body(BaseModel):
    # The dicts hold exactly these keys: a new one must be described here first.
    model_config = ConfigDict(extra="forbid")


class Error(_Body):
    """What went wrong."""

    error: str = Field(description="A stable, machine-readable code.")
    # Left out of the body when there is nothing to say, hence the empty default.
    detail: str = Field(default="", description="What to change, for a person.")


class EventError(_Body):
    """The last failed attempt: why a retrying event is retrying, or why a dead one gave up."""

    message: str = Field(description="One line: the handler, the exception type and its message.")
    handler: str | None = Field(
        description="The handler that raised; null when processing failed outside the "
        "handlers (e.g. a body no configured key decrypts)."
    )
    type: str | None = Field(description="The exception's type name, e.g. `ValueError`.")


class Event(_Body):
    """One stored event, shaped like a long-running operation."""

    name: Annotated[str, StringConstraints(pattern="^events/[0-9A-HJKMNP-TV-Z]{26}$")]
    id: Ulid
    source: str
    provider: ProviderName
    type: str | None
    dedupe_key: str
    origin: EventOrigin
    status: EventStatus
    done: bool = Field(description="True once `status` is `processed` or `dead`.")
    attempts: Count
    received_at: datetime
    occurred_at: datetime | None
    processed_at: datetime | None
    verified_with: str = Field(description="How the signature was verified at receipt.")
    error: EventError | None
    poll_after_seconds: Annotated[int, Field(ge=1)] | None = Field(
        description="While not done: when to look again. Null once done."
    )


class EventPage(_Body):
    """One page of events, newest first."""

    events: list[Event]
    next_cursor: Ulid | None = Field(
        description="Pass as `cursor` for the next page; null on the last one."
    )


class ReconcileRun(_Body):
    """One reconciliation run against a provider's API."""

    name: Annotated[str, StringConstraints(pattern="^reconcile-runs/[0-9A-HJKMNP-TV-Z]{26}$")]
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
    pages: Count
    api_calls: Count
    rate_limited: Count
    cursor_before: float | None = Field(description="Watermark before the run (unix seconds).")
    cursor_after: float | None = Field(description="Watermark after the run (unix seconds).")
    error: str | None


class ReconcileRunList(_Body):
    """Reconcile runs, newest first."""

    runs: list[ReconcileRun]


class SourceReconcile(_Body):
    """Reconciliation state of a source that has a `[sources.reconcile]` table."""

    state: Literal["active", "disabled"]
    reason: str | None = Field(description="Why it was disabled.")
    cursor: float | None = Field(description="Watermark (unix seconds).")
    interval_s: float | None
    next_run_at: datetime | None
    last_run: ReconcileRun | None


class Source(_Body):
    """A configured source."""

    name: str
    provider: ProviderName
    reconcile: SourceReconcile | None = Field(description="Null when the source is not reconciled.")
    pending: Count = Field(description="Events pending, retrying or processing.")
    dead: Count


class SourceList(_Body):
    """Every configured source, in configuration order."""

    sources: list[Source]


class OpenApiDocument(BaseModel):
    """This document."""

    # Only its outline: the document describes itself no further.
    model_config = ConfigDict(extra="allow")

    openapi: str
    info: Any
    paths: Any


# Every body the document names; the schemas they refer to (enums, nested bodies) follow.
BODIES: tuple[type[BaseModel], ...] = (
    Error,
    Event,
    EventPage,
    ReconcileRun,
    ReconcileRunList,
    Source,
    SourceList,
    OpenApiDocument,
)
