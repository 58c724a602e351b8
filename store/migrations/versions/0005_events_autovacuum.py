"""Vacuum the events table early: it is a queue, every event is updated twice

Each event is claimed and settled (two non-HOT updates), so the table and its
status indexes gather dead versions at twice the ingest rate. PostgreSQL's
default (vacuum at 20% dead) lets a busy table reach hundreds of thousands of
dead rows, which claims and lease checks then walk through. Vacuum at 1% (or
10,000 rows) without cost-based pauses instead. SQLite has no vacuum daemon
and needs nothing here.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-29
"""

from __future__ import annotations

from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

SETTINGS = {
    "autovacuum_vacuum_scale_factor": "0.01",
    "autovacuum_vacuum_threshold": "10000",
    "autovacuum_vacuum_insert_scale_factor": "0.05",
    "autovacuum_analyze_scale_factor": "0.02",
    "autovacuum_vacuum_cost_delay": "0",
}


def upgrade() -> None:
    if op.get_context().dialect.name != "postgresql":
        return
    pairs = ", ".join(f"{k} = {v}" for k, v in SETTINGS.items())
    op.execute(f"ALTER TABLE events SET ({pairs})")


def downgrade() -> None:
    if op.get_context().dialect.name != "postgresql":
        return
    op.execute(f"ALTER TABLE events RESET ({', '.join(SETTINGS)})")
