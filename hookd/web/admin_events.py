"""The admin UI's events sections: the event list and the dead letters, the watch
lists beside them (stuck, many attempts), one event and its replay, one object of a
source with ``[sources.order]``."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import Response

from hookd.errors import BadRequest, Conflict, NotFound
from hookd.ops import ADMIN_REPLAY, EventQuery
from hookd.ops.models import Event, WatchPage
from hookd.ops.watch import WatchQuery
from hookd.timefmt import iso_z_or_none
from hookd.web import admin_pages
from hookd.web.admin_format import BAD_FILTER
from hookd.web.admin_pages import ActionRoute, PageRoute, Section
from hookd.web.admin_session import PREFIX, Session, filled
from processing.handlers import FORWARD
from store.models import ORIGINS, STATUSES
from store.status import RUNNABLE_STATUSES, EventStatus

log = logging.getLogger("hookd.admin")

# An event page reloads itself while the event is about to move on (never tried, or claimed).
_MOVING = (EventStatus.PENDING, EventStatus.PROCESSING)
EVENT_FILTERS = ("source", "status", "origin", "type", "object")


class EventsSection(Section):
    """Events: listed, dead, watched, one by one, replayed."""

    def routes(self) -> list[PageRoute | ActionRoute]:
        return [
            PageRoute("/events", self.events_page),
            PageRoute("/events/{id}", self.event_page),
            ActionRoute("/events/{id}/replay", self.replay),
            PageRoute("/sources/{name}/objects/{id:path}", self.object_page),
            PageRoute("/dead", self.dead_page),
            PageRoute("/stuck", self.stuck_page),
            PageRoute("/retried", self.retried_page),
        ]

    async def _event_list(
        self, request: Request, session: Session, *, dead: bool
    ) -> dict[str, object] | Response:
        """The filtered, keyset-paged list as GET /api/events makes it; or an error page.

        A filter left empty in the form means "any"; the dead page lists dead events
        of one source or of all, whatever else the query says."""
        q = request.query_params
        params = filled(q, "source", "cursor") if dead else filled(q, *EVENT_FILTERS, "cursor")
        if dead:
            params["status"] = EventStatus.DEAD
        try:
            query = EventQuery.parse({**params, "limit": str(admin_pages.PAGE_SIZE)})
        except BadRequest as exc:
            text = BAD_FILTER.get(exc.field, exc.detail)
            return self.view.problem(request, session, 400, text)
        page = await self.ops.events.page(query)
        filters = {
            "source": query.source,
            "status": query.status,
            "origin": query.origin,
            "type": query.type,
            "object": query.object,
        }
        kept = {k: v for k, v in filters.items() if v and not (dead and k == "status")}
        older = None
        if page.next_cursor is not None:
            older = "?" + urlencode({**kept, "cursor": page.next_cursor})
        return {
            "events": listed(page.events),
            "filters": filters,
            "older": older,
            "newest": "?" + urlencode(kept),
            "first_page": query.cursor is None,
        }

    async def events_page(self, request: Request, session: Session) -> Response:
        found = await self._event_list(request, session, dead=False)
        if isinstance(found, Response):
            return found
        return self.view.page(
            request,
            session,
            "events.html",
            "events",
            sources=self.ops.names,
            statuses=STATUSES,
            origins=ORIGINS,
            **found,
        )

    async def dead_page(self, request: Request, session: Session) -> Response:
        found = await self._event_list(request, session, dead=True)
        if isinstance(found, Response):
            return found
        counts = [{"name": r.name, "dead": r.dead} for r in await self.ops.sources.overview()]
        return self.view.page(
            request,
            session,
            "dead.html",
            "dead",
            sources=self.ops.names,
            counts=counts,
            **found,
        )

    async def _watch_page(
        self,
        request: Request,
        session: Session,
        section: str,
        fetch: Callable[[WatchQuery], Awaitable[WatchPage]],
    ) -> Response:
        """A watch list (stuck, many attempts): filtered and paged as the event list."""
        q = request.query_params
        params = filled(q, "source", "cursor", *(("attempts",) if section == "retried" else ()))
        try:
            query = WatchQuery.parse({**params, "limit": str(admin_pages.PAGE_SIZE)})
        except BadRequest as exc:
            return self.view.problem(request, session, 400, BAD_FILTER.get(exc.field, exc.detail))
        page = await fetch(query)
        kept = {k: v for k, v in params.items() if k != "cursor"}
        older = None
        if page.next_cursor is not None:
            older = "?" + urlencode({**kept, "cursor": page.next_cursor})
        return self.view.page(
            request,
            session,
            f"{section}.html",
            section,
            sources=self.ops.names,
            events=listed(page.events),
            filters={"source": query.source, "attempts": query.min_attempts},
            older=older,
            newest="?" + urlencode(kept),
            first_page=query.cursor is None,
        )

    async def stuck_page(self, request: Request, session: Session) -> Response:
        return await self._watch_page(request, session, "stuck", self.ops.watch.stuck)

    async def retried_page(self, request: Request, session: Session) -> Response:
        return await self._watch_page(request, session, "retried", self.ops.watch.retried)

    async def event_page(self, request: Request, session: Session) -> Response:
        try:
            detail = await self.ops.events.show(request.path_params["id"], with_ledger=True)
        except NotFound:
            return self.view.problem(request, session, 404, "No such event.")
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
        return self.view.page(
            request,
            session,
            "event.html",
            "events",
            event=event,
            handlers=handlers,
            max_attempts=source.config.max_attempts if source else None,
            refresh=2 if event["status"] in _MOVING else None,
        )

    async def object_page(self, request: Request, session: Session) -> Response:
        """One object of a source with [sources.order]: its latest known state and its
        newest events."""
        name, key = request.path_params["name"], request.path_params["id"]
        try:
            state = await self.ops.objects.show(name, key)
        except NotFound:
            return self.view.problem(request, session, 404, "No such object.")
        except Conflict as exc:
            return self.view.problem(request, session, 409, exc.detail)
        page = await self.ops.events.page(
            EventQuery(source=name, object=key, limit=admin_pages.PAGE_SIZE)
        )
        return self.view.page(
            request,
            session,
            "object.html",
            "events",
            state=state.answer(),
            events=listed(page.events),
            first_page=True,
            older=None,
            newest=None,
            more="?" + urlencode({"source": name, "object": key}) if page.next_cursor else None,
        )

    async def replay(self, request: Request, session: Session, form: dict[str, str]) -> Response:
        event_id = request.path_params["id"]
        default = f"{PREFIX}/events/{event_id}"
        # As POST /api/events/{id}/replay, which wakes processing too.
        try:
            await self.ops.events.replay(event_id, by=ADMIN_REPLAY)
        except NotFound:
            return self.view.problem(request, session, 404, "No such event.")
        except Conflict as exc:
            return self.view.back(form, default, error=exc.reason)
        log.info("admin replayed event", extra={"event_id": event_id})
        return self.view.back(form, default, done="replayed")


def listed(events: Sequence[Event]) -> list[dict[str, object]]:
    """Events as a list shows them: with the summary line the API gives as
    ``error.message``, for the list's column."""
    return [e.answer() | {"last_error": e.error and e.error.message} for e in events]
