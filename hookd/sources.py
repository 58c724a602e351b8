"""Sources: the TOML file that names each webhook source, its secrets and settings.

``Settings.from_env()`` is the one place the environment is read; everything
else is handed a ``Settings`` and a ``Sources``. Every problem with the sources
file raises ``ConfigError`` whose text is one line naming file, source and key.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import math
import os
import re
import socket
import tomllib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator
from pydantic_core import ErrorDetails, PydanticKnownError

from hookd.errors import ConfigError, did_you_mean, input_kind, validation_problem
from hookd.ordering import OrderConfig
from hookd.providers import PROVIDERS
from hookd.providers.base import Key, Provider
from hookd.providers.generic import SourceSettings
from hookd.providers.reconciling import ReconcileConfig
from hookd.routing import (
    FORWARD,
    BreakerConfig,
    DestinationConfig,
    HandlerEntry,
    handler_entries,
)

NAME_RE = re.compile(r"[a-z0-9][a-z0-9-]{0,63}")
VAR_RE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
MAX_BODY_LIMIT = 64 * 1024 * 1024
DAY_S = 86_400.0


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ForwardConfig(_Strict):
    url: str
    # A plain http:// url is refused unless this is set (see _check_urls).
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


def _reconcile_models() -> list[type[ReconcileConfig]]:
    return [p.reconcile.settings for p in PROVIDERS.values() if p.reconcile is not None]


def _reconcile_keys() -> set[str]:
    """Every key some provider's ``[sources.reconcile]`` takes."""
    return {key for model in _reconcile_models() for key in model.model_fields}


def _expected(names: Sequence[str]) -> str:
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
    verify: SourceSettings | None = Field(default=None, validate_default=True)
    # The URL the provider posts to, as registered with it: the providers that sign it
    # (twilio, square, hubspot) need it, since behind a proxy hookd cannot know it; the
    # registration check (github, stripe) compares the provider's record with it.
    public_url: str | None = None
    # The file's top-level [retention], with this source's [sources.retention] over it.
    retention: RetentionConfig = RetentionConfig()
    # [sources.order]: per-object ordering of its events (hookd.ordering).
    order: OrderConfig | None = None

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not NAME_RE.fullmatch(value):
            # The name is the path of the source's URL (/hooks/NAME) and a label in metrics.
            raise ValueError(
                "must be 1 to 64 lowercase letters, digits and '-', starting with a letter or "
                "digit ([a-z0-9][a-z0-9-]{0,63})"
            )
        return value

    @field_validator("provider", mode="before")
    @classmethod
    def _provider(cls, value: object) -> object:
        if not (isinstance(value, str) and value in PROVIDERS):
            raise PydanticKnownError("literal_error", {"expected": _expected(list(PROVIDERS))})
        return value

    @field_validator("reconcile", mode="before")
    @classmethod
    def _reconcile(cls, value: object, info: ValidationInfo) -> object:
        """The table as the model of the source's provider (the shared keys' model when
        it has none, or is unknown). ``_check_reconcile`` then refuses other providers'
        keys, once the secrets are read."""
        if not isinstance(value, dict):
            return value  # not a table: the field's own type says so
        provider = PROVIDERS.get(info.data.get("provider", ""))
        model = ReconcileConfig
        if provider is not None and provider.reconcile is not None:
            model = provider.reconcile.settings
        return model.from_table(value, _reconcile_models())

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

    def get(self, name: str) -> Source | None:
        return self.by_name.get(name)

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(self.by_name.values())

    def __len__(self) -> int:
        return len(self.by_name)


def interpolate(value: Any, env: Mapping[str, str], where: list[str]) -> Any:
    """Replace ``${VAR}`` in every string, naming the key of a missing variable."""
    if isinstance(value, str):

        def repl(match: re.Match[str]) -> str:
            var = match.group(1)
            if var not in env:
                raise _KeyProblem(where, f"environment variable {var} is not set")
            return env[var]

        return VAR_RE.sub(repl, value)
    if isinstance(value, dict):
        return {k: interpolate(v, env, [*where, k]) for k, v in value.items()}
    if isinstance(value, list):
        return [interpolate(v, env, [*where, str(i)]) for i, v in enumerate(value)]
    return value


