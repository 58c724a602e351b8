"""Reconciliation runs: started in the background (the API, the admin UI), run to the
end in the caller's task (the command line), listed and shown."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass
from datetime import UTC, datetime

from hookd.errors import NotFound
from hookd.ops import models
from hookd.ops.queries import RunQuery
from hookd.ops.resources import run_of
from hookd.ops.sources import SourceOps
from hookd.sources import Source
from reconcile.poller import INTERRUPT_WRITE_S, Outcome, Reconciler
from store.ids import is_id
from store.reconcile import runs as rstate
from store.status import UNFINISHED_RUN_STATUSES, RunStatus

# The logger the API's runs have always logged under (operators filter on it).
log = logging.getLogger("hookd.api")


@dataclass(frozen=True, slots=True)
class StartedRun:
    run: models.ReconcileRun  # the ``queued`` record, to answer with before the run begins
    task: asyncio.Task[None]  # the run itself; it ends without raising


class RunOps:
    """Runs of one ``reconciler``; those started here run in this process and are
    cancelled by ``stop``."""

    def __init__(self, reconciler: Reconciler, sources: SourceOps) -> None:
        self._reconciler = reconciler
        self._sources = sources
        self._tasks: dict[asyncio.Task[None], str] = {}

    async def run(
        self, source: Source, *, trigger: str, dry_run: bool, wait_for_lease_s: float = 0.0
    ) -> Outcome:
        """One run, awaited: cancelling the caller records the run interrupted."""
        return await self._reconciler.run(
            source, trigger=trigger, dry_run=dry_run, wait_for_lease_s=wait_for_lease_s
        )

    async def start(self, name: str, *, dry_run: bool) -> StartedRun:
        source = self._sources.reconcilable(name)
        run_id = await self._reconciler.create_queued(source, "api", dry_run)
        task = asyncio.create_task(self._background(source, run_id, dry_run))
        self._tasks[task] = run_id
        task.add_done_callback(self._forget)
        return StartedRun(await self.get(run_id), task)

    def _forget(self, task: asyncio.Task[None]) -> None:
        self._tasks.pop(task, None)

    async def _background(self, source: Source, run_id: str, dry_run: bool) -> None:
        """The run behind a started one; whatever happens, the queued record ends ``done``."""
        error: str | None = None
        try:
            outcome = await self._reconciler.run(
                source, trigger="api", dry_run=dry_run, run_id=run_id
            )
        except Exception as exc:  # the run record says so; the process goes on
            log.error(  # noqa: TRY400 - no traceback: it may quote SQL parameters
                "api run crashed",
                extra={"source": source.name, "run_id": run_id, "error": type(exc).__name__},
            )
            error = f"crashed: {type(exc).__name__}"
        else:
            if outcome.status == "disabled":
                # A disabled source does not run, and the run left its record alone.
                error = f"disabled: {outcome.error}" if outcome.error else "disabled"
        if error is None:
            return
        now = datetime.now(UTC)
        async with self._reconciler.engine.begin() as conn:
            row = await rstate.get_run(conn, run_id)
            if row is not None and row.status in UNFINISHED_RUN_STATUSES:
                await rstate.update_run(
                    conn, run_id, status=RunStatus.FAILED, finished_at=now, error=error
                )

    async def stop(self) -> None:
        """Cancel the runs started here; each records itself failed. One cancelled
        before it began has only its ``queued`` record, failed here instead."""
        tasks = dict(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if not tasks:
            return
        with contextlib.suppress(Exception):  # the next run closes them by the lease
            async with asyncio.timeout(INTERRUPT_WRITE_S), self._reconciler.engine.begin() as conn:
                now = datetime.now(UTC)
                for run_id in tasks.values():
                    await rstate.fail_unfinished_run(
                        conn, run_id, self._reconciler.interrupt_reason, now
                    )

    async def get(self, run_id: str) -> models.ReconcileRun:
        if not is_id(run_id):
            raise NotFound("run")
        async with self._reconciler.engine.connect() as conn:
            row = await rstate.get_run(conn, run_id)
        if row is None:
            raise NotFound("run")
        return run_of(row)

    async def recent(self, query: RunQuery) -> models.ReconcileRunList:
        async with self._reconciler.engine.connect() as conn:
            rows = await rstate.list_runs(conn, query.source, query.limit)
        return models.ReconcileRunList(runs=[run_of(r) for r in rows])
