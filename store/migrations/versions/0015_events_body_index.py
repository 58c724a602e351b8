"""events: a partial index of the rows that still have a body, for prune's body step

Prune clears the bodies and headers of processed events past ``keep_body_days``.
It found them by ``(source, id)``, walking every row of the source older than the
cutoff, with or without a body: each prune read the whole window between
``keep_body_days`` and ``keep_events_days`` again (millions of rows at full rate),
though all but the last day's had lost their bodies at an earlier prune.
``ix_events_body`` holds only rows whose ``body IS NOT NULL``: a row leaves it when
its body is cleared, so the step walks what it has to clear and little else (the
dead and unfinished rows, which keep their bodies, and are few). A partial index
rather than a stored watermark: nothing to keep in step with a replay, a
``--source`` prune or a policy changed to keep bodies longer, and the predicate
holds no status, so it matches the step's query under a generic plan too.

On PostgreSQL ``events`` is partitioned (0008): the index made on the parent is made
on every partition, and partitions made later (attached, ``LIKE events``) have it
too. Building it reads every partition under a lock that holds inserts back while
it runs: run ``hookd db upgrade`` with the receivers stopped on a large table.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

WITH_BODY = sa.text("body IS NOT NULL")


def upgrade() -> None:
    op.create_index(
        "ix_events_body",
        "events",
        ["source", "id"],
        postgresql_where=WITH_BODY,
        sqlite_where=WITH_BODY,
    )


def downgrade() -> None:
    op.drop_index("ix_events_body", table_name="events")
