"""Retention as an operator runs it: ``hookd prune`` and the schedule of ``hookd serve``
and ``hookd worker`` both prune through ``prune_sources``.

Each configured source is pruned with its ``[sources.retention]`` (over the file's
``[retention]``); what that removes, in which order and how safely is
``store.retention.prune``'s. Events of a source no longer in the sources file are left alone:
there is no policy to apply to them, and their keys may matter again if the
source comes back.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

from sqlalchemy.ext.asyncio import AsyncEngine

from hookd.errors import BadRequest
from hookd.ops.queries import configured, unix_time
from hookd.sources import Sources
from store.retention.prune import Policy, Pruned, prune


def policies(sources: Sources, only: str | None = None) -> dict[str, Policy]:
    """Each source's retention (only ``only``'s when given: ``NotFound`` if no such
    source is configured), in the sources file's order."""
    chosen = list(sources)
    if only is not None:
        chosen = [configured(sources, only)]
    return {
        s.name: Policy(
            keep_body_days=s.config.retention.keep_body_days,
            keep_events_days=s.config.retention.keep_events_days,
            keep_dead_days=s.config.retention.keep_dead_days,
            keep_keys_days=s.config.retention.keep_keys_days,
        )
        for s in chosen
    }


def parse_as_of(text: str) -> datetime:
    """``--as-of``: unix seconds, or an ISO 8601 time (UTC when it names no offset)."""
    moment = unix_time("as_of", text, repr(text))
    if moment is not None:
        return moment
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise BadRequest(
            "as_of",
            f"{text!r} is neither an ISO 8601 time (2027-01-31T12:00:00Z) nor unix seconds",
        ) from None
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


async def prune_sources(
    engine: AsyncEngine,
    sources: Sources,
    *,
    owner: str,
    now: datetime | None = None,
    dry_run: bool = False,
    only: str | None = None,
    stop: asyncio.Event | None = None,
    due_before: datetime | None = None,
) -> Pruned:
    """Prune the configured sources (or ``only``) as if the time were ``now`` (default:
    the clock). See ``store.retention.prune.prune`` for the lease, ``stop`` and ``due_before``."""
    return await prune(
        engine,
        policies(sources, only),
        now=now or datetime.now(UTC),
        owner=owner,
        dry_run=dry_run,
        stop=stop,
        due_before=due_before,
    )
