"""coverage ledger (issue 18: settle window, coverage intervals)

- ``reconcile_coverage``: per source, each time interval a reconciliation run checked
  (or failed to, or found beyond the provider's retention) and each interval a disabled
  source was not checked, with the outcome (``ck_reconcile_coverage_outcome``).
- ``event_keys.repaired_by`` / ``late_at``: the run that stored a key, and when the
  key's webhook arrived after all (a late delivery, counted once).
- ``reconcile_runs.items_late``, ``reconcile_run_totals.late``: late deliveries per run,
  and those of pruned runs (``hookd_reconcile_late_total`` never goes down).

Every added column is nullable or has a constant default: no table is rewritten on
PostgreSQL 11+; SQLite adds columns in place. ``events`` (partitioned) is not touched.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from store.models import UTCDateTime

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "reconcile_coverage",
        sa.Column("id", sa.String(26), primary_key=True),
        sa.Column("source", sa.String(64), nullable=False),
        sa.Column("run_id", sa.String(26), nullable=True),
        sa.Column("start_at", UTCDateTime(), nullable=False),
        sa.Column("end_at", UTCDateTime(), nullable=False),
        sa.Column("outcome", sa.String(16), nullable=False),
        sa.Column("repaired", sa.Integer(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("recorded_at", UTCDateTime(), nullable=False),
        sa.CheckConstraint(
            "outcome IN ('complete', 'repaired', 'failed', 'unrecoverable', 'not_checked')",
            name="ck_reconcile_coverage_outcome",
        ),
    )
    op.create_index(
        "ix_reconcile_coverage_source_start", "reconcile_coverage", ["source", "start_at"]
    )
    op.add_column("event_keys", sa.Column("repaired_by", sa.String(26), nullable=True))
    op.add_column("event_keys", sa.Column("late_at", UTCDateTime(), nullable=True))
    op.add_column(
        "reconcile_runs",
        sa.Column("items_late", sa.Integer(), nullable=False, server_default="0"),
    )
    op.add_column(
        "reconcile_run_totals",
        sa.Column("late", sa.BigInteger(), nullable=False, server_default="0"),
    )


def downgrade() -> None:
    # Plain ALTER TABLE … DROP COLUMN (SQLite 3.35+), as 0006's downgrade.
    op.drop_column("reconcile_run_totals", "late")
    op.drop_column("reconcile_runs", "items_late")
    op.drop_column("event_keys", "late_at")
    op.drop_column("event_keys", "repaired_by")
    op.drop_index("ix_reconcile_coverage_source_start", table_name="reconcile_coverage")
    op.drop_table("reconcile_coverage")
