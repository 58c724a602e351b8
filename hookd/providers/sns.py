"""``provider = "sns"``: Amazon SNS HTTP/S subscriptions, verified with the signing
certificate SNS names in each message.

A delivery is one JSON message (SNS sends it as ``text/plain``) whose
``x-amz-sns-message-type`` header is ``Notification``, ``SubscriptionConfirmation`` or
``UnsubscribeConfirmation``, as the message's own signed ``Type`` must say too.

Verification, as AWS documents it:

- ``SigningCertURL`` must be
  ``https://sns.<region>.amazonaws.com[.cn]/SimpleNotificationService-<hex>.pem`` (no
  user, no port, no query, no other host or path): anything else is refused before
  anything is fetched. The
  receiver fetches the certificate (bounded, cached by URL; ``ingest.keyfetch``).
- The string to sign is ``name\\nvalue\\n`` for each of, in this order: for a
  Notification ``Message``, ``MessageId``, ``Subject`` (only when present),
  ``Timestamp``, ``TopicArn``, ``Type``; for the two confirmations ``Message``,
  ``MessageId``, ``SubscribeURL``, ``Timestamp``, ``Token``, ``TopicArn``, ``Type``.
- ``Signature`` (base64) is RSA PKCS#1 v1.5 over it, with SHA-1 for
  ``SignatureVersion`` 1 and SHA-256 for 2, by the certificate's key.
- ``TopicArn`` must be one of the source's ``secrets``: a source takes the topics it
  lists, nobody else's (a certificate proves only that SNS sent it).
- ``Timestamp`` (when SNS published the message; retries keep it) must be at most
  ``max_age_s`` old (default 3900: SNS retries an HTTP/S delivery for at most an hour)
  and not more than the source's ``tolerance_s`` ahead. A replay inside that window
  is a duplicate by its ``MessageId``.

Raw message delivery must be off: a raw message carries no signature.

A ``SubscriptionConfirmation`` is handled as ``[sources.verify] subscription`` says:
``"store"`` (the default) stores it as an event, for a person or a handler to visit its
``SubscribeURL``; ``"confirm"`` has hookd GET the ``SubscribeURL`` (only an https URL on
an SNS host, bounded like a key fetch), answer 200 and store nothing; when that GET
fails the answer is 503 and SNS sends the confirmation again.
"""

from __future__ import annotations

import base64
import binascii
import functools
import hmac
import re
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Literal
from urllib.parse import urlsplit

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa
from pydantic import Field

from hookd.errors import PayloadError, SignatureError
from hookd.providers.base import (
    Configurable,
    Envelope,
    Handwritten,
    HeaderMap,
    Identity,
    JsonObject,
    Key,
    KeyFetch,
    Provider,
    Reply,
    RsaKey,
    SignedHeaders,
    Verified,
    checked_key,
    compact_json,
    one_header,
    parse_json_object,
    select_headers,
)
from hookd.providers.generic import VerifySettings
from hookd.providers.rfc3339 import UTC_Z, parse_rfc3339
from hookd.providers.signatures import b64decode_strict, matching_public_key

