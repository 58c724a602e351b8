"""``[sources.order]``: the object an event is about, and its version there.

A source with the table names, by JSON paths in the body, an object key (one path,
or several whose values are joined with ``:``, e.g. a GitHub repository's
``full_name`` and an issue's ``number``) and a version (the provider's updated-at,
RFC 3339, or a number). Each event is stamped with them when it is stored, with the
SHA-256 of its body (``stamp``); processing then runs one object's events one at a
time, lowest version first, and marks an event older than the newest one processed
for its object ``superseded`` (``store.delivery.objects``) unless ``stale = "run"``.

An event in which either path is missing, or holds something else than a key or a
version, is stored without an object and processed as on a source without ordering.

A path is dotted: ``data.object.id``; a segment that is a whole number indexes a
list (``items.0.id``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any, Literal
from urllib.parse import parse_qs

from pydantic import BaseModel, ConfigDict, Field, field_validator

from hookd.providers.rfc3339 import parse_iso8601
from store.intake.events import NewEvent

# Joins the values of a key made of several paths (``octo-org/hello-world:42``).
KEY_SEPARATOR = ":"
# The events.object_key column's size; a longer key leaves the event without an object.
MAX_KEY_CHARS = 255
MAX_PATH_SEGMENTS = 32
SEGMENT_RE = re.compile(r"[^.\s]{1,128}")
FORM = "application/x-www-form-urlencoded"


def _path(value: object) -> str:
    if not isinstance(value, str):  # a ValueError: what pydantic reports as the key's error
        raise ValueError("must be a dotted JSON path, e.g. data.object.id")  # noqa: TRY004
    segments = value.split(".")
    if len(segments) > MAX_PATH_SEGMENTS or not all(SEGMENT_RE.fullmatch(s) for s in segments):
        raise ValueError(f"{value!r} is not a dotted JSON path, e.g. data.object.id")
    return value


class OrderConfig(BaseModel):
    """``[sources.order]``: see the module's text."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # One path, or several whose values are joined with ":" (in this order).
    key: tuple[str, ...] = Field(min_length=1, max_length=8)
    version: str
    # What to do with an event older than the newest one processed for its object:
    # "supersede" (mark it superseded, do not run it) or "run" (run it all the same).
    stale: Literal["supersede", "run"] = "supersede"
    # Fetch the object from the provider's API before the handlers run (thin events);
    # needs [sources.reconcile] and a provider whose reconcile adapter can.
    fetch: bool = False

    @field_validator("key", mode="before")
    @classmethod
    def _key(cls, value: object) -> object:
        if isinstance(value, str):
            return (_path(value),)
        if isinstance(value, list | tuple):
            return tuple(_path(v) for v in value)
        raise ValueError('must be a JSON path or a list of them, e.g. "data.object.id"')

    @field_validator("version", mode="before")
    @classmethod
    def _version(cls, value: object) -> str:
        return _path(value)

    @property
    def supersedes(self) -> bool:
        return self.stale == "supersede"

    def stamp(self, event: NewEvent) -> NewEvent:
        """``event`` with its object key, version and body digest (see the module)."""
        digest = hashlib.sha256(event.body).hexdigest()
        doc = document(event.body, event.headers)
        key = object_key(doc, self.key)
        version = None if key is None else object_version(read(doc, self.version))
        if key is None or version is None:
            return dataclasses.replace(event, payload_hash=digest)
        return dataclasses.replace(
            event, object_key=key, object_version=version, payload_hash=digest
        )


def document(body: bytes, headers: Mapping[str, str]) -> Any:
    """The body's JSON document; for a form-encoded body, its one ``payload`` field's
    (as GitHub sends with that content type). None when there is none."""
    text: str | bytes = body
    content_type = headers.get("content-type", "").split(";", 1)[0].strip().lower()
    try:
        if content_type == FORM:
            payloads = parse_qs(body.decode("utf-8"), strict_parsing=True).get("payload", [])
            if len(payloads) != 1:
                return None
            text = payloads[0]
        return json.loads(text)
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None


_MISSING = object()


def read(doc: Any, path: str) -> Any:
    """The value at a dotted path, or ``_MISSING``."""
    value = doc
    for segment in path.split("."):
        if isinstance(value, dict):
            value = value.get(segment, _MISSING)
        elif isinstance(value, list) and segment.isascii() and segment.isdigit():
            index = int(segment)
            value = value[index] if index < len(value) else _MISSING
        else:
            return _MISSING
        if value is _MISSING:
            return _MISSING
    return value


def _key_part(value: Any) -> str | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str) and value and value.isprintable():
        return value
    return None


def object_key(doc: Any, paths: Sequence[str]) -> str | None:
    """The values at ``paths`` joined with ``:``; None when one is missing, not a string
    or a whole number, or the key would be longer than the column."""
    parts = [_key_part(read(doc, path)) for path in paths]
    if any(part is None for part in parts):
        return None
    key = KEY_SEPARATOR.join(p for p in parts if p is not None)
    return key if len(key) <= MAX_KEY_CHARS else None


def object_version(value: Any) -> float | None:
    """A version as a number: a JSON number as it is (exact up to 2**53), a numeric
    string the same, an RFC 3339 time (or the looser ISO 8601 some providers write) in
    unix seconds. None for anything else."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        number = float(value)
        return number if math.isfinite(number) else None
    if not isinstance(value, str) or len(value) > 64:
        return None
    moment = parse_iso8601(value)
    if moment is not None:
        return moment.timestamp()
    try:
        number = float(value)
    except ValueError:
        return None
    return number if math.isfinite(number) else None
