"""``hookd worker``'s own ``/metrics`` and ``/healthz``.

A worker runs handlers, so its per-process families (``hookd_events_processed_total``,
``hookd_processing_seconds``) exist only in its memory: Prometheus scrapes each
worker as it scrapes each receiver. Queue and reconciliation families come from
the receivers' ``/metrics`` (read from the database there), so they are not
repeated here. The same bearer tokens open it as the receiver's: the metrics token
or the admin token.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Iterator

import uvicorn
from prometheus_client import CONTENT_TYPE_LATEST
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from hookd.auth import Right, Tokens, refusal
from hookd.errors import ConfigError
from ingest.metrics import render_process_families

log = logging.getLogger("hookd.worker")


def metrics_app(tokens: Tokens) -> Starlette:
    async def healthz(_: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def metrics(request: Request) -> Response:
        refused = refusal(tokens, request, Right.METRICS, "this token does not open /metrics")
        if refused is not None:
            return refused
        return PlainTextResponse(render_process_families(), media_type=CONTENT_TYPE_LATEST)

    return Starlette(
        routes=[
            Route("/healthz", healthz, methods=["GET"]),
            Route("/metrics", metrics, methods=["GET"]),
        ]
    )


class _EmbeddedServer(uvicorn.Server):
    """uvicorn inside the worker's loop: the worker, not uvicorn, owns the signals."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def bind(host: str, port: int) -> socket.socket:
    """Listen before anything else starts, so a taken port is one clear line."""
    try:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(128)
    except OSError as exc:
        raise ConfigError(
            f"environment: HOOKD_WORKER_METRICS_PORT: cannot listen on {host}:{port} "
            f"({exc.strerror or exc}); pick another port or 0 to turn worker metrics off"
        ) from None
    sock.setblocking(False)
    return sock


async def serve(sock: socket.socket, tokens: Tokens, stop: asyncio.Event) -> None:
    """Serve on ``sock`` until ``stop`` is set."""
    config = uvicorn.Config(
        metrics_app(tokens),
        lifespan="off",
        access_log=False,
        log_level="warning",
        # Keep the handler hookd.logs put on uvicorn's loggers (JSON or not).
        log_config=None,
        server_header=False,
    )
    server = _EmbeddedServer(config)
    host, port = sock.getsockname()[:2]
    log.info("worker metrics listening", extra={"host": host, "port": port})
    task = asyncio.create_task(server.serve(sockets=[sock]))
    await stop.wait()
    server.should_exit = True
    await task
