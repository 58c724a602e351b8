"""What a reconciliation adapter gives the poller."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from fnmatch import fnmatchcase
from typing import Any, TypeVar

import httpx

from hookd.providers.base import compact_json
from hookd.providers.reconciling import ReconcileConfig
from hookd.sources import Source
from reconcile.http import Api
from store.intake.events import NewEvent
from store.reconcile.audit import Acked
from store.status import EventOrigin

ConfigT = TypeVar("ConfigT", bound=ReconcileConfig)


def settings_of(source: Source, model: type[ConfigT]) -> ConfigT:
    """The source's ``[sources.reconcile]`` table as its provider's model (the loader
    validated it with that model)."""
    rc = source.config.reconcile
    assert isinstance(rc, model)
    return rc


@dataclass(frozen=True, slots=True)
class Item:
    """One thing the provider says it sent: its dedupe key and when."""

    key: str
    time: float
    ref: Any = None
    # The listed object as the API answered it (JSON), for ``repair``: what it holds
    # is the provider's, so an adapter narrows what it reads of it.
    obj: Mapping[str, object] | None = field(default=None, repr=False)
    # Why the run cannot judge it (the API left out its time, or its key): then
    # ``time`` means nothing. One whose key is stored is accounted for all the same;
    # any other leaves the run's window a hole with this reason (``unjudged``).
    doubt: str | None = None


def unjudged(doubt: str, key: str = "", ref: Any = None) -> Item:
    """An item listed that the run cannot judge, and why (``doubt``): without ``key``
    (the API left out what identifies it), it cannot even be looked up."""
    return Item(key=key, time=0.0, ref=ref, doubt=doubt)


class Unrepairable(Exception):
    """``repair`` cannot store the missing item as it was sent (the API does not give
    it whole): nothing is stored, and the run's window is left a hole for ``reason``."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class NewestFirst:
    """Whether a list answer has been newest first so far, as seen, not as assumed.

    An API that does not promise its order (GitHub's deliveries, GitLab's hook events)
    is read page after page until a page lies wholly before the window *and* every
    time read so far went down (at least once, never up): only then do the pages
    after it hold nothing younger. An answer in any other order is read to its end."""

    def __init__(self) -> None:
        self._last: float | None = None
        self._fell = False
        self._rose = False

    def saw(self, when: float) -> None:
        if self._last is not None:
            if when < self._last:
                self._fell = True
            elif when > self._last:
                self._rose = True
        self._last = when

    @property
    def seen(self) -> bool:
        """Newest first so far: it went down, and never up."""
        return self._fell and not self._rose

    def ends(self, page_times: Sequence[float], since: float) -> bool:
        """Whether the listing may stop after this page (its times, in order, already
        given to ``saw``): all of them before ``since``, and the order seen so far
        newest first."""
        return bool(page_times) and max(page_times) < since and self.seen


@dataclass(frozen=True, slots=True)
class Registration:
    """The provider's registration of the source's webhook endpoint, as read, and how it
    differs from what the source expects (``problems``: none when it is as expected).
    ``unchecked`` says why nothing was read (the API does not show it, the check is
    off, the endpoint cannot be told from others): then nothing is recorded.
    ``unread`` says why the check could not read it (the API unreachable, the token
    refused): recorded as such, neither as expected nor drift."""

    registered: dict[str, object] = field(default_factory=dict)
    problems: tuple[str, ...] = ()
    unchecked: str | None = None
    unread: str | None = None

    @property
    def ok(self) -> bool:
        return not self.problems and self.unchecked is None and self.unread is None


def same_url(registered: object, wanted: str) -> bool:
    """The same URL, a trailing slash of the path aside."""
    return isinstance(registered, str) and registered.rstrip("/") == wanted.rstrip("/")


def shown_url(url: object) -> str:
    """A URL for a problem's words and the logs: no query (a token may ride in it) and
    no user:password."""
    if not isinstance(url, str) or not url:
        return "(none)"
    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, TypeError, ValueError):
        return "(not a URL)"
    port = f":{parsed.port}" if parsed.port is not None else ""
    return f"{parsed.scheme}://{parsed.host}{port}{parsed.path}" + ("?…" if parsed.query else "")


