"""Bulk operations: replay or cancel every event a filter selects, as a long-running
operation with an estimate, progress and cancel (``POST /api/operations``,
``hookd replay --since``, ``hookd operations``, the admin UI).

Asking for one records it (``queued``) with its estimate: the events the filter
selects then, counted before anything changes; one per ``request_id``, so a
retried request finds the first. A runner (``run``: the schedule of every ``hookd
serve`` and ``hookd worker``, or ``hookd replay --wait`` itself) takes its lease and
goes over the events in id order, a batch at a time: a replay batch goes through
``EventOps.replay_batch``, the one replay of single events too, and each batch
commits together with the operation's cursor and counts, fenced on the lease. So a
runner killed mid-batch commits nothing of it, the next runner (once the lease has
run out) starts after the last batch that committed, and no event is replayed twice
by one operation. Cancelling is looked at before every batch.

Cancel as an action makes pending and retrying events dead, with the error
"cancelled by operation ID" (type ``cancelled``): dead events stay visible and can
be replayed, which deleting them or inventing a status would not allow.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import exc as sa_exc
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from hookd.errors import BadRequest, Conflict, NotFound
from hookd.ops import models
from hookd.ops.events import EventOps, Within
from hookd.ops.queries import DEFAULT_LIMIT, has_nul, parse_limit
from hookd.ops.resources import operation_of
from hookd.sources import Sources
from hookd.timefmt import iso_z
from processing.handlers import FORWARD
from store.admin import operations as store
from store.claims.history import Requester
from store.ids import id_floor, is_id, new_id, worker_id
from store.models import ORIGINS, STATUSES
from store.status import (
    DONE_OPERATION_STATUSES,
    RUNNABLE_STATUSES,
    OperationAction,
    OperationStatus,
)

log = logging.getLogger("hookd.operations")

# The filter's keys, in the order they are shown.
FILTER_KEYS = ("source", "destination", "status", "type", "origin", "since", "until", "object")
MAX_TEXT = 255
# How long a cancel waits for a runner to stop before it answers (it stops at its next
# batch, well within this).
CANCEL_WAIT_S = 2.0
# How long giving a lease back may take when a runner is stopped.
RELEASE_S = 5.0
TRIGGERS = ("api", "admin", "cli")
_DB_AWAY = (OSError, ConnectionError, sa_exc.DBAPIError, TimeoutError)


class LeaseLost(Exception):
    """Another runner took the operation over (ours ran out), or it was finished."""


def _now() -> datetime:
    return datetime.now(UTC)


def _text(value: object, field: str, limit: int = MAX_TEXT) -> str:
    if not isinstance(value, str) or not value:
        raise BadRequest(field, f"{field} must be a non-empty string")
    if len(value) > limit or has_nul(value):
        raise BadRequest(field, f"{field} must be at most {limit} characters, without NUL")
    try:
        value.encode()
    except UnicodeEncodeError:
        raise BadRequest(field, f"{field} must be valid Unicode text") from None
    return value


def parse_time(value: object, field: str) -> datetime:
    """A moment as the API takes it: ISO 8601 (UTC unless it says otherwise) or unix
    seconds."""
    wrong = BadRequest(
        field, f"{field} must be an ISO 8601 time (2027-01-31T00:00:00Z) or unix seconds"
    )
    if isinstance(value, bool):
        raise wrong
    try:
        if isinstance(value, int | float):
            if not math.isfinite(value):
                raise wrong
            moment = datetime.fromtimestamp(value, UTC)
        elif isinstance(value, str) and len(value) <= 64:
            moment = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
            if moment.tzinfo is None:
                moment = moment.replace(tzinfo=UTC)
            moment = moment.astimezone(UTC)
        else:
            raise wrong
    except (ValueError, OverflowError, OSError):
        raise wrong from None
    if moment.year < 1970:  # before any id: and before anything hookd stored
        moment = datetime(1970, 1, 1, tzinfo=UTC)
    return moment


@dataclass(frozen=True, slots=True)
class OperationFilter:
    """Which events: every given key must hold (``since`` inclusive, ``until`` not)."""

    source: str | None = None
    destination: str | None = None  # NAME, or SOURCE/NAME
    status: str | None = None
    type: str | None = None  # a glob: * and ?
    origin: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    object_key: str | None = None  # "object" in the API's words

    @classmethod
    def parse(cls, raw: object) -> OperationFilter:
        if not isinstance(raw, Mapping):
            raise BadRequest("filter", "filter must be a JSON object")
        unknown = sorted(str(k) for k in raw if k not in FILTER_KEYS)
        if unknown:
            raise BadRequest(
                "filter",
                f"filter: unknown key {unknown[0][:40]!r}; use {', '.join(FILTER_KEYS)}",
            )
        given = {k: v for k, v in raw.items() if v is not None}
        if not given:
            raise BadRequest(
                "filter",
                "filter must select something: give at least one of "
                f"{', '.join(FILTER_KEYS)} (since 1970-01-01T00:00:00Z takes every event)",
            )
        status, origin = given.get("status"), given.get("origin")
        if status is not None and status not in STATUSES:
            raise BadRequest("status", f"status must be one of {', '.join(STATUSES)}")
        if origin is not None and origin not in ORIGINS:
            raise BadRequest("origin", f"origin must be one of {', '.join(ORIGINS)}")
        since = parse_time(given["since"], "since") if "since" in given else None
        until = parse_time(given["until"], "until") if "until" in given else None
        if since is not None and until is not None and until <= since:
            raise BadRequest("until", "until must be later than since")
        texts = {
            k: _text(given[k], k, 64 if k == "source" else MAX_TEXT)
            for k in ("source", "destination", "type", "object")
            if k in given
        }
        return cls(
            source=texts.get("source"),
            destination=texts.get("destination"),
            status=status,
            type=texts.get("type"),
            origin=origin,
            since=since,
            until=until,
            object_key=texts.get("object"),
        )

    def as_json(self) -> dict[str, str]:
        """The keys given, as stored and compared (times in ISO 8601, UTC)."""
        out: dict[str, str] = {}
        for key in FILTER_KEYS:
            value = getattr(self, "object_key" if key == "object" else key)
            if value is not None:
                out[key] = iso_z(value) if isinstance(value, datetime) else value
        return out


@dataclass(frozen=True, slots=True)
class OperationRequest:
    action: OperationAction
    filter: OperationFilter
    request_id: str | None = None
    dry_run: bool = False

    @classmethod
    def parse(cls, body: object) -> OperationRequest:
        """The body of ``POST /api/operations``."""
        if not isinstance(body, Mapping):
            raise BadRequest("body", "the body must be a JSON object")
        allowed = ("action", "filter", "request_id", "dry_run")
        unknown = sorted(str(k) for k in body if k not in allowed)
        if unknown:
            raise BadRequest("body", f"unknown key {unknown[0][:40]!r}; use {', '.join(allowed)}")
        action = body.get("action")
        if action not in tuple(OperationAction):
            actions = ", ".join(OperationAction)
            raise BadRequest("action", f"action must be one of {actions}")
        dry_run = body.get("dry_run", False)
        if not isinstance(dry_run, bool):
            raise BadRequest("dry_run", "dry_run must be true or false")
        request_id = body.get("request_id")
        if request_id is not None:
            request_id = _text(request_id, "request_id")
        return cls(
            OperationAction(action), OperationFilter.parse(body.get("filter")), request_id, dry_run
        )

    def same_as(self, row: store.OperationRow) -> bool:
        return (
            row.action == self.action
            and row.filter == self.filter.as_json()
            and row.dry_run == self.dry_run
        )


@dataclass(frozen=True, slots=True)
class Created:
    operation: models.Operation
    created: bool  # False: the request id's operation, asked for before


def how_far(row: store.OperationRow) -> str:
    return f"{row.done_count} of {row.total} events gone over, {row.changed_count} changed"


class OperationOps:
    """Bulk operations over one database; ``run`` is the runner (any process may run
    any operation: the lease decides)."""

    def __init__(
        self,
        engine: AsyncEngine,
        sources: Sources,
        events: EventOps,
        *,
        batch: int = 500,
        lease_s: float = 30.0,
        on_created: Callable[[], None] | None = None,
    ) -> None:
        self.engine = engine
        self._sources = sources
        self._events = events
        self._batch = batch
        self._lease_s = lease_s
        self.owner = worker_id()
        # Called after an operation is recorded: the schedule of this process looks now.
        self._on_created = on_created

    # -- what the filter selects ----------------------------------------------------
    def _destination(self, raw: str, source: str | None) -> tuple[tuple[str, ...], str]:
        """The sources with destination ``raw`` (``NAME`` or ``SOURCE/NAME``; ``forward``
        is ``[sources.forward]``) and the destination's ledger name."""
        named, slash, name = raw.rpartition("/")
        if slash and source is not None and named != source:
            raise BadRequest(
                "destination", f"destination {raw!r} is of source {named!r}, not {source!r}"
            )
        only = named if slash else source
        found = []
        for src in self._sources:
            if only is not None and src.name != only:
                continue
            names = {d.name for d in src.config.destinations}
            if src.config.forward is not None:
                names.add(FORWARD)
            if name in names:
                found.append(src.name)
        if not found:
            where = f"source {only!r}" if only is not None else "any configured source"
            raise BadRequest(
                "destination",
                f"destination {name!r}: {where} has no destination of that name "
                "(see `hookd destinations list`)",
            )
        return tuple(found), name

    def selection(self, flt: OperationFilter, action: str) -> tuple[store.Selection, str | None]:
        """The store's selection for ``flt`` and the ledger name to clear (a destination)."""
        sources: tuple[str, ...] = (flt.source,) if flt.source is not None else ()
        only_handler = None
        if flt.destination is not None:
            sources, only_handler = self._destination(flt.destination, flt.source)
        statuses: tuple[str, ...] = (flt.status,) if flt.status is not None else ()
        if action == OperationAction.CANCEL:
            runnable = tuple(str(s) for s in RUNNABLE_STATUSES)
            if flt.status is not None and flt.status not in runnable:
                raise BadRequest(
                    "status",
                    f"cancel takes only events not tried yet or waiting to retry: status "
                    f"{' or '.join(runnable)}, or none",
                )
            statuses = statuses or runnable
        return (
            store.Selection(
                sources=sources,
                statuses=statuses,
                type_glob=flt.type,
                origin=flt.origin,
                since=flt.since,
                until=flt.until,
                object_key=flt.object_key,
            ),
            only_handler,
        )

    # -- asking, looking, cancelling -------------------------------------------------
    async def create(self, request: OperationRequest, *, trigger: str) -> Created:
        """Record the operation with its estimate (a dry run: only that, done at once);
        the one already asked for under the same ``request_id`` if there is one."""
        if trigger not in TRIGGERS:
            raise ValueError(f"trigger {trigger!r} is not one of {TRIGGERS}")
        selection, _ = self.selection(request.filter, request.action)
        if request.request_id is not None:
            async with self.engine.connect() as conn:
                existing = await store.by_request_id(conn, request.request_id)
            if existing is not None:
                return self._again(request, existing)
        now = _now()
        operation_id = new_id(int(now.timestamp() * 1000))
        request_id = request.request_id or operation_id
        # Events minted from the next millisecond on were stored after the ask: not ours.
        id_below = id_floor(int(now.timestamp() * 1000) + 1)
        async with self.engine.begin() as conn:
            total = await store.estimate(conn, selection, id_below)
            created = await store.insert(
                conn,
                {
                    "id": operation_id,
                    "request_id": request_id,
                    "action": request.action,
                    "trigger": trigger,
                    "filter": request.filter.as_json(),
                    "dry_run": request.dry_run,
                    "status": (
                        OperationStatus.SUCCEEDED if request.dry_run else OperationStatus.QUEUED
                    ),
                    "total": total,
                    "id_below": id_below,
                    "created_at": now,
                },
                finished=request.dry_run,
            )
        async with self.engine.connect() as conn:
            row = await store.by_request_id(conn, request_id)
        assert row is not None
        if not created:  # the same request id, asked for at the same moment elsewhere
            return self._again(request, row)
        log.info(
            "operation asked",
            extra={
                "operation_id": row.id,
                "request_id": request_id,
                "action": row.action,
                "trigger": trigger,
                "dry_run": row.dry_run,
                "total": total,
            },
        )
        if not request.dry_run and self._on_created is not None:
            self._on_created()
        return Created(operation_of(row), created=True)

    @staticmethod
    def _again(request: OperationRequest, row: store.OperationRow) -> Created:
        if not request.same_as(row):
            raise Conflict(
                "request_id_reused",
                f"request_id {row.request_id!r} started operation {row.id} with another "
                "action, filter or dry_run: use a new request_id for a new operation",
            )
        return Created(operation_of(row), created=False)

    async def _row(self, operation_id: str) -> store.OperationRow:
        if not is_id(operation_id):
            raise NotFound("operation")
        async with self.engine.connect() as conn:
            row = await store.get(conn, operation_id)
        if row is None:
            raise NotFound("operation")
        return row

    async def get(self, operation_id: str) -> models.Operation:
        return operation_of(await self._row(operation_id))

    async def page(self, params: Mapping[str, str]) -> models.OperationList:
        """Newest first, keyset paged (``limit``, ``cursor``)."""
        limit = parse_limit(params.get("limit", str(DEFAULT_LIMIT)))
        cursor = params.get("cursor") or None
        if cursor is not None and not is_id(cursor):
            raise BadRequest("cursor", "cursor is not one this API gave out")
        async with self.engine.connect() as conn:
            rows = await store.recent(conn, limit + 1, cursor)
        page = rows[:limit]
        next_cursor = page[-1].id if len(rows) > limit else None
        return models.OperationList(
            operations=[operation_of(r) for r in page], next_cursor=next_cursor
        )

    async def cancel(self, operation_id: str, *, wait_s: float = CANCEL_WAIT_S) -> models.Operation:
        """Stop an operation: at once when no runner holds it, else at the runner's next
        batch (waited for up to ``wait_s``). What it had done stays done."""
        row = await self._row(operation_id)
        if row.status == OperationStatus.CANCELLED:
            return operation_of(row)
        if row.status in DONE_OPERATION_STATUSES:
            raise Conflict("done", f"the operation already ended: {row.status}")
        now = _now()
        async with self.engine.begin() as conn:
            ended = await store.finish(
                conn,
                row.id,
                None,
                OperationStatus.CANCELLED,
                now=now,
                error=f"cancelled after {how_far(row)}",
            )
            if not ended:
                await store.request_cancel(conn, row.id, now)
        log.info("operation cancel asked", extra={"operation_id": row.id, "at_once": ended})
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait_s
        while True:
            row = await self._row(operation_id)
            if row.status in DONE_OPERATION_STATUSES or loop.time() >= deadline:
                return operation_of(row)
            await asyncio.sleep(0.05)

    # -- running ---------------------------------------------------------------------
    async def waiting(self) -> list[str]:
        """Operations no runner holds (queued, or their runner stopped or died)."""
        async with self.engine.connect() as conn:
            return await store.waiting(conn, _now())

    async def run(self, operation_id: str, stop: asyncio.Event | None = None) -> bool:
        """Run the operation to its end (or until ``stop``, its lease given back, or a
        cancel) if its lease is free; False when another runner holds it."""
        async with self.engine.begin() as conn:
            if not await store.acquire(conn, operation_id, self.owner, self._lease_s, _now()):
                return False
        extra = {"operation_id": operation_id, "owner": self.owner}
        log.info("operation running", extra=extra)
        try:
            await self._batches(operation_id, stop)
        except LeaseLost:
            log.warning("operation lease lost: another runner took it over", extra=extra)
        except asyncio.CancelledError:
            await self._give_back(operation_id)
            raise
        except _DB_AWAY as exc:  # the next look (here or elsewhere) resumes it
            log.warning("operation interrupted", extra={**extra, "error": type(exc).__name__})
            await self._give_back(operation_id)
        except BadRequest as exc:  # the sources file changed under it (a destination gone)
            await self._end(operation_id, OperationStatus.FAILED, exc.detail)
        except Exception as exc:
            log.error(  # noqa: TRY400 - no traceback: it may quote SQL parameters
                "operation crashed", extra={**extra, "error": type(exc).__name__}
            )
            await self._end(operation_id, OperationStatus.FAILED, f"crashed: {type(exc).__name__}")
        return True

    async def _give_back(self, operation_id: str) -> None:
        with contextlib.suppress(Exception):
            async with asyncio.timeout(RELEASE_S), self.engine.begin() as conn:
                await store.release(conn, operation_id, self.owner, _now())

    async def _end(self, operation_id: str, status: OperationStatus, error: str | None) -> None:
        with contextlib.suppress(Exception):
            async with self.engine.begin() as conn:
                await store.finish(conn, operation_id, self.owner, status, now=_now(), error=error)
        log.info(
            "operation ended",
            extra={"operation_id": operation_id, "status": str(status), "error": error},
        )

    async def _batches(self, operation_id: str, stop: asyncio.Event | None) -> None:
        selection: store.Selection | None = None
        only_handler: str | None = None
        while True:
            if stop is not None and stop.is_set():
                await self._give_back(operation_id)
                log.info("operation handed back", extra={"operation_id": operation_id})
                return
            async with self.engine.begin() as conn:
                row = await store.renew(conn, operation_id, self.owner, self._lease_s, _now())
            if row is None:
                raise LeaseLost
            if row.cancel_requested_at is not None:
                await self._end(
                    operation_id, OperationStatus.CANCELLED, f"cancelled after {how_far(row)}"
                )
                return
            if selection is None:
                flt = OperationFilter.parse(row.filter)
                selection, only_handler = self.selection(flt, row.action)
            async with self.engine.connect() as conn:
                ids = await store.next_batch(conn, selection, row.cursor, row.id_below, self._batch)
            if not ids:
                await self._end(operation_id, OperationStatus.SUCCEEDED, None)
                return
            if row.action == OperationAction.REPLAY:
                await self._events.replay_batch(
                    ids,
                    within=self._advance(operation_id, ids[-1]),
                    only_handler=only_handler,
                    # Each replayed event's history names the operation (and so who asked).
                    by=Requester("operation", f"operation:{operation_id}"),
                )
            else:
                now = _now()
                async with self.engine.begin() as conn:
                    reason = f"cancelled by operation {operation_id}"
                    cancelled = await store.cancel_events(conn, ids, reason, now)
                    done = set(cancelled)
                    await self._advance(operation_id, ids[-1])(
                        conn, cancelled, [i for i in ids if i not in done]
                    )

    def _advance(self, operation_id: str, cursor: str) -> Within:
        async def within(conn: AsyncConnection, changed: list[str], skipped: list[str]) -> None:
            moved = await store.advance(
                conn,
                operation_id,
                self.owner,
                cursor=cursor,
                changed=len(changed),
                skipped=len(skipped),
                lease_s=self._lease_s,
                now=_now(),
            )
            if not moved:
                raise LeaseLost  # rolls the batch back: the new runner does it

        return within
