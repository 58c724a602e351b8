"""A processor's claim: the statements that lease due events to it, fair between sources.

Takeovers of expired leases first (counted apart), then events of objects
(``[sources.order]``, one per object), then the others shared between sources, then
events of sources no longer configured (to go dead). ``processing.processor`` runs a
claim in its exchange, with the outcomes of the events that finished meanwhile.
"""

from __future__ import annotations

import collections
import math
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

from hookd import tracing
from hookd.sources import Sources
from processing.attempt import Held, Result
from store.claims import claiming, history
from store.delivery import objects
from store.rows import EventRow
from store.status import EventStatus

# A crashed worker's claims are taken over at most this long after their lease ends.
EXPIRED_CHECK_S = 2.0
# Events of a source no longer configured are looked for this often (to go dead).
ORPHANS_CHECK_S = 60.0


@dataclass(frozen=True, slots=True)
class Ask:
    """What a claim asks for: up to ``want`` events at ``now``, no source past
    ``limit`` of them held (``held``: those it holds already), none of ``full``."""

    want: int
    now: datetime
    held: collections.Counter[str]
    full: frozenset[str]
    limit: int


@dataclass(slots=True)
class Claimed:
    """What a claim took: every event claimed (``rows``), those of them taken over,
    the events it superseded, and the claimed events' ledger when read with it."""

    taken: list[EventRow] = field(default_factory=list)
    rows: list[EventRow] = field(default_factory=list)
    superseded: list[objects.Superseded] = field(default_factory=list)
    ledger: dict[str, set[str]] | None = None


def _superseded_history(
    superseded: list[objects.Superseded], owner: str, now: datetime
) -> list[history.Attempt]:
    """Their history's record: not run, the attempts they had used left as they were."""
    return [
        history.Attempt(
            event_id=event_id,
            attempt=attempts,
            worker=owner,
            at=now,
            finished_at=now,
            outcome=EventStatus.SUPERSEDED,
        )
        for event_id, _, attempts in superseded
    ]


def _abandoned(taken: list[EventRow], now: datetime) -> list[history.Attempt]:
    """The attempt before each takeover: it ran out its lease without an outcome."""
    return [
        history.Attempt(
            event_id=row.id,
            attempt=row.attempts - 1,
            worker=None,
            at=now,
            outcome=history.AttemptOutcome.ABANDONED,
            error="no outcome recorded: its worker stopped or stalled, and its lease ran out",
        )
        for row in taken
    ]


def claim_span(claimed: Claimed, claim_started: int) -> Any:
    """The claim's span (tracing on only: ``claim_started``), linked to each event's
    stored context and linked to from each event's processing span."""
    if not claim_started:
        return None
    rows = claimed.rows
    return tracing.claimed(
        "hookd.claim",
        {
            "hookd.claim.count": len(rows),
            "hookd.claim.takeovers": len(claimed.taken),
            "hookd.claim.superseded": len(claimed.superseded),
            "hookd.sources": sorted({r.source for r in rows}),
        },
        claim_started,
        ((r.id, r.traceparent) for r in rows),
    )


@dataclass(slots=True)
class _Cadence:
    """A look due at most once every ``every_s`` (by the monotonic clock)."""

    every_s: float
    last: float = -math.inf

    def due(self) -> bool:
        now = time.monotonic()
        if now - self.last < self.every_s:
            return False
        self.last = now
        return True


