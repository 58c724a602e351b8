"""What a provider adapter is (``Provider`` and the values it passes around), and the
shared pieces of reading a request: header access and the payload's JSON, keys, types
and times. The signature shapes are in ``hookd.providers.signatures``.

Adapters are pure: they take headers, raw body bytes, parsed keys and ``now``
and return a value or raise ``SignatureError``/``PayloadError``. Nothing here
logs, reads a clock or touches the network.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol

import orjson
from cryptography.hazmat.primitives.asymmetric.ec import EllipticCurvePublicKey
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from cryptography.hazmat.primitives.asymmetric.rsa import RSAPublicKey

from hookd.errors import PayloadError, SignatureError
from hookd.providers.reconciling import Reconciling

if TYPE_CHECKING:
    from hookd.providers.generic import VerifySettings

# Lower-case header name -> every value received under it, in order.
HeaderMap = Mapping[str, Sequence[str]]

# A JSON object (a sender's body, an answer hookd sends): a value is whatever JSON holds
# there, so where it is read it is narrowed (``isinstance``), never trusted to have a shape.
JsonObject = dict[str, object]

MAX_DEDUPE_KEY_CHARS = 255
# The request headers every event keeps: how its body is encoded and who sent it.
SENDER_HEADERS = ("content-type", "user-agent")


@dataclass(frozen=True, slots=True)
class HmacKey:
    """A shared secret, as the bytes the provider feeds to HMAC-SHA256."""

    key: bytes = field(repr=False)


@dataclass(frozen=True, slots=True)
class Ed25519Key:
    """An ed25519 public key: Standard Webhooks v1a (``whpk_``), a Discord application's."""

    public_key: Ed25519PublicKey = field(repr=False)


@dataclass(frozen=True, slots=True)
class EcdsaP256Key:
    """An ECDSA P-256 public key (SendGrid's signed Event Webhook verification key)."""

    public_key: EllipticCurvePublicKey = field(repr=False)


@dataclass(frozen=True, slots=True)
class RsaKey:
    """An RSA public key fetched from the sender (``KeyFetch``): the key of the
    certificate at an SNS message's ``SigningCertURL``, or one key of Google's JWKS
    (``kid`` names it there)."""

    public_key: RSAPublicKey = field(repr=False)
    kid: str | None = None


@dataclass(frozen=True, slots=True)
class Identity:
    """Who the sender must say it is, where no secret is shared and the key is fetched:
    an SNS topic ARN, a Pub/Sub push subscription's service account. Public, but only
    requests signed for one of a source's identities are its own."""

    value: str


Key = HmacKey | Ed25519Key | EcdsaP256Key | RsaKey | Identity


@dataclass(frozen=True, slots=True)
class SignedHeaders:
    """What the signature headers say, parsed before the body is read."""

    timestamp: int | None
    # The bytes signed ahead of the raw body (e.g. ``b"1700000000."`` for Stripe).
    prefix: bytes
    # (scheme version, signature bytes) pairs, e.g. ("v1", b"...").
    signatures: tuple[tuple[str, bytes], ...]
    # The clock and window the headers were checked with, for schemes whose signed
    # timestamp travels in the body (Mailgun) and is checked with the signature.
    checked_at: float = 0.0
    tolerance_s: int = 0


def compact_json(value: object) -> bytes:
    """``value`` as JSON without spaces, the way most senders write a body."""
    return json.dumps(value, separators=(",", ":")).encode()


@dataclass(frozen=True, slots=True)
class Reply:
    """An answer a provider's request gets instead of hookd's own JSON: a handshake
    (nothing stored) or the acknowledgement a sender requires (Discord's interaction
    response). ``content_type`` and ``body`` are sent as they are."""

    body: bytes
    content_type: str = "application/json"
    status: int = 200
    # Extra response headers, lower-case names.
    headers: tuple[tuple[str, str], ...] = ()

    @classmethod
    def json(cls, value: object, status: int = 200) -> Reply:
        return cls(compact_json(value), status=status)

    @classmethod
    def text(cls, value: str) -> Reply:
        """A plain-text echo (a challenge token), never sniffed as HTML by a browser."""
        return cls(
            value.encode("utf-8"),
            "text/plain; charset=utf-8",
            headers=(("x-content-type-options", "nosniff"),),
        )


