"""The admin UI at ``/admin``: server-rendered pages over the same operations
(``hookd.ops``) as the Operations API, behind a login with the admin token (every
page and action) or the read token (the pages only: no action is offered, and a
POSTed one is refused with 403, logging out aside).

Here are the login and what every page and action goes through; the pages are
registered by section (``admin_pages.Section``): the sources, their pause switches
and coverage (``admin_sources``), events (``admin_events``), reconciliation runs and
bulk operations (``admin_runs``), alerts (``admin_alerts``), rejected requests
(``admin_rejected``). The session, its CSRF
token, forms, redirects and security headers are in ``admin_session``; the templates,
their filters and the pages' messages in ``admin_format``. Pages run no JavaScript and
load nothing from elsewhere; GET pages never change state. Event bodies and headers are
never shown.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from urllib.parse import quote

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from hookd.auth import Tokens
from hookd.errors import NotFound
from hookd.web.admin_alerts import AlertsSection
from hookd.web.admin_events import EventsSection
from hookd.web.admin_format import TEMPLATES
from hookd.web.admin_pages import ActionRoute, PageRoute, Section, View
from hookd.web.admin_rejected import RejectedSection
from hookd.web.admin_runs import OperationsSection, ReconcileSection
from hookd.web.admin_session import (
    PREFIX,
    Session,
    Sessions,
    csrf_ok,
    here,
    read_form,
    safe_next,
    secured,
)
from hookd.web.admin_sources import CoverageSection, DestinationsSection, SourcesSection
from hookd.web.auth_limit import (
    UNAVAILABLE,
    UNAVAILABLE_RETRY_S,
    AuthLimit,
    bounded,
    client_address,
)
from hookd.web.served import ServedOps

log = logging.getLogger("hookd.admin")

Endpoint = Callable[[Request], Awaitable[Response]]
# A POST behind the login, the right to act and the CSRF token: what it does with the form.
Posted = Callable[[Request, Session, dict[str, str]], Awaitable[Response]]

# The sections, in the order of the navigation bar.
SECTIONS: tuple[type[Section], ...] = (
    SourcesSection,
    DestinationsSection,
    CoverageSection,
    EventsSection,
    ReconcileSection,
    OperationsSection,
    AlertsSection,
    RejectedSection,
)


class AdminUI:
    """The /admin pages over the operations the API offers: the same ``events``
    (replay wakes processing as the API's does), ``sources`` and ``runs`` (a run
    started here is one the API started, cancelled at shutdown like them).
    """

    def __init__(self, tokens: Tokens, ops: ServedOps) -> None:
        self._sessions = Sessions(tokens.admin, tokens.read, ops.engine)
        self._login_limit = AuthLimit(ops.engine)
        self._view = View()
        self._stylesheet = (TEMPLATES / "admin.css").read_bytes()
        self._sections = [section(ops) for section in SECTIONS]

    @staticmethod
    def _to_login(request: Request) -> Response:
        target = PREFIX + "/login"
        if request.method == "GET" and request.url.path != PREFIX:
            target += "?next=" + quote(here(request), safe="")
        return RedirectResponse(target, status_code=303)

    def page(self, route: PageRoute) -> Endpoint:
        """A GET page: a valid session or a 303 to the login page."""

        async def endpoint(request: Request) -> Response:
            session = await self._sessions.load(request)
            if session is None:
                return secured(self._to_login(request))
            return secured(await self._view.answer(route, request, session))

        return endpoint

    def action(self, route: ActionRoute) -> Endpoint:
        """A section's action: what the form asked, or the 404 page of ``route``."""

        async def act(request: Request, session: Session, form: dict[str, str]) -> Response:
            try:
                return await route.handler(request, form)
            except NotFound:
                return self._view.problem(request, session, 404, route.missing)

        return self.posted(act)

    def posted(self, handler: Posted, *, read_only_too: bool = False) -> Endpoint:
        """A POST: a valid session that may act (``read_only_too``: any session, for
        logging out), then the form's CSRF token, before anything changes."""

        async def endpoint(request: Request) -> Response:
            session = await self._sessions.load(request)
            if session is None:
                return secured(self._to_login(request))
            if not (session.can_act or read_only_too):
                path = request.url.path
                log.warning("admin action refused: read-only session", extra={"path": path})
                text = (
                    "This session may only look: sign in with HOOKD_ADMIN_TOKEN to change things."
                )
                return secured(self._view.problem(request, session, 403, text))
            form = await read_form(request)
            if form is None:
                return secured(self._view.problem(request, session, 413, "That form is too large."))
            if not csrf_ok(session, form):
                log.warning("admin form refused: bad csrf", extra={"path": request.url.path})
                text = "The form's CSRF token is missing or wrong."
                return secured(self._view.problem(request, session, 403, text))
            return secured(await handler(request, session, form))

        return endpoint

    async def login_form(self, request: Request) -> Response:
        response = self._view.render(
            request,
            "login.html",
            enabled=self._sessions.enabled,
            next=safe_next(request.query_params.get("next")),
            message=None,
        )
        return secured(response)

    async def login(self, request: Request) -> Response:
        form = await read_form(request) or {}
        target = safe_next(form.get("next"))
        if not self._sessions.enabled:
            message = "The admin UI is off: set HOOKD_ADMIN_TOKEN (or HOOKD_READ_TOKEN) to use it."
            return secured(self._login_page(request, 401, target, message))
        client = client_address(request)
        # Too many refused tokens from this address (or from everyone): no token is
        # looked at until later. Else this check is counted before the token is
        # compared, in one atomic statement that every process shares.
        reservation = None
        try:
            async with bounded(self._login_limit) as check:
                wait_s = await check.wait_s(client)
                if wait_s is None:
                    reservation = await check.reserve(client)
                    wait_s = reservation.wait_s
        except UNAVAILABLE as exc:
            log.warning("admin login unavailable", extra={"error": type(exc).__name__})
            message = "Logins are not possible right now: try again in a few seconds."
            response = self._login_page(request, 503, target, message)
            response.headers["Retry-After"] = str(UNAVAILABLE_RETRY_S)
            return secured(response)
        if reservation is None or wait_s is not None:
            log.warning("admin login rate limited", extra={"client": client, "wait_s": wait_s})
            message = f"Too many refused logins: try again in {wait_s} s."
            response = self._login_page(request, 429, target, message)
            response.headers["Retry-After"] = str(wait_s)
            return secured(response)
        can_act = self._sessions.opens(form.get("token", ""))
        if can_act is None:
            # The reservation stays: it is this refusal, counted.
            log.warning("admin login refused", extra={"client": client})
            return secured(self._login_page(request, 401, target, "That token is not right."))
        log.info("admin login", extra={"client": client, "read_only": not can_act})
        await self._login_limit.release(reservation.attempt)
        response = RedirectResponse(target, status_code=303)
        await self._sessions.start(response, request, can_act=can_act)
        return secured(response)

    def _login_page(self, request: Request, code: int, target: str, message: str) -> Response:
        return self._view.render(
            request,
            "login.html",
            code,
            enabled=self._sessions.enabled,
            next=target,
            message=message,
        )

    async def logout(self, request: Request, session: Session, __: dict[str, str]) -> Response:
        log.info("admin logout", extra={"client": client_address(request)})
        response = RedirectResponse(PREFIX + "/login?done=logged_out", status_code=303)
        # Deleted server-side: a copy of this cookie stops working as well.
        await self._sessions.end(response, request, session)
        return response

    async def css(self, _: Request) -> Response:
        return Response(
            self._stylesheet,
            media_type="text/css",
            headers={"Cache-Control": "max-age=300", "X-Content-Type-Options": "nosniff"},
        )

    def routes(self) -> list[Route]:
        """The login's routes, then every section's: a page behind the login, an action
        behind the login, the right to act and the CSRF token."""
        own = [
            Route(PREFIX + "/login", self.login_form, methods=["GET"]),
            Route(PREFIX + "/login", self.login, methods=["POST"]),
            Route(
                PREFIX + "/logout", self.posted(self.logout, read_only_too=True), methods=["POST"]
            ),
            Route(PREFIX + "/static/admin.css", self.css, methods=["GET"]),
        ]
        return own + [
            Route(PREFIX + r.path, self.page(r), methods=["GET"])
            if isinstance(r, PageRoute)
            else Route(PREFIX + r.path, self.action(r), methods=["POST"])
            for section in self._sections
            for r in section.routes()
        ]


def routes(tokens: Tokens, ops: ServedOps) -> list[Route]:
    return AdminUI(tokens, ops).routes()
