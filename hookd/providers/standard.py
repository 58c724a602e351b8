"""Standard Webhooks: ``webhook-id``, ``webhook-timestamp``, ``webhook-signature``.

The signed content is ``"{id}.{timestamp}." + body``. ``v1`` is HMAC-SHA256
with the base64 key after ``whsec_``; ``v1a`` is ed25519 with the public key
after ``whpk_``. A ``whsec_`` secret only accepts ``v1`` entries and a ``whpk_``
key only ``v1a`` ones, so a downgrade from one scheme to the other never passes.
Unknown versions in the header are ignored, as the specification asks, and so is an
entry that is no signature (no version, not canonical base64, the wrong length) when
another entry is one; alone, it is ``malformed_signature``.

Svix, behind many Standard Webhooks senders, sends the same three headers named
``svix-id``, ``svix-timestamp``, ``svix-signature`` by default. Either set is read;
when a request carries both they must say the same, or it is ``conflicting_headers``:
otherwise a proxy or client that reads the other set would see another message.
"""

from __future__ import annotations

import base64
import binascii
import json
import uuid
from collections.abc import Sequence

from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)

from hookd.errors import SignatureError
from hookd.providers.base import (
    BodySigner,
    Ed25519Key,
    Envelope,
    Handwritten,
    HeaderMap,
    HmacKey,
    Key,
    Provider,
    SignedHeaders,
    Verified,
    checked_key,
    epoch_to_datetime,
    one_header,
    parse_json_object,
    select_headers,
)
from hookd.providers.signatures import (
    MAX_ENTRIES,
    Signatures,
    hmac_b64,
    match_ed25519,
    match_hmac,
    parse_b64_digest,
    parse_timestamp,
    signature_entries,
)

# (id, timestamp, signature): the specification's names, then Svix's own.
HEADER_SETS = (
    ("webhook-id", "webhook-timestamp", "webhook-signature"),
    ("svix-id", "svix-timestamp", "svix-signature"),
)
KEPT_HEADERS = (
    "webhook-id",
    "webhook-timestamp",
    "svix-id",
    "svix-timestamp",
    "content-type",
    "user-agent",
)
SIGNATURE_BYTES = {"v1": 32, "v1a": 64}


def _b64(raw: str) -> bytes:
    # Some senders show secrets without base64 padding; the reference SDK accepts that.
    padded = raw + "=" * (-len(raw) % 4)
    try:
        return base64.b64decode(padded, validate=True)
    except (binascii.Error, ValueError):
        raise ValueError("the key after the prefix is not valid base64") from None


def parse_secret(raw: str) -> Key:
    if raw.startswith("whsec_"):
        key = _b64(raw.removeprefix("whsec_"))
        if not key:
            raise ValueError("whsec_ secret is empty")
        return HmacKey(key)
    if raw.startswith("whpk_"):
        key = _b64(raw.removeprefix("whpk_"))
        if len(key) != 32:
            raise ValueError("whpk_ key must be a 32-byte ed25519 public key")
        return Ed25519Key(Ed25519PublicKey.from_public_bytes(key))
    raise ValueError("a Standard Webhooks secret starts with whsec_ or whpk_")


def parse_signing_key(raw: str) -> HmacKey | Ed25519PrivateKey:
    """A key that can sign: ``whsec_`` (v1) or ``whsk_`` (v1a private key)."""
    if raw.startswith("whsk_"):
        key = _b64(raw.removeprefix("whsk_"))
        if len(key) not in (32, 64):
            raise ValueError("whsk_ key must be a 32-byte ed25519 seed")
        return Ed25519PrivateKey.from_private_bytes(key[:32])
    parsed = parse_secret(raw)
    if not isinstance(parsed, HmacKey):
        raise ValueError("a whpk_ public key cannot sign; give the whsk_ private key")  # noqa: TRY004
    return parsed


def signed_values(headers: HeaderMap) -> tuple[str, str, str]:
    """(id, timestamp, signature) from whichever header set the request carries."""
    present = [names for names in HEADER_SETS if any(headers.get(name) for name in names)]
    if not present:
        # Name the specification's header, as before Svix's names were read.
        present = [HEADER_SETS[0]]
    first, *others = (tuple(one_header(headers, name) for name in names) for names in present)
    if any(values != first for values in others):
        raise SignatureError("conflicting_headers")
    msg_id, raw_ts, raw_sig = first
    return msg_id, raw_ts, raw_sig


