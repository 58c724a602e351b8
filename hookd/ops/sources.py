"""Sources as an operator sees them: the overview, reconciliation switched off by hand
and back on, and the provider's registration of the endpoint checked."""

from __future__ import annotations

import getpass
import re
from datetime import UTC, datetime
from typing import Any

import httpx
from sqlalchemy.ext.asyncio import AsyncEngine

from hookd.errors import BadRequest, Conflict, NotFound
from hookd.ops.destinations import DestinationOps
from hookd.sources import Source, Sources
from hookd.timefmt import iso_z_or_none
from reconcile import audit as reconcile_audit
from reconcile import service
from reconcile.providers.base import Registration
from store import audit
from store import reconcile as rstate
from store.rows import SourceStateRow

# Who switched reconciliation off, as ``disabled_by`` records it: how (cli, api,
# admin) and, when known, with what (the token's scope, the session's, the OS user).
API_ACTOR = "api token:admin"
ADMIN_ACTOR = "admin session:admin"
MAX_REASON = 500
# A reason is a line of text: no control characters (PostgreSQL text holds no NUL).
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def cli_actor() -> str:
    """The command line, and the OS user who ran it when the system knows one."""
    try:
        return f"cli user:{getpass.getuser()}"[:64]
    except (OSError, KeyError):  # no login name, no passwd entry (a container's uid)
        return "cli"


def checked_reason(reason: str | None) -> str:
    """A ``disable`` reason as it is stored; ``BadRequest`` for one that cannot be."""
    text = (reason or "").strip()
    if _CONTROL.search(text):
        raise BadRequest("reason", "reason must be one line of text (no control characters)")
    if len(text) > MAX_REASON:
        raise BadRequest("reason", f"reason is longer than {MAX_REASON} characters")
    return text or "disabled by hand"


class SourceOps:
    """The configured ``sources`` over one database."""

    def __init__(self, engine: AsyncEngine, sources: Sources) -> None:
        self.engine = engine
        self.sources = sources

    def source(self, name: str) -> Source:
        source = self.sources.get(name)
        if source is None:
            raise NotFound("source")
        return source

    def reconcilable(self, name: str) -> Source:
        """A configured source with a ``[sources.reconcile]`` table."""
        source = self.source(name)
        if source.config.reconcile is None:
            raise Conflict("not_configured", "this source has no [sources.reconcile] table")
        return source

    def reconciled(self) -> list[Source]:
        """Every source with a ``[sources.reconcile]`` table, in the file's order."""
        return service.reconciled(self.sources)

    async def overview(self) -> list[dict[str, Any]]:
        """Each source with its reconciliation state and its pending and dead counts."""
        resources = await service.source_resources(self.engine, self.sources)
        async with self.engine.connect() as conn:
            states = await rstate.all_states(conn)
            violations = await audit.violation_totals(conn)
        for resource in resources:
            rc = resource.get("reconcile")
            if rc is not None:
                rc |= audited(states.get(resource["name"]), violations.get(resource["name"], 0))
        # Paused or not, and the destinations (hookd.ops.destinations).
        routing = await DestinationOps(self.engine, self.sources).source_state()
        for resource in resources:
            resource.update(routing[resource["name"]])
        return resources

    async def disable(self, name: str, reason: str | None, by: str) -> dict[str, Any]:
        """Reconciliation off by hand, with why and by whom (``by``: ``cli_actor()``,
        ``API_ACTOR``, ``ADMIN_ACTOR``), until ``enable``; the source's overview entry
        afterwards. A source already off stays off as it was (its first reason, time and
        author); a run in progress finishes, no new one starts."""
        source = self.reconcilable(name)
        text = checked_reason(reason)
        now = datetime.now(UTC)
        async with self.engine.begin() as conn:
            await rstate.ensure_state(conn, source.name, now)
            await audit.disable(conn, source.name, reason=text, by=by, now=now)
        [resource] = [r for r in await self.overview() if r["name"] == source.name]
        return resource

    async def check(self, name: str, client: httpx.AsyncClient) -> Registration:
        """The provider's registration of the source's endpoint, read now and recorded
        (``unchecked`` says why not, where it cannot be)."""
        source = self.reconcilable(name)
        return await reconcile_audit.check_source(self.engine, client, source)

    async def enable(self, name: str) -> dict[str, Any]:
        """Reconciliation on again after it stopped itself (auth failures); the source's
        overview entry afterwards."""
        source = self.reconcilable(name)
        await service.enable(self.engine, source.name)
        [resource] = [r for r in await self.overview() if r["name"] == source.name]
        return resource


def audited(state: SourceStateRow | None, violations: int) -> dict[str, Any]:
    """What the overview adds to a reconciled source's entry: who switched it off and
    when, its last registration check, and the acknowledgements found broken."""
    registration = None
    if state is not None and state.registration_checked_at is not None:
        kept = state.registration or {}
        ok = state.registration_ok
        registration = {
            "ok": ok,
            "state": (
                audit.REGISTRATION_UNREAD
                if ok is None
                else audit.REGISTRATION_OK
                if ok
                else audit.REGISTRATION_DRIFT
            ),
            "reason": kept.get("reason") if ok is None else None,
            "checked_at": iso_z_or_none(state.registration_checked_at),
            "problems": list(kept.get("problems") or ()),
            "registered": dict(kept.get("registered") or {}),
        }
    off = state is not None and state.disabled
    return {
        "disabled_at": iso_z_or_none(state.disabled_at) if off and state else None,
        "disabled_by": state.disabled_by if off and state else None,
        "registration": registration,
        "ack_violations": violations,
    }
