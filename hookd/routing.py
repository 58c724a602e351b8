"""The sources file's routing tables: ``[[sources.destinations]]``, the filter keys a
destination or a handler takes, and a destination's circuit breaker.

A filter is four optional keys, all of which must hold for an event to be selected
(an absent key selects everything):

- ``types``: globs over the event type (``*``, ``?``, ``[...]``, case-sensitive); an event
  is selected when it matches at least one pattern without ``!`` (or there is none) and
  no pattern with ``!``. An event without a type matches no positive pattern.
- ``where``: JSON paths in the body (dotted; a number indexes a list), each with a
  predicate: a value (equals), a list (in), or ``{ exists = true|false }``.
- ``where_headers``: the same predicates on request headers (names in any case).
- ``origins``: how the event came: ``webhook``, ``reconcile``, ``replay``.

Only the models live here; ``processing.filters`` evaluates them.
"""

from __future__ import annotations

import re
from typing import TypeGuard

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from hookd.providers import PROVIDERS
from store.status import EventOrigin

NAME_RE = re.compile(r"[a-z0-9][a-z0-9-]{0,63}")
REF_RE = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*")
# The ledger name of ``[sources.forward]``, the one unnamed destination.
FORWARD = "forward"
Scalar = str | int | float | bool

# A ``where`` or ``where_headers`` predicate as checked (``_predicate``): a value
# (equals), values (in), or ``{ exists = bool }``.
Predicate = Scalar | tuple[Scalar, ...] | dict[str, bool]


def checked_name(value: str) -> str:
    """A source's or a destination's name, as ``NAME_RE`` allows it; else ValueError."""
    if not NAME_RE.fullmatch(value):
        raise ValueError(
            "must be 1 to 64 lowercase letters, digits and '-', starting with a letter or "
            "digit ([a-z0-9][a-z0-9-]{0,63})"
        )
    return value


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _predicate(key: str, value: object) -> Predicate:
    """A ``where`` value: a scalar, a list of scalars, or ``{ exists = bool }``."""
    if isinstance(value, str | int | float | bool):
        return value
    if isinstance(value, list):
        if not value:
            raise ValueError(f"{key!r}: an empty list selects nothing; remove the key")
        if not all(isinstance(v, str | int | float | bool) for v in value):
            raise ValueError(f"{key!r}: a list holds plain values (strings, numbers, booleans)")
        return tuple(value)
    if isinstance(value, dict):
        if set(value) != {"exists"} or not isinstance(value["exists"], bool):
            raise ValueError(
                f"{key!r}: a table must be {{ exists = true }} or {{ exists = false }}"
            )
        return {"exists": value["exists"]}
    raise ValueError(f"{key!r}: use a value, a list of values, or {{ exists = true|false }}")


def _named(value: object) -> TypeGuard[dict[str, object]]:
    """Whether ``value`` is a table (its keys names), as a ``where`` is written."""
    return isinstance(value, dict) and all(isinstance(k, str) for k in value)


def _path(key: str) -> str:
    if not key or any(not part for part in key.split(".")):
        raise ValueError(f"{key!r}: a JSON path is dot-separated names, e.g. 'data.object.id'")
    return key


