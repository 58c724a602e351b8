"""What a provider declares to be reconciled: the model of its ``[sources.reconcile]``
table, its API's default URL and the list adapter that pages through that API.

``ReconcileConfig`` holds the keys every provider takes (token, schedule); a provider
with keys of its own subclasses it in its module, giving each a default: what a key
needs from the others is said by ``incomplete``, not by a validator, because a key's
value is also checked alone (``value_errors``). ``hookd.sources`` asks the model of a
source's provider to read the source's table (``from_table``).

The adapter is named by a string, not imported: adapters live in ``reconcile/``, a
layer above this one, and only the poller resolves the name (see
``docs/architecture.md``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Self, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    model_validator,
)
from pydantic_core import ErrorDetails, InitErrorDetails, PydanticCustomError

# The keys that shape the schedule: listed after the provider's own (README, errors).
SCHEDULE_KEYS = frozenset(
    {
        "every_s",
        "min_every_s",
        "max_every_s",
        "lookback_s",
        "overlap_s",
        "settle_s",
        "disable_after_auth_failures",
    }
)


class ReconcileConfig(BaseModel):
    """``[sources.reconcile]``: the keys of every provider that can be reconciled."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    api_url: str | None = None
    token: str | None = None
    # A plain http:// api_url is refused unless this is set (hookd.sources checks it).
    allow_insecure: bool = False
    # The most one answer of the provider API may hold, decoded; None: reconcile's
    # default (16 MiB, reconcile.http.MAX_ANSWER_BYTES).
    max_answer_bytes: int | None = Field(default=None, gt=0)
    every_s: float = Field(default=900.0, gt=0)
    min_every_s: float | None = Field(default=None, gt=0)
    max_every_s: float | None = Field(default=None, gt=0)
    lookback_s: float = Field(default=259_200.0, gt=0)
    overlap_s: float = Field(default=300.0, ge=0)
    # Events younger than this are not judged (their webhook may be on its way); None:
    # the provider's default (``Reconciling.settle_s``). See ``settle_for``.
    settle_s: float | None = Field(default=None, ge=0, le=86_400)
    disable_after_auth_failures: int = Field(default=3, ge=1)

    @model_validator(mode="after")
    def _bounds(self) -> ReconcileConfig:
        low = self.min_every_s if self.min_every_s is not None else self.every_s
        high = self.max_every_s if self.max_every_s is not None else self.every_s
        if not low <= self.every_s <= high:
            raise ValueError("needs min_every_s <= every_s <= max_every_s")
        return self

    @classmethod
    def from_table(cls, table: Mapping[str, Any], models: Sequence[type[ReconcileConfig]]) -> Self:
        """``table`` as this model, or a ``ValidationError`` naming each wrong key in the
        order of ``key_order(models)`` (``models``: every provider's).

        A key that only other models take is not given to this one: the caller names it
        as another provider's, once the source's secrets are read. Its value is checked
        all the same, by the first of ``models`` that takes it, so that a wrong value
        there is reported first and in its place, as for any key of the table."""
        order = key_order(models)
        theirs = {k: v for k, v in table.items() if k in order and k not in cls.model_fields}
        settings, errors = _validated(cls, {k: v for k, v in table.items() if k not in theirs})
        errors = _keys_first(errors + _others_errors(theirs, models))
        if settings is not None and not errors:
            return settings
        raise _ordered(cls.__name__, errors, order)

    @classmethod
    def value_errors(cls, values: Mapping[str, Any]) -> list[ErrorDetails]:
        """The errors of ``values``, some keys of this model, each checked alone: the rest
        of the table is not there, so a check of the whole table is not made."""
        return [e for e in _validated(cls, values)[1] if e["loc"]]

    def incomplete(self) -> tuple[str, str] | None:
        """The first key the provider needs that the table lacks, with what to say about
        it; ``None`` when nothing is missing. Asked once the values themselves are valid,
        so that a missing key is reported after a wrong one, never instead of it."""
        if not self.token:
            return "token", "is required"
        return None

    def list_retention_days(self) -> float | None:
        """How long the provider's list API keeps what it lists, when this source's
        settings say (Slack: by plan); None: what the provider declares."""
        return None