class _KeyProblem(Exception):
    def __init__(self, where: Sequence[str], message: str) -> None:
        super().__init__(message)
        self.where = list(where)
        self.message = message


def _source_label(raw: Any, index: int) -> str:
    if isinstance(raw, dict) and isinstance(raw.get("name"), str):
        return f"source {raw['name']!r}"
    return f"source #{index + 1}"


def _key_path(loc: Sequence[Any]) -> str:
    return ".".join(str(part) for part in loc) or "(source)"


# The tables of a source whose keys are checked, by where they sit in it.
_TABLES: dict[tuple[str, ...], type[BaseModel]] = {
    (): SourceConfig,
    ("forward",): ForwardConfig,
    ("retention",): RetentionConfig,
    ("order",): OrderConfig,
    ("handlers",): HandlerEntry,
    ("destinations",): DestinationConfig,
    ("destinations", "breaker"): BreakerConfig,
}


def _suggestion(key: str, valid: Sequence[str]) -> str:
    return did_you_mean(key, valid)


def _source_problem(err: ErrorDetails, named: Sequence[Any]) -> str:
    """What is wrong with a source's key, from the first error of its table."""
    if err["type"] == "extra_forbidden":
        return "unknown key" + _did_you_mean(_table_loc(named))
    if tuple(err["loc"]) == ("provider",):
        return _provider_problem(err.get("input"))
    return validation_problem(err)


def _provider_problem(value: object) -> str:
    """A ``provider`` that is not one: the closest registered name first, then all."""
    names = _expected(list(PROVIDERS))
    if not isinstance(value, str):
        return f"must be the name of a provider ({names}), not {input_kind(value)}"
    shown = value if len(value) <= 40 else value[:40] + "…"
    return f"unknown provider {shown!r}{did_you_mean(value, list(PROVIDERS))}; use one of {names}"


def _did_you_mean(loc: Sequence[Any]) -> str:
    """The closest valid key to an unknown one, from the table it was written in (for
    ``[sources.reconcile]``: from the keys of any provider)."""
    if not loc:
        return ""
    table = tuple(str(p) for p in loc[:-1])
    if table == ("reconcile",):
        return _suggestion(str(loc[-1]), sorted(_reconcile_keys()))
    if table == ("verify",):
        models = [p.configurable.settings for p in PROVIDERS.values() if p.configurable]
        keys = {key for model in models for key in model.model_fields}
        return _suggestion(str(loc[-1]), sorted(keys))
    model = _TABLES.get(table)
    if model is None:
        return ""
    return _suggestion(str(loc[-1]), list(model.model_fields))


def parse_sources(text: str, path: Path, env: Mapping[str, str] | None = None) -> Sources:
    env = os.environ if env is None else env
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    except RecursionError:
        raise ConfigError(f"{path}: not valid TOML: arrays or tables nested too deeply") from None
    raw_sources, default_retention = _top_level(path, data, env)
    by_name: dict[str, Source] = {}
    warnings: list[str] = []
    for index, raw in enumerate(raw_sources):
        label = _source_label(raw, index)
        try:
            resolved = interpolate(raw, env, [])
        except _KeyProblem as problem:
            raise ConfigError(
                f"{path}: {label}: key {_key_path(problem.where)!r}: {problem.message}"
            ) from None
        except RecursionError:
            raise ConfigError(f"{path}: {label}: values nested too deeply") from None
        _check_secrets(path, label, resolved)
        own_retention = resolved.get("retention") if isinstance(resolved, dict) else None
        resolved = _with_retention(resolved, own_retention, default_retention)
        try:
            config = SourceConfig.model_validate(resolved)
        except ValidationError as exc:
            errors = exc.errors()
            # A misspelt key shows up twice: as unknown, and as the real key missing.
            # The unknown one is what was written, so it is the one to report.
            err = next((e for e in errors if e["type"] == "extra_forbidden"), errors[0])
            named = _named_entries(err["loc"], resolved)
            loc = [p for p in named if not isinstance(p, int) or err["type"] != "extra_forbidden"]
            message = _source_problem(err, named)
            raise ConfigError(f"{path}: {label}: key {_key_path(loc)!r}: {message}") from None
        _check_destinations(path, label, config)
        if config.name in by_name:
            raise ConfigError(f"{path}: {label}: key 'name': duplicate source name")
        keys: list[Key] = []
        for i, secret in enumerate(config.secrets):
            try:
                keys.append(PROVIDERS[config.provider].parse_secret(secret))
            except UnicodeError:
                # The codec's message quotes the offending character: part of the secret.
                raise ConfigError(
                    f"{path}: {label}: key 'secrets.{i}': the secret is not plain text"
                ) from None
            except ValueError as exc:
                raise ConfigError(f"{path}: {label}: key 'secrets.{i}': {exc}") from None
        _check_reconcile(path, label, config, resolved.get("reconcile"))
        warnings += _check_urls(path, label, config)
        _check_order(path, label, config)
        _check_keys_kept(path, label, config, own_retention, default_retention)
        adapter = _adapter(path, label, config)
        by_name[config.name] = Source(config=config, keys=tuple(keys), adapter=adapter)
    return Sources(path=path, by_name=by_name, warnings=tuple(warnings))


