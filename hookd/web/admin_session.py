"""What a request to the admin UI must carry, and what every answer carries.

A session is a signed cookie (itsdangerous) whose key is derived from the token
it was opened with, so rotating a token logs out everyone who signed in with it.
The cookie names the session by a random id that the database must still hold
(``store.admin.sessions``): logging out deletes it there, so a copy of the cookie
stops working too, in every process. The admin token opens a session that may act;
the read token (``HOOKD_READ_TOKEN``) one that may only look. It holds a random CSRF
token that every state-changing form must send back.

Logins are rate limited by client address and overall, across processes
(``hookd.web.auth_limit``, shared with the API's bearer tokens): each login reserves
its check before the token is compared (a right token gives it back), and after
``LOGIN_FAILURES_ALLOWED`` refused tokens within ``LOGIN_WINDOW_S`` an address gets
429 with Retry-After, without its token being looked at, until the oldest of them
is a window old. Forms are small and url-encoded; a
redirect goes only to a path inside the UI; every answer under /admin, errors
included, goes out with the security headers (no script, nothing loaded from
elsewhere, no framing; ``hookd.web.headers`` adds them to those no page set).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from urllib.parse import parse_qsl, urlencode, urlsplit

from itsdangerous import BadSignature, URLSafeTimedSerializer
from sqlalchemy.ext.asyncio import AsyncEngine
from starlette.datastructures import QueryParams
from starlette.requests import Request
from starlette.responses import Response

from hookd.web.auth_limit import PER_CLIENT, WINDOW_S
from store.admin import sessions as admin_sessions

# Where the UI is mounted: also the session cookie's path and where redirects may go.
PREFIX = "/admin"
COOKIE = "hookd_admin"
SESSION_MAX_AGE_S = 12 * 3600
SESSION_KEY_LABEL = b"hookd admin session"
READ_SESSION_KEY_LABEL = b"hookd admin session (read only)"
MAX_FORM_BYTES = 16 * 1024
# The login rate limit (hookd.web.auth_limit): this many refused tokens from one
# address within the window, then 429 until the oldest of them is a window old.
LOGIN_FAILURES_ALLOWED = PER_CLIENT
LOGIN_WINDOW_S = WINDOW_S

SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; style-src 'self'; form-action 'self'; "
        "frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "no-store",
}


@dataclass(frozen=True, slots=True)
class Session:
    csrf: str
    # Opened with the admin token: its actions (replay, reconcile, enable) are allowed.
    can_act: bool = True
    # The server-side session's id (store.admin.sessions); "" for one not stored.
    session_id: str = ""


def _serializer(token: bytes, label: bytes) -> URLSafeTimedSerializer:
    key = hmac.new(token, label, hashlib.sha256).digest()
    return URLSafeTimedSerializer(
        key, salt="hookd-admin", signer_kwargs={"digest_method": hashlib.sha256}
    )


class Sessions:
    """Signed, timed session cookies naming a session the database holds; the key is
    derived from the token the session was opened with (admin or read), so each
    token's sessions end when it changes. Without ``engine`` no session is ever
    open (``verify`` alone checks a cookie's signature)."""

    def __init__(self, token: str, read_token: str = "", engine: AsyncEngine | None = None) -> None:
        self._engine = engine
        self.enabled = bool(token or read_token)
        self._token = token.encode()
        self._read_token = read_token.encode()
        self._serializer = _serializer(self._token, SESSION_KEY_LABEL)
        self._read_serializer = _serializer(self._read_token, READ_SESSION_KEY_LABEL)

    def token_ok(self, given: str) -> bool:
        """Whether ``given`` opens a session (the admin or the read token); constant
        time; no token configured: never."""
        return self.opens(given) is not None

    def opens(self, given: str) -> bool | None:
        """What a session opened with ``given`` may do: True (act: the admin token),
        False (look: the read token), None (no session). Both comparisons are made."""
        raw = given.encode()
        admin = bool(self._token) and hmac.compare_digest(raw, self._token)
        read = bool(self._read_token) and hmac.compare_digest(raw, self._read_token)
        if admin:
            return True
        return False if read else None

    def issue(self, *, can_act: bool = True, session_id: str = "") -> str:
        """A signed cookie value for ``session_id`` with a new CSRF token."""
        data = {"csrf": secrets.token_urlsafe(32), "sid": session_id}
        if can_act:
            return self._serializer.dumps(data)
        return self._read_serializer.dumps({**data, "read_only": True})

    async def load(self, request: Request) -> Session | None:
        """The request's session: a cookie signed by a configured token, naming a
        session the database holds, not logged out or expired, with the same rights."""
        session = self.verify(request)
        if session is None or self._engine is None or not session.session_id:
            return None
        now = datetime.now(UTC)
        opened = await admin_sessions.session_open(
            self._engine, session.session_id, can_act=session.can_act, now=now
        )
        return session if opened else None

    def verify(self, request: Request) -> Session | None:
        """The session the cookie's signature vouches for (no database look-up)."""
        raw = request.cookies.get(COOKIE)
        if not self.enabled or not raw:
            return None
        for serializer, configured, can_act in (
            (self._serializer, self._token, True),
            (self._read_serializer, self._read_token, False),
        ):
            if not configured:
                continue
            try:
                data = serializer.loads(raw, max_age=SESSION_MAX_AGE_S)
            except BadSignature:  # SignatureExpired is one too
                continue
            csrf = data.get("csrf") if isinstance(data, dict) else None
            sid = data.get("sid") if isinstance(data, dict) else None
            if isinstance(csrf, str) and csrf:
                return Session(csrf, can_act, sid if isinstance(sid, str) else "")
        return None

    async def start(self, response: Response, request: Request, *, can_act: bool = True) -> None:
        """Log in: a session in the database and a cookie naming it, for the UI's
        paths only, never read by a script."""
        if self._engine is None:
            raise RuntimeError("admin sessions need the database")
        session_id = await admin_sessions.open_session(
            self._engine, can_act=can_act, now=datetime.now(UTC), max_age_s=SESSION_MAX_AGE_S
        )
        response.set_cookie(
            COOKIE,
            self.issue(can_act=can_act, session_id=session_id),
            max_age=SESSION_MAX_AGE_S,
            path=PREFIX,
            secure=request.url.scheme == "https",
            httponly=True,
            samesite="strict",
        )

    async def end(self, response: Response, request: Request, session: Session) -> None:
        """Log out: the session is deleted from the database (every copy of the cookie
        stops working) and the browser drops the cookie (same attributes as set)."""
        if self._engine is not None and session.session_id:
            await admin_sessions.close_session(self._engine, session.session_id)
        response.delete_cookie(
            COOKIE,
            path=PREFIX,
            secure=request.url.scheme == "https",
            httponly=True,
            samesite="strict",
        )


def csrf_ok(session: Session, form: Mapping[str, str]) -> bool:
    return hmac.compare_digest(form.get("csrf", "").encode(), session.csrf.encode())


def safe_next(value: str | None, default: str = PREFIX) -> str:
    """A redirect target only if it is a path inside /admin (no open redirect)."""
    if not value or "\\" in value or ".." in value or any(ord(c) < 0x20 for c in value):
        return default
    if not (value == PREFIX or value.startswith((PREFIX + "/", PREFIX + "?"))):
        return default
    parts = urlsplit(value)
    if parts.scheme or parts.netloc:
        return default
    return value


def with_query(path: str, **params: str) -> str:
    """``path`` with ``params`` set in its query (replacing a previous flash)."""
    parts = urlsplit(path)
    kept = [
        (k, v)
        for k, v in parse_qsl(parts.query, keep_blank_values=True)
        if k not in params and k not in ("done", "error", "count")
    ]
    query = urlencode([*kept, *params.items()])
    return parts.path + ("?" + query if query else "")


async def read_form(request: Request) -> dict[str, str] | None:
    """A small url-encoded form; None when it is too large. First value of each name wins."""
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_FORM_BYTES:
            return None
    try:
        pairs = parse_qsl(body.decode(), keep_blank_values=True, max_num_fields=20)
    except (UnicodeDecodeError, ValueError):
        return {}
    form: dict[str, str] = {}
    for key, value in pairs:
        form.setdefault(key, value)
    return form


def filled(query: QueryParams, *names: str) -> dict[str, str]:
    """The named parameters the form filled in: an empty field means "any"."""
    return {name: value for name in names if (value := query.get(name))}


def secured(response: Response) -> Response:
    response.headers.update(SECURITY_HEADERS)
    return response


def here(request: Request) -> str:
    """The path and query of ``request``: where a login sends the browser back to."""
    query = request.url.query
    return request.url.path + ("?" + query if query else "")
