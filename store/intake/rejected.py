"""The rows of ``rejected_requests``: written in batches off the request path
(``ingest.rejected``), listed newest first, counted per source, and pruned by age and
by a per-source cap.

Every read and delete walks ``ix_rejected_requests_source`` (source, received_at):
a list of one source, the counts of a recent window, the rows past the cap.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from store.ids import new_ids
from store.models_rejected import REJECTED_REQUESTS

T = REJECTED_REQUESTS
# What a prune keeps of each source: rows younger than this, and of those the newest.
KEEP_DAYS = 7.0
KEEP_PER_SOURCE = 1_000


@dataclass(frozen=True, slots=True)
class RejectedRow:
    """One refusal as it is stored (``body`` sealed when ``body_encrypted``)."""

    source: str
    received_at: datetime
    reason: str
    status_code: int
    client: str | None
    content_type: str | None
    content_length: int | None
    content_encoding: str | None
    header_names: list[str]
    signature_headers: list[str]
    scheme_inputs: dict[str, Any]
    body_sha256: str | None
    body: bytes | None = None
    body_encrypted: bool = False
    id: str = ""


COLUMNS = (
    "id",
    "source",
    "received_at",
    "reason",
    "status_code",
    "client",
    "content_type",
    "content_length",
    "content_encoding",
    "header_names",
    "signature_headers",
    "scheme_inputs",
    "body_sha256",
    "body",
    "body_encrypted",
)


async def record_many(conn: AsyncConnection, rows: Sequence[RejectedRow]) -> int:
    """Insert ``rows`` (one statement); their ids are minted here, time-ordered."""
    if not rows:
        return 0
    ids = new_ids(len(rows))
    values = [
        {name: getattr(row, name) for name in COLUMNS if name != "id"} | {"id": row_id}
        for row, row_id in zip(rows, ids, strict=True)
    ]
    await conn.execute(sa.insert(T), values)
    return len(values)


def _row(r: Any) -> RejectedRow:
    return RejectedRow(**{name: getattr(r, name) for name in COLUMNS})


async def recent(
    conn: AsyncConnection,
    *,
    source: str | None = None,
    reason: str | None = None,
    limit: int = 50,
) -> list[RejectedRow]:
    """The newest refusals, of one source and reason when given, newest first."""
    query = sa.select(*(T.c[name] for name in COLUMNS))
    if source is not None:
        query = query.where(T.c.source == source)
    if reason is not None:
        query = query.where(T.c.reason == reason)
    query = query.order_by(T.c.received_at.desc(), T.c.id.desc()).limit(limit)
    return [_row(r) for r in await conn.execute(query)]


async def counts_since(conn: AsyncConnection, since: datetime) -> dict[str, dict[str, int]]:
    """{source: {reason: refusals received after ``since``}}."""
    query = (
        sa.select(T.c.source, T.c.reason, sa.func.count())
        .where(T.c.received_at > since)
        .group_by(T.c.source, T.c.reason)
    )
    counts: dict[str, dict[str, int]] = {}
    for source, reason, n in await conn.execute(query):
        counts.setdefault(source, {})[reason] = int(n)
    return counts


async def _sources(conn: AsyncConnection) -> list[str]:
    return [r[0] for r in await conn.execute(sa.select(T.c.source).distinct())]


async def _cap_time(conn: AsyncConnection, source: str, keep: int) -> datetime | None:
    """The received time of ``source``'s newest row past the cap, or None within it."""
    query = (
        sa.select(T.c.received_at)
        .where(T.c.source == source)
        .order_by(T.c.received_at.desc(), T.c.id.desc())
        .offset(keep)
        .limit(1)
    )
    found: datetime | None = (await conn.execute(query)).scalar()
    return found


async def _going(
    conn: AsyncConnection, source: str, now: datetime, keep_days: float, keep: int
) -> sa.ColumnElement[bool]:
    """The rows of ``source`` a prune takes: older than ``keep_days``, or past the
    ``keep`` newest (ties at the cap's time go too: the cap is an upper bound)."""
    cut = now - timedelta(days=keep_days)
    capped = await _cap_time(conn, source, keep)
    if capped is not None and capped >= cut:
        cut = capped + timedelta(microseconds=1)
    return sa.and_(T.c.source == source, T.c.received_at < cut)


async def would_prune(
    conn: AsyncConnection,
    now: datetime,
    *,
    keep_days: float = KEEP_DAYS,
    keep: int = KEEP_PER_SOURCE,
) -> dict[str, int]:
    """{source: rows a prune at ``now`` would delete} (a dry run)."""
    counts: dict[str, int] = {}
    for source in await _sources(conn):
        where = await _going(conn, source, now, keep_days, keep)
        n = int((await conn.execute(sa.select(sa.func.count()).where(where))).scalar_one())
        if n:
            counts[source] = n
    return counts


async def prune_batch(
    conn: AsyncConnection,
    source: str,
    now: datetime,
    batch: int,
    *,
    keep_days: float = KEEP_DAYS,
    keep: int = KEEP_PER_SOURCE,
) -> int:
    """Delete up to ``batch`` of the rows of ``source`` a prune takes; how many went."""
    where = await _going(conn, source, now, keep_days, keep)
    ids = [
        r[0]
        for r in await conn.execute(
            sa.select(T.c.id).where(where).order_by(T.c.received_at).limit(batch)
        )
    ]
    if not ids:
        return 0
    result = await conn.execute(sa.delete(T).where(T.c.id.in_(ids)))
    return int(result.rowcount)


async def sources_with_rows(conn: AsyncConnection) -> list[str]:
    """Every source with a stored refusal (one no longer configured included)."""
    return await _sources(conn)
