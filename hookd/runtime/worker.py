"""``hookd worker``: arq functions and cron for processing and the outbox sweep, and
the reconciliation schedule.

Redis only says "look now": an arq job starts a drain of the processor that this
process owns (``Drains``) and returns at once, so arq's job timeout, and with it
how long a job of a worker killed mid-run stays marked in progress in Redis, is
seconds, whatever handlers take. The reconciliation schedule is not an arq job at
all: it is this process's own loop (``reconcile.service.Scheduler``), and the
reconcile lease in the database lets one process at a time run a source. The worker
keeps processing from the database while Redis is away (a local sweep every few
seconds) and reconnects to arq with backoff, so losing Redis delays events and
loses none.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import math
import os
import signal
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx
from arq.connections import ArqRedis
from arq.cron import cron
from arq.worker import Worker, func
from redis.asyncio import ConnectionPool, Redis
from sqlalchemy.ext.asyncio import AsyncEngine

from hookd import tracing
from hookd.auth import Tokens
from hookd.backoff import capped
from hookd.ops import EventOps
from hookd.runtime.alerts import AlertSchedule
from hookd.runtime.lifecycle import Adapted, Service, running
from hookd.runtime.operations import OperationSchedule, operations_of
from hookd.runtime.prune import PruneSchedule
from hookd.runtime.silence import SilenceSchedule
from hookd.runtime.sqlite_writer import writer_socket
from hookd.settings import Settings
from hookd.sources import Sources
from processing.attempt import RetryPolicy
from processing.destinations import Router
from processing.handlers import load_handlers
from processing.limits import LocalLimits, RedisLimits
from processing.pool import ProcessorPool, pool_of
from processing.processor import Processor
from processing.wakeups import WAKE_JOB, Drains, warn_if_redis_unreachable
from reconcile.objects import ObjectFetcher
from reconcile.poller import OnRepaired, Reconciler
from reconcile.poller import initialise_metrics as initialise_reconcile_metrics
from reconcile.service import Scheduler
from store import db, dialect
from store.crypto import BodyCipher
from store.intake.writer_link import WriterSocket

log = logging.getLogger("hookd.worker")

SWEEP_JOB = "hookd_sweep"
# arq's time limit on a job. A job only starts a drain (``Drains.kick``) and returns, so
# this is a few Redis round trips' worth. arq marks a running job "in progress" in Redis
# for its longest job timeout + 10 s: the mark a worker killed mid-job leaves behind
# (while it lasts, arq starts no job in its place) ends within seconds.
JOB_TIMEOUT_S = 5.0
# Every Redis call of the worker gives up after this long. arq sets no read timeout of
# its own, so a connection that stops answering (a half-open TCP connection after a
# network fault, a stalled proxy) would hang the arq loop, and with it every wake-up and
# sweep, forever; failing instead hands over to the local sweep in supervise().
REDIS_TIMEOUT_S = 5.0
REDIS_CONNECT_TIMEOUT_S = 2.0
# An arq connection that lasted this long resets supervise()'s back-off.
STABLE_S = 60.0
# From SIGTERM to exit, at most this long: past it, _overdue() ends the process, well
# inside the 15-30 s an orchestrator waits before SIGKILL. The events in flight have
# STOP_GRACE_S of it.
SHUTDOWN_LIMIT_S = 12.0
EXIT_OVERDUE = 70  # EX_SOFTWARE: the shutdown itself went wrong
# arq's main loop stops within this long of the signal (``cancelled``), cancelled again
# every RECANCEL_S while it goes on; past it, the shutdown goes on without it.
ARQ_STOP_S = 3.0
RECANCEL_S = 0.25
# Processors side by side in one worker or processor process, HOOKD_PROCESS_CONCURRENCY
# split between them: one processor has one transaction in flight at a time (its turn's
# outcomes and claim); two keep the database busy while the other's events run.
PIPELINES = 2
# At shutdown, events in flight have this long to finish before they are cancelled and
# handed back: well inside the 30 s an orchestrator gives before SIGKILL by default.
STOP_GRACE_S = 5.0


@dataclass
class Runtime:
    settings: Settings
    sources: Sources
    engine: AsyncEngine
    client: httpx.AsyncClient
    processor: ProcessorPool
    reconciler: Reconciler
    drains: Drains
    # The destinations' shared rate and concurrency limits (None: kept in this process).
    limits_redis: Redis | None = None
    # The box's one SQLite writer, which takes the processors' outcomes (``hookd serve``
    # on a SQLite file); None: they write them in their own transactions.
    box: WriterSocket | None = None

    async def close(self) -> None:
        if self.box is not None:
            await self.box.close()
        await self.client.aclose()
        if self.limits_redis is not None:
            with contextlib.suppress(Exception):
                await self.limits_redis.aclose()
        await self.engine.dispose()


def build_runtime(
    settings: Settings,
    sources: Sources,
    engine: AsyncEngine | None = None,
    *,
    on_repaired: OnRepaired | None = None,
) -> Runtime:
    """The parts that process and reconcile; ``on_repaired`` wakes processing for the
    events a reconciliation run stored (none: the next sweep finds them)."""
    engine = engine or db.create_engine(settings.database_url)
    client = httpx.AsyncClient()
    cipher = BodyCipher(settings.encryption_keys)
    # With Redis, several workers deliver: the destinations' limits are kept there.
    limits_redis = (
        Redis.from_url(
            settings.redis_url,
            socket_timeout=REDIS_TIMEOUT_S,
            socket_connect_timeout=REDIS_CONNECT_TIMEOUT_S,
        )
        if settings.redis_url
        else None
    )
    limits = RedisLimits(limits_redis) if limits_redis is not None else LocalLimits()
    router = Router(
        sources,
        client,
        limits,
        retry_base_s=settings.retry_base_s,
        retry_cap_s=settings.retry_cap_s,
    )
    handlers = load_handlers(sources, client)
    fetch = ObjectFetcher(client) if _fetches(sources) else None
    box_path = writer_socket()
    box = WriterSocket(box_path) if box_path and not dialect.is_postgres(engine) else None

    def member(concurrency: int) -> Processor:
        return Processor(
            engine,
            sources,
            handlers,
            cipher,
            lease_s=settings.lease_s,
            handler_timeout_s=settings.handler_timeout_s,
            retry=RetryPolicy(settings.retry_base_s, settings.retry_cap_s),
            batch_size=settings.process_batch,
            concurrency=concurrency,
            router=router,
            # [sources.order] fetch = true: objects through the reconcile adapters' client.
            fetch=fetch,
            box=box,
        )

    processor = pool_of(member, settings.process_concurrency, PIPELINES)
    reconciler = Reconciler(
        engine, client, cipher, on_repaired=on_repaired, lease_s=settings.reconcile_lease_s
    )
    initialise_reconcile_metrics(s.name for s in sources if s.config.reconcile is not None)
    drains = Drains(processor)
    return Runtime(
        settings, sources, engine, client, processor, reconciler, drains, limits_redis, box
    )


def _fetches(sources: Sources) -> bool:
    """Whether a source fetches its events' objects ([sources.order] fetch = true)."""
    return any(s.config.order is not None and s.config.order.fetch for s in sources)


