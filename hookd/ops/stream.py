"""The event stream behind ``GET /api/events:stream`` and ``hookd listen``: every newly
stored event of the chosen sources and types, in id order, each once, as server-sent
events. Read-only: it changes no row.

Why server-sent events and not a WebSocket: one way is all a listener needs; it is
plain HTTP, so it passes proxies and load balancers that pass the API; and resuming is
in the standard (each frame's ``id:``, the client's ``Last-Event-ID`` on reconnect).

Why not simply ``id > cursor``: an id is minted when its batch is prepared (ULID,
``store.ids``) and becomes visible only when the batch commits, and several committers
(processes, receivers) commit side by side, so an event with a smaller id can become
visible after a larger one was sent. Two bounds deal with that:

- hold-back: an event is sent only once its id is ``HOLD_BACK_S`` old. A commit
  normally follows its ids by milliseconds, so within this bound the stream is in id
  order, which is storage order.
- look-back: every poll re-reads (ids only) ``lookback_s`` behind the cursor, the
  commit timeout (``HOOKD_COMMIT_TIMEOUT_S``, after which a request is refused and its
  batch abandoned) plus a margin, and sends what it has not sent on this stream. An
  event whose commit took longer than the hold-back is so still sent, once, if out
  of order; none is lost.

On a resume (``after`` or ``Last-Event-ID``) the server does not know what the client
already has below its cursor, so it sends the look-back window again and the client
skips the ids it forwarded (``hookd.cli.listen`` keeps them): exactly once end to end.
A fresh stream (from now, ``since``, ``last``) starts with what is visible behind its
start marked as sent, so it sends only what lies after the start.

Memory is bounded by the look-back window: ids below it are forgotten.

Each event carries its stored headers and body, with a signature made now as its
provider signs (``provider_signer``): the provider's own is not stored.
"""

from __future__ import annotations

import asyncio
import base64
import json
import math
import re
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from sqlalchemy.ext.asyncio import AsyncEngine

from hookd.errors import BadRequest, ConfigError
from hookd.ops import models
from hookd.sources import Sources
from store.admin.stream import cursor_before_last, events_by_id, ids_between
from store.crypto import BodyCipher
from store.ids import id_floor, id_time_ms, is_id
from store.rows import EventRow

# An event is sent once its id is this old (see above).
HOLD_BACK_S = 2.0
# The look-back beyond the commit timeout.
LOOKBACK_MARGIN_S = 5.0
POLL_S = 0.5
# A comment line this often: proxies and the client see the connection is alive.
HEARTBEAT_S = 15.0
# Ids read per query, and rows per query.
PAGE = 200
MAX_LAST = 10_000
MAX_SOURCES = 50
_LAST_RE = re.compile(r"[0-9]{1,9}")


@dataclass(frozen=True, slots=True)
class StreamQuery:
    """What a listener asked for: sources (none: any), a type glob, and where to start:
    after an event id (a resume), the newest ``last``, since a moment, or from now."""

    sources: tuple[str, ...] = ()
    type_glob: str | None = None
    after: str | None = None
    last: int | None = None
    since: datetime | None = None


def parse_stream_query(
    sources: Sequence[str], params: Mapping[str, str], last_event_id: str | None
) -> StreamQuery:
    """The stream's query parameters (``sources``: every ``source`` given); the
    ``Last-Event-ID`` header, when there is one, overrides ``after``."""
    chosen = tuple(s for s in sources if s)
    if len(chosen) > MAX_SOURCES:
        raise BadRequest("source", f"at most {MAX_SOURCES} sources")
    type_glob = params.get("type") or None
    for value in (*chosen, type_glob or ""):
        if "\x00" in value:
            raise BadRequest("text", "a filter holds a NUL character")
    after = (last_event_id or "").strip() or params.get("after") or None
    if after is not None and not is_id(after):
        raise BadRequest("after", "after (or Last-Event-ID) must be an event id (a ULID)")
    last: int | None = None
    raw_last = params.get("last")
    if raw_last:
        last = int(raw_last) if _LAST_RE.fullmatch(raw_last) else 0
        if not 1 <= last <= MAX_LAST:
            raise BadRequest("last", f"last must be a whole number from 1 to {MAX_LAST}")
    since: datetime | None = None
    raw_since = params.get("since")
    if raw_since:
        try:
            since = datetime.fromisoformat(raw_since)
        except ValueError:
            since = None
        if since is None or since.tzinfo is None:
            raise BadRequest("since", "since must be an ISO 8601 time with its offset (or Z)")
    if sum(x is not None for x in (after, last, since)) > 1 and last_event_id is None:
        raise BadRequest("after", "give one of after, last and since")
    if after is not None:  # a resume wins over where a first connection started
        last = since = None
    return StreamQuery(chosen, type_glob, after, last, since)


# (event, its body) -> the headers a provider's signature needs, made now; None: none.
Signer = Callable[[EventRow, bytes], dict[str, str] | None]


