"""event_keys: the dedupe index and tombstones, so that events can be pruned

Until now the unique constraint ``uq_events_source_dedupe_key`` on ``events``
decided whether an event was new; deleting a row would have let a late
redelivery of it be stored and processed again. ``event_keys`` takes that role:
one row per (source, dedupe_key), inserted first by every insert path, kept
after its event row is pruned (``final_status``, ``pruned_at``) until the
source's ``keep_keys_days``. It is filled here from ``events`` in one
``INSERT … SELECT``; then the unique constraint is dropped (a plain index on
``(source, dedupe_key)`` stays for lookups), so nothing about dedupe depends on
an index of ``events`` any more (which a partitioned table could not have).

Also: ``maintenance_state`` (prune's lease and last run), ``prune_totals``
(``hookd_pruned_total``) and ``reconcile_run_totals`` (the counters of pruned
reconcile runs, so that the reconcile counters never go down).

SQLite cannot drop a constraint: ``events`` is rebuilt (created anew, copied,
renamed), with foreign keys off (``store/migrations/env.py``), or dropping the
old table would delete every ``handler_runs`` row through ``ON DELETE CASCADE``.
On PostgreSQL the backfill and the new index hold a lock on ``events`` for as
long as they take: run ``hookd db upgrade`` with the receivers stopped.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-02
"""

from __future__ import annotations

import re

import sqlalchemy as sa
from alembic import op

from store.models import UTCDateTime

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

PRUNED = sa.text("pruned_at IS NOT NULL")
UNIQUE = "CONSTRAINT uq_events_source_dedupe_key UNIQUE (source, dedupe_key)"
RUNNABLE = sa.text("status IN ('pending', 'retrying')")

# The columns of events as 0001 and 0006 made them, in their order on disk.
EVENT_COLUMNS = (
    "id",
    "source",
    "provider",
    "dedupe_key",
    "type",
    "origin",
    "received_at",
    "occurred_at",
    "verified_with",
    "headers",
    "body",
    "body_encrypted",
    "status",
    "attempts",
    "next_attempt_at",
    "lease_owner",
    "lease_expires_at",
    "last_error",
    "processed_at",
    "created_at",
    "updated_at",
    "last_error_handler",
    "last_error_type",
)


def upgrade() -> None:
    op.create_table(
        "event_keys",
        sa.Column("source", sa.String(64), primary_key=True),
        sa.Column("dedupe_key", sa.String(255), primary_key=True),
        sa.Column("event_id", sa.String(26), nullable=False),
        sa.Column("received_at", UTCDateTime(), nullable=False),
        sa.Column("final_status", sa.String(16), nullable=True),
        sa.Column("pruned_at", UTCDateTime(), nullable=True),
    )
    # Every stored event gets its key: the unique constraint still holds here, so
    # there is exactly one row per key to copy.
    op.execute(
        "INSERT INTO event_keys (source, dedupe_key, event_id, received_at) "
        "SELECT source, dedupe_key, id, received_at FROM events"
    )
    op.create_index(
        "ix_event_keys_pruned_event",
        "event_keys",
        ["event_id"],
        postgresql_where=PRUNED,
        sqlite_where=PRUNED,
    )
    op.create_index(
        "ix_event_keys_pruned_received",
        "event_keys",
        ["source", "received_at"],
        postgresql_where=PRUNED,
        sqlite_where=PRUNED,
    )
    if op.get_context().dialect.name == "sqlite":
        _rebuild_sqlite_events(unique=False)
    else:
        op.create_index("ix_events_source_dedupe_key", "events", ["source", "dedupe_key"])
        op.drop_constraint("uq_events_source_dedupe_key", "events", type_="unique")
    op.create_table(
        "maintenance_state",
        sa.Column("task", sa.String(32), primary_key=True),
        sa.Column("lease_owner", sa.String(64), nullable=True),
        sa.Column("lease_expires_at", UTCDateTime(), nullable=True),
        sa.Column("last_started_at", UTCDateTime(), nullable=True),
        sa.Column("last_finished_at", UTCDateTime(), nullable=True),
        sa.Column("updated_at", UTCDateTime(), nullable=False),
    )
    op.create_table(
        "prune_totals",
        sa.Column("source", sa.String(64), primary_key=True),
        sa.Column("what", sa.String(8), primary_key=True),
        sa.Column("count", sa.BigInteger(), nullable=False),
    )
    op.create_table(
        "reconcile_run_totals",
        sa.Column("source", sa.String(64), primary_key=True),
        sa.Column("status", sa.String(16), primary_key=True),
        sa.Column("dry_run", sa.Boolean(), primary_key=True),
        sa.Column("runs", sa.BigInteger(), nullable=False),
        sa.Column("missing", sa.BigInteger(), nullable=False),
        sa.Column("rate_limited", sa.BigInteger(), nullable=False),
    )


