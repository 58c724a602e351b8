"""Discord: ed25519 over ``timestamp + body`` with the application's public key.

``X-Signature-Ed25519`` carries the signature (lower-case hex) and
``X-Signature-Timestamp`` the timestamp; the source's secret is the application's public
key as the Developer Portal shows it (hex). Discord states no tolerance for the
timestamp: the source's ``tolerance_s`` applies.

One endpoint takes both of Discord's HTTP deliveries:

- Interactions. A ``PING`` (type 1) is answered ``{"type": 1}`` and stores nothing. Any
  other interaction is stored under its ``id`` (a snowflake, which also gives
  ``occurred_at``), typed ``interaction.<type name>``, and answered with the deferred
  response Discord documents, so that a handler can follow up with the interaction's
  token (valid 15 minutes) after the 3-second deadline: ``DEFERRED_CHANNEL_MESSAGE_WITH_SOURCE``
  (5) for application commands and modal submits, ``DEFERRED_UPDATE_MESSAGE`` (6) for
  message components. Autocomplete cannot be deferred: it is answered with an empty
  ``APPLICATION_COMMAND_AUTOCOMPLETE_RESULT`` (8) and stored like the others.
- Webhook events (a body with an ``event`` object). ``PING`` (type 0) is answered 204 and
  stores nothing; an event (type 1) is stored, typed by its ``event.type``, and answered
  204 with no body, as Discord asks. Webhook events carry no id; Discord retries an
  unanswered one for up to 10 minutes, so it is keyed by the SHA-256 of its body.

A duplicate gets the same answer as the first delivery.
"""

from __future__ import annotations

import hashlib
import secrets
from datetime import UTC, datetime
from functools import partial

from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)

from hookd.errors import PayloadError
from hookd.providers.base import (
    Ed25519Key,
    Envelope,
    HeaderMap,
    JsonObject,
    Key,
    Provider,
    Reply,
    Verified,
    checked_key,
    compact_json,
    parse_json_object,
    select_headers,
)
from hookd.providers.signatures import (
    HEX_DIGITS,
    TimestampedSignature,
    match_ed25519,
    parse_hex_digest,
)

SIGNATURE_HEADER = "x-signature-ed25519"
TIMESTAMP_HEADER = "x-signature-timestamp"
KEPT_HEADERS = (TIMESTAMP_HEADER, "content-type", "user-agent")
SCHEME = "discord-ed25519"
SIGNATURE_BYTES = 64
KEY_BYTES = 32
# Milliseconds from the Unix epoch to Discord's (2015-01-01T00:00:00Z).
DISCORD_EPOCH_MS = 1_420_070_400_000
MAX_SNOWFLAKE_DIGITS = 20

PING = 1
# Interaction type -> (stored type, the deferred answer Discord documents for it).
INTERACTIONS: dict[int, tuple[str, JsonObject]] = {
    2: ("interaction.application_command", {"type": 5}),
    3: ("interaction.message_component", {"type": 6}),
    4: ("interaction.application_command_autocomplete", {"type": 8, "data": {"choices": []}}),
    5: ("interaction.modal_submit", {"type": 5}),
}
# Webhook events: the outer payload's type.
EVENT_PING = 0
EVENT = 1
NO_CONTENT = Reply(b"", status=204)


def _key_bytes(raw: str, refusal: str) -> bytes:
    """A 32-byte key written as hex, the way the Developer Portal shows it, or
    ``ValueError(refusal)``."""
    text = raw.strip().lower()
    if len(text) != 2 * KEY_BYTES or not HEX_DIGITS.issuperset(text):
        raise ValueError(refusal)
    return bytes.fromhex(text)


def parse_secret(raw: str) -> Key:
    public = _key_bytes(raw, "must be the application's public key: 64 hex digits")
    return Ed25519Key(Ed25519PublicKey.from_public_bytes(public))


def snowflake_time(snowflake: str) -> datetime:
    """When a snowflake id was made: its top 42 bits are milliseconds since 2015."""
    return datetime.fromtimestamp(((int(snowflake) >> 22) + DISCORD_EPOCH_MS) / 1000, UTC)


def _kind(payload: JsonObject) -> int:
    kind = payload.get("type")
    if isinstance(kind, bool) or not isinstance(kind, int):
        raise PayloadError("malformed_payload", "type is not an integer")
    return kind


def _event_time(raw: object) -> datetime | None:
    if not isinstance(raw, str):
        return None
    try:
        when = datetime.fromisoformat(raw)
    except ValueError:
        return None
    return when if when.tzinfo is not None else when.replace(tzinfo=UTC)


