"""Reading the sources file's ``[[notify]]`` tables and its ``[alerts]``: each bad value
one line naming the file, the channel and the key; what a model alone cannot check (the
keys of each kind of channel, the sources named, https://, the SMTP password over TLS,
the ``ca_file``)."""

from __future__ import annotations

import ssl
from collections.abc import Callable, Collection, Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from hookd.errors import ConfigError, did_you_mean, input_kind, validation_problem
from hookd.sources.notify import NOTIFY_KEYS, NOTIFY_KINDS, AlertsConfig, NotifyConfig
from hookd.sources.problems import KeyProblem, interpolate, key_path
from hookd.sources.urls import checked_url, internal_target

# The keys only some kinds of channel take: (kinds that take it, what it is).
_KIND_KEYS: dict[str, tuple[tuple[str, ...], str]] = {
    "url": (("slack", "webhook", "pagerduty"), "the URL to POST to"),
    "secret": (("webhook",), "the whsec_ secret the alerts are signed with"),
    "routing_key": (("pagerduty",), "the integration key of the service's Events API v2"),
    "smtp_url": (("email",), "smtp://[user:password@]host[:port]"),
    "from": (("email",), "the sender's address"),
    "to": (("email",), 'the recipients\' addresses: ["ops@example.com"]'),
    "starttls": (("email",), ""),
    "ca_file": (("email",), ""),
}
# The keys a kind of channel cannot do without, and what to give.
_NEEDED: dict[str, tuple[tuple[str, str], ...]] = {
    "slack": (("url", "the Slack incoming webhook's URL, https://hooks.slack.com/services/..."),),
    "webhook": (
        ("url", "the URL the signed alerts are POSTed to"),
        ("secret", "a whsec_ secret the receiver verifies them with"),
    ),
    "pagerduty": (("routing_key", _KIND_KEYS["routing_key"][1]),),
    "email": tuple((key, _KIND_KEYS[key][1]) for key in ("smtp_url", "from", "to")),
}
_TABLE = "this [[notify]] table"
# What an http:// URL of each kind would send unencrypted.
_CARRIED = {
    "slack": "the Slack webhook URL's token",
    "webhook": "the signed alerts",
    "pagerduty": "the routing key",
}


def parse_alerts(path: Path, table: object, env: Mapping[str, str]) -> AlertsConfig:
    """The top-level ``[alerts]`` table (its defaults when absent)."""
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: key 'alerts': must be a table ([alerts])")
    try:
        return AlertsConfig.model_validate(interpolate(table, env, ["alerts"]))
    except KeyProblem as problem:
        raise ConfigError(f"{path}: key {key_path(problem.where)!r}: {problem.message}") from None
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ["alerts", *err["loc"]]
        message = (
            "unknown key" + did_you_mean(str(err["loc"][-1]), list(AlertsConfig.model_fields))
            if err["type"] == "extra_forbidden"
            else validation_problem(err)
        )
        raise ConfigError(f"{path}: key {key_path(loc)!r}: {message}") from None


def parse_notify(
    path: Path, tables: object, env: Mapping[str, str], source_names: Collection[str]
) -> tuple[tuple[NotifyConfig, ...], list[str]]:
    """The ``[[notify]]`` tables, each checked in turn, and the warnings of their URLs
    (a secret sent to this machine or a private network)."""
    if not isinstance(tables, list):
        raise ConfigError(
            f"{path}: key 'notify': must be [[notify]] tables, one per channel, "
            f"not {input_kind(tables)}"
        )
    configs: dict[str, NotifyConfig] = {}
    warnings: list[str] = []
    for index, raw in enumerate(tables):
        label = _label(raw, index)
        if not isinstance(raw, dict):
            raise ConfigError(f"{path}: {label}: must be a table ([[notify]])")
        config, warning = _channel(path, label, raw, env, source_names)
        if config.name in configs:
            raise ConfigError(f"{path}: {label}: key 'name': duplicate [[notify]] name")
        configs[config.name] = config
        if warning is not None:
            warnings.append(warning)
    return tuple(configs.values()), warnings


def _a(kind: str) -> str:
    return f"an {kind}" if kind == "email" else f"a {kind}"


def _listed(kinds: tuple[str, ...]) -> str:
    return kinds[0] if len(kinds) == 1 else f"{', '.join(kinds[:-1])} and {kinds[-1]}"


def _label(raw: object, index: int) -> str:
    if isinstance(raw, dict) and isinstance(raw.get("name"), str):
        return f"notify {raw['name']!r}"
    return f"notify #{index + 1}"


