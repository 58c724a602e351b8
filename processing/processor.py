"""Turning stored events into effects: claim, run handlers, record, retry or bury.

The same ``Processor`` runs inside ``hookd serve`` (no Redis) and inside
``hookd worker`` (arq); what differs is only what wakes it up.
"""

from __future__ import annotations

import asyncio
import logging
import math
import random
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from functools import cache

from prometheus_client import Counter, Histogram
from sqlalchemy.ext.asyncio import AsyncEngine

from hookd.backoff import full_jitter
from hookd.errors import ConfigError, PermanentError
from hookd.event import Event, Handler, idempotency_key
from hookd.sources import Sources
from store import claims
from store.crypto import BodyCipher
from store.ids import worker_id
from store.rows import EventRow
from store.status import EventStatus

log = logging.getLogger("hookd.processing")

# A crashed worker's claims are taken over at most this long after their lease ends.
EXPIRED_CHECK_S = 2.0

# The dead letter's reason for a body no configured key opens. Retrying cannot help
# (the keys are this process's configuration); the key back in the set and a replay can.
UNDECRYPTABLE = (
    "body cannot be decrypted with the configured HOOKD_ENCRYPTION_KEYS: add the key it "
    "was stored with (see docs/operations.md, Encryption keys), then replay the event"
)

# The outcome label of hookd_events_processed_total is the status an attempt left the
# event in (processed, dead), except for one that will run again: "retry".
RETRY = "retry"
EVENTS_PROCESSED = Counter(
    "hookd_events_processed_total",
    "Processing outcomes per attempt (processed, retry, dead).",
    ["source", "outcome"],
)
PROCESSING_SECONDS = Histogram(
    "hookd_processing_seconds",
    "Time to run an event's handlers, per attempt.",
    ["source"],
    buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0),
)
CLAIMS = Counter(
    "hookd_claims_total",
    "Events claimed for processing (each claim is an attempt), takeovers included.",
    ["source"],
)
TAKEOVERS = Counter(
    "hookd_lease_takeovers_total",
    "Claims of events whose previous claim's lease had expired: its worker died or stalled.",
    ["source"],
)
OUTCOMES = (EventStatus.PROCESSED, RETRY, EventStatus.DEAD)


def initialise_metrics(sources: Iterable[str]) -> None:
    """Every source's series of the processing families, at 0 (see ingest.metrics)."""
    for source in sources:
        for outcome in OUTCOMES:
            EVENTS_PROCESSED.labels(source, outcome)
        PROCESSING_SECONDS.labels(source)
        CLAIMS.labels(source)
        TAKEOVERS.labels(source)


@cache
def _processed(source: str, outcome: str) -> Counter:
    return EVENTS_PROCESSED.labels(source, outcome)


@cache
def _processing_seconds(source: str) -> Histogram:
    return PROCESSING_SECONDS.labels(source)


@cache
def _claims(source: str) -> Counter:
    return CLAIMS.labels(source)


@cache
def _takeovers(source: str) -> Counter:
    return TAKEOVERS.labels(source)


