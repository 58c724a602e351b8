"""``provider = "pubsub"``: Google Cloud Pub/Sub push subscriptions with authentication.

Pub/Sub sends ``Authorization: Bearer <token>``, an OpenID Connect ID token (a JWT)
signed RS256 by one of Google's keys, which the receiver fetches from the JWKS at
``[sources.verify] jwks_url`` (Google's by default; bounded, cached for the answer's
``Cache-Control: max-age``; ``ingest.keyfetch``). Verified:

- the token's header says ``alg`` RS256 and a ``kid`` the JWKS has; its signature is
  that key's (RSA PKCS#1 v1.5, SHA-256). A ``kid`` the kept JWKS lacks has the
  receiver fetch it again first (``missing``; at most once a minute), for a key
  Google added since;
- ``iss`` is ``https://accounts.google.com`` or ``accounts.google.com``;
- ``aud`` is the source's ``audience`` (the audience set on the push subscription);
- ``email`` is one of the source's ``secrets`` (the subscription's service account)
  and ``email_verified`` is true;
- ``exp`` has not passed and ``iat`` is not ahead, each give or take the source's
  ``tolerance_s``.

The token proves who sent the request, not what it says: the body is not signed. A
token seen once can carry another body until it expires (an hour); a replay of the
same message is a duplicate by its ``messageId``.

The body is ``{"message": {"data", "attributes", "messageId", "publishTime"},
"subscription"}``. Dedupe key: ``message.messageId``; occurred_at: ``publishTime``;
type: the attribute named by ``type_attribute`` when set and present, else the short
name of the subscription (``projects/p/subscriptions/NAME``).
"""

from __future__ import annotations

import base64
import binascii
import functools
import hmac
import json
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa
from pydantic import field_validator

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
    RsaKey,
    SignedHeaders,
    Verified,
    bounded_type,
    checked_key,
    compact_json,
    object_at,
    one_header,
    parse_json_object,
    select_headers,
)
from hookd.providers.generic import VerifySettings
from hookd.providers.rfc3339 import parse_rfc3339
from hookd.providers.signatures import matching_public_key

NAME = "pubsub"
GOOGLE_JWKS = "https://www.googleapis.com/oauth2/v3/certs"
ISSUERS = ("https://accounts.google.com", "accounts.google.com")
ALGORITHM = "RS256"
KEPT_HEADERS = ("content-type", "user-agent")
# A Google ID token is about a kilobyte; anything past this is no such token.
MAX_TOKEN_CHARS = 8192
MAX_CLAIM_CHARS = 512
JWKS_TTL_S = 3600.0
SAMPLE_EMAIL = "hookd-push@hookd-sample.iam.gserviceaccount.com"
SAMPLE_KID = "hookd-sample-key"
SAMPLE_SUBSCRIPTION = "projects/hookd-sample/subscriptions/orders-push"


class PubsubSettings(VerifySettings):
    """``[sources.verify]`` of a ``pubsub`` source."""

    # The audience set on the push subscription (by default its push endpoint URL).
    audience: str
    # The message attribute that names the event's type, if the publisher sets one.
    type_attribute: str | None = None
    # Where Google's token keys are published.
    jwks_url: str = GOOGLE_JWKS

    @field_validator("audience", "type_attribute")
    @classmethod
    def _text(cls, value: str | None) -> str | None:
        if value is not None and not (0 < len(value) <= MAX_CLAIM_CHARS and value.isprintable()):
            raise ValueError(f"must be 1 to {MAX_CLAIM_CHARS} printable characters")
        return value

    @field_validator("jwks_url")
    @classmethod
    def _https(cls, value: str) -> str:
        if not value.startswith("https://") or len(value) > MAX_CLAIM_CHARS:
            raise ValueError("must be an https:// URL (Google's JWKS by default)")
        return value


def parse_secret(raw: str) -> Key:
    """The email of the service account the push subscription authenticates as."""
    email = raw.strip()
    name, at, domain = email.partition("@")
    if not (at and name and "." in domain and email.isprintable() and " " not in email):
        raise ValueError(
            "must be the email of the push subscription's service account, such as "
            "push@my-project.iam.gserviceaccount.com"
        )
    return Identity(email)


def b64url_decode(part: str) -> bytes:
    """Unpadded base64url, in the one form an encoder writes, or ``malformed_signature``."""
    try:
        raw = base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))
    except (binascii.Error, ValueError):
        raise SignatureError("malformed_signature") from None
    if b64url_encode(raw) != part:
        raise SignatureError("malformed_signature")
    return raw


