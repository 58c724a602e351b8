"""events: ix_events_runnable by source, then due time, for claims fair between sources

A claim now takes each source's due events on their own (``store.claims.claim_due``),
so that a source with a backlog of thousands never keeps another's events waiting
behind it. Read from an index on ``next_attempt_at`` alone, the pick of the quiet
source would walk the whole backlog of the busy one to find its own; on
``(source, next_attempt_at)`` each pick starts at its source's oldest due event and
stops at its room. Same predicate as before (runnable events of no object).

On PostgreSQL ``events`` is partitioned (0008): the index made on the parent is made
on every partition, and partitions made later have it too. Building it reads every
partition under a lock that holds inserts back while it runs: run ``hookd db
upgrade`` with the receivers stopped on a large table.

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

RUNNABLE_UNORDERED = "status IN ('pending', 'retrying') AND object_key IS NULL"


def _runnable(columns: list[str]) -> None:
    op.drop_index("ix_events_runnable", table_name="events")
    op.create_index(
        "ix_events_runnable",
        "events",
        columns,
        postgresql_where=sa.text(RUNNABLE_UNORDERED),
        sqlite_where=sa.text(RUNNABLE_UNORDERED),
    )


def upgrade() -> None:
    _runnable(["source", "next_attempt_at"])


def downgrade() -> None:
    _runnable(["next_attempt_at"])