NAME = "sns"
TYPE_HEADER = "x-amz-sns-message-type"
KEPT_HEADERS = (
    TYPE_HEADER,
    "x-amz-sns-topic-arn",
    "x-amz-sns-subscription-arn",
    "content-type",
    "user-agent",
)
NOTIFICATION = "Notification"
SUBSCRIBE = "SubscriptionConfirmation"
UNSUBSCRIBE = "UnsubscribeConfirmation"
MESSAGE_TYPES = (NOTIFICATION, SUBSCRIBE, UNSUBSCRIBE)
# The fields signed, in the order signed (``Subject`` only when the message has one).
SIGNED_FIELDS = {
    NOTIFICATION: ("Message", "MessageId", "Subject", "Timestamp", "TopicArn", "Type"),
    SUBSCRIBE: ("Message", "MessageId", "SubscribeURL", "Timestamp", "Token", "TopicArn", "Type"),
    UNSUBSCRIBE: ("Message", "MessageId", "SubscribeURL", "Timestamp", "Token", "TopicArn", "Type"),
}
OPTIONAL_FIELDS = frozenset({"Subject"})
HASHES: dict[str, type[hashes.HashAlgorithm]] = {"1": hashes.SHA1, "2": hashes.SHA256}
# SNS's own hosts, one per region (China's under amazonaws.com.cn).
SNS_HOST = re.compile(r"sns\.[a-z]{2}(?:-[a-z]+)+-\d{1,2}\.amazonaws\.com(?:\.cn)?", re.ASCII)
# Where SNS serves its signing certificates on those hosts: one name, a hex digest in
# it (32 digits in every certificate SNS has named; 16 to 64 taken). Any other path
# on an SNS host is refused before it is fetched: a sender cannot have hookd fetch
# (and keep) whatever else a host serves.
CERT_PATH = re.compile(r"/SimpleNotificationService-[0-9a-f]{16,64}\.pem", re.ASCII)
TOPIC_ARN = re.compile(
    r"arn:aws(?:-cn|-us-gov|-iso|-iso-b)?:sns:[a-z]{2}(?:-[a-z]+)+-\d{1,2}:\d{12}:"
    r"[A-Za-z0-9_-]{1,256}(?:\.fifo)?",
    re.ASCII,
)
# An RSA signature of up to a 4096-bit key: 512 bytes, 684 base64 characters.
MAX_SIGNATURE_CHARS = 684
MAX_CERT_URL_CHARS = 2048
# SNS retries an HTTP/S delivery for at most 3600 s (a hard limit), plus a margin.
DEFAULT_MAX_AGE_S = 3900
CERT_TTL_S = 86_400.0
SAMPLE_TOPIC = "arn:aws:sns:us-east-1:123456789012:hookd-sample"
SAMPLE_CERT_URL = (
    "https://sns.us-east-1.amazonaws.com/SimpleNotificationService-"
    "686f6f6b642073616d706c6520636572.pem"  # hex of "hookd sample cer"
)


class SnsSettings(VerifySettings):
    """``[sources.verify]`` of an ``sns`` source (every key has a default)."""

    # What a SubscriptionConfirmation does: stored as an event, or confirmed by hookd.
    subscription: Literal["store", "confirm"] = "store"
    # How old a message's Timestamp may be, in seconds.
    max_age_s: int = Field(default=DEFAULT_MAX_AGE_S, gt=0, le=30 * 86_400)


def parse_secret(raw: str) -> Key:
    """A topic ARN the source takes messages of."""
    arn = raw.strip()
    if not TOPIC_ARN.fullmatch(arn):
        raise ValueError(
            "must be the ARN of an SNS topic this source takes, "
            "such as arn:aws:sns:us-east-1:123456789012:orders"
        )
    return Identity(arn)


def sns_url(raw: object, *, pem: bool) -> str | None:  # noqa: PLR0911 - one per rule
    """``raw`` when it is an https URL on an SNS host (for a certificate, at
    ``/SimpleNotificationService-<hex>.pem`` with no query), else None."""
    if not isinstance(raw, str) or not raw or len(raw) > MAX_CERT_URL_CHARS:
        return None
    if not raw.isascii() or not raw.isprintable() or " " in raw:
        return None
    try:
        parts = urlsplit(raw)
        port = parts.port
    except ValueError:
        return None
    if parts.scheme != "https" or port is not None or "@" in parts.netloc:
        return None
    if parts.netloc != parts.hostname or not SNS_HOST.fullmatch(parts.netloc):
        return None
    if pem and (not CERT_PATH.fullmatch(parts.path) or parts.query or parts.fragment):
        return None
    return raw


def _message(signed: SignedHeaders, body: bytes) -> JsonObject:
    """The message whose Type the header announced; a body that is none is no
    signed message (``malformed_signature``)."""
    try:
        message = parse_json_object(body)
    except PayloadError:
        raise SignatureError("malformed_signature", "the body is not an SNS message") from None
    kind = message.get("Type")
    if not isinstance(kind, str) or kind.encode() != signed.prefix:
        raise SignatureError("conflicting_headers", f"{TYPE_HEADER} and the message's Type")
    return message


def _topic(message: JsonObject, keys: Sequence[Key]) -> str:
    """The message's TopicArn when the source takes it, else ``bad_signature``."""
    arn = message.get("TopicArn")
    if not isinstance(arn, str):
        raise SignatureError("malformed_signature", "no TopicArn")
    wanted = arn.encode()
    # Every identity compared, in constant time each.
    taken = [hmac.compare_digest(k.value.encode(), wanted) for k in keys if isinstance(k, Identity)]
    if not any(taken):
        raise SignatureError("bad_signature", "TopicArn is not one of the source's secrets")
    return arn


