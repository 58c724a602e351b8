"""silence watch: ``source_watch`` and the coverage outcome ``silent``

- ``source_watch``: per source with ``[sources.expect]``, how far its windows have
  been judged and the silence it is in (``reconcile.silence``). A new table.
- ``ck_reconcile_coverage_outcome`` allows ``silent``: a window in which fewer webhooks
  than expected were received. PostgreSQL changes the constraint in place (it checks
  the ledger's rows, a small table); SQLite cannot change a CHECK constraint, so
  ``reconcile_coverage`` is made anew, copied, dropped and renamed, as 0012 did with
  ``events``. The downgrade deletes the silent records first.

The watch counts a source's webhooks per window over ``ix_events_source_id`` (an id
is a ULID minted at receipt: a window is a range of ids); no index is added.

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from store.models import UTCDateTime

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None

OUTCOMES_BEFORE = "'complete', 'repaired', 'failed', 'unrecoverable', 'not_checked'"
OUTCOME_CHECK = sa.CheckConstraint(
    "outcome IN ('complete', 'repaired', 'failed', 'unrecoverable', 'not_checked', 'silent')",
    name="ck_reconcile_coverage_outcome",
)


def upgrade() -> None:
    op.create_table(
        "source_watch",
        sa.Column("source", sa.String(64), primary_key=True),
        sa.Column("window_s", sa.Integer(), nullable=False),
        sa.Column("started_at", UTCDateTime(), nullable=False),
        sa.Column("judged_until", UTCDateTime(), nullable=False),
        sa.Column("silent_since", UTCDateTime(), nullable=True),
        sa.Column("silent_row", sa.String(26), nullable=True),
        sa.Column("updated_at", UTCDateTime(), nullable=False),
    )
    _outcomes(str(OUTCOME_CHECK.sqltext))


def downgrade() -> None:
    op.execute("DELETE FROM reconcile_coverage WHERE outcome = 'silent'")
    _outcomes(f"outcome IN ({OUTCOMES_BEFORE})")
    op.drop_table("source_watch")


def _outcomes(check: str) -> None:
    if op.get_context().dialect.name != "sqlite":
        op.drop_constraint("ck_reconcile_coverage_outcome", "reconcile_coverage", type_="check")
        op.create_check_constraint("ck_reconcile_coverage_outcome", "reconcile_coverage", check)
        return
    # As 0009 made it, with the new check: plain DDL, SQLite's types for the columns'.
    op.execute(
        "CREATE TABLE reconcile_coverage_new ("
        "id VARCHAR(26) NOT NULL, source VARCHAR(64) NOT NULL, run_id VARCHAR(26), "
        "start_at DATETIME NOT NULL, end_at DATETIME NOT NULL, outcome VARCHAR(16) NOT NULL, "
        "repaired INTEGER NOT NULL, reason TEXT, recorded_at DATETIME NOT NULL, "
        "PRIMARY KEY (id), "
        f"CONSTRAINT ck_reconcile_coverage_outcome CHECK ({check}))"
    )
    op.execute(
        "INSERT INTO reconcile_coverage_new (id, source, run_id, start_at, end_at, outcome, "
        "repaired, reason, recorded_at) SELECT id, source, run_id, start_at, end_at, "
        "outcome, repaired, reason, recorded_at FROM reconcile_coverage"
    )
    op.drop_index("ix_reconcile_coverage_source_start", table_name="reconcile_coverage")
    op.drop_table("reconcile_coverage")
    op.rename_table("reconcile_coverage_new", "reconcile_coverage")
    op.create_index(
        "ix_reconcile_coverage_source_start", "reconcile_coverage", ["source", "start_at"]
    )
