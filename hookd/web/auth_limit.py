"""The rate limit on token checks: the admin login's and the bearer tokens' of ``/api``
and ``/metrics``, per client address and for everyone together, across processes.

Within ``WINDOW_S`` an address gets ``PER_CLIENT`` token checks that fail, and all
addresses together ``OVERALL`` (so that one spread over many addresses is bounded
too); after that every request that carries a token is answered 429 with
``Retry-After`` (the seconds until the window frees a slot) and its token is not
looked at, right or wrong. The count is kept in the database (``store.admin.auth_attempts``)
and taken atomically, so concurrent requests in any number of processes cannot
overshoot it:

- An admin login *reserves* its check (one serialized conditional insert) before its
  token is compared; a right token takes the reservation back.
- A bearer token costs a right one no write. Every request with a token is first
  refused on a plain read if its address (or everyone) is at the limit, before its
  token is used. Then a wrong token reserves a slot the way a login does (no slot
  left: 429, not 401), and a right one is let in by a read that waits behind every
  reservation asked for before it (``store.admin.auth_attempts.admitted_rows``): whatever
  the token, a request's answer is decided at the same place in one order, so a burst
  of guesses learns the outcome of at most ``PER_CLIENT`` of them per address.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncEngine
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from hookd.auth import NO_RIGHTS, Right, Tokens, bearer, forbidden, unauthorized
from hookd.ops.models import Error
from store.admin import auth_attempts

log = logging.getLogger("hookd.auth")

# Failed token checks per client address within the window; then 429 until the
# oldest of them is a window old.
PER_CLIENT = 5
# Failed token checks of all addresses together within the window. It bounds a guesser
# spread over many addresses; reaching it also makes every token wait (a right one is
# not checked either, or 200 against 429 would tell it), so it is set well above what
# a team's own mistakes reach: a stranger has to keep up 500 guesses a minute to hold it.
OVERALL = 100 * PER_CLIENT
WINDOW_S = 60.0


def client_address(request: Request) -> str:
    """Who is asking, as the server sees it (behind a proxy: the address its
    forwarded headers give, when uvicorn is told to trust them)."""
    return (request.client.host if request.client else "unknown")[:64]


def wait_for(
    rows: Sequence[tuple[str, datetime]],
    client: str,
    now: datetime,
    *,
    window_s: float,
    per_client: int,
    overall: int,
) -> int | None:
    """Whole seconds until ``client`` may have a token checked, from the window's rows
    (``(client, at)``, oldest first); None: now."""
    window = timedelta(seconds=window_s)
    since = now - window
    everyone = [at for _, at in rows if at > since]
    mine = [at for who, at in rows if who == client and at > since]
    waits = []
    for times, allowed in ((mine, per_client), (everyone, overall)):
        if len(times) >= allowed:
            # A slot frees when all but allowed - 1 of them are a window old.
            frees_at = times[len(times) - allowed] + window
            waits.append(math.ceil((frees_at - now).total_seconds()))
    # At least a second; at most a window (a row may be stamped a moment after ``now``,
    # by a request that read its clock later but reserved first).
    return min(math.ceil(window_s), max(1, *waits)) if waits else None


@dataclass(frozen=True, slots=True)
class Reservation:
    """A token check the limit let through (``attempt``), or a wait (``wait_s``)."""

    attempt: str = ""
    wait_s: int | None = None


def _now() -> datetime:
    return datetime.now(UTC)


class AuthLimit:
    """Token checks by client address and overall, counted in the database. A check's
    statements go in one ``checking`` block (one transaction on PostgreSQL); the
    methods of the same names here are blocks of their own."""

    def __init__(
        self,
        engine: AsyncEngine,
        *,
        per_client: int = PER_CLIENT,
        overall: int = OVERALL,
        window_s: float = WINDOW_S,
        clock: Callable[[], datetime] = _now,
    ) -> None:
        self._engine = engine
        self.per_client = per_client
        self.overall = overall
        self.window_s = window_s
        self.clock = clock

    @contextlib.asynccontextmanager
    async def checking(self) -> AsyncIterator[Check]:
        async with auth_attempts.checking(self._engine) as statements:
            yield Check(self, statements)

    async def wait_s(self, client: str, now: datetime | None = None) -> int | None:
        async with self.checking() as check:
            return await check.wait_s(client, now)

    async def reserve(self, client: str, now: datetime | None = None) -> Reservation:
        async with self.checking() as check:
            return await check.reserve(client, now)

    async def admit(self, client: str, now: datetime | None = None) -> int | None:
        async with self.checking() as check:
            return await check.admit(client, now)

    async def release(self, attempt: str) -> None:
        """The reserved check found the token right: it does not count."""
        await auth_attempts.release(self._engine, attempt)


class Check:
    """One token check's steps, in the order they may come: ``wait_s``, then
    ``reserve`` or ``admit``."""

    def __init__(self, limit: AuthLimit, statements: auth_attempts.Checking) -> None:
        self._limit = limit
        self._statements = statements

    def _since(self, now: datetime) -> datetime:
        return now - timedelta(seconds=self._limit.window_s)

    def _wait(self, rows: Sequence[tuple[str, datetime]], client: str, now: datetime) -> int | None:
        return wait_for(
            rows,
            client,
            now,
            window_s=self._limit.window_s,
            per_client=self._limit.per_client,
            overall=self._limit.overall,
        )

    async def wait_s(self, client: str, now: datetime | None = None) -> int | None:
        """Seconds until ``client`` may have a token checked (a plain read); None: now."""
        now = now or self._limit.clock()
        return self._wait(await self._statements.recent(self._since(now)), client, now)

    async def reserve(self, client: str, now: datetime | None = None) -> Reservation:
        """A slot for one token check of ``client``, taken atomically; kept unless
        ``AuthLimit.release`` gives it back."""
        at = now or self._limit.clock()
        attempt = await self._statements.reserve(
            client,
            now=at,
            since=self._since(at),
            per_client=self._limit.per_client,
            overall=self._limit.overall,
        )
        if attempt is not None:
            return Reservation(attempt=attempt)
        # Refused: the wait, read after, by the clock of then unless told the time (a
        # slot may even have freed since: then 1 s).
        return Reservation(wait_s=await self.wait_s(client, now) or 1)

    async def admit(self, client: str, now: datetime | None = None) -> int | None:
        """For a right token: the wait, read after every reservation asked for before
        this call has committed (None: go on). Nothing is written."""
        now = now or self._limit.clock()
        return self._wait(await self._statements.admitted(self._since(now)), client, now)


# A token check whose count the database cannot take in time (a burst of checks queued
# on its lock, the database away) is refused as the store refuses: 503 with
# Retry-After, never a 500, and the token is not used.
CHECK_TIMEOUT_S = 10.0
UNAVAILABLE_RETRY_S = 5
UNAVAILABLE = (SQLAlchemyError, OSError, TimeoutError)


@contextlib.asynccontextmanager
async def bounded(limit: AuthLimit) -> AsyncIterator[Check]:
    """``limit.checking()`` within ``CHECK_TIMEOUT_S``; its failures raise as they are
    (callers answer ``UNAVAILABLE`` with 503)."""
    async with asyncio.timeout(CHECK_TIMEOUT_S), limit.checking() as check:
        yield check


def unavailable() -> JSONResponse:
    """The API's and /metrics' 503 when the limit's count cannot be taken."""
    return JSONResponse(
        Error(error="unavailable", detail="token checks are not possible now: try again").answer(),
        503,
        {"Retry-After": str(UNAVAILABLE_RETRY_S), "Cache-Control": "no-store"},
    )


