"""Destinations: signed HTTP deliveries of a source's events, each a handler in the ledger.

``Router`` holds every source's destinations and the filters of its handlers, and
makes one delivery at a time (``deliver``): a paused destination or an open circuit
breaker puts it off (no attempt used), the rate and concurrency limits make it wait
or put it off, and its outcome moves the breaker. What the processor records comes
back as an ``Outcome``.

The breaker (``store.destinations``): ``failures`` in a row across every process, or
a failure rate in this process's recent deliveries, opens it for ``cooldown_s``; the
deliveries due meanwhile are put off until then. After it, one delivery takes the
probe (half-open) and the others park; the probe's success closes the breaker and
unparks them, its failure opens it again. Only failures a retry could mend count: a
4xx answer shows the destination is up (it refused that one event).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import inspect
import json
import logging
import random
import re
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from functools import cache
from typing import Any
from urllib.parse import quote, urljoin, urlsplit, urlunsplit

import httpx
from prometheus_client import Counter, Histogram
from sqlalchemy.ext.asyncio import AsyncEngine

from hookd import tracing
from hookd.backoff import full_jitter
from hookd.errors import ConfigError, PermanentError
from hookd.event import Event, idempotency_key
from hookd.providers.standard import standard_headers
from hookd.routing import FORWARD, DestinationConfig
from hookd.sources import Source, Sources
from processing.deadlines import DeadlineExceeded, off_loop, within
from processing.filters import Document, Selector
from processing.limits import Limits, Unavailable, Wait
from store import destinations as state
from store.destinations import Blocker, BreakerRow, PauseRow
from store.status import BreakerState

log = logging.getLogger("hookd.processing")

# hookd_destination_deliveries_total's outcome label.
DELIVERED, FAILED, SKIPPED, DEFERRED = "delivered", "failed", "skipped", "deferred"
DELIVERY_OUTCOMES = (DELIVERED, FAILED, SKIPPED, DEFERRED)
DELIVERIES = Counter(
    "hookd_destination_deliveries_total",
    "Deliveries per destination: delivered, failed (an attempt used), skipped by the "
    "filter, deferred (paused, rate or concurrency limit, breaker: no attempt used).",
    ["source", "destination", "outcome"],
)
DELIVERY_SECONDS = Histogram(
    "hookd_destination_delivery_seconds",
    "Time of each delivery's HTTP request, answered or not.",
    ["source", "destination"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0),
)
HANDLER_SKIPS = Counter(
    "hookd_handler_skips_total",
    "Handlers not run for an event because their filter did not select it.",
    ["source"],
)
# How long a delivery may wait for its rate or concurrency limit before it is put off.
LIMIT_WAIT_S = 2.0
# Pauses and breakers are read again at most this often per process (and whenever a
# delivery changes a breaker here).
REFRESH_S = 0.25
# A held-back delivery is put off until the cool-down ends, spread over this much more.
SPREAD_S = 1.0
# A probe's claim on a half-open breaker outlasts its request by this much.
PROBE_SLACK_S = 10.0
Transform = Callable[[Event], Any]


def _labels(source: str, destinations: Iterable[str]) -> None:
    for name in destinations:
        for outcome in DELIVERY_OUTCOMES:
            DELIVERIES.labels(source, name, outcome)
        DELIVERY_SECONDS.labels(source, name)


@cache
def _deliveries(source: str, destination: str, outcome: str) -> Counter:
    return DELIVERIES.labels(source, destination, outcome)


@cache
def _seconds(source: str, destination: str) -> Histogram:
    return DELIVERY_SECONDS.labels(source, destination)


def import_transform(ref: str) -> Transform:
    module_name, _, attr = ref.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"transform {ref!r}: cannot import {module_name}: {exc}") from None
    func = getattr(module, attr, None)
    if not callable(func):
        raise ConfigError(f"transform {ref!r}: {module_name} has no function {attr!r}")
    transform: Transform = func
    return transform


def destination_configs(source: Source) -> list[DestinationConfig]:
    """The source's destinations: ``[sources.forward]`` (as ``forward``), then the others."""
    out = []
    forward = source.config.forward
    if forward is not None:
        out.append(
            DestinationConfig(
                name=FORWARD,
                url=forward.url,
                allow_insecure=forward.allow_insecure,
                secret=forward.secret,
                timeout_s=forward.timeout_s,
            )
        )
    return [*out, *source.config.destinations]


