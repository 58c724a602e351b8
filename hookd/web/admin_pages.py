"""What the sections of the admin UI share: the operations they show (``AdminOps``),
how a page is rendered, refused or redirected back from (``View``), and how a
section declares its pages and actions (``Section``, ``PageRoute``, ``ActionRoute``).

A section is one module's class (``admin_sources``, ``admin_events``, ``admin_runs``);
``hookd.web.admin`` puts each of its routes behind the login (a page) or the login,
the right to act and the CSRF token (an action).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

from hookd.ops import EventOps, RunOps, SourceOps
from hookd.ops.coverage import CoverageOps
from hookd.ops.destinations import DestinationOps
from hookd.ops.objects import ObjectOps
from hookd.ops.operations import OperationOps
from hookd.ops.watch import WatchOps
from hookd.sources import Sources
from hookd.web.admin_format import environment, flash_message
from hookd.web.admin_session import PREFIX, Session, here, safe_next, with_query

PAGE_SIZE = 50

Page = Callable[[Request, Session], Awaitable[Response]]
Action = Callable[[Request, Session, dict[str, str]], Awaitable[Response]]


@dataclass(frozen=True, slots=True)
class PageRoute:
    """A GET page at ``PREFIX + path``."""

    path: str
    handler: Page


@dataclass(frozen=True, slots=True)
class ActionRoute:
    """A POSTed action at ``PREFIX + path``."""

    path: str
    handler: Action


@dataclass(frozen=True, slots=True)
class AdminOps:
    """The operations behind the pages: those the API offers, over the same database."""

    events: EventOps
    sources: SourceOps
    runs: RunOps
    watch: WatchOps
    operations: OperationOps
    objects: ObjectOps
    destinations: DestinationOps
    coverage: CoverageOps

    @classmethod
    def over(
        cls,
        events: EventOps,
        sources: SourceOps,
        runs: RunOps,
        watch: WatchOps,
        operations: OperationOps,
    ) -> AdminOps:
        engine = sources.engine
        return cls(
            events,
            sources,
            runs,
            watch,
            operations,
            ObjectOps(engine, sources.sources),
            DestinationOps(engine, sources.sources, events.wake),
            CoverageOps(engine, sources),
        )

    @property
    def configured(self) -> Sources:
        return self.sources.sources

    @property
    def names(self) -> list[str]:
        """The configured sources' names, in the file's order."""
        return [s.name for s in self.sources.sources]


class View:
    """Rendering: a page from its template, an error page, a redirect back."""

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

    def problem(self, request: Request, session: Session | None, code: int, text: str) -> Response:
        csrf = session.csrf if session else None
        can_act = session.can_act if session else False
        return self.render(
            request, "error.html", code, csrf=csrf, can_act=can_act, code=code, message=text
        )

    @staticmethod
    def back(form: Mapping[str, str], default: str, **flash: str) -> Response:
        """A 303 to the form's ``back`` (a page of this UI) or ``default``, with a flash."""
        target = safe_next(form.get("back"), default)
        return RedirectResponse(with_query(target, **flash), status_code=303)


class Section:
    """A section of the admin UI: its pages and actions over ``ops``, rendered by ``view``."""

    def __init__(self, ops: AdminOps, view: View) -> None:
        self.ops = ops
        self.view = view

    def routes(self) -> list[PageRoute | ActionRoute]:
        raise NotImplementedError