def _named_entries(loc: Sequence[Any], resolved: Any) -> list[Any]:
    """``destinations.0.url`` as ``destinations.billing.url`` when the entry has a name
    (names only where the entry has one)."""
    out = list(loc)
    if not out or out[0] != "destinations" or not isinstance(resolved, dict):
        return out
    entries = resolved.get("destinations")
    if not isinstance(entries, list):
        return out
    index = out[1] if len(out) > 1 and isinstance(out[1], int) else None
    if index is not None and 0 <= index < len(entries):
        entry = entries[index]
        if isinstance(entry, dict) and isinstance(entry.get("name"), str):
            out[1] = entry["name"]
    return out


def _table_loc(loc: Sequence[Any]) -> list[Any]:
    """A location without the entries' indexes or names, for finding the table's model
    (``destinations.billing.breaker.x`` is a key of ``destinations.breaker``)."""
    parts = [p for p in loc if not isinstance(p, int)]
    if len(parts) > 2 and parts[0] == "destinations" and len(loc) > 1 and loc[1] == parts[1]:
        return [parts[0], *parts[2:]]
    return parts


def _check_destinations(path: Path, label: str, config: SourceConfig) -> None:
    """Names that would share a ledger entry: two destinations, or one called like the
    ``[sources.forward]`` table's."""
    seen = {FORWARD} if config.forward is not None else set()
    for destination in config.destinations:
        if destination.name in seen:
            why = (
                "the [sources.forward] table's ledger name"
                if destination.name == FORWARD
                else "a duplicate destination name"
            )
            raise ConfigError(
                f"{path}: {label}: key 'destinations.{destination.name}.name': {why}; "
                "give each destination its own name"
            )
        seen.add(destination.name)


# The prefixes of Standard Webhooks keys: a secret that is only one, and whitespace, is
# as good as none.
_KEY_PREFIXES = ("whsec_", "whsk_", "whpk_")


def _blank(value: str) -> bool:
    """A secret that is set but says nothing: only whitespace (an environment variable
    set to spaces, a line break left in a file), or a key prefix and whitespace. An
    empty one is left to the key's own rule ("is required", the provider's format)."""
    text = value
    for prefix in _KEY_PREFIXES:
        text = text.removeprefix(prefix)
    return bool(text) and not text.strip()


def _secrets_of(resolved: Mapping[str, Any]) -> Iterator[tuple[str, object]]:
    """(key, value) of every secret a source's table holds, as written (resolved)."""
    secrets = resolved.get("secrets")
    if isinstance(secrets, list):
        for i, value in enumerate(secrets):
            yield f"secrets.{i}", value
    forward = resolved.get("forward")
    if isinstance(forward, dict):
        yield "forward.secret", forward.get("secret")
    destinations = resolved.get("destinations")
    if isinstance(destinations, list):
        for i, entry in enumerate(destinations):
            if isinstance(entry, dict):
                name = entry.get("name")
                yield (
                    f"destinations.{name if isinstance(name, str) else i}.secret",
                    entry.get("secret"),
                )
    reconcile = resolved.get("reconcile")
    if isinstance(reconcile, dict):
        for key in ("token", "private_key"):
            yield f"reconcile.{key}", reconcile.get(key)


