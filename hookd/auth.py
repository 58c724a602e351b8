"""Bearer tokens and what each one opens.

Four tokens, each optional: ``HOOKD_ADMIN_TOKEN`` opens everything;
``HOOKD_READ_TOKEN`` the operations API's GETs and the admin UI's pages (no
replay, no enable, no reconcile, no POST of any kind); ``HOOKD_METRICS_TOKEN``
``/metrics`` alone, so that Prometheus holds a token that can do nothing else;
``HOOKD_LISTEN_TOKEN`` the event stream of ``hookd listen`` alone (``GET
/api/events:stream``), so that a developer's laptop holds a token that can change
nothing (it reads bodies, though: it is as sensitive as the admin token for reading).
A token not configured opens nothing.
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass
from enum import StrEnum

from starlette.requests import Request
from starlette.responses import JSONResponse


class Right(StrEnum):
    METRICS = "metrics"  # GET /metrics (the receiver's and the worker's)
    READ = "read"  # the API's GETs, the admin UI's pages
    WRITE = "write"  # the API's POSTs, the admin UI's actions
    LISTEN = "listen"  # GET /api/events:stream (hookd listen)


ADMIN_RIGHTS = frozenset(Right)
READ_RIGHTS = frozenset({Right.READ})
METRICS_RIGHTS = frozenset({Right.METRICS})
LISTEN_RIGHTS = frozenset({Right.LISTEN})
NO_RIGHTS: frozenset[Right] = frozenset()


@dataclass(frozen=True, slots=True)
class Tokens:
    """The configured tokens (empty: that token is off)."""

    admin: str = ""
    read: str = ""
    metrics: str = ""
    listen: str = ""

    @property
    def configured(self) -> bool:
        return bool(self.admin or self.read or self.metrics or self.listen)

    def rights(self, given: str) -> frozenset[Right]:
        """What ``given`` opens. Every configured token is compared, each in constant
        time, whichever matches: the time taken does not say which one did."""
        found: frozenset[Right] = NO_RIGHTS
        raw = given.encode()
        for token, rights in (
            (self.admin, ADMIN_RIGHTS),
            (self.read, READ_RIGHTS),
            (self.metrics, METRICS_RIGHTS),
            (self.listen, LISTEN_RIGHTS),
        ):
            if token and hmac.compare_digest(raw, token.encode()):
                found = found | rights
        return found

    def of_request(self, request: Request) -> frozenset[Right] | None:
        """The rights of the request's ``Authorization: Bearer`` token; None when it
        carries no bearer token or one that is not configured (a 401), an empty set
        never."""
        given = bearer(request)
        if given is None:
            return None
        rights = self.rights(given)
        return rights or None


def unauthorized() -> JSONResponse:
    """401: no bearer token, or none of the configured ones (never cached)."""
    return JSONResponse(
        {"error": "unauthorized"}, 401, {"WWW-Authenticate": "Bearer", "Cache-Control": "no-store"}
    )


def forbidden(detail: str) -> JSONResponse:
    """403 (RFC 6750 ``insufficient_scope``, with ``detail``): a token of ours that does
    not open this (never cached)."""
    return JSONResponse(
        {"error": "forbidden", "detail": detail},
        403,
        {"WWW-Authenticate": 'Bearer error="insufficient_scope"', "Cache-Control": "no-store"},
    )


def refusal(tokens: Tokens, request: Request, right: Right, detail: str) -> JSONResponse | None:
    """None when the request's bearer token opens ``right``; else the answer: 401 without
    a token or with one that is not configured, 403 for a token that does not open this.

    No rate limit: the receiver's routes take ``hookd.web.auth_limit.BearerGuard``,
    which limits wrong tokens across processes through the database."""
    rights = tokens.of_request(request)
    if rights is None:
        return unauthorized()
    if right not in rights:
        return forbidden(detail)
    return None


def bearer(request: Request) -> str | None:
    """The token of ``Authorization: Bearer <token>``, or None."""
    scheme, _, given = request.headers.get("authorization", "").partition(" ")
    given = given.strip()
    if scheme.lower() != "bearer" or not given:
        return None
    return given


def token_ok(request: Request, expected: str) -> bool:
    """Constant-time check of ``Authorization: Bearer <token>``; no token configured: no."""
    if not expected:
        return False
    given = bearer(request)
    return given is not None and hmac.compare_digest(given.encode(), expected.encode())
