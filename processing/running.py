"""One attempt at a claimed event: its handlers not yet in the ledger, in order, and its
destinations beside them; one ``Result`` for the pass (``processing.processor`` holds
the slots this runs in and writes what it returns).
"""

from __future__ import annotations

import random
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import KW_ONLY, dataclass, replace
from datetime import UTC, datetime
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine

from hookd import logs, tracing
from hookd.errors import ConfigError, PermanentError
from hookd.event import Event, Handler, idempotency_key
from hookd.ordering import document
from hookd.sources import Source, Sources
from processing.attempt import Result, RetryPolicy, event_of
from processing.deadlines import DeadlineExceeded, within
from processing.destinations import DEFERRED, FAILED, SKIPPED, Outcome, Router
from processing.filters import Document
from store.crypto import BodyCipher
from store.rows import EventRow

# The dead letter's reason for a body no configured key opens. Retrying cannot help
# (the keys are this process's configuration); the key back in the set and a replay can.
UNDECRYPTABLE = (
    "body cannot be decrypted with the configured HOOKD_ENCRYPTION_KEYS: add the key it "
    "was stored with (see docs/operations.md, Encryption keys), then replay the event"
)

# [sources.order] fetch = true: (source, the event's JSON document) -> the full object
# from the provider's API, given to handlers as ``event.object`` (reconcile.objects).
FetchObject = Callable[[Source, Any], Awaitable[Any]]


def _span_outcome(result: Result) -> str:
    if result.ok:
        return "processed"
    return "failed" if result.error is not None else "deferred"


