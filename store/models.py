"""SQLModel tables. Constraint and index names are fixed here and in the
migrations, because errors are translated by constraint name."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.types import TypeDecorator
from sqlmodel import Field, SQLModel

from store.status import RUNNABLE_STATUSES, EventOrigin, EventStatus, sql_in

# The predicate of event_keys' two partial indexes: only tombstones (keys whose event
# row was pruned) are in them, so storing a new key never writes to either.
PRUNED = "pruned_at IS NOT NULL"

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
        # Not unique: event_keys decides what is new (see EventKey). For lookups only.
        sa.Index("ix_events_source_dedupe_key", "source", "dedupe_key"),
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
        # PostgreSQL: one partition per UTC day of the id (a ULID: its time first),
        # made and dropped by store.partitions; migration 0008.
        {"postgresql_partition_by": "RANGE (id)"},
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


class EventKey(SQLModel, table=True):
    """The global dedupe index and the tombstone in one row per (source, dedupe_key).

    Storing an event inserts its key here first (``ON CONFLICT DO NOTHING``): this
    primary key, not an index of ``events``, decides whether an event is new, so
    ``events`` can be pruned (and later partitioned) without forgetting a key. Once
    the event's row is pruned, ``final_status`` and ``pruned_at`` say how it ended;
    the key itself goes after the source's ``keep_keys_days``.
    """

    __tablename__ = "event_keys"
    __table_args__ = (
        # GET /api/events/{id} of a pruned event: its tombstone, by id.
        sa.Index(
            "ix_event_keys_pruned_event",
            "event_id",
            postgresql_where=sa.text(PRUNED),
            sqlite_where=sa.text(PRUNED),
        ),
        # Key expiry: a source's tombstones, oldest first.
        sa.Index(
            "ix_event_keys_pruned_received",
            "source",
            "received_at",
            postgresql_where=sa.text(PRUNED),
            sqlite_where=sa.text(PRUNED),
        ),
    )

    source: str = Field(primary_key=True, max_length=64)
    dedupe_key: str = Field(primary_key=True, max_length=255)
    event_id: str = Field(max_length=26)
    received_at: datetime = _utc()
    # How the event ended (a store.status.EventStatus), once its row is pruned.
    final_status: str | None = Field(default=None, max_length=16)
    pruned_at: datetime | None = _utc(nullable=True)


EVENT_KEYS: sa.Table = EventKey.__table__  # type: ignore[attr-defined]


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


class MaintenanceState(SQLModel, table=True):
    """Per maintenance task (``prune``): the lease that lets one process run it at a
    time, and when it last ran (what the schedule of every process reads)."""

    __tablename__ = "maintenance_state"

    task: str = Field(primary_key=True, max_length=32)
    lease_owner: str | None = Field(default=None, max_length=64)
    lease_expires_at: datetime | None = _utc(nullable=True)
    last_started_at: datetime | None = _utc(nullable=True)
    last_finished_at: datetime | None = _utc(nullable=True)
    updated_at: datetime = _utc()


class PruneTotal(SQLModel, table=True):
    """What prune removed, per source and kind (body, event, key, run), ever: the
    counter ``hookd_pruned_total``, kept in the database like the others."""

    __tablename__ = "prune_totals"

    source: str = Field(primary_key=True, max_length=64)
    what: str = Field(primary_key=True, max_length=8)
    count: int = Field(default=0, sa_type=sa.BigInteger)


class ReconcileRunTotal(SQLModel, table=True):
    """The counters of pruned reconcile runs, per source, status and dry-run flag, so
    that the counters read from ``reconcile_runs`` never go down when runs are pruned."""

    __tablename__ = "reconcile_run_totals"

    source: str = Field(primary_key=True, max_length=64)
    status: str = Field(primary_key=True, max_length=16)
    dry_run: bool = Field(primary_key=True)
    runs: int = Field(default=0, sa_type=sa.BigInteger)
    missing: int = Field(default=0, sa_type=sa.BigInteger)
    rate_limited: int = Field(default=0, sa_type=sa.BigInteger)


MAINTENANCE_STATE: sa.Table = MaintenanceState.__table__  # type: ignore[attr-defined]
PRUNE_TOTALS: sa.Table = PruneTotal.__table__  # type: ignore[attr-defined]
RECONCILE_RUN_TOTALS: sa.Table = ReconcileRunTotal.__table__  # type: ignore[attr-defined]
