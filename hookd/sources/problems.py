"""How a problem in the sources file is found and worded: ``${VAR}`` references, the
key a validation error names (a destination by its name), the closest valid key."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel
from pydantic_core import ErrorDetails

from hookd.errors import did_you_mean, input_kind, validation_problem
from hookd.ordering import OrderConfig
from hookd.providers import PROVIDERS
from hookd.routing import (
    BreakerConfig,
    DestinationConfig,
    HandlerEntry,
)
from hookd.sources.expect import ExpectConfig
from hookd.sources.models import (
    ForwardConfig,
    RetentionConfig,
    SourceConfig,
    expected,
    reconcile_keys,
)

VAR_RE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def interpolate(value: Any, env: Mapping[str, str], where: list[str]) -> Any:
    """Replace ``${VAR}`` in every string, naming the key of a missing variable."""
    if isinstance(value, str):

        def repl(match: re.Match[str]) -> str:
            var = match.group(1)
            if var not in env:
                raise KeyProblem(where, f"environment variable {var} is not set")
            return env[var]

        return VAR_RE.sub(repl, value)
    if isinstance(value, dict):
        return {k: interpolate(v, env, [*where, k]) for k, v in value.items()}
    if isinstance(value, list):
        return [interpolate(v, env, [*where, str(i)]) for i, v in enumerate(value)]
    return value


class KeyProblem(Exception):
    def __init__(self, where: Sequence[str], message: str) -> None:
        super().__init__(message)
        self.where = list(where)
        self.message = message


def source_label(raw: Any, index: int) -> str:
    if isinstance(raw, dict) and isinstance(raw.get("name"), str):
        return f"source {raw['name']!r}"
    return f"source #{index + 1}"


def key_path(loc: Sequence[Any]) -> str:
    return ".".join(str(part) for part in loc) or "(source)"


# The tables of a source whose keys are checked, by where they sit in it.
_TABLES: dict[tuple[str, ...], type[BaseModel]] = {
    (): SourceConfig,
    ("forward",): ForwardConfig,
    ("retention",): RetentionConfig,
    ("order",): OrderConfig,
    ("expect",): ExpectConfig,
    ("handlers",): HandlerEntry,
    ("destinations",): DestinationConfig,
    ("destinations", "breaker"): BreakerConfig,
}


def _suggestion(key: str, valid: Sequence[str]) -> str:
    return did_you_mean(key, valid)


def source_problem(err: ErrorDetails, named: Sequence[Any]) -> str:
    """What is wrong with a source's key, from the first error of its table."""
    if err["type"] == "extra_forbidden":
        return "unknown key" + did_you_mean_key(_table_loc(named))
    if tuple(err["loc"]) == ("provider",):
        return _provider_problem(err.get("input"))
    return validation_problem(err)


def _provider_problem(value: object) -> str:
    """A ``provider`` that is not one: the closest registered name first, then all."""
    names = expected(list(PROVIDERS))
    if not isinstance(value, str):
        return f"must be the name of a provider ({names}), not {input_kind(value)}"
    shown = value if len(value) <= 40 else value[:40] + "…"
    return f"unknown provider {shown!r}{did_you_mean(value, list(PROVIDERS))}; use one of {names}"


def did_you_mean_key(loc: Sequence[Any]) -> str:
    """The closest valid key to an unknown one, from the table it was written in (for
    ``[sources.reconcile]``: from the keys of any provider)."""
    if not loc:
        return ""
    table = tuple(str(p) for p in loc[:-1])
    if table == ("reconcile",):
        return _suggestion(str(loc[-1]), sorted(reconcile_keys()))
    if table == ("verify",):
        models = [p.configurable.settings for p in PROVIDERS.values() if p.configurable]
        keys = {key for model in models for key in model.model_fields}
        return _suggestion(str(loc[-1]), sorted(keys))
    model = _TABLES.get(table)
    if model is None:
        return ""
    return _suggestion(str(loc[-1]), list(model.model_fields))


def named_entries(loc: Sequence[Any], resolved: Any) -> list[Any]:
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
