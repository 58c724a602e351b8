"""Turning stored events into effects: claim, run handlers, record, retry or bury.

The same ``Processor`` runs inside ``hookd serve`` (no Redis) and inside
``hookd worker`` (arq); what differs is only what wakes it up.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import logging
import math
import random
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from functools import cache
from typing import Any

from prometheus_client import Counter, Histogram
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from hookd import logs, tracing
from hookd.backoff import capped, full_jitter
from hookd.errors import ConfigError, PermanentError
from hookd.event import Event, Handler, idempotency_key
from hookd.ordering import document
from hookd.sources import Source, Sources
from processing.deadlines import DeadlineExceeded, within
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
# Events of a source no longer configured are looked for this often (to go dead).
ORPHANS_CHECK_S = 60.0
# While events run, due ones are looked for at least this often besides every wake-up
# (a retry come due, an event a receiver elsewhere stored while Redis was away).
CLAIM_POLL_S = 1.0
# The outcome window: the first finished event opens it; it is written, with every
# event that finished meanwhile, OUTCOME_WINDOW_S later or at OUTCOME_BATCH outcomes.
# A few milliseconds: a crash repeats at most the effects of the events that finished
# inside one window (plus its commit), while a busy processor still writes dozens of
# outcomes per transaction, as the batches did.
OUTCOME_WINDOW_S = 0.005
OUTCOME_BATCH = 256
# At shutdown, a window that cannot be written is tried this often, then left to the
# leases (the events run again, past their ledger).
OUTCOME_TRIES_STOPPING = 3
# The read-ahead: what this processor finishes in this long (see ``ReadAhead``).
READ_AHEAD_S = 0.2
# Leases held are renewed this many times per lease: a healthy attempt longer than its
# lease is never taken over; a dead worker's events are, one lease after its last beat.
HEARTBEATS_PER_LEASE = 3
# A drain cancelled at shutdown gives what runs this long to end before it gives back.
CANCEL_WAIT_S = 1.0

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


def _drain_ended(task: asyncio.Task[int]) -> None:
    """A drain started by handed events ended; its failure is logged (their leases are
    taken over when they expire, by the sweep's drain)."""
    if not task.cancelled() and (exc := task.exception()) is not None:
        log.warning("handed events' drain failed", extra={"error": type(exc).__name__})


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


@dataclass(slots=True, eq=False)
class _Held:
    """An event this processor holds the lease of: read ahead, running, or finished
    with its outcome waiting for the next window."""

    row: EventRow
    finished: frozenset[str]  # the ledger when it was claimed: handlers not to run again
    lease_end: float  # monotonic: when its lease, as last renewed, runs out
    claim: Any = None  # the claim's span (tracing on), linked from the attempt's span
    done: list[str] = field(default_factory=list)  # finished in this attempt, for the ledger
    task: asyncio.Task[None] | None = None


def source_cap(concurrency: int) -> int:
    """The most slots one source may fill: a quarter of them stay for the others, so a
    source that floods, or whose handlers are slow, never holds every slot."""
    return concurrency - concurrency // 4 if concurrency >= 4 else concurrency


class ReadAhead:
    """How many events to claim ahead of a free slot, so that a slot that frees starts
    its next event at once, without waiting for a claim: as many as this processor
    finishes in READ_AHEAD_S, between a small floor (slow handlers hold few events
    that other workers could run) and two batches (quick handlers get claims of up to
    a batch, topped up at half, which is what keeps a busy processor's claims few)."""

    def __init__(self, concurrency: int, batch_size: int) -> None:
        self._floor = max(1, min(batch_size, concurrency // 4))
        self._ceiling = max(self._floor, 2 * batch_size)
        self._ended: deque[float] = deque()

    def ended(self, now: float) -> None:
        self._ended.append(now)
        while self._ended and self._ended[0] < now - 1.0:
            self._ended.popleft()

    def size(self, now: float) -> int:
        while self._ended and self._ended[0] < now - 1.0:
            self._ended.popleft()
        wanted = int(len(self._ended) * READ_AHEAD_S)
        return min(self._ceiling, max(self._floor, wanted))


class Processor:
    """Keeps up to ``concurrency`` events in flight, each on its own clock.

    A slot freed by one event is filled at once, from the events read ahead or by a
    claim; each event's outcome is written within ``OUTCOME_WINDOW_S`` of its end,
    together with the others that ended in that window; the leases of the events held
    are renewed while they are, so only a stopped worker's are taken over. The same
    ``Processor`` runs in ``hookd serve`` (no Redis) and in ``hookd worker``; what
    differs is only what wakes it up (``processing.wakeups``).
    """

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
        # The most one claim takes; a drain takes what its free slots need.
        self._batch_size = batch_size
        self._concurrency = concurrency
        self._cap = source_cap(concurrency)
        self._read_ahead_of = ReadAhead(concurrency, batch_size)
        self._beat_every_s = lease_s / HEARTBEATS_PER_LEASE
        self._transaction = db.transaction(engine)
        # The outcomes and the claim share one transaction on SQLite (one writer, one
        # turn), outcomes first. On PostgreSQL the claim goes first (``_exchange``): a
        # transaction that holds the outcomes' row locks on some partitions of events
        # and then asks for the claim's on all of them deadlocks with a partition being
        # attached (ATTACH PARTITION) meanwhile.
        self._one_transaction = engine.dialect.name != "postgresql"
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
        # Set on shutdown: claim no more, give back what was read ahead.
        self.stopping = False
        self._expired_checked_at = -math.inf
        self._orphans_checked_at = -math.inf
        # When a drain last ended here, and whether one runs (see ``idle_s``).
        self._drained_at = time.monotonic()
        self._pumping = False
        self._idle = asyncio.Event()
        self._idle.set()
        # What this processor holds: every event by id; those read ahead, per source,
        # in claim order; how many run, per source; the finished ones waiting for their
        # outcome window.
        self._held: dict[str, _Held] = {}
        self._ready: dict[str, deque[_Held]] = {}
        self._running: collections.Counter[str] = collections.Counter()
        self._tasks: set[asyncio.Task[None]] = set()
        self._finished: list[tuple[_Held, _Result]] = []
        # Set by an event's end, a wake-up or a shutdown: the drain looks again.
        self._nudge = asyncio.Event()
        self._woken = False
        # The last claim gave events of a source below its cap (see ``_exchange``).
        self._flowing = False
        # Handed events given back because they came during a shutdown; the drain that
        # handed events started (``accept``).
        self._giving_back: set[asyncio.Task[None]] = set()
        self._own_drain: asyncio.Task[int] | None = None

    # -- what the wake-ups and the shutdown call -------------------------------------

    def wake(self) -> None:
        """Look for due events now (a commit happened), even while events run."""
        self._woken = True
        self._nudge.set()

    def stop_claiming(self) -> None:
        """Shutting down: claim no more; what was read ahead is given back at once, and
        a drain ends when what runs has finished."""
        self.stopping = True
        self._nudge.set()

    def accept(self, rows: Sequence[EventRow]) -> int:
        """Events a receiver committed leased to this processor and handed over with
        their rows (insert as claimed, ``processing.handoff``): read ahead as a claim's
        would be, with no claim and no read (a new event has no ledger). A row leased
        to another owner is left to its lease; while stopping, they are given back at
        once. The number taken."""
        now = datetime.now(UTC)
        mono = time.monotonic()
        taken: list[_Held] = []
        for row in rows:
            expires = row.lease_expires_at
            if row.lease_owner != self.owner or expires is None or row.id in self._held:
                continue
            held = _Held(row, frozenset(), mono + (expires - now).total_seconds())
            self._held[row.id] = held
            taken.append(held)
        if self.stopping:
            task = asyncio.create_task(self._release(taken), name="hookd-give-back")
            self._giving_back.add(task)
            task.add_done_callback(self._giving_back.discard)
            return 0
        for held in taken:
            _claims(held.row.source).inc()
            self._ready.setdefault(held.row.source, deque()).append(held)
        if not taken:
            return 0
        if self._pumping:
            self._start_ready()
            self._nudge.set()
        else:
            # A drain of its own (it claims only at its poll): whatever else wakes this
            # processor finds it running and joins it.
            self._own_drain = asyncio.create_task(self.drain(math.inf), name="hookd-handed")
            self._own_drain.add_done_callback(_drain_ended)
        return len(taken)

    def has_room(self) -> bool:
        """Whether this processor takes handed events: it holds fewer than its slots
        and two claims' worth."""
        return len(self._held) < self._concurrency + 2 * self._batch_size

    @property
    def owners(self) -> list[str]:
        return [self.owner]

    @property
    def pumping(self) -> bool:
        """Whether a drain runs in this process."""
        return self._pumping

    @property
    def in_flight(self) -> int:
        """Events running here now (what a shutdown waits for; those read ahead are
        given back at once)."""
        return len(self._tasks)

    def idle_s(self) -> float:
        """Seconds since a drain last ended in this process (0 while one runs)."""
        return 0.0 if self._pumping else time.monotonic() - self._drained_at

    async def run_once(self) -> int:
        """One claim of up to ``batch_size`` due events, each run as slots allow and its
        outcome written: the number claimed (or, none claimed, superseded)."""
        if self._pumping:
            raise RuntimeError("run_once while a drain runs in this processor")
        return await self._pump(math.inf, claims_left=1)

    async def drain(self, max_s: float = 30.0) -> int:
        """Process until nothing is due and nothing runs: the number claimed.

        Slots are refilled as events end; wake-ups (``wake``) are looked at while events
        run. After ``max_s``, or once ``stopping``, nothing more is claimed, what was
        read ahead is given back and what runs finishes. While a drain runs here,
        another call only wakes it and waits for it to end."""
        if self._pumping:
            self.wake()
            try:
                await self._idle.wait()
            except asyncio.CancelledError:
                # A shutdown past its grace cancels its drain: the one that runs here,
                # if handed events started it, is that drain.
                if self._own_drain is not None:
                    self._own_drain.cancel()
                raise
            return 0
        return await self._pump(time.monotonic() + max_s, claims_left=math.inf)

    # -- the drain -------------------------------------------------------------------

    async def _pump(self, deadline: float, *, claims_left: float) -> int:
        self._pumping = True
        self._idle.clear()
        try:
            return await self._turns(deadline, claims_left)
        except asyncio.CancelledError:
            # Shut down past its grace: stop what runs, record what finished, and hand
            # the rest back now instead of leaving it to wait out its lease.
            await asyncio.shield(self._abandon())
            raise
        finally:
            self._pumping = False
            self._drained_at = time.monotonic()
            self._idle.set()

    async def _turns(self, deadline: float, claims_left: float) -> int:
        """The drain's loop: claim and write outcomes (one exchange), fill slots, wait."""
        once = claims_left == 1
        total = 0
        # A drain started for handed events (``accept``) runs them first: it claims
        # when woken or at the poll, not before it starts them.
        handed = bool(self._ready) and not self._woken and not once
        exhausted = handed
        poll_at = time.monotonic() + CLAIM_POLL_S if handed else -math.inf
        beat_at = time.monotonic() + self._beat_every_s
        window_end = math.inf
        while True:
            # Cleared first: an event's end or a wake-up from here on ends the wait below.
            self._nudge.clear()
            now = time.monotonic()
            claiming = not self.stopping and now < deadline and claims_left > 0
            window_end, settle = self._window(now, window_end)
            looking = self._woken or now >= poll_at or self._flowing
            want = 0
            if claiming:
                want = self._batch_size if once else self._want(looking=looking)
                want = want if (looking or not exhausted) else 0
            elif self._ready and (self.stopping or now >= deadline):
                await self._release(self._take_ready())
            if want or settle:
                # One transaction: the window's outcomes, then the claim.
                self._woken = self._woken and not want
                counted, drained = await self._exchange(want, fair=not once)
                window_end = math.inf
                if want:
                    total += counted
                    claims_left -= 1
                    # All that was due: no claim until a wake-up or the poll.
                    exhausted = drained
                    poll_at = time.monotonic() + CLAIM_POLL_S
            self._start_ready()
            if not self._tasks:
                if self._finished or (want and claims_left > 0):
                    continue  # their outcomes now; or claim again
                if not claiming or claims_left <= 0 or (exhausted and not self._woken):
                    return total
            if time.monotonic() >= beat_at:
                await self._heartbeat()
                beat_at = time.monotonic() + self._beat_every_s
            await self._wait(beat_at, poll_at if claiming else math.inf, window_end)

    @property
    def _read_ahead(self) -> int:
        return self._read_ahead_of.size(time.monotonic())

    def _active(self) -> collections.Counter[str]:
        """Per source, the events read ahead or running here: what a source's room counts
        (a finished event waiting for its outcome window holds no slot)."""
        active = collections.Counter({s: len(q) for s, q in self._ready.items()})
        active.update(self._running)
        return active

    def _window(self, now: float, window_end: float) -> tuple[float, bool]:
        """The outcome window (it opens with the first finished event): when it closes,
        and whether its outcomes are to be written now (closed, full, or nothing else
        will finish soon)."""
        if not self._finished:
            return math.inf, False
        if window_end == math.inf:
            window_end = now + OUTCOME_WINDOW_S
        due = (
            now >= window_end
            or len(self._finished) >= OUTCOME_BATCH
            or not (self._tasks or self._ready)
        )
        return window_end, due

    async def _wait(self, beat_at: float, poll_at: float, window_end: float) -> None:
        """Until a nudge (an event's end, a wake-up), the next heartbeat, the poll or the
        outcome window's end, whichever comes first."""
        now = time.monotonic()
        wake_at = min(
            beat_at,
            poll_at if poll_at > now else math.inf,
            window_end if self._finished else math.inf,
        )
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(max(0.0, wake_at - now)):
                await self._nudge.wait()

    def _want(self, *, looking: bool) -> int:
        """How many events to claim now: the free slots that what is read ahead cannot
        fill, plus the read-ahead's gap; nothing while every slot is busy. Slots free
        only because the sources read ahead are at their cap are kept for the others:
        claimed for when ``looking`` (a wake-up came, or the poll is due), not at every
        turn."""
        free = self._concurrency - len(self._tasks)
        if free <= 0:
            return 0
        startable = sum(
            min(len(queue), max(0, self._cap - self._running[source]))
            for source, queue in self._ready.items()
        )
        ready = sum(len(queue) for queue in self._ready.values())
        need = max(0, free - startable)
        if ready and not looking and startable < min(free, ready):
            need = 0  # the free slots are the reserve: nothing to claim for them yet
        read_ahead = self._read_ahead
        gap = max(0, read_ahead - ready)
        if not need and gap < max(1, read_ahead // 2):
            # Every free slot has its next event: top the read-ahead up in claims of at
            # least half of it, not one claim per event that ends.
            return 0
        want = min(need + gap, self._batch_size)
        # No more than the sources have room for (each its cap plus the read-ahead).
        held = self._active()
        limit = self._cap + read_ahead
        return min(want, sum(max(0, limit - held[s.name]) for s in self._sources))

    def _start_ready(self) -> None:
        """Fill free slots from what is read ahead: the source running fewest first,
        none past its cap. One whose lease may have run out (the database was away
        past its renewal) is dropped: whoever takes it over runs it."""
        while len(self._tasks) < self._concurrency:
            best: str | None = None
            for source, queue in self._ready.items():
                running = self._running[source]
                if (
                    queue
                    and running < self._cap
                    and (best is None or running < self._running[best])
                ):
                    best = source
            if best is None:
                return
            queue = self._ready[best]
            held = queue.popleft()
            if not queue:
                del self._ready[best]
            if time.monotonic() > held.lease_end - self._beat_every_s:
                self._held.pop(held.row.id, None)
                log.warning("read-ahead lease ran out", extra={"event_id": held.row.id})
                continue
            self._running[best] += 1
            task = asyncio.create_task(self._run_held(held), name="hookd-event")
            held.task = task
            self._tasks.add(task)
            task.add_done_callback(functools.partial(self._ended, held))

    def _ended(self, held: _Held, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        self._read_ahead_of.ended(time.monotonic())
        self._running[held.row.source] -= 1
        if not task.cancelled() and (exc := task.exception()) is not None:  # a bug
            log.error(
                "event task failed", extra={"event_id": held.row.id, "error": type(exc).__name__}
            )
        # The slot is refilled here, at once, not at the drain's next turn: the drain may
        # be in the middle of a transaction.
        if self._pumping and not self.stopping:
            self._start_ready()
        self._nudge.set()

    async def _run_held(self, held: _Held) -> None:
        result = await self._guarded(held.row, set(held.finished), held.done, held.claim)
        self._finished.append((held, result))

    # -- claims ----------------------------------------------------------------------

    def _expired_check_due(self) -> bool:
        """Look for expired leases at most every EXPIRED_CHECK_S (``claim_expired``)."""
        now = time.monotonic()
        if now - self._expired_checked_at < EXPIRED_CHECK_S:
            return False
        self._expired_checked_at = now
        return True

    def _orphans_check_due(self) -> bool:
        """Look for events of sources no longer configured every ORPHANS_CHECK_S."""
        now = time.monotonic()
        if now - self._orphans_checked_at < ORPHANS_CHECK_S:
            return False
        self._orphans_checked_at = now
        return True

    async def _exchange(self, want: int, *, fair: bool) -> tuple[int, bool]:
        """One transaction: the outcomes of the events finished so far (up to
        OUTCOME_BATCH, ``_settle_in``) and a claim of up to ``want`` events into the
        read-ahead: takeovers, events of objects, then the others shared between
        sources (``fair``: no source past its cap plus the read-ahead). The count a
        drain adds up (claimed, or none claimed, superseded), and whether that was all
        that is due (the claim was not full, and no source gave all it had room for).

        On SQLite the outcomes go first. On PostgreSQL the claim does, with the
        claimed events' ledger (``_claim_first``); two transactions, outcomes first,
        when the window holds events of objects (``_ordered_window``)."""
        batch = self._finished[:OUTCOME_BATCH]
        del self._finished[: len(batch)]
        now = datetime.now(UTC)
        plan = self._plan(batch, now)
        claim_started = tracing.clock()  # 0 when tracing is off
        taken: list[EventRow] = []
        superseded: list[objects.Superseded] = []
        rows: list[EventRow] = []
        ledger: dict[str, set[str]] | None = None
        held = self._active()
        limit = self._cap + self._read_ahead if fair else want
        full = frozenset(s for s, n in held.items() if n >= limit) if fair else frozenset()
        owned: set[str] = set()
        first = bool(want) and not self._one_transaction and not self._ordered_window(batch)
        try:
            async with self._transaction() as conn:
                if first:
                    taken, rows, superseded, ledger = await self._claim_first(
                        conn, batch, want=want, now=now, held=held, full=full, limit=limit
                    )
                if batch:
                    owned = await self._settle_in(conn, plan, now)
                if want and self._one_transaction:
                    taken, rows, superseded = await self._claim_in(
                        conn, want=want, now=now, held=held, full=full, limit=limit
                    )
        except BaseException:
            self._finished[:0] = batch  # not written: the next exchange tries again
            raise
        if want and not self._one_transaction and not first:
            async with self._transaction() as conn:
                taken, rows, superseded, ledger = await self._claim_first(
                    conn, [], want=want, now=now, held=held, full=full, limit=limit
                )
        if batch:
            for held_event, _ in batch:
                self._held.pop(held_event.row.id, None)
            self._settled(plan, owned)
        if not want:
            return 0, False
        _count_superseded(superseded)
        self._flowing = False
        if not rows:
            return len(superseded), not full
        await self._hold(rows, taken, superseded, claim_started, ledger)
        per_source = collections.Counter(r.source for r in rows)
        # A source below its cap that gave events may have more: the slots kept for the
        # others are claimed for at the next turn, not at the next poll.
        active = self._active()
        self._flowing = any(active[source] < self._cap for source in per_source)
        full_up = any(per_source[s.name] >= limit - held[s.name] for s in self._sources)
        return len(rows), not (len(rows) >= want or full_up)

    async def _claim_in(
        self,
        conn: AsyncConnection,
        *,
        want: int,
        now: datetime,
        held: collections.Counter[str],
        full: frozenset[str],
        limit: int,
        spare: list[str] | None = None,
    ) -> tuple[list[EventRow], list[EventRow], list[objects.Superseded]]:
        """The claim's statements: (taken over, every event claimed, superseded). No
        source past ``limit`` held, none of ``full``, no takeover of ``spare``."""
        taken: list[EventRow] = []
        superseded: list[objects.Superseded] = []
        # Expired leases first, by their own statement, so that takeovers are counted.
        if self._expired_check_due():
            taken = await claims.claim_expired(
                conn, self.owner, self._lease_s, want, now, spare=spare or ()
            )
        rows = taken
        # Events of objects ([sources.order]) first: one per object, at most.
        if self._ordered and len(rows) < want:
            got = await objects.claim(
                conn,
                self.owner,
                self._lease_s,
                want - len(rows),
                now,
                supersede=self._supersede,
                exclude=full,
            )
            rows, superseded = rows + got.rows, got.superseded
            await history.record_attempts(conn, _superseded_history(superseded, self.owner, now))
        if len(rows) < want:
            shares = [
                claims.Share(s.name, held[s.name], limit - held[s.name]) for s in self._sources
            ]
            rows = rows + await claims.claim_due(
                conn, self.owner, self._lease_s, want - len(rows), now, shares=shares
            )
        if len(rows) < want and self._orphans_check_due():
            # Events of a source no longer configured: claimed to go dead, not left.
            rows = rows + await claims.claim_orphans(
                conn,
                self.owner,
                self._lease_s,
                want - len(rows),
                now,
                known=[s.name for s in self._sources],
            )
        # The attempts of the taken-over claims ended without an outcome.
        await history.record_attempts(conn, _abandoned(taken, now))
        return taken, rows, superseded

    def _ordered_window(self, batch: list[tuple[_Held, _Result]]) -> bool:
        """Whether a window holds events of objects: their outcomes go before the claim
        (in a transaction of their own on PostgreSQL), so that each object's next event
        is claimed in the same exchange, not in the next."""
        return bool(self._ordered) and any(h.row.object_key is not None for h, _ in batch)

    async def _claim_first(
        self,
        conn: AsyncConnection,
        batch: list[tuple[_Held, _Result]],
        *,
        want: int,
        now: datetime,
        held: collections.Counter[str],
        full: frozenset[str],
        limit: int,
    ) -> tuple[list[EventRow], list[EventRow], list[objects.Superseded], dict[str, set[str]]]:
        """PostgreSQL: the claim (``_claim_in``) and its events' ledger, before the
        window's outcomes (``batch``) in the same transaction, or alone.

        First, so that the transaction takes its locks on ``events`` (every partition,
        the default one too) at its first statement, before any other table's, and
        never asks for one of them while holding another: the outcomes (``_settle_in``)
        then ask only for locks it holds already, besides those of the tables that
        refer to ``events`` and of the others, which a partition's ATTACH does not hold
        and a DETACH takes only after ``events`` (``store.partitions._hold``). The
        other way round, the outcomes' locks on some partitions and then the claim's on
        all deadlocked with ATTACH PARTITION.

        The window's events are still processing, leased to this owner: the claim of due
        events cannot take them, nor, told so, that of expired leases. The ledger is
        read by its own statement, after the claim's (a snapshot taken while the
        claimed rows are locked: any change committed to them before is seen)."""
        spare = [h.row.id for h, _ in batch]
        taken, rows, superseded = await self._claim_in(
            conn, want=want, now=now, held=held, full=full, limit=limit, spare=spare
        )
        ledger = await claims.finished_handlers_many(conn, [r.id for r in rows])
        return taken, rows, superseded, ledger

    async def _hold(
        self,
        rows: list[EventRow],
        taken: list[EventRow],
        superseded: list[objects.Superseded],
        claim_started: int,
        ledger: dict[str, set[str]] | None = None,
    ) -> None:
        """Counted, traced, their ledger read (unless read with the claim): ``rows``
        join the read-ahead."""
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
        lease_end = time.monotonic() + self._lease_s
        try:
            if self._router is not None:
                await self._router.refresh(self._engine)
            if ledger is None:
                async with self._engine.connect() as conn:
                    ledger = await claims.finished_handlers_many(conn, [r.id for r in rows])
        except BaseException:
            # Claimed but not readable (or cancelled meanwhile): given back now.
            given = [_Held(row, frozenset(), lease_end) for row in rows]
            await asyncio.shield(self._release(given))
            raise
        for row in rows:
            held = _Held(row, frozenset(ledger.get(row.id, ())), lease_end, claim)
            self._held[row.id] = held
            self._ready.setdefault(row.source, deque()).append(held)

    # -- leases ----------------------------------------------------------------------

    async def _heartbeat(self) -> None:
        """Renew the lease of every event held here. One taken over meanwhile (the
        database was away past a lease) is not started if it was only read ahead."""
        ids = list(self._held)
        if not ids:
            return
        started = time.monotonic()
        try:
            async with self._transaction() as conn:
                kept = await claims.renew(conn, ids, self.owner, self._lease_s, datetime.now(UTC))
        except Exception as exc:  # the database is away: the next beat tries again
            log.warning("lease renewal failed", extra={"error": type(exc).__name__})
            return
        for event_id in ids:
            held = self._held.get(event_id)
            if held is None:
                continue
            if event_id in kept:
                held.lease_end = started + self._lease_s
            elif held.task is None:
                self._unready(held)
            else:
                log.warning("lease lost before completion", extra={"event_id": event_id})

    def _unready(self, held: _Held) -> None:
        queue = self._ready.get(held.row.source)
        if queue is not None and held in queue:
            queue.remove(held)
            if not queue:
                del self._ready[held.row.source]
        self._held.pop(held.row.id, None)

    def _take_ready(self) -> list[_Held]:
        """Everything read ahead, out of the read-ahead (to be given back)."""
        given = [held for queue in self._ready.values() for held in queue]
        self._ready.clear()
        return given

    async def _abandon(self) -> None:
        """A drain cancelled (a shutdown past its grace): cancel what runs, write the
        outcomes of what finished, give back the rest with the handlers it finished."""
        running = [h.task for h in self._held.values() if h.task is not None and not h.task.done()]
        for task in running:
            task.cancel()
        if running:
            await asyncio.wait(running, timeout=CANCEL_WAIT_S)
        await self._write_outcomes()
        self._ready.clear()
        left = [h for h in self._held.values() if h.task is None or h.task.done()]
        await self._release(left)

    async def _release(self, given: list[_Held]) -> None:
        """Give ``given`` back, due at once, recording the handlers each finished; the
        attempt is given back too (``claims.release``)."""
        for held in given:
            self._held.pop(held.row.id, None)
        if not given:
            return
        try:
            async with self._transaction() as conn:
                now = datetime.now(UTC)
                await claims.record_handlers(
                    conn, [(h.row.id, name) for h in given for name in h.done], now
                )
                ids = [h.row.id for h in given]
                back = await claims.release(conn, ids, self.owner, now)
                await history.record_attempts(
                    conn, self._released({h.row.id: h.row.attempts for h in given}, back, now)
                )
        except Exception as exc:  # the lease expiry recovers them anyway
            log.warning("could not release claims", extra={"error": type(exc).__name__})

    # -- outcomes --------------------------------------------------------------------

    async def _write_outcomes(self) -> None:
        """Every finished event's outcome written (a drain cancelled at shutdown); a write
        that keeps failing is given up after OUTCOME_TRIES_STOPPING, left to the leases."""
        failures = 0
        while self._finished:
            try:
                await self._exchange(0, fair=True)
            except Exception as exc:  # the database is away
                failures += 1
                log.warning(
                    "outcomes not written",
                    extra={"error": type(exc).__name__, "count": len(self._finished)},
                )
                if failures >= OUTCOME_TRIES_STOPPING:
                    for held, _ in self._finished:
                        self._held.pop(held.row.id, None)
                    self._finished.clear()
                    return
                await asyncio.sleep(capped(0.05, failures, 1.0))

    def _plan(self, batch: list[tuple[_Held, _Result]], now: datetime) -> _Plan:
        """What a window's outcomes write: each failure with when it may run again."""
        failed = [
            (held.row, result, self._retry_at(held.row, result, now))
            for held, result in batch
            if result.error is not None
        ]
        return _Plan(batch, failed)

    async def _settle_in(self, conn: AsyncConnection, plan: _Plan, now: datetime) -> set[str]:
        """A window's outcomes, in the exchange's transaction: ledger rows, then each
        event's outcome, fenced on the lease (one taken over meanwhile records
        ``lease_lost``); the ids this owner still held.

        A crash before it commits means those leases expire and those events run
        again, past the handlers in the ledger; effects stay single through the
        handlers' idempotency keys."""
        rows = [held.row for held, _ in plan.batch]
        results = [result for _, result in plan.batch]
        finished = [(held.row.id, name) for held, _ in plan.batch for name in held.done]
        await claims.record_handlers(conn, finished, now)
        skipped = [(r.id, n) for r, res in zip(rows, results, strict=True) for n in res.skipped]
        await destinations.record_skipped(conn, skipped, now)
        succeeded = [r.id for r, res in zip(rows, results, strict=True) if res.ok]
        owned = await claims.mark_processed(conn, succeeded, self.owner, now)
        # Their objects' latest known state, in the same commit ([sources.order]).
        await objects.record_processed(
            conn, [r for r in rows if r.object_key is not None and r.id in owned], now
        )
        owned |= await self._defer(conn, rows, results, now)
        for row, result, retry_at in plan.failed:
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
        retry_at_of = {row.id: retry_at for row, _, retry_at in plan.failed}
        await history.record_attempts(conn, self._attempts(rows, results, owned, retry_at_of, now))
        return owned

    def _settled(self, plan: _Plan, owned: set[str]) -> None:
        """After the commit: counted and logged."""
        for held, result in plan.batch:
            row = held.row
            if row.id not in owned:
                if result.ok or result.error is not None:
                    log.warning("lease lost before completion", extra={"event_id": row.id})
                continue
            if result.ok:
                _processed(row.source, EventStatus.PROCESSED).inc()
                _processing_seconds(row.source).observe(result.duration_s or 0.0)
        for row, result, retry_at in plan.failed:
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

    async def _guarded(
        self, row: EventRow, finished: set[str], done: list[str], claim: Any = None
    ) -> _Result:
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
                fetched = await within(
                    self._fetch(source, document(body, row.headers)),
                    self._handler_timeout_s,
                    what="object fetch",
                )
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
            try:
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
                            self._handler_timeout_s,
                            what=f"handler {name}",
                        )
                    except Exception as exc:
                        tracing.failed(current, type(exc).__name__)
                        raise
            except Exception as exc:  # any handler failure is retried, a PermanentError not
                kind = type(exc).__name__
                permanent = isinstance(exc, PermanentError)
                text = str(exc)
                if isinstance(exc, DeadlineExceeded):
                    kind = "TimeoutError"
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
class _Plan:
    """A window's outcomes: the finished events, and the failures with their retry time
    (None: dead)."""

    batch: list[tuple[_Held, _Result]]
    failed: list[tuple[EventRow, _Result, datetime | None]]


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


class ProcessorPool:
    """Processors side by side in one process, the slots split between them: each has
    its own drain, owner and lease fence, so a process keeps as many exchanges
    (a window's outcomes and a claim: one transaction each) in flight as it has members, where
    one processor has one at a time. What wake-ups, sweeps and the shutdown call on a
    processor, a pool does on all of them."""

    def __init__(self, members: list[Processor]) -> None:
        if not members:
            raise ValueError("a pool needs a processor")
        self.members = members

    def accept(self, rows: Sequence[EventRow]) -> int:
        """Handed events (``Processor.accept``), each to the member whose lease it has."""
        taken = 0
        for member in self.members:
            mine = [r for r in rows if r.lease_owner == member.owner]
            if mine:
                taken += member.accept(mine)
        return taken

    def has_room(self) -> bool:
        return all(m.has_room() for m in self.members)

    @property
    def owners(self) -> list[str]:
        return [m.owner for m in self.members]

    @property
    def owner(self) -> str:
        return ",".join(m.owner for m in self.members)

    @property
    def stopping(self) -> bool:
        return all(m.stopping for m in self.members)

    @property
    def pumping(self) -> bool:
        return any(m.pumping for m in self.members)

    def wake(self) -> None:
        for member in self.members:
            member.wake()

    def stop_claiming(self) -> None:
        for member in self.members:
            member.stop_claiming()

    @property
    def in_flight(self) -> int:
        return sum(m.in_flight for m in self.members)

    def idle_s(self) -> float:
        return min(m.idle_s() for m in self.members)

    async def drain(self, max_s: float = 30.0) -> int:
        """Every member drains; the number claimed by all."""
        return sum(await asyncio.gather(*(m.drain(max_s) for m in self.members)))


def pool_of(make: Callable[[int], Processor], concurrency: int, members: int) -> ProcessorPool:
    """``members`` processors made by ``make(their share of concurrency)``, the shares
    adding up to ``concurrency`` (never fewer than one slot each)."""
    members = max(1, min(members, concurrency))
    shares = [concurrency // members + (i < concurrency % members) for i in range(members)]
    return ProcessorPool([make(share) for share in shares])