async def hookd_wake(ctx: dict[str, Any]) -> int:
    """A commit happened somewhere: claim and process what is due (in a drain this
    process owns; the job ends at once). Its ``hookd.wake`` span (tracing on) is the
    parent of the claims that drain makes: the task it starts inherits the context."""
    runtime: Runtime = ctx["runtime"]
    with tracing.span("hookd.wake", {"hookd.wake.via": "arq"}):
        runtime.drains.kick()
    return 0


async def hookd_sweep(ctx: dict[str, Any]) -> int:
    """The outbox sweep: events whose wake-up never came (Redis down, crash) get processed."""
    runtime: Runtime = ctx["runtime"]
    runtime.drains.kick()
    return 0


def redis_pool(url: str) -> ArqRedis:
    """arq's connection, with a timeout on every call (arq's ``create_pool`` sets none)."""
    return ArqRedis(
        ConnectionPool.from_url(
            url,
            socket_timeout=REDIS_TIMEOUT_S,
            socket_connect_timeout=REDIS_CONNECT_TIMEOUT_S,
        )
    )


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
        ],
        redis_pool=redis_pool(runtime.settings.redis_url),
        ctx={"runtime": runtime},
        handle_signals=False,
        max_jobs=4,
        job_timeout=JOB_TIMEOUT_S,
        poll_delay=0.05,
    )


