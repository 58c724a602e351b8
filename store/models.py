"""SQLModel tables. Constraint and index names are fixed here and in the
migrations, because errors are translated by constraint name."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.types import TypeDecorator
from sqlmodel import Field, SQLModel

from store.status import RUNNABLE_STATUSES, EventOrigin, EventStatus, sql_in

# The predicate of event_keys' two partial indexes: only tombstones (keys whose event
# row was pruned) are in them, so storing a new key never writes to either.
PRUNED = "pruned_at IS NOT NULL"

# The predicate of ix_events_body: rows whose body retention has not cleared yet.
WITH_BODY = "body IS NOT NULL"

# [sources.order]: an event that names an object (``object_key``) is claimed through the
# object indexes, one at a time per object (store.delivery.objects); the others through
# ix_events_runnable, which holds none of them, so a backlog of one never slows the other.
UNORDERED = "object_key IS NULL"
ORDERED = "object_key IS NOT NULL"
RUNNABLE_UNORDERED = f"{sql_in('status', RUNNABLE_STATUSES)} AND {UNORDERED}"
RUNNABLE_ORDERED = f"{sql_in('status', RUNNABLE_STATUSES)} AND {ORDERED}"

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


def utc_binder(dialect: sa.Dialect) -> Callable[[datetime | None], Any]:
    """What a ``UTCDateTime`` column hands ``dialect``'s driver for a value: for the
    statements given to the driver as they are (``exec_driver_sql``), which skip
    SQLAlchemy's per-row parameter processing; each value is converted once."""
    process = UTCDateTime().dialect_impl(dialect).bind_processor(dialect)
    seen: dict[datetime, Any] = {}

    def bind(value: datetime | None) -> Any:
        if value is None:
            return None
        bound = seen.get(value)
        if bound is None:
            bound = seen[value] = process(value) if process is not None else value
        return bound

    return bind


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
        # Claims read each source's due events in due order from here and stop at its
        # room (events of no object; 0012 added the second term, 0016 the source).
        sa.Index(
            "ix_events_runnable",
            "source",
            "next_attempt_at",
            postgresql_where=sa.text(RUNNABLE_UNORDERED),
            sqlite_where=sa.text(RUNNABLE_UNORDERED),
        ),
        # The same for events of an object: where the object claim looks for heads.
        sa.Index(
            "ix_events_object_due",
            "next_attempt_at",
            postgresql_where=sa.text(RUNNABLE_ORDERED),
            sqlite_where=sa.text(RUNNABLE_ORDERED),
        ),
        # One object's events by status, then in version order: its head, whether one
        # is being processed, and its list (``?object=``, with or without the source).
        sa.Index(
            "ix_events_object",
            "object_key",
            "source",
            "status",
            "object_version",
            "id",
            postgresql_where=sa.text(ORDERED),
            sqlite_where=sa.text(ORDERED),
        ),
        # Prune's body step (migration 0015): only rows that still have a body, so it
        # walks what it has to clear, not every row cleared at earlier prunes.
        sa.Index(
            "ix_events_body",
            "source",
            "id",
            postgresql_where=sa.text(WITH_BODY),
            sqlite_where=sa.text(WITH_BODY),
        ),
        # PostgreSQL: one partition per UTC day of the id (a ULID: its time first),
        # made and dropped by store.retention.partitions; migration 0008.
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
    # [sources.order] (migration 0012): the object the event is about, its version
    # there (unix seconds for a time), and the SHA-256 of the body; null elsewhere.
    object_key: str | None = Field(default=None, max_length=255)
    object_version: float | None = Field(default=None)
    payload_hash: str | None = Field(default=None, max_length=64)
    # The W3C traceparent of the receive, when tracing was on (migration 0014): the
    # worker's processing joins that trace. Null otherwise.
    traceparent: str | None = Field(default=None, max_length=55)


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
    # Null: it ran and finished. "skipped": its filter did not select the event (a
    # store.status.LedgerOutcome), decided once and not evaluated again.
    outcome: str | None = Field(default=None, max_length=16)


HANDLER_RUNS: sa.Table = HandlerRun.__table__  # type: ignore[attr-defined]


