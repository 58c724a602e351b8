"""Twilio: ``X-Twilio-Signature`` = base64 HMAC-SHA1 (auth token) of the URL Twilio
posted to, followed by the POST parameters.

What is signed depends on the body:

- ``application/x-www-form-urlencoded`` (most webhooks): the URL, then every parameter
  name and value concatenated with no separator, names in sorted order; a name sent
  several times contributes each distinct value once, values sorted (as Twilio's own
  libraries do). Reordering the parameters in the body therefore keeps the signature.
- ``application/json``: Twilio appends ``bodySHA256=<hex SHA-256 of the body>`` to the
  URL's query and signs that URL alone. hookd rebuilds that URL from the body it
  received, so a changed body changes the URL and fails the signature.

The URL is the one registered with Twilio, query string included, which hookd behind a
proxy cannot know: a twilio source sets ``public_url`` and the provider is bound to it.
As Twilio's libraries do, the URL also verifies with its port removed, or with the
scheme's default port added when it has none.

A Webhook Setting with a SharedKey (``X-Twilio-Webhooks-Signature-Settings:
key=…,algorithm=HMAC_SHA256``) signs the same string with HMAC-SHA256; the source then
lists that key's secret among its ``secrets``.

Twilio signs no timestamp, so replays are bounded by deduplication alone. The dedupe
key is a digest of what Twilio signed (the sorted parameters, or the JSON body):
``I-Twilio-Idempotency-Token`` is kept but is not signed, so a replay carrying a fresh
one would otherwise be stored again.

Two kinds of form body are keyed by what they report instead, so that reconciliation
(which lists messages and calls, never the callbacks' parameters) can name them:

- a message status callback (``MessageSid`` and ``MessageStatus``):
  ``message:<MessageSid>:<MessageStatus>``;
- a call status callback (``CallSid`` and ``CallStatus``, with ``CallbackSource`` =
  ``call-progress-events``, which only status callbacks carry; a TwiML request or a
  ``<Gather>`` action has the same two but is no status change): ``call:<CallSid>:<CallStatus>``.

One resource reports each status once, so the key is as unique as the digest, and as
signed (both are parameters Twilio signed). A recording or transcription callback,
which names its call too, keeps the digest.
"""

from __future__ import annotations

import hashlib
import json
import re
import secrets
from collections.abc import Sequence
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from functools import partial
from typing import Annotated, Literal
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from pydantic import Field, field_validator

from hookd.errors import PayloadError, SignatureError
from hookd.providers.base import (
    Envelope,
    Handwritten,
    HeaderMap,
    Key,
    Provider,
    SignedHeaders,
    Verified,
    bounded_type,
    checked_key,
    loads_utf8,
    media_type,
    one_header,
    select_headers,
)
from hookd.providers.reconciling import ReconcileConfig, Reconciling, matching
from hookd.providers.rfc3339 import parse_isoformat
from hookd.providers.signatures import hmac_b64, hmac_secret, matching_key, parse_b64_digest

NAME = "twilio"
SIGNATURE_HEADER = "x-twilio-signature"
SETTINGS_HEADER = "x-twilio-webhooks-signature-settings"
KEPT_HEADERS = (
    "i-twilio-idempotency-token",
    "x-twilio-webhooks-signature-settings",
    "x-home-region",
    "content-type",
    "user-agent",
)
# Webhook Settings name their algorithm; no settings header means the auth token and SHA-1.
ALGORITHMS = {"HMAC_SHA1": "sha1", "HMAC_SHA256": "sha256"}
DIGEST_SIZES = {"sha1": 20, "sha256": 32}
DEFAULT_PORTS = {"http": "80", "https": "443"}
# What the registry's entry is bound to; a source is always bound to its own public_url.
EXAMPLE_URL = "https://hookd.example/hooks/twilio"
# A status callback carries a few dozen parameters; far more is not Twilio.
MAX_PARAMETERS = 1000
# The parameter whose value names the event, and the resource it belongs to, in the
# order they are looked for (a recording callback also names its call, for instance).
STATUS_PARAMETERS = (
    ("TranscriptionStatus", "transcription"),
    ("RecordingStatus", "recording"),
    ("MessageStatus", "message"),
    ("SmsStatus", "message"),
    ("CallStatus", "call"),
)