async def _local_sweep(runtime: Runtime, seconds: float, stop: asyncio.Event) -> None:
    """Process from the database alone for ``seconds`` (Redis is unreachable), or until
    ``stop``: a SIGTERM must not wait out a sweep period of up to 30 s (and the SIGKILL
    that an orchestrator's grace period ends with)."""
    loop = asyncio.get_running_loop()
    end = loop.time() + seconds
    while loop.time() < end and not stop.is_set():
        sweep = asyncio.create_task(runtime.processor.drain(max(0.0, end - loop.time())))
        stopper = asyncio.create_task(stop.wait())
        await asyncio.wait({sweep, stopper}, return_when=asyncio.FIRST_COMPLETED)
        stopper.cancel()
        if stop.is_set():
            # Like arq's jobs at shutdown: cancelled, each event in flight hands its
            # claim back (run() gave them their grace first).
            sweep.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await sweep
            return
        if sweep.exception() is not None:  # the database is away too: keep waiting
            log.warning("local sweep failed", extra={"error": type(sweep.exception()).__name__})
        with contextlib.suppress(TimeoutError):
            pause = min(runtime.settings.sweep_s, max(0.0, end - loop.time()))
            await asyncio.wait_for(stop.wait(), pause)


async def _close(worker: Worker) -> None:
    """Close arq's worker; its connections are closed even when Redis cannot be reached
    (``Worker.close`` deletes its health key first, and stops there if that fails)."""
    pool = worker.pool
    try:
        await worker.close()
    except asyncio.CancelledError:
        # arq's close cancels the jobs in flight and then gathers them: a job cancelled
        # in the middle of its own Redis reply surfaces here as CancelledError. Only a
        # cancellation of this task itself goes on (it was a traceback and exit 1).
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            raise
        log.debug("arq worker close: a job in flight was cancelled")
    except Exception as exc:  # Redis is away: nothing to tidy up there
        log.debug("arq worker close failed", extra={"error": type(exc).__name__})
    finally:
        if pool is not None:
            with contextlib.suppress(Exception):
                await pool.aclose(close_connection_pool=True)


async def _finish_or_stop(worker: Worker, stop: asyncio.Event) -> bool:
    """Wait for the worker's jobs in flight; False when ``stop`` came first (the caller
    then closes the worker, which cancels them: each records its own interruption)."""
    if not worker.tasks:
        return not stop.is_set()
    in_flight: asyncio.Future[list[Any]] = asyncio.gather(
        *worker.tasks.values(), return_exceptions=True
    )
    stopper: asyncio.Future[Any] = asyncio.ensure_future(stop.wait())
    await asyncio.wait([in_flight, stopper], return_when=asyncio.FIRST_COMPLETED)
    stopper.cancel()
    if in_flight.done():
        return not stop.is_set()
    # close() cancels the jobs; the gather then completes with their CancelledErrors.
    in_flight.add_done_callback(lambda f: f.cancelled() or f.exception())
    return False


async def cancelled(task: asyncio.Task[Any], within_s: float) -> bool:
    """Cancel ``task`` and wait for it to end, cancelling it again every
    ``RECANCEL_S`` while it goes on, for at most ``within_s``; whether it ended.

    arq's main loop can lose a cancellation. The Redis client sends each command under
    ``asyncio.wait_for`` (its socket timeout), and Python 3.11's ``wait_for`` returns the
    inner result, dropping the cancellation, when the cancel arrives as the send
    completes (CPython gh-86296, fixed in 3.12). Seen under load: ``Worker.main`` polled
    on and started jobs for the whole shutdown limit, its cancel request counted, and
    the worker exited 70. The next cancel reaches it at its next await; one plain wait
    would spend the whole limit."""
    loop = asyncio.get_running_loop()
    end = loop.time() + within_s
    while not task.done() and loop.time() < end:
        task.cancel()
        await asyncio.wait({task}, timeout=min(RECANCEL_S, max(0.0, end - loop.time())))
    if not task.done():
        log.warning("arq did not stop in time: going on with the shutdown")
        return False
    if not task.cancelled():
        task.exception()  # retrieved: a failure while stopping is not news
    return True