def b64url_encode(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def _json_part(part: str) -> JsonObject:
    try:
        value = json.loads(b64url_decode(part))
    except (ValueError, RecursionError):
        raise SignatureError("malformed_signature") from None
    if not isinstance(value, dict):
        raise SignatureError("malformed_signature")
    return value


def _parts(signed: SignedHeaders) -> tuple[JsonObject, JsonObject]:
    """The token's header and claims, from the signed input ``check_headers`` kept."""
    head, _, claims = signed.prefix.decode("ascii").partition(".")
    return _json_part(head), _json_part(claims)


def _seconds(claims: JsonObject, name: str) -> int:
    value = claims.get(name)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise SignatureError("malformed_timestamp", f"token claim {name}")
    return int(value)


def check_headers(headers: HeaderMap, now: float, tolerance_s: int) -> SignedHeaders:
    """The bearer token, its header and times checked; its signature is checked with
    the fetched keys (``verify``)."""
    raw = one_header(headers, "authorization")
    scheme, _, token = raw.partition(" ")
    if scheme.lower() != "bearer" or not token or len(token) > MAX_TOKEN_CHARS:
        raise SignatureError("malformed_signature", "not a bearer token")
    if not token.isascii():
        raise SignatureError("malformed_signature")
    parts = token.split(".")
    if len(parts) != 3:
        raise SignatureError("malformed_signature", "not a JWT")
    head = _json_part(parts[0])
    if head.get("alg") != ALGORITHM or not isinstance(head.get("kid"), str):
        raise SignatureError("malformed_signature", "not an RS256 token with a kid")
    claims = _json_part(parts[1])
    expires, issued = _seconds(claims, "exp"), _seconds(claims, "iat")
    if expires < now - tolerance_s:
        raise SignatureError("timestamp_too_old", "the token expired")
    if issued > now + tolerance_s:
        raise SignatureError("timestamp_in_future", "the token is issued ahead")
    signature = b64url_decode(parts[2])
    prefix = f"{parts[0]}.{parts[1]}".encode("ascii")
    return SignedHeaders(
        issued, prefix, ((ALGORITHM, signature),), checked_at=now, tolerance_s=tolerance_s
    )


def _int(value: object) -> int:
    if not isinstance(value, str):
        raise ValueError("not a JWK number")  # noqa: TRY004 - the parse's one error
    return int.from_bytes(base64.urlsafe_b64decode(value + "=" * (-len(value) % 4)), "big")


def parse_jwks(raw: bytes) -> tuple[Key, ...]:
    """The RSA keys of a JWKS (``{"keys": [{"kty": "RSA", "kid", "n", "e"}]}``), or
    ``ValueError`` when it holds none."""
    try:
        document = json.loads(raw)
    except (ValueError, RecursionError):
        raise ValueError("not JSON") from None
    entries = document.get("keys") if isinstance(document, dict) else None
    if not isinstance(entries, list):
        raise ValueError("not a JWKS")  # noqa: TRY004 - the parse's one error
    keys: list[Key] = []
    for entry in entries:
        if not isinstance(entry, dict) or entry.get("kty") != "RSA":
            continue
        # A key for RS256 signatures: what it says of its algorithm and use, if anything.
        if entry.get("alg") not in (None, ALGORITHM) or entry.get("use") not in (None, "sig"):
            continue
        kid = entry.get("kid")
        if not isinstance(kid, str):
            continue
        try:
            public = rsa.RSAPublicNumbers(_int(entry.get("e")), _int(entry.get("n"))).public_key()
        except (ValueError, binascii.Error):
            continue
        keys.append(RsaKey(public, kid))
    if not keys:
        raise ValueError("no RS256 key in the JWKS")
    return tuple(keys)


def _matches(value: object, wanted: Sequence[str]) -> bool:
    """``value`` is a string equal to one of ``wanted`` (each compared in constant time)."""
    if not isinstance(value, str):
        return False
    given = value.encode()
    # A list, not a generator: every one compared, whichever matches.
    return any([hmac.compare_digest(given, w.encode()) for w in wanted])  # noqa: C419


def bind(settings: PubsubSettings) -> Provider:
    """The ``pubsub`` provider as one source's settings make it."""

    def locate(signed: SignedHeaders, body: bytes, keys: Sequence[Key]) -> str:
        return settings.jwks_url

    def missing(signed: SignedHeaders, body: bytes, keys: Sequence[Key]) -> bool:
        """The token's ``kid`` is none of the fetched keys' (a key Google added since)."""
        try:
            kid = _parts(signed)[0].get("kid")
        except SignatureError:  # checked by check_headers already; verify refuses it
            return False
        return all(not (isinstance(k, RsaKey) and k.kid == kid) for k in keys)

    def verify(signed: SignedHeaders, body: bytes, keys: Sequence[Key]) -> Verified:
        head, claims = _parts(signed)
        kid = head.get("kid")
        message = signed.prefix

        def check(key: RsaKey, signature: bytes) -> None:
            if key.kid != kid or len(signature) != key.public_key.key_size // 8:
                raise InvalidSignature
            key.public_key.verify(signature, message, padding.PKCS1v15(), hashes.SHA256())

        candidates = [sig for alg, sig in signed.signatures if alg == ALGORITHM]
        index = matching_public_key(keys, RsaKey, candidates, check)
        if not _matches(claims.get("iss"), ISSUERS):
            raise SignatureError("bad_signature", "the token is not Google's")
        audience = claims.get("aud")
        audiences = audience if isinstance(audience, list) else [audience]
        if not any(_matches(a, [settings.audience]) for a in audiences):
            raise SignatureError("bad_signature", "the token's aud is not the source's audience")
        emails = [k.value for k in keys if isinstance(k, Identity)]
        if not _matches(claims.get("email"), emails) or claims.get("email_verified") is not True:
            raise SignatureError("bad_signature", "the token's email is not one of the secrets")
        return Verified("pubsub-oidc", index, signed.timestamp)

    def envelope(headers: HeaderMap, body: bytes, verified: Verified) -> Envelope:
        payload = parse_json_object(body)
        message = object_at(payload, "message")
        key = message.get("messageId", message.get("message_id"))
        event_type: str | None = None
        attributes = message.get("attributes")
        if settings.type_attribute is not None and isinstance(attributes, dict):
            event_type = bounded_type(attributes.get(settings.type_attribute))
        subscription = payload.get("subscription")
        if event_type is None and isinstance(subscription, str):
            event_type = bounded_type(subscription.rsplit("/", 1)[-1])
        publish = message.get("publishTime", message.get("publish_time"))
        if not isinstance(message.get("data", ""), str):
            raise PayloadError("malformed_payload", "message.data is not a string")
        return Envelope(
            dedupe_key=checked_key(key, "message.messageId"),
            type=event_type,
            occurred_at=parse_rfc3339(publish),
            headers=select_headers(headers, KEPT_HEADERS),
        )

    def sample_event(secret: str, seq: int, now: int) -> tuple[dict[str, str], bytes]:
        """A push of one message; ``secret`` is the RSA private key (PEM) of
        ``SAMPLE_KID``, the token's ``aud`` the source's audience."""
        return push_sample(secret, seq, now, settings.audience)

    return Provider(
        name=NAME,
        scheme=Handwritten(parse_secret, check_headers, verify),
        envelope=envelope,
        sample_event=sample_event,
        configurable=CONFIGURABLE,
        key_fetch=KeyFetch(locate=locate, parse=parse_jwks, ttl_s=JWKS_TTL_S, missing=missing),
        # Pub/Sub keeps an unacknowledged message for 7 days by default (at most 31).
        redelivery_horizon_days=7,
        signing_key_needed=lambda secret: (
            "an RSA private key (PEM) whose public key the JWKS at jwks_url holds"
        ),
    )


# Loading an RSA key checks it, which costs milliseconds: a sender signing many samples
# (send-test --count, the fuzzers) loads each key once.
@functools.lru_cache(maxsize=8)
def load_signing_key(raw: str) -> rsa.RSAPrivateKey:
    try:
        key = serialization.load_pem_private_key(raw.strip().encode("ascii"), None)
    except (ValueError, TypeError, UnicodeError, binascii.Error):
        raise ValueError("a Pub/Sub sample is signed with an RSA private key (PEM)") from None
    if not isinstance(key, rsa.RSAPrivateKey):
        raise ValueError("a Pub/Sub sample is signed with an RSA private key (PEM)")  # noqa: TRY004
    return key


def id_token(signing_key: str, claims: JsonObject, kid: str = SAMPLE_KID) -> str:
    """An RS256 JWT of ``claims``, as Google signs a push request's token."""
    key = load_signing_key(signing_key)
    head = b64url_encode(compact_json({"alg": ALGORITHM, "kid": kid, "typ": "JWT"}))
    body = b64url_encode(compact_json(claims))
    signature = key.sign(f"{head}.{body}".encode(), padding.PKCS1v15(), hashes.SHA256())
    return f"{head}.{body}.{b64url_encode(signature)}"


def push_claims(audience: str, now: int, email: str = SAMPLE_EMAIL) -> JsonObject:
    """The claims of a push request's token issued at ``now``."""
    return {
        "aud": audience,
        "azp": "113774264463038321964",
        "email": email,
        "email_verified": True,
        "exp": now + 3600,
        "iat": now,
        "iss": "https://accounts.google.com",
        "sub": "113774264463038321964",
    }


def push_body(seq: int, now: int, subscription: str = SAMPLE_SUBSCRIPTION) -> bytes:
    message_id = str(10_000_000_000_000 + seq * 1000 + uuid.uuid4().int % 1000)
    published = datetime.fromtimestamp(now, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    data = base64.b64encode(compact_json({"n": seq, "hello": "world"})).decode()
    return compact_json(
        {
            "message": {
                "attributes": {"kind": "order.created"},
                "data": data,
                "messageId": message_id,
                "message_id": message_id,
                "publishTime": published,
                "publish_time": published,
            },
            "subscription": subscription,
        }
    )


def push_sample(
    signing_key: str, seq: int, now: int, audience: str
) -> tuple[dict[str, str], bytes]:
    token = id_token(signing_key, push_claims(audience, now))
    headers = {
        "Authorization": f"Bearer {token}",
        "Content-Type": "application/json",
        "User-Agent": "APIs-Google; (+https://developers.google.com/webmasters/APIs-Google.html)",
    }
    return headers, push_body(seq, now)


CONFIGURABLE = Configurable(settings=PubsubSettings, bind=bind)
# What the registry holds: an example audience. A source is always served by ``bind``
# of its own table (``audience`` has no default).
EXAMPLE = PubsubSettings(audience="https://hooks.example.com/hooks/pubsub")
PROVIDER = bind(EXAMPLE)
