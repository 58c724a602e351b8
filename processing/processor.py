"""Turning stored events into effects: claim, run handlers, record, retry or bury.

The same ``Processor`` runs inside ``hookd serve`` (no Redis) and inside
``hookd worker`` (arq); what differs is only what wakes it up.

Its parts, each a module of its own: ``processing.slots`` (what it holds, the
read-ahead, how many to claim), ``processing.claiming`` (the claim's statements),
``processing.running`` (one attempt: handlers and destinations), ``processing.outcomes``
(what an outcome window writes), ``processing.leases`` (renewal and release) and
``processing.pool`` (processors side by side in one process).
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
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from functools import cache

from prometheus_client import Counter, Histogram
from sqlalchemy.ext.asyncio import AsyncEngine

from hookd import metric_families as families
from hookd import tracing
from hookd.backoff import capped
from hookd.event import Handler
from hookd.sources import Sources
from processing.attempt import Held, Result, RetryPolicy
from processing.claiming import Ask, Claimed, Claimer, claim_span
from processing.destinations import Router
from processing.leases import Leases
from processing.outcomes import OutcomeWriter, Plan
from processing.running import EventRunner, FetchObject
from processing.slots import OUTCOME_BATCH, Drain, Slots, window
from store import db, dialect
from store.claims.claiming import finished_handlers_many
from store.crypto import BodyCipher
from store.delivery import objects
from store.ids import worker_id
from store.intake.writer_link import WriterSocket
from store.rows import EventRow
from store.status import EventStatus

log = logging.getLogger("hookd.processing")

# At shutdown, a window that cannot be written is tried this often, then left to the
# leases (the events run again, past their ledger).
OUTCOME_TRIES_STOPPING = 3
# A drain cancelled at shutdown gives what runs this long to end before it gives back.
CANCEL_WAIT_S = 1.0

# The outcome label of hookd_events_processed_total is the status an attempt left the
# event in (processed, dead), except for one that will run again: "retry".
RETRY = "retry"
EVENTS_PROCESSED = families.EVENTS_PROCESSED.register()
PROCESSING_SECONDS = families.PROCESSING_SECONDS.register()
CLAIMS = families.CLAIMS.register()
TAKEOVERS = families.TAKEOVERS.register()
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


def _count_superseded(superseded: list[objects.Superseded]) -> None:
    """Events a claim marked superseded: an outcome like processed, counted and logged."""
    for event_id, source, _ in superseded:
        _processed(source, EventStatus.SUPERSEDED).inc()
        log.info("superseded", extra={"event_id": event_id, "source": source})


def _drain_ended(task: asyncio.Task[int]) -> None:
    """A drain started by handed events ended; its failure is logged (their leases are
    taken over when they expire, by the sweep's drain)."""
    if not task.cancelled() and (exc := task.exception()) is not None:
        log.warning("handed events' drain failed", extra={"error": type(exc).__name__})


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
        box: WriterSocket | None = None,
    ) -> None:
        self._engine = engine
        self._sources = sources
        # Destinations and handler filters (``processing.destinations``); None: neither.
        self._router = router
        self._lease_s = lease_s
        retry = retry or RetryPolicy()
        rng = rng or random.Random()  # noqa: S311 - jitter, not secrecy
        self._transaction = db.transaction(engine)
        # The outcomes and the claim share one transaction on SQLite (one writer, one
        # turn), outcomes first. On PostgreSQL the claim goes first (``_exchange``): a
        # transaction that holds the outcomes' row locks on some partitions of events
        # and then asks for the claim's on all of them deadlocks with a partition being
        # attached (ATTACH PARTITION) meanwhile.
        self._one_transaction = not dialect.is_postgres(engine)
        self.owner = worker_id()
        # What this processor holds (``processing.slots``): every event by id, those
        # read ahead per source, how many run per source. Those finished wait here for
        # their outcome window.
        self._slots = Slots(sources, concurrency, batch_size)
        self._tasks: set[asyncio.Task[None]] = set()
        self._finished: list[tuple[Held, Result]] = []
        self._claimer = Claimer(sources, owner=self.owner, lease_s=lease_s)
        self._runner = EventRunner(
            engine,
            sources,
            handlers,
            cipher,
            owner=self.owner,
            handler_timeout_s=handler_timeout_s,
            retry=retry,
            rng=rng,
            router=router,
            fetch=fetch,
        )
        self._writer = OutcomeWriter(sources, owner=self.owner, retry=retry, rng=rng, box=box)
        self._leases = Leases(
            self._transaction, self._slots, self._writer, owner=self.owner, lease_s=lease_s
        )
        initialise_metrics(s.name for s in sources)
        # Set on shutdown: claim no more, give back what was read ahead.
        self.stopping = False
        # When a drain last ended here, and whether one runs (see ``idle_s``).
        self._drained_at = time.monotonic()
        self._pumping = False
        self._idle = asyncio.Event()
        self._idle.set()
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
        taken: list[Held] = []
        for row in rows:
            expires = row.lease_expires_at
            if row.lease_owner != self.owner or expires is None or row.id in self._slots.held:
                continue
            held = Held(row, frozenset(), mono + (expires - now).total_seconds())
            self._slots.held[row.id] = held
            taken.append(held)
        if self.stopping:
            task = asyncio.create_task(self._leases.release(taken), name="hookd-give-back")
            self._giving_back.add(task)
            task.add_done_callback(self._giving_back.discard)
            return 0
        for held in taken:
            _claims(held.row.source).inc()
            self._slots.add_ready(held)
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
        return len(self._slots.held) < self._slots.concurrency + 2 * self._slots.batch_size

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
        # A drain started for handed events (``accept``) runs them first: it claims
        # when woken or at the poll, not before it starts them.
        handed = bool(self._slots.ready) and not self._woken and not once
        drain = Drain(deadline, claims_left, once, handed, self._leases.beat_every_s)
        while True:
            # Cleared first: an event's end or a wake-up from here on ends the wait below.
            self._nudge.clear()
            now = time.monotonic()
            claiming = not self.stopping and drain.may_claim(now)
            want = await self._turn(drain, now, claiming)
            self._start_ready()
            if not self._tasks:
                if self._finished or drain.again(want):
                    continue  # their outcomes now; or claim again
                if drain.ended(claiming=claiming, woken=self._woken):
                    return drain.total
            if time.monotonic() >= drain.beat_at:
                await self._leases.renew()
                drain.beaten()
            await self._wait(
                drain.beat_at, drain.poll_at if claiming else math.inf, drain.window_end
            )

    async def _turn(self, drain: Drain, now: float, claiming: bool) -> int:
        """One turn of the drain: the exchange when a claim or the outcome window is due
        (what was read ahead given back instead once the drain stops claiming); the
        number of events it asked for."""
        busy = bool(self._tasks or self._slots.ready)
        drain.window_end, settle = window(now, drain.window_end, len(self._finished), busy)
        want = self._claim_size(drain, now) if claiming else 0
        if not claiming:
            await self._give_back_read_ahead(drain, now)
        if want or settle:
            # One transaction: the window's outcomes, then the claim.
            self._woken = self._woken and not want
            counted, drained = await self._exchange(want, fair=not drain.once)
            drain.window_end = math.inf
            if want:
                drain.claimed(counted, drained=drained)
        return want

    async def _give_back_read_ahead(self, drain: Drain, now: float) -> None:
        """A drain that claims no more because it is stopping or past its deadline gives
        back what it read ahead, at once."""
        if self._slots.ready and (self.stopping or now >= drain.deadline):
            await self._leases.release(self._slots.take_ready())

    def _claim_size(self, drain: Drain, now: float) -> int:
        """How many events to claim at this turn (``Slots.want``): none after a claim
        that took all that was due, until a wake-up, the poll, or a source that gave
        events below its cap (``_flowing``)."""
        looking = self._woken or now >= drain.poll_at or self._flowing
        if drain.exhausted and not looking:
            return 0
        if drain.once:
            return self._slots.batch_size
        return self._slots.want(len(self._tasks), looking=looking)

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

    def _start_ready(self) -> None:
        """Fill free slots from what is read ahead (``Slots.next_ready``)."""
        while len(self._tasks) < self._slots.concurrency:
            held = self._slots.next_ready(self._leases.beat_every_s)
            if held is None:
                return
            task = asyncio.create_task(self._run_held(held), name="hookd-event")
            held.task = task
            self._tasks.add(task)
            task.add_done_callback(functools.partial(self._ended, held))

    def _ended(self, held: Held, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        self._slots.ended(held)
        if not task.cancelled() and (exc := task.exception()) is not None:  # a bug
            log.error(
                "event task failed", extra={"event_id": held.row.id, "error": type(exc).__name__}
            )
        # The slot is refilled here, at once, not at the drain's next turn: the drain may
        # be in the middle of a transaction.
        if self._pumping and not self.stopping:
            self._start_ready()
        self._nudge.set()

    async def _run_held(self, held: Held) -> None:
        result = await self._runner.guarded(held.row, set(held.finished), held.done, held.claim)
        self._finished.append((held, result))

    # -- the exchange: a window's outcomes and a claim -------------------------------

    async def _exchange(self, want: int, *, fair: bool) -> tuple[int, bool]:
        """One transaction: the outcomes of the events finished so far (up to
        OUTCOME_BATCH, ``OutcomeWriter.settle_in``) and a claim of up to ``want`` events
        into the read-ahead: takeovers, events of objects, then the others shared
        between sources (``fair``: no source past its cap plus the read-ahead). The
        count a drain adds up (claimed, or none claimed, superseded), and whether that
        was all that is due (the claim was not full, and no source gave all it had room
        for).

        On SQLite the outcomes go first. On PostgreSQL the claim does, with the
        claimed events' ledger (``Claimer.claim_first``); two transactions, outcomes
        first, when the window holds events of objects (``Claimer.ordered_window``)."""
        batch = self._finished[:OUTCOME_BATCH]
        del self._finished[: len(batch)]
        now = datetime.now(UTC)
        plan = self._writer.plan(batch, now)
        claim_started = tracing.clock()  # 0 when tracing is off
        ask = self._ask(want, now, fair=fair)
        first = bool(want) and not self._one_transaction and not self._claimer.ordered_window(batch)
        try:
            claimed, owned = await self._exchange_in(batch, plan, ask, first=first)
        except BaseException:
            self._finished[:0] = batch  # not written: the next exchange tries again
            raise
        if want and not self._one_transaction and not first:
            async with self._transaction() as conn:
                claimed = await self._claimer.claim_first(conn, [], ask)
        if batch:
            for held_event, _ in batch:
                self._slots.held.pop(held_event.row.id, None)
            self._settled(plan, owned)
        if not want:
            return 0, False
        return await self._took(ask, claimed, claim_started)

    def _ask(self, want: int, now: datetime, *, fair: bool) -> Ask:
        """The claim's bounds: ``fair``, no source past its cap plus the read-ahead."""
        held = self._slots.active()
        limit = self._slots.cap + self._slots.read_ahead if fair else want
        full = frozenset(s for s, n in held.items() if n >= limit) if fair else frozenset()
        return Ask(want, now, held, full, limit)

    async def _exchange_in(
        self, batch: list[tuple[Held, Result]], plan: Plan, ask: Ask, *, first: bool
    ) -> tuple[Claimed, set[str]]:
        """The exchange's transaction: the claim (``first``: before the outcomes), the
        window's outcomes, the claim (SQLite: after them); the claim and the ids whose
        outcomes this owner wrote."""
        claimed = Claimed()
        owned: set[str] = set()
        # On a SQLite file under ``hookd serve``, a window whose events all succeeded goes
        # to the box's one writer, committed with the receivers' inserts; the rest here.
        boxed = bool(batch) and self._writer.boxed(plan)
        if boxed:
            owned = await self._writer.settle_boxed(plan, ask.now)
        here = batch and not boxed
        if not (first or here or (ask.want and self._one_transaction)):
            return claimed, owned
        async with self._transaction() as conn:
            if first:
                claimed = await self._claimer.claim_first(conn, batch, ask)
            if here:
                owned = await self._writer.settle_in(conn, plan, ask.now)
            if ask.want and self._one_transaction:
                claimed = await self._claimer.claim_in(conn, ask)
        return claimed, owned

    async def _took(self, ask: Ask, claimed: Claimed, claim_started: int) -> tuple[int, bool]:
        """A claim done: its events held; what ``_exchange`` returns."""
        _count_superseded(claimed.superseded)
        self._flowing = False
        rows = claimed.rows
        if not rows:
            return len(claimed.superseded), not ask.full
        await self._hold(claimed, claim_started)
        per_source = collections.Counter(r.source for r in rows)
        # A source below its cap that gave events may have more: the slots kept for the
        # others are claimed for at the next turn, not at the next poll.
        active = self._slots.active()
        self._flowing = any(active[source] < self._slots.cap for source in per_source)
        full_up = any(per_source[s.name] >= ask.limit - ask.held[s.name] for s in self._sources)
        return len(rows), not (len(rows) >= ask.want or full_up)

    async def _hold(self, claimed: Claimed, claim_started: int) -> None:
        """Counted, traced, their ledger read (unless read with the claim): the claimed
        rows join the read-ahead."""
        rows = claimed.rows
        for row in rows:
            _claims(row.source).inc()
        for row in claimed.taken:
            _takeovers(row.source).inc()
        claim = claim_span(claimed, claim_started)
        lease_end = time.monotonic() + self._lease_s
        ledger = claimed.ledger
        try:
            if self._router is not None:
                await self._router.refresh(self._engine)
            if ledger is None:
                async with self._engine.connect() as conn:
                    ledger = await finished_handlers_many(conn, [r.id for r in rows])
        except BaseException:
            # Claimed but not readable (or cancelled meanwhile): given back now.
            given = [Held(row, frozenset(), lease_end) for row in rows]
            await asyncio.shield(self._leases.release(given))
            raise
        for row in rows:
            self._slots.add_ready(Held(row, frozenset(ledger.get(row.id, ())), lease_end, claim))

    def _settled(self, plan: Plan, owned: set[str]) -> None:
        """After the commit: counted and logged."""
        for held, result in plan.batch:
            if result.ok and held.row.id in owned:
                _processed(held.row.source, EventStatus.PROCESSED).inc()
                _processing_seconds(held.row.source).observe(result.duration_s or 0.0)
        outcomes = [EventStatus.DEAD if at is None else RETRY for _, _, at in plan.failed]
        for (row, _, _), outcome in zip(plan.failed, outcomes, strict=True):
            if row.id in owned:
                _processed(row.source, outcome).inc()
        self._writer.log_settled(plan, owned, outcomes)

    # -- a shutdown past its grace ---------------------------------------------------

    async def _abandon(self) -> None:
        """A drain cancelled (a shutdown past its grace): cancel what runs, write the
        outcomes of what finished, give back the rest with the handlers it finished."""
        held = self._slots.held.values()
        running = [h.task for h in held if h.task is not None and not h.task.done()]
        for task in running:
            task.cancel()
        if running:
            await asyncio.wait(running, timeout=CANCEL_WAIT_S)
        await self._write_outcomes()
        self._slots.ready.clear()
        left = [h for h in self._slots.held.values() if h.task is None or h.task.done()]
        await self._leases.release(left)

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
                        self._slots.held.pop(held.row.id, None)
                    self._finished.clear()
                    return
                await asyncio.sleep(capped(0.05, failures, 1.0))
