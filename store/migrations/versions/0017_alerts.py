"""alerts and notifications: conditions that need a person, and the messages about them

``alerts`` keeps one row per condition and key (a source, a destination) while it is
open or acknowledged (``uq_alerts_live``, partial: resolved ones stay as history);
``notifications`` is the outbox of messages to the ``[[notify]]`` channels, written in
the transaction that changed the alerts, sent and retried by whichever process holds
its lease. Both tables are new: nothing else is touched.

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from store.models import UTCDateTime

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None

LIVE = "status <> 'resolved'"
DUE = "status = 'pending'"


def upgrade() -> None:
    op.create_table(
        "alerts",
        sa.Column("id", sa.String(26), primary_key=True),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("key", sa.String(255), nullable=False),
        sa.Column("source", sa.String(64), nullable=True),
        sa.Column("severity", sa.String(16), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("summary", sa.Text(), nullable=False),
        sa.Column("link", sa.String(1024), nullable=False),
        sa.Column("value", sa.Float(), nullable=False),
        sa.Column("count", sa.Integer(), nullable=False),
        sa.Column("first_seen", UTCDateTime(), nullable=False),
        sa.Column("last_seen", UTCDateTime(), nullable=False),
        sa.Column("acknowledged_at", UTCDateTime(), nullable=True),
        sa.Column("acknowledged_by", sa.String(128), nullable=True),
        sa.Column("resolved_at", UTCDateTime(), nullable=True),
        sa.Column("resolved_by", sa.String(128), nullable=True),
        sa.Column("notified", sa.JSON(), nullable=False),
        sa.CheckConstraint(
            "status IN ('open', 'acknowledged', 'resolved')", name="ck_alerts_status"
        ),
    )
    op.create_index(
        "uq_alerts_live",
        "alerts",
        ["kind", "key"],
        unique=True,
        postgresql_where=sa.text(LIVE),
        sqlite_where=sa.text(LIVE),
    )
    op.create_index("ix_alerts_status", "alerts", ["status", "last_seen"])
    op.create_table(
        "notifications",
        sa.Column("id", sa.String(26), primary_key=True),
        sa.Column("channel", sa.String(64), nullable=False),
        sa.Column("what", sa.String(16), nullable=False),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("alert_ids", sa.JSON(), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("next_attempt_at", UTCDateTime(), nullable=False),
        sa.Column("lease_owner", sa.String(64), nullable=True),
        sa.Column("lease_expires_at", UTCDateTime(), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("sent_at", UTCDateTime(), nullable=True),
        sa.CheckConstraint(
            "status IN ('pending', 'sent', 'failed')", name="ck_notifications_status"
        ),
    )
    op.create_index(
        "ix_notifications_due",
        "notifications",
        ["next_attempt_at"],
        postgresql_where=sa.text(DUE),
        sqlite_where=sa.text(DUE),
    )
    op.create_index("ix_notifications_channel", "notifications", ["channel", "created_at"])


def downgrade() -> None:
    op.drop_table("notifications")
    op.drop_table("alerts")
