"""Events as an operator sees them: the list, one event, and replay.

Replay makes events pending again on the same rows, in one transaction, and wakes
processing only after it commits: a wake-up before the commit would find nothing
due. ``wake`` is whatever the caller's process uses (the in-process consumer of
``hookd serve``, an arq job for a ``hookd worker``).
"""

from __future__ import annotations

import getpass
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import NoReturn

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from hookd.errors import Conflict, NotFound
from hookd.ops import models
from hookd.ops.queries import EventQuery
from hookd.ops.resources import event_detail_of, event_of
from store.admin.watch import sample_events
from store.claims import claiming
from store.claims.history import UNKNOWN, Requester, history_of
from store.delivery import destinations
from store.delivery.destinations import PauseRow, source_pause
from store.ids import is_id
from store.intake.events import Tombstone, get_event, get_tombstone, list_events
from store.rows import EventRow
from store.status import EventStatus, LedgerOutcome

log = logging.getLogger("hookd.replay")

# Who asked for a replay, as its history says: only the admin token may replay
# through the API, and only a session opened with it through the admin UI.
API_REPLAY = Requester("api", "token:admin")
ADMIN_REPLAY = Requester("admin", "session:admin")


def cli_requester() -> Requester:
    """The command line, and the OS user who ran it when the system knows one."""
    try:
        return Requester("cli", f"user:{getpass.getuser()}")
    except (OSError, KeyError):  # no login name, no passwd entry (a container's uid)
        return Requester("cli")


