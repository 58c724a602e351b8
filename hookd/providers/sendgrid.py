"""SendGrid's signed Event Webhook: ECDSA P-256 with SHA-256 over ``timestamp + body``.

``X-Twilio-Email-Event-Webhook-Timestamp`` carries the timestamp and
``X-Twilio-Email-Event-Webhook-Signature`` the base64 of the DER-encoded signature. The
source's secret is the verification key SendGrid shows (base64 DER SubjectPublicKeyInfo):
a public key, so hookd holds nothing that could sign.

A delivery is a JSON array of events, each with its own ``sg_event_id``; it is stored as
one event. Its dedupe key is the SHA-256 of its sorted, distinct ``sg_event_id`` values, so
the same batch posted again (SendGrid retries until it gets a 2xx) is a duplicate however
it is formatted or ordered; a batch with an event that lacks an id is keyed by the SHA-256
of its body. SendGrid documents that single events can arrive more than once, also in
different batches: a handler that acts per event dedupes by ``sg_event_id``.

ECDSA signatures are malleable: ``(r, s)`` and ``(r, n - s)`` both verify. High-s
signatures are accepted (SendGrid's own published example is one) and harmless here: the
signature is not part of the dedupe key, so a mauled copy of a delivery is its duplicate.
The DER encoding itself must be canonical: another encoding of the same numbers is
``malformed_signature``.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import uuid
from collections.abc import Callable
from datetime import datetime

from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import (
    decode_dss_signature,
    encode_dss_signature,
)

from hookd.errors import SignatureError
from hookd.providers.base import (
    EcdsaP256Key,
    Envelope,
    HeaderMap,
    JsonObject,
    Key,
    Provider,
    Verified,
    bounded_type,
    checked_key,
    compact_json,
    epoch_to_datetime,
    parse_json_array,
    select_headers,
)
from hookd.providers.signatures import (
    TimestampedSignature,
    b64decode_strict,
    match_ecdsa,
)

SIGNATURE_HEADER = "x-twilio-email-event-webhook-signature"
TIMESTAMP_HEADER = "x-twilio-email-event-webhook-timestamp"
KEPT_HEADERS = (TIMESTAMP_HEADER, "content-type", "user-agent")
SCHEME = "sendgrid-ecdsa"
# A DER ECDSA P-256 signature is at most 72 bytes: 96 characters of base64.
MAX_SIGNATURE_CHARS = 96
MAX_SIGNATURE_BYTES = 72
BATCH_TYPE = "batch"


def _load_key(raw: str, pem: Callable[[bytes], object], der: Callable[[bytes], object]) -> object:
    """A key written as PEM, or as the base64 of its DER (whitespace ignored); the
    loaders' ``ValueError``, ``TypeError`` or ``UnicodeError`` otherwise."""
    text = raw.strip()
    if text.startswith("-----BEGIN"):
        return pem(text.encode("ascii"))
    return der(base64.b64decode("".join(text.split()), validate=True))


def _load_public_key(raw: str) -> ec.EllipticCurvePublicKey:
    try:
        key = _load_key(raw, serialization.load_pem_public_key, serialization.load_der_public_key)
    except (ValueError, TypeError, UnicodeError, binascii.Error):
        raise ValueError(
            "must be the verification key SendGrid shows (base64 of a DER public key)"
        ) from None
    if not isinstance(key, ec.EllipticCurvePublicKey) or not isinstance(key.curve, ec.SECP256R1):
        raise ValueError("must be an ECDSA P-256 public key, as SendGrid's verification key is")  # noqa: TRY004
    return key


def parse_secret(raw: str) -> Key:
    return EcdsaP256Key(_load_public_key(raw))


def _signature(raw: str) -> bytes:
    """The DER signature, in the one encoding a DER encoder writes, or ``malformed_signature``."""
    if len(raw) > MAX_SIGNATURE_CHARS:
        raise SignatureError("malformed_signature")
    der = b64decode_strict(raw)
    if not der or len(der) > MAX_SIGNATURE_BYTES:
        raise SignatureError("malformed_signature")
    try:
        r, s = decode_dss_signature(der)
    except ValueError:
        raise SignatureError("malformed_signature") from None
    # Trailing bytes, long-form lengths or padded integers decode to the same numbers.
    if not hmac.compare_digest(encode_dss_signature(r, s), der):
        raise SignatureError("malformed_signature")
    return der


