"""``/healthz``, ``/readyz`` and ``/metrics`` (behind the metrics or admin token, whose
wrong guesses are rate limited as the API's are: ``hookd.web.auth_limit``)."""

from __future__ import annotations

import asyncio
import logging

from prometheus_client import CONTENT_TYPE_LATEST
from sqlalchemy.ext.asyncio import AsyncEngine
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from hookd.auth import Right, Tokens
from hookd.metrics import db as dbmetrics
from hookd.sources import Sources
from hookd.web.auth_limit import AuthLimit, BearerGuard
from ingest import metrics as process_metrics
from ingest.batcher import GroupCommitter
from processing.wakeups import ArqWaker
from store import db

log = logging.getLogger("hookd.health")

# The 403's detail for a token that opens something else (the read token).
METRICS_ONLY = "this token does not open /metrics"
# How long /readyz waits for the database: a ping, then a probe write while commits fail.
READY_WAIT_S = 2.0


def routes(
    engine: AsyncEngine,
    waker: ArqWaker | None,
    tokens: Tokens,
    sources: Sources,
    committer: GroupCommitter | None = None,
) -> list[Route]:
    guard = BearerGuard(tokens, AuthLimit(engine))

    async def healthz(_: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def readyz(_: Request) -> Response:
        # One budget for both database checks, so that readyz answers within it.
        due = asyncio.get_running_loop().time() + READY_WAIT_S
        try:
            async with asyncio.timeout_at(due):
                await db.ping(engine)
        except Exception as exc:  # any failure means not ready
            return JSONResponse({"status": "unavailable", "database": type(exc).__name__}, 503)
        # A database can answer a ping and still refuse every commit (disk full, read
        # only, a lock held): then every delivery gets 503, and the load balancer should
        # send them elsewhere. Ready again once a commit succeeds; with no deliveries
        # coming (out of the balancer), the probe write made here is that commit.
        left = due - asyncio.get_running_loop().time()
        if committer is not None and committer.failing and not await committer.probe(left):
            failed = committer.failed_in_row
            return JSONResponse(
                {"status": "unavailable", "database": "commits_failing", "failed_commits": failed},
                503,
            )
        if waker is not None:
            try:
                await waker.ping()
            except Exception as exc:  # Redis is configured, so it must answer
                return JSONResponse({"status": "unavailable", "redis": type(exc).__name__}, 503)
        return JSONResponse({"status": "ok"})

    async def metrics(request: Request) -> Response:
        refused = await guard.refusal(request, Right.METRICS, METRICS_ONLY)
        if refused is not None:
            return refused
        text = process_metrics.render_process_families()
        try:
            async with asyncio.timeout(5.0):
                text += dbmetrics.render(await dbmetrics.collect(engine, sources))
        except Exception as exc:  # the process's own metrics still say something useful
            log.warning("database metrics unavailable", extra={"error": type(exc).__name__})
        return PlainTextResponse(text, media_type=CONTENT_TYPE_LATEST)

    return [
        Route("/healthz", healthz, methods=["GET"]),
        Route("/readyz", readyz, methods=["GET"]),
        Route("/metrics", metrics, methods=["GET"]),
    ]
