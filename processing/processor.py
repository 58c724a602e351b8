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
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from functools import cache
from typing import Any

from prometheus_client import Counter, Histogram
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from hookd import tracing
from hookd.backoff import full_jitter
from hookd.errors import ConfigError, PermanentError
from hookd.event import Event, Handler, idempotency_key
from hookd.ordering import document
from hookd.sources import Source, Sources
from processing.destinations import DEFERRED, FAILED, SKIPPED, Outcome, Router
from processing.filters import Document
from store import claims, db, destinations, history, objects
from store.crypto import BodyCipher
from store.destinations import Blocker
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
    "Processing outcomes per attempt (processed, retry, dead), and events superseded "
    "without running ([sources.order]).",
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
OUTCOMES = (EventStatus.PROCESSED, RETRY, EventStatus.DEAD, EventStatus.SUPERSEDED)


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


# [sources.order] fetch = true: (source, the event's JSON document) -> the full object
# from the provider's API, given to handlers as ``event.object`` (reconcile.objects).
FetchObject = Callable[[Source, Any], Awaitable[Any]]


def _count_superseded(superseded: list[objects.Superseded]) -> None:
    """Events a claim marked superseded: an outcome like processed, counted and logged."""
    for event_id, source, _ in superseded:
        _processed(source, EventStatus.SUPERSEDED).inc()
        log.info("superseded", extra={"event_id": event_id, "source": source})


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
        occurred_at=row.occurred_at,
        headers=dict(row.headers),
        body=body,
        object_key=row.object_key,
    )


def _span_outcome(result: _Result) -> str:
    if result.ok:
        return "processed"
    return "failed" if result.error is not None else "deferred"


