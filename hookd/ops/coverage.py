"""A source's coverage: which time it has had checked by reconciliation, and the holes
with their reasons, for the API (``GET /api/sources/{name}/coverage``), the admin UI
and ``hookd coverage``. The merging is ``reconcile.coverage``'s; here the range asked
for is read and filled in, and the source's state looked up."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from hookd.errors import BadRequest, Conflict
from hookd.ops import models
from hookd.ops.queries import unix_time
from hookd.ops.resources import coverage_of
from hookd.ops.sources import SourceOps
from hookd.sources import Source
from reconcile import coverage
from store.reconcile import coverage as ledger
from store.reconcile import runs as rstate
from store.reconcile import silence

_AGO = re.compile(r"([0-9]{1,9})([smhd])")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}
# The widest range one report merges: ten years.
MAX_RANGE_S = 3650 * 86_400.0


def parse_time(field: str, raw: str, now: datetime) -> datetime:
    """``since``/``until``: ISO 8601 (UTC unless it names an offset), unix seconds, or a
    time ago (``90m``, ``24h``, ``7d``); ``BadRequest`` naming ``field`` otherwise."""
    text = raw.strip()
    ago = _AGO.fullmatch(text)
    if ago is not None:
        try:
            return now - timedelta(seconds=int(ago.group(1)) * _UNIT_S[ago.group(2)])
        except OverflowError:
            raise BadRequest(field, f"{field} {raw!r} is too long ago") from None
    moment = unix_time(field, text, f"{field} {raw!r}")
    if moment is not None:
        return moment
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise BadRequest(
            field,
            f"{field} {raw!r} is not a time: give ISO 8601 (2027-01-31T00:00:00Z), unix "
            "seconds, or a time ago (90m, 24h, 7d)",
        ) from None
    try:
        return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
    except OverflowError:
        raise BadRequest(field, f"{field} {raw!r} is out of range") from None


class CoverageOps:
    """Coverage reports of the configured sources over one database."""

    def __init__(self, engine: AsyncEngine, sources: SourceOps) -> None:
        self._engine = engine
        self._sources = sources

    async def report(
        self,
        name: str,
        since: str | None = None,
        until: str | None = None,
        now: datetime | None = None,
    ) -> coverage.Report:
        """``name``'s coverage from ``since`` (default: where its ledger begins, or the
        provider's retention before any run) to ``until`` (default: now less its
        settle window, the last moment a run could have judged; now, when ``since`` is
        later than that: the tail then is a ``settling`` hole).

        A source with ``[sources.expect]`` and no ``[sources.reconcile]`` has its
        silence watch's report: from where the watch began to the end of the last
        window it judged (``reconcile.coverage``)."""
        source = self._sources.source(name)
        if source.config.reconcile is None and source.config.expect is None:
            raise Conflict(
                "not_configured",
                "this source has no [sources.reconcile] or [sources.expect] table",
            )
        now = now or datetime.now(UTC)
        end = parse_time("until", until, now) if until else None
        start = parse_time("since", since, now) if since else None
        async with self._engine.connect() as conn:
            if source.config.reconcile is None:
                situation, first = await self._watched(conn, source.name, now)
            else:
                situation, first = await self._reconciled(conn, source, now)
            if end is None:
                last = situation.heard_until
                end = coverage.at(last if last is not None else situation.now - situation.settle_s)
                if start is not None and start >= end:  # a recent --since: up to now
                    end = now
            if start is None:
                start = first or coverage.at(situation.now - situation.retention_s)
            if start >= end and since is None and until is None:
                # A watch that has judged no window yet: nothing to report.
                return coverage.merge(source.name, [], end.timestamp(), end.timestamp(), situation)
            if start >= end:
                said = "until" if until else "now"
                raise BadRequest("since", f"since must be before {said}")
            if (end - start).total_seconds() > MAX_RANGE_S:
                raise BadRequest("since", "the range may span ten years at most")
            rows = await ledger.records(conn, source.name, start, end)
        return coverage.merge(source.name, rows, start.timestamp(), end.timestamp(), situation)

    async def _reconciled(
        self, conn: AsyncConnection, source: Source, now: datetime
    ) -> tuple[coverage.Situation, datetime | None]:
        state = await rstate.get_state(conn, source.name)
        first = await ledger.first_start(conn, source.name)
        situation = coverage.Situation(
            now=now.timestamp(),
            settle_s=coverage.settle_s(source),
            retention_s=coverage.retention_s(source),
            cursor=state.cursor if state is not None else None,
            disabled=(state.disabled_reason or "no reason recorded")
            if state is not None and state.disabled
            else None,
            ledger_start=None if first is None else first.timestamp(),
        )
        return situation, first

    async def _watched(
        self, conn: AsyncConnection, name: str, now: datetime
    ) -> tuple[coverage.Situation, datetime | None]:
        """A source only watched for silence: its watch's start and last judged moment."""
        source = self._sources.source(name)
        watch = await silence.get(conn, name)
        started = watch.started_at if watch is not None else None
        situation = coverage.Situation(
            now=now.timestamp(),
            settle_s=0.0,
            retention_s=coverage.retention_s(source),
            ledger_start=started.timestamp() if started is not None else now.timestamp(),
            heard_until=watch.judged_until.timestamp() if watch is not None else now.timestamp(),
        )
        return situation, started

    async def resource(
        self, name: str, since: str | None = None, until: str | None = None
    ) -> models.Coverage:
        """The report as the API answers it."""
        return coverage_of(await self.report(name, since, until))