def event_of(row: EventRow, body: bytes) -> Event:
    """The ``Event`` handlers get for a stored row (its idempotency key set per handler)."""
    return Event(
        id=row.id,
        source=row.source,
        provider=row.provider,
        type=row.type,
        dedupe_key=row.dedupe_key,
        origin=row.origin,
        received_at=row.received_at,
        headers=dict(row.headers),
        body=body,
    )


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Exponential backoff with full jitter: uniform(0, min(cap, base · 2^(n-1)))."""

    base_s: float = 1.0
    cap_s: float = 600.0

    def delay_s(self, attempt: int, rng: random.Random) -> float:
        return full_jitter(rng, self.base_s, min(max(attempt - 1, 0), 60), self.cap_s)


class Processor:
    def __init__(
        self,
        engine: AsyncEngine,
        sources: Sources,
        handlers: Mapping[str, list[tuple[str, Handler]]],
        cipher: BodyCipher,
        *,
        lease_s: float = 120.0,
        handler_timeout_s: float = 30.0,
        retry: RetryPolicy | None = None,
        batch_size: int = 64,
        concurrency: int = 16,
        rng: random.Random | None = None,
    ) -> None:
        self._engine = engine
        self._sources = sources
        self._handlers = handlers
        self._cipher = cipher
        self._lease_s = lease_s
        self._handler_timeout_s = handler_timeout_s
        self._retry = retry or RetryPolicy()
        self._batch_size = batch_size
        self._semaphore = asyncio.Semaphore(concurrency)
        self._rng = rng or random.Random()  # noqa: S311 - jitter, not secrecy
        self.owner = worker_id()
        initialise_metrics(s.name for s in sources)
        # Set on shutdown: finish the batch in hand, claim no more.
        self.stopping = False
        self._expired_checked_at = -math.inf
        # When a drain last ended here, and how many are running (see ``idle_s``).
        self._drained_at = time.monotonic()
        self._draining = 0

    def _expired_check_due(self) -> bool:
        """Look for expired leases at most every EXPIRED_CHECK_S (see ``claim_due``)."""
        now = time.monotonic()
        if now - self._expired_checked_at < EXPIRED_CHECK_S:
            return False
        self._expired_checked_at = now
        return True

    async def run_once(self) -> int:
        """Claim one batch of due events and process them; the number claimed."""
        now = datetime.now(UTC)
        taken: list[EventRow] = []
        async with self._engine.begin() as conn:
            # Expired leases first, by their own statement, so that takeovers are counted.
            if self._expired_check_due():
                taken = await claims.claim_expired(
                    conn, self.owner, self._lease_s, self._batch_size, now
                )
            rows = taken
            if len(taken) < self._batch_size:
                rows = taken + await claims.claim_due(
                    conn,
                    self.owner,
                    self._lease_s,
                    self._batch_size - len(taken),
                    now,
                    expired=False,
                )
        if not rows:
            return 0
        for row in rows:
            _claims(row.source).inc()
        for row in taken:
            _takeovers(row.source).inc()
        started = time.perf_counter()
        async with self._engine.connect() as conn:
            ledger = await claims.finished_handlers_many(conn, [r.id for r in rows])
        # Handlers that finish in this pass, per event; written with the outcome.
        done: dict[str, list[str]] = {r.id: [] for r in rows}
        try:
            results = await asyncio.gather(
                *(self._guarded(row, ledger.get(row.id, set()), done[row.id]) for row in rows)
            )
        except asyncio.CancelledError:
            # Shutting down: record what finished and hand the claims back now
            # instead of leaving them to wait out their lease.
            await asyncio.shield(self._release([r.id for r in rows], done))
            raise
        await self._settle(rows, results, done, started)
        return len(rows)

    async def _settle(
        self,
        rows: list[EventRow],
        results: list[_Result],
        done: dict[str, list[str]],
        started: float,
    ) -> None:
        """One transaction for the batch: ledger rows, then each event's outcome.

        A crash before it commits means the leases expire and the batch runs
        again; effects stay single through the handlers' idempotency keys.
        """
        now = datetime.now(UTC)
        failed: list[tuple[EventRow, _Result, datetime | None]] = []
        for row, result in zip(rows, results, strict=True):
            if result.error is not None:
                failed.append((row, result, self._retry_at(row, result, now)))
        succeeded = [r.id for r, res in zip(rows, results, strict=True) if res.ok]
        async with self._engine.begin() as conn:
            await claims.record_handlers(
                conn, [(event_id, name) for event_id, names in done.items() for name in names], now
            )
            owned = await claims.mark_processed(conn, succeeded, self.owner, now)
            for row, result, retry_at in failed:
                assert result.error is not None
                if await claims.mark_failed(
                    conn,
                    row.id,
                    owner=self.owner,
                    error=result.error,
                    handler=result.handler,
                    error_type=result.error_type,
                    now=now,
                    retry_at=retry_at,
                ):
                    owned.add(row.id)
        elapsed = time.perf_counter() - started
        for row, result in zip(rows, results, strict=True):
            if row.id not in owned:
                if result.ok or result.error is not None:
                    log.warning("lease lost before completion", extra={"event_id": row.id})
                continue
            if result.ok:
                _processed(row.source, EventStatus.PROCESSED).inc()
                _processing_seconds(row.source).observe(elapsed)
        for row, result, retry_at in failed:
            outcome = EventStatus.DEAD if retry_at is None else RETRY
            if row.id in owned:
                _processed(row.source, outcome).inc()
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

    def _retry_at(self, row: EventRow, result: _Result, now: datetime) -> datetime | None:
        source = self._sources.get(row.source)
        max_attempts = source.config.max_attempts if source else 1
        if result.permanent or row.attempts >= max_attempts:
            return None
        return now + timedelta(seconds=self._retry.delay_s(row.attempts, self._rng))

    async def _release(self, event_ids: list[str], done: dict[str, list[str]]) -> None:
        try:
            async with self._engine.begin() as conn:
                now = datetime.now(UTC)
                await claims.record_handlers(
                    conn, [(e, name) for e, names in done.items() for name in names], now
                )
                await claims.release(conn, event_ids, self.owner, now)
        except Exception as exc:  # the lease expiry recovers them anyway
            log.warning("could not release claims", extra={"error": type(exc).__name__})

    async def drain(self, max_s: float = 30.0) -> int:
        """Process until nothing is due (or ``max_s`` passed): the number processed."""
        deadline = time.monotonic() + max_s
        total = 0
        self._draining += 1
        try:
            while time.monotonic() < deadline and not self.stopping:
                count = await self.run_once()
                total += count
                if count == 0:
                    break
        finally:
            self._draining -= 1
            self._drained_at = time.monotonic()
        return total

    def idle_s(self) -> float:
        """Seconds since a drain last ended in this process (0 while one runs)."""
        return 0.0 if self._draining else time.monotonic() - self._drained_at

    async def _guarded(self, row: EventRow, finished: set[str], done: list[str]) -> _Result:
        async with self._semaphore:
            try:
                return await self._process(row, finished, done)
            except Exception as exc:
                # Failing outside the handlers (building the Event, a bug) is an attempt
                # like any other: recorded, retried with backoff, dead at max_attempts.
                # Left unrecorded, the event would sit in "processing" until its lease
                # ran out and be claimed again, past max_attempts, for ever. The text is
                # neither stored nor logged: it may quote the body.
                kind = type(exc).__name__
                return _Result(
                    ok=False,
                    error=f"processing failed before the handlers ran: {kind}",
                    error_type=kind,
                )

    async def _process(self, row: EventRow, finished: set[str], done: list[str]) -> _Result:
        """Run the handlers not yet in the ledger, in order, appending each that finishes."""
        source = self._sources.get(row.source)
        if source is None:
            return _Result(ok=False, error="source is no longer configured", permanent=True)
        if row.attempts > source.config.max_attempts:
            # Claimed again after an attempt that recorded no outcome (its worker died or
            # its lease ran out) was already the last one: stop here, or a handler that
            # kills its worker would be run for ever.
            return _Result(
                ok=False,
                error=(
                    f"attempt {row.attempts} is past max_attempts ({source.config.max_attempts}):"
                    " an earlier attempt ended without an outcome (its worker stopped or its"
                    " lease ran out), or max_attempts was lowered"
                ),
                permanent=True,
            )
        chain = self._handlers.get(row.source, [])
        if not chain:
            return _Result(ok=True)
        try:
            body = self._cipher.open(row.body or b"", row.body_encrypted)
        except ConfigError as exc:
            return _Result(
                ok=False, error=UNDECRYPTABLE, error_type=type(exc).__name__, permanent=True
            )
        event = event_of(row, body)
        for name, handler in chain:
            if name in finished:
                continue
            deadline = asyncio.timeout(self._handler_timeout_s)
            try:
                async with deadline:
                    await handler(replace(event, idempotency_key=idempotency_key(row.id, name)))
            except Exception as exc:  # any handler failure is retried, a PermanentError not
                kind = type(exc).__name__
                permanent = isinstance(exc, PermanentError)
                text = str(exc)
                if deadline.expired():
                    text = f"did not finish within {self._handler_timeout_s:g}s"
                if permanent:  # its reason code says what it is
                    summary = f"{name}: {text}"
                else:
                    summary = f"{name}: {kind}: {text}" if text else f"{name}: {kind}"
                return _Result(
                    ok=False,
                    error=summary,
                    handler=name,
                    error_type=kind,
                    permanent=permanent,
                )
            done.append(name)
        return _Result(ok=True)


@dataclass(frozen=True, slots=True)
class _Result:
    """One event's pass: all handlers done, or the failure to record.

    ``error`` is the one-line summary stored on the event; ``handler`` the handler
    that raised (None when processing failed outside the handlers) and
    ``error_type`` the exception's type name, stored beside it.
    """

    ok: bool
    error: str | None = None
    handler: str | None = None
    error_type: str | None = None
    permanent: bool = False
