"""Typed rows: what the store's queries return.

Each is a ``NamedTuple`` whose fields are its table's columns, in the table's
order and under the columns' names, so a row reads like the SQLAlchemy row it
replaces (``row.status``, ``row[0]``, unpacking, equality with a tuple) and is
built with ``_make``: one tuple allocation per row, nothing per column. The
queries select exactly these columns (``EVENT_COLUMNS`` …), so a field can never be fed
another column's value.

Status and origin fields hold the strings the database returned; they compare
equal to the members of ``store.status`` (``row.status == EventStatus.DEAD``).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, NamedTuple, TypedDict

import sqlalchemy as sa

from store.models import EVENTS, RECONCILE_RUNS, RECONCILE_STATE, SOURCE_OBJECTS


class EventRow(NamedTuple):
    id: str
    source: str
    provider: str
    dedupe_key: str
    type: str | None
    origin: str  # an EventOrigin's value
    received_at: datetime
    occurred_at: datetime | None
    verified_with: str
    headers: dict[str, str]
    body: bytes | None  # None too when the query left the body out
    body_encrypted: bool
    status: str  # an EventStatus's value
    attempts: int
    next_attempt_at: datetime
    lease_owner: str | None
    lease_expires_at: datetime | None
    last_error: str | None
    last_error_handler: str | None
    last_error_type: str | None
    processed_at: datetime | None
    created_at: datetime
    updated_at: datetime
    object_key: str | None  # [sources.order]: the object, its version, the body's digest
    object_version: float | None
    payload_hash: str | None
    traceparent: str | None  # the receive's trace context, when tracing was on


class RegistrationRecord(TypedDict):
    """``reconcile_state.registration``: the source's last registration check, as
    ``store.audit.record_registration`` writes it."""

    ok: bool | None
    state: str  # ok, drift or could_not_check
    reason: str | None  # why it could not be read
    problems: list[str]
    registered: dict[str, object]  # the provider's fields as read (its JSON)


class SourceStateRow(NamedTuple):
    """``reconcile_state``: one source's cursor, run lease, schedule and switch."""

    source: str
    cursor: float | None
    lease_owner: str | None
    lease_expires_at: datetime | None
    disabled: bool
    disabled_reason: str | None
    auth_failures: int
    error_count: int
    interval_s: float | None
    next_run_at: datetime | None
    last_run_id: str | None
    meta: dict[str, str]
    updated_at: datetime
    disabled_at: datetime | None
    disabled_by: str | None
    registration_ok: bool | None
    registration_checked_at: datetime | None
    registration: RegistrationRecord | None


class RunRow(NamedTuple):
    """``reconcile_runs``: one reconciliation run's record."""

    id: str
    source: str
    status: str  # a RunStatus's value
    trigger: str  # a RunTrigger's value
    dry_run: bool
    started_at: datetime
    finished_at: datetime | None
    items_checked: int
    items_missing: int
    items_repaired: int
    pages: int
    api_calls: int
    rate_limited: int
    cursor_before: float | None
    cursor_after: float | None
    error: str | None
    items_late: int
    ack_violations: int
    registration_ok: bool | None
    registration_problems: list[str] | None


class RunTotalsRow(NamedTuple):
    """Runs of one source, status and dry-run flag: their count and summed counters."""

    source: str
    status: str  # a RunStatus's value
    dry_run: bool
    runs: int
    missing: int
    rate_limited: int
    late: int


# What the queries select: the tables' columns in the order of the rows' fields.
EVENT_COLUMNS = [EVENTS.c[name] for name in EventRow._fields]
# The same row without reading the body, which may be large: NULL in its place.
EVENT_COLUMNS_NO_BODY: list[sa.ColumnElement[Any]] = [
    sa.null().label("body") if c.key == "body" else c for c in EVENT_COLUMNS
]
SOURCE_STATE_COLUMNS = [RECONCILE_STATE.c[name] for name in SourceStateRow._fields]
RUN_COLUMNS = [RECONCILE_RUNS.c[name] for name in RunRow._fields]


class SourceObjectRow(NamedTuple):
    """``source_objects``: one object's latest known state ([sources.order])."""

    source: str
    object_key: str
    type: str | None
    version: float
    event_id: str
    payload_hash: str | None
    updated_at: datetime


SOURCE_OBJECT_COLUMNS = [SOURCE_OBJECTS.c[name] for name in SourceObjectRow._fields]