def _body_of(value: object) -> bytes:
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode()
    return json.dumps(value, separators=(",", ":")).encode()


# Headers hookd sets on every delivery: a transform's own (in any letter case) are dropped,
# so that none is sent twice.
RESERVED = frozenset(
    {
        "webhook-id",
        "webhook-timestamp",
        "webhook-signature",
        "idempotency-key",
        "x-hookd-event-type",
        "x-hookd-source",
    }
)


# A delivery's whole exchange may take its timeout_s plus this before it is cut off.
EXCHANGE_SLACK_S = 0.1
# The most of a destination's answer read. Nothing of its body is kept (the ledger and
# the attempt's history hold the status code, in a one-line error); so much is read
# only so that a short answer ends its exchange and its connection can be used again.
# Past it, reading stops and the connection is closed: memory stays bounded whatever
# the destination sends (plus what one network read brings, 64 KiB at most).
ANSWER_READ_BYTES = 4096
# The longest redirect target an error names (it is cut, with an ellipsis, past this).
LOCATION_CHARS = 200

# A header value sent as it is: visible ASCII and inner spaces, not starting with the
# marker of an encoded one. Anything else is sent as an RFC 8187 ext-value.
_PLAIN_VALUE = re.compile(r"[!-~]([ -~]*[!-~])?")
_ENCODED = "UTF-8''"
# RFC 8187 attr-char, besides the letters, digits and "-._~" that quote() keeps.
_ATTR_CHARS = "!#$&+^`|"
# RFC 9110 token: what a header name is.
_TOKEN = re.compile(r"[A-Za-z0-9!#$%&'*+.^_`|~-]+")
# A header value HTTP/1.1 (h11) sends: visible ASCII, inner spaces and tabs.
_FIELD_VALUE = re.compile(r"([!-~]+([ \t]+[!-~]+)*)?")


def header_value(text: str) -> str:
    """``text`` as a header value that always encodes: as it is when it is visible
    ASCII (inner spaces allowed); otherwise RFC 8187's ``UTF-8''`` and the text in
    UTF-8, percent-encoded (RFC 3986) but for RFC 8187's attr-chars. A plain value
    that starts with ``UTF-8''`` (in any case) is encoded too, so that a value is
    decoded exactly when it starts with that marker."""
    if _PLAIN_VALUE.fullmatch(text) and text[: len(_ENCODED)].upper() != _ENCODED:
        return text
    return _ENCODED + quote(text, safe=_ATTR_CHARS, encoding="utf-8")


def _shown_location(location: str, url: str) -> str:
    """Where a redirect points, absolute, without what may be secret in a URL (user
    info, query, fragment), on one line of printable ASCII and at most
    ``LOCATION_CHARS`` long."""
    try:
        parts = urlsplit(urljoin(url, location.strip()))
        host = parts.hostname or ""
        if ":" in host:
            host = f"[{host}]"
        if parts.port is not None:
            host = f"{host}:{parts.port}"
        shown = urlunsplit((parts.scheme, host, parts.path, "", ""))
    except ValueError:
        shown = location
    shown = quote(shown, safe="!#$&'()*+,/:;=?@[]~%")
    return shown if len(shown) <= LOCATION_CHARS else shown[: LOCATION_CHARS - 1] + "…"


def _checked_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """A transform's headers, each one a name and value HTTP can carry; otherwise the
    transform is wrong (``PermanentError``): no retry would send them. The ones hookd
    sets itself are dropped in ``send`` whatever their value."""
    for name, value in headers.items():
        if name.lower() in RESERVED:
            continue
        if not _TOKEN.fullmatch(name):
            raise PermanentError(
                "transform_invalid", f"a transform's header name {name!r} is not an HTTP token"
            )
        if not _FIELD_VALUE.fullmatch(value):
            raise PermanentError(
                "transform_invalid",
                f"a transform's header {name!r} is not visible ASCII text (no control "
                "characters, no space at either end): encode its value",
            )
    return dict(headers)


