"""What the sections of the admin UI share: how a page is rendered, refused or
redirected back from (``View``), and how a section declares its pages and actions
over the operations it shows (``Section``, ``page``, ``action``).

A section is one module's class (``admin_sources``, ``admin_events``, ``admin_runs``);
``hookd.web.admin`` puts each of its routes behind the login (a page) or the login,
the right to act and the CSRF token (an action).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

from hookd.errors import BadRequest, Conflict, NotFound
from hookd.web.admin_format import BAD_FILTER, environment, flash_message
from hookd.web.admin_session import PREFIX, Session, here, safe_next, with_query
from hookd.web.served import ServedOps

PAGE_SIZE = 50
NOT_FOUND = "Not found."

# What a page handler gives its template (the handler raises what ``hookd.ops`` refuses).
Context = dict[str, Any]
Page = Callable[[Request], Awaitable[Context]]
Action = Callable[[Request, dict[str, str]], Awaitable[Response]]
Handler = TypeVar("Handler", bound=Callable[..., Awaitable[object]])


@dataclass(frozen=True, slots=True)
class PageRoute:
    """A GET page at ``PREFIX + path``: its handler's context rendered in ``template``,
    ``nav`` the navigation bar's section; ``missing`` the 404 page's text, ``conflict``
    the 409's (None: what ``hookd.ops`` said)."""

    path: str
    handler: Page
    template: str
    nav: str
    missing: str = NOT_FOUND
    conflict: str | None = None


@dataclass(frozen=True, slots=True)
class ActionRoute:
    """A POSTed action at ``PREFIX + path``; ``missing`` the 404 page's text."""

    path: str
    handler: Action
    missing: str = NOT_FOUND


# Where the decorators below keep a section method's routes, for ``Section.routes``.
_DECLARED = "_admin_routes"


def _declare(method: Handler, route: Callable[[Any], PageRoute | ActionRoute]) -> Handler:
    declared: list[Callable[[Any], PageRoute | ActionRoute]] = getattr(method, _DECLARED, [])
    setattr(method, _DECLARED, [route, *declared])  # decorators apply bottom up
    return method


def page(
    path: str, template: str, nav: str, *, missing: str = NOT_FOUND, conflict: str | None = None
) -> Callable[[Handler], Handler]:
    """Declares a section's method a page (see ``PageRoute``)."""
    return lambda method: _declare(
        method, lambda bound: PageRoute(path, bound, template, nav, missing, conflict)
    )


def action(path: str, *, missing: str = NOT_FOUND) -> Callable[[Handler], Handler]:
    """Declares a section's method an action (see ``ActionRoute``); one method may
    answer several paths."""
    return lambda method: _declare(method, lambda bound: ActionRoute(path, bound, missing))


def paging(kept: Mapping[str, object], next_cursor: str | None, *, first_page: bool) -> Context:
    """A keyset-paged list's links: the older page's and the newest's, both with the
    filters ``kept``; and whether this page is the first."""
    older = None if next_cursor is None else "?" + urlencode({**kept, "cursor": next_cursor})
    return {"older": older, "newest": "?" + urlencode(kept), "first_page": first_page}


def back(form: Mapping[str, str], default: str, **flash: str) -> Response:
    """An action's answer: a 303 to the form's ``back`` (a page of this UI) or
    ``default``, with a flash."""
    target = safe_next(form.get("back"), default)
    return RedirectResponse(with_query(target, **flash), status_code=303)


class View:
    """Rendering: a page from its template, an error page."""

    def __init__(self) -> None:
        self._templates = environment()

    def render(
        self, request: Request, template: str, http_status: int = 200, **context: Any
    ) -> Response:
        context.setdefault("csrf", None)
        context.setdefault("section", "")
        context.setdefault("can_act", False)
        html = self._templates.get_template(template).render(
            prefix=PREFIX, flash=flash_message(request.query_params), here=here(request), **context
        )
        return HTMLResponse(html, status_code=http_status)

    def page(
        self, request: Request, session: Session, template: str, section: str, **context: Any
    ) -> Response:
        """A page of ``section`` for ``session`` (its CSRF token, whether it may act)."""
        return self.render(
            request,
            template,
            csrf=session.csrf,
            can_act=session.can_act,
            section=section,
            **context,
        )

    async def answer(self, route: PageRoute, request: Request, session: Session) -> Response:
        """``route``'s page, or the error page of what ``hookd.ops`` refused: a filter
        (400, in this UI's words where it has them), no such thing (404), or a thing
        that cannot be shown (409)."""
        try:
            context = await route.handler(request)
        except BadRequest as exc:
            return self.problem(request, session, 400, BAD_FILTER.get(exc.field, exc.detail))
        except NotFound:
            return self.problem(request, session, 404, route.missing)
        except Conflict as exc:
            return self.problem(request, session, 409, route.conflict or exc.detail)
        return self.page(request, session, route.template, route.nav, **context)

    def problem(self, request: Request, session: Session | None, code: int, text: str) -> Response:
        csrf = session.csrf if session else None
        can_act = session.can_act if session else False
        return self.render(
            request, "error.html", code, csrf=csrf, can_act=can_act, code=code, message=text
        )


class Section:
    """A section of the admin UI: its pages and actions (methods declared with ``page``
    and ``action``) over ``ops``."""

    def __init__(self, ops: ServedOps) -> None:
        self.ops = ops

    def routes(self) -> list[PageRoute | ActionRoute]:
        """The declared routes, in the order of the methods in the class."""
        return [
            route(getattr(self, name))
            for name, method in vars(type(self)).items()
            for route in getattr(method, _DECLARED, ())
        ]