def needed_types(source: Source) -> tuple[str, ...]:
    """The event types the source's handlers and destinations take, as their ``types``
    filters say (globs, in the order written, each once): what its registration must
    send when ``expect_events`` does not say. A filter without a positive pattern (none
    at all, or only ``!`` ones) takes every type the provider sends, and a
    ``[sources.forward]`` every event: neither asks for one in particular."""
    config = source.config
    needed: dict[str, None] = {}
    for taker in (*config.handlers, *config.destinations):
        for pattern in taker.types:
            if not pattern.startswith("!"):
                needed.setdefault(pattern)
    return tuple(needed)


def _glob_tokens(pattern: str) -> list[str]:
    """A glob as ``fnmatch`` reads it: ``*``, or a one-character pattern (a character,
    ``?``, or a ``[...]`` set; an unclosed ``[`` is the character itself)."""
    parts, i, n = [], 0, len(pattern)
    while i < n:
        c = pattern[i]
        if c == "[":
            j = i + 1
            if j < n and pattern[j] == "!":
                j += 1
            if j < n and pattern[j] == "]":
                j += 1
            while j < n and pattern[j] != "]":
                j += 1
            if j < n:
                parts.append(pattern[i : j + 1])
                i = j + 1
                continue
            parts.append("[[]")
        else:
            parts.append(c)
        i += 1
    return parts


def glob_extends(pattern: str, prefix: str) -> bool:
    """Whether ``pattern`` matches some type that begins with ``prefix`` (``prefix``
    itself included), as ``fnmatchcase`` reads it."""
    parts = _glob_tokens(pattern)

    def closure(states: set[int]) -> set[int]:
        out, todo = set(states), list(states)
        while todo:
            i = todo.pop()
            if i < len(parts) and parts[i] == "*" and i + 1 not in out:
                out.add(i + 1)
                todo.append(i + 1)
        return out

    states = closure({0})
    for c in prefix:
        moved = set()
        for i in states:
            if i < len(parts):
                if parts[i] == "*":
                    moved.add(i)
                elif fnmatchcase(c, parts[i]):
                    moved.add(i + 1)
        states = closure(moved)
        if not states:
            return False
    return True


def uncovered(
    needed: Sequence[str], sent: Iterable[object], covers: Callable[[str, str], bool]
) -> list[str]:
    """The ``needed`` type globs that no event the registration sends (``sent``; ``*``
    sends every one) can bring: ``covers(event, glob)`` says whether one can."""
    events = [e for e in sent if isinstance(e, str)]
    if "*" in events:
        return []
    return [glob for glob in needed if not any(covers(e, glob) for e in events)]


def events_drift(
    expected: Sequence[str],
    source: Source,
    sent: Sequence[object],
    covers: Callable[[str, str], bool],
    registration: str,
) -> str | None:
    """The drift line when the registration (``registration``: "the hook", "the
    endpoint") does not send what the source expects: ``expected`` (its
    ``expect_events``) when set, else the types its handlers and destinations take."""
    if expected:
        lacking = [e for e in expected if e not in sent and "*" not in sent]
        return f"{registration} does not send {', '.join(lacking)}" if lacking else None
    lacking = uncovered(needed_types(source), sent, covers)
    if not lacking:
        return None
    return (
        f"{registration} does not send {', '.join(lacking)}, which the source's "
        "handlers or destinations take"
    )


def is_2xx(code: object) -> bool:
    """A status code (an int, or the digits GitLab logs) of a 2xx answer."""
    if isinstance(code, str) and code.isdigit():
        code = int(code)
    return isinstance(code, int) and not isinstance(code, bool) and 200 <= code < 300


