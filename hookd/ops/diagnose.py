"""What is most likely wrong with a source whose requests are refused, in plain words.

``diagnose`` reads a source's recent rejections (what the rejected-requests table
keeps: the reason, header names, the signature scheme's safe inputs, the body's digest
and encoding, never a secret) beside the digests of the bodies it accepted lately and
which of its secrets verified them, and names the usual causes, most requests first:

- requests carrying another provider's signature headers (the wrong provider chosen);
- a body re-encoded on the way (``Content-Encoding``: a proxy compressed it);
- bodies over the source's ``max_body_bytes``;
- signed timestamps off this server's clock beyond the tolerance (clock skew);
- a body that is not what the provider sends (its content type);
- no signature header at all (the sender does not sign, or a proxy strips it);
- a signature that matches none of the secrets: a rotated secret when the same body
  verified earlier, else the wrong secret.

Each ``Clue`` says what, how many requests, and what to do. An empty answer: nothing
is wrong.
"""

from __future__ import annotations

import hashlib
import re
import statistics
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from hookd.errors import NotFound
from hookd.sources import Sources
from store.crypto import BodyCipher
from store.intake import rejected
from store.intake.rejected import RejectedRow
from store.models import EVENTS
from store.status import EventOrigin

# Each provider's own signature headers, lower-case: what says "this request was signed
# by that provider". Two providers that share one (X-Hub-Signature) name each other.
SIGNATURE_HEADERS: Mapping[str, tuple[str, ...]] = {
    "bitbucket": ("x-hub-signature",),
    "discord": ("x-signature-ed25519",),
    "github": ("x-hub-signature-256",),
    "gitlab": ("x-gitlab-token",),
    "hubspot": ("x-hubspot-signature-v3",),
    "intercom": ("x-hub-signature",),
    "linear": ("linear-signature",),
    "paddle": ("paddle-signature",),
    "pagerduty": ("x-pagerduty-signature",),
    "sendgrid": ("x-twilio-email-event-webhook-signature",),
    "shopify": ("x-shopify-hmac-sha256",),
    "slack": ("x-slack-signature",),
    "square": ("x-square-hmacsha256-signature",),
    "standard": ("webhook-signature", "svix-signature"),
    "stripe": ("stripe-signature",),
    "twilio": ("x-twilio-signature",),
    "zendesk": ("x-zendesk-webhook-signature",),
    "zoom": ("x-zm-signature",),
}
SIGNATURE_REASONS = ("bad_signature",)
MISSING_REASONS = ("missing_signature", "missing_header")
CLOCK_REASONS = ("timestamp_too_old", "timestamp_in_future")
TOO_LARGE = "body_too_large"
PAYLOAD_REASONS = ("malformed_payload",)
IDENTITY = ("", "identity")


@dataclass(frozen=True, slots=True)
class Rejection:
    """One refused request, as the rejected-requests table keeps it."""

    reason: str
    header_names: tuple[str, ...] = ()
    content_type: str | None = None
    content_length: int | None = None
    content_encoding: str | None = None
    # Seconds the signed timestamp was behind (negative) or ahead of this server's clock.
    skew_s: float | None = None
    body_sha256: str | None = None


@dataclass(frozen=True, slots=True)
class Setting:
    """What the source is configured with (never the secrets themselves)."""

    name: str
    provider: str
    secrets: int
    tolerance_s: float
    max_body_bytes: int


@dataclass(frozen=True, slots=True)
class Clue:
    cause: str  # a stable code: wrong_provider, re_encoded, too_large, clock_skew, ...
    count: int  # requests it explains
    said: str  # what is most likely wrong, and what to do

    def line(self) -> str:
        return f"{self.said} ({self.count} request{'s' if self.count != 1 else ''})"


@dataclass
class _Left:
    """Rejections not explained yet."""

    rows: list[Rejection] = field(default_factory=list)

    def take(self, matches: Iterable[Rejection]) -> list[Rejection]:
        chosen = list(matches)
        ids = {id(r) for r in chosen}
        self.rows = [r for r in self.rows if id(r) not in ids]
        return chosen