def batch_key(events: list[JsonObject], body: bytes) -> str:
    """The SHA-256 of the batch's sorted distinct ``sg_event_id`` values, or of its body
    when an event has none."""
    ids: set[str] = set()
    for event in events:
        event_id = event.get("sg_event_id")
        if event_id is None:
            return "body:" + hashlib.sha256(body).hexdigest()
        ids.add(checked_key(event_id, "sg_event_id"))
    joined = "\n".join(sorted(ids)).encode()
    return "events:" + hashlib.sha256(joined).hexdigest()


def batch_type(events: list[JsonObject]) -> str:
    """The events' ``event`` when they all agree, else ``batch``."""
    kinds = {event.get("event") for event in events}
    if len(kinds) == 1:
        (kind,) = kinds
        if (usable := bounded_type(kind)) is not None:
            return usable
    return BATCH_TYPE


def earliest(events: list[JsonObject]) -> datetime | None:
    """When the batch's oldest event happened (its ``timestamp``, seconds)."""
    times = [t for t in (epoch_to_datetime(event.get("timestamp")) for event in events) if t]
    return min(times, default=None)


def envelope(headers: HeaderMap, body: bytes, verified: Verified) -> Envelope:
    events = parse_json_array(body)
    return Envelope(
        dedupe_key=batch_key(events, body),
        type=batch_type(events),
        occurred_at=earliest(events),
        headers=select_headers(headers, KEPT_HEADERS),
    )


def load_signing_key(raw: str) -> ec.EllipticCurvePrivateKey:
    """A P-256 private key (PEM, or base64 of PKCS#8 DER) that signs like SendGrid: for
    ``hookd send-test`` against a source whose secret is the matching public key."""
    try:
        key = _load_key(
            raw,
            lambda pem: serialization.load_pem_private_key(pem, None),
            lambda der: serialization.load_der_private_key(der, None),
        )
    except (ValueError, TypeError, UnicodeError, binascii.Error):
        raise ValueError(
            "a SendGrid sample is signed with the P-256 private key (PEM or base64 PKCS#8); "
            "the verification key SendGrid shows is public and cannot sign"
        ) from None
    if not isinstance(key, ec.EllipticCurvePrivateKey) or not isinstance(key.curve, ec.SECP256R1):
        raise ValueError("a SendGrid sample is signed with an ECDSA P-256 private key")  # noqa: TRY004
    return key


def sendgrid_headers(signing_key: str, body: bytes, now: int) -> dict[str, str]:
    """The headers SendGrid sends with ``body`` at ``now``."""
    key = load_signing_key(signing_key)
    timestamp = str(now)
    der = key.sign(timestamp.encode() + body, ec.ECDSA(hashes.SHA256()))
    return {
        "X-Twilio-Email-Event-Webhook-Signature": base64.b64encode(der).decode(),
        "X-Twilio-Email-Event-Webhook-Timestamp": timestamp,
        "Content-Type": "application/json",
    }


def sample_event(secret: str, seq: int, now: int) -> tuple[dict[str, str], bytes]:
    """A batch of two events for one message; ``secret`` is the signing (private) key."""
    message_id = f"hookd{uuid.uuid4().hex[:16]}.filter0001.{seq}.0"
    events = [
        {
            "email": "example@example.com",
            "timestamp": now - 1,
            "event": event,
            "sg_event_id": base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("="),
            "sg_message_id": message_id,
            "smtp-id": f"<{message_id}@hookd.test>",
            "category": ["hookd-send-test"],
        }
        for event in ("processed", "delivered")
    ]
    body = compact_json(events)
    return sendgrid_headers(secret, body, now), body


# No reconcile: SendGrid has no API that lists past Event Webhook events or deliveries.
PROVIDER = Provider(
    name="sendgrid",
    # SendGrid retries for up to 24 hours after the event.
    redelivery_horizon_days=1,
    # SendGrid signs the timestamp header's text followed by the raw body.
    scheme=TimestampedSignature(
        SCHEME,
        SIGNATURE_HEADER,
        TIMESTAMP_HEADER,
        "ecdsa",
        decode=_signature,
        match=match_ecdsa,
        parse_secret=parse_secret,
    ),
    envelope=envelope,
    sample_event=sample_event,
    # The configured verification key is public: a sample needs the P-256 private key.
    signing_key_needed=lambda secret: "the P-256 private key (base64 PKCS#8 DER or PEM)",
)
