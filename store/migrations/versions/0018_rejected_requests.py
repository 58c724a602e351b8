"""rejected_requests: the refused webhook requests, kept to be looked at

One row per refusal the receiver records (``ingest.rejected``): why, what was
answered, the header names (no values), the safe signature inputs, the body's
SHA-256 and, for a source that opts in, the body (sealed like event bodies). Pruned
by age and by a per-source cap (``store.intake.rejected``). A new table: nothing
else is touched. No CHECK constraint: reasons are the metric's codes, not an enum.

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from store.models import UTCDateTime

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "rejected_requests",
        sa.Column("id", sa.String(26), primary_key=True),
        sa.Column("source", sa.String(64), nullable=False),
        sa.Column("received_at", UTCDateTime(), nullable=False),
        sa.Column("reason", sa.String(64), nullable=False),
        sa.Column("status_code", sa.Integer(), nullable=False),
        sa.Column("client", sa.String(64), nullable=True),
        sa.Column("content_type", sa.String(255), nullable=True),
        sa.Column("content_length", sa.BigInteger(), nullable=True),
        sa.Column("content_encoding", sa.String(64), nullable=True),
        sa.Column("header_names", sa.JSON(), nullable=False),
        sa.Column("signature_headers", sa.JSON(), nullable=False),
        sa.Column("scheme_inputs", sa.JSON(), nullable=False),
        sa.Column("body_sha256", sa.String(64), nullable=True),
        sa.Column("body", sa.LargeBinary(), nullable=True),
        sa.Column("body_encrypted", sa.Boolean(), nullable=False),
    )
    op.create_index("ix_rejected_requests_source", "rejected_requests", ["source", "received_at"])


def downgrade() -> None:
    op.drop_table("rejected_requests")
