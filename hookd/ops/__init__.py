"""What an operator can do, written once for the operations API, the admin UI and
the command line: list and show events, replay them, look at sources and switch
their reconciliation back on, start, run, list and show reconciliation runs, prune,
and bulk operations (replay or cancel by filter).

Refusals are typed (``BadRequest``, ``NotFound``, ``Conflict`` in ``hookd.errors``,
each with its ``reason``); each caller turns them into its own answer (a status
code and JSON body, a flash message or error page, a line and an exit status).
"""

from hookd.ops.coverage import CoverageOps
from hookd.ops.events import (
    ADMIN_REPLAY,
    API_REPLAY,
    EventDetail,
    EventOps,
    Replayed,
    Wake,
    cli_requester,
)
from hookd.ops.models import EventPage
from hookd.ops.operations import Created, OperationFilter, OperationOps, OperationRequest
from hookd.ops.prune import parse_as_of, policies, prune_sources
from hookd.ops.queries import MAX_LIMIT, EventQuery, RunQuery
from hookd.ops.runs import RunOps, StartedRun
from hookd.ops.sources import SourceOps

__all__ = [
    "ADMIN_REPLAY",
    "API_REPLAY",
    "MAX_LIMIT",
    "CoverageOps",
    "Created",
    "EventDetail",
    "EventOps",
    "EventPage",
    "EventQuery",
    "OperationFilter",
    "OperationOps",
    "OperationRequest",
    "Replayed",
    "RunOps",
    "RunQuery",
    "SourceOps",
    "StartedRun",
    "Wake",
    "cli_requester",
    "parse_as_of",
    "policies",
    "prune_sources",
]
