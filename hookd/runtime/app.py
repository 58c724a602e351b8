"""The Starlette application: receiver, health, metrics."""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypedDict

from sqlalchemy.ext.asyncio import AsyncEngine
from starlette.applications import Starlette
from starlette.datastructures import State
from starlette.middleware import Middleware

from hookd import tracing
from hookd.auth import Tokens
from hookd.errors import ConfigError
from hookd.logs import configure as configure_logs
from hookd.notify.outbox import route_for
from hookd.ops import EventOps, OperationOps, RunOps, SourceOps
from hookd.ops.alerts import AlertOps
from hookd.ops.stream import EventStream
from hookd.runtime import sqlite_writer
from hookd.runtime.alerts import AlertSchedule
from hookd.runtime.lifecycle import Adapted, Service, running
from hookd.runtime.operations import scheduled_operations
from hookd.runtime.prune import PruneSchedule
from hookd.runtime.silence import SilenceSchedule
from hookd.runtime.worker import build_runtime
from hookd.settings import Settings
from hookd.sources import Sources, load_sources
from hookd.web import admin, api, health
from hookd.web.headers import PathHeaders
from hookd.web.served import ServedOps
from ingest.batcher import GroupCommitter
from ingest.learned import LearnedKeys
from ingest.receiver import HookdApp, Receiver
from ingest.rejected import RejectedNotes
from processing.handoff import HandoffClient, InProcess
from processing.pool import ProcessorPool
from processing.wakeups import ArqWaker, InProcessConsumer, LocalWaker
from reconcile.late import LateNotes
from reconcile.service import Scheduler
from store import db, dialect, migrate
from store.crypto import BodyCipher
from store.intake import fastpath

log = logging.getLogger("hookd.app")

# Set by `hookd serve` when it runs processor processes (no Redis): their wake-up
# sockets, separated by os.pathsep. Every receiver process it starts inherits it.
PROCESSOR_SOCKETS_ENV = "HOOKD_PROCESSOR_SOCKETS"


def processor_sockets() -> list[str]:
    """The wake-up sockets of the processor processes `hookd serve` runs, if any."""
    return [p for p in os.environ.get(PROCESSOR_SOCKETS_ENV, "").split(os.pathsep) if p]


class AppState(TypedDict):
    """What ``app.state`` holds: what tests and the command line reach."""

    committer: GroupCommitter
    engine: AsyncEngine
    operations: OperationOps


class _App(HookdApp):
    """hookd's application, complete when built: the receiver ``/hooks/…`` goes to,
    and in ``state`` what tests and the command line reach (engine, committer,
    operations)."""

    def __init__(self, receiver: Receiver, state: AppState, **starlette: Any) -> None:
        super().__init__(**starlette)
        self.receiver = receiver
        self.state = State({**state})


@dataclass(frozen=True)
class _Processing:
    """How new events reach processing: through arq (Redis), to the processor processes
    ``hookd serve`` runs (a datagram, and the new events handed over already leased to
    one of them), or to the processor of this process's own loop."""

    waker: ArqWaker | None
    local_waker: LocalWaker | None
    handoff: HandoffClient | None
    consumer: InProcessConsumer | None
    in_process: InProcess | None

    @property
    def dispatcher(self) -> ArqWaker | LocalWaker | InProcessConsumer:
        """What a commit, a replay or a repair wakes."""
        dispatcher = self.waker or self.local_waker or self.consumer
        assert dispatcher is not None
        return dispatcher

    @property
    def name(self) -> str:
        return "arq" if self.waker else "processors" if self.local_waker else "in-process"


