"""Sources as an operator sees them: the overview, and reconciliation switched back on."""

from __future__ import annotations

from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine

from hookd.errors import Conflict, NotFound
from hookd.sources import Source, Sources
from reconcile import service


class SourceOps:
    """The configured ``sources`` over one database."""

    def __init__(self, engine: AsyncEngine, sources: Sources) -> None:
        self.engine = engine
        self.sources = sources

    def source(self, name: str) -> Source:
        source = self.sources.get(name)
        if source is None:
            raise NotFound("source")
        return source

    def reconcilable(self, name: str) -> Source:
        """A configured source with a ``[sources.reconcile]`` table."""
        source = self.source(name)
        if source.config.reconcile is None:
            raise Conflict("not_configured", "this source has no [sources.reconcile] table")
        return source

    def reconciled(self) -> list[Source]:
        """Every source with a ``[sources.reconcile]`` table, in the file's order."""
        return service.reconciled(self.sources)

    async def overview(self) -> list[dict[str, Any]]:
        """Each source with its reconciliation state and its pending and dead counts."""
        return await service.source_resources(self.engine, self.sources)

    async def enable(self, name: str) -> dict[str, Any]:
        """Reconciliation on again after it stopped itself (auth failures); the source's
        overview entry afterwards."""
        source = self.reconcilable(name)
        await service.enable(self.engine, source.name)
        [resource] = [r for r in await self.overview() if r["name"] == source.name]
        return resource
