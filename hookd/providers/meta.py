"""Meta (WhatsApp Cloud API, Messenger, Instagram) webhooks:
``X-Hub-Signature-256: sha256=<hex HMAC-SHA256 of the raw body>``, keyed with the app
secret (the source's ``secrets``).

Verification request: when a callback URL is saved, Meta sends ``GET
?hub.mode=subscribe&hub.challenge=<n>&hub.verify_token=<token>``. It is answered with
the challenge as ``text/plain`` (200) only when ``hub.verify_token`` equals the
source's ``[sources.verify] verify_token`` (compared as their SHA-256, in constant
time); otherwise 403, and nothing is stored either way.

Meta's payloads carry no event id, and one request may batch several ``entry`` items
(each with its ``changes`` or ``messaging``). hookd stores a body as one event, keyed
by ``sha256:<hex SHA-256 of the raw body>``: Meta retries a failed delivery with the
same body, so a retry is a duplicate; two different deliveries differ somewhere in
their bytes (ids, timestamps). The type is ``<object>/<field>`` (``object`` and the
``field`` of the changes, e.g. ``whatsapp_business_account/messages``) when every
change in the batch has the same field, ``<object>/messaging`` for Messenger's
``messaging`` entries, and ``<object>`` alone for a mixed batch.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from collections.abc import Sequence

from hookd.errors import HandshakeRefused, PayloadError
from hookd.providers.base import (
    BodySigner,
    Configurable,
    Envelope,
    HeaderMap,
    Key,
    Provider,
    QueryMap,
    Reply,
    Verified,
    bounded_type,
    checked_key,
    compact_json,
    epoch_to_datetime,
    parse_json_object,
    select_headers,
)
from hookd.providers.generic import VerifySettings, echoed
from hookd.providers.signatures import HmacHeader, hmac_sha256_hex

NAME = "meta"
SIGNATURE_HEADER = "x-hub-signature-256"
KEPT_HEADERS = ("content-type", "user-agent")
MAX_VERIFY_TOKEN_CHARS = 512


class MetaSettings(VerifySettings):
    """``[sources.verify]`` of a ``meta`` source: the verify token typed into the app
    dashboard's webhook settings."""

    verify_token: str

    def incomplete(self) -> tuple[str, str] | None:
        token = self.verify_token
        if not token.strip() or len(token) > MAX_VERIFY_TOKEN_CHARS or not token.isprintable():
            return "verify_token", "must be the printable verify token set in the app dashboard"
        return None


def event_type(payload: dict[str, object]) -> str | None:
    """``<object>/<field>`` when the batch's changes share one field (see the module)."""
    kind = payload.get("object")
    if not isinstance(kind, str) or not kind:
        return None
    entries = payload.get("entry")
    fields: set[object] = set()
    if isinstance(entries, list):
        for entry in entries:
            if not isinstance(entry, dict):
                continue
            changes = entry.get("changes")
            if isinstance(changes, list):
                fields.update(c.get("field") if isinstance(c, dict) else None for c in changes)
            if "messaging" in entry:
                fields.add("messaging")
    if len(fields) == 1:
        field = next(iter(fields))
        if isinstance(field, str) and field:
            return bounded_type(f"{kind}/{field}")
    return bounded_type(kind)


def envelope(headers: HeaderMap, body: bytes, verified: Verified) -> Envelope:
    payload = parse_json_object(body)
    entries = payload.get("entry")
    if not isinstance(entries, list):
        raise PayloadError("malformed_payload", "payload has no entry list")
    times = [e.get("time") for e in entries if isinstance(e, dict)]
    first = next((t for t in times if isinstance(t, int) and not isinstance(t, bool)), None)
    return Envelope(
        dedupe_key=checked_key("sha256:" + hashlib.sha256(body).hexdigest(), "body"),
        type=event_type(payload),
        occurred_at=None if first is None else epoch_to_datetime(first),
        headers=select_headers(headers, KEPT_HEADERS),
    )


def meta_headers(secret: str, body: bytes) -> dict[str, str]:
    """The headers Meta sends with ``body``, signed with the app secret."""
    signature = hmac_sha256_hex(secret.encode("utf-8"), body)
    return {
        "X-Hub-Signature-256": f"sha256={signature}",
        "Content-Type": "application/json",
        "User-Agent": "facebookexternalua",
    }


def sample_event(secret: str, seq: int, now: int) -> tuple[dict[str, str], bytes]:
    """A WhatsApp Cloud API ``messages`` notification (one entry, one change)."""
    payload = {
        "object": "whatsapp_business_account",
        "entry": [
            {
                "id": "102290129340398",
                "time": now,
                "changes": [
                    {
                        "field": "messages",
                        "value": {
                            "messaging_product": "whatsapp",
                            "metadata": {
                                "display_phone_number": "15550783881",
                                "phone_number_id": "106540352242922",
                            },
                            "contacts": [{"profile": {"name": "Sheena"}, "wa_id": "16505551234"}],
                            "messages": [
                                {
                                    "from": "16505551234",
                                    "id": f"wamid.HOOKD{now}{seq:08d}{time.time_ns() % 10**6}",
                                    "timestamp": str(now),
                                    "type": "text",
                                    "text": {"body": f"hello from hookd send-test #{seq}"},
                                }
                            ],
                        },
                    }
                ],
            }
        ],
    }
    body = compact_json(payload)
    return meta_headers(secret, body), body


def sign_body(secret: str, body: bytes, _type: str | None, now: int) -> dict[str, str]:
    return meta_headers(secret, body)


def _one(query: QueryMap, name: str) -> str | None:
    values = query.get(name)
    if values is None:
        return None
    if len(values) != 1:
        raise PayloadError("malformed_payload", f"{name} is given more than once")
    return values[0]


def bind(settings: MetaSettings) -> Provider:
    """The ``meta`` provider, answering verification requests with ``settings``' token."""
    expected = hashlib.sha256(settings.verify_token.encode("utf-8")).digest()

    def challenge(method: str, query: QueryMap, keys: Sequence[Key]) -> Reply | None:
        if method != "GET" or "hub.mode" not in query:
            return None
        if _one(query, "hub.mode") != "subscribe":
            raise PayloadError("malformed_payload", "hub.mode must be subscribe")
        token = _one(query, "hub.verify_token") or ""
        presented = hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()
        if not hmac.compare_digest(presented, expected):
            raise HandshakeRefused("hub.verify_token is not the source's verify_token")
        answer = echoed(query, "hub.challenge")
        if answer is None:
            raise PayloadError("malformed_payload", "hub.challenge is missing")
        return Reply.text(answer)

    return Provider(
        name=NAME,
        # Meta retries a failed delivery for up to 36 hours (WhatsApp: up to 7 days).
        redelivery_horizon_days=7,
        scheme=HmacHeader("meta-sha256", SIGNATURE_HEADER, prefix="sha256="),
        envelope=envelope,
        sample_event=sample_event,
        body_signer=BodySigner(sign_body),
        configurable=CONFIGURABLE,
        challenge=challenge,
        accepted_status=200,
    )


CONFIGURABLE = Configurable(settings=MetaSettings, bind=bind)
# What the registry holds: the scheme with an example verify token. A source is always
# served by ``bind`` of its own table.
PROVIDER = bind(MetaSettings(verify_token="hookd-example-verify-token"))  # noqa: S106 - an example
