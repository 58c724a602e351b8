"""The app in-process, lifespan included, behind an httpx client."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import httpx
from starlette.applications import Starlette

from hookd.runtime.app import create_app
from hookd.settings import Settings
from hookd.sources import Sources


@contextlib.asynccontextmanager
async def running_app(
    sources: Sources, database_url: str, **settings: Any
) -> AsyncIterator[tuple[Starlette, httpx.AsyncClient]]:
    clock = settings.pop("clock", None)
    config = Settings(database_url=database_url, **settings)
    app = create_app(config, sources, **({"clock": clock} if clock else {}))
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://hookd") as client:
            yield app, client
