"""The operations the web serves: one set over one database, behind both the
operations API (``hookd.web.api``) and the admin UI (``hookd.web.admin``), so a replay
from either wakes the same processing and a run started from either is one ``runs``
stops at shutdown."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy.ext.asyncio import AsyncEngine

from hookd.ops import EventOps, RunOps, SourceOps
from hookd.ops.alerts import AlertOps
from hookd.ops.coverage import CoverageOps
from hookd.ops.destinations import DestinationOps
from hookd.ops.objects import ObjectOps
from hookd.ops.operations import OperationOps
from hookd.ops.rejected import RejectedOps
from hookd.ops.stream import EventStream
from hookd.ops.watch import WatchOps
from hookd.sources import Sources


@dataclass(frozen=True, slots=True)
class ServedOps:
    events: EventOps
    sources: SourceOps
    runs: RunOps
    watch: WatchOps
    operations: OperationOps
    objects: ObjectOps
    destinations: DestinationOps
    coverage: CoverageOps
    alerts: AlertOps
    stream: EventStream

    @classmethod
    def over(
        cls,
        events: EventOps,
        sources: SourceOps,
        runs: RunOps,
        operations: OperationOps,
        alerts: AlertOps,
        *,
        stream: EventStream,
    ) -> ServedOps:
        """The process's own operations (its wake, its runs), its alerts (whose
        resolution by hand tells the process's channels), and the reads and switches
        made over the same database and sources file."""
        engine = sources.engine
        return cls(
            events,
            sources,
            runs,
            WatchOps(engine),
            operations,
            ObjectOps(engine, sources.sources),
            DestinationOps(engine, sources.sources, events.wake),
            CoverageOps(engine, sources),
            alerts,
            stream,
        )

    @property
    def engine(self) -> AsyncEngine:
        return self.sources.engine

    @property
    def rejected(self) -> RejectedOps:
        """Reads only, over the same database: nothing of the process's own to hold."""
        return RejectedOps(self.engine)

    @property
    def configured(self) -> Sources:
        return self.sources.sources

    @property
    def names(self) -> list[str]:
        """The configured sources' names, in the file's order."""
        return [s.name for s in self.sources.sources]