def frame(row: EventRow, cipher: BodyCipher, sign: Signer) -> bytes:
    """One event as a server-sent event: ``id:`` its id (the client's cursor), ``data:``
    one line of JSON with the stored headers (and a signature made now, ``sign``) and the
    body, decrypted, in base64. A body retention removed, or one no configured key
    opens, is ``null`` with ``body_missing`` saying why."""
    body: str | None = None
    missing: Literal["pruned", "undecryptable"] | None = None
    headers = dict(row.headers)
    signed = False
    if row.body is None:
        missing = "pruned"
    else:
        try:
            raw = cipher.open(row.body, row.body_encrypted)
        except ConfigError:
            missing = "undecryptable"
        else:
            body = base64.b64encode(raw).decode()
            signature = sign(row, raw)
            if signature is not None:
                # One value per name, whatever its case: the stored ones (never a
                # signature: it is checked at receipt and not kept) over the signer's.
                headers = {k.lower(): v for k, v in signature.items()}
                headers |= {k.lower(): v for k, v in row.headers.items()}
                signed = True
    event = models.StreamedEvent(
        id=row.id,
        source=row.source,
        provider=row.provider,
        type=row.type,
        received_at=row.received_at,
        headers=headers,
        signed_now=signed,
        body=body,
        body_missing=missing,
    )
    # One line: JSON escapes every newline inside it.
    payload = json.dumps(event.answer(), separators=(",", ":"))
    return f"id: {row.id}\nevent: event\ndata: {payload}\n\n".encode()


def provider_signer(sources: Sources) -> Signer:
    """Signs as the event's provider signs, with its source's first secret, now: so that
    the app ``hookd listen`` forwards to passes its own check with the provider's secret.

    The provider's original signature cannot be sent: hookd checks it at receipt and
    keeps only the sender's headers (``hookd.providers.base.SENDER_HEADERS`` and each
    provider's own), and a timestamped one (Stripe's, Standard Webhooks') would be past
    its tolerance on a replay minutes later anyway. Not signed: a source no longer
    configured, a provider hookd has no signer for (``Provider.body_signer``: GitHub,
    Slack, Standard Webhooks and Stripe have one), a source verified with a public key."""

    def sign(row: EventRow, body: bytes) -> dict[str, str] | None:
        source = sources.get(row.source)
        if source is None or source.adapter.body_signer is None:
            return None
        secret = source.config.secrets[0]
        if source.adapter.signing_key_needed(secret) is not None:
            return None
        try:
            return source.adapter.body_signer.sign(secret, body, row.type, int(time.time()))
        except ValueError:  # a secret the signer cannot use: unsigned, as above
            return None

    return sign


def _now_ms() -> int:
    return int(time.time() * 1000)


class EventStream:
    """One listener's stream over ``engine`` (see the module's docstring)."""

    def __init__(
        self,
        engine: AsyncEngine,
        cipher: BodyCipher,
        commit_timeout_s: float,
        sources: Sources,
        *,
        poll_s: float = POLL_S,
        heartbeat_s: float = HEARTBEAT_S,
        hold_back_s: float = HOLD_BACK_S,
    ) -> None:
        self._engine = engine
        self._cipher = cipher
        self._sign = provider_signer(sources)
        self._lookback_ms = math.ceil((commit_timeout_s + LOOKBACK_MARGIN_S) * 1000)
        self._hold_ms = math.ceil(hold_back_s * 1000)
        self._poll_s = poll_s
        self._heartbeat_s = heartbeat_s

    @property
    def lookback_s(self) -> float:
        return self._lookback_ms / 1000

    def _floor(self, cursor: str) -> str:
        """The lowest id the look-back re-reads behind ``cursor``."""
        ms = id_time_ms(cursor)
        return "" if ms is None else id_floor(ms - self._lookback_ms)

    async def start(self, query: StreamQuery) -> tuple[str, set[str]]:
        """Where the stream starts: its cursor, and the ids behind it to treat as sent
        (none on a resume: the client skips what it has)."""
        if query.after is not None:
            return query.after, set()
        if query.last is not None:
            async with self._engine.connect() as conn:
                cursor = await cursor_before_last(
                    conn, query.last, sources=query.sources, type_glob=query.type_glob
                )
        elif query.since is not None:
            cursor = id_floor(int(query.since.timestamp() * 1000))
        else:
            cursor = id_floor(_now_ms())
        seen: set[str] = set()
        if cursor:
            after = self._floor(cursor)
            async with self._engine.connect() as conn:
                while True:
                    ids = await ids_between(
                        conn,
                        after=after,
                        before=cursor + "0",  # up to and including the cursor itself
                        sources=query.sources,
                        type_glob=query.type_glob,
                        limit=PAGE * 10,
                    )
                    seen.update(ids)
                    if len(ids) < PAGE * 10:
                        break
                    after = ids[-1]
        return cursor, seen

    async def frames(self, query: StreamQuery, cursor: str, sent: set[str]) -> AsyncIterator[bytes]:
        """Frames forever: events as they become visible, a comment line as heartbeat.
        The caller stops it by closing the iterator (the client went away)."""
        yield f": hookd event stream; look-back {self.lookback_s:g} s\nretry: 1000\n\n".encode()
        quiet_since = time.monotonic()
        while True:
            floor = self._floor(cursor)
            sent = {i for i in sent if i > floor}
            upper = id_floor(_now_ms() - self._hold_ms)
            after = floor
            while True:
                async with self._engine.connect() as conn:
                    ids = await ids_between(
                        conn,
                        after=after,
                        before=upper,
                        sources=query.sources,
                        type_glob=query.type_glob,
                        limit=PAGE,
                    )
                    rows = await events_by_id(conn, [i for i in ids if i not in sent])
                for row in rows:
                    yield frame(row, self._cipher, self._sign)
                    sent.add(row.id)
                    cursor = max(cursor, row.id)
                    quiet_since = time.monotonic()
                if len(ids) < PAGE:
                    break
                after = ids[-1]
                # A long catch-up (since a day ago): forget what is behind the look-back.
                floor = self._floor(cursor)
                sent = {i for i in sent if i > floor}
            if time.monotonic() - quiet_since >= self._heartbeat_s:
                yield b": heartbeat\n\n"
                quiet_since = time.monotonic()
            await asyncio.sleep(self._poll_s)