@dataclass(frozen=True, slots=True)
class Verified:
    """How a request was verified: kept with the event, never re-checked later."""

    scheme: str
    key_index: int
    timestamp: int | None

    def describe(self) -> str:
        ts = "" if self.timestamp is None else f";t={self.timestamp}"
        return f"{self.scheme};key={self.key_index}{ts}"


@dataclass(frozen=True, slots=True)
class Envelope:
    """What the store needs from an authentic request."""

    dedupe_key: str
    type: str | None
    occurred_at: datetime | None
    headers: dict[str, str]
    # Set when the request is a handshake to answer directly (Slack url_verification):
    # nothing is stored.
    reply: Reply | None = None
    # Set when the sender needs a particular answer to a stored event (Discord's
    # deferred interaction response); hookd's own JSON otherwise.
    ack: Reply | None = None
    # With ``reply``: a URL the receiver GETs (bounded, its answer discarded) before it
    # sends the reply, to complete a handshake (SNS's ``SubscribeURL``); a provider with
    # ``key_fetch`` only (its requests take the receiver's ASGI path). The provider
    # checks the URL's host; the receiver answers 503 when the GET fails.
    visit: str | None = None


# (secret, seq, now) -> (headers, body): a realistic event, signed as the provider signs.
SampleEvent = Callable[[str, int, int], tuple[dict[str, str], bytes]]

# (secret, body, event type or None for the provider's sample type, now) -> the headers
# that sign ``body`` as the provider signs it (``hookd send-test --body/--type``).
SignBody = Callable[[str, bytes, str | None, int], dict[str, str]]


@dataclass(frozen=True, slots=True)
class BodySigner:
    """How ``hookd send-test`` signs a body of the user's (``--body FILE``) or sets the
    event type (``--type``): ``sign``, and where the type travels: a header (``sign``
    puts it there) or, at ``type_path``, in the JSON body."""

    sign: SignBody
    type_path: tuple[str, ...] = ()


# Query parameters, each name with every value it was given, in order.
QueryMap = Mapping[str, Sequence[str]]
# (method, query, keys) -> the answer to a registration challenge that comes before any
# signed delivery (Dropbox's and X's GET challenges, Microsoft Graph's
# ``validationToken``), or None when the request is no such challenge. It raises
# ``SignatureError``/``PayloadError`` for a challenge it must refuse.
Challenge = Callable[[str, QueryMap, Sequence["Key"]], "Reply | None"]
# (method, query, headers, keys) -> as ``Challenge``, for a challenge that travels in a
# header or must prove itself with one (Okta's ``X-Okta-Verification-Challenge``, sent
# with the hook's authorization header). A provider declares one or the other.
HeaderChallenge = Callable[[str, QueryMap, HeaderMap, Sequence["Key"]], "Reply | None"]


@dataclass(frozen=True, slots=True)
class LearnsSecret:
    """A sender that hands its signing secret over in a handshake instead of having it
    configured (Asana's ``X-Hook-Secret``). The receiver keeps what it learns in the
    database (``store.learned``), sealed like bodies, and verifies the source's
    deliveries with those secrets instead of its configured ``secrets``, which only open
    the handshake (see the provider's module).

    ``header``: the request header that carries the secret (lower case); a request that
    has it is a handshake. ``opened_by(query, keys)``: the index of the configured key
    that opens this handshake, or ``HandshakeRefused``. ``parse``: the learned secret's
    text as a key, or ``PayloadError``. ``answer(secret)``: the reply the sender expects."""

    header: str
    opened_by: Callable[[QueryMap, Sequence[Key]], int]
    parse: Callable[[str], Key]
    answer: Callable[[str], Reply]


