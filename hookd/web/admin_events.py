"""The admin UI's events sections: the event list and the dead letters, the watch
lists beside them (stuck, many attempts), one event and its replay, one object of a
source with ``[sources.order]``."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import Response

from hookd.errors import Conflict
from hookd.ops import ADMIN_REPLAY, EventQuery
from hookd.ops.models import Event, WatchPage
from hookd.ops.watch import WatchQuery
from hookd.timefmt import iso_z_or_none
from hookd.web import admin_pages
from hookd.web.admin_pages import Context, Section, action, back, page, paging
from hookd.web.admin_session import PREFIX, filled
from processing.handlers import FORWARD
from store.models import ORIGINS, STATUSES
from store.status import RUNNABLE_STATUSES, EventStatus

log = logging.getLogger("hookd.admin")

# An event page reloads itself while the event is about to move on (never tried, or claimed).
_MOVING = (EventStatus.PENDING, EventStatus.PROCESSING)
EVENT_FILTERS = ("source", "status", "origin", "type", "object")


class EventsSection(Section):
    """Events: listed, dead, watched, one by one, replayed."""

    async def _event_list(self, request: Request, *, dead: bool) -> Context:
        """The filtered, keyset-paged list as GET /api/events makes it.

        A filter left empty in the form means "any"; the dead page lists dead events
        of one source or of all, whatever else the query says."""
        q = request.query_params
        params = filled(q, "source", "cursor") if dead else filled(q, *EVENT_FILTERS, "cursor")
        if dead:
            params["status"] = EventStatus.DEAD
        query = EventQuery.parse({**params, "limit": str(admin_pages.PAGE_SIZE)})
        listing = await self.ops.events.page(query)
        filters = {
            "source": query.source,
            "status": query.status,
            "origin": query.origin,
            "type": query.type,
            "object": query.object,
        }
        kept = {k: v for k, v in filters.items() if v and not (dead and k == "status")}
        return {
            "events": listed(listing.events),
            "filters": filters,
            "sources": self.ops.names,
            **paging(kept, listing.next_cursor, first_page=query.cursor is None),
        }

    @page("/events", "events.html", "events")
    async def events_page(self, request: Request) -> Context:
        found = await self._event_list(request, dead=False)
        return {**found, "statuses": STATUSES, "origins": ORIGINS}

    @page("/dead", "dead.html", "dead")
    async def dead_page(self, request: Request) -> Context:
        found = await self._event_list(request, dead=True)
        counts = [{"name": r.name, "dead": r.dead} for r in await self.ops.sources.overview()]
        return {**found, "counts": counts}

    async def _watch_list(
        self,
        request: Request,
        fetch: Callable[[WatchQuery], Awaitable[WatchPage]],
        *,
        attempts: bool,
    ) -> Context:
        """A watch list (stuck, many attempts): filtered and paged as the event list."""
        q = request.query_params
        params = filled(q, "source", "cursor", *(("attempts",) if attempts else ()))
        query = WatchQuery.parse({**params, "limit": str(admin_pages.PAGE_SIZE)})
        listing = await fetch(query)
        kept = {k: v for k, v in params.items() if k != "cursor"}
        return {
            "events": listed(listing.events),
            "filters": {"source": query.source, "attempts": query.min_attempts},
            "sources": self.ops.names,
            **paging(kept, listing.next_cursor, first_page=query.cursor is None),
        }

    @page("/stuck", "stuck.html", "stuck")
    async def stuck_page(self, request: Request) -> Context:
        return await self._watch_list(request, self.ops.watch.stuck, attempts=False)

    @page("/retried", "retried.html", "retried")
    async def retried_page(self, request: Request) -> Context:
        return await self._watch_list(request, self.ops.watch.retried, attempts=True)

    @page("/events/{id}", "event.html", "events", missing="No such event.")
    async def event_page(self, request: Request) -> Context:
        detail = await self.ops.events.show(request.path_params["id"], with_ledger=True)
        event = detail.resource.answer()
        runnable = event["status"] in RUNNABLE_STATUSES
        event["next_attempt_at"] = iso_z_or_none(detail.next_attempt_at) if runnable else None
        source = self.ops.configured.get(detail.resource.source)
        chain = [*source.config.handler_refs] if source else []
        if source is not None and source.config.forward is not None:
            chain.append(FORWARD)
        chain += [d.name for d in source.config.destinations] if source else []
        finished, skipped = detail.finished, detail.skipped
        handlers = [{"name": h, "finished": h in finished, "skipped": h in skipped} for h in chain]
        handlers += [
            {"name": h, "finished": True, "skipped": h in skipped}
            for h in sorted(finished - set(chain))
        ]
        return {
            "event": event,
            "handlers": handlers,
            "max_attempts": source.config.max_attempts if source else None,
            "refresh": 2 if event["status"] in _MOVING else None,
        }

    @page("/sources/{name}/objects/{id:path}", "object.html", "events", missing="No such object.")
    async def object_page(self, request: Request) -> Context:
        """One object of a source with [sources.order]: its latest known state and its
        newest events."""
        name, key = request.path_params["name"], request.path_params["id"]
        state = await self.ops.objects.show(name, key)
        listing = await self.ops.events.page(
            EventQuery(source=name, object=key, limit=admin_pages.PAGE_SIZE)
        )
        more = "?" + urlencode({"source": name, "object": key}) if listing.next_cursor else None
        return {
            "state": state.answer(),
            "events": listed(listing.events),
            "first_page": True,
            "older": None,
            "newest": None,
            "more": more,
        }

    @action("/events/{id}/replay", missing="No such event.")
    async def replay(self, request: Request, form: dict[str, str]) -> Response:
        event_id = request.path_params["id"]
        default = f"{PREFIX}/events/{event_id}"
        # As POST /api/events/{id}/replay, which wakes processing too.
        try:
            await self.ops.events.replay(event_id, by=ADMIN_REPLAY)
        except Conflict as exc:
            return back(form, default, error=exc.reason)
        log.info("admin replayed event", extra={"event_id": event_id})
        return back(form, default, done="replayed")


def listed(events: Sequence[Event]) -> list[dict[str, object]]:
    """Events as a list shows them: with the summary line the API gives as
    ``error.message``, for the list's column."""
    return [e.answer() | {"last_error": e.error and e.error.message} for e in events]
