"""Small real HTTP servers on loopback, run inside the test's event loop."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import uvicorn

from tests.support.server import free_port


@contextlib.asynccontextmanager
async def serve_app(app: Any, **options: Any) -> AsyncIterator[str]:
    """Serve an ASGI app with uvicorn on 127.0.0.1; yields its base URL. ``options``
    are more of ``uvicorn.Config``'s (its lifespan is off: the caller's to run)."""
    port = free_port()
    config = uvicorn.Config(
        app, host="127.0.0.1", port=port, log_level="warning", lifespan="off", **options
    )
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    while not server.started:
        if task.done():
            task.result()
        await asyncio.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await task
