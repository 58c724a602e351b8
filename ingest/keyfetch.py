"""Verifying keys a sender publishes at a URL (an SNS signing certificate, Google's
JWKS), fetched for the receiver: bounded, cached, and fetched once however many
requests need them at the same time.

- One exchange has one deadline (``timeout_s``, connect to last byte) and one size
  limit (``max_bytes``, counted as the body streams in); no redirect is followed (a
  provider's ``locate`` vetted the URL, not where it might point).
- What a URL held is kept, parsed, for the ``Cache-Control: max-age`` its answer gave,
  or the provider's ``ttl_s``; either way between ``MIN_TTL_S`` and ``MAX_TTL_S``.
  At most ``max_entries`` URLs are kept: expired ones go first, then the least
  recently used.
- Requests that need one URL while it is fetched wait for that one fetch.
- A fetch that fails (no answer, a status other than 200, too big, not a key) is
  ``KeyUnavailable``: the receiver answers 503, never 2xx, so the sender retries. The
  failure is remembered for ``FAILURE_TTL_S``, so a dead host is not asked again by
  every request meanwhile. Failures are kept apart from the keys (in their own map of
  at most ``max_entries``): a failed fetch never evicts the keys of another URL, nor
  the keys already kept for its own.
- ``refresh`` fetches a URL again before its keys expire, for a request that names a
  key they lack (a sender that rotated its keys): at most once per URL per
  ``refresh_interval_s``, so requests naming keys that do not exist cannot make
  hookd ask the sender's host more often than that.

Outbound requests honour the usual proxy and CA environment variables
(``HTTPS_PROXY``, ``SSL_CERT_FILE``), as every hookd HTTP client does.
"""

from __future__ import annotations

import asyncio
import math
import re
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

import httpx

T = TypeVar("T")

MIN_TTL_S = 60.0
MAX_TTL_S = 86_400.0
FAILURE_TTL_S = 5.0
REFRESH_INTERVAL_S = 60.0
MAX_AGE_RE = re.compile(r"(?:^|[,\s])max-age=(\d{1,10})(?:$|[,\s])", re.IGNORECASE)


