"""bulk operations and source objects (ordering)

Source objects ([sources.order]): ``events`` gains ``object_key``, ``object_version``
and ``payload_hash`` (nullable, no default: no row is rewritten for them), the status
``superseded`` in ``ck_events_status``, and two partial indexes over the events that
name an object; ``ix_events_runnable`` is made again for the events that name none
(so the claim of those never reads a held-back event of an object). New table
``source_objects``. On PostgreSQL the columns, constraint and indexes go on the
partitioned ``events`` and from there on every partition: adding the constraint
checks every row, and building the indexes reads the table once (run the upgrade
with receivers and workers stopped, as for 0008). SQLite cannot change a CHECK
constraint: ``events`` is rebuilt (created anew, copied, dropped, renamed, its
indexes made again), as 0007 did. The downgrade makes superseded events processed.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-03
"""

from __future__ import annotations

import re

import sqlalchemy as sa
from alembic import op

from store.models import UTCDateTime

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    _upgrade_operations()
    _upgrade_objects()


def downgrade() -> None:
    _downgrade_objects()
    _downgrade_operations()


# -- bulk operations (POST /api/operations, hookd replay --since, hookd operations) ---


def _upgrade_operations() -> None:
    op.create_table(
        "operations",
        sa.Column("id", sa.String(26), primary_key=True),
        sa.Column("request_id", sa.String(255), nullable=False),
        sa.Column("action", sa.String(16), nullable=False),
        sa.Column("trigger", sa.String(16), nullable=False),
        sa.Column("filter", sa.JSON(), nullable=False),
        sa.Column("dry_run", sa.Boolean(), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("total", sa.BigInteger(), nullable=False),
        sa.Column("done_count", sa.BigInteger(), nullable=False),
        sa.Column("changed_count", sa.BigInteger(), nullable=False),
        sa.Column("skipped_count", sa.BigInteger(), nullable=False),
        sa.Column("id_below", sa.String(26), nullable=False),
        sa.Column("cursor", sa.String(26), nullable=True),
        sa.Column("lease_owner", sa.String(64), nullable=True),
        sa.Column("lease_expires_at", UTCDateTime(), nullable=True),
        sa.Column("cancel_requested_at", UTCDateTime(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("started_at", UTCDateTime(), nullable=True),
        sa.Column("finished_at", UTCDateTime(), nullable=True),
        sa.Column("updated_at", UTCDateTime(), nullable=False),
        sa.UniqueConstraint("request_id", name="uq_operations_request_id"),
        sa.CheckConstraint(
            "status IN ('queued','running','succeeded','failed','cancelled')",
            name="ck_operations_status",
        ),
        sa.CheckConstraint("action IN ('replay','cancel')", name="ck_operations_action"),
    )
    op.create_index("ix_operations_status", "operations", ["status"])


def _downgrade_operations() -> None:
    op.drop_index("ix_operations_status", table_name="operations")
    op.drop_table("operations")


# -- source objects and per-object ordering ([sources.order]) -------------------------

STATUSES_BEFORE = "'pending','processing','retrying','processed','dead'"
STATUS_CHECK = sa.CheckConstraint(
    "status IN ('pending','processing','retrying','processed','dead','superseded')",
    name="ck_events_status",
)
RUNNABLE = "status IN ('pending', 'retrying')"
RUNNABLE_UNORDERED = f"{RUNNABLE} AND object_key IS NULL"
RUNNABLE_ORDERED = f"{RUNNABLE} AND object_key IS NOT NULL"
ORDERED = "object_key IS NOT NULL"
OBJECT_COLUMNS = ("object_key", "object_version", "payload_hash")


def _runnable_index(where: str) -> None:
    op.create_index(
        "ix_events_runnable",
        "events",
        ["next_attempt_at"],
        postgresql_where=sa.text(where),
        sqlite_where=sa.text(where),
    )


def _object_indexes() -> None:
    op.create_index(
        "ix_events_object_due",
        "events",
        ["next_attempt_at"],
        postgresql_where=sa.text(RUNNABLE_ORDERED),
        sqlite_where=sa.text(RUNNABLE_ORDERED),
    )
    op.create_index(
        "ix_events_object",
        "events",
        ["object_key", "source", "status", "object_version", "id"],
        postgresql_where=sa.text(ORDERED),
        sqlite_where=sa.text(ORDERED),
    )


def _upgrade_objects() -> None:
    op.add_column("events", sa.Column("object_key", sa.String(255), nullable=True))
    op.add_column("events", sa.Column("object_version", sa.Float(), nullable=True))
    op.add_column("events", sa.Column("payload_hash", sa.String(64), nullable=True))
    if op.get_context().dialect.name == "sqlite":
        _rebuild_sqlite_events(str(STATUS_CHECK.sqltext), RUNNABLE_UNORDERED)
    else:
        op.drop_constraint("ck_events_status", "events", type_="check")
        op.create_check_constraint("ck_events_status", "events", STATUS_CHECK.sqltext)
        op.drop_index("ix_events_runnable", table_name="events")
        _runnable_index(RUNNABLE_UNORDERED)
    _object_indexes()
    op.create_table(
        "source_objects",
        sa.Column("source", sa.String(64), primary_key=True),
        sa.Column("object_key", sa.String(255), primary_key=True),
        sa.Column("type", sa.String(255), nullable=True),
        sa.Column("version", sa.Float(), nullable=False),
        sa.Column("event_id", sa.String(26), nullable=False),
        sa.Column("payload_hash", sa.String(64), nullable=True),
        sa.Column("updated_at", UTCDateTime(), nullable=False),
    )


def _downgrade_objects() -> None:
    op.drop_table("source_objects")
    op.execute("UPDATE events SET status = 'processed' WHERE status = 'superseded'")
    op.drop_index("ix_events_object", table_name="events")
    op.drop_index("ix_events_object_due", table_name="events")
    if op.get_context().dialect.name == "sqlite":
        _rebuild_sqlite_events(f"status IN ({STATUSES_BEFORE})", RUNNABLE)
    else:
        op.drop_constraint("ck_events_status", "events", type_="check")
        op.create_check_constraint("ck_events_status", "events", f"status IN ({STATUSES_BEFORE})")
        op.drop_index("ix_events_runnable", table_name="events")
        _runnable_index(RUNNABLE)
    # Plain ALTER TABLE … DROP COLUMN (SQLite 3.35+), as 0006's downgrade.
    for column in reversed(OBJECT_COLUMNS):
        op.drop_column("events", column)


def _rebuild_sqlite_events(status_check: str, runnable: str) -> None:
    """SQLite's way to change a CHECK constraint: the table anew under the new one (its
    own CREATE statement as SQLite keeps it, the status list replaced), the rows copied,
    the old table dropped, the new one renamed, and its indexes made again as they were
    (``ix_events_runnable`` with ``runnable`` for its predicate)."""
    bind = op.get_bind()
    if bind.exec_driver_sql("PRAGMA foreign_keys").scalar():
        # With foreign keys on, DROP TABLE events would empty handler_runs (CASCADE).
        raise RuntimeError("0012 needs PRAGMA foreign_keys=OFF on SQLite (see env.py)")
    sql = bind.exec_driver_sql(
        "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'events'"
    ).scalar_one()
    indexes = [
        (name, index_sql)
        for name, index_sql in bind.exec_driver_sql(
            "SELECT name, sql FROM sqlite_master WHERE type = 'index' AND tbl_name = 'events' "
            "AND sql IS NOT NULL"
        )
    ]
    columns = [row[1] for row in bind.exec_driver_sql("PRAGMA table_info(events)")]
    sql, checked = re.subn(
        r"CONSTRAINT ck_events_status CHECK \(status IN \([^)]*\)\)",
        lambda _: f"CONSTRAINT ck_events_status CHECK ({status_check})",
        sql,
    )
    sql, named = re.subn(r'^CREATE TABLE "?events"? \(', "CREATE TABLE _events_new (", sql)
    if (checked, named) != (1, 1):
        raise RuntimeError(f"0012: events is not the table 0011 left: {sql}")
    op.execute(sql)
    listed = ", ".join(columns)
    op.execute(f"INSERT INTO _events_new ({listed}) SELECT {listed} FROM events")  # noqa: S608 - the table's own columns
    op.drop_table("events")
    op.rename_table("_events_new", "events")
    for name, index_sql in indexes:
        if name == "ix_events_runnable":
            _runnable_index(runnable)
        else:
            op.execute(index_sql)
    broken = bind.exec_driver_sql("PRAGMA foreign_key_check").fetchall()
    if broken:
        raise RuntimeError(f"0012: foreign keys broken by the rebuild of events: {broken[:3]}")
