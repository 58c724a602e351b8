"""In-memory emulators of the provider APIs hookd reconciles against.

Each emulator is a small Starlette app (``.app``) that answers in the documented
shape of one provider API, keeps an in-memory record of events, and can send the
matching signed webhooks to a hookd receiver with drops, duplicates and
reordering, so that tests can check that reconciliation repairs what was lost.

- :class:`GitHubEmulator`: webhook deliveries of one hook (repository, organisation
  or GitHub App): list (``Link`` pagination), get, redeliver; and the hook itself
  (``GET /repos/{o}/{r}/hooks/{id}``, ``/orgs/{o}/hooks/{id}``; an App's
  ``GET /app/hook/config``) as ``hook_active``, ``hook_events``, ``hook_url`` say
  (``hook_status``: an error status the hook's own paths answer instead).
- :class:`StripeEmulator`: ``GET /v1/events`` (``starting_after``/``ending_before``,
  ``created[...]``, ``types[]``, 30-day retention) and the webhook endpoints
  (``GET /v1/webhook_endpoints[/{id}]``, ``add_webhook_endpoint``).
- :class:`SlackEmulator`: ``conversations.history`` (cursor pagination, ``oldest``/
  ``latest``/``inclusive``, per-page cap, sliding-window rate limit) and ``auth.test``.

Common to all three: ``api_calls``, ``calls_by_path``, ``latency_s`` (with
``cut_latency()`` to answer the calls still waiting in it), ``now`` (the clock the
API uses), ``signing_now`` (the clock webhook signatures use),
``fail_next(status, count, retry_after)``, ``add_events(n, start, step_s)`` and
``send_webhooks(client, url, secret, drop=, duplicate=, shuffle=)``.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import collections
import contextlib
import copy
import fnmatch
import hmac
import itertools
import json
import math
import random
import secrets
import time
import urllib.parse
import uuid
from collections.abc import Awaitable, Callable, Collection, Coroutine, Mapping, Sequence
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation
from typing import Any

import httpx
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding
from cryptography.hazmat.primitives.asymmetric.rsa import RSAPrivateKey, RSAPublicKey
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from hookd.providers.github import github_headers
from hookd.providers.slack import slack_headers
from hookd.providers.stripe import stripe_headers

Handler = Callable[[Request], Awaitable[Response]]
Clock = Callable[[], float]
WebhookRequest = tuple[str, bytes, dict[str, str]]  # (key, body, headers)

JSON_SEPARATORS = (",", ":")
GITHUB_SUMMARY_FIELDS = (
    "id",
    "guid",
    "delivered_at",
    "redelivery",
    "duration",
    "status",
    "status_code",
    "event",
    "action",
    "installation_id",
    "repository_id",
    "throttled_at",
)
STRIPE_RETENTION_S = 30 * 86400
STRIPE_API_VERSION = "2024-06-20"


def _compact(payload: Any) -> bytes:
    return json.dumps(payload, separators=JSON_SEPARATORS).encode()


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _b64url_decode(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _iso(at: float) -> str:
    return datetime.fromtimestamp(int(at), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _retry_after(value: float) -> str:
    return f"{value:g}"


def _bearer(request: Request) -> str | None:
    scheme, _, credentials = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not credentials.strip():
        return None
    return credentials.strip()


def make_app_jwt(
    private_key: RSAPrivateKey,
    app_id: int | str,
    *,
    iat: float | None = None,
    exp: float | None = None,
    header: Mapping[str, Any] | None = None,
) -> str:
    """An RS256 GitHub App JWT (``iat`` 60 s in the past, ``exp`` 9 min later by default)."""
    issued = int(time.time()) - 60 if iat is None else int(iat)
    expires = issued + 540 if exp is None else int(exp)
    head = dict(header) if header is not None else {"alg": "RS256", "typ": "JWT"}
    claims = {"iat": issued, "exp": expires, "iss": app_id}
    signing_input = f"{_b64url(_compact(head))}.{_b64url(_compact(claims))}".encode()
    signature = private_key.sign(signing_input, padding.PKCS1v15(), hashes.SHA256())
    return f"{signing_input.decode()}.{_b64url(signature)}"


class _Emulator:
    """Counting, latency, fault injection, auth and webhook sending shared by all three."""

    def __init__(self) -> None:
        self.api_calls: int = 0
        self.calls_by_path: collections.Counter[str] = collections.Counter()
        self.latency_s: float = 0.0
        self.now: Clock = time.time
        self.signing_now: Clock = time.time
        self._faults: collections.deque[tuple[int, float | None]] = collections.deque()
        self._latency_cut = asyncio.Event()
        self._tasks: set[asyncio.Task[None]] = set()
        self.app = Starlette(routes=self._routes())

    # -- to be provided by each emulator ---------------------------------------
    def _routes(self) -> list[Route]:
        raise NotImplementedError

    async def _check_auth(self, request: Request) -> Response | None:
        raise NotImplementedError

    def _fault_response(self, status: int, retry_after: float | None) -> Response:
        raise NotImplementedError

    def _webhook_requests(self, secret: str) -> list[WebhookRequest]:
        raise NotImplementedError

    def _after(self, response: Response) -> Response:
        return response

    # -- shared machinery --------------------------------------------------------
    def cut_latency(self) -> None:
        """No latency from now on, and calls still waiting in it go on now: a test can
        make the API slow enough to interrupt a run mid-call without waiting it out."""
        self.latency_s = 0.0
        self._latency_cut.set()

    def fail_next(self, status: int, count: int = 1, retry_after: float | None = None) -> None:
        """The next ``count`` API calls answer ``status`` (``Retry-After`` when given)."""
        for _ in range(count):
            self._faults.append((status, retry_after))

    def _endpoint(self, handler: Handler, *, authed: bool = True) -> Handler:
        async def endpoint(request: Request) -> Response:
            self.api_calls += 1
            self.calls_by_path[request.url.path] += 1
            if self.latency_s > 0 and not self._latency_cut.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._latency_cut.wait(), self.latency_s)
            if self._faults:
                status, retry_after = self._faults.popleft()
                return self._after(self._fault_response(status, retry_after))
            if authed:
                refused = await self._check_auth(request)
                if refused is not None:
                    return self._after(refused)
            return self._after(await handler(request))

        return endpoint

    async def send_webhooks(
        self,
        client: httpx.AsyncClient,
        url: str,
        secret: str,
        *,
        drop: Collection[str] = frozenset(),
        duplicate: Collection[str] = frozenset(),
        shuffle: random.Random | None = None,
    ) -> dict[str, int]:
        """POST one signed webhook per recorded event, one after the other.

        Keys in ``drop`` are not sent, keys in ``duplicate`` are sent twice (the
        copies are shuffled with the rest). Returns key -> last HTTP status."""
        plan: list[WebhookRequest] = []
        for item in self._webhook_requests(secret):
            if item[0] in drop:
                continue
            plan.append(item)
            if item[0] in duplicate:
                plan.append(item)
        if shuffle is not None:
            shuffle.shuffle(plan)
        statuses: dict[str, int] = {}
        for key, body, headers in plan:
            response = await client.post(url, content=body, headers=headers)
            statuses[key] = response.status_code
            self._sent(key, response.status_code)
        return statuses

    def _sent(self, key: str, status: int) -> None:
        """Hook called after each webhook is answered."""

    def _in_background(self, webhook: Coroutine[Any, Any, None]) -> None:
        """Send ``webhook`` (one delivered again on request) as a task of its own."""
        task = asyncio.create_task(webhook)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def drain(self) -> None:
        """Wait for every webhook sent in the background to be answered."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks))


