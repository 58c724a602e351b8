"""The leases a processor holds: renewed while their events are held (read ahead,
running or waiting for their outcome window), given back when it stops.

Renewed ``HEARTBEATS_PER_LEASE`` times per lease, a healthy attempt longer than its
lease is never taken over; a dead worker's events are, one lease after its last beat.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass, field
from datetime import UTC, datetime

from sqlalchemy.ext.asyncio import AsyncConnection

from processing.attempt import Held
from processing.outcomes import OutcomeWriter
from processing.slots import Slots
from store.claims import claiming, history

log = logging.getLogger("hookd.processing")

# Leases held are renewed this many times per lease: a healthy attempt longer than its
# lease is never taken over; a dead worker's events are, one lease after its last beat.
HEARTBEATS_PER_LEASE = 3

Transaction = Callable[[], contextlib.AbstractAsyncContextManager[AsyncConnection]]


@dataclass(eq=False)
class Leases:
    """Renewal and release of the leases of the events in ``slots``."""

    transaction: Transaction
    slots: Slots
    writer: OutcomeWriter
    _: KW_ONLY
    owner: str
    lease_s: float
    beat_every_s: float = field(init=False)

    def __post_init__(self) -> None:
        self.beat_every_s = self.lease_s / HEARTBEATS_PER_LEASE

    async def renew(self) -> None:
        """Renew the lease of every event held here. One taken over meanwhile (the
        database was away past a lease) is not started if it was only read ahead."""
        held_now = self.slots.held
        ids = list(held_now)
        if not ids:
            return
        started = time.monotonic()
        try:
            async with self.transaction() as conn:
                kept = await claiming.renew(conn, ids, self.owner, self.lease_s, datetime.now(UTC))
        except Exception as exc:  # the database is away: the next beat tries again
            log.warning("lease renewal failed", extra={"error": type(exc).__name__})
            return
        for event_id in ids:
            held = held_now.get(event_id)
            if held is None:
                continue
            if event_id in kept:
                held.lease_end = started + self.lease_s
            elif held.task is None:
                self.slots.unready(held)
            else:
                log.warning("lease lost before completion", extra={"event_id": event_id})

    async def release(self, given: list[Held]) -> None:
        """Give ``given`` back, due at once, recording the handlers each finished; the
        attempt is given back too (``claiming.release``)."""
        for held in given:
            self.slots.held.pop(held.row.id, None)
        if not given:
            return
        try:
            async with self.transaction() as conn:
                now = datetime.now(UTC)
                await claiming.record_handlers(
                    conn, [(h.row.id, name) for h in given for name in h.done], now
                )
                ids = [h.row.id for h in given]
                back = await claiming.release(conn, ids, self.owner, now)
                attempts = {h.row.id: h.row.attempts for h in given}
                await history.record_attempts(conn, self.writer.released(attempts, back, now))
        except Exception as exc:  # the lease expiry recovers them anyway
            log.warning("could not release claims", extra={"error": type(exc).__name__})