class KeyUnavailable(Exception):
    """The keys could not be had now; ``reason`` says why (no URL or body in it)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(slots=True)
class _Entry(Generic[T]):
    """Keys a URL held: until when they are kept, and when they were fetched."""

    expires: float
    value: T
    fetched: float


@dataclass(slots=True)
class _Failure:
    expires: float
    reason: str


def max_age(cache_control: str | None) -> float | None:
    """The ``max-age`` of a ``Cache-Control`` header, None without one (or with
    ``no-store``/``no-cache``, which mean: do not keep it)."""
    if cache_control is None:
        return None
    if "no-store" in cache_control.lower() or "no-cache" in cache_control.lower():
        return 0.0
    found = MAX_AGE_RE.search(cache_control)
    return float(found.group(1)) if found else None


class KeyFetcher:
    """Fetches and keeps what key URLs hold (see the module's notes). One per process:
    the receiver's."""

    def __init__(
        self,
        *,
        timeout_s: float = 5.0,
        max_bytes: int = 256 * 1024,
        max_entries: int = 256,
        failure_ttl_s: float = FAILURE_TTL_S,
        refresh_interval_s: float = REFRESH_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.timeout_s = timeout_s
        self.max_bytes = max_bytes
        self.max_entries = max_entries
        self.failure_ttl_s = failure_ttl_s
        self.refresh_interval_s = refresh_interval_s
        self._clock = clock
        self._transport = transport
        self._client: httpx.AsyncClient | None = None
        self._cache: OrderedDict[str, _Entry[object]] = OrderedDict()
        self._failures: OrderedDict[str, _Failure] = OrderedDict()
        # When each URL was last fetched by ``refresh`` (bounded like the cache).
        self._refreshed: OrderedDict[str, float] = OrderedDict()
        self._inflight: dict[str, asyncio.Future[object]] = {}

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            self._client = httpx.AsyncClient(
                timeout=self.timeout_s,
                follow_redirects=False,
                transport=self._transport,
                headers={"user-agent": "hookd"},
            )
        return self._client

    async def close(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    async def keys(self, url: str, parse: Callable[[bytes], T], ttl_s: float) -> T:
        """What ``url`` holds, parsed: from the cache, from a fetch under way, or
        fetched now; ``KeyUnavailable`` when it cannot be had."""
        now = self._clock()
        entry = self._cache.get(url)
        if entry is not None and entry.expires > now:
            self._cache.move_to_end(url)  # in use: the last to be evicted
            return entry.value  # type: ignore[return-value] # stored by this parse
        failure = self._failures.get(url)
        if failure is not None and failure.expires > now:
            raise KeyUnavailable(failure.reason)
        return await self._shared(url, parse, ttl_s)

    async def refresh(self, url: str, parse: Callable[[bytes], T], ttl_s: float) -> T | None:
        """What ``url`` holds now, fetched again although its keys are still kept (a
        request names a key they lack); or None, the keys kept being as fresh as they
        may be, when ``url`` was fetched less than ``refresh_interval_s`` ago.
        A fetch under way is waited for, not repeated. ``KeyUnavailable`` when the
        fetch fails; the keys kept stay kept."""
        if url in self._inflight:
            return await self._shared(url, parse, ttl_s)
        now = self._clock()
        entry = self._cache.get(url)
        last = max(self._refreshed.get(url, -math.inf), entry.fetched if entry else -math.inf)
        if now - last < self.refresh_interval_s:
            return None
        self._refreshed[url] = now
        self._refreshed.move_to_end(url)
        while len(self._refreshed) > self.max_entries:
            self._refreshed.popitem(last=False)
        return await self._shared(url, parse, ttl_s)

    async def _shared(self, url: str, parse: Callable[[bytes], T], ttl_s: float) -> T:
        """``url`` fetched now, or by the fetch of it already under way."""
        pending = self._inflight.get(url)
        if pending is not None:
            shared: object = await asyncio.shield(pending)
            return shared  # type: ignore[return-value] # stored by this parse
        pending = asyncio.get_running_loop().create_future()
        self._inflight[url] = pending
        try:
            value: object = await self._fetch(url, parse, ttl_s)
        except KeyUnavailable as exc:
            if self.failure_ttl_s > 0:
                self._failed(url, exc.reason)
            pending.set_exception(exc)
            pending.exception()  # retrieved: waiters may be none
            raise
        except BaseException:
            pending.set_exception(KeyUnavailable("fetch_cancelled"))
            pending.exception()
            raise
        finally:
            self._inflight.pop(url, None)
        pending.set_result(value)
        return value  # type: ignore[return-value]

    def _keep(self, url: str, entry: _Entry[object]) -> None:
        self._failures.pop(url, None)
        self._cache[url] = entry
        self._cache.move_to_end(url)
        if len(self._cache) > self.max_entries:
            now = self._clock()
            for stale in [u for u, e in self._cache.items() if e.expires <= now]:
                del self._cache[stale]
        while len(self._cache) > self.max_entries:
            self._cache.popitem(last=False)

    def _failed(self, url: str, reason: str) -> None:
        """Remembered apart from the keys: no URL's keys are evicted for it."""
        self._failures[url] = _Failure(self._clock() + self.failure_ttl_s, reason)
        self._failures.move_to_end(url)
        while len(self._failures) > self.max_entries:
            self._failures.popitem(last=False)

    async def _fetch(self, url: str, parse: Callable[[bytes], T], ttl_s: float) -> T:
        body, cache_control = await self.get(url)
        try:
            value = parse(body)
        except ValueError:
            raise KeyUnavailable("not_a_key") from None
        given = max_age(cache_control)
        ttl = ttl_s if given is None else given
        now = self._clock()
        if ttl > 0:
            self._keep(url, _Entry(now + min(max(ttl, MIN_TTL_S), MAX_TTL_S), value, now))
        else:  # not to be kept: nor are the keys kept before
            self._cache.pop(url, None)
            self._failures.pop(url, None)
        return value

    async def get(self, url: str) -> tuple[bytes, str | None]:
        """One bounded GET: (body, its Cache-Control) of a 200 answer, else
        ``KeyUnavailable``."""
        try:
            async with asyncio.timeout(self.timeout_s):
                async with self._http().stream("GET", url) as response:
                    if response.status_code != httpx.codes.OK:
                        raise KeyUnavailable(f"status_{response.status_code}")
                    declared = response.headers.get("content-length", "")
                    if declared.isdigit() and int(declared) > self.max_bytes:
                        raise KeyUnavailable("too_large")
                    chunks: list[bytes] = []
                    size = 0
                    async for chunk in response.aiter_bytes():
                        size += len(chunk)
                        if size > self.max_bytes:
                            raise KeyUnavailable("too_large")
                        chunks.append(chunk)
                    return b"".join(chunks), response.headers.get("cache-control")
        except TimeoutError:
            raise KeyUnavailable("timeout") from None
        except httpx.HTTPError as exc:
            raise KeyUnavailable(type(exc).__name__) from None