# ---------------------------------------------------------------------------------
# GitHub
# ---------------------------------------------------------------------------------


class GitHubEmulator(_Emulator):
    """Webhook deliveries of one hook: ``repos/{owner}/{repo}/hooks/{id}``,
    ``orgs/{org}/hooks/{id}`` or ``app/hook`` (GitHub App, RS256 JWT auth)."""

    user_agent = "GitHub-Hookshot/emulator"

    def __init__(
        self,
        token: str,
        hook: str = "repos/octo/hello/hooks/42",
        app_id: int | None = None,
        app_public_key: RSAPublicKey | None = None,
        *,
        rate_limit: int = 5000,
    ) -> None:
        self.hook = hook.strip("/")
        parts = self.hook.split("/")
        if self.hook == "app/hook":
            if app_id is None or app_public_key is None:
                raise ValueError("app/hook needs app_id and app_public_key")
            self.hook_id = 1
            self.target_type, self.target_id = "integration", app_id
            self.repo_full_name = "octo/hello"
        elif len(parts) == 5 and parts[0] == "repos" and parts[3] == "hooks":
            self.hook_id = int(parts[4])
            self.target_type, self.target_id = "repository", 1296269
            self.repo_full_name = f"{parts[1]}/{parts[2]}"
        elif len(parts) == 4 and parts[0] == "orgs" and parts[2] == "hooks":
            self.hook_id = int(parts[3])
            self.target_type, self.target_id = "organization", 9919
            self.repo_full_name = f"{parts[1]}/hello"
        else:
            raise ValueError(f"unsupported hook path {hook!r}")
        self.token = token
        self.app_id = app_id
        self.app_public_key = app_public_key
        self.repository_id = 1296269
        self.deliveries: list[dict[str, Any]] = []  # full delivery objects, id order
        self.webhook_target: tuple[str, str] | None = None  # (url, secret) for redeliveries
        self.redelivery_statuses: list[tuple[str, int]] = []  # (guid, status) per redelivery
        self.rate_limit = rate_limit
        self.rate_remaining = rate_limit
        self.rate_reset: int | None = None
        self._ids = itertools.count(12_000_000_001)
        self._numbers = itertools.count(1)
        self._record_status = False
        # The hook's registration (GET /{hook}): None URL means where webhooks go
        # (``webhook_target``); None last response means the newest delivery's.
        self.hook_active = True
        self.hook_events: list[str] = ["*"]
        self.hook_url: str | None = None
        self.hook_last_response: dict[str, Any] | None = None
        self.hook_status: int | None = None
        # GitHub does not promise the order of its list: answer oldest first, and at
        # most ``max_per_page`` a page, to test a client that must not assume it.
        self.oldest_first = False
        self.max_per_page = 100
        super().__init__()

    # -- recording ---------------------------------------------------------------
    def add_delivery(
        self,
        at: float,
        event: str = "issues",
        action: str | None = "opened",
        payload: dict[str, Any] | None = None,
        *,
        guid: str | None = None,
        redelivery: bool = False,
    ) -> dict[str, Any]:
        """Record one delivery at unix time ``at``; returns the full delivery object."""
        if payload is None:
            payload = self._sample_payload(at, event, action)
        guid = guid or str(uuid.uuid4())
        delivery: dict[str, Any] = {
            "id": next(self._ids),
            "guid": guid,
            "delivered_at": _iso(at),
            "redelivery": redelivery,
            "duration": 0.03,
            "status": "OK",
            "status_code": 200,
            "event": event,
            "action": action,
            "installation_id": None,
            "repository_id": self.repository_id,
            "throttled_at": None,
            "url": self._target_url(),
            "request": {"headers": self._delivery_headers(event, guid), "payload": payload},
            "response": {"headers": {}, "payload": ""},
        }
        self.deliveries.append(delivery)
        return delivery

    def add_events(
        self,
        n: int,
        start: float,
        step_s: float,
        event: str = "issues",
        action: str | None = "opened",
    ) -> list[str]:
        """Record ``n`` deliveries at ``start``, ``start + step_s``, ...; returns their GUIDs."""
        return [self.add_delivery(start + i * step_s, event, action)["guid"] for i in range(n)]

    def delivery(self, delivery_id: int) -> dict[str, Any]:
        for d in self.deliveries:
            if d["id"] == delivery_id:
                return d
        raise KeyError(delivery_id)

    def deliveries_for(self, guid: str) -> list[dict[str, Any]]:
        """Every delivery (original and redeliveries) of one GUID, oldest first."""
        return [d for d in self.deliveries if d["guid"] == guid]

    @staticmethod
    def summary(delivery: Mapping[str, Any]) -> dict[str, Any]:
        """The list-endpoint form of a delivery (no ``url``/``request``/``response``)."""
        return {field: delivery[field] for field in GITHUB_SUMMARY_FIELDS}

    @staticmethod
    def delivery_payload(delivery: Mapping[str, Any]) -> bytes:
        """The exact webhook body of a delivery (compact JSON of ``request.payload``)."""
        return _compact(delivery["request"]["payload"])

    def _sample_payload(self, at: float, event: str, action: str | None) -> dict[str, Any]:
        number = next(self._numbers)
        owner, _, name = self.repo_full_name.partition("/")
        payload: dict[str, Any] = {}
        if action is not None:
            payload["action"] = action
        if event == "issues":
            payload["issue"] = {
                "id": 1_000_000 + number,
                "number": number,
                "title": f"Issue #{number}",
                "state": "open",
                "created_at": _iso(at),
            }
        else:
            payload["sequence"] = number
        payload["repository"] = {
            "id": self.repository_id,
            "name": name,
            "full_name": self.repo_full_name,
            "owner": {"login": owner},
        }
        payload["sender"] = {"login": "octocat", "id": 1}
        return payload

    def _delivery_headers(self, event: str, guid: str) -> dict[str, str]:
        return {
            "Accept": "*/*",
            "X-GitHub-Delivery": guid,
            "X-GitHub-Event": event,
            "X-GitHub-Hook-ID": str(self.hook_id),
            "X-GitHub-Hook-Installation-Target-ID": str(self.target_id),
            "X-GitHub-Hook-Installation-Target-Type": self.target_type,
            "Content-Type": "application/json",
            "User-Agent": self.user_agent,
        }

    def _target_url(self) -> str:
        return (
            self.webhook_target[0] if self.webhook_target else "https://hookd.invalid/hooks/github"
        )

    def _signed(self, delivery: Mapping[str, Any], secret: str) -> tuple[bytes, dict[str, str]]:
        body = self.delivery_payload(delivery)
        recorded: dict[str, str] = delivery["request"]["headers"]
        signed = github_headers(
            secret, body, recorded["X-GitHub-Event"], recorded["X-GitHub-Delivery"]
        )
        return body, {**signed, **recorded}

    # -- webhooks ------------------------------------------------------------------
    def _webhook_requests(self, secret: str) -> list[WebhookRequest]:
        firsts: dict[str, dict[str, Any]] = {}
        for d in self.deliveries:
            firsts.setdefault(d["guid"], d)
        return [(guid, *self._signed(d, secret)) for guid, d in firsts.items()]

    async def send_webhooks(
        self,
        client: httpx.AsyncClient,
        url: str,
        secret: str,
        *,
        drop: Collection[str] = frozenset(),
        duplicate: Collection[str] = frozenset(),
        shuffle: random.Random | None = None,
        record_status: bool = True,
    ) -> dict[str, int]:
        """As the base method, keyed by GUID (one webhook per GUID). With
        ``record_status`` (the default) the deliveries' ``status``/``status_code``
        become what the receiver answered, and dropped ones ``"failed to connect"``/502,
        as GitHub would show them; until a delivery is answered it shows no answer
        (``status_code`` 0), so a list read meanwhile claims no acknowledgement."""
        self._record_status = record_status
        if record_status:
            sending = {key for key, _, _ in self._webhook_requests(secret)}
            for d in self.deliveries:
                if d["guid"] in sending:
                    d["status"], d["status_code"] = "Pending", 0
        try:
            statuses = await super().send_webhooks(
                client, url, secret, drop=drop, duplicate=duplicate, shuffle=shuffle
            )
        finally:
            self._record_status = False
        if record_status:
            for guid in drop:
                for d in self.deliveries_for(guid):
                    d["status"], d["status_code"] = "failed to connect", 502
        return statuses

    def _sent(self, key: str, status: int) -> None:
        if self._record_status:
            for d in self.deliveries_for(key):
                d["status"] = "OK" if 200 <= status < 300 else f"Invalid HTTP Response: {status}"
                d["status_code"] = status

    async def _redeliver(self, delivery: dict[str, Any], url: str, secret: str) -> None:
        body, headers = self._signed(delivery, secret)
        async with httpx.AsyncClient() as client:
            response = await client.post(url, content=body, headers=headers)
        self.redelivery_statuses.append((delivery["guid"], response.status_code))
        delivery["status_code"] = response.status_code
        if not 200 <= response.status_code < 300:
            delivery["status"] = f"Invalid HTTP Response: {response.status_code}"

    # -- HTTP ------------------------------------------------------------------------
    def _routes(self) -> list[Route]:
        base = f"/{self.hook}/deliveries"
        catch_all = self._endpoint(self._not_found, authed=False)
        hook = Route(f"/{self.hook}", self._endpoint(self._hook), methods=["GET"])
        if self.hook == "app/hook":
            hook = Route("/app/hook/config", self._endpoint(self._hook_config), methods=["GET"])
        return [
            hook,
            Route(base, self._endpoint(self._list), methods=["GET"]),
            Route(base + "/{delivery_id:int}", self._endpoint(self._get), methods=["GET"]),
            Route(
                base + "/{delivery_id:int}/attempts",
                self._endpoint(self._attempt),
                methods=["POST"],
            ),
            Route("/{rest:path}", catch_all, methods=["GET", "POST", "PUT", "PATCH", "DELETE"]),
        ]

    @staticmethod
    def _error(status: int, message: str, headers: Mapping[str, str] | None = None) -> Response:
        body = {
            "message": message,
            "documentation_url": "https://docs.github.com/rest",
            "status": str(status),
        }
        return JSONResponse(body, status_code=status, headers=headers)

    def _reset_epoch(self) -> int:
        now = self.now()
        if self.rate_reset is None or now >= self.rate_reset:
            self.rate_reset = int(now) + 3600
            self.rate_remaining = self.rate_limit
        return self.rate_reset

    def _after(self, response: Response) -> Response:
        reset = self._reset_epoch()
        if "x-ratelimit-remaining" not in response.headers:
            response.headers["X-RateLimit-Remaining"] = str(self.rate_remaining)
            response.headers["X-RateLimit-Reset"] = str(reset)
        response.headers["X-RateLimit-Limit"] = str(self.rate_limit)
        response.headers["X-RateLimit-Used"] = str(self.rate_limit - self.rate_remaining)
        response.headers["X-RateLimit-Resource"] = "core"
        response.headers["X-GitHub-Media-Type"] = "github.v3; format=json"
        return response

    def _fault_response(self, status: int, retry_after: float | None) -> Response:
        headers: dict[str, str] = {}
        if retry_after is not None:
            headers["Retry-After"] = _retry_after(retry_after)
        if status in (403, 429):
            wait = 60.0 if retry_after is None else retry_after
            headers["X-RateLimit-Remaining"] = "0"
            headers["X-RateLimit-Reset"] = str(math.ceil(self.now() + wait))
            return self._error(status, "API rate limit exceeded", headers)
        message = "Server Error" if status >= 500 else "Fault injected"
        return self._error(status, message, headers)

    async def _check_auth(self, request: Request) -> Response | None:
        if self.hook == "app/hook":
            token = _bearer(request)
            if token is None or not self._valid_jwt(token):
                return self._error(401, "A JSON web token could not be decoded")
        else:
            scheme, _, credentials = request.headers.get("authorization", "").partition(" ")
            if scheme.lower() not in ("bearer", "token") or not credentials:
                return self._error(401, "Requires authentication")
            if not hmac.compare_digest(credentials.strip(), self.token):
                return self._error(401, "Bad credentials")
        self._reset_epoch()
        if self.rate_remaining <= 0:
            headers = {"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": str(self.rate_reset)}
            return self._error(403, "API rate limit exceeded", headers)
        self.rate_remaining -= 1
        return None

    def _valid_jwt(self, token: str) -> bool:
        assert self.app_public_key is not None
        parts = token.split(".")
        if len(parts) != 3:
            return False
        try:
            header = json.loads(_b64url_decode(parts[0]))
            claims = json.loads(_b64url_decode(parts[1]))
            signature = _b64url_decode(parts[2])
        except (ValueError, binascii.Error):
            return False
        if not isinstance(header, dict) or not isinstance(claims, dict):
            return False
        if header.get("alg") != "RS256" or header.get("typ", "JWT") != "JWT":
            return False
        try:
            self.app_public_key.verify(
                signature,
                f"{parts[0]}.{parts[1]}".encode(),
                padding.PKCS1v15(),
                hashes.SHA256(),
            )
        except InvalidSignature:
            return False
        iat, exp, iss = claims.get("iat"), claims.get("exp"), claims.get("iss")
        if not isinstance(iat, int) or not isinstance(exp, int):
            return False
        now = self.now()
        if exp <= iat or exp - iat > 600 or exp <= now or iat > now + 60:
            return False
        return iss in (self.app_id, str(self.app_id))

    async def _not_found(self, _: Request) -> Response:
        return self._error(404, "Not Found")

    async def _list(self, request: Request) -> Response:
        query = request.query_params
        try:
            per_page = int(query.get("per_page", "30"))
        except ValueError:
            return self._error(422, "Invalid per_page")
        per_page = max(1, min(per_page, 100, self.max_per_page))
        ascending = self.oldest_first
        candidates = sorted(self.deliveries, key=lambda d: d["id"], reverse=not ascending)
        cursor = query.get("cursor")
        if cursor:
            last = self._decode_cursor(cursor)
            if last is None:
                return self._error(400, "Invalid cursor")
            candidates = [
                d for d in candidates if (d["id"] > last if ascending else d["id"] < last)
            ]
        redelivery = query.get("redelivery")
        if redelivery in ("true", "false"):
            candidates = [d for d in candidates if d["redelivery"] == (redelivery == "true")]
        page = candidates[:per_page]
        headers: dict[str, str] = {}
        if len(candidates) > per_page:
            next_cursor = self._encode_cursor(page[-1]["id"])
            base = str(request.base_url).rstrip("/")
            link = f"{base}/{self.hook}/deliveries?per_page={per_page}&cursor={next_cursor}"
            headers["Link"] = f'<{link}>; rel="next"'
        return JSONResponse([self.summary(d) for d in page], headers=headers)

    @staticmethod
    def _encode_cursor(last_id: int) -> str:
        # The position of the last delivery listed, whichever way the list runs.
        return "v1_" + _b64url(f"before:{last_id}".encode())

    @staticmethod
    def _decode_cursor(cursor: str) -> int | None:
        if not cursor.startswith("v1_"):
            return None
        try:
            kind, _, value = _b64url_decode(cursor[3:]).decode().partition(":")
            return int(value) if kind == "before" else None
        except (ValueError, binascii.Error, UnicodeDecodeError):
            return None

    def hook_config(self) -> dict[str, Any]:
        return {
            "content_type": "json",
            "insecure_ssl": "0",
            "secret": "********",
            "url": self.hook_url if self.hook_url is not None else self._target_url(),
        }

    def hook_document(self, base_url: str) -> dict[str, Any]:
        """The hook as ``GET /repos/{o}/{r}/hooks/{id}`` (or the org's) shows it."""
        last = self.hook_last_response
        if last is None:
            answered = [d for d in self.deliveries if d["status_code"]]
            last = {"code": None, "status": "unused", "message": None}
            if answered:
                newest = max(answered, key=lambda d: d["id"])
                code: int = newest["status_code"]
                if 200 <= code < 300:
                    last = {"code": code, "status": "active", "message": "OK"}
                else:
                    last = {"code": code, "status": "misconfigured", "message": newest["status"]}
        url = f"{base_url.rstrip('/')}/{self.hook}"
        document: dict[str, Any] = {
            "type": "Repository" if self.target_type == "repository" else "Organization",
            "id": self.hook_id,
            "name": "web",
            "active": self.hook_active,
            "events": list(self.hook_events),
            "config": self.hook_config(),
            "updated_at": "2023-11-14T22:13:20Z",
            "created_at": "2023-11-14T22:13:20Z",
            "url": url,
            "ping_url": f"{url}/pings",
            "deliveries_url": f"{url}/deliveries",
            "last_response": last,
        }
        if self.target_type == "repository":
            document["test_url"] = f"{url}/test"
        return document

    async def _hook(self, request: Request) -> Response:
        if self.hook_status is not None:
            return self._error(self.hook_status, "Not Found")
        return JSONResponse(self.hook_document(str(request.base_url)))

    async def _hook_config(self, _: Request) -> Response:
        if self.hook_status is not None:
            return self._error(self.hook_status, "Not Found")
        return JSONResponse(self.hook_config())

    async def _get(self, request: Request) -> Response:
        try:
            delivery = self.delivery(request.path_params["delivery_id"])
        except KeyError:
            return self._error(404, "Not Found")
        return JSONResponse(delivery)

    async def _attempt(self, request: Request) -> Response:
        try:
            original = self.delivery(request.path_params["delivery_id"])
        except KeyError:
            return self._error(404, "Not Found")
        again = self.add_delivery(
            self.now(),
            original["event"],
            original["action"],
            copy.deepcopy(original["request"]["payload"]),
            guid=original["guid"],
            redelivery=True,
        )
        if self.webhook_target is not None:
            url, secret = self.webhook_target
            self._in_background(self._redeliver(again, url, secret))
        return JSONResponse({}, status_code=202)