# What only a call's status callback carries (its other parameters a TwiML request has).
CALL_PROGRESS = "call-progress-events"
# A callback that names these reports a recording or a transcription, not its call.
NOT_THE_RESOURCE = ("RecordingStatus", "TranscriptionStatus")


def status_key(params: dict[str, str]) -> str | None:
    """``message:<sid>:<status>`` or ``call:<sid>:<status>`` for a message's or call's
    status callback; None for any other form body."""
    if any(params.get(name) for name in NOT_THE_RESOURCE):
        return None
    sid, status = params.get("MessageSid"), params.get("MessageStatus")
    if sid and status:
        return message_key(sid, status)
    sid, status = params.get("CallSid"), params.get("CallStatus")
    if sid and status and params.get("CallbackSource") == CALL_PROGRESS:
        return call_key(sid, status)
    return None


def message_key(sid: str, status: str) -> str:
    return f"message:{sid}:{status}"


def call_key(sid: str, status: str) -> str:
    return f"call:{sid}:{status}"


class TwilioReconcile(ReconcileConfig):
    """``[sources.reconcile]`` of a Twilio source: the account whose Messages (and
    Calls) are listed, ``token`` its auth token (or the secret of ``api_key_sid``),
    which lists, and which of their items post their status callbacks to this source."""

    account_sid: Annotated[
        str | None, matching(r"AC[0-9a-f]{32}", 'must be an Account SID ("AC" and 32 hex digits)')
    ] = None
    # An API key ("SK…") to authenticate with instead of the account's auth token.
    api_key_sid: Annotated[
        str | None, matching(r"SK[0-9a-f]{32}", 'must be an API key SID ("SK" and 32 hex digits)')
    ] = None
    lists: tuple[Literal["messages", "calls"], ...] = ("messages",)
    # Only what these numbers (E.164, or "whatsapp:+…") send, asked of the API (From).
    from_numbers: tuple[str, ...] = ()
    # Only messages of these Messaging Services (checked on our side).
    messaging_service_sids: tuple[str, ...] = ()
    # How long after it was sent (a call: started) a message or call may still reach
    # the status the list shows: the list is asked from this much before the window.
    status_delay_s: float = Field(default=14_400.0, ge=0, le=7 * 86_400)

    @field_validator("from_numbers")
    @classmethod
    def _numbers(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for number in value:
            if not re.fullmatch(r"([a-z]+:)?\+[1-9][0-9]{6,14}", number):
                raise ValueError(f'{number!r} is not an E.164 number ("+15551234567")')
        return value

    @field_validator("messaging_service_sids")
    @classmethod
    def _services(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for sid in value:
            if not re.fullmatch(r"MG[0-9a-f]{32}", sid):
                raise ValueError(f'{sid!r} is not a Messaging Service SID ("MG…")')
        return value

    @field_validator("lists")
    @classmethod
    def _lists(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if not value:
            raise ValueError('names no list: "messages", "calls" or both')
        return value

    def incomplete(self) -> tuple[str, str] | None:
        missing = super().incomplete()
        if missing is None and self.account_sid is None:
            return "account_sid", "is required for twilio"
        return missing


def algorithm_of(headers: HeaderMap) -> str:
    """The hash a request says it was signed with: SHA-1 unless a Webhook Setting names
    another (``key=…,algorithm=HMAC_SHA256``)."""
    values = headers.get(SETTINGS_HEADER)
    if not values:
        return "sha1"
    if len(values) > 1:
        raise SignatureError("duplicate_header", SETTINGS_HEADER)
    named = ""
    for part in values[0].split(","):
        name, sep, value = part.partition("=")
        if sep and name.strip() == "algorithm":
            named = value.strip()
    if not named:
        return "sha1"
    algorithm = ALGORITHMS.get(named.upper())
    if algorithm is None:
        raise SignatureError("malformed_signature")
    return algorithm


def url_variants(url: str) -> tuple[str, ...]:
    """``url`` and the spelling of it with its port removed (or, with none, the scheme's
    default port added): Twilio's libraries accept either, since Twilio signs either."""
    parts = urlsplit(url)
    userinfo, at, hostport = parts.netloc.rpartition("@")
    try:
        port = parts.port
    except ValueError:
        return (url,)
    if port is None:
        default = DEFAULT_PORTS.get(parts.scheme.lower())
        if default is None:
            return (url,)
        other = f"{hostport}:{default}"
    else:
        other = hostport[: hostport.rindex(":")]
    variant = urlunsplit(parts._replace(netloc=f"{userinfo}{at}{other}"))
    return (url, variant) if variant != url else (url,)


def with_body_hash(url: str, body: bytes) -> str:
    """The URL Twilio posts a JSON body to: ``bodySHA256`` appended to its query."""
    digest = hashlib.sha256(body).hexdigest()
    if "?" not in url:
        sep = "?"
    elif url.endswith(("?", "&")):
        sep = ""
    else:
        sep = "&"
    return f"{url}{sep}bodySHA256={digest}"


def form_parameters(body: bytes) -> list[tuple[str, str]]:
    """The body's parameters, or ``ValueError`` when it is no form body."""
    return parse_qsl(
        body.decode("utf-8"),
        keep_blank_values=True,
        strict_parsing=True,
        encoding="utf-8",
        errors="strict",
        max_num_fields=MAX_PARAMETERS,
    )


def canonical_pairs(pairs: Sequence[tuple[str, str]]) -> list[tuple[str, str]]:
    """Each distinct (name, value) once, names sorted, a name's values sorted."""
    return sorted(set(pairs))


def signed_parameters(pairs: Sequence[tuple[str, str]]) -> bytes:
    """What follows the URL in the signed string of a form body."""
    return "".join(name + value for name, value in canonical_pairs(pairs)).encode("utf-8")


# Its Messages and Calls lists show each one's status: the callback of the status
# they show is reconciled.
RECONCILING = Reconciling(
    settings=TwilioReconcile,
    api_url="https://api.twilio.com",
    adapter="reconcile.providers.twilio:TwilioAdapter",
    # Twilio posts a status callback within seconds of the change: five minutes.
    settle_s=300.0,
    # Twilio keeps message and call records about 13 months (395 days).
    retention_days=395,
)


def bind(public_url: str) -> Provider:
    """The Twilio provider for a source whose webhooks Twilio posts to ``public_url``."""

    def check_headers(headers: HeaderMap, now: float, tolerance_s: int) -> SignedHeaders:
        raw = one_header(headers, SIGNATURE_HEADER)
        algorithm = algorithm_of(headers)
        signature = parse_b64_digest(raw, DIGEST_SIZES[algorithm])
        mode = "json" if media_type(headers) == "application/json" else "form"
        return SignedHeaders(None, b"", ((f"{mode}-{algorithm}", signature),))

    def verify(signed: SignedHeaders, body: bytes, keys: Sequence[Key]) -> Verified:
        if not signed.signatures:
            raise SignatureError("missing_signature")
        version, signature = signed.signatures[0]
        mode, _, algorithm = version.partition("-")
        if mode == "json":
            urls = url_variants(with_body_hash(public_url, body))
            tail = b""
        else:
            try:
                tail = signed_parameters(form_parameters(body))
            except (UnicodeDecodeError, ValueError):
                # Not a form body: nothing Twilio signed can be rebuilt from it.
                raise SignatureError("bad_signature") from None
            urls = url_variants(public_url)
        messages = [(url.encode("utf-8"), tail) for url in urls]
        index = matching_key(keys, [signature], *messages, algorithm=algorithm)
        return Verified(f"twilio-{algorithm}", index, None)

    return Provider(
        name=NAME,
        # Twilio retries a failed request within seconds (connection overrides).
        redelivery_horizon_days=1,
        scheme=Handwritten(
            hmac_secret("a Twilio auth token (or webhook shared key secret) is empty"),
            check_headers,
            verify,
        ),
        envelope=envelope,
        sample_event=partial(sample_for, public_url),
        with_public_url=bind,
        reconcile=RECONCILING,
    )


def form_type(params: dict[str, str]) -> str | None:
    """``message.delivered``, ``call.completed``, ``recording.completed``: the resource
    and the status the callback reports."""
    for name, resource in STATUS_PARAMETERS:
        status = params.get(name)
        if status:
            return bounded_type(f"{resource}.{status}")
    return None


def rfc2822_time(value: str | None) -> datetime | None:
    """Voice status callbacks' ``Timestamp`` (``Mon, 16 Aug 2010 03:45:01 +0000``)."""
    if not value:
        return None
    try:
        moment = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC)


def envelope(headers: HeaderMap, body: bytes, verified: Verified) -> Envelope:
    kept = select_headers(headers, KEPT_HEADERS)
    if media_type(headers) == "application/json":
        return _json_envelope(body, kept)
    try:
        pairs = form_parameters(body)
    except (UnicodeDecodeError, ValueError):
        raise PayloadError("malformed_payload", "body is not a form body") from None
    params = dict(pairs)
    key = status_key(params)
    if key is None:
        canonical = json.dumps(canonical_pairs(pairs), ensure_ascii=False, separators=(",", ":"))
        key = "sha256:" + hashlib.sha256(canonical.encode("utf-8")).hexdigest()
    return Envelope(
        dedupe_key=checked_key(key, "status callback key"),
        type=form_type(params),
        occurred_at=rfc2822_time(params.get("Timestamp")),
        headers=kept,
    )


def _json_envelope(body: bytes, kept: dict[str, str]) -> Envelope:
    """A JSON body (Event Streams sinks send arrays of CloudEvents): keyed by the body's
    digest, the same ``bodySHA256`` Twilio signed."""
    try:
        value = loads_utf8(body)
    except ValueError:
        raise PayloadError("malformed_payload", "body is not a UTF-8 JSON document") from None
    items = value if isinstance(value, list) else [value]
    objects = [item for item in items if isinstance(item, dict)]
    times = [t for t in (parse_isoformat(item.get("time")) for item in objects) if t is not None]
    return Envelope(
        dedupe_key=checked_key(f"sha256:{hashlib.sha256(body).hexdigest()}", "body digest"),
        type=_common_type(items),
        occurred_at=min(times) if times else None,
        headers=kept,
    )


def _common_type(items: Sequence[object]) -> str | None:
    """The ``type`` of the items, when each is an object and they agree on one."""
    objects = [item for item in items if isinstance(item, dict)]
    kinds = {item.get("type") for item in objects}
    return bounded_type(kinds.pop()) if len(kinds) == 1 and len(objects) == len(items) else None


def twilio_signature(secret: str, url: str, params: Sequence[tuple[str, str]]) -> str:
    """The ``X-Twilio-Signature`` of a form body with ``params`` posted to ``url``."""
    message = (url.encode("utf-8"), signed_parameters(params))
    return hmac_b64(secret.encode("utf-8"), *message, algorithm="sha1")


def sample_for(url: str, secret: str, seq: int, now: int) -> tuple[dict[str, str], bytes]:
    """A message status callback (``delivered``), signed for ``url`` as Twilio signs it."""
    message_sid = "SM" + secrets.token_hex(16)
    params = [
        ("SmsSid", message_sid),
        ("SmsStatus", "delivered"),
        ("MessageStatus", "delivered"),
        ("To", f"+1555{seq % 10_000_000:07d}"),
        ("MessagingServiceSid", "MG" + "0" * 32),
        ("MessageSid", message_sid),
        ("AccountSid", "AC" + "0" * 32),
        ("From", "+15550001234"),
        ("ApiVersion", "2010-04-01"),
        ("RawDlrDoneDate", datetime.fromtimestamp(now, UTC).strftime("%y%m%d%H%M")),
    ]
    headers = {
        "X-Twilio-Signature": twilio_signature(secret, url, params),
        "I-Twilio-Idempotency-Token": secrets.token_hex(18),
        "Content-Type": "application/x-www-form-urlencoded; charset=utf-8",
        "User-Agent": "TwilioProxy/1.1",
    }
    return headers, urlencode(params).encode("ascii")


PROVIDER = bind(EXAMPLE_URL)