class EventHistory(SQLModel, table=True):
    """What happened to an event, one row per processing attempt and per replay, in
    the order they happened (``id``). Written in the transaction that records the
    attempt's outcome or makes the replay (``store.claims.history``); deleted with its event.

    ``outcome`` is a short free word (no CHECK): what the attempt left the event in
    (``processed``, ``retry``, ``dead``) or why it ended otherwise (``released`` at a
    shutdown, ``lease_lost``, ``abandoned``); processing steps to come add their own.
    """

    __tablename__ = "event_history"
    __table_args__ = (
        # An event's history in order, and prune's deletes by a range of event ids.
        sa.Index("ix_event_history_event", "event_id", "id"),
    )

    id: int | None = Field(
        default=None,
        sa_column=sa.Column(
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            primary_key=True,
            autoincrement=True,
        ),
    )
    event_id: str = Field(
        sa_column=sa.Column(
            sa.String(26),
            sa.ForeignKey("events.id", ondelete="CASCADE", name="fk_event_history_event"),
            nullable=False,
        )
    )
    kind: str = Field(max_length=16)  # a store.claims.history.HistoryKind
    # An attempt: when it started and ended. A replay: when it was made.
    at: datetime = _utc()
    finished_at: datetime | None = _utc(nullable=True)
    # An attempt: its number (the event's attempts after the claim). A replay: the
    # attempts it reset to 0.
    attempt: int = Field(default=0)
    worker: str | None = Field(default=None, max_length=64)
    handler: str | None = Field(default=None, max_length=255)
    outcome: str | None = Field(default=None, max_length=32)
    error: str | None = Field(default=None, max_length=500)
    error_type: str | None = Field(default=None, max_length=128)
    duration_s: float | None = Field(default=None)
    # A replay: the status it found, how it was asked for (cli, api, admin, ...) and,
    # when known, with what (the token's scope, the OS user).
    status_before: str | None = Field(default=None, max_length=16)
    requested_via: str | None = Field(default=None, max_length=16)
    requested_by: str | None = Field(default=None, max_length=128)


EVENT_HISTORY: sa.Table = EventHistory.__table__  # type: ignore[attr-defined]


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
    # The reconcile run that stored the event (origin reconcile), and when its webhook
    # arrived after all (answered as a duplicate): a late delivery, counted once, on
    # that run (``reconcile_runs.items_late``).
    repaired_by: str | None = Field(default=None, max_length=26)
    late_at: datetime | None = _utc(nullable=True)


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
    # When and by whom reconciliation was switched off (``cli user:NAME``, ``api token:admin``,
    # ``admin session:admin``, ``hookd auth-failures``); cleared when it is enabled again.
    disabled_at: datetime | None = _utc(nullable=True)
    disabled_by: str | None = Field(default=None, max_length=64)
    # The last registration check (migration 0013): None before the first one, and
    # when the last one could not read the registration (its checked_at is set).
    registration_ok: bool | None = Field(default=None)
    registration_checked_at: datetime | None = _utc(nullable=True)
    # {"ok", "state": ok | drift | could_not_check, "reason": why it could not be read,
    # "problems": [...], "registered": {the provider's fields as read}} (store.reconcile.audit)
    registration: dict[str, object] | None = Field(
        default=None, sa_column=sa.Column(sa.JSON(), nullable=True)
    )


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
    # Events this run stored whose webhook arrived afterwards (migration 0009).
    items_late: int = Field(default=0, sa_column_kwargs={"server_default": "0"})
    # Deliveries the provider says hookd acknowledged (2xx) whose key the store did
    # not hold: newly found by this run (the ack_violations ledger counts each once).
    ack_violations: int = Field(default=0, sa_column_kwargs={"server_default": "0"})
    # The run's registration check: None when none was made. None with problems: it
    # could not read the registration, and the one problem says why (store.reconcile.audit).
    registration_ok: bool | None = Field(default=None)
    registration_problems: list[str] | None = Field(
        default=None, sa_column=sa.Column(sa.JSON(), nullable=True)
    )


class AckViolation(SQLModel, table=True):
    """A broken promise: a delivery the provider says hookd answered with a 2xx whose
    key the store did not hold when a reconciliation run looked. One row per key, so
    that the runs reading it again (their overlap) do not count it again; the counter
    ``hookd_ack_violations_total`` is their number."""

    __tablename__ = "ack_violations"

    source: str = Field(primary_key=True, max_length=64)
    dedupe_key: str = Field(primary_key=True, max_length=255)
    run_id: str = Field(max_length=26)  # the run that found it
    delivery: str | None = Field(default=None, max_length=64)  # the provider's delivery id
    status_code: int | None = Field(default=None)  # what the provider says hookd answered
    delivered_at: datetime | None = _utc(nullable=True)
    found_at: datetime = _utc()


ACK_VIOLATIONS: sa.Table = AckViolation.__table__  # type: ignore[attr-defined]
RECONCILE_STATE: sa.Table = ReconcileState.__table__  # type: ignore[attr-defined]
RECONCILE_RUNS: sa.Table = ReconcileRun.__table__  # type: ignore[attr-defined]