def downgrade() -> None:
    """Back to 0006. Fails if a key was stored twice meanwhile (a redelivery after its
    key expired): the unique constraint cannot be created over such rows."""
    op.drop_table("reconcile_run_totals")
    op.drop_table("prune_totals")
    op.drop_table("maintenance_state")
    if op.get_context().dialect.name == "sqlite":
        _rebuild_sqlite_events(unique=True)
    else:
        op.create_unique_constraint(
            "uq_events_source_dedupe_key", "events", ["source", "dedupe_key"]
        )
        op.drop_index("ix_events_source_dedupe_key", table_name="events")
    op.drop_index("ix_event_keys_pruned_received", table_name="event_keys")
    op.drop_index("ix_event_keys_pruned_event", table_name="event_keys")
    op.drop_table("event_keys")


def _rebuild_sqlite_events(*, unique: bool) -> None:
    """SQLite's way to change a table's constraints: create the new table, copy the
    rows, drop the old one, rename, and create the indexes again."""
    bind = op.get_bind()
    if bind.exec_driver_sql("PRAGMA foreign_keys").scalar():
        # With foreign keys on, DROP TABLE events would empty handler_runs (CASCADE).
        raise RuntimeError("0007 needs PRAGMA foreign_keys=OFF on SQLite (see env.py)")
    # The new table is the old one's own CREATE statement, as SQLite keeps it (columns,
    # types and CHECK constraints as 0001 and 0006 made them), with or without the
    # unique constraint.
    sql = bind.exec_driver_sql(
        "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'events'"
    ).scalar_one()
    if unique:
        sql, found = re.subn(r"PRIMARY KEY \(id\)", f"PRIMARY KEY (id), {UNIQUE}", sql)
    else:
        sql, found = re.subn(rf"{re.escape(UNIQUE)},\s*|,\s*{re.escape(UNIQUE)}", "", sql)
    sql, named = re.subn(r'^CREATE TABLE "?events"? \(', "CREATE TABLE _events_new (", sql)
    if (found, named) != (1, 1):
        raise RuntimeError(f"0007: events is not the table 0006 left: {sql}")
    op.execute(sql)
    columns = ", ".join(EVENT_COLUMNS)
    op.execute(f"INSERT INTO _events_new ({columns}) SELECT {columns} FROM events")  # noqa: S608 - fixed names
    op.drop_table("events")
    op.rename_table("_events_new", "events")
    op.create_index("ix_events_due", "events", ["status", "next_attempt_at"])
    op.create_index("ix_events_source_id", "events", ["source", "id"])
    op.create_index("ix_events_lease", "events", ["status", "lease_expires_at"])
    op.create_index("ix_events_runnable", "events", ["next_attempt_at"], sqlite_where=RUNNABLE)
    if not unique:
        op.create_index("ix_events_source_dedupe_key", "events", ["source", "dedupe_key"])
    broken = bind.exec_driver_sql("PRAGMA foreign_key_check").fetchall()
    if broken:
        raise RuntimeError(f"0007: foreign keys broken by the rebuild of events: {broken[:3]}")
