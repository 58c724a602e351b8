"""registration checks, ack audit and reconciliation stopped by hand

``reconcile_state`` learns when and by whom a source's reconciliation was switched
off (``disabled_at``, ``disabled_by``; the reason was already there), and what the
last registration check read (``registration_ok``, ``registration_checked_at``,
``registration``: the provider's fields as read and the differences found).
``reconcile_runs`` records, per run, the acknowledgements it found broken
(``ack_violations``) and its registration check (``registration_ok``,
``registration_problems``). ``ack_violations`` is the ledger of broken promises: one
row per (source, dedupe key) a provider says hookd answered with a 2xx and the store
did not hold, so a key a later run reads again (its overlap) is counted once.

Every added column is nullable or has a server default: no table is rewritten. A
source disabled before this revision was disabled after authentication failures (the
only way then): it gets that as ``disabled_by`` and its last update as ``disabled_at``.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from store.models import UTCDateTime

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("reconcile_state", sa.Column("disabled_at", UTCDateTime(), nullable=True))
    op.add_column("reconcile_state", sa.Column("disabled_by", sa.String(64), nullable=True))
    op.add_column("reconcile_state", sa.Column("registration_ok", sa.Boolean(), nullable=True))
    op.add_column(
        "reconcile_state", sa.Column("registration_checked_at", UTCDateTime(), nullable=True)
    )
    op.add_column("reconcile_state", sa.Column("registration", sa.JSON(), nullable=True))
    op.execute(
        "UPDATE reconcile_state SET disabled_at = updated_at, "
        "disabled_by = 'hookd auth-failures' WHERE disabled"
    )
    op.add_column(
        "reconcile_runs",
        sa.Column("ack_violations", sa.Integer(), nullable=False, server_default="0"),
    )
    op.add_column("reconcile_runs", sa.Column("registration_ok", sa.Boolean(), nullable=True))
    op.add_column("reconcile_runs", sa.Column("registration_problems", sa.JSON(), nullable=True))
    op.create_table(
        "ack_violations",
        sa.Column("source", sa.String(64), primary_key=True),
        sa.Column("dedupe_key", sa.String(255), primary_key=True),
        sa.Column("run_id", sa.String(26), nullable=False),
        sa.Column("delivery", sa.String(64), nullable=True),
        sa.Column("status_code", sa.Integer(), nullable=True),
        sa.Column("delivered_at", UTCDateTime(), nullable=True),
        sa.Column("found_at", UTCDateTime(), nullable=False),
    )


def downgrade() -> None:
    # Plain ALTER TABLE … DROP COLUMN (SQLite 3.35+), as 0006's downgrade.
    op.drop_table("ack_violations")
    op.drop_column("reconcile_runs", "registration_problems")
    op.drop_column("reconcile_runs", "registration_ok")
    op.drop_column("reconcile_runs", "ack_violations")
    op.drop_column("reconcile_state", "registration")
    op.drop_column("reconcile_state", "registration_checked_at")
    op.drop_column("reconcile_state", "registration_ok")
    op.drop_column("reconcile_state", "disabled_by")
    op.drop_column("reconcile_state", "disabled_at")
