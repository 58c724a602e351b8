"""SQLModel tables. Constraint and index names are fixed here and in the
migrations, because errors are translated by constraint name."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.types import TypeDecorator
from sqlmodel import Field, SQLModel

from store.status import RUNNABLE_STATUSES, EventOrigin, EventStatus, sql_in

UQ_EVENTS_SOURCE_KEY = "uq_events_source_dedupe_key"

# Plain strings, in the schema's order, for what lists or checks them (the API's
# filters, the OpenAPI enums, the admin UI's menus).
STATUSES: tuple[str, ...] = tuple(s.value for s in EventStatus)
ORIGINS: tuple[str, ...] = tuple(o.value for o in EventOrigin)


class UTCDateTime(TypeDecorator[datetime]):
    """Timezone-aware UTC datetimes on both databases (SQLite keeps no zone)."""

    impl = sa.DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: sa.Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to a UTC column")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: object, dialect: sa.Dialect) -> datetime | None:
        if value is None:
            return None
        assert isinstance(value, datetime)
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def _utc(nullable: bool = False) -> Any:
    # Any, as sqlmodel.Field returns: the class attribute is annotated datetime.
    return Field(sa_column=sa.Column(UTCDateTime(), nullable=nullable))


class Event(SQLModel, table=True):
    __tablename__ = "events"
    __table_args__ = (
        sa.UniqueConstraint("source", "dedupe_key", name=UQ_EVENTS_SOURCE_KEY),
        sa.Index("ix_events_due", "status", "next_attempt_at"),
        sa.Index("ix_events_source_id", "source", "id"),
        sa.Index("ix_events_lease", "status", "lease_expires_at"),
        # Claims read due events in due order from here and stop after a batch.
        sa.Index(
            "ix_events_runnable",
            "next_attempt_at",
            postgresql_where=sa.text(sql_in("status", RUNNABLE_STATUSES)),
            sqlite_where=sa.text(sql_in("status", RUNNABLE_STATUSES)),
        ),
    )

    id: str = Field(primary_key=True, max_length=26)
    source: str = Field(max_length=64)
    provider: str = Field(max_length=16)
    dedupe_key: str = Field(max_length=255)
    type: str | None = Field(default=None, max_length=255)
    origin: str = Field(max_length=16)
    received_at: datetime = _utc()
    occurred_at: datetime | None = _utc(nullable=True)
    verified_with: str = Field(max_length=128)
    headers: dict[str, str] = Field(sa_column=sa.Column(sa.JSON(), nullable=False))
    body: bytes | None = Field(sa_column=sa.Column(sa.LargeBinary(), nullable=True))
    body_encrypted: bool = Field(default=False)
    # Typed str, not EventStatus: an enum annotation would make the column an ENUM.
    status: str = Field(default=EventStatus.PENDING.value, max_length=16)
    attempts: int = Field(default=0)
    next_attempt_at: datetime = _utc()
    lease_owner: str | None = Field(default=None, max_length=64)
    lease_expires_at: datetime | None = _utc(nullable=True)
    # The last failed attempt: a one-line summary, and apart the handler that
    # raised (None when processing failed outside the handlers) and the type.
    last_error: str | None = Field(default=None, sa_type=sa.Text)
    last_error_handler: str | None = Field(default=None, max_length=255)
    last_error_type: str | None = Field(default=None, max_length=128)
    processed_at: datetime | None = _utc(nullable=True)
    created_at: datetime = _utc()
    updated_at: datetime = _utc()


EVENTS: sa.Table = Event.__table__  # type: ignore[attr-defined]


class HandlerRun(SQLModel, table=True):
    """The ledger: a handler that finished for an event is never run for it again."""

    __tablename__ = "handler_runs"

    event_id: str = Field(
        sa_column=sa.Column(
            sa.String(26), sa.ForeignKey("events.id", ondelete="CASCADE"), primary_key=True
        )
    )
    handler: str = Field(primary_key=True, max_length=255)
    finished_at: datetime = _utc()


HANDLER_RUNS: sa.Table = HandlerRun.__table__  # type: ignore[attr-defined]


class ReconcileState(SQLModel, table=True):
    """Per source: the cursor, the run lease, the schedule and the disable switch."""

    __tablename__ = "reconcile_state"

    source: str = Field(primary_key=True, max_length=64)
    # Watermark: every item the provider lists up to this time has been checked
    # and repaired (unix seconds). Only moved after those repairs committed.
    cursor: float | None = Field(default=None)
    lease_owner: str | None = Field(default=None, max_length=64)
    lease_expires_at: datetime | None = _utc(nullable=True)
    disabled: bool = Field(default=False)
    disabled_reason: str | None = Field(default=None, sa_type=sa.Text)
    auth_failures: int = Field(default=0)
    error_count: int = Field(default=0)
    interval_s: float | None = Field(default=None)
    next_run_at: datetime | None = _utc(nullable=True)
    last_run_id: str | None = Field(default=None, max_length=26)
    meta: dict[str, str] = Field(
        default_factory=dict, sa_column=sa.Column(sa.JSON(), nullable=False)
    )
    updated_at: datetime = _utc()


class ReconcileRun(SQLModel, table=True):
    __tablename__ = "reconcile_runs"
    __table_args__ = (sa.Index("ix_reconcile_runs_source_id", "source", "id"),)

    id: str = Field(primary_key=True, max_length=26)
    source: str = Field(max_length=64)
    status: str = Field(max_length=16)  # a store.status.RunStatus
    trigger: str = Field(max_length=16)  # a store.status.RunTrigger
    dry_run: bool = Field(default=False)
    started_at: datetime = _utc()
    finished_at: datetime | None = _utc(nullable=True)
    items_checked: int = Field(default=0)
    items_missing: int = Field(default=0)
    items_repaired: int = Field(default=0)
    pages: int = Field(default=0)
    api_calls: int = Field(default=0)
    rate_limited: int = Field(default=0)
    cursor_before: float | None = Field(default=None)
    cursor_after: float | None = Field(default=None)
    error: str | None = Field(default=None, sa_type=sa.Text)


RECONCILE_STATE: sa.Table = ReconcileState.__table__  # type: ignore[attr-defined]
RECONCILE_RUNS: sa.Table = ReconcileRun.__table__  # type: ignore[attr-defined]
