"""Partial index of runnable events by due time, so a claim reads only its batch

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

RUNNABLE = sa.text("status IN ('pending', 'retrying')")


def upgrade() -> None:
    op.create_index(
        "ix_events_runnable",
        "events",
        ["next_attempt_at"],
        postgresql_where=RUNNABLE,
        sqlite_where=RUNNABLE,
    )


def downgrade() -> None:
    op.drop_index("ix_events_runnable", table_name="events")