Wake = Callable[[], Awaitable[None]]
# A bulk operation's step inside a replay's transaction: (conn, replayed ids, the others).
Within = Callable[[AsyncConnection, list[str], list[str]], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class EventDetail:
    """One event: what the list shows of it, and what only a close look shows."""

    resource: models.EventDetail
    headers: dict[str, str]
    body: bytes | None  # as stored (maybe encrypted); only when asked for
    body_encrypted: bool
    next_attempt_at: datetime | None
    finished: frozenset[str]  # handlers the ledger has as done; only when asked for
    # Of those, the ones their filter skipped (handlers and destinations).
    skipped: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class Replayed:
    ids: list[str]  # what was asked for (or found dead)
    unknown: list[str]  # no such event
    replayed: list[str]  # pending again; the others are being processed right now,
    resources: list[models.EventDetail]  # the replayed events as the replay left them, if asked
    body_pruned: list[str] = field(default_factory=list)  # or lost their body to retention
    # or were pruned, or are being pruned (their ledger gone), since they were asked for
    pruned: list[str] = field(default_factory=list)


# An event parked behind a paused destination is due at or after this (``hookd wait``).
PARKED_FROM = destinations.PARKED_FROM


class EventOps:
    def __init__(self, engine: AsyncEngine, wake: Wake) -> None:
        self._engine = engine
        self._wake = wake

    @property
    def wake(self) -> Wake:
        """What wakes processing here after a change that makes events due (a replay, a
        resume of a paused source or destination)."""
        return self._wake

    async def page(self, query: EventQuery) -> models.EventPage:
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
                object_key=query.object,
            )
        page = rows[: query.limit]
        next_cursor = page[-1].id if len(rows) > query.limit else None
        return models.EventPage(events=[event_of(r) for r in page], next_cursor=next_cursor)

    async def show(
        self, event_id: str, *, with_body: bool = False, with_ledger: bool = False
    ) -> EventDetail:
        if not is_id(event_id):
            raise NotFound("event")
        async with self._engine.connect() as conn:
            row = await get_event(conn, event_id, with_body=with_body)
            ledger = await claiming.finished_handlers_many(conn, [event_id]) if with_ledger else {}
            outcomes = await destinations.ledger_of(conn, event_id) if with_ledger else {}
            if row is None:
                await self._missing(conn, event_id)
            # Read in the same snapshot as the row on PostgreSQL, so they agree.
            past = await history_of(conn, event_id)
        assert row is not None
        return EventDetail(
            event_detail_of(row, past),
            row.headers,
            row.body,
            row.body_encrypted,
            row.next_attempt_at,
            frozenset(ledger.get(event_id, ())),
            frozenset(h for h, outcome in outcomes.items() if outcome == LedgerOutcome.SKIPPED),
        )

    async def whereabouts(self, event_id: str) -> tuple[EventRow | None, Tombstone | None]:
        """An event's row as it is now or, once retention removed it, its tombstone
        (``hookd wait``): both None for an id never stored."""
        async with self._engine.connect() as conn:
            row = await get_event(conn, event_id)
            gone = None if row is not None else await get_tombstone(conn, event_id)
        return row, gone

    async def stored(self, event_id: str) -> EventRow:
        """An event's row with its body as stored, maybe encrypted (``hookd try``);
        ``NotFound``, saying when if retention removed it."""
        if not is_id(event_id):
            raise NotFound("event")
        async with self._engine.connect() as conn:
            row = await get_event(conn, event_id, with_body=True)
            if row is None:
                await self._missing(conn, event_id)
        assert row is not None
        return row

    async def sample(
        self, *, source: str | None, type_glob: str | None, since: datetime | None, limit: int
    ) -> list[EventRow]:
        """The newest ``limit`` stored events that still have a body, with it (``hookd try
        --all``): of ``source``, whose type matches ``type_glob``, received since ``since``."""
        async with self._engine.connect() as conn:
            return await sample_events(
                conn, source=source, type_glob=type_glob, since=since, limit=limit
            )

    async def source_pause(self, source: str) -> PauseRow | None:
        """The pause of ``source`` as a whole (None: it is not paused)."""
        async with self._engine.connect() as conn:
            return await source_pause(conn, source)

    async def replay(self, event_id: str, *, by: Requester = UNKNOWN) -> models.EventDetail:
        """One event pending again: its resource as the replay left it, with its
        history (the replay's marker last). ``by``: who asked, for the history."""
        if not is_id(event_id):
            raise NotFound("event")
        done = await self._replay([event_id], read_back=True, by=by)
        if done.unknown or done.pruned:
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

    async def replay_many(self, event_ids: Sequence[str], *, by: Requester = UNKNOWN) -> Replayed:
        """Every event that is not being processed right now; unknown ids are named."""
        return await self._replay(list(event_ids), by=by)

    async def replay_dead(self, source: str, *, by: Requester = UNKNOWN) -> Replayed:
        """Every dead event of ``source``: the name the events were stored under, which
        need not be in the sources file any more."""
        return await self._replay(dead_of=source, by=by)

    async def replay_batch(
        self,
        event_ids: Sequence[str],
        *,
        within: Within,
        only_handler: str | None = None,
        by: Requester = UNKNOWN,
    ) -> Replayed:
        """One batch of a bulk operation: ids it has just selected (none unknown).
        ``within(conn, replayed, skipped)`` runs in the replay's own transaction, so
        the operation's progress commits with the batch or not at all; it raises to
        roll the batch back. ``only_handler``: see ``store.claims.claiming.replay``."""
        return await self._replay(
            list(event_ids), selected=True, within=within, only_handler=only_handler, by=by
        )

    async def _replay(
        self,
        event_ids: list[str] | None = None,
        *,
        dead_of: str | None = None,
        read_back: bool = False,
        selected: bool = False,
        within: Within | None = None,
        only_handler: str | None = None,
        by: Requester = UNKNOWN,
    ) -> Replayed:
        """The one replay: ``event_ids``, or the dead of ``dead_of``. Each replayed
        event keeps its first origin and gets a replay marker in its history (``by``)."""
        unknown: list[str] = []
        async with self._engine.begin() as conn:
            if dead_of is not None:
                event_ids = await claiming.ids_with_status(conn, dead_of, EventStatus.DEAD)
            else:
                assert event_ids is not None
                if not selected:
                    unknown = [i for i in event_ids if await get_event(conn, i) is None]
            bodiless = await claiming.without_body(conn, event_ids)
            replayed = await claiming.replay(
                conn, event_ids, datetime.now(UTC), only_handler=only_handler, by=by
            )
            done = set(replayed)
            # Not replayed because retention took them meanwhile: read after the
            # replay's locks, so what a prune committed first is seen.
            pruned = await claiming.being_pruned(conn, [i for i in event_ids if i not in done])
            if within is not None:
                await within(conn, replayed, [i for i in event_ids if i not in done])
            # Read inside the transaction: once it commits, processing may take them.
            rows = [await get_event(conn, i) for i in replayed] if read_back else []
            pasts = {r.id: await history_of(conn, r.id) for r in rows if r is not None}
        if replayed:
            # One line per replay, the id when it is one event: who asked is in the history.
            one = {"event_id": replayed[0]} if len(replayed) == 1 else {}
            log.info(
                "events replayed",
                extra={"count": len(replayed), "via": by.via, "by": by.by, **one},
            )
            await self._wake()
        resources = [event_detail_of(r, pasts[r.id]) for r in rows if r is not None]
        return Replayed(event_ids, unknown, replayed, resources, bodiless, pruned)
