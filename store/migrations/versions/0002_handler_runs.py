"""handler_runs: the ledger of handlers finished per event

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from store.models import UTCDateTime

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "handler_runs",
        sa.Column(
            "event_id",
            sa.String(26),
            sa.ForeignKey("events.id", ondelete="CASCADE", name="fk_handler_runs_event"),
            primary_key=True,
        ),
        sa.Column("handler", sa.String(255), primary_key=True),
        sa.Column("finished_at", UTCDateTime(), nullable=False),
    )
    # Claims look for expired leases as well as due events.
    op.create_index("ix_events_lease", "events", ["status", "lease_expires_at"])


def downgrade() -> None:
    op.drop_index("ix_events_lease", table_name="events")
    op.drop_table("handler_runs")
