"""``hookd worker``: arq functions and cron for processing and the outbox sweep.

Redis only says "look now". The worker keeps processing from the database
while Redis is away (a local sweep every few seconds) and reconnects to arq
with backoff, so losing Redis delays events and loses none.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from dataclasses import dataclass, replace
from typing import Any

import httpx
from arq.connections import RedisSettings
from arq.cron import cron
from arq.worker import Worker, func
from sqlalchemy.ext.asyncio import AsyncEngine

from ingest.config import Settings, Sources
from ingest.dispatch import WAKE_JOB
from ingest.handlers import load_handlers
from ingest.processing import Processor, RetryPolicy
from reconcile.poller import Reconciler
from reconcile.service import TICK_S, run_due
from store import db
from store.crypto import BodyCipher

log = logging.getLogger("hookd.worker")

SWEEP_JOB = "hookd_sweep"
RECONCILE_JOB = "hookd_reconcile"


@dataclass
class Runtime:
    settings: Settings
    sources: Sources
    engine: AsyncEngine
    client: httpx.AsyncClient
    processor: Processor
    reconciler: Reconciler

    async def close(self) -> None:
        await self.client.aclose()
        await self.engine.dispose()


def build_runtime(
    settings: Settings, sources: Sources, engine: AsyncEngine | None = None
) -> Runtime:
    engine = engine or db.create_engine(settings.database_url)
    client = httpx.AsyncClient()
    cipher = BodyCipher(settings.encryption_keys)
    processor = Processor(
        engine,
        sources,
        load_handlers(sources, client),
        cipher,
        lease_s=settings.lease_s,
        handler_timeout_s=settings.handler_timeout_s,
        retry=RetryPolicy(settings.retry_base_s, settings.retry_cap_s),
        batch_size=settings.process_batch,
        concurrency=settings.process_concurrency,
    )
    reconciler = Reconciler(engine, client, cipher, lease_s=settings.reconcile_lease_s)
    return Runtime(settings, sources, engine, client, processor, reconciler)


async def hookd_wake(ctx: dict[str, Any]) -> int:
    """A commit happened somewhere: claim and process what is due."""
    runtime: Runtime = ctx["runtime"]
    return await runtime.processor.drain()


async def hookd_sweep(ctx: dict[str, Any]) -> int:
    """The outbox sweep: events whose wake-up never came (Redis down, crash) get processed."""
    runtime: Runtime = ctx["runtime"]
    return await runtime.processor.drain()


async def hookd_reconcile(ctx: dict[str, Any]) -> int:
    """The reconciliation schedule: run every source whose next run is due."""
    runtime: Runtime = ctx["runtime"]
    return len(await run_due(runtime.reconciler, runtime.sources))


def reconcile_cron(runtime: Runtime) -> list[Any]:
    if not runtime.settings.reconcile_schedule:
        return []
    return [
        cron(
            hookd_reconcile,
            name=RECONCILE_JOB,
            second=set(range(0, 60, int(TICK_S))),
            run_at_startup=True,
            unique=True,
            timeout=3600,
        )
    ]


def arq_worker(runtime: Runtime) -> Worker:
    sweep_every = max(1, int(runtime.settings.sweep_s))
    return Worker(
        functions=[func(hookd_wake, name=WAKE_JOB, keep_result=0, max_tries=1)],
        cron_jobs=[
            cron(
                hookd_sweep,
                name=SWEEP_JOB,
                second=set(range(0, 60, sweep_every)),
                run_at_startup=True,
                unique=True,
            ),
            *reconcile_cron(runtime),
        ],
        redis_settings=replace(
            RedisSettings.from_dsn(runtime.settings.redis_url), conn_retries=0, conn_timeout=2
        ),
        ctx={"runtime": runtime},
        handle_signals=False,
        max_jobs=4,
        job_timeout=max(300, runtime.settings.lease_s),
        poll_delay=0.05,
    )


async def _local_sweep(runtime: Runtime, seconds: float) -> None:
    """Process from the database alone for ``seconds`` (Redis is unreachable)."""
    loop = asyncio.get_running_loop()
    end = loop.time() + seconds
    while loop.time() < end:
        try:
            await runtime.processor.drain()
        except Exception as exc:  # the database is away too: keep waiting
            log.warning("local sweep failed", extra={"error": type(exc).__name__})
        await asyncio.sleep(min(runtime.settings.sweep_s, max(0.0, end - loop.time())))


async def supervise(runtime: Runtime, stop: asyncio.Event) -> None:
    failures = 0
    while not stop.is_set():
        worker = arq_worker(runtime)
        main = asyncio.create_task(worker.main())
        stopper = asyncio.create_task(stop.wait())
        done, _ = await asyncio.wait({main, stopper}, return_when=asyncio.FIRST_COMPLETED)
        if stopper in done:
            main.cancel()
            with contextlib.suppress(BaseException):
                await main
            with contextlib.suppress(Exception):
                await worker.close()
            return
        stopper.cancel()
        exc = main.exception()
        failures += 1
        # Jobs in flight work on the database, not on Redis: let them finish
        # rather than cancel them (close() would) and strand their claims.
        await asyncio.gather(*worker.tasks.values(), return_exceptions=True)
        with contextlib.suppress(Exception):
            await worker.close()
        log.warning(
            "lost Redis; processing from the database until it is back",
            extra={"error": type(exc).__name__ if exc else "stopped", "failures": failures},
        )
        await _local_sweep(runtime, min(30.0, 1.0 * 2 ** min(failures, 5)))


async def run(settings: Settings, sources: Sources) -> None:
    from ingest import workermetrics

    port = settings.worker_metrics_port
    sock = workermetrics.bind(settings.worker_metrics_host, port) if port else None
    runtime = build_runtime(settings, sources)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    metrics = (
        asyncio.create_task(workermetrics.serve(sock, settings.admin_token, stop))
        if sock is not None
        else None
    )
    log.info("worker started", extra={"owner": runtime.processor.owner})
    try:
        await supervise(runtime, stop)
    finally:
        stop.set()
        if metrics is not None:
            with contextlib.suppress(Exception):
                await metrics
        await runtime.close()