# ---------------------------------------------------------------------------------
# Stripe
# ---------------------------------------------------------------------------------


class StripeEmulator(_Emulator):
    """``GET /v1/events`` with Stripe's list shape, cursors and 30-day retention."""

    def __init__(self, api_key: str) -> None:
        self.api_key = api_key
        self.events: list[dict[str, Any]] = []  # insertion order
        self._order: dict[str, int] = {}  # id -> insertion index (tie-breaker)
        self.webhook_endpoints: list[dict[str, Any]] = []  # creation order
        super().__init__()

    def add_webhook_endpoint(
        self,
        url: str,
        enabled_events: Sequence[str] = ("*",),
        *,
        status: str = "enabled",
        api_version: str | None = None,
    ) -> dict[str, Any]:
        """Register a webhook endpoint (as ``POST /v1/webhook_endpoints`` would); returns
        the endpoint object, which a test may change (``status = "disabled"``)."""
        endpoint: dict[str, Any] = {
            "id": "we_" + secrets.token_hex(12),
            "object": "webhook_endpoint",
            "api_version": api_version,
            "application": None,
            "created": int(self.now()),
            "description": None,
            "enabled_events": list(enabled_events),
            "livemode": False,
            "metadata": {},
            "status": status,
            "url": url,
        }
        self.webhook_endpoints.append(endpoint)
        return endpoint

    # -- recording ---------------------------------------------------------------
    def add_event(
        self,
        created: float,
        type: str = "payment_intent.succeeded",
        data_object: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Record one event created at unix time ``created``; returns the event object."""
        event_id = "evt_" + secrets.token_hex(12)
        if data_object is None:
            data_object = {
                "id": "pi_" + secrets.token_hex(12),
                "object": "payment_intent",
                "amount": 1000 + len(self.events),
                "currency": "usd",
                "status": "succeeded",
                "created": int(created),
                "livemode": False,
            }
        event: dict[str, Any] = {
            "id": event_id,
            "object": "event",
            "api_version": STRIPE_API_VERSION,
            "created": int(created),
            "data": {"object": data_object},
            "livemode": False,
            "pending_webhooks": 0,
            "request": {"id": None, "idempotency_key": None},
            "type": type,
        }
        self._order[event_id] = len(self.events)
        self.events.append(event)
        return event

    def add_events(
        self,
        n: int,
        start: float,
        step_s: float,
        type: str = "payment_intent.succeeded",
    ) -> list[str]:
        """Record ``n`` events at ``start``, ``start + step_s``, ...; returns their ids."""
        return [self.add_event(start + i * step_s, type)["id"] for i in range(n)]

    def event(self, event_id: str) -> dict[str, Any]:
        return self.events[self._order[event_id]]

    def listed(self) -> list[dict[str, Any]]:
        """Events the API can return now, in API order (newest first)."""
        cutoff = self.now() - STRIPE_RETENTION_S
        kept = [e for e in self.events if e["created"] >= cutoff]
        return sorted(kept, key=lambda e: (e["created"], self._order[e["id"]]), reverse=True)

    # -- webhooks ------------------------------------------------------------------
    def _webhook_requests(self, secret: str) -> list[WebhookRequest]:
        requests = []
        for event in self.events:
            body = _compact({**event, "pending_webhooks": 1})
            headers = stripe_headers(secret, body, int(self.signing_now()))
            headers["User-Agent"] = "Stripe/1.0 (+https://stripe.com/docs/webhooks)"
            requests.append((event["id"], body, headers))
        return requests

    # -- HTTP ------------------------------------------------------------------------
    def _routes(self) -> list[Route]:
        return [
            Route("/v1/events", self._endpoint(self._list), methods=["GET"]),
            Route("/v1/events/{event_id}", self._endpoint(self._get), methods=["GET"]),
            Route("/v1/webhook_endpoints", self._endpoint(self._endpoints), methods=["GET"]),
            Route(
                "/v1/webhook_endpoints/{endpoint_id}",
                self._endpoint(self._endpoint_get),
                methods=["GET"],
            ),
            Route("/{rest:path}", self._endpoint(self._not_found), methods=["GET", "POST"]),
        ]

    @staticmethod
    def _error(
        status: int,
        message: str,
        type: str = "invalid_request_error",
        headers: Mapping[str, str] | None = None,
        **extra: str,
    ) -> Response:
        return JSONResponse(
            {"error": {"type": type, "message": message, **extra}},
            status_code=status,
            headers=headers,
        )

    def _after(self, response: Response) -> Response:
        response.headers["Request-Id"] = "req_" + secrets.token_hex(7)
        response.headers["Stripe-Version"] = STRIPE_API_VERSION
        return response

    def _fault_response(self, status: int, retry_after: float | None) -> Response:
        headers = {"Retry-After": _retry_after(retry_after)} if retry_after is not None else None
        if status == 429:
            return self._error(
                429,
                "Request rate limit exceeded.",
                headers=headers,
                code="rate_limit",
            )
        if status >= 500:
            return self._error(status, "An unknown error occurred", "api_error", headers)
        return self._error(status, "Fault injected", headers=headers)

    async def _check_auth(self, request: Request) -> Response | None:
        scheme, _, credentials = request.headers.get("authorization", "").partition(" ")
        key: str | None = None
        if scheme.lower() == "bearer":
            key = credentials.strip()
        elif scheme.lower() == "basic":
            try:
                key = base64.b64decode(credentials, validate=True).decode().partition(":")[0]
            except (ValueError, binascii.Error, UnicodeDecodeError):
                key = ""
        if not key:
            return self._error(
                401,
                "You did not provide an API key. You need to provide your API key in the "
                "Authorization header, using Bearer auth (e.g. 'Authorization: Bearer YOUR_"
                "SECRET_KEY').",
            )
        if not hmac.compare_digest(key, self.api_key):
            return self._error(401, "Invalid API Key provided")
        return None

    async def _not_found(self, request: Request) -> Response:
        return self._error(404, f"Unrecognized request URL (GET: {request.url.path}).")

    async def _endpoint_get(self, request: Request) -> Response:
        endpoint_id = request.path_params["endpoint_id"]
        for endpoint in self.webhook_endpoints:
            if endpoint["id"] == endpoint_id:
                return JSONResponse(endpoint)
        return self._error(
            404,
            f"No such webhook_endpoint: '{endpoint_id}'",
            code="resource_missing",
            param="id",
        )

    async def _endpoints(self, request: Request) -> Response:
        """Newest first, ``limit`` (1-100, default 10), ``starting_after``."""
        query = request.query_params
        try:
            limit = int(query.get("limit", "10"))
        except ValueError:
            return self._error(400, f"Invalid integer: {query.get('limit')}", param="limit")
        if not 1 <= limit <= 100:
            return self._error(400, "This value must be between 1 and 100.", param="limit")
        ordered = self.webhook_endpoints[::-1]
        after = query.get("starting_after")
        if after:
            position = next((i for i, e in enumerate(ordered) if e["id"] == after), None)
            if position is None:
                return self._error(
                    400,
                    f"No such webhook_endpoint: '{after}'",
                    code="resource_missing",
                    param="starting_after",
                )
            ordered = ordered[position + 1 :]
        return JSONResponse(
            {
                "object": "list",
                "url": "/v1/webhook_endpoints",
                "has_more": len(ordered) > limit,
                "data": ordered[:limit],
            }
        )

    async def _get(self, request: Request) -> Response:
        event_id = request.path_params["event_id"]
        visible = {e["id"] for e in self.listed()}
        if event_id not in visible:
            return self._error(
                404, f"No such event: '{event_id}'", code="resource_missing", param="id"
            )
        return JSONResponse(self.event(event_id))

    async def _list(self, request: Request) -> Response:
        query = request.query_params
        try:
            limit = int(query.get("limit", "10"))
        except ValueError:
            return self._error(400, f"Invalid integer: {query.get('limit')}", param="limit")
        if not 1 <= limit <= 100:
            return self._error(400, "This value must be between 1 and 100.", param="limit")
        bounds: list[tuple[str, int]] = []
        for op in ("", "[gt]", "[gte]", "[lt]", "[lte]"):
            raw = query.get(f"created{op}")
            if raw is None:
                continue
            try:
                bounds.append((op, int(raw)))
            except ValueError:
                return self._error(400, f"Invalid integer: {raw}", param=f"created{op}")
        types = query.getlist("types[]")
        single_type = query.get("type")

        def wanted(event: Mapping[str, Any]) -> bool:
            created: int = event["created"]
            for op, value in bounds:
                if not {
                    "": created == value,
                    "[gt]": created > value,
                    "[gte]": created >= value,
                    "[lt]": created < value,
                    "[lte]": created <= value,
                }[op]:
                    return False
            if types and event["type"] not in types:
                return False
            return single_type is None or fnmatch.fnmatchcase(event["type"], single_type)

        ordered = self.listed()
        starting_after, ending_before = query.get("starting_after"), query.get("ending_before")
        if starting_after and ending_before:
            return self._error(400, "You may only specify one of starting_after and ending_before.")
        cursor = starting_after or ending_before
        position = None
        if cursor:
            position = next((i for i, e in enumerate(ordered) if e["id"] == cursor), None)
            if position is None:
                param = "starting_after" if starting_after else "ending_before"
                return self._error(
                    400, f"No such event: '{cursor}'", code="resource_missing", param=param
                )
        if ending_before and position is not None:
            candidates = [e for e in ordered[:position] if wanted(e)]
            page = candidates[-limit:]
        else:
            start = 0 if position is None else position + 1
            candidates = [e for e in ordered[start:] if wanted(e)]
            page = candidates[:limit]
        return JSONResponse(
            {
                "object": "list",
                "url": "/v1/events",
                "has_more": len(candidates) > limit,
                "data": page,
            }
        )


# ---------------------------------------------------------------------------------
# Slack
# ---------------------------------------------------------------------------------


def _ts_micros(ts: str) -> int:
    """Slack ``ts``/``oldest``/``latest`` strings ("1700000000.000100", "1700000000") in µs."""
    value = Decimal(ts)
    if not value.is_finite():
        raise InvalidOperation(ts)
    return int(value * 1_000_000)


def _ts_string(micros: int) -> str:
    seconds, fraction = divmod(micros, 1_000_000)
    return f"{seconds}.{fraction:06d}"


class SlackEmulator(_Emulator):
    """``conversations.history`` and ``auth.test`` (served at ``/{method}`` and
    ``/api/{method}``), with Slack's HTTP-200 error convention except for 429."""

    api_app_id = "A0HOOKD"
    bot_id = "B0HOOKD"

    def __init__(
        self,
        token: str,
        team_id: str = "T0HOOKD",
        channels: Sequence[str] = ("C0HOOKD",),
        requests_per_minute: int | None = None,
        page_limit_max: int = 15,
    ) -> None:
        self.token = token
        self.team_id = team_id
        self.channels = list(channels)
        self.requests_per_minute = requests_per_minute
        self.page_limit_max = page_limit_max
        # per channel, oldest first: the message objects exactly as the API returns them
        self.messages: dict[str, list[dict[str, Any]]] = {c: [] for c in self.channels}
        self.event_ids: dict[str, str] = {}  # key -> Events API event_id
        self.ratelimited: int = 0  # history calls answered 429 by the rate limiter
        self._history_calls: collections.deque[float] = collections.deque()
        self._users = itertools.cycle(["U0ALICE01", "U0BOB0002", "U0CAROL03"])
        self._serial = itertools.count(1)
        super().__init__()

    @property
    def history_calls(self) -> int:
        """conversations.history requests received (including refused ones)."""
        return sum(n for path, n in self.calls_by_path.items() if path.endswith("history"))

    # -- recording ---------------------------------------------------------------
    def key(self, channel: str, ts: str) -> str:
        return f"msg:{self.team_id}:{channel}:{ts}"

    def add_message(
        self,
        at: float,
        channel: str | None = None,
        text: str | None = None,
        *,
        subtype: str | None = None,
    ) -> str:
        """Record one message at unix time ``at`` (bumped by 1 µs steps while its
        ts is taken); ``subtype="bot_message"`` makes a bot post. Returns its key."""
        channel = channel or self.channels[0]
        if channel not in self.messages:
            raise KeyError(channel)
        existing = self.messages[channel]
        taken = {_ts_micros(m["ts"]) for m in existing}
        micros = round(at * 1_000_000)
        while micros in taken:
            micros += 1
        ts = _ts_string(micros)
        serial = next(self._serial)
        message: dict[str, Any] = {"type": "message"}
        if subtype == "bot_message":
            message.update(subtype=subtype, bot_id=self.bot_id, username="hookd-bot")
        else:
            message["user"] = next(self._users)
            if subtype is not None:
                message["subtype"] = subtype
        message["text"] = text if text is not None else f"message {serial}"
        message["ts"] = ts
        existing.append(message)
        existing.sort(key=lambda m: _ts_micros(m["ts"]))
        key = self.key(channel, ts)
        self.event_ids[key] = "Ev" + secrets.token_hex(5).upper()
        return key

    def add_events(
        self,
        n: int,
        start: float,
        step_s: float,
        channel: str | None = None,
        *,
        bot_every: int = 0,
    ) -> list[str]:
        """Record ``n`` messages at ``start``, ``start + step_s``, ...; with no
        ``channel`` they go round-robin over ``channels``; every ``bot_every``-th
        one is a ``bot_message``. Returns their keys."""
        keys = []
        for i in range(n):
            target = channel or self.channels[i % len(self.channels)]
            bot = bot_every > 0 and (i + 1) % bot_every == 0
            keys.append(
                self.add_message(start + i * step_s, target, subtype="bot_message" if bot else None)
            )
        return keys

    def all_keys(self) -> list[str]:
        return [self.key(c, m["ts"]) for c, msgs in self.messages.items() for m in msgs]

    # -- webhooks ------------------------------------------------------------------
    def _webhook_requests(self, secret: str) -> list[WebhookRequest]:
        items: list[tuple[int, str, dict[str, Any]]] = []
        for channel, msgs in self.messages.items():
            for m in msgs:
                items.append((_ts_micros(m["ts"]), channel, m))
        items.sort(key=lambda item: item[0])
        requests = []
        for micros, channel, message in items:
            key = self.key(channel, message["ts"])
            payload = {
                "token": "verification-token-unused",
                "team_id": self.team_id,
                "api_app_id": self.api_app_id,
                "event": {
                    **message,
                    "channel": channel,
                    "event_ts": message["ts"],
                    "channel_type": "channel",
                },
                "type": "event_callback",
                "event_id": self.event_ids[key],
                "event_time": micros // 1_000_000,
            }
            body = _compact(payload)
            headers = slack_headers(secret, body, int(self.signing_now()))
            headers["User-Agent"] = "Slackbot 1.0 (+https://api.slack.com/robots)"
            requests.append((key, body, headers))
        return requests

    # -- HTTP ------------------------------------------------------------------------
    def _routes(self) -> list[Route]:
        routes = []
        for prefix in ("", "/api"):
            routes += [
                Route(
                    f"{prefix}/conversations.history",
                    self._endpoint(self._history),
                    methods=["GET", "POST"],
                ),
                Route(
                    f"{prefix}/auth.test", self._endpoint(self._auth_test), methods=["GET", "POST"]
                ),
            ]
        routes.append(
            Route(
                "/{rest:path}", self._endpoint(self._unknown, authed=False), methods=["GET", "POST"]
            )
        )
        return routes

    @staticmethod
    def _answer(
        body: Mapping[str, Any], status: int = 200, headers: Mapping[str, str] | None = None
    ) -> Response:
        response = JSONResponse(dict(body), status_code=status, headers=headers)
        response.headers["Content-Type"] = "application/json; charset=utf-8"
        return response

    def _fail(self, error: str) -> Response:
        return self._answer({"ok": False, "error": error})

    def _fault_response(self, status: int, retry_after: float | None) -> Response:
        headers = {"Retry-After": _retry_after(retry_after)} if retry_after is not None else None
        error = "ratelimited" if status == 429 else "internal_error"
        return self._answer({"ok": False, "error": error}, status, headers)

    @staticmethod
    async def _params(request: Request) -> dict[str, str]:
        params = dict(request.query_params)
        if request.method == "POST":
            content_type = request.headers.get("content-type", "")
            if content_type.startswith("application/json"):
                try:
                    body = json.loads(await request.body() or b"{}")
                except ValueError:
                    body = {}
                if isinstance(body, dict):
                    params.update({k: str(v) for k, v in body.items()})
            elif content_type.startswith("application/x-www-form-urlencoded"):
                body_text = (await request.body()).decode("utf-8", "replace")
                params.update(urllib.parse.parse_qsl(body_text, keep_blank_values=True))
        return params

    async def _check_auth(self, request: Request) -> Response | None:
        token = _bearer(request) or (await self._params(request)).get("token")
        if not token:
            return self._fail("not_authed")
        if not hmac.compare_digest(token, self.token):
            return self._fail("invalid_auth")
        return None

    async def _unknown(self, _: Request) -> Response:
        return self._answer({"ok": False, "error": "unknown_method"}, 404)

    async def _auth_test(self, _: Request) -> Response:
        return self._answer(
            {
                "ok": True,
                "url": "https://hookd.slack.com/",
                "team": "hookd",
                "user": "hookd-bot",
                "team_id": self.team_id,
                "user_id": "U0BOT",
                "bot_id": self.bot_id,
            }
        )

    def _rate_limited(self) -> Response | None:
        if self.requests_per_minute is None:
            return None
        now = self.now()
        window = self._history_calls
        while window and window[0] <= now - 60:
            window.popleft()
        if len(window) >= self.requests_per_minute:
            self.ratelimited += 1
            wait = max(1, math.ceil(window[0] + 60 - now))
            return self._answer(
                {"ok": False, "error": "ratelimited"}, 429, {"Retry-After": str(wait)}
            )
        window.append(now)
        return None

    async def _history(self, request: Request) -> Response:
        limited = self._rate_limited()
        if limited is not None:
            return limited
        params = await self._params(request)
        channel = params.get("channel", "")
        if channel not in self.messages:
            return self._fail("channel_not_found")
        inclusive = params.get("inclusive", "").lower() in ("1", "true")
        bounds: dict[str, int | None] = {}
        for name in ("oldest", "latest"):
            try:
                bounds[name] = _ts_micros(params[name]) if params.get(name) else None
            except InvalidOperation:
                return self._fail(f"invalid_ts_{name}")
        oldest, latest = bounds["oldest"], bounds["latest"]
        try:
            limit = int(params.get("limit") or 0)
        except ValueError:
            return self._fail("invalid_limit")
        limit = min(limit, self.page_limit_max) if limit > 0 else min(100, self.page_limit_max)
        below: int | None = None
        if params.get("cursor"):
            below = self._decode_cursor(params["cursor"])
            if below is None:
                return self._fail("invalid_cursor")

        def wanted(micros: int) -> bool:
            if oldest is not None and (micros < oldest or (micros == oldest and not inclusive)):
                return False
            if latest is not None and (micros > latest or (micros == latest and not inclusive)):
                return False
            return below is None or micros <= below

        candidates = [m for m in reversed(self.messages[channel]) if wanted(_ts_micros(m["ts"]))]
        page = candidates[:limit]
        has_more = len(candidates) > limit
        next_cursor = self._encode_cursor(_ts_micros(candidates[limit]["ts"])) if has_more else ""
        return self._answer(
            {
                "ok": True,
                "messages": [dict(m) for m in page],
                "has_more": has_more,
                "pin_count": 0,
                "response_metadata": {"next_cursor": next_cursor},
            }
        )

    @staticmethod
    def _encode_cursor(micros: int) -> str:
        return base64.b64encode(f"next_ts:{micros}".encode()).decode()

    @staticmethod
    def _decode_cursor(cursor: str) -> int | None:
        try:
            kind, _, value = base64.b64decode(cursor, validate=True).decode().partition(":")
            return int(value) if kind == "next_ts" else None
        except (ValueError, binascii.Error, UnicodeDecodeError):
            return None


def webhook_key(headers: Mapping[str, str], body: bytes) -> str:
    """The key hookd dedupes a received emulator webhook on: the GitHub delivery
    GUID, the Stripe event id or the Slack ``msg:{team}:{channel}:{ts}``."""
    lowered = {k.lower(): v for k, v in headers.items()}
    if "x-github-delivery" in lowered:
        return lowered["x-github-delivery"]
    payload = json.loads(body)
    if payload.get("object") == "event":
        return str(payload["id"])
    event = payload["event"]
    return f"msg:{payload['team_id']}:{event['channel']}:{event['ts']}"
