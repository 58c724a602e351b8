"""reconcile_state and reconcile_runs: cursors, leases, schedule, run records

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from store.models import UTCDateTime

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "reconcile_state",
        sa.Column("source", sa.String(64), primary_key=True),
        sa.Column("cursor", sa.Float(), nullable=True),
        sa.Column("lease_owner", sa.String(64), nullable=True),
        sa.Column("lease_expires_at", UTCDateTime(), nullable=True),
        sa.Column("disabled", sa.Boolean(), nullable=False),
        sa.Column("disabled_reason", sa.Text(), nullable=True),
        sa.Column("auth_failures", sa.Integer(), nullable=False),
        sa.Column("error_count", sa.Integer(), nullable=False),
        sa.Column("interval_s", sa.Float(), nullable=True),
        sa.Column("next_run_at", UTCDateTime(), nullable=True),
        sa.Column("last_run_id", sa.String(26), nullable=True),
        sa.Column("meta", sa.JSON(), nullable=False),
        sa.Column("updated_at", UTCDateTime(), nullable=False),
    )
    op.create_table(
        "reconcile_runs",
        sa.Column("id", sa.String(26), primary_key=True),
        sa.Column("source", sa.String(64), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("trigger", sa.String(16), nullable=False),
        sa.Column("dry_run", sa.Boolean(), nullable=False),
        sa.Column("started_at", UTCDateTime(), nullable=False),
        sa.Column("finished_at", UTCDateTime(), nullable=True),
        sa.Column("items_checked", sa.Integer(), nullable=False),
        sa.Column("items_missing", sa.Integer(), nullable=False),
        sa.Column("items_repaired", sa.Integer(), nullable=False),
        sa.Column("pages", sa.Integer(), nullable=False),
        sa.Column("api_calls", sa.Integer(), nullable=False),
        sa.Column("rate_limited", sa.Integer(), nullable=False),
        sa.Column("cursor_before", sa.Float(), nullable=True),
        sa.Column("cursor_after", sa.Float(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.CheckConstraint(
            "status IN ('queued','running','succeeded','failed','lease_held')",
            name="ck_reconcile_runs_status",
        ),
    )
    op.create_index("ix_reconcile_runs_source_id", "reconcile_runs", ["source", "id"])


def downgrade() -> None:
    op.drop_index("ix_reconcile_runs_source_id", table_name="reconcile_runs")
    op.drop_table("reconcile_runs")
    op.drop_table("reconcile_state")
