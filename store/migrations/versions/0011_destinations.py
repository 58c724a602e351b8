"""destinations, pause and circuit breaker state

Destinations: ``handler_runs.outcome`` (null: it ran and finished; ``skipped``: its
filter did not select the event), nullable without a default, so adding it rewrites
no rows on either database; ``pauses`` (a paused source or destination, and who
switched it); ``destination_breakers`` (each destination's circuit breaker, shared by
every process). Neither new table refers to ``events``, so its partitions (0008) are
not touched.

Admin UI (a section of its own): ``admin_sessions`` (server-side sessions, so a
logout ends a copied cookie too) and ``admin_login_failures`` (the login rate limit
by client address).

Each part of this revision is its own pair of section functions, called in order
from ``upgrade()`` and in reverse from ``downgrade()``.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from store.models import UTCDateTime

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def _upgrade_destinations() -> None:
    op.add_column("handler_runs", sa.Column("outcome", sa.String(16), nullable=True))
    op.create_table(
        "pauses",
        sa.Column("source", sa.String(64), primary_key=True),
        sa.Column("destination", sa.String(64), primary_key=True),
        sa.Column("paused", sa.Boolean(), nullable=False),
        sa.Column("changed_by", sa.String(128), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("changed_at", UTCDateTime(), nullable=False),
    )
    op.create_table(
        "destination_breakers",
        sa.Column("source", sa.String(64), primary_key=True),
        sa.Column("destination", sa.String(64), primary_key=True),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("failures", sa.Integer(), nullable=False),
        sa.Column("opened_at", UTCDateTime(), nullable=True),
        sa.Column("retry_at", UTCDateTime(), nullable=True),
        sa.Column("probe_owner", sa.String(64), nullable=True),
        sa.Column("reason", sa.String(255), nullable=True),
        sa.Column("updated_at", UTCDateTime(), nullable=False),
        sa.CheckConstraint(
            "state IN ('closed','half_open','open')",
            name="ck_destination_breakers_state",
        ),
    )


def _downgrade_destinations() -> None:
    op.drop_table("destination_breakers")
    op.drop_table("pauses")
    # Plain ALTER TABLE … DROP COLUMN (SQLite 3.35+), as 0006's downgrade.
    op.drop_column("handler_runs", "outcome")


def _upgrade_admin() -> None:
    # Admin UI sessions kept server-side (a logout ends every copy of the cookie) and
    # refused logins by client address (the login rate limit); neither refers to events.
    op.create_table(
        "admin_sessions",
        sa.Column("id_hash", sa.String(64), primary_key=True),
        sa.Column("can_act", sa.Boolean(), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("expires_at", UTCDateTime(), nullable=False),
    )
    op.create_index("ix_admin_sessions_expires_at", "admin_sessions", ["expires_at"])
    op.create_table(
        "admin_login_failures",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("client", sa.String(64), nullable=False),
        sa.Column("failed_at", UTCDateTime(), nullable=False),
    )
    op.create_index(
        "ix_admin_login_failures_client", "admin_login_failures", ["client", "failed_at"]
    )
    op.create_index("ix_admin_login_failures_failed_at", "admin_login_failures", ["failed_at"])


def _downgrade_admin() -> None:
    op.drop_table("admin_login_failures")
    op.drop_table("admin_sessions")


def upgrade() -> None:
    _upgrade_destinations()
    _upgrade_admin()


def downgrade() -> None:
    _downgrade_admin()
    _downgrade_destinations()
