"""One destination's delivery: what to send (its transform), signed, and where.

``Destination`` prepares an event's body and headers (a transform's, checked) and
POSTs it signed with Standard Webhooks v1, reading at most ``ANSWER_READ_BYTES`` of
the answer. ``processing.destinations.Router`` decides whether and when it may go.
"""

from __future__ import annotations

import inspect
import json
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urljoin, urlsplit, urlunsplit

import httpx

from hookd import tracing
from hookd.errors import ConfigError, PermanentError
from hookd.event import Event
from hookd.providers.standard import standard_headers
from hookd.routing import FORWARD, DestinationConfig
from hookd.sources import Source
from processing.deadlines import DeadlineExceeded, off_loop, within
from processing.filters import Selector
from processing.handlers import import_ref

Transform = Callable[[Event], Any]


def import_transform(ref: str) -> Transform:
    module_name, attr, func = import_ref("transform", ref)
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
        result = await self._transformed(event, self._transform)
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

    async def _transformed(self, event: Event, transform: Transform) -> Any:
        """What ``transform`` returns for ``event``, unchecked.

        Under the destination's timeout, counted from outside: a transform that hangs
        ends the attempt at its limit; a blocking one runs in a thread, never on the
        event loop that every other event's work shares."""
        timeout_s = self.config.timeout_s
        try:
            if inspect.iscoroutinefunction(transform):
                return await within(transform(event), timeout_s, what="transform")
            result = await within(off_loop(transform, event), timeout_s, what="transform")
            if inspect.isawaitable(result):
                result = await within(result, timeout_s, what="transform")
        except DeadlineExceeded:
            raise DeadlineExceeded(timeout_s, "the transform") from None
        return result

    async def send(self, event: Event, prepared: tuple[bytes, dict[str, str]]) -> None:
        """POST what ``prepare`` made of the event, signed with Standard Webhooks v1:
        ``webhook-id`` is the hookd event id, so the destination can drop a repeat. 5xx,
        429 and transport errors retry; any other 4xx, and any 3xx (a redirect is not
        followed: it could take the signed payload elsewhere), is permanent. At most
        ``ANSWER_READ_BYTES`` of the answer are read."""
        body, extra = prepared
        headers = self._headers(event, body, extra)
        timeout_s = self.config.timeout_s
        attributes = {"hookd.event_id": event.id, "hookd.destination": self.name}
        with tracing.span("hookd.deliver", attributes) as current:
            tracing.inject(headers)  # W3C traceparent, when tracing is on
            answer = await post_bounded(self._client, self.config.url, body, headers, timeout_s)
            tracing.annotate(current, {"http.response.status_code": answer.status})
        self._raise_for(answer.status, answer.location)

    def _headers(self, event: Event, body: bytes, extra: Mapping[str, str]) -> dict[str, str]:
        """The headers of a delivery: a transform's own (``extra``) but those hookd sets,
        the Standard Webhooks signature, the idempotency key, the event's type and
        source."""
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
        return headers

    def _raise_for(self, status: int, location: str | None) -> None:
        """A delivery's answer as its failure: retried (5xx, 429) or permanent (any other
        4xx, any 3xx)."""
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


@dataclass(frozen=True, slots=True)
class Answer:
    """What a bounded POST got back: the status, the Location (a redirect is never
    followed), and at most ``ANSWER_READ_BYTES`` of the body, raw."""

    status: int
    location: str | None
    head: bytes


async def post_bounded(
    client: httpx.AsyncClient, url: str, body: bytes, headers: dict[str, str], timeout_s: float
) -> Answer:
    """POST ``body`` to ``url`` as a destination's delivery is sent (a notification
    channel's too). httpx's timeout bounds each connect, write and read; ``within``
    bounds the exchange as a whole, so a peer that trickles its answer ends at
    ``timeout_s`` (plus a little slack, so that a single slow phase is still named by
    httpx). Raises httpx's errors and ``DeadlineExceeded``."""
    return await within(
        _exchange(client, url, body, headers, timeout_s),
        timeout_s + EXCHANGE_SLACK_S,
        what="delivery",
    )


async def _exchange(
    client: httpx.AsyncClient, url: str, body: bytes, headers: dict[str, str], timeout_s: float
) -> Answer:
    """POST, and read at most ``ANSWER_READ_BYTES`` of the answer (raw: a compressed
    answer is not inflated); past them the connection is closed, unread. Redirects
    are never followed, whatever the client's default."""
    async with client.stream(
        "POST", url, content=body, headers=headers, timeout=timeout_s, follow_redirects=False
    ) as response:
        head = bytearray()
        async for chunk in response.aiter_raw():
            head += chunk[: ANSWER_READ_BYTES + 1 - len(head)]
            if len(head) > ANSWER_READ_BYTES:
                break
        return Answer(
            response.status_code, response.headers.get("location"), bytes(head[:ANSWER_READ_BYTES])
        )
