"""The admin UI's rejected-requests section: the newest refusals on record, filtered by
source and reason, as ``GET /api/rejected`` lists them (names and safe inputs only;
a kept body stays in the database)."""

from __future__ import annotations

from starlette.requests import Request

from hookd.web.admin_pages import Context, Section, page
from hookd.web.admin_session import filled

# The newest this many of the filter.
SHOWN = 200


class RejectedSection(Section):
    """Rejected: the refused requests on record."""

    @page("/rejected", "rejected.html", "rejected")
    async def rejected_page(self, request: Request) -> Context:
        params = filled(request.query_params, "source", "reason")
        listing = await self.ops.rejected.list(
            source=params.get("source"), reason=params.get("reason"), limit=SHOWN
        )
        return {
            "rejected": [r.answer() for r in listing.rejected],
            "filters": {"source": params.get("source"), "reason": params.get("reason")},
            "sources": self.ops.names,
            "shown": SHOWN,
        }
