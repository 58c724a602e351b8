"""Writing an outcome window: what the events that finished in it leave in the database.

The processor (``processing.processor``) collects the events that finish within a few
milliseconds of each other and writes their outcomes in one transaction (its
exchange, together with a claim): the ledger of the handlers each finished, then each
event's status fenced on its lease, then its history. This module is what that
transaction writes, and the log lines its commit is followed by.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy.ext.asyncio import AsyncConnection

from hookd.sources import Sources
from processing.attempt import Held, Result, RetryPolicy, attempt_outcome
from store.claims import claiming, history
from store.delivery import destinations, objects
from store.intake import sqlite_write
from store.intake.writer_link import WriterSocket
from store.rows import EventRow

log = logging.getLogger("hookd.processing")


@dataclass(frozen=True, slots=True)
class Plan:
    """A window's outcomes: the finished events, and the failures with their retry time
    (None: dead)."""

    batch: list[tuple[Held, Result]]
    failed: list[tuple[EventRow, Result, datetime | None]]


class OutcomeWriter:
    """The statements of a window's outcomes, for one processor (``owner``)."""

    def __init__(
        self,
        sources: Sources,
        *,
        owner: str,
        retry: RetryPolicy,
        rng: random.Random,
        box: WriterSocket | None = None,
    ) -> None:
        self._sources = sources
        self._owner = owner
        self._retry = retry
        self._rng = rng
        self._box = box

    def boxed(self, plan: Plan) -> bool:
        """Whether the box's one SQLite writer takes this window (``settle_boxed``):
        there is one, and every event of the window succeeded, skipped no destination
        and names no object. Failures, deferrals, skips and objects write more than the
        writer knows how to (``settle_in``)."""
        return self._box is not None and all(
            result.ok and not result.skipped and held.row.object_key is None
            for held, result in plan.batch
        )

    async def settle_boxed(self, plan: Plan, now: datetime) -> set[str]:
        """``settle_in``'s rows for a window of successes, written by the box's writer
        (``store.intake.sqlite_write.SqliteWriter.settle``) in its next transaction,
        with the receivers' inserts and the other processors' outcomes; the ids this
        owner still held. A writer that dies first fails it: the window is written again
        (the writer knows an attempt it already recorded)."""
        assert self._box is not None
        rows = [held.row for held, _ in plan.batch]
        results = [result for _, result in plan.batch]
        ids = [row.id for row in rows]
        ledger = [(held.row.id, name) for held, _ in plan.batch for name in held.done]
        attempts = self._attempts(rows, results, set(ids), {}, now)
        settlement = (
            self._owner,
            sqlite_write.sqlite_time(now),
            ledger,
            ids,
            history.attempt_params(attempts, sqlite_write.sqlite_time),
        )
        owned, _ = await self._box.call(sqlite_write.SETTLE, settlement)
        return set(owned)

    def plan(self, batch: list[tuple[Held, Result]], now: datetime) -> Plan:
        """What a window's outcomes write: each failure with when it may run again."""
        failed = [
            (held.row, result, self._retry_at(held.row, result, now))
            for held, result in batch
            if result.error is not None
        ]
        return Plan(batch, failed)

    async def settle_in(self, conn: AsyncConnection, plan: Plan, now: datetime) -> set[str]:
        """A window's outcomes, in the exchange's transaction: ledger rows, then each
        event's outcome, fenced on the lease (one taken over meanwhile records
        ``lease_lost``); the ids this owner still held.

        A crash before it commits means those leases expire and those events run
        again, past the handlers in the ledger; effects stay single through the
        handlers' idempotency keys."""
        rows = [held.row for held, _ in plan.batch]
        results = [result for _, result in plan.batch]
        await self._record_ledger(conn, plan, now)
        succeeded = [r.id for r, res in zip(rows, results, strict=True) if res.ok]
        owned = await claiming.mark_processed(conn, succeeded, self._owner, now)
        # Their objects' latest known state, in the same commit ([sources.order]).
        await objects.record_processed(
            conn, [r for r in rows if r.object_key is not None and r.id in owned], now
        )
        owned |= await self._defer(conn, rows, results, now)
        owned |= await self._mark_failed(conn, plan, now)
        retry_at_of = {row.id: retry_at for row, _, retry_at in plan.failed}
        await history.record_attempts(conn, self._attempts(rows, results, owned, retry_at_of, now))
        return owned

    async def _record_ledger(self, conn: AsyncConnection, plan: Plan, now: datetime) -> None:
        """The handlers and destinations each event finished, and those its filters
        skipped."""
        finished = [(held.row.id, name) for held, _ in plan.batch for name in held.done]
        await claiming.record_handlers(conn, finished, now)
        skipped = [(held.row.id, n) for held, res in plan.batch for n in res.skipped]
        await destinations.record_skipped(conn, skipped, now)

    async def _mark_failed(self, conn: AsyncConnection, plan: Plan, now: datetime) -> set[str]:
        """Each failure recorded, due again at its retry time or dead; the ids this
        owner still held."""
        owned: set[str] = set()
        for row, result, retry_at in plan.failed:
            assert result.error is not None
            if await claiming.mark_failed(
                conn,
                row.id,
                owner=self._owner,
                error=result.error,
                handler=result.handler,
                error_type=result.error_type,
                now=now,
                retry_at=retry_at,
            ):
                owned.add(row.id)
        return owned

    def log_settled(self, plan: Plan, owned: set[str], outcomes: list[str]) -> None:
        """After the commit: an outcome whose lease was lost, and each failure (with
        ``outcomes``, its outcome label), logged."""
        for held, result in plan.batch:
            if held.row.id not in owned and (result.ok or result.error is not None):
                log.warning("lease lost before completion", extra={"event_id": held.row.id})
        for (row, result, _), outcome in zip(plan.failed, outcomes, strict=True):
            # Which handler and what type, never the message: it may quote the body.
            fields = {
                "event_id": row.id,
                "source": row.source,
                "attempt": row.attempts,
                "outcome": outcome,
                "error_type": result.error_type,
            }
            if result.handler is not None:
                log.warning("handler failed", extra={**fields, "handler": result.handler})
            else:  # nothing a handler did: the configuration or hookd itself
                log.error("processing failed", extra=fields)

    def _retry_at(self, row: EventRow, result: Result, now: datetime) -> datetime | None:
        source = self._sources.get(row.source)
        max_attempts = source.config.max_attempts if source else 1
        # A destination that failed brings its own limit and retry policy.
        max_attempts = result.max_attempts or max_attempts
        if result.permanent or row.attempts >= max_attempts:
            return None
        delay_s = result.retry_in_s
        if delay_s is None:
            delay_s = self._retry.delay_s(row.attempts, self._rng)
        return now + timedelta(seconds=delay_s)

    async def _defer(
        self, conn: AsyncConnection, rows: list[EventRow], results: list[Result], now: datetime
    ) -> set[str]:
        """Events whose pass only put deliveries off: due again when the earliest of them
        may go, or parked until what holds them ends (``store.delivery.destinations``); the
        attempt given back. The ids this owner still held."""
        owned: set[str] = set()
        for row, result in zip(rows, results, strict=True):
            if result.ok or result.error is not None or not (result.until or result.blockers):
                continue
            until = result.until
            if until is None:
                held = await destinations.still_blocked(conn, result.blockers)
                until = destinations.parked_at(row.received_at) if held else now
            if await claiming.defer(conn, row.id, owner=self._owner, now=now, until=until):
                owned.add(row.id)
        return owned

    # -- history (``store.claims.history``): one record per attempt, written with its outcome --

    def _attempts(
        self,
        rows: list[EventRow],
        results: list[Result],
        owned: set[str],
        retry_at_of: Mapping[str, datetime | None],
        now: datetime,
    ) -> list[history.Attempt]:
        """The batch's attempts: each with the outcome it recorded, or ``lease_lost``
        for one whose claim was taken over meanwhile (it recorded nothing)."""
        out = []
        for row, result in zip(rows, results, strict=True):
            outcome = attempt_outcome(result, retry_at_of.get(row.id))
            if outcome is None:
                continue
            if row.id not in owned:
                outcome = history.AttemptOutcome.LEASE_LOST
            out.append(
                history.Attempt(
                    event_id=row.id,
                    attempt=row.attempts,
                    worker=self._owner,
                    at=result.started_at or now,
                    finished_at=now,
                    duration_s=result.duration_s,
                    outcome=outcome,
                    handler=result.handler,
                    error=result.error,
                    error_type=result.error_type,
                )
            )
        return out

    def released(
        self, attempts: Mapping[str, int], given_back: set[str], now: datetime
    ) -> list[history.Attempt]:
        """Attempts cut short by a shutdown: given back, to be made again."""
        return [
            history.Attempt(
                event_id=event_id,
                attempt=attempts[event_id],
                worker=self._owner,
                at=now,
                finished_at=now,
                outcome=history.AttemptOutcome.RELEASED,
            )
            for event_id in sorted(given_back)
        ]
