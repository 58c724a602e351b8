"""events: every stored webhook, with what processing needs later

Revision ID: 0001
Revises:
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from store.models import UTCDateTime

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "events",
        sa.Column("id", sa.String(26), primary_key=True),
        sa.Column("source", sa.String(64), nullable=False),
        sa.Column("provider", sa.String(16), nullable=False),
        sa.Column("dedupe_key", sa.String(255), nullable=False),
        sa.Column("type", sa.String(255), nullable=True),
        sa.Column("origin", sa.String(16), nullable=False),
        sa.Column("received_at", UTCDateTime(), nullable=False),
        sa.Column("occurred_at", UTCDateTime(), nullable=True),
        sa.Column("verified_with", sa.String(128), nullable=False),
        sa.Column("headers", sa.JSON(), nullable=False),
        sa.Column("body", sa.LargeBinary(), nullable=True),
        sa.Column("body_encrypted", sa.Boolean(), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("next_attempt_at", UTCDateTime(), nullable=False),
        sa.Column("lease_owner", sa.String(64), nullable=True),
        sa.Column("lease_expires_at", UTCDateTime(), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("processed_at", UTCDateTime(), nullable=True),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("updated_at", UTCDateTime(), nullable=False),
        sa.UniqueConstraint("source", "dedupe_key", name="uq_events_source_dedupe_key"),
        sa.CheckConstraint(
            "status IN ('pending','processing','retrying','processed','dead')",
            name="ck_events_status",
        ),
        sa.CheckConstraint("origin IN ('webhook','reconcile','replay')", name="ck_events_origin"),
    )
    op.create_index("ix_events_due", "events", ["status", "next_attempt_at"])
    op.create_index("ix_events_source_id", "events", ["source", "id"])


def downgrade() -> None:
    op.drop_index("ix_events_source_id", table_name="events")
    op.drop_index("ix_events_due", table_name="events")
    op.drop_table("events")
