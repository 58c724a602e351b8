"""events.traceparent: the trace context of the receive, when tracing is on

A nullable text column, so no table is rewritten. On PostgreSQL ``events`` is
partitioned (0008): a column added to the parent is added to every partition, and
partitions made later (``LIKE events``) have it too.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-04
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("events", sa.Column("traceparent", sa.String(55), nullable=True))


def downgrade() -> None:
    # Plain ALTER TABLE … DROP COLUMN (SQLite 3.35+), as 0006's downgrade.
    op.drop_column("events", "traceparent")
