"""Destinations: signed HTTP deliveries of a source's events, each a handler in the ledger.

``Router`` holds every source's destinations and the filters of its handlers, and
makes one delivery at a time (``deliver``): a paused destination or an open circuit
breaker puts it off (no attempt used), the rate and concurrency limits make it wait
or put it off, and its outcome moves the breaker. What the processor records comes
back as an ``Outcome``. What is sent, signed, and how (``Destination``) is
``processing.delivery``; what a delivery does to its breaker, ``processing.breaker``.

The breaker (``store.delivery.destinations``): ``failures`` in a row across every process, or
a failure rate in this process's recent deliveries, opens it for ``cooldown_s``; the
deliveries due meanwhile are put off until then. After it, one delivery takes the
probe (half-open) and the others park; the probe's success closes the breaker and
unparks them, its failure opens it again. Only failures a retry could mend count: a
4xx answer shows the destination is up (it refused that one event).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from functools import cache

import httpx
from prometheus_client import Counter, Histogram
from sqlalchemy.ext.asyncio import AsyncEngine

from hookd import metric_families as families
from hookd.backoff import full_jitter
from hookd.errors import PermanentError
from hookd.event import Event, idempotency_key
from hookd.sources import Sources
from processing.breaker import Breakers
from processing.deadlines import DeadlineExceeded
from processing.delivery import Destination, destination_configs, import_transform
from processing.filters import Document, Selector
from processing.limits import Limits, Unavailable, Wait
from store.delivery import destinations as state
from store.delivery.destinations import Blocker, PauseRow
from store.status import BreakerState

log = logging.getLogger("hookd.processing")

# hookd_destination_deliveries_total's outcome label.
DELIVERED, FAILED, SKIPPED, DEFERRED = "delivered", "failed", "skipped", "deferred"
DELIVERY_OUTCOMES = (DELIVERED, FAILED, SKIPPED, DEFERRED)
DELIVERIES = families.DELIVERIES.register()
DELIVERY_SECONDS = families.DELIVERY_SECONDS.register()
HANDLER_SKIPS = families.HANDLER_SKIPS.register()
# How long a delivery may wait for its rate or concurrency limit before it is put off.
LIMIT_WAIT_S = 2.0
# Pauses and breakers are read again at most this often per process (and whenever a
# delivery changes a breaker here).
REFRESH_S = 0.25
# A held-back delivery is put off until the cool-down ends, spread over this much more.
SPREAD_S = 1.0
# A probe's claim on a half-open breaker outlasts its request by this much.
PROBE_SLACK_S = 10.0


def _labels(source: str, destinations: Iterable[str]) -> None:
    for name in destinations:
        for outcome in DELIVERY_OUTCOMES:
            DELIVERIES.labels(source, name, outcome)
        DELIVERY_SECONDS.labels(source, name)


@cache
def _deliveries(source: str, destination: str, outcome: str) -> Counter:
    return DELIVERIES.labels(source, destination, outcome)


@cache
def _seconds(source: str, destination: str) -> Histogram:
    return DELIVERY_SECONDS.labels(source, destination)


@dataclass(frozen=True, slots=True)
class Outcome:
    """One destination's part of an event's pass."""

    name: str
    outcome: str  # DELIVERED, FAILED, SKIPPED or DEFERRED
    error: str | None = None
    error_type: str | None = None
    permanent: bool = False
    retry_in_s: float | None = None  # failed: when its retry policy would try again
    max_attempts: int | None = None  # failed: its attempt limit
    until: datetime | None = None  # deferred until then
    blocker: Blocker | None = None  # deferred: parked until this ends


class Router:
    """Every source's destinations and handler filters, and the shared state they obey."""

    def __init__(
        self,
        sources: Sources,
        client: httpx.AsyncClient,
        limits: Limits,
        *,
        retry_base_s: float = 1.0,
        retry_cap_s: float = 600.0,
        rng: random.Random | None = None,
    ) -> None:
        self.destinations: dict[str, list[Destination]] = {}
        self.handler_selectors: dict[str, dict[str, Selector]] = {}
        for source in sources:
            made = []
            for config in destination_configs(source):
                transform = import_transform(config.transform) if config.transform else None
                made.append(Destination(source, config, client, transform))
            self.destinations[source.name] = made
            _labels(source.name, [d.name for d in made])
            HANDLER_SKIPS.labels(source.name)
            selectors = {}
            for entry in source.config.handlers:
                selector = Selector.of(entry)
                if selector is not None:
                    selectors[entry.ref] = selector
            self.handler_selectors[source.name] = selectors
        self._limits = limits
        self._retry_base_s = retry_base_s
        self._retry_cap_s = retry_cap_s
        self._rng = rng or random.Random()  # noqa: S311 - jitter, not secrecy
        self._pauses: dict[tuple[str, str], PauseRow] = {}
        # The breakers (``processing.breaker``), as read and as moved here.
        self._breakers = Breakers()
        self._read_at = -float("inf")

    def attempt_limit(self, source: str) -> int:
        """The most attempts any of the source's destinations may use (0: none)."""
        return max((d.max_attempts for d in self.destinations.get(source, ())), default=0)

    def has_destinations(self, source: str) -> bool:
        return bool(self.destinations.get(source))

    def handler_selects(self, source: str, ref: str, event: Event, document: Document) -> bool:
        selector = self.handler_selectors.get(source, {}).get(ref)
        if selector is None or selector.selects(event, document):
            return True
        HANDLER_SKIPS.labels(source).inc()
        return False

    async def refresh(self, engine: AsyncEngine, *, force: bool = False) -> None:
        """Read the pauses and breakers again (at most every ``REFRESH_S``)."""
        if not any(self.destinations.values()):
            return
        now = time.monotonic()
        if not force and now - self._read_at < REFRESH_S:
            return
        async with engine.connect() as conn:
            self._pauses = await state.all_pauses(conn)
            self._breakers.rows = await state.all_breakers(conn)
        self._read_at = now

    async def deliver_all(
        self,
        engine: AsyncEngine,
        event: Event,
        *,
        attempt: int,
        finished: set[str],
        document: Document,
        owner: str,
        done: list[str],
    ) -> list[Outcome]:
        """Every destination of the event's source not in its ledger yet, at once. Each
        one delivered is appended to ``done`` as soon as it is (the processor records
        ``done`` even when the pass is cut short)."""
        todo = [d for d in self.destinations.get(event.source, ()) if d.name not in finished]
        if not todo:
            return []
        return list(
            await asyncio.gather(
                *(
                    self._one(
                        engine, d, event, attempt=attempt, document=document, owner=owner, done=done
                    )
                    for d in todo
                )
            )
        )

    async def _one(
        self,
        engine: AsyncEngine,
        destination: Destination,
        event: Event,
        *,
        attempt: int,
        document: Document,
        owner: str,
        done: list[str],
    ) -> Outcome:
        outcome = await self._deliver(
            engine, destination, event, attempt=attempt, document=document, owner=owner
        )
        if outcome.outcome == DELIVERED:
            done.append(destination.name)
        _deliveries(destination.source, destination.name, outcome.outcome).inc()
        return outcome

    def _deferred(self, name: str, until: datetime | None, blocker: Blocker | None) -> Outcome:
        return Outcome(name, DEFERRED, until=until, blocker=blocker)

    async def _deliver(
        self,
        engine: AsyncEngine,
        d: Destination,
        event: Event,
        *,
        attempt: int,
        document: Document,
        owner: str,
    ) -> Outcome:
        if d.selector is not None and not d.selector.selects(event, document):
            return Outcome(d.name, SKIPPED)
        held, probe = self._held_back(d)
        if held is not None:
            return held
        # The transform first: its failure is recorded as the destination's, but it
        # sent nothing, so it neither uses a limit's grant or the probe nor moves the
        # breaker (a broken transform is not a destination that is down).
        event = replace(event, idempotency_key=idempotency_key(event.id, d.name))
        try:
            prepared = await d.prepare(event)
        except Exception as exc:  # a transform's failure is retried, a PermanentError not
            return self._failed(d, exc, attempt)
        try:
            return await self._limited(
                engine,
                d,
                lambda: self._send(engine, d, event, prepared, attempt=attempt, probe=probe),
                probe=probe,
                owner=owner,
            )
        except Unavailable:
            return self._deferred(d.name, _after(Wait(1.0)), None)

    def _held_back(self, d: Destination) -> tuple[Outcome | None, bool]:
        """A delivery put off by a pause or by its breaker (the outcome), or let through
        (None), and whether as the breaker's probe (half-open, its cool-down over)."""
        key = (d.source, d.name)
        pause = self._pauses.get(key)
        if pause is not None and pause.paused:
            return self._deferred(d.name, None, Blocker("paused", d.source, d.name)), False
        row = self._breakers.rows.get(key) if d.config.breaker.enabled else None
        now = datetime.now(UTC)
        if row is None or row.state == BreakerState.CLOSED:
            return None, False
        if row.retry_at is None or row.retry_at <= now:
            return None, True
        if row.state == BreakerState.OPEN:
            spread = timedelta(seconds=self._rng.uniform(0, SPREAD_S))
            return self._deferred(d.name, row.retry_at + spread, None), False
        return self._deferred(d.name, None, Blocker("breaker", d.source, d.name)), False

    async def _limited(
        self,
        engine: AsyncEngine,
        d: Destination,
        send: Callable[[], Awaitable[Outcome]],
        *,
        probe: bool,
        owner: str,
    ) -> Outcome:
        """The delivery (``send``) within the destination's concurrency and rate limits
        (put off when they make it wait past ``LIMIT_WAIT_S``), as the probe if it is
        one."""
        limits = self._limits
        slot = (
            limits.slot(d.key, d.config.concurrency, d.config.timeout_s, LIMIT_WAIT_S)
            if d.config.concurrency
            else _no_slot()
        )
        rate = (
            limits.rate(d.key, d.config.rate_per_s, d.config.timeout_s, LIMIT_WAIT_S)
            if d.config.rate_per_s
            else _no_slot()
        )
        async with slot as waited:
            if waited is not None:
                return self._deferred(d.name, _after(waited), None)
            async with rate as limited:
                if limited is not None:
                    return self._deferred(d.name, _after(limited), None)
                if probe and not await self._take_probe(engine, d, owner):
                    return self._deferred(d.name, None, Blocker("breaker", d.source, d.name))
                return await send()

    async def _take_probe(self, engine: AsyncEngine, d: Destination, owner: str) -> bool:
        now = datetime.now(UTC)
        async with engine.begin() as conn:
            taken = await state.take_probe(
                conn,
                d.source,
                d.name,
                owner=owner,
                now=now,
                probe_s=d.config.timeout_s + PROBE_SLACK_S,
            )
        await self.refresh(engine, force=True)
        if taken:
            log.info(
                "destination breaker probing", extra={"source": d.source, "destination": d.name}
            )
        return taken

    async def _send(
        self,
        engine: AsyncEngine,
        d: Destination,
        event: Event,
        prepared: tuple[bytes, dict[str, str]],
        *,
        attempt: int,
        probe: bool,
    ) -> Outcome:
        started = time.perf_counter()
        try:
            await d.send(event, prepared)
        except Exception as exc:  # a delivery's failure is retried, a PermanentError not
            _seconds(d.source, d.name).observe(time.perf_counter() - started)
            if isinstance(exc, PermanentError):  # the destination answered: it is up
                await self._breakers.success(engine, d, probe)
            else:
                await self._breakers.failure(engine, d, type(exc).__name__)
            return self._failed(d, exc, attempt)
        _seconds(d.source, d.name).observe(time.perf_counter() - started)
        await self._breakers.success(engine, d, probe)
        return Outcome(d.name, DELIVERED)

    def _failed(self, d: Destination, exc: Exception, attempt: int) -> Outcome:
        kind = type(exc).__name__
        permanent = isinstance(exc, PermanentError)
        text = str(exc)
        if isinstance(exc, httpx.TimeoutException | DeadlineExceeded) and not (
            isinstance(exc, DeadlineExceeded) and exc.what
        ):
            text = f"did not answer within {d.config.timeout_s:g}s"
        summary = f"{d.name}: {text}" if permanent else f"{d.name}: {kind}: {text}".rstrip(": ")
        return Outcome(
            d.name,
            FAILED,
            error=summary,
            error_type=kind,
            permanent=permanent,
            retry_in_s=full_jitter(
                self._rng,
                d.config.retry_base_s or self._retry_base_s,
                min(max(attempt - 1, 0), 60),
                d.config.retry_cap_s or self._retry_cap_s,
            ),
            max_attempts=d.max_attempts,
        )


def _after(waited: Wait) -> datetime:
    return datetime.now(UTC) + timedelta(seconds=waited.seconds)


@contextlib.asynccontextmanager
async def _no_slot() -> AsyncIterator[Wait | None]:
    yield None
