"""The admin UI's alerts section: the alerts (live by default, filtered by status, kind
and source), one alert, and the two things a person does with one, acknowledge and
resolve, as ``POST /api/alerts/{id}:ack`` and ``:resolve`` do them."""

from __future__ import annotations

import logging

from starlette.requests import Request
from starlette.responses import Response

from hookd.errors import BadRequest, Conflict
from hookd.notify.message import ALERT_KINDS
from hookd.ops.alert_models import Alert
from hookd.ops.alerts import STATUS_FILTERS
from hookd.ops.sources import ADMIN_ACTOR
from hookd.web.admin_pages import Context, Section, action, back, page
from hookd.web.admin_session import PREFIX, filled

log = logging.getLogger("hookd.admin")

# The newest this many alerts of the filter; alerts are few (one per condition and key).
SHOWN = 200
# The status filter's "every status": what the list's query leaves out.
ALL = "all"
MISSING = "No such alert."


def evidence(link: str) -> str | None:
    """The alert's evidence as a link of this UI, or None for anything else (a link is
    shown only where it leads to a page of ours)."""
    return link if link == PREFIX or link.startswith((PREFIX + "/", PREFIX + "?")) else None


def shown(alert: Alert) -> dict[str, object]:
    return alert.answer() | {"evidence": evidence(alert.link)}


class AlertsSection(Section):
    """Alerts: listed, one, acknowledged, resolved."""

    @page("/alerts", "alerts.html", "alerts")
    async def alerts_page(self, request: Request) -> Context:
        params = filled(request.query_params, "status", "kind", "source")
        status = params.get("status", "live")
        if status not in (*STATUS_FILTERS, ALL):
            raise BadRequest(
                "status", f"Status must be one of {', '.join((*STATUS_FILTERS, ALL))}."
            )
        listing = await self.ops.alerts.list(
            status=None if status == ALL else status,
            kind=params.get("kind"),
            source=params.get("source"),
            limit=SHOWN,
        )
        return {
            "alerts": [shown(a) for a in listing.alerts],
            "filters": {
                "status": status,
                "kind": params.get("kind"),
                "source": params.get("source"),
            },
            "statuses": [*STATUS_FILTERS, ALL],
            "kinds": ALERT_KINDS,
            "sources": self.ops.names,
            "shown": SHOWN,
            "channels": [c.answer() for c in await self.ops.alerts.channels()],
        }

    @page("/alerts/{id}", "alert.html", "alerts", missing=MISSING)
    async def alert_page(self, request: Request) -> Context:
        return {"alert": shown(await self.ops.alerts.get(request.path_params["id"]))}

    @action("/alerts/{id}/ack", missing=MISSING)
    async def acknowledge(self, request: Request, form: dict[str, str]) -> Response:
        alert_id = request.path_params["id"]
        default = f"{PREFIX}/alerts/{alert_id}"
        try:
            await self.ops.alerts.acknowledge(alert_id, ADMIN_ACTOR)
        except Conflict:
            return back(form, default, error="alert_not_open")
        log.info("admin acknowledged alert", extra={"alert_id": alert_id})
        return back(form, default, done="alert_acknowledged")

    @action("/alerts/{id}/resolve", missing=MISSING)
    async def resolve(self, request: Request, form: dict[str, str]) -> Response:
        alert_id = request.path_params["id"]
        default = f"{PREFIX}/alerts/{alert_id}"
        try:
            await self.ops.alerts.resolve(alert_id, ADMIN_ACTOR)
        except Conflict:
            return back(form, default, error="alert_resolved")
        log.info("admin resolved alert", extra={"alert_id": alert_id})
        return back(form, default, done="alert_resolved")
