"""learned_secrets: signing secrets a sender handed over in a handshake

Asana hands its webhook's signing secret over in the handshake (``X-Hook-Secret``)
instead of having it configured. The receiver keeps it here, sealed like event bodies,
so that every receiver process verifies with it; the primary key (source, the
SHA-256 of the configured token that opened the handshake) makes a second handshake
with that token fail, so a learned secret is never replaced. A new table: nothing else
is touched.

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from store.models import UTCDateTime

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "learned_secrets",
        sa.Column("source", sa.String(64), nullable=False),
        sa.Column("opened_by", sa.String(64), nullable=False),
        sa.Column("secret", sa.LargeBinary(), nullable=False),
        sa.Column("secret_encrypted", sa.Boolean(), nullable=False),
        sa.Column("learned_at", UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("source", "opened_by"),
    )


def downgrade() -> None:
    op.drop_table("learned_secrets")
