"""The admin UI's reconciliation runs and bulk operations sections."""

from __future__ import annotations

import logging
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import Response

from hookd.errors import BadRequest, Conflict, NotFound
from hookd.ops import RunQuery
from hookd.web import admin_pages
from hookd.web.admin_format import BAD_FILTER
from hookd.web.admin_pages import ActionRoute, PageRoute, Section
from hookd.web.admin_session import PREFIX, Session, filled

log = logging.getLogger("hookd.admin")


class ReconcileSection(Section):
    """Reconciliation runs: the newest, and one."""

    def routes(self) -> list[PageRoute | ActionRoute]:
        return [PageRoute("/runs", self.runs_page), PageRoute("/runs/{id}", self.run_page)]

    async def runs_page(self, request: Request, session: Session) -> Response:
        params = filled(request.query_params, "source")
        try:
            query = RunQuery.parse({**params, "limit": str(admin_pages.PAGE_SIZE)})
        except BadRequest as exc:
            return self.view.problem(request, session, 400, BAD_FILTER.get(exc.field, exc.detail))
        return self.view.page(
            request,
            session,
            "runs.html",
            "runs",
            runs=[run.answer() for run in (await self.ops.runs.recent(query)).runs],
            reconciled=[s.name for s in self.ops.sources.reconciled()],
            sources=self.ops.names,
            source=query.source,
        )

    async def run_page(self, request: Request, session: Session) -> Response:
        try:
            found = await self.ops.runs.get(request.path_params["id"])
        except NotFound:
            return self.view.problem(request, session, 404, "No such reconciliation run.")
        run = found.answer()
        source = self.ops.configured.get(found.source)
        return self.view.page(
            request,
            session,
            "run.html",
            "runs",
            run=run,
            can_reconcile=source is not None and source.config.reconcile is not None,
            refresh=None if found.done else 2,
        )


class OperationsSection(Section):
    """Bulk operations: the newest, one, and its cancel."""

    def routes(self) -> list[PageRoute | ActionRoute]:
        return [
            PageRoute("/operations", self.operations_page),
            PageRoute("/operations/{id}", self.operation_page),
            ActionRoute("/operations/{id}/cancel", self.operation_cancel),
        ]

    async def operations_page(self, request: Request, session: Session) -> Response:
        params = filled(request.query_params, "cursor")
        try:
            page = await self.ops.operations.page({**params, "limit": str(admin_pages.PAGE_SIZE)})
        except BadRequest as exc:
            return self.view.problem(request, session, 400, BAD_FILTER.get(exc.field, exc.detail))
        return self.view.page(
            request,
            session,
            "operations.html",
            "operations",
            operations=[op.answer() for op in page.operations],
            older=None
            if page.next_cursor is None
            else "?" + urlencode({"cursor": page.next_cursor}),
            first_page="cursor" not in params,
            refresh=2 if any(not op.done for op in page.operations) else None,
        )

    async def operation_page(self, request: Request, session: Session) -> Response:
        try:
            operation = await self.ops.operations.get(request.path_params["id"])
        except NotFound:
            return self.view.problem(request, session, 404, "No such operation.")
        return self.view.page(
            request,
            session,
            "operation.html",
            "operations",
            op=operation.answer(),
            refresh=None if operation.done else 1,
        )

    async def operation_cancel(
        self, request: Request, session: Session, form: dict[str, str]
    ) -> Response:
        operation_id = request.path_params["id"]
        default = f"{PREFIX}/operations/{operation_id}"
        try:
            # Not waited for: the operation's page shows it stop (it refreshes itself).
            await self.ops.operations.cancel(operation_id, wait_s=0)
        except NotFound:
            return self.view.problem(request, session, 404, "No such operation.")
        except Conflict as exc:
            return self.view.back(form, default, error=exc.reason)
        log.info("admin cancelled operation", extra={"operation_id": operation_id})
        return self.view.back(form, default, done="operation_cancelled")