def _processing(settings: Settings, processor: ProcessorPool) -> _Processing:
    waker = ArqWaker(settings.redis_url) if settings.redis_url else None
    # Without Redis: the processor processes `hookd serve` runs, woken by datagrams;
    # else (HOOKD_PROCESSORS=0, or an app built outside serve) processing in this loop.
    sockets = [] if waker else processor_sockets()
    local_waker = LocalWaker(sockets) if sockets else None
    # ... and new events committed leased to one of them, handed over with their rows
    # (or, processing in this loop, to this process's processor).
    handoff = HandoffClient(sockets) if sockets else None
    consumer = None if waker or local_waker else InProcessConsumer(processor, settings.sweep_s)
    in_process = InProcess(processor, settings.lease_s) if consumer else None
    return _Processing(waker, local_waker, handoff, consumer, in_process)


def _inserter(settings: Settings, engine: AsyncEngine, committers: int) -> fastpath.Inserter:
    return sqlite_writer.inserter_for(
        engine.url.render_as_string(hide_password=False),
        BodyCipher(settings.encryption_keys),
        committers=committers,
        timeout_s=settings.commit_timeout_s,
        sqlite_process=settings.sqlite_writer_process(),
    )


def create_app(
    settings: Settings,
    sources: Sources,
    *,
    engine: AsyncEngine | None = None,
    clock: Callable[[], float] = time.time,
) -> Starlette:
    engine = engine or db.create_engine(settings.database_url)
    # SQLite has one writer; on PostgreSQL two committers keep one batch filling
    # while the other commits (more only make batches smaller).
    committers = 2 if dialect.is_postgres(engine) else 1

    # A run's repairs wake the dispatcher, which is built from the runtime's processor:
    # the one cycle of the composition, closed at call time.
    async def on_repaired(ids: Sequence[str]) -> None:
        await processing.dispatcher.on_commit(ids)

    runtime = build_runtime(settings, sources, engine, on_repaired=on_repaired)
    processing = _processing(settings, runtime.processor)
    inserter = _inserter(settings, engine, committers)
    committer = GroupCommitter(
        inserter,
        batch_max=settings.commit_batch_max,
        window_s=settings.commit_window_ms / 1000,
        commit_timeout_s=settings.commit_timeout_s,
        committers=committers,
        on_commit=processing.dispatcher.on_commit,
        handoff=processing.handoff or processing.in_process,
    )
    # Duplicates of reconciled keys: late deliveries, written off the request path.
    late_notes = LateNotes(engine)
    # Refused requests, recorded the same way: queued, written in batches, bounded.
    rejected_notes = RejectedNotes(engine, BodyCipher(settings.encryption_keys))
    receiver = Receiver(
        sources,
        committer,
        body_timeout_s=settings.body_timeout_s,
        clock=clock,
        on_duplicate=late_notes.note,
        on_rejected=rejected_notes.note,
        # Secrets handed over in handshakes (Asana's), kept in the database.
        learned=LearnedKeys(engine, BodyCipher(settings.encryption_keys)),
    )
    # One set of operations behind both the API and the admin UI: a replay from either
    # wakes this process's dispatcher, a run started from either is cancelled below.
    events = EventOps(engine, lambda: processing.dispatcher.on_commit(()))
    source_ops = SourceOps(engine, sources)
    runs = RunOps(runtime.reconciler, source_ops)
    # Without Redis there is no worker: serve keeps the reconciliation schedule too.
    scheduled = settings.reconcile_schedule and not processing.waker
    scheduler = Scheduler(runtime.reconciler, sources) if scheduled else None
    # The alerts' evaluation and notifications, likewise kept by the worker with Redis.
    alert_schedule = (
        None
        if processing.waker
        else AlertSchedule(engine, sources, runtime.client, prune_every_s=settings.prune_every_s)
    )
    # Bulk operations asked for here start here at once; any process may resume them.
    operations, operation_schedule = scheduled_operations(settings, engine, sources, events)
    # Who hears of an alert resolved by hand: no channel until the channels' router is here.
    # A resolution by hand is told to the channels that heard of the alert.
    alerts = AlertOps(engine, route_for(sources), sources.alerts.group_s, sources.notify)
    # The event stream of `hookd listen` (read-only): its look-back covers a commit's bound.
    cipher = BodyCipher(settings.encryption_keys)
    stream = EventStream(engine, cipher, settings.commit_timeout_s, sources)
    served = ServedOps.over(events, source_ops, runs, operations, alerts, stream=stream)
    # Started in this order, stopped in the reverse: the receiving path (committer,
    # then the inserter and handoff it writes to) before processing, which has its
    # grace for the events it runs; the schedules first of all.
    optional: list[Service | None] = [
        Adapted(runtime.close),
        Adapted(processing.local_waker.close) if processing.local_waker else None,
        Adapted(processing.waker.close) if processing.waker else None,
        processing.consumer,
        # Reconciliation runs the API started: each records its interruption.
        Adapted(runs.stop),
        scheduler,
        Adapted(processing.handoff.close, processing.handoff.start) if processing.handoff else None,
        Adapted(inserter.close, inserter.start),
        late_notes,
        rejected_notes,
        committer,
        Adapted(receiver.deadlines.stop, receiver.deadlines.start),
        Adapted(receiver.key_fetcher.close),
        operation_schedule,
        # Every receiver process keeps it; a lease in the database lets one prune at a time.
        PruneSchedule(engine, sources, settings.prune_every_s),
        # [sources.expect]: the silence watch, likewise once per cluster through a lease.
        SilenceSchedule(engine, sources),
        alert_schedule,
    ]
    services = [service for service in optional if service is not None]

    @contextlib.asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        async with running(services):
            # Everything alive now lives as long as the process: keep it out of the
            # collector's full passes, which otherwise stall every request in flight.
            gc.collect()
            gc.freeze()
            log.info(
                "receiver started", extra={"sources": len(sources), "processing": processing.name}
            )
            try:
                yield
            finally:
                # Processing in this process: the events it runs now have their grace below.
                consumer = processing.consumer
                draining = {"events": runtime.processor.in_flight} if consumer else {}
                log.info("draining", extra=draining)
                # Reconciliation runs still going are cancelled below (after a grace for a
                # scheduled one): each records this as its end instead of staying ``running``.
                runtime.reconciler.interrupt_reason = "interrupted: hookd serve shut down"

    tokens = tokens_of(settings)
    return _App(
        receiver,
        {"committer": committer, "engine": engine, "operations": operations},
        routes=[
            *health.routes(engine, processing.waker, tokens, sources, committer),
            *api.routes(tokens, served),
            *admin.routes(tokens, served),
        ],
        lifespan=lifespan,
        # Cache-Control on /api and /metrics, the security headers under /admin: on every
        # answer there, Starlette's own 404/405 and a 500 included.
        middleware=[Middleware(PathHeaders)],
    )


def tokens_of(settings: Settings) -> Tokens:
    """The bearer tokens the settings configure (``hookd.auth``)."""
    return Tokens(
        settings.admin_token, settings.read_token, settings.metrics_token, settings.listen_token
    )


async def check_schema(engine: AsyncEngine, url: str) -> None:
    """Refuse to serve a database that is not migrated to this version's head."""
    current = await migrate.current_revision(engine)
    head = migrate.head_revision(url)
    if current != head:
        raise ConfigError(
            f"database {db.describe(url)} is at schema {current or 'none'}, this hookd needs "
            f"{head}: run `hookd db upgrade`"
        )


def app_from_env() -> Starlette:
    """Factory for uvicorn (``--workers`` starts one per process)."""
    settings = Settings.from_env()
    # Each of those processes is spawned afresh: without this, its records fall to
    # Python's last-resort handler (bare warnings, no ids, no JSON, no INFO at all).
    configure_logs(settings.log_level, settings.log_json)
    tracing.setup("serve")  # once per process; a no-op in the one ``hookd serve`` set up
    sources = load_sources(settings.config)
    return create_app(settings, sources)