@dataclass(frozen=True, slots=True)
class KeyFetch:
    """A provider whose verifying key is published at a URL (an SNS signing certificate,
    Google's JWKS) rather than configured.

    Adapters stay pure: ``locate`` says which URL's key a request needs (after its
    headers are checked and its body read; it refuses a URL the provider does not trust,
    before anything is fetched), the receiver fetches that URL through its bounded,
    cached fetcher (``ingest.keyfetch``), and ``parse`` turns the fetched bytes into the
    keys ``verify`` is then given after the source's own (``Identity`` keys among them).
    """

    # (signed headers, body, the source's keys) -> the URL whose keys verify it.
    locate: Callable[[SignedHeaders, bytes, Sequence[Key]], str]
    # The fetched bytes -> the keys they hold, or ``ValueError``.
    parse: Callable[[bytes], tuple[Key, ...]]
    # How long fetched keys are kept when the answer says nothing (``Cache-Control:
    # max-age`` is followed, within the fetcher's bounds).
    ttl_s: float = 3600.0
    # (signed headers, body, the fetched keys) -> True when the request names a key
    # they do not hold (Google's ``kid``): the sender may have rotated its keys since
    # they were fetched, and the receiver asks the fetcher to fetch the URL again
    # (``KeyFetcher.refresh``: at most once a minute per URL) before ``verify`` is
    # given them. None: the URL names its one key (an SNS certificate).
    missing: Callable[[SignedHeaders, bytes, Sequence[Key]], bool] | None = None


@dataclass(frozen=True, slots=True)
class Configurable:
    """A provider whose scheme each source sets, in its ``[sources.verify]`` table.

    ``settings`` is the table's pydantic model; ``bind`` turns a validated table into
    the ``Provider`` that source uses (its verifier, envelope and signer closed over
    the settings), so the receiver and ``send-test`` call it like any other."""

    settings: type[VerifySettings]
    bind: Callable[[Any], Provider]


class Scheme(Protocol):
    """How a sender proves a request is its own: what its secret is, what its headers
    say (checked before the body is read; ``now`` keeps the clock's fraction) and
    whether the body matches them. The shapes in ``hookd.providers.signatures`` are
    schemes; ``Handwritten`` holds one of a sender's own."""

    def parse_secret(self, raw: str) -> Key: ...

    def check_headers(self, headers: HeaderMap, now: float, tolerance_s: int) -> SignedHeaders: ...

    def verify(self, signed: SignedHeaders, body: bytes, keys: Sequence[Key]) -> Verified: ...


@dataclass(frozen=True, slots=True)
class Handwritten:
    """A scheme written as its own three functions, for a sender no shape fits (the
    signature in the body, the URL a sender posts to, a choice of schemes)."""

    parse_secret: Callable[[str], Key]
    check_headers: Callable[[HeaderMap, float, int], SignedHeaders]
    verify: Callable[[SignedHeaders, bytes, Sequence[Key]], Verified]


