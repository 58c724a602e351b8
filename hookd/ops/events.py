"""Events as an operator sees them: the list, one event, and replay.

Replay makes events pending again on the same rows, in one transaction, and wakes
processing only after it commits: a wake-up before the commit would find nothing
due. ``wake`` is whatever the caller's process uses (the in-process consumer of
``hookd serve``, an arq job for a ``hookd worker``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, NoReturn

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from hookd.errors import Conflict, NotFound
from hookd.ops.queries import EventQuery
from store import claims
from store.events import event_resource, get_event, get_tombstone, list_events
from store.ids import is_id
from store.status import EventStatus

Wake = Callable[[], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class EventPage:
    events: list[dict[str, Any]]  # resources, newest first
    next_cursor: str | None  # the query's cursor for the next (older) page; None: last page


@dataclass(frozen=True, slots=True)
class EventDetail:
    """One event: what the list shows of it, and what only a close look shows."""

    resource: dict[str, Any]
    headers: dict[str, str]
    body: bytes | None  # as stored (maybe encrypted); only when asked for
    body_encrypted: bool
    next_attempt_at: datetime | None
    finished: frozenset[str]  # handlers the ledger has as done; only when asked for


@dataclass(frozen=True, slots=True)
class Replayed:
    ids: list[str]  # what was asked for (or found dead)
    unknown: list[str]  # no such event
    replayed: list[str]  # pending again; the others are being processed right now,
    resources: list[dict[str, Any]]  # the replayed events as the replay left them, if asked
    body_pruned: list[str] = field(default_factory=list)  # or lost their body to retention


class EventOps:
    def __init__(self, engine: AsyncEngine, wake: Wake) -> None:
        self._engine = engine
        self._wake = wake

    async def page(self, query: EventQuery) -> EventPage:
        async with self._engine.connect() as conn:
            rows = await list_events(
                conn,
                source=query.source,
                status=query.status,
                type_=query.type,
                origin=query.origin,
                # One more than the page says whether there is an older page.
                limit=query.limit + 1,
                before_id=query.cursor,
            )
        page = rows[: query.limit]
        next_cursor = page[-1].id if len(rows) > query.limit else None
        return EventPage([event_resource(r) for r in page], next_cursor)

    async def show(
        self, event_id: str, *, with_body: bool = False, with_ledger: bool = False
    ) -> EventDetail:
        if not is_id(event_id):
            raise NotFound("event")
        async with self._engine.connect() as conn:
            row = await get_event(conn, event_id, with_body=with_body)
            ledger = await claims.finished_handlers_many(conn, [event_id]) if with_ledger else {}
            if row is None:
                await self._missing(conn, event_id)
        assert row is not None
        return EventDetail(
            event_resource(row),
            row.headers,
            row.body,
            row.body_encrypted,
            row.next_attempt_at,
            frozenset(ledger.get(event_id, ())),
        )

    async def replay(self, event_id: str) -> dict[str, Any]:
        """One event pending again: its resource as the replay left it."""
        if not is_id(event_id):
            raise NotFound("event")
        done = await self._replay([event_id], read_back=True)
        if done.unknown:
            async with self._engine.connect() as conn:
                await self._missing(conn, event_id)
        if done.body_pruned:
            raise Conflict(
                "body_pruned",
                "the event's body was removed by the retention policy (keep_body_days): "
                "it cannot be processed again",
            )
        if not done.replayed:
            raise Conflict("in_progress", "the event is being processed right now")
        if not done.resources:  # pruned while the replay was waiting for its row
            async with self._engine.connect() as conn:
                await self._missing(conn, event_id)
        return done.resources[0]

    @staticmethod
    async def _missing(conn: AsyncConnection, event_id: str) -> NoReturn:
        """``NotFound``, saying when and how the event ended if it was pruned."""
        tombstone = await get_tombstone(conn, event_id)
        raise NotFound("event", "" if tombstone is None else tombstone.describe())

    async def replay_many(self, event_ids: Sequence[str]) -> Replayed:
        """Every event that is not being processed right now; unknown ids are named."""
        return await self._replay(list(event_ids))

    async def replay_dead(self, source: str) -> Replayed:
        """Every dead event of ``source``: the name the events were stored under, which
        need not be in the sources file any more."""
        return await self._replay(dead_of=source)

    async def _replay(
        self,
        event_ids: list[str] | None = None,
        *,
        dead_of: str | None = None,
        read_back: bool = False,
    ) -> Replayed:
        """The one replay: ``event_ids``, or the dead of ``dead_of``."""
        unknown: list[str] = []
        async with self._engine.begin() as conn:
            if dead_of is not None:
                event_ids = await claims.ids_with_status(conn, dead_of, EventStatus.DEAD)
            else:
                assert event_ids is not None
                unknown = [i for i in event_ids if await get_event(conn, i) is None]
            bodiless = await claims.without_body(conn, event_ids)
            replayed = await claims.replay(conn, event_ids, datetime.now(UTC))
            # Read inside the transaction: once it commits, processing may take them.
            rows = [await get_event(conn, i) for i in replayed] if read_back else []
        if replayed:
            await self._wake()
        resources = [event_resource(r) for r in rows if r is not None]
        return Replayed(event_ids, unknown, replayed, resources, bodiless)