@dataclass(frozen=True, slots=True)
class Reconciling:
    """A provider's list API, for ``Provider.reconcile``."""

    # The model of the provider's [sources.reconcile] table.
    settings: type[ReconcileConfig]
    # Where the API is when the table has no ``api_url``.
    api_url: str
    # "package.module:Class" of its ``reconcile.providers.base.ListAdapter``.
    adapter: str
    # How long after an event a run may judge it (``settle_s`` unless the source sets
    # its own): the time its webhook normally takes to arrive, retries that come soon
    # included, with room for clock skew. docs/providers.md gives each one's reason.
    settle_s: float = 300.0
    # How far back the list API reaches, in days; None: the provider's
    # ``redelivery_horizon_days`` (which, for a provider with a list API, is that).
    retention_days: float | None = None
    # Whether the API shows the webhook's registration (``ListAdapter.registration``):
    # such a source may name its ``public_url``, which the check compares.
    registration: bool = False
    # Whether its adapter fetches an event's object (``ListAdapter.fetch_object``), for
    # a source with ``[sources.order] fetch = true``.
    objects: bool = False

    def settle_for(self, settings: ReconcileConfig) -> float:
        """The settle window of a source with these ``settings``, in seconds."""
        return self.settle_s if settings.settle_s is None else settings.settle_s


# An event name a registration check expects: GitHub's ("pull_request"), Stripe's
# ("invoice.paid", "invoice.*" is not one), or "*".
EVENT_NAME = re.compile(r"\*|[a-z0-9_]+(\.[a-z0-9_]+)*")


def event_names(value: tuple[str, ...]) -> tuple[str, ...]:
    """``expect_events`` as written, each checked (a validator's body)."""
    for name in value:
        if not EVENT_NAME.fullmatch(name):
            raise ValueError(f"{name!r} is not an event name (lower case, digits, _ and .)")
    return value


# ``expect_events``: the events a registration must send, each name checked.
EventNames = Annotated[tuple[str, ...], AfterValidator(event_names)]


def matching(pattern: str, refusal: str) -> AfterValidator:
    """A check of an optional text key: unset, or all of it matches ``pattern``; else
    ``refusal``."""

    def check(value: str | None) -> str | None:
        if value is not None and not re.fullmatch(pattern, value):
            raise ValueError(refusal)
        return value

    return AfterValidator(check)


def key_order(models: Sequence[type[ReconcileConfig]]) -> list[str]:
    """Every key of the ``models``' tables, in the order their errors are reported: the
    shared keys, each provider's own (in the order of ``models``), the schedule's."""
    shared = list(ReconcileConfig.model_fields)
    order = [key for key in shared if key not in SCHEDULE_KEYS]
    for model in models:
        order += [key for key in model.model_fields if key not in shared and key not in order]
    return order + [key for key in shared if key in SCHEDULE_KEYS]


ModelT = TypeVar("ModelT", bound=ReconcileConfig)


def _validated(
    model: type[ModelT], values: Mapping[str, Any]
) -> tuple[ModelT | None, list[ErrorDetails]]:
    """``values`` as ``model``, or None and why not."""
    try:
        return model.model_validate(values), []
    except ValidationError as exc:
        return None, exc.errors()


def _keys_first(errors: list[ErrorDetails]) -> list[ErrorDetails]:
    """The errors of the keys; a check of the whole table (the interval bounds) counts
    only once every key passed."""
    return [e for e in errors if e["loc"]] or errors


def _others_errors(
    values: Mapping[str, Any], models: Sequence[type[ReconcileConfig]]
) -> list[ErrorDetails]:
    """The errors of ``values``, each key checked by the first of ``models`` that takes it."""
    left = dict(values)
    errors: list[ErrorDetails] = []
    for model in models:
        taken = {k: v for k, v in left.items() if k in model.model_fields}
        for key in taken:
            del left[key]
        if taken:
            errors += model.value_errors(taken)
    return errors


def _ordered(title: str, errors: Sequence[ErrorDetails], order: Sequence[str]) -> ValidationError:
    """One ``ValidationError`` of ``errors``, the table's own first, then by key in
    ``order`` (a key in no model's last)."""
    place = {key: i for i, key in enumerate(order)}
    ranked = sorted(
        errors, key=lambda e: place.get(str(e["loc"][0]), len(place)) if e["loc"] else -1
    )
    # The context too: hookd words its errors from it (hookd.errors.validation_problem).
    details: list[InitErrorDetails] = [
        {
            "type": PydanticCustomError(e["type"], e["msg"], e.get("ctx")),
            "loc": e["loc"],
            "input": e["input"],
        }
        for e in ranked
    ]
    return ValidationError.from_exception_data(title, details)