def diagnose(
    setting: Setting,
    rejections: Sequence[Rejection],
    accepted: Mapping[str, int] | None = None,
) -> list[Clue]:
    """The likely causes of ``rejections``, most requests first. ``accepted``: the body
    digests of requests the source stored lately, each with the index (from 0) of the
    secret that verified it."""
    accepted = accepted or {}
    left = _Left(list(rejections))
    clues = [
        _wrong_provider(setting, left),
        _re_encoded(left),
        _too_large(setting, left),
        _clock(setting, left),
        _payload(setting, left),
        _missing(setting, left),
        _signature(setting, left, accepted),
    ]
    if left.rows:
        reasons = Counter(r.reason for r in left.rows)
        said = ", ".join(f"{reason} ({n})" for reason, n in reasons.most_common())
        clues.append(Clue("other", len(left.rows), f"other refusals: {said}"))
    found = [clue for clue in clues if clue is not None and clue.count]
    return sorted(found, key=lambda clue: -clue.count)


def _wrong_provider(setting: Setting, left: _Left) -> Clue | None:
    own = set(SIGNATURE_HEADERS.get(setting.provider, ()))
    others: Counter[str] = Counter()
    taken = []
    for row in left.rows:
        names = set(row.header_names)
        if names & own:
            continue
        foreign = sorted(
            p
            for p, headers in SIGNATURE_HEADERS.items()
            if p != setting.provider and names & set(headers)
        )
        if foreign:
            others[" or ".join(foreign)] += 1
            taken.append(row)
    if not taken:
        return None
    left.take(taken)
    provider, _ = others.most_common(1)[0]
    return Clue(
        "wrong_provider",
        len(taken),
        f"these requests carry {provider}'s signature headers but the source {setting.name} "
        f"is provider {setting.provider!r}: point that sender at a source of its own "
        "provider, or change this source's provider",
    )


def _re_encoded(left: _Left) -> Clue | None:
    taken = left.take(r for r in left.rows if (r.content_encoding or "").lower() not in IDENTITY)
    if not taken:
        return None
    encodings = Counter((r.content_encoding or "").lower() for r in taken)
    encoding = encodings.most_common(1)[0][0]
    return Clue(
        "re_encoded",
        len(taken),
        f"the body was re-encoded on the way (Content-Encoding: {encoding}): a proxy in "
        "front of hookd compresses request bodies, so the signature no longer matches; "
        "turn that off for this path",
    )


def _too_large(setting: Setting, left: _Left) -> Clue | None:
    taken = left.take(r for r in left.rows if r.reason == TOO_LARGE)
    if not taken:
        return None
    largest = max((r.content_length or 0 for r in taken), default=0)
    size = f"; the largest said {largest:,} bytes" if largest else ""
    return Clue(
        "too_large",
        len(taken),
        f"bodies over the limit (max_body_bytes = {setting.max_body_bytes:,}{size}): raise "
        f"max_body_bytes for {setting.name} if the provider sends them",
    )


def _clock(setting: Setting, left: _Left) -> Clue | None:
    taken = left.take(r for r in left.rows if r.reason in CLOCK_REASONS)
    if not taken:
        return None
    skews = [r.skew_s for r in taken if r.skew_s is not None]
    if skews:
        skew = statistics.median(skews)
        where = "behind" if skew < 0 else "ahead of"
        said = f"timestamps are {abs(skew):.0f} s {where} this server's clock"
    else:
        said = "signed timestamps are outside the tolerance"
    return Clue(
        "clock_skew",
        len(taken),
        f"{said} (tolerance_s = {setting.tolerance_s:g}): fix the clock (NTP) of this "
        "server or of what sends them; a replay of old requests looks the same",
    )


def _payload(setting: Setting, left: _Left) -> Clue | None:
    taken = left.take(r for r in left.rows if r.reason in PAYLOAD_REASONS)
    if not taken:
        return None
    types = Counter((r.content_type or "none").split(";")[0].strip() for r in taken)
    kind = types.most_common(1)[0][0]
    return Clue(
        "content_type",
        len(taken),
        f"the bodies are not what {setting.provider} sends (Content-Type: {kind}): check "
        "the content type chosen at the provider (JSON), and that nothing rewrites the body",
    )