def string_to_sign(message: JsonObject) -> bytes:
    """What SNS signs for this message (see the module's notes)."""
    kind = message.get("Type")
    fields = SIGNED_FIELDS.get(kind) if isinstance(kind, str) else None
    if fields is None:
        raise SignatureError("malformed_signature", "not an SNS message type")
    out: list[str] = []
    for name in fields:
        value = message.get(name)
        if value is None and name in OPTIONAL_FIELDS:
            continue
        if not isinstance(value, str):
            raise SignatureError("malformed_signature", f"{name} is missing")
        out.append(f"{name}\n{value}\n")
    return "".join(out).encode("utf-8")


def check_headers(headers: HeaderMap, now: float, tolerance_s: int) -> SignedHeaders:
    kind = one_header(headers, TYPE_HEADER)
    if kind not in MESSAGE_TYPES:
        raise SignatureError("malformed_signature", f"{TYPE_HEADER} is no SNS message type")
    return SignedHeaders(None, kind.encode(), (), checked_at=now, tolerance_s=tolerance_s)


def locate(signed: SignedHeaders, body: bytes, keys: Sequence[Key]) -> str:
    """The message's SigningCertURL, once its topic is one the source takes and the
    URL is SNS's own; refused otherwise, before anything is fetched."""
    message = _message(signed, body)
    _topic(message, keys)
    url = sns_url(message.get("SigningCertURL"), pem=True)
    if url is None:
        raise SignatureError(
            "malformed_signature",
            "SigningCertURL is not /SimpleNotificationService-<hex>.pem on an SNS host",
        )
    return url


def parse_certificate(raw: bytes) -> tuple[Key, ...]:
    """The RSA key of a PEM certificate, or ``ValueError``."""
    cert = x509.load_pem_x509_certificate(raw)
    key = cert.public_key()
    if not isinstance(key, rsa.RSAPublicKey):
        raise ValueError("not an RSA certificate")  # noqa: TRY004
    return (RsaKey(key),)


