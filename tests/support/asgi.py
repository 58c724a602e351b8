"""The app in-process, lifespan included, behind an httpx client.

``via="asgi"`` (the default) calls the app through httpx's ASGI transport: every
request takes the ASGI path. ``via="http"`` serves it with uvicorn on loopback with
``hookd serve``'s HTTP protocol (``ingest.httpguard``), where deliveries to a source
take the receiver's direct path (``ingest.direct``): the same tests, run both ways,
show the two paths answer alike.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import httpx
from starlette.applications import Starlette

from hookd.runtime.app import create_app
from hookd.settings import Settings
from hookd.sources import Sources
from ingest.httpguard import GuardedHttpToolsProtocol
from tests.support.http import serve_app


@contextlib.asynccontextmanager
async def running_app(
    sources: Sources, database_url: str, *, via: str = "asgi", **settings: Any
) -> AsyncIterator[tuple[Starlette, httpx.AsyncClient]]:
    clock = settings.pop("clock", None)
    config = Settings(database_url=database_url, **settings)
    app = create_app(config, sources, **({"clock": clock} if clock else {}))
    async with app.router.lifespan_context(app):
        if via == "asgi":
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://hookd") as client:
                yield app, client
        else:
            assert via == "http", via
            async with serving(app) as url, httpx.AsyncClient(base_url=url) as client:
                yield app, client


def serving(app: Any) -> contextlib.AbstractAsyncContextManager[str]:
    """``app`` behind uvicorn on 127.0.0.1 with serve's protocol (its lifespan is the
    caller's to run); yields the base URL."""
    return serve_app(app, http=GuardedHttpToolsProtocol, access_log=False, log_config=None)
