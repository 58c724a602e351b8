"""The filters of the event and run lists, validated once for every caller.

``parse`` reads query parameters as the operations API receives them and raises
``BadRequest`` with the sentence the API answers with; the admin UI hands in its
own parameters and words some refusals its own way (by ``BadRequest.field``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

from hookd.errors import BadRequest, NotFound
from hookd.sources import Source, Sources
from store.ids import is_id
from store.models import ORIGINS, STATUSES

DEFAULT_LIMIT = 50
MAX_LIMIT = 500
_LIMIT_RE = re.compile(r"[0-9]{1,9}")


def parse_limit(raw: str) -> int:
    """``limit`` as a whole number in 1..MAX_LIMIT.

    ASCII digits only: ``str.isdigit`` also admits superscripts (on which ``int``
    fails) and other scripts' digits; a length bound keeps ``int`` off huge strings.
    """
    limit = int(raw) if _LIMIT_RE.fullmatch(raw) else 0
    if not 1 <= limit <= MAX_LIMIT:
        raise BadRequest("limit", f"limit must be a whole number from 1 to {MAX_LIMIT}")
    return limit


def configured(sources: Sources, name: str) -> Source:
    """The configured source ``name``, or ``NotFound``."""
    source = sources.get(name)
    if source is None:
        raise NotFound("source")
    return source


def unix_time(field: str, text: str, shown: str) -> datetime | None:
    """``text`` as unix seconds, or None when it is no number; a number that is no time
    (negative, not finite) or out of range is ``BadRequest`` naming ``field``, the value
    shown as ``shown``."""
    try:
        seconds = float(text)
    except ValueError:
        return None
    if not math.isfinite(seconds) or seconds < 0:
        raise BadRequest(field, f"{shown} is not a time")
    try:
        return datetime.fromtimestamp(seconds, UTC)
    except (OverflowError, OSError, ValueError):
        raise BadRequest(field, f"{shown} is out of range") from None


def has_nul(*values: str | None) -> bool:
    """A NUL character: PostgreSQL text cannot hold one, so a filter with it is refused."""
    return any(v is not None and "\x00" in v for v in values)


@dataclass(frozen=True, slots=True)
class EventQuery:
    """One page of the event list: newest first, older than ``cursor`` when given."""

    source: str | None = None
    status: str | None = None
    type: str | None = None
    origin: str | None = None
    limit: int = DEFAULT_LIMIT
    cursor: str | None = None
    # One object's events ([sources.order]): its key, as ``GET
    # /api/sources/{name}/objects/{id}`` names it.
    object: str | None = None

    @classmethod
    def parse(cls, params: Mapping[str, str]) -> EventQuery:
        # An empty status or origin is refused, an empty source, type or cursor means
        # "any": the API has always answered so, and the checks keep its order.
        status, origin = params.get("status"), params.get("origin")
        if status is not None and status not in STATUSES:
            raise BadRequest("status", f"status must be one of {', '.join(STATUSES)}")
        if origin is not None and origin not in ORIGINS:
            raise BadRequest("origin", f"origin must be one of {', '.join(ORIGINS)}")
        limit = parse_limit(params.get("limit", str(DEFAULT_LIMIT)))
        cursor = params.get("cursor") or None
        if cursor is not None and not is_id(cursor):
            raise BadRequest("cursor", "cursor is not one this API gave out")
        source, type_ = params.get("source") or None, params.get("type") or None
        if has_nul(source, type_):
            raise BadRequest("text", "source and type must not contain NUL")
        object_ = params.get("object") or None
        if has_nul(object_):
            raise BadRequest("text", "object must not contain NUL")
        return cls(source, status, type_, origin, limit, cursor, object_)


@dataclass(frozen=True, slots=True)
class RunQuery:
    """The newest reconciliation runs, of one source or of all."""

    source: str | None = None
    limit: int = DEFAULT_LIMIT

    @classmethod
    def parse(cls, params: Mapping[str, str]) -> RunQuery:
        limit = parse_limit(params.get("limit", str(DEFAULT_LIMIT)))
        source = params.get("source") or None
        if has_nul(source):
            raise BadRequest("text", "source must not contain NUL")
        return cls(source, limit)