def _missing(setting: Setting, left: _Left) -> Clue | None:
    taken = left.take(r for r in left.rows if r.reason in MISSING_REASONS)
    if not taken:
        return None
    headers = " or ".join(SIGNATURE_HEADERS.get(setting.provider, ("its signature header",)))
    return Clue(
        "unsigned",
        len(taken),
        f"requests without {headers}: the sender does not sign (a secret not set at the "
        "provider), or a proxy strips the header",
    )


def _signature(setting: Setting, left: _Left, accepted: Mapping[str, int]) -> Clue | None:
    taken = left.take(r for r in left.rows if r.reason in SIGNATURE_REASONS)
    if not taken:
        return None
    secrets = f"{setting.secrets} secret{'s' if setting.secrets != 1 else ''}"
    seen = [accepted[r.body_sha256] for r in taken if r.body_sha256 and r.body_sha256 in accepted]
    if seen:
        index = Counter(seen).most_common(1)[0][0]
        return Clue(
            "rotated_secret",
            len(taken),
            f"the signature matches none of {secrets}; {len(seen)} of these bodies "
            f"verified earlier with secret #{index + 1}: the sender now signs with a new "
            f"secret; add it to {setting.name}'s secrets (keep the old one until the "
            "provider's retries of old requests are over)",
        )
    return Clue(
        "wrong_secret",
        len(taken),
        f"the signature matches none of {secrets}: the secret at the provider differs "
        f"from {setting.name}'s (copied with a space, without its prefix, or another "
        "endpoint's)",
    )


# How far back ``hookd diagnose`` looks, and how many of each it reads at most.
WINDOW = timedelta(hours=24)
READ = 500
_KEY = re.compile(r";key=(\d+)")


def rejection_of(row: RejectedRow) -> Rejection:
    """A stored refusal as ``diagnose`` reads it. The table's skew is how far this
    server's clock was past the signed timestamp; here it is the timestamp's offset
    from this clock (negative: behind)."""
    skew = row.scheme_inputs.get("skew_s") if row.scheme_inputs else None
    return Rejection(
        reason=row.reason,
        header_names=tuple(row.header_names),
        content_type=row.content_type,
        content_length=row.content_length,
        content_encoding=row.content_encoding,
        skew_s=None if not isinstance(skew, int | float) else -float(skew),
        body_sha256=row.body_sha256,
    )


@dataclass(frozen=True, slots=True)
class Diagnosis:
    source: str
    looked_at: int  # refusals of the last day read
    clues: list[Clue]


class DiagnoseOps:
    """``hookd diagnose SOURCE``: the source's refusals of the last day, and the bodies
    it stored lately (their digests, and which secret verified each)."""

    def __init__(self, engine: AsyncEngine, sources: Sources, cipher: BodyCipher) -> None:
        self._engine = engine
        self._sources = sources
        self._cipher = cipher

    async def diagnose(self, name: str, now: datetime | None = None) -> Diagnosis:
        source = self._sources.get(name)
        if source is None:
            raise NotFound("source")
        since = (now or datetime.now(UTC)) - WINDOW
        async with self._engine.connect() as conn:
            rows = await rejected.recent(conn, source=name, limit=READ)
            stored = await conn.execute(
                sa.select(EVENTS.c.body, EVENTS.c.body_encrypted, EVENTS.c.verified_with)
                .where(EVENTS.c.source == name, EVENTS.c.origin == EventOrigin.WEBHOOK)
                .order_by(EVENTS.c.id.desc())
                .limit(READ)
            )
            accepted: dict[str, int] = {}
            for body, encrypted, verified_with in stored:
                key = _KEY.search(verified_with or "")
                if body is None or key is None:
                    continue
                try:
                    plain = self._cipher.open(bytes(body), bool(encrypted))
                except Exception:  # noqa: S112 - a body under a key no longer configured
                    continue
                accepted.setdefault(hashlib.sha256(plain).hexdigest(), int(key.group(1)))
        recent = [rejection_of(r) for r in rows if _aware(r.received_at) >= since]
        config = source.config
        setting = Setting(
            name=name,
            provider=config.provider,
            secrets=len(config.secrets),
            tolerance_s=float(config.tolerance_s),
            max_body_bytes=config.max_body_bytes,
        )
        return Diagnosis(name, len(recent), diagnose(setting, recent, accepted))


def _aware(value: datetime) -> datetime:
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)
