"""The destinations' circuit breakers, as one process moves them (``store.delivery.destinations``
holds their shared state).

``failures`` in a row across every process, or a failure rate in this process's
recent deliveries (``Recent``), opens a destination's breaker for ``cooldown_s``; a
success closes it. ``processing.destinations.Router`` asks ``Breakers`` what each
delivery's outcome does to its breaker.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from dataclasses import dataclass, field
from datetime import UTC, datetime

from sqlalchemy.ext.asyncio import AsyncEngine

from processing.delivery import Destination
from store.delivery import destinations as state
from store.delivery.destinations import BreakerRow
from store.status import BreakerState

log = logging.getLogger("hookd.processing")


@dataclass
class Recent:
    """A destination's recent deliveries in this process: (when, failed)."""

    window_s: float
    seen: deque[tuple[float, bool]] = field(default_factory=deque)

    def add(self, failed: bool) -> tuple[int, int]:
        now = time.monotonic()
        self.seen.append((now, failed))
        while self.seen and self.seen[0][0] < now - self.window_s:
            self.seen.popleft()
        return len(self.seen), sum(f for _, f in self.seen)


class Breakers:
    """Every destination's breaker as last read (``rows``, by (source, destination)) or
    written here, and its recent deliveries in this process."""

    def __init__(self) -> None:
        self.rows: dict[tuple[str, str], BreakerRow] = {}
        self._recent: dict[tuple[str, str], Recent] = {}

    async def success(self, engine: AsyncEngine, d: Destination, probe: bool) -> None:
        """A delivery the destination answered: it is up. Recorded when it changes
        the breaker (a probe, failures counted, not closed)."""
        key = (d.source, d.name)
        if d.config.breaker.enabled:
            self._recent_of(d).add(failed=False)
        row = self.rows.get(key)
        if not probe and (row is None or (row.state == BreakerState.CLOSED and not row.failures)):
            return
        try:
            async with engine.begin() as conn:
                row, closed = await state.record_success(
                    conn, d.source, d.name, now=datetime.now(UTC)
                )
        except Exception as exc:  # advisory state: the next delivery tries again
            log.warning(
                "could not record a breaker success",
                extra={"source": d.source, "destination": d.name, "error": type(exc).__name__},
            )
            return
        self.rows[key] = row
        if closed:
            log.info(
                "destination breaker closed", extra={"source": d.source, "destination": d.name}
            )

    async def failure(self, engine: AsyncEngine, d: Destination, kind: str) -> None:
        """A delivery that failed as a retry could mend (``kind``: its error's type):
        counted, and the breaker opened past its threshold or failure rate."""
        breaker = d.config.breaker
        if not breaker.enabled:
            return
        seen, failed = self._recent_of(d).add(failed=True)
        trip = seen >= breaker.min_deliveries and failed / seen >= breaker.failure_rate
        try:
            async with engine.begin() as conn:
                row, opened = await state.record_failure(
                    conn,
                    d.source,
                    d.name,
                    now=datetime.now(UTC),
                    threshold=breaker.failures,
                    cooldown_s=breaker.cooldown_s,
                    reason=f"delivery failed: {kind}",
                    trip=trip,
                )
        except Exception as exc:
            log.warning(
                "could not record a breaker failure",
                extra={"source": d.source, "destination": d.name, "error": type(exc).__name__},
            )
            return
        self.rows[(d.source, d.name)] = row
        if opened:
            log.warning(
                "destination breaker opened",
                extra={
                    "source": d.source,
                    "destination": d.name,
                    "failures": row.failures,
                    "cooldown_s": breaker.cooldown_s,
                },
            )

    def _recent_of(self, d: Destination) -> Recent:
        key = (d.source, d.name)
        recent = self._recent.get(key)
        if recent is None:
            recent = self._recent[key] = Recent(d.config.breaker.window_s)
        return recent
