"""What a source's models cannot say alone: names that would share a ledger entry,
blank secrets, a reconcile table of another provider, ``[sources.order] fetch``, keys
kept shorter than redeliveries come, and the provider a source's settings make."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from hookd.errors import ConfigError
from hookd.providers import PROVIDERS
from hookd.providers.base import Provider
from hookd.routing import (
    FORWARD,
)
from hookd.sources.models import SourceConfig, keys_needed


def check_destinations(path: Path, label: str, config: SourceConfig) -> None:
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


def check_secrets(path: Path, label: str, resolved: Any) -> None:
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


def check_order(path: Path, label: str, config: SourceConfig) -> None:
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


def check_reconcile(
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


def check_keys_kept(
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


def adapter_of(path: Path, label: str, config: SourceConfig) -> Provider:
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
            scheme=bound.scheme,
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
