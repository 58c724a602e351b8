"""What the configurable providers (``hmac``, ``token``) share: the settings that say
where a source's dedupe key and event type are, the envelope built from them, and a
sample event that puts its id and type where those settings look.

These senders document no payload shape hookd could know, so each source names its
key: a header, a dotted JSON path, or, as a last resort, the SHA-256 of the body (two
identical bodies are then one event).

A source may also answer a sender's registration handshake (``handshake``), which
stores nothing:

- ``dropbox``: ``GET ?challenge=X`` is answered ``X`` as ``text/plain`` with
  ``X-Content-Type-Options: nosniff``, as Dropbox asks;
- ``x_crc``: X's challenge-response check, ``GET ?crc_token=T``, is answered
  ``{"response_token": "sha256=" + base64(HMAC-SHA256(consumer secret, T))}``, the
  consumer secret being the source's first secret (``hmac`` sources only);
- ``graph``: Microsoft Graph's ``POST ?validationToken=T`` is answered ``T`` as
  ``text/plain``, before the body is read.

The echoed token must be one value of at most ``MAX_ECHO_CHARS`` printable ASCII
characters, none of ``<>&"'`` or backquote or backslash (and no space but in Graph's
token, which has them): anything else is ``malformed_payload`` (400), so the echo
cannot carry markup.
"""

from __future__ import annotations

import hashlib
import re
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, field_validator

from hookd.errors import PayloadError
from hookd.providers.base import (
    SENDER_HEADERS,
    Challenge,
    Envelope,
    HeaderMap,
    HmacKey,
    JsonObject,
    Key,
    QueryMap,
    Reply,
    Verified,
    checked_key,
    compact_json,
    optional_header,
    parse_json_object,
    select_headers,
)
from hookd.providers.signatures import hmac_b64

HEADER_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9-]{0,127}")
JSON_PATH_RE = re.compile(r"[^.\s]+(\.[^.\s]+)*")
SAMPLE_TYPE = "hookd.test"
Handshake = Literal["dropbox", "x_crc", "graph"]
MAX_ECHO_CHARS = 512
UNSAFE_ECHO = frozenset("<>&\"'`\\")


def header_name(value: str) -> str:
    """A header name as the receiver keys it (lower case), or a ``ValueError``."""
    if not HEADER_NAME_RE.fullmatch(value):
        raise ValueError("must be a header name (letters, digits and '-')")
    return value.lower()


def json_path(value: str) -> str:
    if not JSON_PATH_RE.fullmatch(value):
        raise ValueError("must be a dotted JSON path such as 'data.id'")
    return value


# A settings key naming a header (kept in lower case) or a place in the JSON body.
HeaderName = Annotated[str, AfterValidator(header_name)]
JsonPath = Annotated[str, AfterValidator(json_path)]


