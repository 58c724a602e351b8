"""The admin UI's reconciliation runs and bulk operations sections."""

from __future__ import annotations

import logging

from starlette.requests import Request
from starlette.responses import Response

from hookd.errors import Conflict
from hookd.ops import RunQuery
from hookd.web import admin_pages
from hookd.web.admin_pages import Context, Section, action, back, page, paging
from hookd.web.admin_session import PREFIX, filled

log = logging.getLogger("hookd.admin")


class ReconcileSection(Section):
    """Reconciliation runs: the newest, and one."""

    @page("/runs", "runs.html", "runs")
    async def runs_page(self, request: Request) -> Context:
        params = filled(request.query_params, "source")
        query = RunQuery.parse({**params, "limit": str(admin_pages.PAGE_SIZE)})
        return {
            "runs": [run.answer() for run in (await self.ops.runs.recent(query)).runs],
            "reconciled": [s.name for s in self.ops.sources.reconciled()],
            "sources": self.ops.names,
            "source": query.source,
        }

    @page("/runs/{id}", "run.html", "runs", missing="No such reconciliation run.")
    async def run_page(self, request: Request) -> Context:
        found = await self.ops.runs.get(request.path_params["id"])
        source = self.ops.configured.get(found.source)
        return {
            "run": found.answer(),
            "can_reconcile": source is not None and source.config.reconcile is not None,
            "refresh": None if found.done else 2,
        }


class OperationsSection(Section):
    """Bulk operations: the newest, one, and its cancel."""

    @page("/operations", "operations.html", "operations")
    async def operations_page(self, request: Request) -> Context:
        params = filled(request.query_params, "cursor")
        found = await self.ops.operations.page({**params, "limit": str(admin_pages.PAGE_SIZE)})
        return {
            "operations": [op.answer() for op in found.operations],
            **paging({}, found.next_cursor, first_page="cursor" not in params),
            "refresh": 2 if any(not op.done for op in found.operations) else None,
        }

    @page("/operations/{id}", "operation.html", "operations", missing="No such operation.")
    async def operation_page(self, request: Request) -> Context:
        operation = await self.ops.operations.get(request.path_params["id"])
        return {"op": operation.answer(), "refresh": None if operation.done else 1}

    @action("/operations/{id}/cancel", missing="No such operation.")
    async def operation_cancel(self, request: Request, form: dict[str, str]) -> Response:
        operation_id = request.path_params["id"]
        default = f"{PREFIX}/operations/{operation_id}"
        try:
            # Not waited for: the operation's page shows it stop (it refreshes itself).
            await self.ops.operations.cancel(operation_id, wait_s=0)
        except Conflict as exc:
            return back(form, default, error=exc.reason)
        log.info("admin cancelled operation", extra={"operation_id": operation_id})
        return back(form, default, done="operation_cancelled")