@dataclass(frozen=True, slots=True)
class Provider:
    """Everything hookd knows of one provider, declared in its module and registered
    in ``hookd.providers.PROVIDERS``; nothing else in hookd names a provider."""

    # What ``provider = "..."`` in the sources file says.
    name: str
    # How its requests are verified, and what its secret is.
    scheme: Scheme
    envelope: Callable[[HeaderMap, bytes, Verified], Envelope]
    # For ``hookd send-test`` and the tests: the n-th sample event, signed.
    sample_event: SampleEvent
    # Its list API, when it has one to reconcile against.
    reconcile: Reconciling | None = None
    # ``hookd send-test --type/--body``; None: only its sample can be sent.
    body_signer: BodySigner | None = None
    # Per-source settings of its scheme, when it has any (see ``Configurable``).
    configurable: Configurable | None = None
    # For a provider that signs the URL it posts to (Twilio, Square, HubSpot): the
    # provider bound to the source's ``public_url``, which the source must then set.
    with_public_url: Callable[[str], Provider] | None = None
    # Answers registration challenges that carry no event (see ``Challenge``).
    challenge: Challenge | None = None
    # The same for a challenge read from the headers too (see ``HeaderChallenge``).
    header_challenge: HeaderChallenge | None = None
    # A signing secret handed over in a handshake, then kept (see ``LearnsSecret``).
    learns_secret: LearnsSecret | None = None
    # Headers of every 401 answer (HTTP Basic's ``WWW-Authenticate``), lower-case names.
    unauthorized_headers: tuple[tuple[str, str], ...] = ()
    # Where its verifying keys are fetched from, for a sender that publishes them.
    key_fetch: KeyFetch | None = None
    # The status of the answer to a newly stored event: 202, or 200 for a sender that
    # counts only 200 as delivered (Mailgun retries any other code for hours).
    accepted_status: int = 202
    # For ``hookd send-test``: given a configured secret, what private key must be
    # passed to sign instead (e.g. "a whpk_ public key ... --signing-key whsk_..."), or
    # None when the secret signs itself (every shared-secret scheme).
    signing_key_needed: Callable[[str], str | None] = lambda secret: None
    # How long after an event the provider may send it again, or list it to be
    # reconciled, in days: its retry window, and for a provider with a list API the
    # retention of that API. A source's key must be kept at least this long
    # (``keep_keys_days``), or a late redelivery would be stored as a new event.
    redelivery_horizon_days: float = 3.0

    @property
    def handshakes(self) -> bool:
        """Whether a request may be something to answer before (or instead of) a
        delivery: such a source's requests take the receiver's ASGI path."""
        return (
            self.challenge is not None
            or self.header_challenge is not None
            or self.learns_secret is not None
        )

    def parse_secret(self, raw: str) -> Key:
        return self.scheme.parse_secret(raw)

    def check_headers(self, headers: HeaderMap, now: float, tolerance_s: int) -> SignedHeaders:
        return self.scheme.check_headers(headers, now, tolerance_s)

    def verify(self, signed: SignedHeaders, body: bytes, keys: Sequence[Key]) -> Verified:
        return self.scheme.verify(signed, body, keys)

    def verify_request(
        self, headers: HeaderMap, body: bytes, keys: Sequence[Key], now: float, tolerance_s: int
    ) -> Verified:
        """Check headers, then the signature over ``body``: the whole verification."""
        return self.verify(self.check_headers(headers, now, tolerance_s), body, keys)


def one_header(headers: HeaderMap, name: str) -> str:
    """The single non-empty value of a signature header, or a ``SignatureError``."""
    values = headers.get(name)
    if not values:
        raise SignatureError("missing_header", name)
    if len(values) > 1:
        raise SignatureError("duplicate_header", name)
    value = values[0].strip()
    if not value:
        raise SignatureError("empty_header", name)
    return value


def optional_header(headers: HeaderMap, name: str) -> str | None:
    values = headers.get(name)
    if not values:
        return None
    return values[-1]


def loads_utf8(body: bytes) -> object:
    """``body`` decoded as UTF-8 JSON, or ``ValueError`` (nesting too deep included)."""
    try:
        return json.loads(body.decode("utf-8"))
    except RecursionError:
        raise ValueError("too deeply nested") from None


def parse_json_array(body: bytes, max_items: int | None = None) -> list[JsonObject]:
    """A delivery of several events: a non-empty JSON array of at most ``max_items``
    objects, or ``malformed_payload``."""
    try:
        value = loads_utf8(body)
    except ValueError:
        raise PayloadError("malformed_payload", "body is not a UTF-8 JSON document") from None
    if not isinstance(value, list) or not value:
        raise PayloadError("malformed_payload", "body is not a non-empty JSON array of events")
    if max_items is not None and len(value) > max_items:
        raise PayloadError("malformed_payload", "too many events in one request")
    if not all(isinstance(item, dict) for item in value):
        raise PayloadError("malformed_payload", "an event is not a JSON object")
    return value


