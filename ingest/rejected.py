"""Refused requests, recorded off the request path.

The receiver hands each refusal it logs as "rejected" here (``note``: no I/O, never
blocks, never awaits): the source, the reason the metric counts, the status answered,
the client, the parsed headers and, once read, the body. One task turns what gathered
into rows and writes them, a batch per transaction (``store.intake.rejected``), as
``reconcile.late.LateNotes`` does for late deliveries: a flood of bad requests is a
few statements, not a transaction per request in front of the answers.

Memory stays bounded: at most ``MAX_QUEUED`` refusals wait, holding at most
``MAX_QUEUED_BYTES`` of bodies; beyond either a refusal is dropped, counted
(``dropped``) and logged at the first and every thousandth. A batch that fails is
tried again a few times, then given up (logged); what is queued at shutdown is
written then.

What a row keeps, and what it never does (docs/operations.md, "Rejected requests"):
header names, never their values; the names of the source's signature headers that
were present; of the signature's inputs only a signed timestamp (with its skew from
this server's clock) and the names of a signature header's entries (``t``, ``v1``);
never a signature, a secret or a token. The body's SHA-256 always (once read); the
body itself only for a source with ``keep_rejected_bodies``, sealed with
``HOOKD_ENCRYPTION_KEYS`` when keys are set.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine

from hookd import tasks
from hookd.providers.base import HeaderMap, Provider, SignedHeaders
from hookd.providers.signatures import HmacEntries
from hookd.sources import Source
from store.crypto import BodyCipher
from store.intake import rejected as rows
from store.intake.rejected import RejectedRow

log = logging.getLogger("hookd.receiver")

BATCH = 200
MAX_QUEUED = 10_000
# Bodies held by waiting refusals, at most (each is at most its source's limit).
MAX_QUEUED_BYTES = 32 * 1024 * 1024
RETRY_S = 1.0
TRIES = 3
# Header names kept at most, and their length: a request may send thousands.
MAX_HEADER_NAMES = 100
MAX_NAME = 100
# Words of a header name that carries a signature, a timestamp or a token, for a
# provider whose scheme does not name its headers.
SIGNATURE_WORDS = ("signature", "timestamp", "hmac", "token", "webhook-id", "authorization")
# A signature header's entry names (``t=…,v1=…``, ``ts=…;h1=…``).
ENTRY = re.compile(r"\s*([A-Za-z][A-Za-z0-9_-]{0,15})=")
MAX_ENTRIES = 16


@dataclass(slots=True)
class Refusal:
    """A refused request as the receiver had it: parsed, nothing derived yet."""

    source: Source
    reason: str
    status: int
    client: str | None
    at: float
    headers: HeaderMap | None = None
    signed: SignedHeaders | None = None
    body: bytes | None = None


# By the provider's id, the provider kept beside its names: alive, its id is not reused.
_signature_names: dict[int, tuple[Provider, tuple[str, ...]]] = {}


def signature_header_names(provider: Provider) -> tuple[str, ...]:
    """The lower-case names of the headers ``provider`` signs with: those its scheme
    names, else those of its sample event that look like a signature's."""
    known = _signature_names.get(id(provider))
    if known is not None and known[0] is provider:
        return known[1]
    scheme = provider.scheme
    names = {
        value.lower()
        for attr in ("header", "timestamp_header", "id_header", "signature_header")
        if isinstance(value := getattr(scheme, attr, None), str)
    }
    if not names:
        with contextlib.suppress(Exception):  # a sample needs a secret of its shape
            headers, _ = provider.sample_event("hookd-sample", 0, 0)
            names = {
                name.lower()
                for name in headers
                if any(word in name.lower() for word in SIGNATURE_WORDS)
            }
    found = tuple(sorted(names))
    _signature_names[id(provider)] = (provider, found)
    return found


def _one(headers: HeaderMap, name: str) -> str | None:
    values = headers.get(name)
    return values[0] if values else None


def scheme_inputs(
    provider: Provider, headers: HeaderMap, signed: SignedHeaders | None, now: float
) -> dict[str, Any]:
    """What of a signature's inputs is safe to keep: the signed timestamp and its skew
    (seconds this server's clock is past it), and the names of the entries of the
    signature header (``t``, ``v1``, ``v0``). Never a value that proves anything."""
    found: dict[str, Any] = {}
    timestamp: int | None = None
    versions: set[str] = set()
    if signed is not None:
        timestamp = signed.timestamp
        versions = {version for version, _ in signed.signatures if version}
    scheme = provider.scheme
    ts_header = getattr(scheme, "timestamp_header", None)
    if timestamp is None and isinstance(ts_header, str):
        raw = (_one(headers, ts_header.lower()) or "").strip()
        if raw.isdigit() and len(raw) <= 12:
            timestamp = int(raw)
    # Only a header of entries is read for names: any other (a shared token, say) may
    # hold a secret in any shape, and nothing of its value is kept.
    if isinstance(scheme, HmacEntries):
        raw = _one(headers, scheme.header.lower()) or ""
        for part in raw.split(scheme.separator)[:MAX_ENTRIES]:
            entry = ENTRY.match(part)
            if entry is None:
                continue
            name = entry.group(1)
            if name == scheme.timestamp:
                value = part.split("=", 1)[1].strip()
                if timestamp is None and value.isdigit() and len(value) <= 12:
                    timestamp = int(value)
            versions.add(name)
    if timestamp is not None:
        found["timestamp"] = timestamp
        found["skew_s"] = round(now - timestamp, 3)
    if versions:
        found["entries"] = sorted(versions)
    return found