async def supervise(runtime: Runtime, stop: asyncio.Event) -> None:
    failures = 0
    loop = asyncio.get_running_loop()
    while not stop.is_set():
        worker = arq_worker(runtime)
        started = loop.time()
        main = asyncio.create_task(worker.main())
        stopper = asyncio.create_task(stop.wait())
        done, _ = await asyncio.wait({main, stopper}, return_when=asyncio.FIRST_COMPLETED)
        if stopper in done:
            await cancelled(main, ARQ_STOP_S)
            await _close(worker)
            return
        stopper.cancel()
        exc = main.exception()
        # The back-off grows with losses in a row; a connection that held for a while
        # starts it again, so the fifth brief outage in a day is not a 30 s one.
        if loop.time() - started >= STABLE_S:
            failures = 0
        failures += 1
        # Jobs in flight work on the database, not on Redis: let them finish
        # rather than cancel them (close() would). A shutdown meanwhile still wins.
        if not await _finish_or_stop(worker, stop):
            await _close(worker)
            return
        await _close(worker)
        log.warning(
            "lost Redis; processing from the database until it is back",
            extra={"error": type(exc).__name__ if exc else "stopped", "failures": failures},
        )
        await _local_sweep(runtime, capped(1.0, min(failures, 5), 30.0), stop)


async def backstop(runtime: Runtime, stop: asyncio.Event) -> None:
    """Sweep from this process whenever arq has run no wake-up or sweep here for two
    sweep periods.

    arq starts only jobs it finds among the first 100 of its queue, and a job whose
    worker died stays there marked "in progress" for the longest job timeout + 10 s.
    That was an hour while the reconciliation schedule was an arq job: after a few
    dozen worker crashes within the hour, those ghosts filled the window and no worker
    started any job, wake-up or sweep, until they expired. Jobs now last moments and
    their marks seconds (``JOB_TIMEOUT_S``), but whatever else fills or stalls arq's
    queue, the database, not arq, decides who processes what, so this sweep can run
    beside arq's.
    """
    period = 2 * runtime.settings.sweep_s
    while not stop.is_set():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), period / 2)
        if stop.is_set() or runtime.processor.idle_s() < period:
            continue
        try:
            await runtime.processor.drain(math.inf)
        except Exception as exc:  # the database is away: the next round tries again
            log.warning("backstop sweep failed", extra={"error": type(exc).__name__})


def waiting_at(limit: int = 8, depth: int = 3) -> str:
    """Where the unfinished tasks of this loop wait: the innermost ``depth`` frames of
    each task's await chain as ``function@file:line`` (code locations only, no values),
    so an overdue shutdown says what it was stuck on."""
    spots = []
    for task in asyncio.all_tasks():
        if task.done() or task is asyncio.current_task():
            continue
        chain = []
        coro: Any = task.get_coro()
        while coro is not None:  # follow the await chain to the innermost coroutine
            frame = getattr(coro, "cr_frame", None) or getattr(coro, "gi_frame", None)
            if frame is not None:
                name = os.path.basename(frame.f_code.co_filename)
                chain.append(f"{frame.f_code.co_name}@{name}:{frame.f_lineno}")
            coro = getattr(coro, "cr_await", None) or getattr(coro, "gi_yieldfrom", None)
        if chain:
            spots.append(f"{task.get_name()}=" + ">".join(chain[-depth:]))
    return "; ".join(sorted(spots)[:limit]) + ("; …" if len(spots) > limit else "")


def _overdue() -> None:
    """The orderly shutdown did not end within SHUTDOWN_LIMIT_S (a close that hangs on a
    busy machine): exit now rather than be SIGKILLed mid-write by the orchestrator.
    Nothing is lost: claims still held are taken over when their leases end, and a
    scheduled run recorded its interruption at the signal."""
    log.error(
        "shutdown did not finish in time: exiting; events still claimed here are taken "
        "over when their leases end",
        extra={"limit_s": SHUTDOWN_LIMIT_S, "waiting_at": waiting_at()},
    )
    logging.shutdown()
    os._exit(EXIT_OVERDUE)


@dataclass
class _Stopping:
    """When the shutdown began (``loop.time()``), for the "stopped" line's ``took_s``."""

    at: float | None = None

    def began(self, now: float) -> None:
        """The shutdown began at ``now``, unless a signal began it earlier."""
        self.at = now if self.at is None else self.at


