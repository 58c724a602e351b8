"""What an operator watches beside dead letters and recent failures: events stuck in
``processing`` past their lease (a worker died or stalled, and none took them over),
and events attempted many times that are still being tried.

Both lists are pages like the event list's: newest first, a cursor for older ones.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy.ext.asyncio import AsyncEngine

from hookd.errors import BadRequest
from hookd.ops import models
from hookd.ops.queries import DEFAULT_LIMIT, has_nul, parse_limit
from hookd.ops.resources import event_of
from store.admin.watch import retried_events, stuck_events
from store.ids import is_id
from store.rows import EventRow

# "Many attempts" unless the query says otherwise.
DEFAULT_MIN_ATTEMPTS = 3
MAX_MIN_ATTEMPTS = 10_000
_NUMBER_RE = re.compile(r"[0-9]{1,6}")


@dataclass(frozen=True, slots=True)
class WatchQuery:
    """A page of one watch list, of one source or of all."""

    source: str | None = None
    min_attempts: int = DEFAULT_MIN_ATTEMPTS
    limit: int = DEFAULT_LIMIT
    cursor: str | None = None

    @classmethod
    def parse(cls, params: Mapping[str, str]) -> WatchQuery:
        raw = params.get("attempts") or str(DEFAULT_MIN_ATTEMPTS)
        attempts = int(raw) if _NUMBER_RE.fullmatch(raw) else 0
        if not 1 <= attempts <= MAX_MIN_ATTEMPTS:
            raise BadRequest(
                "attempts", f"attempts must be a whole number from 1 to {MAX_MIN_ATTEMPTS}"
            )
        limit = parse_limit(params.get("limit", str(DEFAULT_LIMIT)))
        cursor = params.get("cursor") or None
        if cursor is not None and not is_id(cursor):
            raise BadRequest("cursor", "cursor is not one this API gave out")
        source = params.get("source") or None
        if has_nul(source):
            raise BadRequest("text", "source must not contain NUL")
        return cls(source, attempts, limit, cursor)


def _resource(row: EventRow) -> models.WatchedEvent:
    """The event as the list shows it, and whose claim it is (``host:pid:…``) until when."""
    return models.WatchedEvent(
        **dict(event_of(row)), lease_owner=row.lease_owner, lease_expires_at=row.lease_expires_at
    )


class WatchOps:
    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine

    async def stuck(self, query: WatchQuery) -> models.WatchPage:
        """Events ``processing`` whose lease has ended."""
        async with self._engine.connect() as conn:
            rows = await stuck_events(
                conn,
                datetime.now(UTC),
                source=query.source,
                limit=query.limit + 1,
                before_id=query.cursor,
            )
        return self._paged(rows, query.limit)

    async def retried(self, query: WatchQuery) -> models.WatchPage:
        """Events not finished with at least ``query.min_attempts`` attempts."""
        async with self._engine.connect() as conn:
            rows = await retried_events(
                conn,
                query.min_attempts,
                source=query.source,
                limit=query.limit + 1,
                before_id=query.cursor,
            )
        return self._paged(rows, query.limit)

    @staticmethod
    def _paged(rows: list[EventRow], limit: int) -> models.WatchPage:
        page = rows[:limit]
        next_cursor = page[-1].id if len(rows) > limit else None
        return models.WatchPage(events=[_resource(r) for r in page], next_cursor=next_cursor)
