"""Evaluating the filters of ``hookd.routing``: whether a destination or a handler
takes an event. Pure functions; the body is parsed at most once per event."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any
from urllib.parse import parse_qs

from hookd.event import Event
from hookd.routing import FilterConfig

_MISSING = object()


def _equal(found: Any, wanted: Any) -> bool:
    """JSON equality: ``true`` is not ``1``, ``1`` is ``1.0``."""
    if isinstance(found, bool) or isinstance(wanted, bool):
        return isinstance(found, bool) and isinstance(wanted, bool) and bool(found == wanted)
    if isinstance(found, int | float) and isinstance(wanted, int | float):
        return bool(found == wanted)
    return type(found) is type(wanted) and bool(found == wanted)


def _holds(found: Any, predicate: Any) -> bool:
    if isinstance(predicate, dict):  # { exists = bool }
        return (found is not _MISSING) is bool(predicate["exists"])
    if found is _MISSING:
        return False
    if isinstance(predicate, tuple):  # a list: "in"
        return any(_equal(found, p) for p in predicate)
    return _equal(found, predicate)


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _header_holds(found: str | None, predicate: Any) -> bool:
    if isinstance(predicate, dict):
        return (found is not None) is bool(predicate["exists"])
    if found is None:
        return False
    if isinstance(predicate, tuple):
        return any(found == _text(p) for p in predicate)
    return found == _text(predicate)


def lookup(document: Any, path: str) -> Any:
    """The value at a dotted path (a number indexes a list), or ``_MISSING``."""
    node = document
    for part in path.split("."):
        if isinstance(node, dict):
            if part not in node:
                return _MISSING
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return _MISSING
    return node


def parse_body(body: bytes) -> Any:
    """The body as JSON; a form-encoded body's ``payload`` field (GitHub's form content
    type) as JSON; else ``_MISSING``, which no path is found in."""
    try:
        return json.loads(body)
    except (ValueError, UnicodeDecodeError):
        pass
    try:
        payload = parse_qs(body.decode("utf-8"), strict_parsing=True).get("payload")
    except (ValueError, UnicodeDecodeError):
        return _MISSING
    if payload is None or len(payload) != 1:
        return _MISSING
    try:
        return json.loads(payload[0])
    except ValueError:
        return _MISSING


@dataclass(frozen=True, slots=True)
class Selector:
    """A compiled filter."""

    include: tuple[str, ...]
    exclude: tuple[str, ...]
    where: Mapping[str, Any]
    where_headers: Mapping[str, Any]
    origins: frozenset[str]

    @classmethod
    def of(cls, config: FilterConfig) -> Selector | None:
        """None when the filter selects every event."""
        if config.selects_all:
            return None
        return cls(
            include=tuple(p for p in config.types if not p.startswith("!")),
            exclude=tuple(p[1:] for p in config.types if p.startswith("!")),
            where=dict(config.where),
            where_headers=dict(config.where_headers),
            origins=frozenset(config.origins),
        )

    def type_selected(self, event_type: str | None) -> bool:
        if self.include and (
            event_type is None or not any(fnmatchcase(event_type, p) for p in self.include)
        ):
            return False
        return event_type is None or not any(fnmatchcase(event_type, p) for p in self.exclude)

    def selects(self, event: Event, document: Callable[[], Any]) -> bool:
        """Whether the event passes; ``document()`` gives the parsed body (cached by the
        caller, so several filters parse it once)."""
        if self.origins and event.origin not in self.origins:
            return False
        if not self.type_selected(event.type):
            return False
        if self.where_headers:
            headers = {k.lower(): v for k, v in event.headers.items()}
            for name, predicate in self.where_headers.items():
                if not _header_holds(headers.get(name), predicate):
                    return False
        if self.where:
            body = document()
            for path, predicate in self.where.items():
                if not _holds(lookup(body, path), predicate):
                    return False
        return True


class Document:
    """An event's body parsed on first use, once."""

    def __init__(self, body: bytes) -> None:
        self._body = body
        self._parsed: Any = None
        self._done = False

    def __call__(self) -> Any:
        if not self._done:
            self._parsed, self._done = parse_body(self._body), True
        return self._parsed