def attempt_outcome(result: _Result, retry_at: datetime | None) -> str | None:
    """The outcome an attempt's history records: what it left the event in."""
    if result.ok:
        return history.AttemptOutcome.PROCESSED
    if result.error is not None:
        return history.AttemptOutcome.DEAD if retry_at is None else history.AttemptOutcome.RETRY
    return None


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
        router: Router | None = None,
        fetch: FetchObject | None = None,
    ) -> None:
        self._engine = engine
        self._sources = sources
        self._handlers = handlers
        # Destinations and handler filters (``processing.destinations``); None: neither.
        self._router = router
        self._cipher = cipher
        self._lease_s = lease_s
        self._handler_timeout_s = handler_timeout_s
        self._retry = retry or RetryPolicy()
        self._batch_size = batch_size
        self._transaction = db.transaction(engine)
        self._semaphore = asyncio.Semaphore(concurrency)
        self._rng = rng or random.Random()  # noqa: S311 - jitter, not secrecy
        self.owner = worker_id()
        # [sources.order]: the sources whose events of an object are claimed one at a
        # time per object (store.objects), those of them that supersede stale ones, and
        # what fetches an object for those with fetch = true.
        ordered = [s for s in sources if s.config.order is not None]
        self._ordered = frozenset(s.name for s in ordered)
        self._supersede = frozenset(
            s.name for s in ordered if s.config.order and s.config.order.supersedes
        )
        self._fetch = fetch
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
        claim_started = tracing.clock()  # 0 when tracing is off
        taken: list[EventRow] = []
        async with self._transaction() as conn:
            # Expired leases first, by their own statement, so that takeovers are counted.
            if self._expired_check_due():
                taken = await claims.claim_expired(
                    conn, self.owner, self._lease_s, self._batch_size, now
                )
            rows = taken
            # Events of objects ([sources.order]) first: one per object, at most.
            superseded: list[objects.Superseded] = []
            if self._ordered and len(rows) < self._batch_size:
                got = await objects.claim(
                    conn,
                    self.owner,
                    self._lease_s,
                    self._batch_size - len(rows),
                    now,
                    supersede=self._supersede,
                )
                rows, superseded = rows + got.rows, got.superseded
                await history.record_attempts(
                    conn, _superseded_history(superseded, self.owner, now)
                )
            if len(rows) < self._batch_size:
                rows = rows + await claims.claim_due(
                    conn,
                    self.owner,
                    self._lease_s,
                    self._batch_size - len(rows),
                    now,
                    expired=False,
                )
            # The attempts of the taken-over claims ended without an outcome.
            await history.record_attempts(conn, _abandoned(taken, now))
        _count_superseded(superseded)
        if not rows:
            return len(superseded)  # not nothing: a drain goes on
        for row in rows:
            _claims(row.source).inc()
        for row in taken:
            _takeovers(row.source).inc()
        # The claim's span (tracing on only), linked to each event's stored context and
        # linked to from each event's processing span.
        claim = (
            tracing.claimed(
                "hookd.claim",
                {
                    "hookd.claim.count": len(rows),
                    "hookd.claim.takeovers": len(taken),
                    "hookd.claim.superseded": len(superseded),
                    "hookd.sources": sorted({r.source for r in rows}),
                },
                claim_started,
                ((r.id, r.traceparent) for r in rows),
            )
            if claim_started
            else None
        )
        started = time.perf_counter()
        if self._router is not None:
            await self._router.refresh(self._engine)
        async with self._engine.connect() as conn:
            ledger = await claims.finished_handlers_many(conn, [r.id for r in rows])
        # Handlers that finish in this pass, per event; written with the outcome.
        done: dict[str, list[str]] = {r.id: [] for r in rows}
        try:
            results = await asyncio.gather(
                *(
                    self._guarded(row, ledger.get(row.id, set()), done[row.id], claim)
                    for row in rows
                )
            )
        except asyncio.CancelledError:
            # Shutting down: record what finished and hand the claims back now
            # instead of leaving them to wait out their lease.
            attempts = {r.id: r.attempts for r in rows}
            await asyncio.shield(self._release([r.id for r in rows], done, attempts))
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
        async with self._transaction() as conn:
            await claims.record_handlers(
                conn, [(event_id, name) for event_id, names in done.items() for name in names], now
            )
            skipped = [(r.id, n) for r, res in zip(rows, results, strict=True) for n in res.skipped]
            await destinations.record_skipped(conn, skipped, now)
            owned = await claims.mark_processed(conn, succeeded, self.owner, now)
            # Their objects' latest known state, in the same commit ([sources.order]).
            await objects.record_processed(
                conn, [r for r in rows if r.object_key is not None and r.id in owned], now
            )
            owned |= await self._defer(conn, rows, results, now)
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
            retry_at_of = {row.id: retry_at for row, _, retry_at in failed}
            await history.record_attempts(
                conn, self._attempts(rows, results, owned, retry_at_of, now)
            )
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
        # A destination that failed brings its own limit and retry policy.
        max_attempts = result.max_attempts or max_attempts
        if result.permanent or row.attempts >= max_attempts:
            return None
        delay_s = result.retry_in_s
        if delay_s is None:
            delay_s = self._retry.delay_s(row.attempts, self._rng)
        return now + timedelta(seconds=delay_s)

    async def _defer(
        self, conn: AsyncConnection, rows: list[EventRow], results: list[_Result], now: datetime
    ) -> set[str]:
        """Events whose pass only put deliveries off: due again when the earliest of them
        may go, or parked until what holds them ends (``store.destinations``); the
        attempt given back. The ids this owner still held."""
        owned: set[str] = set()
        for row, result in zip(rows, results, strict=True):
            if result.ok or result.error is not None or not (result.until or result.blockers):
                continue
            until = result.until
            if until is None:
                held = await destinations.still_blocked(conn, result.blockers)
                until = destinations.parked_at(row.received_at) if held else now
            if await claims.defer(conn, row.id, owner=self.owner, now=now, until=until):
                owned.add(row.id)
        return owned

    def _attempt_limit(self, source: Source) -> int:
        """The most attempts an event of ``source`` may use: its handlers' or any of its
        destinations' ``max_attempts``."""
        limit = source.config.max_attempts
        if self._router is not None:
            limit = max(limit, self._router.attempt_limit(source.name))
        return limit

    async def _release(
        self, event_ids: list[str], done: dict[str, list[str]], attempts: dict[str, int]
    ) -> None:
        try:
            async with self._transaction() as conn:
                now = datetime.now(UTC)
                await claims.record_handlers(
                    conn, [(e, name) for e, names in done.items() for name in names], now
                )
                given_back = await claims.release(conn, event_ids, self.owner, now)
                await history.record_attempts(conn, self._released(attempts, given_back, now))
        except Exception as exc:  # the lease expiry recovers them anyway
            log.warning("could not release claims", extra={"error": type(exc).__name__})

    # -- history (``store.history``): one record per attempt, written with its outcome --

    def _attempts(
        self,
        rows: list[EventRow],
        results: list[_Result],
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
                    worker=self.owner,
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

    def _released(
        self, attempts: Mapping[str, int], given_back: set[str], now: datetime
    ) -> list[history.Attempt]:
        """Attempts cut short by a shutdown: given back, to be made again."""
        return [
            history.Attempt(
                event_id=event_id,
                attempt=attempts[event_id],
                worker=self.owner,
                at=now,
                finished_at=now,
                outcome=history.AttemptOutcome.RELEASED,
            )
            for event_id in sorted(given_back)
        ]

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

    async def _guarded(
        self, row: EventRow, finished: set[str], done: list[str], claim: Any = None
    ) -> _Result:
        async with self._semaphore:
            # When the attempt started and how long it took, for its history.
            started_at, clock = datetime.now(UTC), time.perf_counter()
            # One span per attempt, in the trace the receiver started (its stored context),
            # linked to its claim's span (``claim``: None when tracing is off).
            attributes: dict[str, str | int] = {
                "hookd.event_id": row.id,
                "hookd.source": row.source,
                "hookd.attempt": row.attempts,
            }
            with tracing.span(
                "hookd.process", attributes, parent=row.traceparent, link=claim
            ) as current:
                result = await self._attempt(row, finished, done)
                tracing.annotate(current, {"hookd.outcome": _span_outcome(result)})
                if result.error_type is not None:
                    tracing.failed(current, result.error_type)
            return replace(result, started_at=started_at, duration_s=time.perf_counter() - clock)

    async def _attempt(self, row: EventRow, finished: set[str], done: list[str]) -> _Result:
        """``_process``, any exception in it made a failed attempt."""
        try:
            result = await self._process(row, finished, done)
        except Exception as exc:
            # Failing outside the handlers (building the Event, a bug) is an attempt
            # like any other: recorded, retried with backoff, dead at max_attempts.
            # Left unrecorded, the event would sit in "processing" until its lease
            # ran out and be claimed again, past max_attempts, for ever. The text is
            # neither stored nor logged: it may quote the body.
            kind = type(exc).__name__
            result = _Result(
                ok=False,
                error=f"processing failed before the handlers ran: {kind}",
                error_type=kind,
            )
        return result

    async def _process(self, row: EventRow, finished: set[str], done: list[str]) -> _Result:
        """Run the handlers not yet in the ledger, in order, appending each that finishes."""
        source = self._sources.get(row.source)
        if source is None:
            return _Result(ok=False, error="source is no longer configured", permanent=True)
        if row.attempts > (limit := self._attempt_limit(source)):
            # Claimed again after an attempt that recorded no outcome (its worker died or
            # its lease ran out) was already the last one: stop here, or a handler that
            # kills its worker would be run for ever.
            return _Result(
                ok=False,
                error=(
                    f"attempt {row.attempts} is past max_attempts ({limit}):"
                    " an earlier attempt ended without an outcome (its worker stopped or its"
                    " lease ran out), or max_attempts was lowered"
                ),
                permanent=True,
            )
        chain = self._handlers.get(row.source, [])
        if not chain and not (self._router and self._router.has_destinations(row.source)):
            return _Result(ok=True)
        try:
            body = self._cipher.open(row.body or b"", row.body_encrypted)
        except ConfigError as exc:
            return _Result(
                ok=False, error=UNDECRYPTABLE, error_type=type(exc).__name__, permanent=True
            )
        event = event_of(row, body)
        if self._fetch is not None and source.config.order and source.config.order.fetch:
            try:
                async with asyncio.timeout(self._handler_timeout_s):
                    fetched = await self._fetch(source, document(body, row.headers))
                event = replace(event, object=fetched)
            except Exception as exc:  # the provider's API: retried like a handler's failure
                kind = type(exc).__name__
                error = f"fetching the object failed: {kind}"
                return _Result(ok=False, error=error, error_type=kind)
        return await self._run(row, event, chain, finished, done)

    async def _run(
        self,
        row: EventRow,
        event: Event,
        chain: list[tuple[str, Handler]],
        finished: set[str],
        done: list[str],
    ) -> _Result:
        """The handlers not in the ledger, in order (a failure stops the ones after it),
        and beside them every destination not in it (each on its own: one failing
        neither stops nor repeats another). A filter that does not select the event
        skips its handler or destination (``skipped``), once."""
        document = Document(event.body)
        router = self._router
        skipped: list[str] = []
        failure: _Result | None = None
        for name, handler in chain:
            if name in finished:
                continue
            if router is not None and not router.handler_selects(row.source, name, event, document):
                skipped.append(name)
                continue
            deadline = asyncio.timeout(self._handler_timeout_s)
            try:
                with tracing.span("hookd.handler", {"hookd.handler": name}) as current:
                    try:
                        async with deadline:
                            await handler(
                                replace(event, idempotency_key=idempotency_key(row.id, name))
                            )
                    except Exception as exc:
                        tracing.failed(current, type(exc).__name__)
                        raise
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
                failure = _Result(
                    ok=False,
                    error=summary,
                    handler=name,
                    error_type=kind,
                    permanent=permanent,
                )
                break
            done.append(name)
        outcomes = (
            await router.deliver_all(
                self._engine,
                event,
                attempt=row.attempts,
                finished=finished,
                document=document,
                owner=self.owner,
                done=done,
            )
            if router is not None
            else []
        )
        return self._combined(row, failure, outcomes, skipped)

    def _combined(
        self,
        row: EventRow,
        failure: _Result | None,
        outcomes: list[Outcome],
        skipped: list[str],
    ) -> _Result:
        """One result for the pass: a failure if anything failed (dead if any failing one
        failed for good or has no attempt left; its error first), else put off if some
        delivery was, else done. Delivered destinations are in the ledger's ``done``."""
        # A permanent failure first: it is why the event goes dead.
        failed = sorted((o for o in outcomes if o.outcome == FAILED), key=lambda o: not o.permanent)
        deferred = [o for o in outcomes if o.outcome == DEFERRED]
        skipped += [o.name for o in outcomes if o.outcome == SKIPPED]
        if failure is not None or failed:
            source = self._sources.get(row.source)
            limits = [o.max_attempts or 1 for o in failed]
            delays = [o.retry_in_s for o in failed if o.retry_in_s is not None]
            if failure is not None:
                limits.append(source.config.max_attempts if source else 1)
                delays.append(self._retry.delay_s(row.attempts, self._rng))
            first = failure
            if first is None or (failed and failed[0].permanent and not first.permanent):
                first = _Result(
                    ok=False,
                    error=failed[0].error,
                    handler=failed[0].name,
                    error_type=failed[0].error_type,
                )
            more = len(failed) + (failure is not None) - 1
            return replace(
                first,
                error=f"{first.error} (and {more} more)" if more else first.error,
                permanent=first.permanent or any(o.permanent for o in failed),
                max_attempts=min(limits),
                retry_in_s=min(delays) if delays else None,
                skipped=tuple(skipped),
            )
        if deferred:
            timed = [o.until for o in deferred if o.until is not None]
            return _Result(
                ok=False,
                skipped=tuple(skipped),
                until=min(timed) if timed else None,
                blockers=tuple(o.blocker for o in deferred if o.blocker is not None),
            )
        return _Result(ok=True, skipped=tuple(skipped))


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
    # Set by ``Processor._guarded``: when the attempt started, and how long it ran.
    started_at: datetime | None = None
    duration_s: float | None = None
    # Destinations (``Processor._combined``): handlers and destinations the filter left
    # out; a failure's attempt limit and retry delay when a destination set them; and
    # for a pass that only put deliveries off (``ok`` false, no ``error``): when to try
    # again, or what the event is parked behind.
    skipped: tuple[str, ...] = ()
    max_attempts: int | None = None
    retry_in_s: float | None = None
    until: datetime | None = None
    blockers: tuple[Blocker, ...] = ()
