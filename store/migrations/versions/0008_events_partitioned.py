"""events partitioned by day on PostgreSQL, so that retention drops whole days

The table is recreated as ``PARTITION BY RANGE (id)``: ids are ULIDs, whose first ten
characters are the millisecond they were minted, so a UTC day's events are one id
range and ``id`` stays the primary key (see ``store/partitions.py``). One partition
per day that holds rows (found by walking the primary key, a probe per day), one
for each day from yesterday to seven days ahead, and a default partition.

In this one transaction, with ``events`` locked: the partitioned table is created
(columns, NOT NULL and CHECK constraints copied with ``LIKE``), every row copied
with ``INSERT … SELECT``, the counts compared (any difference aborts the whole
migration), the old table dropped (its foreign key from ``handler_runs`` first), the
new one renamed ``events``, and its primary key, indexes and the foreign key
created again under their names. Migration 0005's early-vacuum settings go on each
partition: a partitioned table takes none itself. Run ``hookd db upgrade`` with the
receivers and workers stopped: 1,000,000 events over 30 days (1 GB with indexes)
took 14 s on a 2-core test machine; the time grows with the table's bytes.

The downgrade does the reverse (one plain table, counts compared). A partition that
a stopped prune left detached (``events_p…_dropping``) is left as it is.

SQLite: nothing (it has no partitioning; retention deletes rows there).

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-03
"""

from __future__ import annotations

from datetime import UTC, date, datetime, time, timedelta

import sqlalchemy as sa
from alembic import op

from store.ids import id_floor, id_time_ms

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

# As 0005 set them on the table; per partition from now on.
SETTINGS = {
    "autovacuum_vacuum_scale_factor": "0.01",
    "autovacuum_vacuum_threshold": "10000",
    "autovacuum_vacuum_insert_scale_factor": "0.05",
    "autovacuum_analyze_scale_factor": "0.02",
    "autovacuum_vacuum_cost_delay": "0",
}
STORAGE = ", ".join(f"{k} = {v}" for k, v in SETTINGS.items())
RUNNABLE = "status IN ('pending', 'retrying')"
INDEXES = (
    ("ix_events_source_dedupe_key", "source, dedupe_key", None),
    ("ix_events_due", "status, next_attempt_at", None),
    ("ix_events_source_id", "source, id", None),
    ("ix_events_lease", "status, lease_expires_at", None),
    ("ix_events_runnable", "next_attempt_at", RUNNABLE),
)
FK = (
    "ALTER TABLE handler_runs ADD CONSTRAINT fk_handler_runs_event FOREIGN KEY (event_id) "
    "REFERENCES events (id) ON DELETE CASCADE"
)


def _bounds(day: date) -> tuple[str, str]:
    start = datetime.combine(day, time(), UTC)
    ms = int(start.timestamp() * 1000)
    return id_floor(ms), id_floor(ms + 86_400_000)


def _day_of(event_id: str) -> date | None:
    ms = id_time_ms(event_id)
    return None if ms is None else datetime.fromtimestamp(ms / 1000, UTC).date()


def _days_with_rows(bind: sa.Connection) -> list[date]:
    """Each day some event id was minted on: one primary-key probe per day."""
    days: list[date] = []
    after = bind.exec_driver_sql("SELECT min(id) FROM events").scalar()
    while after is not None:
        day = _day_of(after)
        if day is None:  # not an id hookd minted: the default partition takes it
            after = bind.execute(
                sa.text("SELECT min(id) FROM events WHERE id > :a"), {"a": after}
            ).scalar()
            continue
        days.append(day)
        after = bind.execute(
            sa.text("SELECT min(id) FROM events WHERE id >= :a"), {"a": _bounds(day)[1]}
        ).scalar()
    return days


def _count(bind: sa.Connection, table: str) -> int:
    return int(bind.exec_driver_sql(f"SELECT count(*) FROM {table}").scalar_one())  # noqa: S608 - fixed names


def _finish() -> None:
    """Primary key, indexes and foreign key of the new ``events``, under their names."""
    op.execute("ALTER TABLE events ADD CONSTRAINT events_pkey PRIMARY KEY (id)")
    for name, columns, where in INDEXES:
        op.execute(
            f"CREATE INDEX {name} ON events ({columns})" + (f" WHERE {where}" if where else "")
        )
    op.execute(FK)


def upgrade() -> None:
    if op.get_context().dialect.name != "postgresql":
        return
    bind = op.get_bind()
    op.execute("LOCK TABLE events, handler_runs IN ACCESS EXCLUSIVE MODE")
    rows = _count(bind, "events")
    op.execute(
        "CREATE TABLE events_partitioned (LIKE events INCLUDING DEFAULTS "
        "INCLUDING CONSTRAINTS) PARTITION BY RANGE (id)"
    )
    today = datetime.now(UTC).date()
    ahead = [today + timedelta(days=d) for d in range(-1, 8)]
    for day in sorted({*_days_with_rows(bind), *ahead}):
        lo, hi = _bounds(day)
        op.execute(
            f"CREATE TABLE events_p{day:%Y%m%d} PARTITION OF events_partitioned "
            f"FOR VALUES FROM ('{lo}') TO ('{hi}') WITH ({STORAGE})"
        )
    op.execute(
        f"CREATE TABLE events_default PARTITION OF events_partitioned DEFAULT WITH ({STORAGE})"
    )
    op.execute("INSERT INTO events_partitioned SELECT * FROM events")
    copied = _count(bind, "events_partitioned")
    if copied != rows:
        raise RuntimeError(f"0008: {rows} events before, {copied} copied: nothing changed")
    op.execute("ALTER TABLE handler_runs DROP CONSTRAINT fk_handler_runs_event")
    op.execute("DROP TABLE events")
    op.execute("ALTER TABLE events_partitioned RENAME TO events")
    _finish()
    if _count(bind, "events") != rows:
        raise RuntimeError("0008: the row count changed during the migration")


def downgrade() -> None:
    if op.get_context().dialect.name != "postgresql":
        return
    bind = op.get_bind()
    op.execute("LOCK TABLE events, handler_runs IN ACCESS EXCLUSIVE MODE")
    rows = _count(bind, "events")
    op.execute(
        "CREATE TABLE events_unpartitioned (LIKE events INCLUDING DEFAULTS INCLUDING CONSTRAINTS)"
    )
    op.execute("INSERT INTO events_unpartitioned SELECT * FROM events")
    copied = _count(bind, "events_unpartitioned")
    if copied != rows:
        raise RuntimeError(f"0008 downgrade: {rows} events before, {copied} copied")
    op.execute("ALTER TABLE handler_runs DROP CONSTRAINT fk_handler_runs_event")
    op.execute("DROP TABLE events")  # and its partitions
    op.execute("ALTER TABLE events_unpartitioned RENAME TO events")
    _finish()
    op.execute(f"ALTER TABLE events SET ({STORAGE})")