def parse_json_object(raw: bytes | str) -> JsonObject:
    """A JSON object from UTF-8 bytes, or ``malformed_payload``.

    orjson parses (a third of the standard parser's time, on the receiver's hot path).
    What it refuses, the standard parser judges, so that hookd accepts exactly what
    ``json.loads`` accepts and a signed delivery is never refused for orjson's
    strictness. One difference in values: an integer beyond 64 bits comes back as a
    float (no provider's key or type field is one).
    """
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError:
        try:
            text = raw.decode("utf-8") if isinstance(raw, bytes) else raw
            value = json.loads(text)
        except (UnicodeDecodeError, ValueError, RecursionError):
            raise PayloadError("malformed_payload", "body is not a UTF-8 JSON document") from None
    if not isinstance(value, dict):
        raise PayloadError("malformed_payload", "body is not a JSON object")
    return value


def object_at(payload: Mapping[str, object], field: str) -> JsonObject:
    """``payload[field]`` when it is a JSON object, or ``malformed_payload``."""
    value = payload.get(field)
    if not isinstance(value, dict):
        raise PayloadError("malformed_payload", f"payload has no {field} object")
    return value


def checked_key(key: object, what: str) -> str:
    """A dedupe key: a non-empty printable string of bounded length."""
    if not isinstance(key, str) or not key or len(key) > MAX_DEDUPE_KEY_CHARS:
        raise PayloadError("malformed_payload", f"missing or invalid {what}")
    if not key.isprintable():
        raise PayloadError("malformed_payload", f"invalid characters in {what}")
    return key


# The events table's ``type`` column holds up to this many characters.
MAX_TYPE_CHARS = 255


def bounded_type(value: object) -> str | None:
    """An event type read from a payload, or None when it is not a short printable
    string (a type is informative: an odd one is left out, not refused)."""
    if isinstance(value, str) and 0 < len(value) <= MAX_TYPE_CHARS and value.isprintable():
        return value
    return None


def epoch_to_datetime(value: object) -> datetime | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        return datetime.fromtimestamp(value, UTC)
    except (OverflowError, OSError, ValueError):
        return None


def select_headers(headers: HeaderMap, names: Sequence[str]) -> dict[str, str]:
    selected: dict[str, str] = {}
    for name in names:
        value = optional_header(headers, name)
        if value is not None:
            selected[name] = value
    return selected


def media_type(headers: HeaderMap) -> str:
    raw = optional_header(headers, "content-type") or ""
    return raw.split(";", 1)[0].strip().lower()


def string_or_none(value: object) -> str | None:
    """A string read from a payload as it is (empty or not), or None."""
    return value if isinstance(value, str) else None


def text_or_none(value: object) -> str | None:
    """A non-empty string read from a payload, or None."""
    return value if isinstance(value, str) and value else None


def with_action(kind: str | None, action: object) -> str | None:
    """``issues.opened``: a kind and its action when it has one, the kind alone otherwise."""
    return f"{kind}.{action}" if kind and isinstance(action, str) and action else kind


@dataclass(frozen=True, slots=True)
class JsonEnvelope:
    """The envelope of a sender whose body is one JSON object that names its event: the
    dedupe key, type and time are fields of it, or of the object at ``inside``.

    ``key`` is the key's field and how a refusal names it; a key that does not start
    with ``key_prefix`` is ``malformed_payload``. ``type`` and ``time`` are a field and
    what reads it (an odd value is left out, not refused). ``kept``: the request
    headers the event keeps."""

    key: tuple[str, str]
    type: tuple[str, Callable[[object], str | None]]
    time: tuple[str, Callable[[object], datetime | None]]
    inside: str | None = None
    key_prefix: str = ""
    kept: tuple[str, ...] = SENDER_HEADERS

    def __call__(self, headers: HeaderMap, body: bytes, verified: Verified) -> Envelope:
        payload = parse_json_object(body)
        fields = payload if self.inside is None else object_at(payload, self.inside)
        field, name = self.key
        key = checked_key(fields.get(field), name)
        if not key.startswith(self.key_prefix):
            raise PayloadError("malformed_payload", f"{name} does not start with {self.key_prefix}")
        return Envelope(
            dedupe_key=key,
            type=self.type[1](fields.get(self.type[0])),
            occurred_at=self.time[1](fields.get(self.time[0])),
            headers=select_headers(headers, self.kept),
        )