def _webhook_event(payload: JsonObject, body: bytes, kept: dict[str, str]) -> Envelope:
    kind = _kind(payload)
    if kind == EVENT_PING:
        return Envelope("", "webhook.ping", None, kept, reply=NO_CONTENT)
    event = payload.get("event")
    if kind != EVENT or not isinstance(event, dict):
        raise PayloadError("malformed_payload", "unsupported webhook event payload")
    event_type = checked_key(event.get("type"), "event type")
    return Envelope(
        dedupe_key="event:sha256:" + hashlib.sha256(body).hexdigest(),
        type=event_type,
        occurred_at=_event_time(event.get("timestamp")),
        headers=kept,
        ack=NO_CONTENT,
    )


def envelope(headers: HeaderMap, body: bytes, verified: Verified) -> Envelope:
    kept = select_headers(headers, KEPT_HEADERS)
    payload = parse_json_object(body)
    if "event" in payload or payload.get("type") == EVENT_PING:
        return _webhook_event(payload, body, kept)
    kind = _kind(payload)
    if kind == PING:
        return Envelope("", "interaction.ping", None, kept, reply=Reply.json({"type": 1}))
    known = INTERACTIONS.get(kind)
    if known is None:
        raise PayloadError("malformed_payload", "unsupported interaction type")
    stored_type, answer = known
    interaction_id = payload.get("id")
    if not (
        isinstance(interaction_id, str)
        and interaction_id.isascii()
        and interaction_id.isdigit()
        and len(interaction_id) <= MAX_SNOWFLAKE_DIGITS
    ):
        raise PayloadError("malformed_payload", "missing or invalid interaction id")
    return Envelope(
        dedupe_key=interaction_id,
        type=stored_type,
        occurred_at=snowflake_time(interaction_id),
        headers=kept,
        ack=Reply.json(answer),
    )


def load_signing_key(raw: str) -> Ed25519PrivateKey:
    """The application's private seed (64 hex digits), for ``hookd send-test`` and the
    tests: Discord keeps the real one, a source holds only the public key."""
    seed = _key_bytes(raw, "a Discord sample is signed with a 32-byte ed25519 seed (64 hex digits)")
    return Ed25519PrivateKey.from_private_bytes(seed)


def discord_headers(signing_key: str, body: bytes, now: int) -> dict[str, str]:
    """The headers Discord sends with ``body`` at ``now``."""
    timestamp = str(now)
    signature = load_signing_key(signing_key).sign(timestamp.encode() + body)
    return {
        "X-Signature-Ed25519": signature.hex(),
        "X-Signature-Timestamp": timestamp,
        "Content-Type": "application/json",
    }


def snowflake(now_ms: int, low: int) -> str:
    """A snowflake id made at ``now_ms`` (milliseconds since the Unix epoch)."""
    return str(((now_ms - DISCORD_EPOCH_MS) << 22) | (low & 0x3FFFFF))


def sample_event(secret: str, seq: int, now: int) -> tuple[dict[str, str], bytes]:
    """A slash command interaction; ``secret`` is the signing seed (hex)."""
    low = (secrets.randbits(10) << 12) | (seq & 0xFFF)
    payload = {
        "id": snowflake(now * 1000, low),
        "application_id": "1100000000000000000",
        "type": 2,
        "token": secrets.token_urlsafe(48),
        "version": 1,
        "guild_id": "1100000000000000001",
        "channel_id": "1100000000000000002",
        "member": {"user": {"id": "1100000000000000003", "username": "hookd"}},
        "data": {"id": "1100000000000000004", "name": "hookd-test", "type": 1},
        "locale": "en-US",
    }
    body = compact_json(payload)
    return discord_headers(secret, body, now), body


# No reconcile: Discord has no API that lists past interactions or webhook events.
PROVIDER = Provider(
    name="discord",
    # Discord retries for up to 10 minutes.
    redelivery_horizon_days=1,
    scheme=TimestampedSignature(
        SCHEME,
        SIGNATURE_HEADER,
        TIMESTAMP_HEADER,
        "ed25519",
        # Lower case only, as Discord sends it: upper case decodes to the same bytes.
        decode=partial(parse_hex_digest, size=SIGNATURE_BYTES),
        match=match_ed25519,
        parse_secret=parse_secret,
    ),
    envelope=envelope,
    sample_event=sample_event,
    # The application's public key verifies; a sample needs an ed25519 seed.
    signing_key_needed=lambda secret: "the ed25519 private seed (64 hex digits)",
)