class VerifySettings(BaseModel):
    """A ``[sources.verify]`` table: the model every configurable provider's derives from."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    def incomplete(self) -> tuple[str, str] | None:
        """(key, problem) of what the types alone cannot say, checked after them."""
        return None


class SourceSettings(VerifySettings):
    """``[sources.verify]`` keys the configurable providers of any sender (``hmac``,
    ``token``) take: where the dedupe key and type are."""

    # "header:<Name>", "json:<dotted.path>" or "body_sha256".
    dedupe: str
    type_header: HeaderName | None = None
    type_json: JsonPath | None = None
    # A registration handshake the source answers (see the module's notes).
    handshake: Handshake | None = None

    @field_validator("dedupe")
    @classmethod
    def _dedupe(cls, value: str) -> str:
        kind, sep, arg = value.partition(":")
        if value == "body_sha256":
            return value
        if sep and kind == "header":
            return f"header:{header_name(arg)}"
        if sep and kind == "json":
            return f"json:{json_path(arg)}"
        raise ValueError('must be "header:<Name>", "json:<dotted.path>" or "body_sha256"')

    def incomplete(self) -> tuple[str, str] | None:
        """(key, problem) of what the types alone cannot say, checked after them."""
        if self.type_header is not None and self.type_json is not None:
            return "type_json", "give type_header or type_json, not both"
        return None


def _at(payload: Mapping[str, object], path: str) -> object:
    value: object = payload
    for part in path.split("."):
        if not isinstance(value, dict):
            return None
        value = value.get(part)
    return value


def _scalar(value: object) -> str | None:
    """A JSON string or integer as a key; anything else is no key."""
    if isinstance(value, str):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return None


def envelope_for(
    settings: SourceSettings, kept: tuple[str, ...]
) -> Callable[[HeaderMap, bytes, Verified], Envelope]:
    kind, _, arg = settings.dedupe.partition(":")
    names = tuple(dict.fromkeys((*kept, *SENDER_HEADERS)))
    if kind == "header":
        names += (arg,)
    if settings.type_header is not None:
        names += (settings.type_header,)

    def envelope(headers: HeaderMap, body: bytes, verified: Verified) -> Envelope:
        payload: JsonObject | None = None
        if kind == "json" or settings.type_json is not None:
            payload = parse_json_object(body)
        if kind == "header":
            key = checked_key(optional_header(headers, arg), f"{arg} header")
        elif kind == "json":
            assert payload is not None
            key = checked_key(_scalar(_at(payload, arg)), arg)
        else:
            key = "sha256:" + hashlib.sha256(body).hexdigest()
        event_type: str | None = None
        if settings.type_header is not None:
            event_type = optional_header(headers, settings.type_header)
        elif settings.type_json is not None and payload is not None:
            found = _at(payload, settings.type_json)
            event_type = found if isinstance(found, str) else None
        if event_type is not None and not (event_type.isprintable() and len(event_type) < 256):
            raise PayloadError("malformed_payload", "invalid event type")
        return Envelope(key, event_type, None, select_headers(headers, names))

    return envelope


def echoed(query: QueryMap, name: str, *, spaces: bool = False) -> str | None:
    """The token a handshake echoes, None when ``name`` is not in the query, or
    ``malformed_payload`` for a value no sender sends (see the module's notes)."""
    values = query.get(name)
    if values is None:
        return None
    if len(values) != 1:
        raise PayloadError("malformed_payload", f"{name} is given more than once")
    token = values[0]
    if not token or len(token) > MAX_ECHO_CHARS:
        detail = f"{name} must have 1 to {MAX_ECHO_CHARS} characters"
        raise PayloadError("malformed_payload", detail)
    if not _echoable(token, spaces=spaces):
        raise PayloadError("malformed_payload", f"{name} has characters no sender sends")
    return token


def _echoable(token: str, *, spaces: bool) -> bool:
    """Printable ASCII without markup, spaces only inside and only where allowed."""
    return (
        token.isascii()
        and token.isprintable()
        and UNSAFE_ECHO.isdisjoint(token)
        and not token.startswith(" ")
        and not token.endswith(" ")
        and (spaces or " " not in token)
    )


def _dropbox(method: str, query: QueryMap, keys: Sequence[Key]) -> Reply | None:
    if method != "GET":
        return None
    challenge = echoed(query, "challenge")
    return None if challenge is None else Reply.text(challenge)


def _x_crc(method: str, query: QueryMap, keys: Sequence[Key]) -> Reply | None:
    if method != "GET":
        return None
    crc = echoed(query, "crc_token")
    consumer = next((key for key in keys if isinstance(key, HmacKey)), None)
    if crc is None or consumer is None:
        return None
    return Reply.json({"response_token": "sha256=" + hmac_b64(consumer.key, crc.encode("ascii"))})


def _graph(method: str, query: QueryMap, keys: Sequence[Key]) -> Reply | None:
    if method != "POST":
        return None
    validation = echoed(query, "validationToken", spaces=True)
    return None if validation is None else Reply.text(validation)


HANDSHAKES: dict[str, Challenge] = {"dropbox": _dropbox, "x_crc": _x_crc, "graph": _graph}


def challenge_for(settings: SourceSettings) -> Challenge | None:
    """The ``challenge`` hook of a source's ``handshake``, if it names one."""
    return None if settings.handshake is None else HANDSHAKES[settings.handshake]


def _put(payload: JsonObject, path: str, value: str) -> None:
    *parents, last = path.split(".")
    node = payload
    for part in parents:
        child = node.get(part)
        if not isinstance(child, dict):
            child = node[part] = {}
        node = child
    node[last] = value


def sample_for(settings: SourceSettings, seq: int, now: int) -> tuple[dict[str, str], bytes]:
    """An unsigned sample event: (headers, body) with its id and type where the
    settings look for them; the provider's signer adds its own headers."""
    event_id = f"evt_{uuid.uuid4().hex}"
    payload: JsonObject = {"id": event_id, "type": SAMPLE_TYPE, "created": now, "n": seq}
    headers = {"Content-Type": "application/json"}
    if settings.type_json is not None:
        _put(payload, settings.type_json, SAMPLE_TYPE)
    if settings.type_header is not None:
        headers[settings.type_header] = SAMPLE_TYPE
    kind, _, arg = settings.dedupe.partition(":")
    if kind == "json":
        _put(payload, arg, event_id)
    elif kind == "header":
        headers[arg] = event_id
    return headers, compact_json(payload)
