"""Group commit: requests wait together for one transaction and one fsync.

Each committer task takes whatever is queued (up to ``batch_max``; optionally
waiting ``window_s`` for company), inserts it with one statement, commits, and
only then resolves the waiting requests. While a commit is in flight the next
batch fills up, so batching grows with load and costs nothing when idle.

A batch shares a statement, never a fate: the receiver checks every value before it
joins one (``store.values``), and a statement that still fails for what a row holds
(``store.intake.fastpath.tied_to_rows``) is retried in halves until the row is alone, so only
that request is refused (400) and every other one is committed and acknowledged.

With a ``handoff`` (``hookd serve`` without Redis, ``processing.handoff``), a batch's new
events are committed already leased to one processor process and handed to it with
their rows after the commit (insert as claimed); only what was committed pending
(no processor free, events of an object) is announced through ``on_commit``.

It also keeps count of failed commits in a row, for readiness: a receiver whose
database answers but refuses every commit (disk full, read-only, locked) must leave
the load balancer rather than answer 503 to every delivery.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import KW_ONLY, dataclass, field
from typing import Protocol

from hookd.errors import HookdError
from ingest.metrics import COMMIT_SECONDS
from store.intake.events import Lease, NewEvent, NewRow, Stored
from store.intake.fastpath import Inserter, tied_to_rows
from store.values import Unstorable

log = logging.getLogger("hookd.batcher")

OnCommit = Callable[[Sequence[str]], Awaitable[None]]

# Failed commits in a row after which the receiver is not ready. One failure can be a
# blip (a deadlock victim, a connection cut); three in a row mean commits are failing.
FAILING_AFTER = 3


class StoreUnavailable(HookdError):
    """The event could not be committed; the caller must not acknowledge it."""


_Item = tuple[NewEvent, "asyncio.Future[Stored]"]


class HandoffTarget(Protocol):
    """A processor that takes a batch's new events: whose lease they are committed
    with, and where their rows go once committed."""

    def lease(self) -> Lease: ...

    def hand(self, rows: Sequence[NewRow]) -> None: ...


class Handoff(Protocol):
    def choose(self) -> HandoffTarget | None:
        """The processor the next batch goes to; None: commit it pending."""
        ...


def _consume(task: asyncio.Task[None]) -> None:
    if not task.cancelled():
        task.exception()


@dataclass(eq=False)
class GroupCommitter:
    inserter: Inserter
    _: KW_ONLY
    batch_max: int = 256
    window_s: float = 0.0
    commit_timeout_s: float = 10.0
    committers: int = 1
    on_commit: OnCommit | None = None
    handoff: Handoff | None = None
    _queue: asyncio.Queue[_Item] = field(init=False, default_factory=asyncio.Queue)
    _tasks: list[asyncio.Task[None]] = field(init=False, default_factory=list)
    failed_in_row: int = field(init=False, default=0)
    _probe: asyncio.Task[None] | None = field(init=False, default=None)
    # The loop the committers run on: asyncio.get_running_loop() costs a getpid()
    # system call on Python 3.11, once per request where enqueue would ask for it.
    _loop: asyncio.AbstractEventLoop | None = field(init=False, default=None)

    @property
    def failing(self) -> bool:
        """The last ``FAILING_AFTER`` commits all failed (and no probe succeeded since)."""
        return self.failed_in_row >= FAILING_AFTER

    async def probe(self, timeout_s: float) -> bool:
        """Whether the database takes a commit now: one probe write (``Inserter.probe``).

        ``/readyz`` calls this while ``failing``. It is what lets readiness come back:
        a receiver out of the load balancer gets no deliveries, so no commit of theirs
        would ever succeed to clear the count; a probe that commits clears it like one.
        Callers wait at most ``timeout_s`` but share one probe, left to finish on its
        own (within the inserter's own limits: SQLite's busy timeout, asyncpg's command
        timeout): however often readiness is polled, a struggling database gets one
        probe write at a time.
        """
        if self._probe is None or self._probe.done():
            self._probe = asyncio.create_task(self._run_probe(), name="hookd-commit-probe")
            # Its caller may have stopped waiting: the outcome is logged, not lost.
            self._probe.add_done_callback(_consume)
        try:
            async with asyncio.timeout(timeout_s):
                await asyncio.shield(self._probe)
        except Exception:  # any failure: still not taking commits
            return False
        return True

    async def _run_probe(self) -> None:
        try:
            await self.inserter.probe()
        except Exception as exc:
            log.warning("commit probe failed", extra={"error": type(exc).__name__})
            raise
        self.failed_in_row = 0

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._tasks = [
            asyncio.create_task(self._run(), name=f"hookd-committer-{i}")
            for i in range(self.committers)
        ]

    async def stop(self) -> None:
        """Commit what is queued, then stop."""
        if self._tasks:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._queue.join(), self.commit_timeout_s)
        tasks = [*self._tasks, *([self._probe] if self._probe is not None else [])]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks = []
        self._probe = None
        self._loop = None

    async def submit(self, event: NewEvent) -> Stored:
        """Resolve once the event (or its twin) is committed; ``StoreUnavailable`` otherwise."""
        return await self.enqueue(event)

    def enqueue(self, event: NewEvent) -> asyncio.Future[Stored]:
        """``submit`` without a task: the future resolves as ``submit`` would return."""
        loop = self._loop or asyncio.get_running_loop()
        future: asyncio.Future[Stored] = loop.create_future()
        self._queue.put_nowait((event, future))
        return future

    async def _collect(self) -> list[_Item]:
        batch = [await self._queue.get()]
        deadline = time.monotonic() + self.window_s
        while len(batch) < self.batch_max:
            try:
                batch.append(self._queue.get_nowait())
                continue
            except asyncio.QueueEmpty:
                pass
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            try:
                batch.append(await asyncio.wait_for(self._queue.get(), remaining))
            except TimeoutError:
                break
        return batch

    async def _run(self) -> None:
        while True:
            batch = await self._collect()
            try:
                await self._commit(batch)
            finally:
                for _ in batch:
                    self._queue.task_done()

    async def _commit(self, batch: list[_Item]) -> None:
        # A request whose client went away still gets committed: the provider
        # may have seen the bytes leave and will retry; dedupe holds.
        began = time.perf_counter()
        try:
            try:
                stored = await self._insert(batch)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # any database failure means: do not acknowledge
                if tied_to_rows(exc) and len(batch) > 1:
                    # One row no column takes fails the statement for all: the
                    # innocent rows are committed without it (invariant 9).
                    stored = await self._alone(batch, exc)
                else:
                    stored = []
                    self._failed(batch, exc, began)
        except asyncio.CancelledError:
            for _, future in batch:
                if not future.done():
                    future.set_exception(StoreUnavailable("shutting_down"))
            raise
        if stored:
            COMMIT_SECONDS.labels("committed").observe(time.perf_counter() - began)
            self.failed_in_row = 0
            await self._resolve(stored)

    async def _resolve(self, stored: list[tuple[asyncio.Future[Stored], Stored]]) -> None:
        """Answer the committed requests, then tell the processors what is new."""
        created: list[str] = []
        for future, result in stored:
            if not future.done():
                future.set_result(result)
            if result.created and result.row is None:  # a handed row needs no wake-up
                created.append(result.event_id)
        if created and self.on_commit is not None:
            try:
                await self.on_commit(created)
            except Exception as exc:  # dispatch is a hint; the sweep recovers it
                log.warning("dispatch after commit failed", extra={"error": type(exc).__name__})

    async def _insert(self, batch: list[_Item]) -> list[tuple[asyncio.Future[Stored], Stored]]:
        target = self.handoff.choose() if self.handoff is not None else None
        events = [event for event, _ in batch]
        async with asyncio.timeout(self.commit_timeout_s):
            if target is None:
                results = await self.inserter.insert(events)
            else:
                results = await self.inserter.insert(events, target.lease())
        if target is not None:
            target.hand([r.row for r in results if r.row is not None])
        return [(future, result) for (_, future), result in zip(batch, results, strict=True)]

    async def _alone(
        self, batch: list[_Item], exc: Exception
    ) -> list[tuple[asyncio.Future[Stored], Stored]]:
        """Commit ``batch`` in halves, and halves of the half that fails again, until the
        rows that cannot be stored are alone: each of those is refused (``Unstorable``),
        the rest committed. A batch of n with one such row costs about 2·log2(n) more
        statements, paid only when it happens."""
        if len(batch) == 1:
            event, future = batch[0]
            log.warning(
                "event refused: a value cannot be stored",
                extra={"source": event.source, "error": type(exc).__name__},
            )
            if not future.done():
                refusal = Unstorable("event", f"cannot be stored ({type(exc).__name__})")
                future.set_exception(refusal)
            return []
        middle = len(batch) // 2
        stored: list[tuple[asyncio.Future[Stored], Stored]] = []
        for half in (batch[:middle], batch[middle:]):
            began = time.perf_counter()
            try:
                stored += await self._insert(half)
            except Exception as again:
                if tied_to_rows(again):
                    stored += await self._alone(half, again)
                else:
                    self._failed(half, again, began)
        return stored

    def _failed(self, batch: list[_Item], exc: Exception, began: float) -> None:
        COMMIT_SECONDS.labels("failed").observe(time.perf_counter() - began)
        self.failed_in_row += 1
        # Never log.exception: a driver's traceback can quote the SQL parameters.
        log.error(
            "commit failed",
            extra={
                "batch_size": len(batch),
                "error": type(exc).__name__,
                "failed_in_row": self.failed_in_row,
            },
        )
        for _, future in batch:
            if not future.done():
                future.set_exception(StoreUnavailable("commit_failed", type(exc).__name__))
