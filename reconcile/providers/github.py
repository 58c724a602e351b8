"""GitHub hook deliveries: repo, org and app hooks.

``GET /{hook}/deliveries?per_page=100`` lists the deliveries, paged by the
``Link: <…>; rel="next"`` cursor. GitHub answers newest first but does not promise
it: the pages are read on until one lies wholly before the window of an answer seen
to be newest first so far (``NewestFirst``), else to the last. Redeliveries share the GUID that
``X-GitHub-Delivery`` carries, so items are grouped by GUID. A missing GUID is
repaired by fetching the delivery (its request headers and payload) or, with
``repair = "redeliver"``, by asking GitHub to send it again. A delivery GitHub shows
without its payload (``request.payload`` may be null) is not stored with a made-up
body: it is left missing, and the run's window a hole that says so (``Unrepairable``).

Each delivery also says what the receiver answered (``status_code``): every one
answered with a 2xx is noted for the ack audit, redeliveries included. The hook
itself (``GET /{hook}``: ``active``, ``events``, ``config.url``, ``last_response``;
an App's ``GET /app/hook/config``: its ``url``) is the registration the source's
``public_url`` and ``expect_events`` are compared with; without ``expect_events``,
the hook must send the events of the types its handlers' and destinations' ``types``
filters take (an ``issues.opened`` filter needs the ``issues`` event).
"""

from __future__ import annotations

import base64
import json
import re
import time
from collections.abc import AsyncIterator, Mapping
from datetime import UTC, datetime
from fnmatch import fnmatchcase
from typing import TypedDict

from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa

from hookd.errors import ReconcileError
from hookd.providers.github import KEPT_HEADERS, GitHubReconcile, event_type
from hookd.sources import Source, api_url
from reconcile.http import Api
from reconcile.providers.base import (
    Item,
    ListAdapter,
    NewestFirst,
    Registration,
    Unrepairable,
    events_drift,
    glob_extends,
    is_2xx,
    reconciled,
    same_url,
    settings_of,
    shown_url,
)
from store.intake.events import NewEvent
from store.reconcile.audit import Acked

LINK_NEXT = re.compile(r'<([^>]+)>\s*;\s*rel="next"')


class Delivery(TypedDict, total=False):
    """One delivery of ``GET /{hook}/deliveries``, the fields read of it."""

    id: int
    guid: str | None
    delivered_at: str
    status_code: int


class HookConfig(TypedDict, total=False):
    url: str
    content_type: str


class LastResponse(TypedDict, total=False):
    code: int | None
    status: str
    message: str | None


class Hook(TypedDict, total=False):
    """A hook (``GET /repos/{o}/{r}/hooks/{id}``, ``/orgs/{o}/hooks/{id}``), or an App's
    ``{"config": …}``: the fields compared with the source's settings."""

    active: bool
    events: list[str]
    config: HookConfig
    last_response: LastResponse


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def app_jwt(app_id: int, private_key_pem: str, now: float | None = None) -> str:
    """An RS256 JWT for a GitHub App: issued a minute ago, valid nine minutes."""
    key = serialization.load_pem_private_key(private_key_pem.encode(), password=None)
    if not isinstance(key, rsa.RSAPrivateKey):
        raise ReconcileError("bad_app_key", "private_key is not an RSA key")
    issued = int(time.time() if now is None else now) - 60
    header = _b64url(json.dumps({"alg": "RS256", "typ": "JWT"}).encode())
    claims = _b64url(json.dumps({"iat": issued, "exp": issued + 600, "iss": str(app_id)}).encode())
    signing_input = f"{header}.{claims}".encode()
    signature = key.sign(signing_input, padding.PKCS1v15(), hashes.SHA256())
    return f"{header}.{claims}.{_b64url(signature)}"


def settings(source: Source) -> GitHubReconcile:
    return settings_of(source, GitHubReconcile)


def _epoch(iso: str) -> float:
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