class ReconcileCoverage(SQLModel, table=True):
    """The coverage ledger: one row per time interval of a source and what became of
    it (a ``store.status.CoverageOutcome``): checked by a run (complete, or repaired
    ``repaired`` events), a run that failed on it, beyond the provider's retention when
    a run came to it, or not checked while the source was disabled. Times are the
    provider's (when it says an event happened), as the cursor's."""

    __tablename__ = "reconcile_coverage"
    __table_args__ = (sa.Index("ix_reconcile_coverage_source_start", "source", "start_at"),)

    id: str = Field(primary_key=True, max_length=26)
    source: str = Field(max_length=64)
    # The run that recorded it; None for what no run did (a disabled window).
    run_id: str | None = Field(default=None, max_length=26)
    start_at: datetime = _utc()
    end_at: datetime = _utc()
    outcome: str = Field(max_length=16)
    repaired: int = Field(default=0)
    reason: str | None = Field(default=None, sa_type=sa.Text)
    recorded_at: datetime = _utc()


RECONCILE_COVERAGE: sa.Table = ReconcileCoverage.__table__  # type: ignore[attr-defined]


class SourceWatch(SQLModel, table=True):
    """The silence watch of a source with ``[sources.expect]`` (``reconcile.silence``):
    how far its windows have been judged, and the silence it is in, if any. Every
    window is judged once, in the transaction that moves ``judged_until`` past it."""

    __tablename__ = "source_watch"

    source: str = Field(primary_key=True, max_length=64)
    # The window length the state was judged with: another one starts the watch afresh.
    window_s: int = Field()
    # When the watch began (its first window's start): nothing before is judged.
    started_at: datetime = _utc()
    # The end of the last window judged (or passed over, outside [sources.expect] hours).
    judged_until: datetime = _utc()
    # The start of the silence the source is in (None: it is not silent).
    silent_since: datetime | None = _utc(nullable=True)
    # The ledger row (reconcile_coverage) of the silence's last interval, extended while
    # the next judged window is silent too.
    silent_row: str | None = Field(default=None, max_length=26)
    updated_at: datetime = _utc()


SOURCE_WATCH: sa.Table = SourceWatch.__table__  # type: ignore[attr-defined]


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
    late: int = Field(default=0, sa_type=sa.BigInteger, sa_column_kwargs={"server_default": "0"})


MAINTENANCE_STATE: sa.Table = MaintenanceState.__table__  # type: ignore[attr-defined]
PRUNE_TOTALS: sa.Table = PruneTotal.__table__  # type: ignore[attr-defined]
RECONCILE_RUN_TOTALS: sa.Table = ReconcileRunTotal.__table__  # type: ignore[attr-defined]


class Pause(SQLModel, table=True):
    """A paused source (``destination`` empty) or destination, and who last switched it.

    A paused source's events are stored and acknowledged but not claimed; a paused
    destination's deliveries are put off without using attempts. Resuming keeps the
    row (``paused`` false) so that who resumed it, and when, stays known."""

    __tablename__ = "pauses"

    source: str = Field(primary_key=True, max_length=64)
    destination: str = Field(primary_key=True, max_length=64)
    paused: bool = Field(default=True)
    changed_by: str = Field(max_length=128)
    reason: str | None = Field(default=None, sa_type=sa.Text)
    changed_at: datetime = _utc()


class DestinationBreaker(SQLModel, table=True):
    """A destination's circuit breaker, shared by every process that delivers to it."""

    __tablename__ = "destination_breakers"

    source: str = Field(primary_key=True, max_length=64)
    destination: str = Field(primary_key=True, max_length=64)
    state: str = Field(max_length=16)  # a store.status.BreakerState
    # Failed deliveries in a row (any process); a success sets it back to 0.
    failures: int = Field(default=0)
    opened_at: datetime | None = _utc(nullable=True)
    # Open: when a delivery may probe. Half-open: when the probe's claim runs out.
    retry_at: datetime | None = _utc(nullable=True)
    probe_owner: str | None = Field(default=None, max_length=64)
    # Why it opened last (a reason code and the failure's type, never a body).
    reason: str | None = Field(default=None, max_length=255)
    updated_at: datetime = _utc()


PAUSES: sa.Table = Pause.__table__  # type: ignore[attr-defined]
DESTINATION_BREAKERS: sa.Table = DestinationBreaker.__table__  # type: ignore[attr-defined]


