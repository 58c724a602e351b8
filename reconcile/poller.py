"""One reconciliation run of one source: lease, page, diff, repair, cursor, record.

The cursor is a watermark in provider time. A run lists everything from
``cursor - overlap_s`` (the first run: ``now - lookback_s``) and judges what is
older than ``now - settle_s`` (younger items' webhooks may be on their way),
stores each missing event with origin ``reconcile`` in the same transaction as the
run's counters, and only when every page is done moves the cursor to ``now -
settle_s``: never past what it did not judge. A run killed halfway leaves the
cursor where it was; the next run lists the same window again and finds only what
is still missing. Each run records the interval it judged in the coverage ledger
(``store.reconcile.coverage``), and the part of it that fell out of the provider's retention
while the cursor waited (a source down or disabled too long) as unrecoverable.

A run cancelled by its process's shutdown (SIGTERM) records itself failed with
``Reconciler.interrupt_reason``; one whose process died without a word stays
``running`` until the next run of its source takes the expired lease and fails
it as abandoned.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
from sqlalchemy.ext.asyncio import AsyncEngine

from hookd import metric_families as families
from hookd import tracing
from hookd.errors import AuthFailure, LeaseLost, RateLimited, ReconcileError
from hookd.sources import Source
from reconcile import audit, page, schedule
from reconcile.http import Api, answer_limit, api_origin
from reconcile.providers import adapter_class
from reconcile.providers.base import Item, ListAdapter
from reconcile.run import Run, Tally, record_checked, record_failed
from store.crypto import BodyCipher
from store.ids import new_id, worker_id
from store.reconcile import coverage as ledger
from store.reconcile import runs as state
from store.reconcile.audit import AUTO_DISABLED_BY
from store.status import RunStatus, RunTrigger

log = logging.getLogger("hookd.reconcile")

MAX_PAGES = 5_000
# How long an interrupted run may take to record its end: shutdown deadlines
# (a CronJob's, systemd's) end in SIGKILL, and the database may be the reason.
INTERRUPT_WRITE_S = 5.0
LEASE_WAIT_LOG_S = 30.0

OnRepaired = Callable[[Sequence[str]], Awaitable[None]]

# Per process, like the processing families: in the process that ran the run.
RUN_SECONDS = families.RUN_SECONDS.register()
DUPLICATES = families.DUPLICATES.register()


def initialise_metrics(sources: Iterable[str]) -> None:
    """The reconciled sources' series, at 0 (see ingest.metrics)."""
    for source in sources:
        RUN_SECONDS.labels(source)
        DUPLICATES.labels(source)


def _ended(run: Run) -> None:
    RUN_SECONDS.labels(run.source.name).observe(
        max(0.0, (datetime.now(UTC) - run.started).total_seconds())
    )


@dataclass
class Outcome:
    run_id: str
    source: str
    status: str  # succeeded | failed | lease_held | disabled
    checked: int = 0
    missing: int = 0
    repaired: int = 0
    error: str | None = None
    cursor_before: float | None = None
    cursor_after: float | None = None
    # Acknowledged deliveries found not stored (new to the ledger), and the
    # registration check's problems (None: not checked), or why it could not read it.
    ack_violations: int = 0
    registration_problems: tuple[str, ...] | None = None
    registration_unread: str | None = None
    # Listed items the run could not judge (or store): its window is left a hole.
    unjudged: int = 0