class GitHubAdapter(ListAdapter):
    def __init__(self, source: Source, api: Api, meta: Mapping[str, str], now: float) -> None:
        super().__init__(source, api, meta, now)
        rc = settings(source)
        assert rc.hook is not None
        self._redeliver = rc.repair == "redeliver"
        hook = "app/hook" if rc.hook == "app" else rc.hook
        self._hook = f"{api_url(source.config)}/{hook}"
        self._base = f"{self._hook}/deliveries"

    @staticmethod
    def auth_headers(source: Source) -> dict[str, str]:
        rc = settings(source)
        if rc.hook == "app":
            assert rc.app_id is not None
            assert rc.private_key
            token = app_jwt(rc.app_id, rc.private_key)
        else:
            token = rc.token or ""
        return {
            "Authorization": f"Bearer {token}",
            "Accept": "application/vnd.github+json",
            "X-GitHub-Api-Version": "2022-11-28",
        }

    @property
    def redelivers(self) -> bool:
        return self._redeliver

    async def pages(self, since: float) -> AsyncIterator[list[Item]]:
        url: str | None = f"{self._base}?per_page=100"
        seen: set[str] = set()
        order = NewestFirst()
        while url is not None:
            response = await self.api.request("GET", url)
            deliveries: list[Delivery] = response.json()
            items: list[Item] = []
            times: list[float] = []
            for d in deliveries:
                when = _epoch(d["delivered_at"])
                order.saw(when)
                times.append(when)
                guid = d.get("guid")
                if when < since or not isinstance(guid, str):
                    continue
                if is_2xx(d.get("status_code")):
                    self.note_acked(
                        Acked(
                            guid, str(d["id"]), d["status_code"], datetime.fromtimestamp(when, UTC)
                        )
                    )
                if guid in seen:
                    continue
                seen.add(guid)
                items.append(Item(key=guid, time=when, ref=d["id"]))
            yield items
            # GitHub does not say in which order it lists: stop early only on a page
            # wholly before the window of an answer seen to be newest first.
            if order.ends(times, since):
                return
            match = LINK_NEXT.search(response.headers.get("link", ""))
            url = match.group(1) if match else None

    async def repair(self, item: Item, received_at: datetime) -> NewEvent:
        full = (await self.api.request("GET", f"{self._base}/{item.ref}")).json()
        request = full.get("request") or {}
        payload = request.get("payload")
        if payload is None:
            # GitHub's description allows a delivery without its payload: what was sent
            # cannot be stored as it was, and a made-up body is no event.
            raise Unrepairable(
                f"GitHub shows delivery {item.ref} without its payload: it cannot be "
                'stored from the API; repair = "redeliver" asks GitHub to send it again'
            )
        raw_headers = request.get("headers") or {}
        headers = {k.lower(): str(v) for k, v in raw_headers.items() if k.lower() in KEPT_HEADERS}
        body = json.dumps(payload, separators=(",", ":")).encode()
        event = full.get("event") or headers.get("x-github-event")
        said = payload.get("action") if isinstance(payload, dict) else None
        action = full.get("action") or said
        return reconciled(
            source=self.source.name,
            provider="github",
            key=item.key,
            type_=event_type(event, action),
            occurred=item.time,
            headers=headers,
            body=body,
            how=f"reconcile:github-api;delivery={item.ref}",
            received_at=received_at,
        )

    async def redeliver(self, item: Item) -> None:
        await self.api.request("POST", f"{self._base}/{item.ref}/attempts")

    async def registration(self) -> Registration:
        rc = settings(self.source)
        if not rc.check_registration:
            return Registration(unchecked="check_registration = false")
        if rc.hook == "app":
            # An App's hook has no active switch or event list of its own: its config.
            config = (await self.api.request("GET", f"{self._hook}/config")).json()
            return hook_registration(self.source, {"config": config}, app=True)
        return hook_registration(self.source, (await self.api.request("GET", self._hook)).json())


def sends_type(event: str, glob: str) -> bool:
    """Whether a hook sending ``event`` brings an event of a type ``glob`` matches: its
    types are the event's name, or the name, a dot and the action (``issues.opened``)."""
    return fnmatchcase(event, glob) or glob_extends(glob, f"{event}.")


def hook_registration(source: Source, hook: Hook, *, app: bool = False) -> Registration:
    """A hook document (``GET /repos/{o}/{r}/hooks/{id}``, ``/orgs/{o}/hooks/{id}``, or an
    App's ``{"config": …}``) against the source's ``public_url`` and ``expect_events``
    (without it, the types its handlers and destinations take)."""
    rc = settings(source)
    config = hook.get("config") or {}
    url = config.get("url")
    registered: dict[str, object] = {"url": url}
    problems: list[str] = []
    if not app:
        active, events = hook.get("active"), list(hook.get("events") or [])
        last = hook.get("last_response") or {}
        registered |= {
            "active": active,
            "events": events,
            "content_type": config.get("content_type"),
            "last_response": {k: last.get(k) for k in ("code", "status", "message")},
        }
        if active is not True:
            problems.append("the hook is inactive: GitHub sends it nothing")
        drift = events_drift(rc.expect_events, source, events, sends_type, "the hook")
        if drift:
            problems.append(drift)
        code = last.get("code")
        if isinstance(code, int) and not is_2xx(code):
            said = last.get("message") or last.get("status") or ""
            problems.append(
                f"its last delivery was answered {code}" + (f" ({said})" if said else "")
            )
    expected = source.config.public_url
    if expected is not None and not same_url(url, expected):
        problems.append(
            f"the hook posts to {shown_url(url)}, not to the source's public_url "
            f"{shown_url(expected)}"
        )
    return Registration(registered, tuple(problems))
