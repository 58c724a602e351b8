"""event history (attempts and replays)

``event_history``: one row per processing attempt (when it started and ended, the
worker, the attempt's number, the handler that failed, the outcome, a one-line error,
the duration) and one per replay (when, how it was asked for and by whom, the status
it found and the attempts it reset). Rows are written in the transaction that records
the attempt's outcome or makes the replay, and go with their event: ``ON DELETE
CASCADE`` for row-level prune; on PostgreSQL, whose ``events`` is partitioned (0008),
a dropped day's history is deleted before its partition is detached
(``store.partitions``), as its ledger rows are.

A new, empty table: nothing is copied and nothing else is locked for long. Events
stored before it have no history of their earlier attempts.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from store.models import UTCDateTime

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "event_history",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            primary_key=True,
            autoincrement=True,
        ),
        sa.Column(
            "event_id",
            sa.String(26),
            sa.ForeignKey("events.id", ondelete="CASCADE", name="fk_event_history_event"),
            nullable=False,
        ),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("at", UTCDateTime(), nullable=False),
        sa.Column("finished_at", UTCDateTime(), nullable=True),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("worker", sa.String(64), nullable=True),
        sa.Column("handler", sa.String(255), nullable=True),
        sa.Column("outcome", sa.String(32), nullable=True),
        sa.Column("error", sa.String(500), nullable=True),
        sa.Column("error_type", sa.String(128), nullable=True),
        sa.Column("duration_s", sa.Float(), nullable=True),
        sa.Column("status_before", sa.String(16), nullable=True),
        sa.Column("requested_via", sa.String(16), nullable=True),
        sa.Column("requested_by", sa.String(128), nullable=True),
    )
    op.create_index("ix_event_history_event", "event_history", ["event_id", "id"])


def downgrade() -> None:
    op.drop_index("ix_event_history_event", table_name="event_history")
    op.drop_table("event_history")