@dataclass
class Reconciler:
    engine: AsyncEngine
    client: httpx.AsyncClient
    cipher: BodyCipher
    on_repaired: OnRepaired | None = None
    owner: str = field(default_factory=worker_id)
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
    max_wait_s: float = 300.0
    lease_s: float = 60.0
    rng: random.Random = field(default_factory=random.Random)
    # The error a run cancelled from outside records; whoever cancels (a signal
    # handler, a server's shutdown) says why first.
    interrupt_reason: str = "interrupted: cancelled"
    # Runs recorded as interrupted, for the command line to name.
    interrupted: list[str] = field(default_factory=list)
    # When a run starts: its window (settle, retention) and its ledger records are
    # reckoned from it. Injected by tests that emulate days passing; leases keep to
    # the real clock.
    clock: Callable[[], datetime] = field(default=lambda: datetime.now(UTC))

    def _api(self, source: Source, adapter: type[ListAdapter]) -> Api:
        return Api(
            self.client,
            lambda: adapter.auth_headers(source),
            min_interval_s=adapter.request_interval_s(source),
            max_wait_s=self.max_wait_s,
            sleep=self.sleep,
            rng=self.rng,
            source=source.name,
            origin=api_origin(source.config),
            max_answer_bytes=answer_limit(source.config),
        )

    async def create_queued(self, source: Source, trigger: str, dry_run: bool) -> str:
        """A run record for the API to answer with before the run starts."""
        run_id = new_id()
        async with self.engine.begin() as conn:
            await state.create_run(
                conn,
                id=run_id,
                source=source.name,
                status=RunStatus.QUEUED,
                trigger=trigger,
                dry_run=dry_run,
                started_at=datetime.now(UTC),
            )
        return run_id

    async def run(
        self,
        source: Source,
        *,
        trigger: str = RunTrigger.CLI,
        dry_run: bool = False,
        run_id: str | None = None,
        wait_for_lease_s: float = 0.0,
    ) -> Outcome:
        attributes = {"hookd.source": source.name, "hookd.trigger": str(trigger)}
        with tracing.span("hookd.reconcile.run", attributes) as current:
            outcome = await self._run(
                source,
                trigger=trigger,
                dry_run=dry_run,
                run_id=run_id,
                wait_for_lease_s=wait_for_lease_s,
            )
            tracing.annotate(
                current, {"hookd.run_id": outcome.run_id, "hookd.outcome": str(outcome.status)}
            )
            return outcome

    async def _run(
        self,
        source: Source,
        *,
        trigger: str,
        dry_run: bool,
        run_id: str | None,
        wait_for_lease_s: float,
    ) -> Outcome:
        if source.config.reconcile is None:
            raise ReconcileError("not_configured", f"source {source.name} has no [reconcile]")
        started = self.clock()
        async with self.engine.begin() as conn:
            await state.ensure_state(conn, source.name, started)
            current = await state.get_state(conn, source.name)
        assert current is not None
        run = Run(source, current, run_id or new_id(), trigger, dry_run, started)
        if current.disabled:
            return Outcome(run.id, source.name, "disabled", error=current.disabled_reason)
        if not await self._acquire(source.name, wait_for_lease_s, run.id):
            await self._record(run, RunStatus.LEASE_HELD, finished=True)
            log.info("lease held elsewhere", extra={"source": source.name, "run_id": run.id})
            held = "lease held by another run"
            return Outcome(run.id, source.name, RunStatus.LEASE_HELD, error=held)
        try:
            return await self._leased(run)
        except asyncio.CancelledError:
            await self._interrupted(run)
            raise
        finally:
            with contextlib.suppress(Exception):
                async with self.engine.begin() as conn:
                    await state.update_state(
                        conn, source.name, self.owner, lease_owner=None, lease_expires_at=None
                    )

    async def _acquire(self, source: str, wait_s: float, run_id: str) -> bool:
        deadline = time.monotonic() + wait_s
        next_log = time.monotonic()
        while True:
            async with self.engine.begin() as conn:
                now = datetime.now(UTC)
                if await state.acquire_lease(conn, source, self.owner, self.lease_s, now):
                    abandoned = await state.close_abandoned_runs(conn, source, now, keep=run_id)
                    if abandoned:
                        log.warning(
                            "closed runs abandoned by a process that died",
                            extra={"source": source, "runs": ",".join(abandoned)},
                        )
                    return True
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            if time.monotonic() >= next_log:  # `--wait` may wait minutes: say so
                log.info(
                    "waiting for another run of this source to finish",
                    extra={"source": source, "wait_left_s": round(left)},
                )
                next_log = time.monotonic() + LEASE_WAIT_LOG_S
            await self.sleep(min(1.0, left))

    async def _interrupted(self, run: Run) -> None:
        """The run was cancelled (its process is shutting down): record it failed and
        give the lease back, so neither the API nor the next run waits on it."""
        reason = self.interrupt_reason
        try:
            async with asyncio.timeout(INTERRUPT_WRITE_S), self.engine.begin() as conn:
                now = datetime.now(UTC)
                if await state.fail_unfinished_run(conn, run.id, reason, now):
                    await record_failed(conn, run, reason, self.clock())
                await state.update_state(
                    conn,
                    run.source.name,
                    self.owner,
                    last_run_id=run.id,
                    lease_owner=None,
                    lease_expires_at=None,
                    updated_at=now,
                )
        except Exception as exc:  # the next run closes it by the lease instead
            log.warning(
                "could not record the interrupted run",
                extra={"source": run.source.name, "run_id": run.id, "error": type(exc).__name__},
            )
            return
        self.interrupted.append(run.id)
        _ended(run)
        log.warning(
            "run interrupted",
            extra={"source": run.source.name, "run_id": run.id, "reason": reason},
        )

    async def _record(self, run: Run, status: str, *, finished: bool, **values: Any) -> None:
        async with self.engine.begin() as conn:
            if await state.get_run(conn, run.id) is None:
                await state.create_run(
                    conn,
                    id=run.id,
                    source=run.source.name,
                    status=status,
                    trigger=run.trigger,
                    dry_run=run.dry_run,
                    started_at=run.started,
                )
            await state.update_run(
                conn,
                run.id,
                status=status,
                started_at=run.started,
                finished_at=datetime.now(UTC) if finished else None,
                **values,
            )

    async def _leased(self, run: Run) -> Outcome:
        now = run.started.timestamp()
        cursor = run.current.cursor
        earliest = None
        if cursor is None:  # a first run: where earlier ones set out from, if any did
            async with self.engine.connect() as conn:
                begun = await ledger.first_start(conn, run.source.name)
            earliest = None if begun is None else begun.timestamp()
        since, until = run.plan(now, earliest)
        await self._record(run, RunStatus.RUNNING, finished=False, cursor_before=cursor)
        adapter_type = adapter_class(run.source.provider)
        api = self._api(run.source, adapter_type)
        meta = dict(run.current.meta or {})
        adapter = adapter_type(run.source, api, meta, now)
        tally = Tally(api)
        outcome = Outcome(run.id, run.source.name, RunStatus.RUNNING, cursor_before=cursor)
        log.info(
            "run started",
            extra={
                "source": run.source.name,
                "run_id": run.id,
                "cursor_before": cursor,
                "window_from": since,
                "window_to": until,
            },
        )
        try:
            pages = 0
            async for items in adapter.pages(since):
                pages += 1
                if pages > MAX_PAGES:
                    raise ReconcileError("too_many_pages", f"more than {MAX_PAGES} pages")  # noqa: TRY301
                with tracing.span("hookd.reconcile.page", {"hookd.page": pages}):
                    await self._page(run, adapter, items, tally, outcome)
                # Progress a page at a time: a paced run (Slack: a request a
                # minute) must not look hung.
                log.info(
                    "reconciling",
                    extra={
                        "source": run.source.name,
                        "run_id": run.id,
                        "page": pages,
                        "checked": outcome.checked,
                        "missing": outcome.missing,
                    },
                )
        except ReconcileError as exc:
            await self._count(run, tally)
            return await self._failed(run, outcome, exc)
        except (httpx.HTTPError, ValueError, KeyError, TypeError) as exc:
            await self._count(run, tally)
            return await self._failed(
                run, outcome, ReconcileError("bad_answer", type(exc).__name__)
            )
        registration = await audit.read_registration(adapter)
        await audit.record_registration(self.engine, run.source.name, registration, run.id)
        if registration.unread is not None:
            outcome.registration_unread = registration.unread
        elif registration.unchecked is None:
            outcome.registration_problems = registration.problems
        await self._count(run, tally)
        meta.update(adapter.kept())
        return await self._succeeded(run, outcome, now, meta)

    async def _count(self, run: Run, tally: Tally) -> None:
        async with self.engine.begin() as conn:
            await state.add_run_counts(conn, run.id, **tally.take())

    async def _page(
        self, run: Run, adapter: ListAdapter, listed: list[Item], tally: Tally, outcome: Outcome
    ) -> None:
        """Check one page against the store and repair what is missing, counted with it.

        Items younger than the run's settle window are left out: their webhook may be on
        its way, and the cursor stops short of them, so a later run judges them."""
        source = run.source
        items = page.judged(listed, run.until)
        doubtful = page.doubtful(listed)
        async with self.engine.begin() as conn:
            now = datetime.now(UTC)
            if not await state.renew_lease(conn, source.name, self.owner, self.lease_s, now):
                raise LeaseLost("lease_lost", "another run took the source over")
            keys = [i.key for i in items] + [i.key for i in doubtful if i.key]
            present = await state.existing_keys(conn, source.name, keys)
        missing = [i for i in items if i.key not in present]
        # What cannot be judged is accounted for when stored; else it is said, and the
        # run's window is left a hole (``Run.unjudged``), never passed as checked.
        stored_doubtful = [i for i in doubtful if i.key and i.key in present]
        for item in doubtful:
            if not (item.key and item.key in present):
                assert item.doubt is not None
                run.note_unjudged(item.doubt)
        broken = run.acks.broken(adapter, [i.key for i in missing])
        fixes = await page.repairs(adapter, source, missing, run.dry_run)
        for _, reason in fixes.unrepaired:
            run.note_unjudged(reason)
        left = {id(item) for item, _ in fixes.unrepaired}
        repairable = [i for i in missing if id(i) not in left]
        judged = page.Page([*items, *stored_doubtful], repairable, fixes.events, broken)
        async with self.engine.begin() as conn:
            done = await page.record(conn, run, judged, tally, self.cipher)
        run.acks.report(done.violations)
        outcome.ack_violations += len(done.violations)
        outcome.checked += len(judged.items)
        outcome.unjudged = run.unjudged_count
        outcome.missing += done.found
        outcome.repaired += done.repaired
        if len(judged.items) > done.found:
            DUPLICATES.labels(source.name).inc(len(judged.items) - done.found)
        if done.created and self.on_repaired is not None:
            with contextlib.suppress(Exception):
                await self.on_repaired(done.created)
        if done.found:
            log.info(
                "missed events found",
                extra={"source": source.name, "run_id": run.id, "missing": done.found},
            )

    async def _succeeded(
        self, run: Run, outcome: Outcome, now: float, meta: dict[str, str]
    ) -> Outcome:
        interval = schedule.next_interval(run.rc, run.current.interval_s, outcome.missing > 0)
        finished = datetime.now(UTC)
        # Up to what the run judged, never back (a settle window made longer). A run
        # that could not judge all it listed judged none of its window: the cursor
        # stays where it lists from (past what it recorded lost), so a later run
        # checks the window again, for a day at most (``UNJUDGED_HOLD_S``).
        before = run.current.cursor
        assert run.window is not None
        holds = run.unjudged and not run.moves_on
        reached = min(run.window[0] + run.rc.overlap_s, run.until) if holds else run.until
        judged = reached if before is None else max(before, reached)
        cursor_after = before if run.dry_run else judged
        values: state.StateChange = {"last_run_id": run.id, "updated_at": finished}
        if not run.dry_run:
            values |= {
                "cursor": cursor_after,
                "error_count": 0,
                "auth_failures": 0,
                "interval_s": interval,
                "next_run_at": finished + timedelta(seconds=interval),
                "meta": meta,
            }
        async with self.engine.begin() as conn:
            if not await state.update_state(conn, run.source.name, self.owner, **values):
                await state.update_run(
                    conn, run.id, status=RunStatus.FAILED, finished_at=finished, error="lease_lost"
                )
                outcome.status, outcome.error = RunStatus.FAILED, "lease_lost"
                _ended(run)
                return outcome
            await state.update_run(
                conn,
                run.id,
                status=RunStatus.SUCCEEDED,
                finished_at=finished,
                cursor_after=cursor_after,
            )
            if not run.dry_run:
                await record_checked(conn, run, outcome.repaired, self.clock())
        outcome.status, outcome.cursor_after = RunStatus.SUCCEEDED, cursor_after
        _ended(run)
        log.info(
            "run finished",
            extra={
                "source": run.source.name,
                "run_id": run.id,
                "checked": outcome.checked,
                "missing": outcome.missing,
                "repaired": outcome.repaired,
                "cursor_before": outcome.cursor_before,
                "cursor_after": cursor_after,
            },
        )
        return outcome

    async def _failed(self, run: Run, outcome: Outcome, exc: ReconcileError) -> Outcome:
        rc = run.rc
        finished = datetime.now(UTC)
        values: state.StateChange = {"last_run_id": run.id, "updated_at": finished}
        if isinstance(exc, AuthFailure):
            failures = run.current.auth_failures + 1
            values["auth_failures"] = failures
            if failures >= rc.disable_after_auth_failures:
                values["disabled"] = True
                values["disabled_at"] = finished
                values["disabled_by"] = AUTO_DISABLED_BY
                values["disabled_reason"] = (
                    f"{failures} authentication failures in a row ({exc.detail}); "
                    "fix the token, then `hookd sources enable`"
                )
        if isinstance(exc, RateLimited):
            delay = exc.wait_s
        else:
            values["error_count"] = run.current.error_count + 1
            delay = schedule.error_delay(rc, run.current.error_count + 1, self.rng)
        values["next_run_at"] = finished + timedelta(seconds=delay)
        message = str(exc)
        async with self.engine.begin() as conn:
            await state.update_state(conn, run.source.name, None, **values)
            await state.update_run(
                conn, run.id, status=RunStatus.FAILED, finished_at=finished, error=message
            )
            await record_failed(conn, run, message, self.clock())
        outcome.status, outcome.error = RunStatus.FAILED, message
        _ended(run)
        log.warning(
            "run failed",
            extra={
                "source": run.source.name,
                "run_id": run.id,
                "reason": exc.reason,
                "error": exc.detail,
            },
        )
        return outcome
