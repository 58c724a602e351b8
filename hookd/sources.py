"""Sources: the TOML file that names each webhook source, its secrets and settings.

``Settings.from_env()`` is the one place the environment is read; everything
else is handed a ``Settings`` and a ``Sources``. Every problem with the sources
file raises ``ConfigError`` whose text is one line naming file, source and key.
"""

from __future__ import annotations

import difflib
import os
import re
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from hookd.errors import ConfigError
from hookd.providers import PROVIDERS
from hookd.providers.base import Key

NAME_RE = re.compile(r"[a-z0-9][a-z0-9-]{0,63}")
VAR_RE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
MAX_BODY_LIMIT = 64 * 1024 * 1024




class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ForwardConfig(_Strict):
    url: str
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


PROVIDER_RECONCILE_KEYS: dict[str, frozenset[str]] = {
    "github": frozenset({"hook", "app_id", "private_key", "repair"}),
    "stripe": frozenset(),
    "slack": frozenset({"channels", "requests_per_minute"}),
    "standard": frozenset(),
}
DEFAULT_API_URLS = {
    "github": "https://api.github.com",
    "stripe": "https://api.stripe.com",
    "slack": "https://slack.com/api",
}


class ReconcileConfig(_Strict):
    api_url: str | None = None
    token: str | None = None
    hook: str | None = None
    app_id: int | None = None
    private_key: str | None = None
    repair: Literal["fetch", "redeliver"] = "fetch"
    channels: tuple[str, ...] = ()
    requests_per_minute: float = Field(default=1.0, gt=0, le=10_000)
    every_s: float = Field(default=900.0, gt=0)
    min_every_s: float | None = Field(default=None, gt=0)
    max_every_s: float | None = Field(default=None, gt=0)
    lookback_s: float = Field(default=259_200.0, gt=0)
    overlap_s: float = Field(default=300.0, ge=0)
    disable_after_auth_failures: int = Field(default=3, ge=1)

    @field_validator("hook")
    @classmethod
    def _hook(cls, value: str | None) -> str | None:
        if value is None or value == "app":
            return value
        if not re.fullmatch(r"(repos/[^/\s]+/[^/\s]+|orgs/[^/\s]+)/hooks/[0-9]+", value):
            raise ValueError('must be "repos/OWNER/REPO/hooks/ID", "orgs/ORG/hooks/ID" or "app"')
        return value

    @model_validator(mode="after")
    def _bounds(self) -> ReconcileConfig:
        low = self.min_every_s if self.min_every_s is not None else self.every_s
        high = self.max_every_s if self.max_every_s is not None else self.every_s
        if not low <= self.every_s <= high:
            raise ValueError("needs min_every_s <= every_s <= max_every_s")
        return self


class SourceConfig(_Strict):
    name: str
    provider: Literal["github", "stripe", "slack", "standard"]
    secrets: tuple[str, ...] = Field(min_length=1)
    tolerance_s: int = Field(default=300, gt=0, le=86_400)
    max_body_bytes: int = Field(default=1_048_576, gt=0, le=MAX_BODY_LIMIT)
    handlers: tuple[str, ...] = ()
    forward: ForwardConfig | None = None
    reconcile: ReconcileConfig | None = None
    max_attempts: int = Field(default=8, ge=1, le=100)

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not NAME_RE.fullmatch(value):
            raise ValueError("must match [a-z0-9][a-z0-9-]{0,63}")
        return value

    @field_validator("handlers")
    @classmethod
    def _handlers(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for ref in value:
            if not re.fullmatch(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*", ref):
                raise ValueError(f'{ref!r} is not "module:function"')
        return value


@dataclass(frozen=True, slots=True)
class Source:
    """A validated source with its secrets parsed into keys."""

    config: SourceConfig
    keys: tuple[Key, ...]

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
    ("reconcile",): ReconcileConfig,
}


def _suggestion(key: str, valid: Sequence[str]) -> str:
    close = difflib.get_close_matches(key, valid, n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _did_you_mean(loc: Sequence[Any]) -> str:
    """The closest valid key to an unknown one, from the table it was written in."""
    model = _TABLES.get(tuple(str(p) for p in loc[:-1]))
    if model is None or not loc:
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
    unknown = sorted(set(data) - {"sources"})
    if unknown:
        hint = _suggestion(unknown[0], ["sources"])
        raise ConfigError(f"{path}: key {unknown[0]!r}: unknown top-level key{hint}")
    raw_sources = data.get("sources", [])
    if not isinstance(raw_sources, list) or not raw_sources:
        raise ConfigError(f"{path}: key 'sources': at least one [[sources]] table is needed")
    by_name: dict[str, Source] = {}
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
        try:
            config = SourceConfig.model_validate(resolved)
        except ValidationError as exc:
            errors = exc.errors()
            # A misspelt key shows up twice: as unknown, and as the real key missing.
            # The unknown one is what was written, so it is the one to report.
            err = next((e for e in errors if e["type"] == "extra_forbidden"), errors[0])
            loc = [
                p for p in err["loc"] if not isinstance(p, int) or err["type"] != "extra_forbidden"
            ]
            message = (
                "unknown key" + _did_you_mean(loc)
                if err["type"] == "extra_forbidden"
                else err["msg"]
            )
            raise ConfigError(f"{path}: {label}: key {_key_path(loc)!r}: {message}") from None
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
        _check_reconcile(path, label, config)
        by_name[config.name] = Source(config=config, keys=tuple(keys))
    return Sources(path=path, by_name=by_name)


def _check_reconcile(path: Path, label: str, config: SourceConfig) -> None:
    rc = config.reconcile
    if rc is None:
        return

    def fail(key: str, message: str) -> ConfigError:
        return ConfigError(f"{path}: {label}: key 'reconcile.{key}': {message}")

    if config.provider == "standard":
        raise fail("(table)", "standard sources have no provider API to reconcile against")
    given = {k for k in rc.model_fields_set if k in ReconcileConfig.model_fields}
    for other, keys in PROVIDER_RECONCILE_KEYS.items():
        if other == config.provider:
            continue
        stray = sorted((given & keys) - PROVIDER_RECONCILE_KEYS[config.provider])
        if stray:
            raise fail(stray[0], f"not a {config.provider} setting")
    if not rc.token and not (config.provider == "github" and rc.hook == "app"):
        raise fail("token", "is required")
    if config.provider == "github":
        if rc.hook is None:
            raise fail("hook", "is required for github")
        if rc.hook == "app" and (rc.app_id is None or not rc.private_key):
            raise fail(
                "app_id" if rc.app_id is None else "private_key", 'is required with hook = "app"'
            )
    if config.provider == "slack" and not rc.channels:
        raise fail("channels", "is required for slack")


def load_sources(path: Path, env: Mapping[str, str] | None = None) -> Sources:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{path}: sources file not found (set HOOKD_CONFIG)") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read sources file: {exc}") from None
    return parse_sources(text, path, env)


def api_url(source: SourceConfig) -> str:
    rc = source.reconcile
    if rc is not None and rc.api_url:
        return rc.api_url.rstrip("/")
    return DEFAULT_API_URLS.get(source.provider, "")
