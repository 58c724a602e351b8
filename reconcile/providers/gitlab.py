"""GitLab project webhook events: ``GET /projects/:id/hooks/:hook_id/events``.

GitLab lists a hook's events (its delivery log) of the past seven days, twenty a
page at most (``per_page``), paged by number (``page``; the next one is in
``X-Next-Page``, empty on the last). It answers newest first but does not promise
it: the pages are read on until one lies wholly before the window of an answer seen
to be newest first so far, else to the last. An event logged without ``created_at``
(GitLab's own example has none) cannot be placed in time: stored, it is accounted
for; missing, it is neither repaired nor passed over, and the run's window is left
a hole that says why. Each event carries the request
GitLab sent (``request_headers``, ``request_data``). A resend keeps the event's
``Idempotency-Key`` and is logged as an event of its own, so items are grouped by
that key, as the receiver dedupes on it.

A missing event is repaired by storing the logged request (``repair = "fetch"``)
or by asking GitLab to send it again (``"redeliver"``: ``POST …/events/:id/resend``,
which GitLab allows five times a minute per hook and user: resends are paced to
``resends_per_minute``, and pages are cut so that one page's resends fit in the
run's lease). Either way the body is GitLab's log of it, in which GitLab has
replaced e-mail addresses with ``[REDACTED]``.

Each logged event says what the receiver answered (``response_status``: the code,
or ``internal error`` when there was no answer): one answered with a 2xx is noted
for the ack audit when it carries an ``Idempotency-Key`` (GitLab 17.4+), the key the
receiver stored it under. A body hash (older GitLab) is not noted: the log's body
is redacted, so its hash need not be the one the receiver computed.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from collections.abc import AsyncIterator, Mapping
from datetime import UTC, datetime
from typing import TypedDict
from urllib.parse import quote

from hookd.providers.gitlab import (
    EVENT_HEADER,
    IDEMPOTENCY_HEADER,
    KEPT_HEADERS,
    GitLabReconcile,
    event_type,
)
from hookd.providers.gitlab import occurred_at as payload_time
from hookd.providers.rfc3339 import parse_iso8601
from hookd.sources import Source, api_url
from reconcile.http import Api
from reconcile.providers.base import (
    Item,
    ListAdapter,
    NewestFirst,
    is_2xx,
    reconciled,
    settings_of,
)
from store.intake.events import NewEvent
from store.reconcile.audit import Acked

# "The past 7 days from start date": GitLab counts from the start of the day seven
# days ago; a window within seven days is always inside it.
RETENTION_S = 7 * 86_400
PER_PAGE = 20
# A page's resends must finish well within the run's lease (renewed per page).
RESEND_BUDGET_S = 45.0
OVERSIZE = {"oversize": True}


class HookEvent(TypedDict, total=False):
    """One logged event of ``GET …/hooks/:hook_id/events``, the fields read of it (its
    ``request_data`` is the body GitLab sent, or ``OVERSIZE``)."""

    id: int
    created_at: str
    request_headers: dict[str, str]
    request_data: object
    response_status: str | int


def settings(source: Source) -> GitLabReconcile:
    return settings_of(source, GitLabReconcile)


def hook_events_url(source: Source) -> str:
    rc = settings(source)
    assert rc.project is not None
    assert rc.hook_id is not None
    project = quote(str(rc.project), safe="")
    return f"{api_url(source.config)}/projects/{project}/hooks/{rc.hook_id}/events"


def lowered(headers: object) -> dict[str, str]:
    if not isinstance(headers, dict):
        return {}
    return {str(k).lower(): str(v) for k, v in headers.items()}


def logged_body(entry: Mapping[str, object]) -> bytes:
    """The request body as GitLab sends it (compact JSON, UTF-8 as it is), rebuilt
    from the logged ``request_data``."""
    data = entry.get("request_data")
    return json.dumps(data, separators=(",", ":"), ensure_ascii=False).encode()


def dedupe_key(entry: HookEvent) -> str:
    """What the receiver keys the logged delivery on: its ``Idempotency-Key``, or
    (GitLab before 17.4) the SHA-256 of its body, which only matches while the log
    holds the body unchanged (GitLab redacts e-mail addresses in it)."""
    key = lowered(entry.get("request_headers")).get(IDEMPOTENCY_HEADER)
    if key:
        return key
    return "sha256:" + hashlib.sha256(logged_body(entry)).hexdigest()


class GitLabAdapter(ListAdapter):
    def __init__(self, source: Source, api: Api, meta: Mapping[str, str], now: float) -> None:
        super().__init__(source, api, meta, now)
        rc = settings(source)
        self._url = hook_events_url(source)
        self._now = now
        self._oldest_allowed = now - RETENTION_S + 60
        self._redeliver = rc.repair == "redeliver"
        self._resend_gap_s = 60.0 / rc.resends_per_minute
        self._next_resend = 0.0
        # In redeliver mode, at most this many items a page (each may be resent).
        self._chunk = PER_PAGE
        if self._redeliver:
            self._chunk = max(1, min(PER_PAGE, int(RESEND_BUDGET_S / self._resend_gap_s)))

    @staticmethod
    def auth_headers(source: Source) -> dict[str, str]:
        return {"PRIVATE-TOKEN": settings(source).token or ""}

    @property
    def redelivers(self) -> bool:
        return self._redeliver

    async def pages(self, since: float) -> AsyncIterator[list[Item]]:
        start = max(since, self._oldest_allowed)
        page = 1
        seen: set[str] = set()
        order = NewestFirst()
        while True:
            response = await self.api.request(
                "GET", self._url, params={"per_page": PER_PAGE, "page": page}
            )
            logged: list[HookEvent] = response.json()
            items: list[Item] = []
            times: list[float] = []
            for entry in logged:
                key = dedupe_key(entry)
                created = parse_iso8601(entry.get("created_at"))
                if created is None:
                    # GitLab's own example of this list has no created_at: when it was
                    # sent is not known, so it is not judged by time (see ``Item.doubt``).
                    if key not in seen:
                        seen.add(key)
                        items.append(
                            Item(
                                key=key,
                                time=0.0,
                                ref=entry.get("id"),
                                obj=entry,
                                doubt="GitLab logged a hook event without created_at",
                            )
                        )
                    continue
                when = created.timestamp()
                order.saw(when)
                times.append(when)
                if when < start:
                    continue
                status = entry.get("response_status")
                if is_2xx(status) and not key.startswith("sha256:"):
                    at = datetime.fromtimestamp(when, UTC)
                    self.note_acked(Acked(key, str(entry.get("id")), int(str(status)), at))
                if key in seen:
                    continue
                seen.add(key)
                items.append(Item(key=key, time=when, ref=entry.get("id"), obj=entry))
            for first in range(0, len(items), self._chunk):
                yield items[first : first + self._chunk]
            if not items:
                yield []
            # GitLab does not say in which order it lists: stop early only on a page
            # wholly before the window of an answer seen to be newest first.
            if order.ends(times, start):
                return
            following = response.headers.get("x-next-page", "").strip()
            if not following.isdigit():
                return
            page = int(following)

    async def repair(self, item: Item, received_at: datetime) -> NewEvent:
        entry = item.obj or {}
        headers = lowered(entry.get("request_headers"))
        kept = {k: v for k, v in headers.items() if k in KEPT_HEADERS}
        data = entry.get("request_data")
        payload = data if isinstance(data, dict) else {}
        how = f"reconcile:gitlab-api;hook_event={item.ref}"
        if data == OVERSIZE:
            how += ";oversize"
        occurred = payload_time(payload)
        return reconciled(
            source=self.source.name,
            provider="gitlab",
            key=item.key,
            type_=event_type(headers.get(EVENT_HEADER), payload),
            occurred=None if occurred is None else occurred.timestamp(),
            headers=kept,
            body=logged_body(entry),
            how=how,
            received_at=received_at,
        )

    async def redeliver(self, item: Item) -> None:
        wait = self._next_resend - time.monotonic()
        if wait > 0:
            await asyncio.sleep(wait)
        self._next_resend = time.monotonic() + self._resend_gap_s
        await self.api.request("POST", f"{self._url}/{item.ref}/resend")