def check_headers(headers: HeaderMap, now: float, tolerance_s: int) -> SignedHeaders:
    msg_id, raw_ts, raw_sig = signed_values(headers)
    if not msg_id.isascii() or not msg_id.isprintable() or len(msg_id) > 255:
        raise SignatureError("malformed_id")
    signatures = parse_signatures(raw_sig)
    ts = parse_timestamp(raw_ts, now, tolerance_s)
    return SignedHeaders(timestamp=ts, prefix=f"{msg_id}.{ts}.".encode(), signatures=signatures)


def parse_signatures(raw: str) -> Signatures:
    """``v1,<base64> v1a,<base64> …``: the entries of the versions hookd knows, each
    canonical base64 of its version's length. As the specification's libraries do, an
    entry that is no signature (no version, not canonical base64, the wrong length) is
    passed over, and one of an unknown version ignored (see ``signature_entries``)."""
    entries = raw.split()
    if len(entries) > MAX_ENTRIES:
        raise SignatureError("malformed_signature")
    known: list[tuple[str, str]] = []
    unversioned = 0
    for entry in entries:
        version, sep, encoded = entry.partition(",")
        if not sep:
            unversioned += 1
        elif version in SIGNATURE_BYTES:
            known.append((version, encoded))
    return signature_entries(
        known, lambda version, text: parse_b64_digest(text, SIGNATURE_BYTES[version]), unversioned
    )


def verify(signed: SignedHeaders, body: bytes, keys: Sequence[Key]) -> Verified:
    if any(isinstance(key, HmacKey) for key in keys):
        try:
            return match_hmac("standard-v1", signed, body, keys, "v1")
        except SignatureError:
            pass
    return match_ed25519("standard-v1a", signed, body, keys, "v1a")


def envelope(headers: HeaderMap, body: bytes, verified: Verified) -> Envelope:
    msg_id = checked_key(signed_values(headers)[0], "webhook-id")
    payload = parse_json_object(body)
    kind = payload.get("type")
    return Envelope(
        dedupe_key=msg_id,
        type=kind if isinstance(kind, str) else None,
        occurred_at=epoch_to_datetime(verified.timestamp),
        headers=select_headers(headers, KEPT_HEADERS),
    )


def standard_headers(key: str, body: bytes, msg_id: str, now: int) -> dict[str, str]:
    """Sign with ``whsec_`` (v1) or ``whsk_`` (v1a, ed25519 private key)."""
    signing_key = parse_signing_key(key)
    content = f"{msg_id}.{now}.".encode() + body
    if isinstance(signing_key, HmacKey):
        signature = "v1," + hmac_b64(signing_key.key, content)
    else:
        signature = "v1a," + base64.b64encode(signing_key.sign(content)).decode()
    return {
        "webhook-id": msg_id,
        "webhook-timestamp": str(now),
        "webhook-signature": signature,
        "Content-Type": "application/json",
    }


def sample_event(secret: str, seq: int, now: int) -> tuple[dict[str, str], bytes]:
    payload = {"type": "invoice.paid", "timestamp": now, "data": {"invoice": seq}}
    body = json.dumps(payload).encode()
    return standard_headers(secret, body, f"msg_{uuid.uuid4().hex}", now), body


def sign_body(secret: str, body: bytes, _type: str | None, now: int) -> dict[str, str]:
    return standard_headers(secret, body, f"msg_{uuid.uuid4().hex}", now)


def _signing_key_needed(secret: str) -> str | None:
    """A ``whpk_`` public key verifies v1a but cannot sign a sample."""
    return "the whsk_ private key" if secret.startswith("whpk_") else None


# No reconcile: Standard Webhooks defines no API that lists what was sent.
PROVIDER = Provider(
    name="standard",
    # Svix's retry schedule ends about 27.6 hours after the first attempt.
    redelivery_horizon_days=2,
    scheme=Handwritten(parse_secret, check_headers, verify),
    envelope=envelope,
    sample_event=sample_event,
    body_signer=BodySigner(sign_body, type_path=("type",)),
    signing_key_needed=_signing_key_needed,
)
