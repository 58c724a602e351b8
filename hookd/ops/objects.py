"""Source objects as an operator sees them ([sources.order]): one object's latest known
state, for ``GET /api/sources/{name}/objects/{id}`` and the admin UI. Its events are
listed with the event list's ``object`` filter (``EventQuery.object``)."""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncEngine

from hookd.errors import Conflict, NotFound
from hookd.ops import models
from hookd.ops.queries import configured
from hookd.ops.resources import object_of
from hookd.ordering import MAX_KEY_CHARS
from hookd.sources import Sources
from store.delivery import objects


class ObjectOps:
    """The objects of the configured ``sources`` over one database."""

    def __init__(self, engine: AsyncEngine, sources: Sources) -> None:
        self.engine = engine
        self.sources = sources

    async def show(self, name: str, key: str) -> models.SourceObject:
        """The object; ``NotFound`` for an
        unknown source or an object of which no event is stored and none was processed,
        ``Conflict`` for a source without ``[sources.order]``."""
        source = configured(self.sources, name)
        if source.config.order is None:
            raise Conflict("not_configured", "this source has no [sources.order] table")
        if not key or len(key) > MAX_KEY_CHARS or "\x00" in key:
            raise NotFound("object")
        async with self.engine.connect() as conn:
            row = await objects.get_object(conn, name, key)
            counts = await objects.object_counts(conn, name, key)
        if row is None and not counts:
            raise NotFound("object")
        return object_of(name, key, row, counts)