class AdminSession(SQLModel, table=True):
    """An admin UI session (migration 0011). The signed cookie carries a random id;
    only its SHA-256 is kept here. Logging out deletes the row, which ends the session
    in every process, so a copy of the cookie stops working too."""

    __tablename__ = "admin_sessions"
    __table_args__ = (
        # Expired sessions are deleted by expiry, a few at each login.
        sa.Index("ix_admin_sessions_expires_at", "expires_at"),
    )

    id_hash: str = Field(primary_key=True, max_length=64)
    # Opened with the admin token (may act) or the read token (may only look).
    can_act: bool
    created_at: datetime = _utc()
    expires_at: datetime = _utc()


class AdminLoginFailure(SQLModel, table=True):
    """A refused admin login, by client address (migration 0011): an address's recent
    ones decide whether it may try again, in whichever process it asks."""

    __tablename__ = "admin_login_failures"
    __table_args__ = (
        # An address's failures in the window: counted at each login.
        sa.Index("ix_admin_login_failures_client", "client", "failed_at"),
        # Failures older than the window: deleted at each refused login.
        sa.Index("ix_admin_login_failures_failed_at", "failed_at"),
    )

    id: str = Field(primary_key=True, max_length=32)
    client: str = Field(max_length=64)
    failed_at: datetime = _utc()


ADMIN_SESSIONS: sa.Table = AdminSession.__table__  # type: ignore[attr-defined]
ADMIN_LOGIN_FAILURES: sa.Table = AdminLoginFailure.__table__  # type: ignore[attr-defined]


class Operation(SQLModel, table=True):
    """A bulk operation (replay or cancel over a filter of events), run in batches by
    whichever process holds its lease; its progress is committed with each batch, so a
    runner that dies leaves it to the next one where it stopped."""

    __tablename__ = "operations"
    __table_args__ = (
        # One operation per request id: a retried POST finds the first one.
        sa.UniqueConstraint("request_id", name="uq_operations_request_id"),
        # The runners' look for work: queued and running ones.
        sa.Index("ix_operations_status", "status"),
    )

    id: str = Field(primary_key=True, max_length=26)
    request_id: str = Field(max_length=255)
    action: str = Field(max_length=16)  # a store.status.OperationAction
    trigger: str = Field(max_length=16)  # who asked: api, admin, cli
    # The filter as asked, in the API's words (``hookd.ops.operations.OperationFilter``).
    filter: dict[str, str] = Field(sa_column=sa.Column(sa.JSON(), nullable=False))
    dry_run: bool = Field(default=False)
    status: str = Field(max_length=16)  # a store.status.OperationStatus
    # The estimate, counted before it started; then events gone over, changed, left as they were.
    total: int = Field(default=0, sa_type=sa.BigInteger)
    done_count: int = Field(default=0, sa_type=sa.BigInteger)
    changed_count: int = Field(default=0, sa_type=sa.BigInteger)
    skipped_count: int = Field(default=0, sa_type=sa.BigInteger)
    # Events are gone over in id order, from above ``cursor`` up to below ``id_below``
    # (the first id minted after the operation was asked for).
    id_below: str = Field(max_length=26)
    cursor: str | None = Field(default=None, max_length=26)
    lease_owner: str | None = Field(default=None, max_length=64)
    lease_expires_at: datetime | None = _utc(nullable=True)
    cancel_requested_at: datetime | None = _utc(nullable=True)
    error: str | None = Field(default=None, sa_type=sa.Text)
    created_at: datetime = _utc()
    started_at: datetime | None = _utc(nullable=True)
    finished_at: datetime | None = _utc(nullable=True)
    updated_at: datetime = _utc()


OPERATIONS: sa.Table = Operation.__table__  # type: ignore[attr-defined]


class SourceObject(SQLModel, table=True):
    """[sources.order]: each object's latest known state, per source and object key, as
    of the newest event processed for it (store.delivery.objects). An event older than
    ``version`` is superseded, not run."""

    __tablename__ = "source_objects"

    source: str = Field(primary_key=True, max_length=64)
    object_key: str = Field(primary_key=True, max_length=255)
    # Of the newest event processed: its type, its version (the provider's updated-at
    # or version number; a time in unix seconds), its id and the SHA-256 of its body.
    type: str | None = Field(default=None, max_length=255)
    version: float
    event_id: str = Field(max_length=26)
    payload_hash: str | None = Field(default=None, max_length=64)
    updated_at: datetime = _utc()


SOURCE_OBJECTS: sa.Table = SourceObject.__table__  # type: ignore[attr-defined]

# The alerts' tables are declared beside this module; imported here so that one
# metadata (the migrations' target) holds every table.
import store.models_alerts  # noqa: E402
import store.models_learned  # noqa: E402
import store.models_rejected  # noqa: E402, F401
