"""Reading the sources file: TOML, ``${VAR}`` references, the top-level
``[retention]``, then each source validated and checked in turn, then the ``[[notify]]``
channels (which name sources) and ``[alerts]``."""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from hookd.errors import ConfigError, did_you_mean, validation_problem
from hookd.providers import PROVIDERS
from hookd.providers.base import Key
from hookd.sources.checks import (
    adapter_of,
    check_destinations,
    check_keys_kept,
    check_order,
    check_reconcile,
    check_secrets,
)
from hookd.sources.models import RetentionConfig, Source, SourceConfig, Sources
from hookd.sources.notify_checks import parse_alerts, parse_notify
from hookd.sources.problems import (
    KeyProblem,
    did_you_mean_key,
    interpolate,
    key_path,
    named_entries,
    source_label,
    source_problem,
)
from hookd.sources.urls import check_urls

# The sources file's top-level keys: [[sources]], [retention], [[notify]], [alerts].
_TOP_LEVEL = ("sources", "retention", "notify", "alerts")


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
        label = source_label(raw, index)
        resolved = _resolved(path, label, raw, env)
        check_secrets(path, label, resolved)
        own_retention = resolved.get("retention") if isinstance(resolved, dict) else None
        resolved = _with_retention(resolved, own_retention, default_retention)
        config = _validated(path, label, resolved)
        check_destinations(path, label, config)
        if config.name in by_name:
            raise ConfigError(f"{path}: {label}: key 'name': duplicate source name")
        keys = _keys(path, label, config)
        check_reconcile(path, label, config, resolved.get("reconcile"))
        warnings += check_urls(path, label, config)
        check_order(path, label, config)
        check_keys_kept(path, label, config, own_retention, default_retention)
        adapter = adapter_of(path, label, config)
        by_name[config.name] = Source(config=config, keys=keys, adapter=adapter)
    notify, notify_warnings = parse_notify(path, data.get("notify", []), env, list(by_name))
    alerts = parse_alerts(path, data.get("alerts", {}), env)
    return Sources(
        path=path,
        by_name=by_name,
        warnings=(*warnings, *notify_warnings),
        notify=notify,
        alerts=alerts,
    )


def _resolved(path: Path, label: str, raw: Any, env: Mapping[str, str]) -> Any:
    """A source's table with its ``${VAR}`` references replaced."""
    try:
        return interpolate(raw, env, [])
    except KeyProblem as problem:
        raise ConfigError(
            f"{path}: {label}: key {key_path(problem.where)!r}: {problem.message}"
        ) from None
    except RecursionError:
        raise ConfigError(f"{path}: {label}: values nested too deeply") from None


def _validated(path: Path, label: str, resolved: Any) -> SourceConfig:
    """A source's table as its model, or the one line that says what is wrong with it."""
    try:
        return SourceConfig.model_validate(resolved)
    except ValidationError as exc:
        errors = exc.errors()
        # A misspelt key shows up twice: as unknown, and as the real key missing.
        # The unknown one is what was written, so it is the one to report.
        err = next((e for e in errors if e["type"] == "extra_forbidden"), errors[0])
        named = named_entries(err["loc"], resolved)
        loc = [p for p in named if not isinstance(p, int) or err["type"] != "extra_forbidden"]
        message = source_problem(err, named)
        raise ConfigError(f"{path}: {label}: key {key_path(loc)!r}: {message}") from None


def _keys(path: Path, label: str, config: SourceConfig) -> tuple[Key, ...]:
    """A source's secrets, parsed by its provider."""
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
    return tuple(keys)


def _top_level(
    path: Path, data: Mapping[str, Any], env: Mapping[str, str]
) -> tuple[list[Any], dict[str, object]]:
    """The ``[[sources]]`` tables, and the ``[retention]`` every source starts from."""
    unknown = sorted(set(data) - set(_TOP_LEVEL))
    if unknown:
        hint = did_you_mean(unknown[0], _TOP_LEVEL)
        raise ConfigError(f"{path}: key {unknown[0]!r}: unknown top-level key{hint}")
    default_retention = _default_retention(path, data.get("retention", {}), env)
    raw_sources = data.get("sources", [])
    if not isinstance(raw_sources, list) or not raw_sources:
        raise ConfigError(f"{path}: key 'sources': at least one [[sources]] table is needed")
    return raw_sources, default_retention


def _with_retention(resolved: Any, own: object, default: Mapping[str, object]) -> Any:
    """The source's table with its ``retention`` laid over the file's ``[retention]``
    (anything but a table is left for the model to refuse)."""
    if not isinstance(resolved, dict):
        return resolved
    if isinstance(own, dict):
        return {**resolved, "retention": {**default, **own}}
    if own is None:
        return {**resolved, "retention": dict(default)}
    return resolved


def _default_retention(path: Path, table: object, env: Mapping[str, str]) -> dict[str, object]:
    """The top-level ``[retention]`` table, checked on its own (its errors name it, not a
    source); every source starts from it."""
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: key 'retention': must be a table ([retention])")
    try:
        resolved: dict[str, object] = interpolate(table, env, ["retention"])
        RetentionConfig.model_validate(resolved)
    except KeyProblem as problem:
        raise ConfigError(f"{path}: key {key_path(problem.where)!r}: {problem.message}") from None
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ["retention", *err["loc"]]
        message = (
            "unknown key" + did_you_mean_key(loc)
            if err["type"] == "extra_forbidden"
            else validation_problem(err)
        )
        raise ConfigError(f"{path}: key {key_path(loc)!r}: {message}") from None
    return resolved


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