class Destination:
    """One destination of one source: what to send, signed, and where."""

    def __init__(
        self,
        source: Source,
        config: DestinationConfig,
        client: httpx.AsyncClient,
        transform: Transform | None,
    ) -> None:
        self.source = source.name
        self.name = config.name
        self.config = config
        self.selector = Selector.of(config)
        self.max_attempts = config.max_attempts or source.config.max_attempts
        self.key = f"{source.name}/{config.name}"
        self._client = client
        self._transform = transform

    async def prepare(self, event: Event) -> tuple[bytes, dict[str, str]]:
        """What to send: the event's body and no extra header, or what the transform
        makes of it. A transform's failure is the transform's, not the destination's."""
        if self._transform is None:
            return event.body, {}
        # Under the destination's timeout, counted from outside: a transform that hangs
        # ends the attempt at its limit; a blocking one runs in a thread, never on the
        # event loop that every other event's work shares.
        timeout_s = self.config.timeout_s
        transform = self._transform
        try:
            if inspect.iscoroutinefunction(transform):
                result = await within(transform(event), timeout_s, what="transform")
            else:
                result = await within(off_loop(transform, event), timeout_s, what="transform")
                if inspect.isawaitable(result):
                    result = await within(result, timeout_s, what="transform")
        except DeadlineExceeded:
            raise DeadlineExceeded(timeout_s, "the transform") from None
        if not (isinstance(result, tuple) and len(result) == 2):
            raise PermanentError("transform_invalid", "a transform returns (body, headers)")
        body, headers = result
        if not isinstance(headers, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in headers.items()
        ):
            raise PermanentError("transform_invalid", "a transform's headers map str to str")
        checked = _checked_headers(headers)
        try:
            return _body_of(body), checked
        except (TypeError, ValueError):
            raise PermanentError(
                "transform_invalid", "a transform's body is bytes, str or JSON-serialisable"
            ) from None

    async def send(self, event: Event, prepared: tuple[bytes, dict[str, str]]) -> None:
        """POST what ``prepare`` made of the event, signed with Standard Webhooks v1:
        ``webhook-id`` is the hookd event id, so the destination can drop a repeat. 5xx,
        429 and transport errors retry; any other 4xx, and any 3xx (a redirect is not
        followed: it could take the signed payload elsewhere), is permanent. At most
        ``ANSWER_READ_BYTES`` of the answer are read."""
        body, extra = prepared
        headers = {k: v for k, v in extra.items() if k.lower() not in RESERVED}
        signed = standard_headers(self.config.secret, body, event.id, int(time.time()))
        if any(k.lower() == "content-type" for k in headers):
            signed.pop("Content-Type", None)
        headers.update(signed)
        headers["Idempotency-Key"] = event.idempotency_key
        if event.type:
            # The type comes from the provider's payload: any text, sent so it encodes.
            headers["X-Hookd-Event-Type"] = header_value(event.type)
        headers["X-Hookd-Source"] = event.source  # a source name: [a-z0-9-]
        attributes = {"hookd.event_id": event.id, "hookd.destination": self.name}
        with tracing.span("hookd.deliver", attributes) as current:
            tracing.inject(headers)  # W3C traceparent, when tracing is on
            # httpx's timeout bounds each connect, write and read; ``within`` bounds the
            # exchange as a whole, so a peer that trickles its answer ends at timeout_s
            # (plus a little slack, so that a single slow phase is still named by httpx).
            timeout_s = self.config.timeout_s
            status, location = await within(
                self._exchange(body, headers, timeout_s),
                timeout_s + EXCHANGE_SLACK_S,
                what="delivery",
            )
            tracing.annotate(current, {"http.response.status_code": status})
        if status >= 500 or status == 429:
            raise RuntimeError(f"destination answered {status}")
        if status >= 400:
            # [sources.forward] keeps the reason code it always had.
            reason = "forward_rejected" if self.name == FORWARD else "destination_rejected"
            raise PermanentError(reason, f"destination answered {status}")
        if status >= 300:
            # As a 4xx: the destination is up and gave its answer to this request, which
            # sending it again would not change; the configured URL has to.
            where = (
                f"redirect to {_shown_location(location, self.config.url)} not followed"
                if location
                else "redirect without a Location not followed"
            )
            raise PermanentError(
                "destination_redirected",
                f"destination answered {status}: {where}: configure the final URL",
            )

    async def _exchange(
        self, body: bytes, headers: dict[str, str], timeout_s: float
    ) -> tuple[int, str | None]:
        """POST, and read at most ``ANSWER_READ_BYTES`` of the answer (raw: a compressed
        answer is not inflated); past them the connection is closed, unread. Redirects
        are never followed, whatever the client's default. The status and Location."""
        async with self._client.stream(
            "POST",
            self.config.url,
            content=body,
            headers=headers,
            timeout=timeout_s,
            follow_redirects=False,
        ) as response:
            read = 0
            async for chunk in response.aiter_raw():
                read += len(chunk)
                if read > ANSWER_READ_BYTES:
                    break
            return response.status_code, response.headers.get("location")