def _channel(
    path: Path,
    label: str,
    raw: dict[str, Any],
    env: Mapping[str, str],
    source_names: Collection[str],
) -> tuple[NotifyConfig, str | None]:
    def problem(key: str, message: str) -> ConfigError:
        return ConfigError(f"{path}: {label}: key {key!r}: {message}")

    try:
        resolved: dict[str, Any] = interpolate(raw, env, [])
    except KeyProblem as exc:
        raise problem(key_path(exc.where), exc.message) from None
    kind = resolved.get("kind")
    if isinstance(kind, str) and kind in NOTIFY_KINDS:
        for key in resolved:
            takers, _ = _KIND_KEYS.get(key, ((kind,), ""))
            if kind not in takers:
                raise problem(
                    key,
                    f"{_a(kind)} channel takes no {key!r} ({_listed(takers)} channels "
                    "do); remove it",
                )
    config = _validated(path, label, resolved)
    for key, what in _NEEDED[config.kind]:
        if resolved.get(key) is None:
            raise problem(key, f"is required for {_a(config.kind)} channel; add it ({what})")
    unknown = [name for name in config.sources or () if name not in source_names]
    if unknown:
        hint = did_you_mean(unknown[0], list(source_names))
        raise problem(
            "sources",
            f"no source named {unknown[0]!r}{hint}; name sources of this file's [[sources]] "
            "(or leave the key out: every source)",
        )
    if config.kind == "email":
        return _email(path, config, problem), smtp_warning(path, label, config)
    warning = checked_url(
        path,
        label,
        "url",
        config.post_url,
        allowed=config.allow_insecure,
        carried=_CARRIED[config.kind],
        table=_TABLE,
    )
    return config, warning


def _validated(path: Path, label: str, resolved: dict[str, Any]) -> NotifyConfig:
    try:
        return NotifyConfig.model_validate(resolved)
    except ValidationError as exc:
        errors = exc.errors()
        # A misspelt key shows up twice, as unknown and as the real one missing: the
        # unknown one is what was written.
        err = next((e for e in errors if e["type"] == "extra_forbidden"), errors[0])
        loc = [str(part) for part in err["loc"]]
        if err["type"] == "extra_forbidden":
            message = "unknown key" + did_you_mean(loc[-1], NOTIFY_KEYS)
        elif loc == ["kind"] and err["type"] == "literal_error":
            message = _kind_problem(err.get("input"))
        else:
            message = validation_problem(err)
        raise ConfigError(f"{path}: {label}: key {key_path(loc)!r}: {message}") from None


def _kind_problem(value: object) -> str:
    kinds = ", ".join(NOTIFY_KINDS)
    if not isinstance(value, str):
        return f"must be the kind of channel ({kinds}), not {input_kind(value)}"
    shown = value if len(value) <= 40 else value[:40] + "…"
    return f"unknown kind {shown!r}{did_you_mean(value, NOTIFY_KINDS)}; use one of {kinds}"


def _email(
    path: Path, config: NotifyConfig, problem: Callable[[str, str], ConfigError]
) -> NotifyConfig:
    """An email channel's TLS rules: a password only over TLS unless allowed, and its
    ``ca_file`` read now (a missing or unreadable file is a start-up error, not a
    notification lost later)."""
    server = config.smtp
    if server.password is not None and not config.tls and not config.allow_insecure:
        raise problem(
            "starttls",
            "false would send the SMTP password unencrypted; set starttls = true (or use "
            f"smtps://), or set allow_insecure = true in {_TABLE} (a trusted network)",
        )
    if config.ca_file is None:
        return config
    if not config.tls:
        raise problem("ca_file", "is used for TLS only; set starttls = true or remove ca_file")
    ca_file = (path.parent / config.ca_file).resolve()
    try:
        ssl.create_default_context(cafile=str(ca_file))
    except FileNotFoundError:
        raise problem(
            "ca_file",
            f"no file at {ca_file}; give the PEM file of the certificate (or its CA) the "
            "SMTP server presents (a relative path is from the sources file's folder)",
        ) from None
    except (OSError, ssl.SSLError, ValueError):
        raise problem(
            "ca_file", f"{ca_file} holds no PEM certificate that can be read; check the file"
        ) from None
    return config.model_copy(update={"ca_file": str(ca_file)})


def smtp_warning(path: Path, label: str, config: NotifyConfig) -> str | None:
    """An email channel whose password goes to this machine or a private network."""
    if config.kind != "email" or config.smtp.password is None:
        return None
    internal = internal_target(config.smtp_url or "")
    if internal is None:
        return None
    host, _, said = internal
    return (
        f"{path}: {label}: key 'smtp_url': {host} is {said}: hookd sends the SMTP password "
        "there; check that it is meant to"
    )
