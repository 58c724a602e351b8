"""The sources file's models: a source's table and the tables in it, and the validated
``Source`` and ``Sources`` the rest of hookd is handed."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator
from pydantic_core import PydanticKnownError

from hookd.ordering import OrderConfig
from hookd.providers import PROVIDERS
from hookd.providers.base import Key, Provider
from hookd.providers.generic import VerifySettings
from hookd.providers.reconciling import ReconcileConfig
from hookd.routing import (
    DestinationConfig,
    HandlerEntry,
    checked_name,
    handler_entries,
)
from hookd.sources.notify import AlertsConfig, NotifyConfig

MAX_BODY_LIMIT = 64 * 1024 * 1024


DAY_S = 86_400.0


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ForwardConfig(_Strict):
    url: str
    # A plain http:// url is refused unless this is set (see hookd.sources.urls).
    allow_insecure: bool = False
    secret: str
    timeout_s: float = Field(default=10.0, gt=0, le=300)

    @field_validator("url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")):
            raise ValueError("must be an http:// or https:// URL")
        return value

    @field_validator("secret")
    @classmethod
    def _whsec(cls, value: str) -> str:
        PROVIDERS["standard"].parse_secret(value)
        if not value.startswith("whsec_"):
            raise ValueError("forward.secret must be a whsec_ secret")
        return value


class RetentionConfig(_Strict):
    """``[retention]`` (every source's default) and ``[sources.retention]``: how long
    ``hookd prune`` keeps what, in days since the event was received. Events still to
    be processed (pending, retrying, processing) are never pruned, nor their bodies.

    A body kept longer than its row (``keep_body_days`` over ``keep_events_days``)
    simply goes with the row; it is not an error."""

    # Bodies and headers of processed events (dead ones keep theirs for replay).
    keep_body_days: float = Field(default=7.0, gt=0, le=36_500, allow_inf_nan=False)
    # Processed events' rows, their handler ledger, and reconcile run records.
    keep_events_days: float = Field(default=30.0, gt=0, le=36_500, allow_inf_nan=False)
    # Dead events' rows (replayable until then).
    keep_dead_days: float = Field(default=90.0, gt=0, le=36_500, allow_inf_nan=False)
    # Keys (tombstones) of pruned events: a redelivery within this time is still a
    # duplicate. At least the provider's redelivery horizon (checked at load).
    keep_keys_days: float = Field(default=400.0, gt=0, le=36_500, allow_inf_nan=False)


def keys_needed(provider: Provider, reconcile: ReconcileConfig | None) -> tuple[float, str]:
    """The shortest ``keep_keys_days`` that keeps a source's dedupe promise, in days,
    and what it comes from: the provider's redelivery horizon, or a reconcile pass's
    reach (``lookback_s`` when longer than the horizon), plus ``overlap_s``."""
    horizon = provider.redelivery_horizon_days
    said = f"{provider.name}'s redelivery horizon of {_days(horizon)}"
    if reconcile is None:
        return horizon, said
    lookback = reconcile.lookback_s / DAY_S
    overlap = f"overlap_s = {reconcile.overlap_s:.0f}"
    if lookback > horizon:
        return lookback + reconcile.overlap_s / DAY_S, (
            f"this source's reconcile lookback_s = {reconcile.lookback_s:.0f} "
            f"({_days(lookback)}, longer than {said}) plus {overlap}"
        )
    return horizon + reconcile.overlap_s / DAY_S, (f"{said} plus this source's reconcile {overlap}")


def _days(days: float) -> str:
    shown = f"{round(days, 3):g}"
    return f"{shown} day" if shown == "1" else f"{shown} days"


def reconcile_models() -> list[type[ReconcileConfig]]:
    return [p.reconcile.settings for p in PROVIDERS.values() if p.reconcile is not None]


def reconcile_keys() -> set[str]:
    """Every key some provider's ``[sources.reconcile]`` takes."""
    return {key for model in reconcile_models() for key in model.model_fields}


def expected(names: Sequence[str]) -> str:
    """``'a', 'b' or 'c'``: how pydantic lists the values a ``Literal`` allows."""
    quoted = [repr(name) for name in names]
    return quoted[0] if len(quoted) == 1 else f"{', '.join(quoted[:-1])} or {quoted[-1]}"


class SourceConfig(_Strict):
    name: str
    # One of the registered providers (checked by _provider, like a Literal of them).
    provider: str
    secrets: tuple[str, ...] = Field(min_length=1)
    tolerance_s: int = Field(default=300, gt=0, le=86_400)
    max_body_bytes: int = Field(default=1_048_576, gt=0, le=MAX_BODY_LIMIT)
    # Plain "module:function" strings, or tables with a filter (hookd.routing).
    handlers: tuple[HandlerEntry, ...] = ()
    forward: ForwardConfig | None = None
    # [[sources.destinations]]: signed HTTP deliveries, each a handler in the ledger.
    destinations: tuple[DestinationConfig, ...] = ()
    # Validated with the model of the source's provider (see _reconcile).
    reconcile: ReconcileConfig | None = None
    max_attempts: int = Field(default=8, ge=1, le=100)
    # A configurable provider's scheme, validated with its model (see _verify).
    verify: VerifySettings | None = Field(default=None, validate_default=True)
    # The URL the provider posts to, as registered with it: the providers that sign it
    # (twilio, square, hubspot) need it, since behind a proxy hookd cannot know it; the
    # registration check (github, stripe) compares the provider's record with it.
    public_url: str | None = None
    # The file's top-level [retention], with this source's [sources.retention] over it.
    retention: RetentionConfig = RetentionConfig()
    # [sources.order]: per-object ordering of its events (hookd.ordering).
    order: OrderConfig | None = None
    # Keep the body of each refused request with its record (``rejected_requests``),
    # sealed with HOOKD_ENCRYPTION_KEYS when keys are set, as event bodies are.
    keep_rejected_bodies: bool = False

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        # The name is the path of the source's URL (/hooks/NAME) and a label in metrics.
        return checked_name(value)

    @field_validator("provider", mode="before")
    @classmethod
    def _provider(cls, value: object) -> object:
        if not (isinstance(value, str) and value in PROVIDERS):
            raise PydanticKnownError("literal_error", {"expected": expected(list(PROVIDERS))})
        return value

    @field_validator("reconcile", mode="before")
    @classmethod
    def _reconcile(cls, value: object, info: ValidationInfo) -> object:
        """The table as the model of the source's provider (the shared keys' model when
        it has none, or is unknown). ``checks.check_reconcile`` then refuses other providers'
        keys, once the secrets are read."""
        if not isinstance(value, dict):
            return value  # not a table: the field's own type says so
        provider = PROVIDERS.get(info.data.get("provider", ""))
        model = ReconcileConfig
        if provider is not None and provider.reconcile is not None:
            model = provider.reconcile.settings
        return model.from_table(value, reconcile_models())

    @field_validator("verify", mode="before")
    @classmethod
    def _verify(cls, value: object, info: ValidationInfo) -> object:
        """The table as the model of a configurable provider, which needs one; any other
        provider takes none."""
        provider = PROVIDERS.get(info.data.get("provider", ""))
        if provider is None:
            return value
        if provider.configurable is None:
            if value is not None:
                raise ValueError(f"{provider.name} sources take no verify table")
            return value
        if value is None:
            value = {}
        if not isinstance(value, dict):
            return value
        return provider.configurable.settings.model_validate(value)

    @field_validator("public_url")
    @classmethod
    def _public_url(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(r"https?://[^\s#]+", value):
            raise ValueError("must be the http:// or https:// URL registered with the provider")
        return value

    @field_validator("handlers", mode="before")
    @classmethod
    def _handlers(cls, value: object) -> object:
        return handler_entries(value)

    @property
    def handler_refs(self) -> tuple[str, ...]:
        """The handlers' "module:function" names, in order (their ledger names)."""
        return tuple(h.ref for h in self.handlers)


@dataclass(frozen=True, slots=True)
class Source:
    """A validated source with its secrets parsed into keys."""

    config: SourceConfig
    keys: tuple[Key, ...]
    # What verifies, reads and signs its webhooks: the registered provider, or for a
    # configurable one, the provider its ``[sources.verify]`` table makes.
    adapter: Provider

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def provider(self) -> str:
        return self.config.provider


@dataclass(frozen=True, slots=True)
class Sources:
    path: Path
    by_name: Mapping[str, Source]
    # One line each, for ``hookd serve`` and ``hookd worker`` to print at start: URLs
    # that carry a secret to an address of this machine or of a private network.
    warnings: tuple[str, ...] = ()
    # [[notify]]: where notifications go; [alerts]: when alerts open (hookd.sources.notify).
    notify: tuple[NotifyConfig, ...] = ()
    alerts: AlertsConfig = field(default_factory=AlertsConfig)

    def get(self, name: str) -> Source | None:
        return self.by_name.get(name)

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(self.by_name.values())

    def __len__(self) -> int:
        return len(self.by_name)


def api_url(source: SourceConfig) -> str:
    rc = source.reconcile
    if rc is not None and rc.api_url:
        return rc.api_url.rstrip("/")
    spec = PROVIDERS[source.provider].reconcile
    return spec.api_url if spec is not None else ""