@dataclass(frozen=True, slots=True)
class Outcome:
    """One destination's part of an event's pass."""

    name: str
    outcome: str  # DELIVERED, FAILED, SKIPPED or DEFERRED
    error: str | None = None
    error_type: str | None = None
    permanent: bool = False
    retry_in_s: float | None = None  # failed: when its retry policy would try again
    max_attempts: int | None = None  # failed: its attempt limit
    until: datetime | None = None  # deferred until then
    blocker: Blocker | None = None  # deferred: parked until this ends


@dataclass
class _Recent:
    """A destination's recent deliveries in this process: (when, failed)."""

    window_s: float
    seen: deque[tuple[float, bool]] = field(default_factory=deque)

    def add(self, failed: bool) -> tuple[int, int]:
        now = time.monotonic()
        self.seen.append((now, failed))
        while self.seen and self.seen[0][0] < now - self.window_s:
            self.seen.popleft()
        return len(self.seen), sum(f for _, f in self.seen)


class Router:
    """Every source's destinations and handler filters, and the shared state they obey."""

    def __init__(
        self,
        sources: Sources,
        client: httpx.AsyncClient,
        limits: Limits,
        *,
        retry_base_s: float = 1.0,
        retry_cap_s: float = 600.0,
        rng: random.Random | None = None,
    ) -> None:
        self.destinations: dict[str, list[Destination]] = {}
        self.handler_selectors: dict[str, dict[str, Selector]] = {}
        for source in sources:
            made = []
            for config in destination_configs(source):
                transform = import_transform(config.transform) if config.transform else None
                made.append(Destination(source, config, client, transform))
            self.destinations[source.name] = made
            _labels(source.name, [d.name for d in made])
            HANDLER_SKIPS.labels(source.name)
            selectors = {}
            for entry in source.config.handlers:
                selector = Selector.of(entry)
                if selector is not None:
                    selectors[entry.ref] = selector
            self.handler_selectors[source.name] = selectors
        self._limits = limits
        self._retry_base_s = retry_base_s
        self._retry_cap_s = retry_cap_s
        self._rng = rng or random.Random()  # noqa: S311 - jitter, not secrecy
        self._pauses: dict[tuple[str, str], PauseRow] = {}
        self._breakers: dict[tuple[str, str], BreakerRow] = {}
        self._recent: dict[tuple[str, str], _Recent] = {}
        self._read_at = -float("inf")

    def attempt_limit(self, source: str) -> int:
        """The most attempts any of the source's destinations may use (0: none)."""
        return max((d.max_attempts for d in self.destinations.get(source, ())), default=0)

    def has_destinations(self, source: str) -> bool:
        return bool(self.destinations.get(source))

    def handler_selects(self, source: str, ref: str, event: Event, document: Document) -> bool:
        selector = self.handler_selectors.get(source, {}).get(ref)
        if selector is None or selector.selects(event, document):
            return True
        HANDLER_SKIPS.labels(source).inc()
        return False

    async def refresh(self, engine: AsyncEngine, *, force: bool = False) -> None:
        """Read the pauses and breakers again (at most every ``REFRESH_S``)."""
        if not any(self.destinations.values()):
            return
        now = time.monotonic()
        if not force and now - self._read_at < REFRESH_S:
            return
        async with engine.connect() as conn:
            self._pauses = await state.all_pauses(conn)
            self._breakers = await state.all_breakers(conn)
        self._read_at = now

    async def deliver_all(
        self,
        engine: AsyncEngine,
        event: Event,
        *,
        attempt: int,
        finished: set[str],
        document: Document,
        owner: str,
        done: list[str],
    ) -> list[Outcome]:
        """Every destination of the event's source not in its ledger yet, at once. Each
        one delivered is appended to ``done`` as soon as it is (the processor records
        ``done`` even when the pass is cut short)."""
        todo = [d for d in self.destinations.get(event.source, ()) if d.name not in finished]
        if not todo:
            return []
        return list(
            await asyncio.gather(
                *(
                    self._one(
                        engine, d, event, attempt=attempt, document=document, owner=owner, done=done
                    )
                    for d in todo
                )
            )
        )

    async def _one(
        self,
        engine: AsyncEngine,
        destination: Destination,
        event: Event,
        *,
        attempt: int,
        document: Document,
        owner: str,
        done: list[str],
    ) -> Outcome:
        outcome = await self._deliver(
            engine, destination, event, attempt=attempt, document=document, owner=owner
        )
        if outcome.outcome == DELIVERED:
            done.append(destination.name)
        _deliveries(destination.source, destination.name, outcome.outcome).inc()
        return outcome

    def _deferred(self, name: str, until: datetime | None, blocker: Blocker | None) -> Outcome:
        return Outcome(name, DEFERRED, until=until, blocker=blocker)

    async def _deliver(  # noqa: PLR0911 - one return per way a delivery ends
        self,
        engine: AsyncEngine,
        d: Destination,
        event: Event,
        *,
        attempt: int,
        document: Document,
        owner: str,
    ) -> Outcome:
        if d.selector is not None and not d.selector.selects(event, document):
            return Outcome(d.name, SKIPPED)
        key = (d.source, d.name)
        pause = self._pauses.get(key)
        if pause is not None and pause.paused:
            return self._deferred(d.name, None, Blocker("paused", d.source, d.name))
        breaker = d.config.breaker
        row = self._breakers.get(key) if breaker.enabled else None
        probe = False
        now = datetime.now(UTC)
        if row is not None and row.state != BreakerState.CLOSED:
            if row.retry_at is not None and row.retry_at > now:
                if row.state == BreakerState.OPEN:
                    spread = timedelta(seconds=self._rng.uniform(0, SPREAD_S))
                    return self._deferred(d.name, row.retry_at + spread, None)
                return self._deferred(d.name, None, Blocker("breaker", d.source, d.name))
            probe = True
        # The transform first: its failure is recorded as the destination's, but it
        # sent nothing, so it neither uses a limit's grant or the probe nor moves the
        # breaker (a broken transform is not a destination that is down).
        event = replace(event, idempotency_key=idempotency_key(event.id, d.name))
        try:
            prepared = await d.prepare(event)
        except Exception as exc:  # a transform's failure is retried, a PermanentError not
            return self._failed(d, exc, attempt)
        limits = self._limits
        try:
            slot = (
                limits.slot(d.key, d.config.concurrency, d.config.timeout_s, LIMIT_WAIT_S)
                if d.config.concurrency
                else _no_slot()
            )
            rate = (
                limits.rate(d.key, d.config.rate_per_s, d.config.timeout_s, LIMIT_WAIT_S)
                if d.config.rate_per_s
                else _no_slot()
            )
            async with slot as waited:
                if waited is not None:
                    return self._deferred(d.name, _after(waited), None)
                async with rate as limited:
                    if limited is not None:
                        return self._deferred(d.name, _after(limited), None)
                    if probe and not await self._take_probe(engine, d, owner):
                        return self._deferred(d.name, None, Blocker("breaker", d.source, d.name))
                    return await self._send(
                        engine, d, event, prepared, attempt=attempt, probe=probe
                    )
        except Unavailable:
            return self._deferred(d.name, _after(Wait(1.0)), None)

    async def _take_probe(self, engine: AsyncEngine, d: Destination, owner: str) -> bool:
        now = datetime.now(UTC)
        async with engine.begin() as conn:
            taken = await state.take_probe(
                conn,
                d.source,
                d.name,
                owner=owner,
                now=now,
                probe_s=d.config.timeout_s + PROBE_SLACK_S,
            )
        await self.refresh(engine, force=True)
        if taken:
            log.info(
                "destination breaker probing", extra={"source": d.source, "destination": d.name}
            )
        return taken

    async def _send(
        self,
        engine: AsyncEngine,
        d: Destination,
        event: Event,
        prepared: tuple[bytes, dict[str, str]],
        *,
        attempt: int,
        probe: bool,
    ) -> Outcome:
        started = time.perf_counter()
        try:
            await d.send(event, prepared)
        except Exception as exc:  # a delivery's failure is retried, a PermanentError not
            _seconds(d.source, d.name).observe(time.perf_counter() - started)
            if isinstance(exc, PermanentError):  # the destination answered: it is up
                await self._breaker_success(engine, d, probe)
            else:
                await self._breaker_failure(engine, d, type(exc).__name__)
            return self._failed(d, exc, attempt)
        _seconds(d.source, d.name).observe(time.perf_counter() - started)
        await self._breaker_success(engine, d, probe)
        return Outcome(d.name, DELIVERED)

    def _failed(self, d: Destination, exc: Exception, attempt: int) -> Outcome:
        kind = type(exc).__name__
        permanent = isinstance(exc, PermanentError)
        text = str(exc)
        if isinstance(exc, httpx.TimeoutException | DeadlineExceeded) and not (
            isinstance(exc, DeadlineExceeded) and exc.what
        ):
            text = f"did not answer within {d.config.timeout_s:g}s"
        summary = f"{d.name}: {text}" if permanent else f"{d.name}: {kind}: {text}".rstrip(": ")
        return Outcome(
            d.name,
            FAILED,
            error=summary,
            error_type=kind,
            permanent=permanent,
            retry_in_s=full_jitter(
                self._rng,
                d.config.retry_base_s or self._retry_base_s,
                min(max(attempt - 1, 0), 60),
                d.config.retry_cap_s or self._retry_cap_s,
            ),
            max_attempts=d.max_attempts,
        )

    async def _breaker_success(self, engine: AsyncEngine, d: Destination, probe: bool) -> None:
        key = (d.source, d.name)
        if d.config.breaker.enabled:
            self._recent_of(d).add(failed=False)
        row = self._breakers.get(key)
        if not probe and (row is None or (row.state == BreakerState.CLOSED and not row.failures)):
            return
        try:
            async with engine.begin() as conn:
                row, closed = await state.record_success(
                    conn, d.source, d.name, now=datetime.now(UTC)
                )
        except Exception as exc:  # advisory state: the next delivery tries again
            log.warning(
                "could not record a breaker success",
                extra={"source": d.source, "destination": d.name, "error": type(exc).__name__},
            )
            return
        self._breakers[key] = row
        if closed:
            log.info(
                "destination breaker closed", extra={"source": d.source, "destination": d.name}
            )

    async def _breaker_failure(self, engine: AsyncEngine, d: Destination, kind: str) -> None:
        breaker = d.config.breaker
        if not breaker.enabled:
            return
        seen, failed = self._recent_of(d).add(failed=True)
        trip = seen >= breaker.min_deliveries and failed / seen >= breaker.failure_rate
        try:
            async with engine.begin() as conn:
                row, opened = await state.record_failure(
                    conn,
                    d.source,
                    d.name,
                    now=datetime.now(UTC),
                    threshold=breaker.failures,
                    cooldown_s=breaker.cooldown_s,
                    reason=f"delivery failed: {kind}",
                    trip=trip,
                )
        except Exception as exc:
            log.warning(
                "could not record a breaker failure",
                extra={"source": d.source, "destination": d.name, "error": type(exc).__name__},
            )
            return
        self._breakers[(d.source, d.name)] = row
        if opened:
            log.warning(
                "destination breaker opened",
                extra={
                    "source": d.source,
                    "destination": d.name,
                    "failures": row.failures,
                    "cooldown_s": breaker.cooldown_s,
                },
            )

    def _recent_of(self, d: Destination) -> _Recent:
        key = (d.source, d.name)
        recent = self._recent.get(key)
        if recent is None:
            recent = self._recent[key] = _Recent(d.config.breaker.window_s)
        return recent


def _after(waited: Wait) -> datetime:
    return datetime.now(UTC) + timedelta(seconds=waited.seconds)


@contextlib.asynccontextmanager
async def _no_slot() -> AsyncIterator[Wait | None]:
    yield None
