"""What a reconciliation run checks besides missing events, and ``hookd sources check``.

The ack audit: a delivery the provider says hookd answered with a 2xx was committed
before that answer (a 2xx means on disk), so its key must be in the store. One the
run found missing is a broken promise: it goes into the ``ack_violations`` ledger
(once per key, however many runs read it again), is logged at ERROR (ids only) and
counted on the run. A dry run counts and logs those not in the ledger yet, and
records nothing.

The registration check: the provider's record of the webhook endpoint (where the
API shows one) against what the source expects, recorded on the source's state and
on the run that made it. A registration that cannot be read is recorded as "could
not check" with the reason: a check that cannot run must look neither like one that
passed nor like one that found the registration changed.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

import httpx
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from hookd.errors import AuthFailure, ReconcileError
from hookd.sources import Source
from reconcile.http import Api, answer_limit, api_origin
from reconcile.providers import adapter_class
from reconcile.providers.base import ListAdapter, Registration
from store.reconcile import audit
from store.reconcile import runs as rstate
from store.reconcile.audit import Acked

log = logging.getLogger("hookd.reconcile")

# Violations logged one by one per run; past that, one line per page says how many more.
LOGGED_PER_RUN = 20
# How long `hookd sources check` waits for a rate-limited API, in all.
CHECK_MAX_WAIT_S = 60.0


@dataclass
class AckAudit:
    """One run's ack audit, page by page."""

    source: str
    run_id: str
    dry_run: bool
    missing: set[str] = field(default_factory=set)  # keys this run found missing
    judged: set[str] = field(default_factory=set)  # keys already found broken
    logged: int = 0

    def broken(self, adapter: ListAdapter, missing: Sequence[str]) -> list[Acked]:
        """The acknowledged deliveries noted so far whose key this run found missing.

        An acknowledged key is always listed as an item in the same run (the item is
        its first delivery in the window), on this page or an earlier one, and was
        then found stored or missing: nothing else need be read."""
        self.missing.update(missing)
        found = []
        for acked in adapter.take_acked():
            if acked.key in self.missing and acked.key not in self.judged:
                self.judged.add(acked.key)
                found.append(acked)
        return found

    async def record(self, conn: AsyncConnection, broken: Sequence[Acked]) -> list[Acked]:
        """``broken`` into the ledger (a dry run only reads it); the ones new to it."""
        if not broken:
            return []
        if self.dry_run:
            known = await audit.recorded_violations(conn, self.source, (a.key for a in broken))
            return [a for a in broken if a.key not in known]
        return await audit.record_violations(
            conn, self.source, self.run_id, broken, datetime.now(UTC)
        )

    def report(self, new: Sequence[Acked]) -> None:
        """Each new violation at ERROR, up to ``LOGGED_PER_RUN`` a run; then how many more."""
        room = max(0, LOGGED_PER_RUN - self.logged)
        for acked in new[:room]:
            log.error(
                "acknowledged but not stored",
                extra={
                    "source": self.source,
                    "run_id": self.run_id,
                    "dedupe_key": acked.key,
                    "delivery": acked.delivery,
                    "status_code": acked.status_code,
                    "dry_run": self.dry_run,
                },
            )
        self.logged += min(room, len(new))
        if len(new) > room:
            log.error(
                "more deliveries acknowledged but not stored",
                extra={"source": self.source, "run_id": self.run_id, "count": len(new) - room},
            )


async def read_registration(adapter: ListAdapter) -> Registration:
    """The adapter's registration check; a failure to read it is a problem of its own."""
    try:
        return await adapter.registration()
    except AuthFailure as exc:
        why = f"{exc.reason}: {exc.detail} (can the token read the webhook's registration?)"
    except ReconcileError as exc:
        why = f"{exc.reason}: {exc.detail}"
    except (httpx.HTTPError, ValueError, KeyError, TypeError, AttributeError) as exc:
        why = f"bad_answer: {type(exc).__name__}"
    return Registration(unread=why)


async def record_registration(
    engine: AsyncEngine, source: str, found: Registration, run_id: str | None = None
) -> None:
    """A checked registration on the source's state (and its run's record); logged
    at WARNING when it is not as expected, or could not be read."""
    if found.unchecked is not None:
        return
    now = datetime.now(UTC)
    async with engine.begin() as conn:
        await rstate.ensure_state(conn, source, now)
        await audit.record_registration(
            conn,
            source,
            ok=found.ok,
            problems=found.problems,
            registered=found.registered,
            now=now,
            run_id=run_id,
            unread=found.unread,
        )
    if found.unread is not None:
        log.warning(
            "registration not checked",
            extra={"source": source, "run_id": run_id, "reason": found.unread},
        )
    elif not found.ok:
        log.warning(
            "registration drift",
            extra={"source": source, "run_id": run_id, "problems": "; ".join(found.problems)},
        )


async def check_source(
    engine: AsyncEngine, client: httpx.AsyncClient, source: Source
) -> Registration:
    """``hookd sources check``: read the source's registration now and record it."""
    adapter_type = adapter_class(source.provider)
    api = Api(
        client,
        lambda: adapter_type.auth_headers(source),
        min_interval_s=adapter_type.request_interval_s(source),
        max_wait_s=CHECK_MAX_WAIT_S,
        source=source.name,
        origin=api_origin(source.config),
        max_answer_bytes=answer_limit(source.config),
    )
    adapter = adapter_type(source, api, {}, datetime.now(UTC).timestamp())
    found = await read_registration(adapter)
    await record_registration(engine, source.name, found)
    return found