class ListAdapter(ABC):
    """A provider's list API, as the poller uses it.

    Named by ``Provider.reconcile.adapter`` ("module:Class") and built once per run.
    What differs between providers is declared here, not asked of the provider's
    name: how requests authenticate and are paced, whether a missing item can be
    sent again, and what the next run should start from."""

    def __init__(self, source: Source, api: Api, meta: Mapping[str, str], now: float) -> None:
        """``meta``: what the source's last successful run kept (``kept``); ``now``:
        when this run started, in unix seconds."""
        self.source = source
        self.api = api
        self._acked: dict[str, Acked] = {}

    @staticmethod
    @abstractmethod
    def auth_headers(source: Source) -> dict[str, str]:
        """The headers every request to the API carries (read again for each one)."""

    @classmethod
    def request_interval_s(cls, source: Source) -> float:
        """The least time between two requests, kept on our side; 0 leaves the pace
        to the provider's rate-limit answers."""
        return 0.0

    @property
    def redelivers(self) -> bool:
        """Whether a missing item is repaired by asking the provider to send its
        webhook again (``redeliver``) instead of storing it from the list (``repair``)."""
        return False

    def kept(self) -> dict[str, str]:
        """What the next run of the source is given as ``meta``, merged over the last."""
        return {}

    @abstractmethod
    def pages(self, since: float) -> AsyncIterator[list[Item]]:
        """The listed items from ``since`` (unix seconds) on, page by page, in the
        order the API answers (the run does not depend on it; an adapter stops early
        only where the order it has seen allows, see ``NewestFirst``). An item the
        adapter cannot judge is listed with its ``doubt``, never timed at random."""

    @abstractmethod
    async def repair(self, item: Item, received_at: datetime) -> NewEvent:
        """The event to store for a missing item (may call the API)."""

    def stored_json(
        self,
        item: Item,
        document: object,
        *,
        type_: str | None,
        occurred: float | None,
        how: str,
        received_at: datetime,
    ) -> NewEvent:
        """The event ``item`` names, its body ``document`` as compact JSON: for an API
        that lists an event as the JSON its webhook carries."""
        return reconciled(
            source=self.source.name,
            provider=self.source.provider,
            key=item.key,
            type_=type_,
            occurred=occurred,
            headers={"content-type": "application/json"},
            body=compact_json(document),
            how=how,
            received_at=received_at,
        )

    async def redeliver(self, item: Item) -> None:
        """Ask the provider to send the webhook again (when ``redelivers``)."""
        raise NotImplementedError(f"{self.source.provider} cannot be asked to resend an event")

    async def fetch_object(self, document: Any) -> Any:
        """The full object a (thin) event is about, as the API shows it now, for
        ``[sources.order] fetch = true``; the provider declares that its adapter can
        (``Reconciling.objects``). ``document``: the event's JSON body."""
        raise NotImplementedError(f"{self.source.provider} cannot fetch an event's object")

    # -- audits ------------------------------------------------------------------
    def note_acked(self, acked: Acked) -> None:
        """While paging: the provider says the receiver answered this delivery with a
        2xx. Adapters whose API shows what the receiver answered call it for every such
        delivery in the window, redeliveries of an item already listed included."""
        self._acked.setdefault(acked.key, acked)

    def take_acked(self) -> list[Acked]:
        """The acknowledged deliveries noted since the last call (none where the
        provider's API does not say what the receiver answered)."""
        taken, self._acked = list(self._acked.values()), {}
        return taken

    async def registration(self) -> Registration:
        """The provider's registration of the endpoint compared with the source's
        expectations; ``unchecked`` where the API does not show it (the default)."""
        return Registration(
            unchecked=f"{self.source.provider}'s API does not show the webhook registration"
        )


def reconciled(
    *,
    source: str,
    provider: str,
    key: str,
    type_: str | None,
    occurred: float | None,
    headers: dict[str, str],
    body: bytes,
    how: str,
    received_at: datetime,
) -> NewEvent:
    return NewEvent(
        source=source,
        provider=provider,
        dedupe_key=key,
        type=type_,
        origin=EventOrigin.RECONCILE,
        received_at=received_at,
        occurred_at=None if occurred is None else datetime.fromtimestamp(occurred, UTC),
        verified_with=how,
        headers=headers,
        body=body,
    )
