"""Bearer-token checks for ``/api``, ``/admin`` and ``/metrics``."""

from __future__ import annotations

import hmac

from starlette.requests import Request


def token_ok(request: Request, expected: str) -> bool:
    """Constant-time check of ``Authorization: Bearer <token>``; no token configured: no."""
    if not expected:
        return False
    scheme, _, given = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not given:
        return False
    return hmac.compare_digest(given.strip().encode(), expected.encode())