def _check_secrets(path: Path, label: str, resolved: Any) -> None:
    """Refuse a secret that is only whitespace: it would verify (or sign, or
    authenticate) with a key anyone can guess, where the intent was a real one."""
    if not isinstance(resolved, dict):
        return
    for key, value in _secrets_of(resolved):
        if isinstance(value, str) and _blank(value):
            prefix = next((p for p in _KEY_PREFIXES if value.startswith(p)), "")
            after = f" after its {prefix} prefix" if prefix else ""
            raise ConfigError(
                f"{path}: {label}: key {key!r}: the secret is only whitespace{after} (is "
                "the environment variable it comes from set to spaces?); set the real secret"
            )


# Addresses a URL may name that reach this machine or a network not on the internet:
# (kind, how a warning says it, networks). Only literal addresses (and localhost) are
# recognised: the configuration is never resolved through DNS.
_Network = ipaddress.IPv4Network | ipaddress.IPv6Network
_INTERNAL: tuple[tuple[str, str, tuple[_Network, ...]], ...] = (
    (
        "loopback",
        "a loopback address (this machine)",
        (ipaddress.ip_network("127.0.0.0/8"), ipaddress.ip_network("::1/128")),
    ),
    (
        "unspecified",
        "an unspecified address (this machine)",
        (ipaddress.ip_network("0.0.0.0/8"), ipaddress.ip_network("::/128")),
    ),
    (
        "private",
        "a private address (RFC 1918, fc00::/7)",
        (
            ipaddress.ip_network("10.0.0.0/8"),
            ipaddress.ip_network("172.16.0.0/12"),
            ipaddress.ip_network("192.168.0.0/16"),
            ipaddress.ip_network("fc00::/7"),
        ),
    ),
    (
        "link-local",
        "a link-local address (169.254.0.0/16, fe80::/10: where cloud metadata services are)",
        (ipaddress.ip_network("169.254.0.0/16"), ipaddress.ip_network("fe80::/10")),
    ),
)


