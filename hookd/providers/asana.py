"""Asana webhooks: ``X-Hook-Signature: <hex HMAC-SHA256 of the raw body>``, keyed with
the secret Asana hands over in the webhook's handshake, not a configured one.

The handshake: when a webhook is created, Asana ``POST``s to its target with
``X-Hook-Secret: <secret>`` and expects 200 with the same ``X-Hook-Secret`` header in
the answer. hookd keeps that secret in the database (``learned_secrets``, sealed with
``HOOKD_ENCRYPTION_KEYS`` when keys are set) so that every receiver process verifies
with it.

A forged handshake must not plant or replace the secret, so a handshake is accepted
only when

- its URL carries ``?token=<one of the source's secrets>`` (compared as SHA-256, in
  constant time): the source's ``secrets`` are handshake tokens the operator puts in
  the webhook's target URL, never signing keys; and
- that token opened no handshake before (the table's primary key: whichever receiver
  process sees a second one, it is refused).

Anything else is 403 and nothing is kept. To register the webhook again (a new
webhook, a secret to rotate), add a new token to ``secrets`` and use it in the new
target URL; removing a token retires the secret it opened. Deliveries verify with the
secrets learned through the tokens the source still configures.

Asana's events carry no id and one request batches several. hookd stores a body as one
event, keyed ``sha256:<hex SHA-256 of the raw body>`` (a retry resends the same body).
Its type is ``<resource_type>.<action>`` when every event in the batch shares it
(``task.changed``), ``<resource_type>`` when they share that only, else ``events``.
A heartbeat (``{"events": []}``) is answered 200 and stored nowhere.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Sequence
from datetime import UTC, datetime

from hookd.errors import HandshakeRefused, PayloadError
from hookd.providers.base import (
    BodySigner,
    Envelope,
    HeaderMap,
    HmacKey,
    Key,
    LearnsSecret,
    Provider,
    QueryMap,
    Reply,
    Verified,
    bounded_type,
    checked_key,
    compact_json,
    parse_json_object,
    select_headers,
)
from hookd.providers.rfc3339 import parse_rfc3339
from hookd.providers.signatures import PRINTABLE_WORD, HmacHeader, hmac_sha256_hex

NAME = "asana"
SIGNATURE_HEADER = "x-hook-signature"
SECRET_HEADER = "x-hook-secret"  # noqa: S105 - a header name, not a secret
TOKEN_PARAM = "token"  # noqa: S105 - a query parameter name, not a token
KEPT_HEADERS = ("content-type", "user-agent")
MIN_TOKEN_CHARS = 16
MAX_SECRET_CHARS = 256
HEARTBEAT = "heartbeat"
UNOPENED = "the URL carries no token of the source (?token=)"


def parse_token(raw: str) -> HmacKey:
    """A handshake token: printable ASCII without spaces, at least 16 characters."""
    if not raw:
        raise ValueError("secret is empty")
    if PRINTABLE_WORD.fullmatch(raw) is None or len(raw) < MIN_TOKEN_CHARS:
        raise ValueError(
            "an asana secret is the handshake token of the webhook's target URL "
            "(?token=...): at least 16 printable ASCII characters without spaces"
        )
    return HmacKey(raw.encode("utf-8"))


def opened_by(query: QueryMap, keys: Sequence[Key]) -> int:
    """The index of the configured token the handshake's URL carries, or 403."""
    values = query.get(TOKEN_PARAM)
    if not values or len(values) != 1:
        raise HandshakeRefused(UNOPENED)
    presented = hashlib.sha256(values[0].encode("utf-8", "surrogatepass")).digest()
    found = -1
    for index, key in enumerate(keys):
        if isinstance(key, HmacKey):
            same = hmac.compare_digest(hashlib.sha256(key.key).digest(), presented)
            if same and found < 0:
                found = index
    if found < 0:
        raise HandshakeRefused(UNOPENED)
    return found