class FilterConfig(_Strict):
    """What selects an event for a destination or a handler; see the module docstring."""

    types: tuple[str, ...] = ()
    where: dict[str, Predicate] = Field(default_factory=dict)
    where_headers: dict[str, Predicate] = Field(default_factory=dict)
    origins: tuple[str, ...] = ()

    @field_validator("types")
    @classmethod
    def _types(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for pattern in value:
            if not pattern.removeprefix("!"):
                raise ValueError("a pattern is a glob over the event type, e.g. 'invoice.*'")
        return value

    # Before the fields' own validation, which would turn a list into a tuple (an empty
    # one too) and answer a union's errors instead of these words; anything but a table
    # of names is left to it to refuse.
    @field_validator("where", mode="before")
    @classmethod
    def _where(cls, value: object) -> object:
        if not _named(value):
            return value
        return {_path(k): _predicate(k, v) for k, v in value.items()}

    @field_validator("where_headers", mode="before")
    @classmethod
    def _where_headers(cls, value: object) -> object:
        if not _named(value):
            return value
        for name in value:
            if not re.fullmatch(r"[A-Za-z0-9!#$%&'*+.^_`|~-]+", name):
                raise ValueError(f"{name!r} is not a header name")
        return {k.lower(): _predicate(k, v) for k, v in value.items()}

    @field_validator("origins")
    @classmethod
    def _origins(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        known = [o.value for o in EventOrigin]
        for origin in value:
            if origin not in known:
                raise ValueError(f"{origin!r} is not an origin: use {', '.join(known)}")
        return value

    @property
    def selects_all(self) -> bool:
        return not (self.types or self.where or self.where_headers or self.origins)


class HandlerEntry(FilterConfig):
    """One entry of ``handlers``: a plain ``"module:function"`` string, or a table
    ``{ ref = "module:function", types = [...], where = {...} }``."""

    ref: str

    @field_validator("ref")
    @classmethod
    def _ref(cls, value: str) -> str:
        if not REF_RE.fullmatch(value):
            raise ValueError(f'{value!r} is not "module:function"')
        return value


class BreakerConfig(_Strict):
    """A destination's circuit breaker: it opens after ``failures`` failed deliveries in a
    row (across every process), or when at least ``min_deliveries`` deliveries in the last
    ``window_s`` seconds (in one process) failed at ``failure_rate`` or more; after
    ``cooldown_s`` one delivery probes, and its success closes it again. Only failures
    that a retry could mend count (5xx, 429, timeouts, connection errors)."""

    enabled: bool = True
    failures: int = Field(default=5, ge=1, le=10_000)
    failure_rate: float = Field(default=0.5, gt=0, le=1)
    window_s: float = Field(default=60.0, gt=0, le=86_400)
    min_deliveries: int = Field(default=20, ge=1, le=100_000)
    cooldown_s: float = Field(default=30.0, gt=0, le=86_400)


class DestinationConfig(FilterConfig):
    """``[[sources.destinations]]``: where, signed with what, which events, how fast."""

    name: str
    url: str
    # A plain http:// url is refused unless this is set (hookd.sources checks it).
    allow_insecure: bool = False
    secret: str
    transform: str | None = None
    rate_per_s: float | None = Field(default=None, gt=0, le=100_000, allow_inf_nan=False)
    concurrency: int | None = Field(default=None, ge=1, le=10_000)
    # None: the source's max_attempts.
    max_attempts: int | None = Field(default=None, ge=1, le=100)
    # None: HOOKD_RETRY_BASE_S and HOOKD_RETRY_CAP_S.
    retry_base_s: float | None = Field(default=None, gt=0, le=3_600, allow_inf_nan=False)
    retry_cap_s: float | None = Field(default=None, gt=0, le=86_400, allow_inf_nan=False)
    timeout_s: float = Field(default=10.0, gt=0, le=300, allow_inf_nan=False)
    breaker: BreakerConfig = BreakerConfig()

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return checked_name(value)

    @field_validator("url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        if not re.fullmatch(r"https?://[^\s]+", value):
            raise ValueError("must be an http:// or https:// URL")
        return value

    @field_validator("secret")
    @classmethod
    def _whsec(cls, value: str) -> str:
        if not value.startswith("whsec_"):
            raise ValueError("must be a whsec_ secret (Standard Webhooks)")
        PROVIDERS["standard"].parse_secret(value)
        return value

    @field_validator("transform")
    @classmethod
    def _transform(cls, value: str | None) -> str | None:
        if value is not None and not REF_RE.fullmatch(value):
            raise ValueError(f'{value!r} is not "module:function"')
        return value

    @model_validator(mode="after")
    def _retry_order(self) -> DestinationConfig:
        if (
            self.retry_base_s is not None
            and self.retry_cap_s is not None
            and self.retry_cap_s < self.retry_base_s
        ):
            raise ValueError("retry_cap_s must not be below retry_base_s")
        return self


def handler_entries(value: object) -> object:
    """``handlers`` as tables: a plain string is ``{ ref = "..." }``."""
    if isinstance(value, list | tuple):
        return [{"ref": v} if isinstance(v, str) else v for v in value]
    return value
