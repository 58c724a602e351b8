"""events: which handler failed last, and with what exception type

``last_error`` is written at every failed attempt; these two columns sit beside
it so the API, the CLI and the admin UI can say which handler is failing and
how while an event is still retrying, not only once it is dead. Both are
nullable and have no default: adding them rewrites no rows on either database.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("events", sa.Column("last_error_handler", sa.String(255), nullable=True))
    op.add_column("events", sa.Column("last_error_type", sa.String(128), nullable=True))


def downgrade() -> None:
    # Plain ALTER TABLE … DROP COLUMN (SQLite 3.35+): a batch rebuild of the table
    # would have to recreate its partial index by hand.
    op.drop_column("events", "last_error_type")
    op.drop_column("events", "last_error_handler")