class Claimer:
    """The claims of one processor (``owner``), each leasing for ``lease_s``."""

    def __init__(self, sources: Sources, *, owner: str, lease_s: float) -> None:
        self._sources = sources
        self._owner = owner
        self._lease_s = lease_s
        # [sources.order]: the sources whose events of an object are claimed one at a
        # time per object (store.delivery.objects), and those of them that supersede stale ones.
        ordered = [s for s in sources if s.config.order is not None]
        self.ordered = frozenset(s.name for s in ordered)
        self._supersede = frozenset(
            s.name for s in ordered if s.config.order and s.config.order.supersedes
        )
        # Expired leases (``claim_expired``) and events of sources no longer configured
        # are looked for on their own cadences, not at every claim.
        self._expired_check = _Cadence(EXPIRED_CHECK_S)
        self._orphans_check = _Cadence(ORPHANS_CHECK_S)

    def ordered_window(self, batch: Iterable[tuple[Held, Result]]) -> bool:
        """Whether a window holds events of objects: their outcomes go before the claim
        (in a transaction of their own on PostgreSQL), so that each object's next event
        is claimed in the same exchange, not in the next."""
        return bool(self.ordered) and any(h.row.object_key is not None for h, _ in batch)

    async def claim_in(
        self, conn: AsyncConnection, ask: Ask, spare: list[str] | None = None
    ) -> Claimed:
        """The claim's statements: (taken over, every event claimed, superseded). No
        source past ``ask.limit`` held, none of ``ask.full``, no takeover of ``spare``."""
        want, now = ask.want, ask.now
        got = Claimed()
        # Expired leases first, by their own statement, so that takeovers are counted.
        if self._expired_check.due():
            got.taken = await claiming.claim_expired(
                conn, self._owner, self._lease_s, want, now, spare=spare or ()
            )
        got.rows = got.taken
        # Events of objects ([sources.order]) first: one per object, at most.
        if self.ordered and len(got.rows) < want:
            await self._claim_objects(conn, ask, got)
        if len(got.rows) < want:
            shares = [
                claiming.Share(s.name, ask.held[s.name], ask.limit - ask.held[s.name])
                for s in self._sources
            ]
            got.rows = got.rows + await claiming.claim_due(
                conn, self._owner, self._lease_s, want - len(got.rows), now, shares=shares
            )
        if len(got.rows) < want and self._orphans_check.due():
            # Events of a source no longer configured: claimed to go dead, not left.
            got.rows = got.rows + await claiming.claim_orphans(
                conn,
                self._owner,
                self._lease_s,
                want - len(got.rows),
                now,
                known=[s.name for s in self._sources],
            )
        # The attempts of the taken-over claims ended without an outcome.
        await history.record_attempts(conn, _abandoned(got.taken, now))
        return got

    async def _claim_objects(self, conn: AsyncConnection, ask: Ask, got: Claimed) -> None:
        """Events of objects into ``got``: one per object, stale ones superseded."""
        found = await objects.claim(
            conn,
            self._owner,
            self._lease_s,
            ask.want - len(got.rows),
            ask.now,
            supersede=self._supersede,
            exclude=ask.full,
        )
        got.rows, got.superseded = got.rows + found.rows, found.superseded
        await history.record_attempts(
            conn, _superseded_history(got.superseded, self._owner, ask.now)
        )

    async def claim_first(
        self, conn: AsyncConnection, batch: list[tuple[Held, Result]], ask: Ask
    ) -> Claimed:
        """PostgreSQL: the claim (``claim_in``) and its events' ledger, before the
        window's outcomes (``batch``) in the same transaction, or alone.

        First, so that the transaction takes its locks on ``events`` (every partition,
        the default one too) at its first statement, before any other table's, and
        never asks for one of them while holding another: the outcomes
        (``OutcomeWriter.settle_in``) then ask only for locks it holds already, besides
        those of the tables that refer to ``events`` and of the others, which a
        partition's ATTACH does not hold and a DETACH takes only after ``events``
        (``store.retention.partition_sql.hold_events``). The other way round, the outcomes' locks on
        some partitions and then the claim's on all deadlocked with ATTACH PARTITION.

        The window's events are still processing, leased to this owner: the claim of due
        events cannot take them, nor, told so, that of expired leases. The ledger is
        read by its own statement, after the claim's (a snapshot taken while the
        claimed rows are locked: any change committed to them before is seen)."""
        spare = [h.row.id for h, _ in batch]
        got = await self.claim_in(conn, ask, spare=spare)
        got.ledger = await claiming.finished_handlers_many(conn, [r.id for r in got.rows])
        return got