def too_many(wait_s: int) -> JSONResponse:
    """The API's and /metrics' 429."""
    detail = f"too many refused tokens: try again in {wait_s} s"
    return JSONResponse(
        Error(error="too_many_requests", detail=detail).answer(),
        429,
        {"Retry-After": str(wait_s), "Cache-Control": "no-store"},
    )


class BearerGuard:
    """``Authorization: Bearer`` of ``/api`` and ``/metrics``: the tokens' rights
    (``hookd.auth``) behind the rate limit. A request without a bearer token, or to a
    server with no token configured, is refused (401) without the database."""

    def __init__(self, tokens: Tokens, limit: AuthLimit) -> None:
        self.tokens = tokens
        self.limit = limit

    async def refusal(self, request: Request, right: Right, detail: str) -> Response | None:
        """None when the request's token opens ``right``; else the answer: 401, 403
        (a token of ours without ``right``) or 429 (the limit)."""
        given = bearer(request)
        if given is None or not self.tokens.configured:
            return unauthorized()
        client = client_address(request)
        path = request.url.path
        rights = NO_RIGHTS
        try:
            async with bounded(self.limit) as check:
                # At the limit: refused before the token is used, whatever it is.
                wait_s = await check.wait_s(client)
                if wait_s is None:
                    rights = self.tokens.rights(given)
                    # Both wait behind the reservations asked for before them: a right
                    # token's answer is decided where a wrong one's would have been.
                    if rights:
                        wait_s = await check.admit(client)
                    else:
                        wait_s = (await check.reserve(client)).wait_s
        except UNAVAILABLE as exc:
            log.warning(
                "token check unavailable",
                extra={"client": client, "path": path, "error": type(exc).__name__},
            )
            return unavailable()
        # (Committed: a refusal counts before it is answered.)
        if wait_s is None and not rights:
            log.warning("bearer token refused", extra={"client": client, "path": path})
            return unauthorized()
        if wait_s is None:
            return None if right in rights else forbidden(detail)
        log.warning(
            "bearer token rate limited", extra={"client": client, "path": path, "wait_s": wait_s}
        )
        return too_many(wait_s)