def parse_learned(raw: str) -> Key:
    """The secret a handshake hands over, or ``malformed_payload``."""
    if PRINTABLE_WORD.fullmatch(raw) is None or len(raw) > MAX_SECRET_CHARS:
        raise PayloadError("malformed_payload", "X-Hook-Secret is not a printable secret")
    return HmacKey(raw.encode("ascii"))


def answer(secret: str) -> Reply:
    """200, the secret echoed in ``X-Hook-Secret``, as Asana's handshake expects."""
    return Reply(b"", "text/plain; charset=utf-8", headers=((SECRET_HEADER, secret),))


LEARNS = LearnsSecret(SECRET_HEADER, opened_by, parse_learned, answer)


def event_type(events: list[object]) -> str:
    """``task.changed``, ``task`` or ``events`` (see the module)."""
    pairs = {
        (
            (event.get("resource") or {}).get("resource_type")
            if isinstance(event.get("resource"), dict)
            else None,
            event.get("action"),
        )
        for event in events
        if isinstance(event, dict)
    }
    kinds = {kind for kind, _ in pairs}
    if len(pairs) == 1:
        kind, action = next(iter(pairs))
        if isinstance(kind, str) and isinstance(action, str):
            return bounded_type(f"{kind}.{action}") or "events"
    if len(kinds) == 1:
        kind = next(iter(kinds))
        if isinstance(kind, str):
            return bounded_type(kind) or "events"
    return "events"


def envelope(headers: HeaderMap, body: bytes, verified: Verified) -> Envelope:
    payload = parse_json_object(body)
    events = payload.get("events")
    kept = select_headers(headers, KEPT_HEADERS)
    if not isinstance(events, list):
        raise PayloadError("malformed_payload", "payload has no events list")
    if not events:
        return Envelope("", HEARTBEAT, None, kept, reply=Reply.json({"status": "ok"}))
    first = events[0]
    return Envelope(
        dedupe_key=checked_key("sha256:" + hashlib.sha256(body).hexdigest(), "body"),
        type=event_type(events),
        occurred_at=parse_rfc3339(first.get("created_at")) if isinstance(first, dict) else None,
        headers=kept,
    )


def asana_headers(secret: str, body: bytes) -> dict[str, str]:
    """The headers Asana sends with ``body``, signed with the handshake's secret."""
    return {
        "X-Hook-Signature": hmac_sha256_hex(secret.encode("utf-8"), body),
        "Content-Type": "application/json; charset=UTF-8",
        "User-Agent": "Asana",
    }


def sample_event(secret: str, seq: int, now: int) -> tuple[dict[str, str], bytes]:
    """A task's assignee changed, as Asana's webhook guide shows one."""
    at = datetime.fromtimestamp(now, UTC).strftime("%Y-%m-%dT%H:%M:%S.") + f"{seq % 1000:03d}Z"
    payload = {
        "events": [
            {
                "user": {"gid": "1516", "resource_type": "user"},
                "created_at": at,
                "action": "changed",
                "resource": {
                    "gid": str(1_200_000_000_000_000 + seq),
                    "resource_type": "task",
                    "resource_subtype": "default_task",
                },
                "parent": None,
                "change": {
                    "field": "assignee",
                    "action": "changed",
                    "new_value": {"gid": "1234", "resource_type": "user"},
                },
            }
        ]
    }
    body = compact_json(payload)
    return asana_headers(secret, body), body


def sign_body(secret: str, body: bytes, _type: str | None, now: int) -> dict[str, str]:
    return asana_headers(secret, body)


PROVIDER = Provider(
    name=NAME,
    # Asana retries a failed delivery with backoff for up to 24 hours.
    redelivery_horizon_days=2,
    # The source's secrets are handshake tokens; the receiver verifies deliveries with
    # the secrets they opened (``learns_secret``) in their place.
    scheme=HmacHeader("asana-sha256", SIGNATURE_HEADER, parse_secret=parse_token),
    envelope=envelope,
    sample_event=sample_event,
    body_signer=BodySigner(sign_body),
    learns_secret=LEARNS,
)