def _clip(value: str | None, size: int) -> str | None:
    return None if value is None else value[:size]


def row_of(refusal: Refusal, cipher: BodyCipher) -> RejectedRow:
    """The row of one refusal: names, safe inputs, a hash, a body only if kept."""
    headers = refusal.headers or {}
    provider = refusal.source.adapter
    wanted = signature_header_names(provider)
    length = _one(headers, "content-length")
    body = refusal.body
    kept: bytes | None = None
    encrypted = False
    if body is not None and refusal.source.config.keep_rejected_bodies:
        kept, encrypted = cipher.seal(body)
    return RejectedRow(
        source=refusal.source.name,
        received_at=datetime.fromtimestamp(refusal.at, UTC),
        reason=refusal.reason[:64],
        status_code=refusal.status,
        client=_clip(refusal.client, 64),
        content_type=_clip(_one(headers, "content-type"), 255),
        content_length=int(length) if length and length.isdigit() and len(length) < 19 else None,
        content_encoding=_clip(_one(headers, "content-encoding"), 64),
        header_names=sorted(name.lower()[:MAX_NAME] for name in headers)[:MAX_HEADER_NAMES],
        signature_headers=[name for name in wanted if name in headers],
        scheme_inputs=scheme_inputs(provider, headers, refusal.signed, refusal.at),
        body_sha256=None if body is None else hashlib.sha256(body).hexdigest(),
        body=kept,
        body_encrypted=encrypted,
    )


class RejectedNotes:
    """The bounded queue of refusals and the one task that writes them."""

    def __init__(
        self,
        engine: AsyncEngine,
        cipher: BodyCipher,
        *,
        max_queued: int = MAX_QUEUED,
        max_queued_bytes: int = MAX_QUEUED_BYTES,
        retry_s: float = RETRY_S,
    ) -> None:
        self._engine = engine
        self._cipher = cipher
        self._retry_s = retry_s
        self._max_bytes = max_queued_bytes
        self._queue: asyncio.Queue[Refusal] = asyncio.Queue(max_queued)
        self._bytes = 0
        self._task: asyncio.Task[None] | None = None
        self.dropped = 0
        self.written = 0

    def note(self, refusal: Refusal) -> None:
        """Queue ``refusal`` to be recorded, or drop it when too much waits."""
        size = len(refusal.body) if refusal.body is not None else 0
        if self._bytes + size > self._max_bytes:
            self._drop(refusal)
            return
        try:
            self._queue.put_nowait(refusal)
        except asyncio.QueueFull:
            self._drop(refusal)
            return
        self._bytes += size

    def _drop(self, refusal: Refusal) -> None:
        self.dropped += 1
        if self.dropped == 1 or self.dropped % 1000 == 0:
            log.warning(
                "rejected requests not recorded: too many waiting",
                extra={"source": refusal.source.name, "dropped": self.dropped},
            )

    async def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._loop(), name="hookd-rejected-notes")

    async def stop(self, grace_s: float = 5.0) -> None:
        """Write what is queued (within ``grace_s``), then stop."""
        if self._task is None:
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(grace_s):
                await self._queue.join()
        await tasks.cancel(self._task)
        self._task = None

    async def _loop(self) -> None:
        while True:
            batch = [await self._queue.get()]
            while len(batch) < BATCH and not self._queue.empty():
                batch.append(self._queue.get_nowait())
            self._bytes -= sum(len(r.body) for r in batch if r.body is not None)
            try:
                try:
                    records = [row_of(refusal, self._cipher) for refusal in batch]
                except Exception as exc:  # a row that cannot be made must not end the task
                    log.warning(
                        "rejected requests not recorded",
                        extra={"rows": len(batch), "error": type(exc).__name__},
                    )
                    continue
                await self._write(records)
            finally:
                for _ in batch:
                    self._queue.task_done()

    async def _write(self, records: list[RejectedRow]) -> None:
        for attempt in range(1, TRIES + 1):
            try:
                async with self._engine.begin() as conn:
                    await rows.record_many(conn, records)
            except Exception as exc:  # the database may be away: try again shortly
                log.warning(
                    "could not record rejected requests",
                    extra={"rows": len(records), "attempt": attempt, "error": type(exc).__name__},
                )
                if attempt < TRIES:
                    await asyncio.sleep(self._retry_s * attempt)
                continue
            self.written += len(records)
            return
        log.error("rejected requests not recorded", extra={"rows": len(records)})