def _stop_on_signals(
    loop: asyncio.AbstractEventLoop, runtime: Runtime, stop: asyncio.Event
) -> _Stopping:
    """SIGINT and SIGTERM set ``stop``; the first also starts the shutdown's time limit.
    When the first came, for the "stopped" line."""
    since = _Stopping()

    def on_signal(sig: signal.Signals) -> None:
        # A scheduled reconciliation run cancelled by the shutdown records this as its
        # end, instead of staying ``running``.
        runtime.reconciler.interrupt_reason = f"interrupted by {sig.name}"
        if not stop.is_set():
            log.info("stopping", extra={"signal": sig.name})
            since.at = loop.time()
            loop.call_later(SHUTDOWN_LIMIT_S, _overdue)
        stop.set()

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, on_signal, sig)
    return since


async def settle_in_flight(runtime: Runtime, grace_s: float) -> None:
    """Wait up to ``grace_s`` for the drain that runs (if any) to end: it claims no more
    (``stop_claiming``), so it ends when its events in flight have."""
    log.info("draining", extra={"events": runtime.processor.in_flight, "grace_s": grace_s})
    if not runtime.processor.pumping:
        return
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(runtime.processor.drain(0.0), grace_s)


async def run(
    settings: Settings, sources: Sources, checked: Callable[[], None] | None = None
) -> None:
    """The worker until SIGTERM or SIGINT. ``checked`` is called once the checks that
    stop start-up have passed (the command line's warnings come then, not before an
    error)."""
    from hookd.metrics import worker as workermetrics

    port = settings.worker_metrics_port
    sock = workermetrics.bind(settings.worker_metrics_host, port) if port else None
    runtime = build_runtime(settings, sources)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()

    since = _stop_on_signals(loop, runtime, stop)
    tokens = Tokens(
        settings.admin_token, settings.read_token, settings.metrics_token, settings.listen_token
    )
    metrics = (
        asyncio.create_task(workermetrics.serve(sock, tokens, stop)) if sock is not None else None
    )
    # After the checks that stop start-up (the metrics port, the keys): these warn.
    if checked is not None:
        checked()
    await warn_if_redis_unreachable(
        settings.redis_url,
        "processing from the database (a sweep every HOOKD_SWEEP_S) and reconnecting "
        "with back-off until it is back",
        sweep_s=settings.sweep_s,
    )
    log.info("worker started", extra={"owner": runtime.processor.owner})
    sweeping = asyncio.create_task(backstop(runtime, stop))

    async def wake() -> None:  # a replayed batch: drain here; other workers sweep
        runtime.drains.kick()

    events = EventOps(runtime.engine, wake)
    # Started in this order and stopped in the reverse one, the reconciliation schedule
    # first: a run in progress records its interruption at once, as a shutdown always did.
    timetable: list[Service] = [
        OperationSchedule(operations_of(settings, runtime.engine, sources, events)),
        PruneSchedule(runtime.engine, sources, settings.prune_every_s),
        SilenceSchedule(runtime.engine, sources),
        AlertSchedule(
            runtime.engine, sources, runtime.client, prune_every_s=settings.prune_every_s
        ),
    ]
    if settings.reconcile_schedule:
        scheduler = Scheduler(runtime.reconciler, sources)
        timetable.append(Adapted(functools.partial(scheduler.stop, grace_s=0), scheduler.start))
    timed = contextlib.AsyncExitStack()
    await timed.enter_async_context(running(timetable))

    async def stop_schedules() -> None:
        # As soon as the signal comes, beside arq's close rather than after it: a
        # close that waits on Redis (5 s per call when it is away) must not spend the
        # orchestrator's grace period before the run records its interruption.
        await stop.wait()
        # Claim no more from now on: what runs has its grace while arq closes.
        runtime.processor.stop_claiming()
        await timed.aclose()

    schedules = asyncio.create_task(stop_schedules(), name="hookd-stop-schedules")
    try:
        await supervise(runtime, stop)
    finally:
        stop.set()
        since.began(loop.time())
        # Nothing more is claimed and what was read ahead goes back at once; the
        # events in flight have STOP_GRACE_S to finish, then are cancelled, and each
        # hands its claim back with what it finished.
        runtime.processor.stop_claiming()
        await settle_in_flight(runtime, STOP_GRACE_S)
        await runtime.drains.stop()
        await schedules
        sweeping.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await sweeping
        if metrics is not None:
            with contextlib.suppress(Exception):
                await metrics
        await runtime.close()
        log.info("stopped", extra={"took_s": round(loop.time() - (since.at or 0.0), 3)})