@dataclass(eq=False)
class EventRunner:
    """Runs an event's attempt (``guarded``): what the processor's slots run."""

    engine: AsyncEngine
    sources: Sources
    handlers: Mapping[str, list[tuple[str, Handler]]]
    cipher: BodyCipher
    _: KW_ONLY
    owner: str
    handler_timeout_s: float
    retry: RetryPolicy
    rng: random.Random
    # Destinations and handler filters (``processing.destinations``); None: neither.
    router: Router | None
    fetch: FetchObject | None

    async def guarded(
        self, row: EventRow, finished: set[str], done: list[str], claim: Any = None
    ) -> Result:
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

    async def _attempt(self, row: EventRow, finished: set[str], done: list[str]) -> Result:
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
            result = Result(
                ok=False,
                error=f"processing failed before the handlers ran: {kind}",
                error_type=kind,
            )
        return result

    async def _process(self, row: EventRow, finished: set[str], done: list[str]) -> Result:
        """Run the handlers not yet in the ledger, in order, appending each that finishes."""
        source = self.sources.get(row.source)
        if source is None:
            return Result(ok=False, error="source is no longer configured", permanent=True)
        if (past := self._past_limit(row, source)) is not None:
            return past
        chain = self.handlers.get(row.source, [])
        if not chain and not (self.router and self.router.has_destinations(row.source)):
            return Result(ok=True)
        try:
            body = self.cipher.open(row.body or b"", row.body_encrypted)
        except ConfigError as exc:
            return Result(
                ok=False, error=UNDECRYPTABLE, error_type=type(exc).__name__, permanent=True
            )
        event = await self._fetched(source, event_of(row, body), body, row)
        if isinstance(event, Result):
            return event
        return await self._run(row, event, chain, finished, done)

    def _past_limit(self, row: EventRow, source: Source) -> Result | None:
        """The failure of an event whose attempts are past its limit; None: run it."""
        if row.attempts > (limit := self.attempt_limit(source)):
            # Claimed again after an attempt that recorded no outcome (its worker died or
            # its lease ran out) was already the last one: stop here, or a handler that
            # kills its worker would be run for ever.
            return Result(
                ok=False,
                error=(
                    f"attempt {row.attempts} is past max_attempts ({limit}):"
                    " an earlier attempt ended without an outcome (its worker stopped or its"
                    " lease ran out), or max_attempts was lowered"
                ),
                permanent=True,
            )
        return None

    async def _fetched(
        self, source: Source, event: Event, body: bytes, row: EventRow
    ) -> Event | Result:
        """The event with its object fetched (``[sources.order] fetch``), or the failure;
        as it is for a source that fetches none."""
        if self.fetch is None or not (source.config.order and source.config.order.fetch):
            return event
        try:
            fetched = await within(
                self.fetch(source, document(body, row.headers)),
                self.handler_timeout_s,
                what="object fetch",
            )
        except Exception as exc:  # the provider's API: retried like a handler's failure
            kind = type(exc).__name__
            error = f"fetching the object failed: {kind}"
            return Result(ok=False, error=error, error_type=kind)
        return replace(event, object=fetched)

    def attempt_limit(self, source: Source) -> int:
        """The most attempts an event of ``source`` may use: its handlers' or any of its
        destinations' ``max_attempts``."""
        limit = source.config.max_attempts
        if self.router is not None:
            limit = max(limit, self.router.attempt_limit(source.name))
        return limit

    async def _run(
        self,
        row: EventRow,
        event: Event,
        chain: list[tuple[str, Handler]],
        finished: set[str],
        done: list[str],
    ) -> Result:
        """The handlers not in the ledger, in order (a failure stops the ones after it),
        and beside them every destination not in it (each on its own: one failing
        neither stops nor repeats another). A filter that does not select the event
        skips its handler or destination (``skipped``), once."""
        body = Document(event.body)
        router = self.router
        skipped: list[str] = []
        failure: Result | None = None
        for name, handler in chain:
            if name in finished:
                continue
            if router is not None and not router.handler_selects(row.source, name, event, body):
                skipped.append(name)
                continue
            try:
                await self._handler(row, event, name, handler)
            except Exception as exc:  # any handler failure is retried, a PermanentError not
                failure = self._handler_failure(name, exc)
                break
            done.append(name)
        outcomes = (
            await router.deliver_all(
                self.engine,
                event,
                attempt=row.attempts,
                finished=finished,
                document=body,
                owner=self.owner,
                done=done,
            )
            if router is not None
            else []
        )
        return self.combined(row, failure, outcomes, skipped)

    async def _handler(self, row: EventRow, event: Event, name: str, handler: Handler) -> None:
        """One handler, in its span and its log context, within its deadline."""
        with (
            tracing.span("hookd.handler", {"hookd.handler": name}) as current,
            # The handler's own log records carry its event's ids (hookd.logs).
            logs.event_context(
                event_id=row.id,
                source=row.source,
                type=event.type,
                attempt=row.attempts,
                handler=name,
            ),
        ):
            try:
                # Its deadline is kept from outside: a handler that swallows the
                # cancellation still ends the attempt at HOOKD_HANDLER_TIMEOUT_S.
                await within(
                    handler(replace(event, idempotency_key=idempotency_key(row.id, name))),
                    self.handler_timeout_s,
                    what=f"handler {name}",
                )
            except Exception as exc:
                tracing.failed(current, type(exc).__name__)
                raise

    def _handler_failure(self, name: str, exc: Exception) -> Result:
        """A handler's failure as the attempt's result: retried, a PermanentError not."""
        kind = type(exc).__name__
        permanent = isinstance(exc, PermanentError)
        text = str(exc)
        if isinstance(exc, DeadlineExceeded):
            kind = "TimeoutError"
            text = f"did not finish within {self.handler_timeout_s:g}s"
        if permanent:  # its reason code says what it is
            summary = f"{name}: {text}"
        else:
            summary = f"{name}: {kind}: {text}" if text else f"{name}: {kind}"
        return Result(
            ok=False,
            error=summary,
            handler=name,
            error_type=kind,
            permanent=permanent,
        )

    def combined(
        self,
        row: EventRow,
        failure: Result | None,
        outcomes: list[Outcome],
        skipped: list[str],
    ) -> Result:
        """One result for the pass: a failure if anything failed (dead if any failing one
        failed for good or has no attempt left; its error first), else put off if some
        delivery was, else done. Delivered destinations are in the ledger's ``done``."""
        # A permanent failure first: it is why the event goes dead.
        failed = sorted((o for o in outcomes if o.outcome == FAILED), key=lambda o: not o.permanent)
        deferred = [o for o in outcomes if o.outcome == DEFERRED]
        skipped += [o.name for o in outcomes if o.outcome == SKIPPED]
        if failure is not None or failed:
            return self._failed(row, failure, failed, tuple(skipped))
        if deferred:
            return _put_off(deferred, tuple(skipped))
        return Result(ok=True, skipped=tuple(skipped))

    def _failed(
        self,
        row: EventRow,
        failure: Result | None,
        failed: list[Outcome],
        skipped: tuple[str, ...],
    ) -> Result:
        """A pass that failed: its first failure, the number of the others, the lowest
        attempt limit and the soonest retry of all that failed."""
        limits, delays = self._retry_terms(row, failure, failed)
        first = _first_failure(failure, failed)
        more = len(failed) + (failure is not None) - 1
        return replace(
            first,
            error=f"{first.error} (and {more} more)" if more else first.error,
            permanent=first.permanent or any(o.permanent for o in failed),
            max_attempts=min(limits),
            retry_in_s=min(delays) if delays else None,
            skipped=skipped,
        )

    def _retry_terms(
        self, row: EventRow, failure: Result | None, failed: list[Outcome]
    ) -> tuple[list[int], list[float]]:
        """The attempt limits and retry delays of all that failed: each destination's,
        and the handlers' (their source's limit, the retry policy's delay)."""
        limits = [o.max_attempts or 1 for o in failed]
        delays = [o.retry_in_s for o in failed if o.retry_in_s is not None]
        if failure is not None:
            source = self.sources.get(row.source)
            limits.append(source.config.max_attempts if source else 1)
            delays.append(self.retry.delay_s(row.attempts, self.rng))
        return limits, delays


def _first_failure(failure: Result | None, failed: list[Outcome]) -> Result:
    """The failure a pass reports first: the handlers', unless a destination failed
    for good and it did not."""
    if failure is None or (failed and failed[0].permanent and not failure.permanent):
        return Result(
            ok=False,
            error=failed[0].error,
            handler=failed[0].name,
            error_type=failed[0].error_type,
        )
    return failure


def _put_off(deferred: list[Outcome], skipped: tuple[str, ...]) -> Result:
    """A pass that only put deliveries off: due again when the earliest may go, or
    parked behind what holds the others."""
    timed = [o.until for o in deferred if o.until is not None]
    return Result(
        ok=False,
        skipped=skipped,
        until=min(timed) if timed else None,
        blockers=tuple(o.blocker for o in deferred if o.blocker is not None),
    )