def _literal_address(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """``host`` as an IP address when it is written as one: the usual forms, and the
    short, octal and hex IPv4 forms the system's resolver also reads without DNS
    (``127.1``, ``0x7f.0.0.1``, ``2130706433``)."""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        if not re.fullmatch(r"[0-9a-fx.]+", host):
            return None
        try:
            return ipaddress.IPv4Address(socket.inet_aton(host))
        except OSError:
            return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def internal_target(url: str) -> tuple[str, str, str] | None:
    """(host, kind, how a warning says it) when ``url`` names ``localhost`` or a literal
    loopback, unspecified, private or link-local address; None otherwise (a name is
    never resolved)."""
    try:
        host = urlsplit(url).hostname
    except ValueError:
        return None
    if not host:
        return None
    host = unquote(host).rstrip(".")
    if host == "localhost" or host.endswith(".localhost"):
        return host, "loopback", "a loopback name (this machine)"
    address = _literal_address(host)
    if address is None:
        return None
    for kind, said, networks in _INTERNAL:
        if any(address in network for network in networks):
            return host, kind, said
    return None


def _check_urls(path: Path, label: str, config: SourceConfig) -> list[str]:
    """Every URL that carries a secret (a destination's signed payloads, the reconcile
    API's token) must be https://, unless its table says ``allow_insecure = true``;
    one naming this machine or a private network is a warning (returned)."""
    targets: list[tuple[str, str, bool, str, str]] = []
    if config.forward is not None:
        targets.append(
            (
                "forward.url",
                config.forward.url,
                config.forward.allow_insecure,
                "the signed payloads",
                "[sources.forward]",
            )
        )
    for destination in config.destinations:
        targets.append(
            (
                f"destinations.{destination.name}.url",
                destination.url,
                destination.allow_insecure,
                "the signed payloads",
                "this [[sources.destinations]] table",
            )
        )
    rc = config.reconcile
    if rc is not None and rc.api_url:
        targets.append(
            (
                "reconcile.api_url",
                rc.api_url,
                rc.allow_insecure,
                "the API token",
                "[sources.reconcile]",
            )
        )
    warnings = []
    for key, url, allowed, carried, table in targets:
        scheme = url.partition("://")[0].lower() if "://" in url else ""
        if scheme != "https" and not (scheme == "http" and allowed):
            if scheme == "http":
                raise ConfigError(
                    f"{path}: {label}: key {key!r}: http:// would send {carried} "
                    f"unencrypted; use https://, or set allow_insecure = true in {table} "
                    "(a test server, a trusted network)"
                )
            raise ConfigError(f"{path}: {label}: key {key!r}: must be an https:// URL")
        internal = internal_target(url)
        if internal is not None:
            host, _, said = internal
            warnings.append(
                f"{path}: {label}: key {key!r}: {host} is {said}: hookd sends {carried} "
                "there; check that it is meant to"
            )
    return warnings


def _check_order(path: Path, label: str, config: SourceConfig) -> None:
    """``fetch = true`` needs a provider whose reconcile adapter can fetch an event's
    object, and the source's ``[sources.reconcile]`` table to call its API with."""
    order = config.order
    if order is None or not order.fetch:
        return
    spec = PROVIDERS[config.provider].reconcile
    if spec is None or not spec.objects:
        raise ConfigError(
            f"{path}: {label}: key 'order.fetch': {config.provider} sources cannot fetch an "
            "event's object from the provider's API; remove fetch (handlers get the event "
            "as delivered)"
        )
    if config.reconcile is None:
        raise ConfigError(
            f"{path}: {label}: key 'order.fetch': fetching objects uses the provider's API "
            "with the [sources.reconcile] table's api_url and token; add that table"
        )


def _check_reconcile(
    path: Path, label: str, config: SourceConfig, table: Mapping[str, Any] | None
) -> None:
    """What the table's model cannot say: no list API, another provider's key, a key
    this provider needs (``ReconcileConfig.incomplete``)."""
    rc = config.reconcile
    if rc is None or table is None:
        return

    def fail(key: str, message: str) -> ConfigError:
        return ConfigError(f"{path}: {label}: key 'reconcile.{key}': {message}")

    spec = PROVIDERS[config.provider].reconcile
    if spec is None:
        raise fail(
            "(table)", f"{config.provider} sources have no provider API to reconcile against"
        )
    own = set(spec.settings.model_fields)
    for other in PROVIDERS.values():
        if other.name == config.provider or other.reconcile is None:
            continue
        stray = sorted((set(table) & set(other.reconcile.settings.model_fields)) - own)
        if stray:
            raise fail(stray[0], f"not a {config.provider} setting")
    missing = rc.incomplete()
    if missing is not None:
        raise fail(*missing)


def _top_level(
    path: Path, data: Mapping[str, Any], env: Mapping[str, str]
) -> tuple[list[Any], dict[str, Any]]:
    """The ``[[sources]]`` tables, and the ``[retention]`` every source starts from."""
    unknown = sorted(set(data) - {"sources", "retention"})
    if unknown:
        hint = _suggestion(unknown[0], ["sources", "retention"])
        raise ConfigError(f"{path}: key {unknown[0]!r}: unknown top-level key{hint}")
    default_retention = _default_retention(path, data.get("retention", {}), env)
    raw_sources = data.get("sources", [])
    if not isinstance(raw_sources, list) or not raw_sources:
        raise ConfigError(f"{path}: key 'sources': at least one [[sources]] table is needed")
    return raw_sources, default_retention


def _with_retention(resolved: Any, own: object, default: Mapping[str, Any]) -> Any:
    """The source's table with its ``retention`` laid over the file's ``[retention]``
    (anything but a table is left for the model to refuse)."""
    if not isinstance(resolved, dict):
        return resolved
    if isinstance(own, dict):
        return {**resolved, "retention": {**default, **own}}
    if own is None:
        return {**resolved, "retention": dict(default)}
    return resolved


def _default_retention(path: Path, table: object, env: Mapping[str, str]) -> dict[str, Any]:
    """The top-level ``[retention]`` table, checked on its own (its errors name it, not a
    source); every source starts from it."""
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: key 'retention': must be a table ([retention])")
    try:
        resolved: dict[str, Any] = interpolate(table, env, ["retention"])
        RetentionConfig.model_validate(resolved)
    except _KeyProblem as problem:
        raise ConfigError(f"{path}: key {_key_path(problem.where)!r}: {problem.message}") from None
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ["retention", *err["loc"]]
        message = (
            "unknown key" + _did_you_mean(loc)
            if err["type"] == "extra_forbidden"
            else validation_problem(err)
        )
        raise ConfigError(f"{path}: key {_key_path(loc)!r}: {message}") from None
    return resolved


def _check_keys_kept(
    path: Path,
    label: str,
    config: SourceConfig,
    own: object,
    default: Mapping[str, Any],
) -> None:
    """Refuse a ``keep_keys_days`` shorter than the source's redelivery horizon: a key
    deleted before the provider stops sending (or listing) its event would let that
    event be stored, and its handlers run, a second time."""
    kept = config.retention.keep_keys_days
    needed, why = keys_needed(PROVIDERS[config.provider], config.reconcile)
    if kept >= needed:
        return
    least = math.ceil(needed)
    if isinstance(own, dict) and "keep_keys_days" in own:
        raise ConfigError(
            f"{path}: {label}: key 'retention.keep_keys_days': {kept:g} days is shorter than "
            f"{why}: a redelivery after its key is gone would be stored and processed "
            f"again; set keep_keys_days = {least} or more"
        )
    where = "the [retention] default" if "keep_keys_days" in default else "the default"
    raise ConfigError(
        f"{path}: {label}: key 'retention.keep_keys_days': {kept:g} days ({where}) is "
        f"shorter than {why}: a redelivery after its key is gone would be stored and "
        f"processed again; set keep_keys_days = {least} or more in [retention] or in "
        "this source's [sources.retention]"
    )


def _adapter(path: Path, label: str, config: SourceConfig) -> Provider:
    provider = PROVIDERS[config.provider]
    if provider.with_public_url is not None:
        if config.public_url is None:
            raise ConfigError(
                f"{path}: {label}: key 'public_url': {provider.name} signs the URL it posts "
                f"to; set public_url to the URL registered with {provider.name}"
            )
        bound = provider.with_public_url(config.public_url)
        # The URL changes how requests verify and samples sign; all else the provider
        # declares (its horizon, list API, answers, handshakes) stays as registered.
        return dataclasses.replace(
            provider,
            check_headers=bound.check_headers,
            verify=bound.verify,
            envelope=bound.envelope,
            sample_event=bound.sample_event,
        )
    checked = provider.reconcile is not None and provider.reconcile.registration
    if config.public_url is not None and not checked:
        raise ConfigError(
            f"{path}: {label}: key 'public_url': {provider.name} does not sign the URL "
            "and its registration cannot be checked; remove it"
        )
    if provider.configurable is None or config.verify is None:
        return provider
    missing = config.verify.incomplete()
    if missing is not None:
        raise ConfigError(f"{path}: {label}: key 'verify.{missing[0]}': {missing[1]}")
    return provider.configurable.bind(config.verify)


class SourcesFileMissing(ConfigError):
    """No sources file at ``path``. The command line, which knows whether the path came
    from ``--config``, HOOKD_CONFIG or the default, words the hint itself."""

    def __init__(self, path: Path) -> None:
        super().__init__(f"{path}: sources file not found (set HOOKD_CONFIG)")
        self.path = path


def load_sources(path: Path, env: Mapping[str, str] | None = None) -> Sources:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SourcesFileMissing(path) from None
    except IsADirectoryError:
        raise ConfigError(f"{path}: is a directory, not a sources file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read sources file: {exc}") from None
    return parse_sources(text, path, env)


def api_url(source: SourceConfig) -> str:
    rc = source.reconcile
    if rc is not None and rc.api_url:
        return rc.api_url.rstrip("/")
    spec = PROVIDERS[source.provider].reconcile
    return spec.api_url if spec is not None else ""
