"""Pausing and resuming a source's processing or one destination, and the destinations
as an operator sees them (pause, circuit breaker, queue).

Paused means stored and acknowledged, not processed: a paused source's events are not
claimed, a paused destination's deliveries are put off (parked) without using
attempts. Resuming wakes processing, which takes them in the order they came. Who
switched, when and why is kept (``store.delivery.destinations``); every process reads it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime
from urllib.parse import urlsplit, urlunsplit

from sqlalchemy.ext.asyncio import AsyncEngine

from hookd.errors import BadRequest, NotFound
from hookd.ops import models
from hookd.ops.events import Wake
from hookd.ops.queries import configured
from hookd.ops.resources import breaker_of, pause_of
from hookd.routing import DestinationConfig
from hookd.sources import Source, Sources
from processing.delivery import destination_configs
from store.delivery import destinations as state
from store.delivery.destinations import WHOLE_SOURCE, BreakerRow, PauseRow

MAX_REASON = 500
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def checked_reason(reason: str | None) -> str | None:
    """A pause's reason as it is stored (None: none given); ``BadRequest`` for one that
    cannot be."""
    text = (reason or "").strip()
    if _CONTROL.search(text):
        raise BadRequest("reason", "reason must be one line of text (no control characters)")
    if len(text) > MAX_REASON:
        raise BadRequest("reason", f"reason is longer than {MAX_REASON} characters")
    return text or None


def shown_url(url: str) -> str:
    """Where a destination posts, without what may be secret in a URL (user info, query)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


@dataclass(frozen=True, slots=True)
class SourceRouting:
    """A source's pause switch (None: never switched) and its destinations."""

    pause: PauseRow | None
    destinations: list[models.Destination]


class DestinationOps:
    """The configured ``sources``' pause switches and destinations over one database;
    ``wake`` after a resume (as a replay wakes processing)."""

    def __init__(self, engine: AsyncEngine, sources: Sources, wake: Wake | None = None) -> None:
        self.engine = engine
        self.sources = sources
        self._wake = wake

    def _destination(self, source_name: str, name: str) -> tuple[Source, DestinationConfig]:
        source = configured(self.sources, source_name)
        for config in destination_configs(source):
            if config.name == name:
                return source, config
        raise NotFound("destination")

    def parse_target(self, target: str) -> tuple[str, str]:
        """``SOURCE/NAME`` as the command line writes a destination."""
        source, slash, name = target.partition("/")
        if not slash or not source or not name:
            raise NotFound("destination")
        self._destination(source, name)
        return source, name

    async def list(self, source: str | None = None) -> list[models.Destination]:
        """Every destination (of ``source``), in the sources file's order."""
        chosen = [configured(self.sources, source)] if source is not None else list(self.sources)
        targets = [(s.name, c.name) for s in chosen for c in destination_configs(s)]
        async with self.engine.connect() as conn:
            pauses = await state.all_pauses(conn)
            breakers = await state.all_breakers(conn)
            waiting = await state.waiting(conn, targets)
        return [
            self._resource(s, c, pauses, breakers, waiting)
            for s in chosen
            for c in destination_configs(s)
        ]

    @staticmethod
    def _resource(
        source: Source,
        config: DestinationConfig,
        pauses: dict[tuple[str, str], PauseRow],
        breakers: dict[tuple[str, str], BreakerRow],
        waiting: dict[tuple[str, str], int],
    ) -> models.Destination:
        key = (source.name, config.name)
        pause = pauses.get(key)
        return models.Destination(
            name=config.name,
            source=source.name,
            url=shown_url(config.url),
            paused=pause is not None and pause.paused,
            pause=pause_of(pause),
            breaker=breaker_of(breakers.get(key), config.breaker.enabled),
            waiting=waiting.get(key, 0),
            rate_per_s=config.rate_per_s,
            concurrency=config.concurrency,
            max_attempts=config.max_attempts or source.config.max_attempts,
        )

    async def show(self, source: str, name: str) -> models.Destination:
        self._destination(source, name)
        [found] = [d for d in await self.list(source) if d.name == name]
        return found

    async def source_state(self) -> dict[str, SourceRouting]:
        """What the sources overview adds per source: its last pause switch, and its
        destinations."""
        async with self.engine.connect() as conn:
            pauses = await state.all_pauses(conn)
        listed = await self.list()
        return {
            source.name: SourceRouting(
                pauses.get((source.name, WHOLE_SOURCE)),
                [d for d in listed if d.source == source.name],
            )
            for source in self.sources
        }

    async def pause_source(self, name: str, *, by: str, reason: str | None = None) -> bool:
        """Stop claiming the source's events (they are still stored and acknowledged);
        whether this changed anything (a paused source stays paused as it was)."""
        source = configured(self.sources, name)
        return await self._switch(source.name, WHOLE_SOURCE, paused=True, by=by, reason=reason)

    async def resume_source(self, name: str, *, by: str) -> bool:
        source = configured(self.sources, name)
        return await self._switch(source.name, WHOLE_SOURCE, paused=False, by=by, reason=None)

    async def pause(self, source: str, name: str, *, by: str, reason: str | None = None) -> bool:
        """Put off the destination's deliveries (no attempt used) until it is resumed."""
        self._destination(source, name)
        return await self._switch(source, name, paused=True, by=by, reason=reason)

    async def resume(self, source: str, name: str, *, by: str) -> bool:
        """Deliver again: what it put off is due at once, in the order it came."""
        self._destination(source, name)
        return await self._switch(source, name, paused=False, by=by, reason=None)

    async def _switch(
        self, source: str, destination: str, *, paused: bool, by: str, reason: str | None
    ) -> bool:
        text = checked_reason(reason) if paused else None
        async with self.engine.begin() as conn:
            _, changed = await state.set_pause(
                conn,
                source,
                destination,
                paused=paused,
                by=by,
                reason=text,
                now=datetime.now(UTC),
            )
        if changed and not paused and self._wake is not None:
            await self._wake()
        return changed