def bind(settings: SnsSettings) -> Provider:
    """The ``sns`` provider as one source's settings make it."""

    def verify(signed: SignedHeaders, body: bytes, keys: Sequence[Key]) -> Verified:
        message = _message(signed, body)
        _topic(message, keys)
        # ``locate`` checked it before the key was fetched; the key given must be its.
        if sns_url(message.get("SigningCertURL"), pem=True) is None:
            raise SignatureError("malformed_signature", "SigningCertURL is not SNS's")
        version = message.get("SignatureVersion")
        raw = message.get("Signature")
        if version is None or raw is None:
            raise SignatureError("missing_signature")
        if not isinstance(version, str) or version not in HASHES:
            raise SignatureError("malformed_signature", "SignatureVersion is not 1 or 2")
        if not isinstance(raw, str) or len(raw) > MAX_SIGNATURE_CHARS:
            raise SignatureError("malformed_signature")
        signature = b64decode_strict(raw)
        text = string_to_sign(message)
        algorithm = HASHES[version]()

        def check(key: RsaKey, candidate: bytes) -> None:
            if len(candidate) != key.public_key.key_size // 8:
                raise InvalidSignature
            key.public_key.verify(candidate, text, padding.PKCS1v15(), algorithm)

        index = matching_public_key(keys, RsaKey, [signature], check)
        stamp = message.get("Timestamp")
        moment = parse_rfc3339(stamp) if isinstance(stamp, str) and UTC_Z.fullmatch(stamp) else None
        if moment is None:
            raise SignatureError("malformed_timestamp")
        ts = moment.timestamp()
        if ts < signed.checked_at - settings.max_age_s:
            raise SignatureError("timestamp_too_old")
        if ts > signed.checked_at + signed.tolerance_s:
            raise SignatureError("timestamp_in_future")
        return Verified(f"sns-v{version}", index, int(ts // 1))

    def envelope(headers: HeaderMap, body: bytes, verified: Verified) -> Envelope:
        message = parse_json_object(body)
        kind = message.get("Type")
        arn = message.get("TopicArn")
        if kind not in MESSAGE_TYPES or not isinstance(arn, str):
            raise PayloadError("malformed_payload", "not an SNS message")
        topic = arn.rsplit(":", 1)[-1]
        kept = select_headers(headers, KEPT_HEADERS)
        if kind == SUBSCRIBE and settings.subscription == "confirm":
            url = sns_url(message.get("SubscribeURL"), pem=False)
            if url is None:
                raise PayloadError(
                    "malformed_payload", "SubscribeURL is not an https URL on an SNS host"
                )
            answer = Reply.json({"subscription": "confirmed"})
            return Envelope("", f"{topic}.{kind}", None, kept, reply=answer, visit=url)
        stamp = message.get("Timestamp")
        occurred: datetime | None = parse_rfc3339(stamp)
        return Envelope(
            dedupe_key=checked_key(message.get("MessageId"), "MessageId"),
            type=f"{topic}.{kind}"[:255],
            occurred_at=occurred,
            headers=kept,
        )

    return Provider(
        name=NAME,
        scheme=Handwritten(parse_secret, check_headers, verify),
        envelope=envelope,
        sample_event=sample_event,
        configurable=CONFIGURABLE,
        key_fetch=KeyFetch(locate=locate, parse=parse_certificate, ttl_s=CERT_TTL_S),
        # SNS retries an HTTP/S delivery for at most an hour.
        redelivery_horizon_days=1,
        # A topic ARN verifies nothing alone: a sample needs the certificate's key.
        signing_key_needed=lambda secret: (
            "the RSA private key (PEM) of the certificate at the sample's SigningCertURL"
        ),
    )


# Loading an RSA key checks it, which costs milliseconds: a sender signing many samples
# (send-test --count, the fuzzers) loads each key once.
@functools.lru_cache(maxsize=8)
def load_signing_key(raw: str) -> rsa.RSAPrivateKey:
    """An RSA private key (PEM), for the tests and ``hookd send-test``."""
    try:
        key = serialization.load_pem_private_key(raw.strip().encode("ascii"), None)
    except (ValueError, TypeError, UnicodeError, binascii.Error):
        raise ValueError("an SNS sample is signed with an RSA private key (PEM)") from None
    if not isinstance(key, rsa.RSAPrivateKey):
        raise ValueError("an SNS sample is signed with an RSA private key (PEM)")  # noqa: TRY004
    return key


def sign_message(signing_key: str, message: JsonObject, version: str = "1") -> JsonObject:
    """``message`` with its ``SignatureVersion`` and ``Signature`` as SNS adds them."""
    key = load_signing_key(signing_key)
    signature = key.sign(string_to_sign(message), padding.PKCS1v15(), HASHES[version]())
    return {
        **message,
        "SignatureVersion": version,
        "Signature": base64.b64encode(signature).decode(),
    }


def message_headers(message: JsonObject) -> dict[str, str]:
    """The headers SNS sends with ``message``."""
    headers = {
        "x-amz-sns-message-type": str(message["Type"]),
        "x-amz-sns-message-id": str(message["MessageId"]),
        "x-amz-sns-topic-arn": str(message["TopicArn"]),
        "Content-Type": "text/plain; charset=UTF-8",
        "User-Agent": "Amazon Simple Notification Service Agent",
    }
    if message["Type"] == NOTIFICATION:
        headers["x-amz-sns-subscription-arn"] = f"{message['TopicArn']}:{uuid.uuid4()}"
    return headers


def sns_time(now: float) -> str:
    """A Timestamp as SNS writes it: UTC, milliseconds, ``Z``."""
    moment = datetime.fromtimestamp(now, UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def sample_event(secret: str, seq: int, now: int) -> tuple[dict[str, str], bytes]:
    """A Notification of ``SAMPLE_TOPIC``; ``secret`` is the certificate's private key."""
    message: JsonObject = {
        "Type": NOTIFICATION,
        "MessageId": str(uuid.uuid4()),
        "TopicArn": SAMPLE_TOPIC,
        "Subject": f"hookd sample {seq}",
        "Message": compact_json({"n": seq, "hello": "world"}).decode(),
        "Timestamp": sns_time(now),
        "SigningCertURL": SAMPLE_CERT_URL,
        "UnsubscribeURL": "https://sns.us-east-1.amazonaws.com/?Action=Unsubscribe",
    }
    signed = sign_message(secret, message)
    return message_headers(signed), compact_json(signed)


CONFIGURABLE = Configurable(settings=SnsSettings, bind=bind)
EXAMPLE = SnsSettings()
PROVIDER = bind(EXAMPLE)
